"""Options and arguments that name a file or folder take a name, never another option.

An option's value is the next word, whatever it is: `host --nfd --cdi -` once wrote the NFD
labels to a file named `--cdi`. Each such option is found here from the CLI itself (a `Path`
type, a FILE/DIR metavar, or help that says "a file" or "folder"), must carry the check of
`builder.cli.paths` (or be `--trust-key`, read by `builder.cli.trust_key`), and is run (in-process)
with `--bogus-name` as its value in an empty folder: exit 2, the refusal, nothing written. A few
runs through the installed entry point show what a user sees.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator, List, Tuple

import click
import pytest
import typer.main
from typer.testing import CliRunner

from builder import cli
from builder.errors import UserError
from tests.support.matrix import run_cli

BOGUS = "--bogus-name"
_SAYS_FILE = re.compile(r"\b(a|this) file\b|\bfolder\b", re.IGNORECASE)
# what a required parameter other than the one under test is given (nothing is read: the refusal comes first)
FILLERS = {"--registry": "127.0.0.1:1", "--out": "site", "--npus": "1", "--images": "x/*", "--table": "table.md", "--key": "team.pub",
           "ref": "127.0.0.1:1/r:t", "image_ref": "127.0.0.1:1/r:t", "version": "2.4.0", "output_dir": "out",
           "folder": "keys", "--mirror": "http://127.0.0.1:2", "source": "127.0.0.1:1/r",
           "destination": "oci:carry"}


def _commands(command, path: Tuple[str, ...] = ()) -> Iterator[Tuple[Tuple[str, ...], click.Command]]:
    subcommands = getattr(command, "commands", None)
    if subcommands:
        for name, sub in sorted(subcommands.items()):
            yield from _commands(sub, path + (name,))
    else:
        yield path, command


def _names_a_file(param) -> bool:
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    if annotation is bool:  # a flag takes no value
        return False
    return (annotation is Path or any(m in (param.metavar or "") for m in ("FILE", "DIR"))
            or bool(_SAYS_FILE.search(getattr(param, "help", None) or "")))


def _file_params() -> List[Tuple[Tuple[str, ...], click.Command, click.Parameter]]:
    return [(path, command, param) for path, command in _commands(typer.main.get_command(cli.app))
            for param in command.params if _names_a_file(param)]


FILE_PARAMS = _file_params()


def _flag(param) -> str:
    return max(param.opts, key=len) if param.opts[0].startswith("-") else param.metavar or param.name.upper()


def _check_of(param):
    """The `builder.cli.paths` check behind ``param``'s callback (typer wraps it), or None."""
    wrapped = getattr(param.callback, "__wrapped__", None)
    return wrapped if getattr(wrapped, "names", None) else None


def test_the_options_naming_files_are_found():
    """The search finds what it is for (a search finding nothing would pass every test below)."""
    found = {(" ".join(path), _flag(param)) for path, _, param in FILE_PARAMS}
    assert {("host", "--nfd"), ("host", "--cdi"), ("render", "--out"), ("image", "--matrix"), ("image", "--state-dir"),
            ("image", "--sign-key"), ("image", "--conda-installer"), ("image", "--wheelhouse"), ("run", "--trust-key"),
            ("pull", "--trust-key"), ("index", "--trust-key"), ("k8s job", "--trust-key"), ("k8s job", "--nodes"),
            ("verify", "--key"), ("policy kyverno", "--key"), ("keys generate", "DIR"), ("record", "OUTPUT_DIR"),
            ("releases cann", "--table"), ("releases cann", "--out"), ("ci-matrix", "--runners")} <= found
    assert len(found) >= 40


@pytest.mark.parametrize("path,command,param", FILE_PARAMS,
                         ids=[f"{' '.join(p)} {_flag(x)}" for p, _, x in FILE_PARAMS])
def test_every_option_naming_a_file_carries_the_check(path, command, param):
    assert _check_of(param) is not None or param.opts == ["--trust-key"], (
        f"{' '.join(path)} {_flag(param)} names a file but has no callback=paths.FILE/FOLDER/...: "
        "declare it with one (builder/cli/paths.py)")


@pytest.mark.parametrize("path,command,param", FILE_PARAMS,
                         ids=[f"{' '.join(p)} {_flag(x)}" for p, _, x in FILE_PARAMS])
def test_a_value_like_an_option_is_refused_and_nothing_is_written(path, command, param, tmp_path, monkeypatch):
    args: List[str] = list(path)
    for other in command.params:
        if other.required and other is not param and other.opts[0].startswith("-"):
            args += [other.opts[0], FILLERS[other.opts[0]]]
    flag = _flag(param)
    if param.opts[0].startswith("-"):
        args += [flag, BOGUS]
    # the arguments in their declared order, the one under test in its own place (after --)
    positional = [other for other in command.params if not other.opts[0].startswith("-")
                  and (other.required or other is param)]
    values = [BOGUS if other is param else FILLERS[str(other.name)] for other in positional]
    args += (["--"] if BOGUS in values else []) + values
    what = _check_of(param).names if _check_of(param) else "file"
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(cli.app, args)
    said = str(done.exception) if isinstance(done.exception, UserError) else done.stderr  # `main` prints a UserError
    code = done.exception.exit_code if isinstance(done.exception, UserError) else done.exit_code
    assert code == 2, (done.output, done.exception)
    assert f"{flag} takes a {what} name, got '{BOGUS}' (an option?): give the {what}" in said
    assert done.stdout == ""
    assert list(tmp_path.iterdir()) == []  # no file named like an option, nor anything else


def test_host_nfd_does_not_take_cdi_for_its_file(tmp_path):
    root, cwd = tmp_path / "node", tmp_path / "cwd"  # an empty root: a node with nothing found
    root.mkdir()
    cwd.mkdir()
    done = run_cli("host", "--root", root, "--nfd", "--cdi", "-", cwd=cwd)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.endswith("Error: --nfd takes a file name, got '--cdi' (an option?): give the file, "
                                "or '-' for standard output\n"), done.stderr
    assert list(cwd.iterdir()) == []
    # '-' itself still means standard output
    printed = run_cli("host", "--root", root, "--nfd", "-", cwd=cwd)
    assert printed.returncode == 0 and "ascend-build.io/npu.count=0\n" in printed.stdout
    assert list(cwd.iterdir()) == []


def test_a_dash_is_refused_where_it_means_nothing(tmp_path):
    done = run_cli("render", "--out", "-", cwd=tmp_path)
    assert done.returncode == 2
    assert ("--out takes a folder name, got '-' (standard input or output, which --out does not take): "
            "give the folder") in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_value_from_the_environment_is_named_by_its_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("ASCEND_BUILD_COMPAT_TABLE", "--release-notes")
    done = run_cli("releases", "cann", cwd=tmp_path)
    assert done.returncode == 2
    assert ("$ASCEND_BUILD_COMPAT_TABLE (--table) takes a URL or file name, got '--release-notes' (an option?): "
            "give the URL or file") in done.stderr


def test_the_conda_installer_must_be_a_file_there(tmp_path):
    missing = run_cli("image", "--conda-installer", "Miniforge3.sh", cwd=tmp_path)
    assert missing.returncode == 2 and "--conda-installer: 'Miniforge3.sh' is no file (nothing is there)" in missing.stderr
    folder = run_cli("image", "--conda-installer", tmp_path, cwd=tmp_path)
    assert folder.returncode == 2 and f"--conda-installer: '{tmp_path}' is no file (it is a folder)" in folder.stderr
