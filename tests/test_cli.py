"""The `ascend-build` command line: exit codes (0 clean, 1 findings, 2 usage), what it
prints, and the help of every command.

Exit-code tests go through the installed entry point in a subprocess (its real
`main`, which turns a UserError into a message and no traceback); the rest use
typer's CliRunner in-process.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil

import pytest
import typer.main
from typer.testing import CliRunner

from builder import cli
from builder.images import conda_lock, lock, matrix, render
from tests.support import locks
from tests.support.matrix import SHIPPED_DOCKERFILES, SHIPPED_MATRIX, VALID, run_cli, write_cells

runner = CliRunner()


# --- exit codes ------------------------------------------------------------------------------


def test_clean_matrix_exits_0(tmp_path):
    # the aarch64 twin of VALID: its shipped lock has every pip entry's sha256 (x86_64's lacks torch's), and
    # its conda part is incomplete (no conda channel answers here): completed, as `lock` writes it where one does
    path, _ = write_cells(tmp_path, dict(VALID, arch="aarch64"))
    cell_id = "cann8.0.rc3-910b-ubuntu22.04-py3.10-torch_npu2.4.0-aarch64"
    shipped = locks.read(SHIPPED_DOCKERFILES / cell_id)
    warned = run_cli("validate", "--matrix", path, "--out", SHIPPED_DOCKERFILES)  # the shipped locks
    assert warned.returncode == 0 and "lock-incomplete" in warned.stderr and "the conda part (the conda channel" in warned.stderr
    (tmp_path / "out" / cell_id).mkdir(parents=True)
    (tmp_path / "out" / cell_id / lock.LOCK_FILE).write_text(dataclasses.replace(shipped, conda=conda_lock.Part(
        conda_lock.DEFAULT_CHANNEL, (conda_lock.Package("python", "3.10.14", "h0_cpython",
                                                        "linux-aarch64/python-3.10.14-h0_cpython.conda", "1" * 64),))).text())
    result = run_cli("validate", "--matrix", path, "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"1 cells valid (0 warning(s)) in {path}\n"
    assert result.stderr == ""


def test_bad_option_exits_2():
    result = run_cli("validate", "--bogus")
    assert result.returncode == 2
    assert "No such option: --bogus" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_matrix_file_exits_2_naming_the_path(tmp_path):
    missing = tmp_path / "nowhere" / "matrix.yaml"
    result = run_cli("validate", "--matrix", missing)
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: matrix file not found: {missing}\n  fix: ")
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_yaml_syntax_error_exits_2_with_its_place(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("cells:\n  - cann: 8.0.RC3\n   python: \"3.10\"\n")
    result = run_cli("render", "--matrix", bad, "--out", tmp_path / "out")
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {bad}:3:4: YAML syntax error")
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_schema_findings_exit_1(tmp_path):
    path, lines = write_cells(tmp_path, VALID, dict(VALID, os="ubuntu2204"))
    result = run_cli("validate", "--matrix", path)
    assert result.returncode == 1
    assert result.stderr.startswith(f"{path}:{lines[(1, 'os')]}:9: error: schema-value [cells[1].os]: "
                                    "cells[1].os = 'ubuntu2204' is not one of: ")
    assert result.stderr.endswith(f"1 error(s) in {path}\n")
    assert "Traceback" not in result.stderr


def test_rule_findings_exit_1(tmp_path):
    path, lines = write_cells(tmp_path, dict(VALID, python="3.7"))
    result = run_cli("validate", "--matrix", path)
    assert result.returncode == 1
    assert result.stderr == (
        f"{path}:{lines[(0, 'python')]}:13: error: python-no-wheel [cells[0].python]: "
        "torch_npu 2.4.0 has no wheel for Python 3.7 on x86_64\n"
        "  fix: use Python 3.8 or 3.9 or 3.10 or 3.11\n"
        f"1 error(s) in {path}\n")
    assert result.stdout == ""


# --- validate on the shipped matrix with the mission's mistake -----------------------------


def test_validate_catches_torch_npu_2_1_0_post5(tmp_path):
    text = SHIPPED_MATRIX.read_text()
    assert text.count("torch_npu: 2.1.0rc1\n") == 1
    bad = tmp_path / "default.yaml"
    bad.write_text(text.replace("torch_npu: 2.1.0rc1\n", "torch_npu: 2.1.0.post5\n"))
    line = text[: text.index("torch_npu: 2.1.0rc1\n")].count("\n") + 1
    column = len(text.splitlines()[line - 1]) - len("2.1.0rc1") + 1

    result = run_cli("validate", "--matrix", bad)

    assert result.returncode == 1
    # the cell expands to two arches; the finding at the one torch_npu line is said once
    expected = (f"{bad}:{line}:{column}: error: torch-npu-unpublished [cells[0].torch_npu]: "
                "torch_npu 2.1.0.post5 was never published on PyPI\n"
                "  fix: for CANN 7.0.RC1 use 2.1.0rc1\n")
    assert result.stderr.count(expected) == 1
    assert f"1 error(s) in {bad}" in result.stderr
    assert "Traceback" not in result.stderr


# --- list -------------------------------------------------------------------------------------


def test_list_json(tmp_path):
    shutil.copy(SHIPPED_MATRIX, tmp_path / "default.yaml")
    result = runner.invoke(cli.app, ["list", "--json", "--matrix", str(tmp_path / "default.yaml"),
                                     "--out", str(SHIPPED_DOCKERFILES)])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    cells = matrix.load(tmp_path / "default.yaml").cells
    assert [r["id"] for r in rows] == [c.id for c in cells]
    for row, cell in zip(rows, cells):
        assert row["ref"] == f"ascend-build/pytorch:{cell.id}"
        assert row["content_hash"] == render.content_hash(cell, lock.read(SHIPPED_DOCKERFILES / cell.id))
        assert re.fullmatch(r"[0-9a-f]{16}", row["content_hash"])
    first = rows[0]
    assert {k: first[k] for k in ("cann", "chip", "arch", "os", "python", "torch", "torch_npu", "driver", "firmware")} == {
        "cann": "7.0.RC1", "chip": "910b", "arch": "aarch64", "os": "ubuntu22.04", "python": "3.9",
        "torch": "2.1.0", "torch_npu": "2.1.0rc1", "driver": "23.0.RC3", "firmware": "6.4.0.4.220"}
    assert len({r["content_hash"] for r in rows}) == len(rows)


def test_list_text(tmp_path):
    path, _ = write_cells(tmp_path, dict(VALID, name="one"))
    result = runner.invoke(cli.app, ["list", "--matrix", str(path)])
    assert result.exit_code == 0
    cell = matrix.load(path).cells[0]
    assert result.stdout == f"ascend-build/pytorch:one  {render.content_hash(cell)}\n"


# --- kb ---------------------------------------------------------------------------------------


def test_kb_torch_npu():
    result = runner.invoke(cli.app, ["kb", "torch-npu", "2.4.0"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    for line in ("version: 2.4.0",
                 "torch:",
                 "  x86_64: requirement=torch==2.4.0+cpu; index=pytorch-cpu",
                 "  aarch64: requirement=torch==2.4.0; index=pypi",
                 "cann: 8.0.RC3",
                 "python:",
                 "  x86_64: 3.8, 3.9, 3.10, 3.11",
                 "  aarch64: 3.8, 3.9, 3.10, 3.11"):
        assert line in lines


def test_kb_torch_npu_json():
    result = runner.invoke(cli.app, ["kb", "torch-npu", "2.1.0rc1", "--json"])
    data = json.loads(result.stdout)
    assert (data["cann"], data["torch"]["x86_64"]["requirement"], data["python"]["x86_64"]) == \
        ("7.0.RC1", "torch==2.1.0+cpu", ["3.8", "3.9", "3.10"])


def test_kb_torch_npu_unknown_exits_1():
    result = run_cli("kb", "torch-npu", "2.1.0.post5")
    assert result.returncode == 1
    assert result.stderr.startswith("error: torch_npu 2.1.0.post5 is not a known release")
    assert "Traceback" not in result.stderr


def test_kb_cann():
    result = runner.invoke(cli.app, ["kb", "cann", "7.0.RC1"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    for line in ("version: 7.0.RC1", "paired_hdk: 23.0.RC3", "min_driver: 23.0.RC3", "torch_npu: 2.1.0rc1"):
        assert line in lines
    row = next(line.split() for line in lines if "Ascend-cann-kernels-910b_7.0.RC1_linux.zip" in line)
    assert row == ["ops", "910b", "Ascend-cann-kernels-910b_7.0.RC1_linux.zip", "e7e12c493c3580f4..."]


def test_kb_cann_lists_releases():
    result = runner.invoke(cli.app, ["kb", "cann", "--json"])
    releases = json.loads(result.stdout)["cann_releases"]
    assert releases.index("8.0.RC3") < releases.index("8.0.0") < releases.index("8.5.0")
    assert "8.4.0" not in releases


# --- help -------------------------------------------------------------------------------------


def _commands(group, path=()):
    for name, command in sorted(group.commands.items()):
        if hasattr(command, "commands"):
            yield from _commands(command, path + (name,))
        else:
            yield path + (name,)


COMMANDS = list(_commands(typer.main.get_command(cli.app)))


def test_the_documented_commands_exist():
    assert {("validate",), ("render",), ("list",), ("kb", "torch-npu"), ("kb", "cann")} <= set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_shows_an_example(command):
    result = runner.invoke(cli.app, [*command, "--help"])
    assert result.exit_code == 0
    examples = [line.strip() for line in result.stdout.splitlines() if line.strip().startswith("Example:")]
    assert examples, result.stdout
    assert examples[0].startswith(f"Example: ascend-build {' '.join(command)}")
