"""The conventions of a Python CLI, held: the license file, --version, shell completion, JSON on
every path of a --json command, and the package as a team installs it (scripts/wheel-check.sh:
the sdist and wheel built, checked, installed into a clean venv and run from an empty folder)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from builder.cli import json_errors
from tests.support.matrix import cli_exe, run_cli

REPO = Path(__file__).resolve().parent.parent
# https://www.apache.org/licenses/LICENSE-2.0.txt, byte for byte (11358 bytes)
APACHE_2_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def test_the_license_is_the_unmodified_apache_2_text_the_metadata_declares():
    assert hashlib.sha256((REPO / "LICENSE").read_bytes()).hexdigest() == APACHE_2_SHA256
    assert metadata.metadata("ascend-build")["License-Expression"] == "Apache-2.0"
    assert 'license-files = ["LICENSE"]' in (REPO / "pyproject.toml").read_text()


def test_version_prints_the_installed_version():
    done = run_cli("--version")
    assert done.returncode == 0 and done.stdout == f"ascend-build {metadata.version('ascend-build')}\n"


@pytest.mark.parametrize("shell, env, expected", [
    ("bash", {"COMP_WORDS": "ascend-build val", "COMP_CWORD": "1"}, "validate"),
    ("zsh", {"_TYPER_COMPLETE_ARGS": "ascend-build kb c"}, '"cann":'),
    ("fish", {"_TYPER_COMPLETE_ARGS": "ascend-build rel", "_TYPER_COMPLETE_FISH_ACTION": "get-args"}, "releases\t"),
])
def test_completion_answers_in_each_shell(shell, env, expected):
    done = subprocess.run(cli_exe(), env=dict(os.environ, _ASCEND_BUILD_COMPLETE=f"complete_{shell}", **env),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and expected in done.stdout, done.stdout + done.stderr
    # the shell named, not guessed from the parent process (typer's switch for that; under `make`'s sh
    # a guess says "Shell sh not supported")
    script = subprocess.run([*cli_exe(), "--show-completion", shell], capture_output=True, text=True, timeout=60,
                            env=dict(os.environ, _TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION="1"))
    assert script.returncode == 0 and "_ASCEND_BUILD_COMPLETE" in script.stdout


# --- --json: JSON on stdout on every path --------------------------------------------------------


@pytest.mark.parametrize("args, error", [
    (["list", "--json"], "no matrix/ in"),                                      # a UserError
    (["verify", "r:5000/a:b", "--key", "missing.pub", "--json"], "cannot read the public key"),
    (["list", "--json", "--no-such-option"], "No such option: --no-such-option"),  # click's usage error
    (["kb", "torch-npu", "0.0.1", "--json"], "0.0.1"),
    (["host", "--json", "--root", "no-such-root"], None),                         # a result, not an error
])
def test_every_json_command_prints_json_on_stdout_whatever_happens(tmp_path, args, error):
    done = run_cli(*args, cwd=tmp_path)
    printed = json.loads(done.stdout)
    if error is None:
        assert done.returncode == 0 and isinstance(printed, dict) and "error" not in printed
        return
    assert done.returncode != 0 and printed["exit_code"] == done.returncode
    assert error in printed["error"], printed
    assert error in done.stderr  # and stderr says it as it does without --json


def test_explain_json_of_an_unknown_message_prints_an_empty_list():
    done = run_cli("explain", "--json", "nothing Ascend ever printed")
    assert done.returncode == 1 and json.loads(done.stdout) == []
    assert "no known Ascend error in that text" in done.stderr


def test_without_json_an_error_prints_nothing_on_stdout(tmp_path):
    done = run_cli("list", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == "" and "no matrix/ in" in done.stderr


def test_json_after_the_double_dash_is_another_programs():
    assert json_errors.wanted(["k8s", "job", "--", "torchrun", "--json"]) is False
    assert json_errors.wanted(["pull", "--json", "--", "x"]) is True


# --- the package as a team installs it -------------------------------------------------------------


@pytest.mark.index
def test_the_wheel_installs_into_a_clean_venv_and_works_from_an_empty_folder():
    """scripts/wheel-check.sh, as the release workflow runs it: it fails on any step (--version,
    init ., validate, lock, render, render --check, lock --check) and on any file written outside
    the project folder (the venv's site-packages included). lock resolves against the package index."""
    done = subprocess.run(["bash", str(REPO / "scripts" / "wheel-check.sh")], cwd=REPO, capture_output=True, text=True,
                          env=dict(os.environ, PYTHON=sys.executable), timeout=1200)
    assert done.returncode == 0, done.stderr[-6000:]
    assert (f"wheel-check: ok: ascend-build {metadata.version('ascend-build')}; init, validate, lock and render from "
            "an empty folder wrote 3 cells and nothing outside it") in done.stderr
