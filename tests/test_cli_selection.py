"""A team's own matrix, as a first day goes (issue 26): `lock`/`image` on the valid cells
while another cell is refused, fix lines that work when pasted, case-aware suggestions,
the selection's message about other arches, and `min_driver` (the old `driver:` key)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from builder import commands
from builder.images import matrix
from tests.support.matrix import REPO, VALID, run_cli, write_cells

VALID_X86 = "cann8.0.rc3-910b-ubuntu22.04-py3.10-torch_npu2.4.0-x86_64"
VALID_ARM = "cann8.0.rc3-910b-ubuntu22.04-py3.10-torch_npu2.4.0-aarch64"
REFUSED = "cann8.5.0-910b-ubuntu22.04-py3.11-torch_npu2.8.0.post2-aarch64"


def team_matrix(tmp_path: Path) -> Path:
    """Two valid cells (both arches of 8.0.RC3) and one a team-wide min_driver makes impossible."""
    path, _ = write_cells(tmp_path, dict(VALID, arch=["aarch64", "x86_64"]),
                          dict(VALID, arch="aarch64", cann="8.5.0", python="3.11", torch_npu="2.8.0.post2"),
                          defaults={"min_driver": "24.1.RC3"}, name="team.yaml")
    return path


def test_lock_works_on_a_valid_cell_while_another_is_refused(tmp_path):
    path, out = team_matrix(tmp_path), tmp_path / "out"
    result = run_cli("lock", "--check", "--matrix", path, "--out", out, "--cell", VALID_X86)
    # not refused: the chosen cell is checked (it has no lock yet), the refused one only named
    assert f"missing    {VALID_X86}: no lock" in result.stdout
    assert f"warning: 1 other cell(s) of the matrix are refused and left out: {REFUSED}\n" in result.stderr
    assert "driver-too-old" not in result.stderr and "error(s) in" not in result.stderr


def test_lock_of_the_refused_cell_itself_is_refused(tmp_path):
    path = team_matrix(tmp_path)
    result = run_cli("lock", "--check", "--matrix", path, "--out", tmp_path / "out", "--cell", REFUSED)
    assert result.returncode == 1
    assert "error: driver-too-old [defaults.min_driver]" in result.stderr
    assert result.stderr.endswith(f"1 error(s) in {path}\n") and result.stdout == ""


def test_render_stays_all_or_nothing(tmp_path):
    path, out = team_matrix(tmp_path), tmp_path / "out"
    result = run_cli("render", "--matrix", path, "--out", out)
    assert result.returncode == 1 and "driver-too-old" in result.stderr
    assert not out.exists()


def test_lock_without_a_selection_is_refused_by_any_refused_cell(tmp_path):
    path = team_matrix(tmp_path)
    result = run_cli("lock", "--check", "--matrix", path, "--out", tmp_path / "out")
    assert result.returncode == 1 and "1 error(s) in" in result.stderr and result.stdout == ""


def test_a_selected_cell_sharing_a_tag_with_an_unselected_one_is_refused(tmp_path):
    path, _ = write_cells(tmp_path, dict(VALID, name="same"), dict(VALID, name="same", arch="aarch64"),
                          dict(VALID, cann="8.5.0", python="3.11", torch_npu="2.8.0.post2", min_driver="24.1.RC3"))
    result = run_cli("lock", "--check", "--matrix", path, "--out", tmp_path / "out", "--cell", "same")
    assert result.returncode == 1 and "duplicate-tag" in result.stderr


# --- fix lines that work when pasted ---------------------------------------------------------


def test_lock_missing_suggests_the_users_matrix_out_and_cell_and_the_line_works_pasted(tmp_path):
    path, _ = write_cells(tmp_path, dict(VALID, arch="aarch64"), name="team matrix.yaml")
    out = tmp_path / "team out"
    result = run_cli("validate", "--matrix", path, "--out", out)
    assert result.returncode == 0, result.stderr
    fix = re.search(r"lock-missing .*\n  fix: run `([^`]+)`", result.stderr)
    assert fix, result.stderr
    words = shlex.split(fix.group(1))
    assert words == ["ascend-build", "lock", "--matrix", str(path), "--out", str(out), "--cell", VALID_ARM]
    pasted = run_cli(*words[1:], "--check")  # the very command, checked: it targets the user's cell
    assert f"missing    {VALID_ARM}: no lock" in pasted.stdout, pasted.stderr


def test_lock_check_fix_carries_the_flags(tmp_path):
    path, _ = write_cells(tmp_path, dict(VALID, arch="aarch64"))
    result = run_cli("lock", "--check", "--matrix", path, "--out", tmp_path / "o")
    assert result.stderr.endswith(f"fix: run `ascend-build lock --matrix {path} --out {tmp_path / 'o'}` "
                                  f"(without --check) and commit {tmp_path / 'o'}\n")


def test_render_check_fix_carries_the_flags(tmp_path):
    path, _ = write_cells(tmp_path, dict(VALID, arch="aarch64"))
    result = run_cli("render", "--check", "--matrix", path, "--out", tmp_path / "o")
    assert result.returncode == 1
    assert f"run `ascend-build render --matrix {path} --out {tmp_path / 'o'}` and commit" in result.stderr


def test_no_fix_line_names_a_matrix_command_bare():
    """Every fix line that suggests a matrix command builds it with `commands.suggest` (so it carries
    the user's flags): no literal "run `ascend-build lock" is left in the source. The Dockerfile's
    comments (plan.py, blocks/header.py) are rendered and committed, and a conda part's reason is written into the lock
    (conda_lock.py), so those name no user's flags on purpose."""
    bare = re.compile(r"run `ascend-build (lock|render|validate|list|image)\b")
    found = [f"{p.relative_to(REPO)}:{n}" for p in sorted((REPO / "builder").rglob("*.py")) if p.name != "commands.py"
             for n, line in enumerate(p.read_text().splitlines(), 1) if bare.search(line)]
    persisted = {"builder/images/plan.py": "The cell's lock is", "builder/images/conda_lock.py": "with a current indexer",
                 "builder/images/blocks/header.py": "Change the matrix or builder/templates/"}
    assert sorted(found) == sorted(f"{path}:{n}" for path, text in persisted.items()
                                   for n, line in enumerate((REPO / path).read_text().splitlines(), 1) if text in line)


def test_suggest_quotes_and_forgets_the_flags_after_the_block():
    with commands.given(matrix="my matrix.yaml", out=None):
        assert commands.suggest("lock", cell="c") == "`ascend-build lock --matrix 'my matrix.yaml' --cell c`"
        assert commands.suggest("kb") == "`ascend-build kb`"  # kb reads no matrix
    assert commands.suggest("lock") == "`ascend-build lock`"


# --- case-aware suggestions -----------------------------------------------------------------


def test_an_upper_case_chip_is_told_its_lower_case_name(tmp_path):
    path, _ = write_cells(tmp_path, dict(VALID, chip="910B"))
    findings = matrix.load(path).findings
    assert [f.fix for f in findings] == ["did you mean '910b'? use one of the listed values"]


# --- the selection and other arches ---------------------------------------------------------


@pytest.mark.engine
def test_image_goes_on_with_a_valid_cell_of_another_arch_while_another_cell_is_refused(tmp_path, engine):
    """`--cell` names its arch (no --arch needed for an aarch64 cell on an x86_64 host), and the refused
    cell does not stop it: it gets as far as the lock (missing here), refused before anything is
    built, with a fix carrying the flags."""
    path, out = team_matrix(tmp_path), tmp_path / "o"
    result = run_cli("image", "--matrix", path, "--out", out, "--cell", VALID_ARM, "--variant", "cpu",
                     "--state-dir", tmp_path / "state", "--json")
    assert result.returncode == 1
    assert f"warning: 1 other cell(s) of the matrix are refused and left out: {REFUSED}" in result.stderr
    assert (f"{VALID_ARM} has no lock in {out}" in result.stderr
            and f"fix: run `ascend-build lock --matrix {path} --out {out} --cell {VALID_ARM}`" in result.stderr)


def test_image_of_a_cell_that_is_not_there_says_nothing_of_needing_a_host(tmp_path):
    path = team_matrix(tmp_path)
    result = run_cli("image", "--matrix", path, "--out", tmp_path / "o", "--cell", "nope")
    assert result.returncode == 1
    assert "needs such a host" not in result.stderr
    assert "no cell of the matrix matches the selection" in result.stderr
    assert f"`ascend-build list --matrix {path} --out {tmp_path / 'o'}`" in result.stderr  # list reads --out too


def test_a_selection_only_on_another_arch_says_qemu_builds_it(tmp_path):
    path, _ = write_cells(tmp_path, dict(VALID, arch="aarch64" if _host() == "x86_64" else "x86_64"))
    result = run_cli("image", "--matrix", path, "--cann", "8.0.RC3")
    assert result.returncode == 1
    assert "needs such a host" not in result.stderr
    assert "another arch is built and smoke-tested under qemu on this host" in result.stderr


def _host() -> str:
    from builder.cli.app import host_arch

    return host_arch()


# --- min_driver ---------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["min_driver", "driver"])
def test_min_driver_and_its_old_name_give_the_same_cell(tmp_path, key):
    path, _ = write_cells(tmp_path, dict(VALID, **{key: "25.0.RC1"}))
    loaded = matrix.load(path)
    assert loaded.cells[0].driver == "25.0.RC1"
    assert [f.rule for f in loaded.findings] == ([] if key == "min_driver" else ["driver-key-renamed"])


def test_the_shipped_matrix_uses_min_driver():
    assert "\n    driver:" not in (REPO / "matrix" / "default.yaml").read_text()
    assert [f.rule for f in matrix.load(REPO / "matrix" / "default.yaml").findings] == []


# --- a team's own matrix never touches the shipped dockerfiles/ (issue 32) -----------------------


def _checkout(tmp_path: Path) -> Path:
    """A project (./matrix and ./dockerfiles are the defaults),
    with one rendered cell, and a team's matrix under team/."""
    (tmp_path / "matrix").mkdir()
    write_cells(tmp_path / "matrix", VALID, name="default.yaml")
    assert run_cli("render", cwd=tmp_path).returncode == 0
    (tmp_path / "team").mkdir()
    write_cells(tmp_path / "team", dict(VALID, arch="aarch64"), name="team.yaml")
    return tmp_path


def _tree(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_render_of_another_matrix_without_out_writes_beside_it_and_says_so(tmp_path):
    root = _checkout(tmp_path)
    before = _tree(root / "dockerfiles")
    assert VALID_X86 in {p.split("/")[0] for p in before}
    result = run_cli("render", "--matrix", "team/team.yaml", cwd=root)
    assert result.returncode == 0, result.stderr
    assert _tree(root / "dockerfiles") == before  # the shipped cell is still there, unchanged
    assert (root / "team" / "dockerfiles" / VALID_ARM / "Dockerfile").is_file()
    assert ("note: --matrix team/team.yaml is not the default matrix (./matrix/): its rendered cells and locks are "
            "in team/dockerfiles") in result.stderr
    # the fix lines of the same run carry the derived --out
    check = run_cli("lock", "--check", "--matrix", "team/team.yaml", cwd=root)
    assert "fix: run `ascend-build lock --matrix team/team.yaml --out team/dockerfiles`" in check.stderr


@pytest.mark.parametrize("command", ["render", "lock"])
def test_another_matrix_into_the_shipped_dockerfiles_is_refused(tmp_path, command):
    root = _checkout(tmp_path)
    before = _tree(root / "dockerfiles")
    (root / "mine.yaml").write_text((root / "team" / "team.yaml").read_text())
    for args in (["--matrix", "team/team.yaml", "--out", "dockerfiles"], ["--matrix", "mine.yaml"]):
        result = run_cli(command, *args, cwd=root)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert "is not the default matrix (./matrix/)" in result.stderr and "nothing was written" in result.stderr
        assert "give --out a folder of your own" in result.stderr
    assert _tree(root / "dockerfiles") == before


def test_the_shipped_matrix_by_file_still_renders_into_dockerfiles(tmp_path):
    root = _checkout(tmp_path)
    result = run_cli("render", "--check", "--matrix", "matrix/default.yaml", cwd=root)
    assert result.returncode == 0, result.stderr
    assert "not the default matrix" not in result.stderr


def test_a_team_folder_renders_again_into_its_own_dockerfiles(tmp_path):
    """A first day from an empty folder: matrix.yaml, then dockerfiles/ beside it; the second
    render is not refused (the folder's dockerfiles/ is not the shipped one) and changes nothing."""
    write_cells(tmp_path, VALID, name="matrix.yaml")
    first = run_cli("render", "--matrix", "matrix.yaml", cwd=tmp_path)
    second = run_cli("render", "--matrix", "matrix.yaml", cwd=tmp_path)
    assert first.returncode == 0 and second.returncode == 0, second.stderr
    assert second.stdout == "rendered 1 cells into dockerfiles (0 path(s) changed)\n"
    assert (tmp_path / "dockerfiles" / VALID_X86 / "Dockerfile").is_file()
