"""`builder.images.ci_matrix`: which cells CI rebuilds, judged against REF's committed dockerfiles/.

Each test builds a throwaway git repository the way the real one is made: the
shipped matrix copied in, `ascend-build render --matrix ... --out ...` run, the
result committed. "Now" is a fresh in-process render of the (possibly edited)
temporary matrix, exactly what `ascend-build ci-matrix` compares.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from builder.images import blocks, ci_matrix, matrix, plan, render
from builder.errors import UserError

REPO = Path(__file__).resolve().parents[2]
SHIPPED_MATRIX = REPO / "matrix"
DEBIAN = "cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64"


def _cli() -> List[str]:
    exe = Path(sys.executable).with_name("ascend-build")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "builder.cli"]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def cli_render(repo: Path) -> None:
    proc = subprocess.run(_cli() + ["render", "--matrix", str(repo / "matrix"), "--out", str(repo / "dockerfiles")],
                          cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def cells_of(repo: Path) -> List[matrix.Cell]:
    loaded = matrix.load(repo / "matrix")
    assert not loaded.findings, [str(f) for f in loaded.findings]
    return loaded.cells


def now(repo: Path, since: str, **kw) -> List[dict]:
    """Entries for the current state of the temporary matrix against REF ``since``."""
    cells = cells_of(repo)
    return ci_matrix.entries(cells, render.render_all(cells), since=since, repo=repo, **kw)


def ids(rows: List[dict]) -> List[str]:
    return [r["id"] for r in rows]


@pytest.fixture(scope="session")
def pristine(tmp_path_factory) -> Path:
    """A git repository whose HEAD holds the shipped matrix and its rendered dockerfiles/,
    made once by the real CLI; each test works on its own copy."""
    root = tmp_path_factory.mktemp("pristine") / "repo"
    root.mkdir()
    shutil.copytree(SHIPPED_MATRIX, root / "matrix")
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "ci@example.invalid")
    git(root, "config", "user.name", "ci")
    git(root, "config", "commit.gpgsign", "false")
    cli_render(root)
    commit_all(root, "matrix and rendered dockerfiles")
    return root


@pytest.fixture
def repo(pristine: Path, tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(pristine, root, symlinks=True)
    return root


def _clear_render_caches() -> None:
    for cache in (render._shipped, render._smoke_files, render._shared_digests, plan._block):
        cache.cache_clear()


@pytest.fixture
def fresh_render_caches():
    """render reads the shipped scripts and the smoke program once and hashes them once, and the plan
    makes each block once (each formats its fragment once); tests that swap a block's fragment or the
    smoke program clear those caches before and after."""
    _clear_render_caches()
    yield
    _clear_render_caches()


def edit_matrix(repo: Path, old: str, new: str) -> None:
    path = repo / "matrix" / "default.yaml"
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} must occur exactly once in the shipped matrix"
    path.write_text(text.replace(old, new))


# --- what changed --------------------------------------------------------------

def test_no_change_is_an_empty_matrix(repo: Path):
    rows = now(repo, "HEAD")
    assert rows == []
    assert ci_matrix.github_matrix(rows) == {"include": []}
    assert ci_matrix.to_json(ci_matrix.github_matrix(rows)) == '{"include":[]}'


def test_without_since_every_cell_is_built(repo: Path):
    cells = cells_of(repo)
    rows = ci_matrix.entries(cells, render.render_all(cells), since=None, repo=repo)
    assert ids(rows) == [c.id for c in cells] and len(rows) == 13


def test_one_cell_edited_rebuilds_only_that_cell(repo: Path):
    ref = git(repo, "rev-parse", "HEAD")
    # The Debian cell gets an extra ENV: same id, different Dockerfile and manifests.
    edit_matrix(repo, "    env: venv\n", "    env: venv\n    env_vars:\n      HCCL_BUFFSIZE: \"200\"\n")
    assert ids(now(repo, ref)) == [DEBIAN]


def test_editing_a_version_in_the_id_builds_the_new_cell_not_the_old(repo: Path):
    # python is part of the derived id: the old cell is gone, the new one is new.
    edit_matrix(repo, "    env: venv\n    python: \"3.11\"\n", "    env: venv\n    python: \"3.12\"\n")
    assert ids(now(repo, "HEAD")) == [DEBIAN.replace("py3.11", "py3.12")]


def test_a_block_change_rebuilds_every_cell(repo: Path, monkeypatch, fresh_render_caches):
    """REF rendered with a block whose fragment said one more line than today's: a change to how the
    Dockerfile is made between REF and now. Every cell's files differ, so every cell is rebuilt."""
    cells = cells_of(repo)
    today = blocks.EnvDefaults.render
    with monkeypatch.context() as patch:
        patch.setattr(blocks.EnvDefaults, "render", lambda self: "# an older block said one more line\n" + today(self))
        render.write(render.render_all(cells), repo / "dockerfiles")
    ref = commit_all(repo, "rendered with the old block")
    _clear_render_caches()

    rows = now(repo, ref)
    assert ids(rows) == [c.id for c in cells] and len(rows) == 13
    # ...while the commit before it (rendered with today's blocks) still matches.
    assert now(repo, f"{ref}~1") == []


def test_smoke_program_change_rebuilds_every_cell(repo: Path, tmp_path: Path, monkeypatch, fresh_render_caches):
    old_smoke = tmp_path / "smoke.py"
    old_smoke.write_bytes(render.SMOKE_FILES["smoke.py"].read_bytes() + b"# older smoke program\n")
    cells = cells_of(repo)
    with monkeypatch.context() as patch:
        patch.setitem(render.SMOKE_FILES, "smoke.py", old_smoke)
        render.write(render.render_all(cells), repo / "dockerfiles")
    ref = commit_all(repo, "rendered with the old smoke program")
    _clear_render_caches()
    assert ids(now(repo, ref)) == [c.id for c in cells]


def test_new_cell_included_removed_cell_not(repo: Path):
    path = repo / "matrix" / "default.yaml"
    text = path.read_text()
    debian_start = text.index("  # The cell this machine can build without an NPU")
    # Drop the Debian cell, add a named one.
    path.write_text(text[:debian_start] + (
        "  - name: extra-910b\n"
        "    cann: 8.0.RC3\n"
        "    chip: 910b\n"
        "    arch: x86_64\n"
        "    python: \"3.10\"\n"
        "    torch_npu: 2.4.0\n"))
    assert ids(now(repo, "HEAD")) == ["extra-910b"]


def test_file_names_count_not_only_contents(repo: Path):
    """An extra (or renamed) file in REF's committed folder makes the cell differ."""
    folder = repo / "dockerfiles" / DEBIAN
    (folder / "README.txt").write_text("left over\n")
    ref = commit_all(repo, "an extra file")
    assert ids(now(repo, ref)) == [DEBIAN]
    (folder / "README.txt").unlink()
    (folder / "manifest.json").rename(folder / "manifest.old.json")
    ref = commit_all(repo, "a renamed file")
    assert ids(now(repo, ref)) == [DEBIAN]


def test_ref_without_dockerfiles_builds_everything(repo: Path):
    empty_tree = subprocess.run(["git", "-C", str(repo), "mktree"], input="", capture_output=True, text=True,
                                check=True).stdout.strip()
    before_any_render = git(repo, "commit-tree", "-m", "nothing rendered yet", empty_tree)
    assert len(now(repo, before_any_render)) == 13


def test_refs_by_name_and_committed_not_working_tree(repo: Path):
    """A branch or tag name works; REF's *committed* files count, not the working tree's."""
    git(repo, "tag", "published")
    git(repo, "branch", "last-green")
    shutil.rmtree(repo / "dockerfiles")  # the working tree no longer has them: irrelevant
    assert now(repo, "published") == [] and now(repo, "last-green") == []


@pytest.mark.parametrize("bad", ["no-such-branch", "0123456789abcdef0123456789abcdef01234567", "-n", "HEAD~99", "a b"])
def test_bad_ref_is_a_user_error_naming_it(repo: Path, bad: str):
    with pytest.raises(UserError) as info:
        now(repo, bad)
    assert bad in str(info.value) and info.value.fix


def test_not_a_git_repository(tmp_path: Path, repo: Path, monkeypatch):
    outside = tmp_path / "outside"
    outside.mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    with pytest.raises(UserError, match="not inside a git repository"):
        ci_matrix.entries(cells_of(repo), None, since="HEAD", repo=outside)


def test_out_dir_must_stay_inside_the_repository(repo: Path):
    with pytest.raises(UserError, match="inside the repository"):
        now(repo, "HEAD", out_dir="../dockerfiles")


# --- the JSON the workflow reads ----------------------------------------------------

def test_github_matrix_shape_and_default_runners(repo: Path):
    cells = cells_of(repo)
    rows = ci_matrix.entries(cells, render.render_all(cells), since=None, repo=repo)
    data = json.loads(ci_matrix.to_json(ci_matrix.github_matrix(rows)))
    assert list(data) == ["include"] and len(data["include"]) == 13
    by_id: Dict[str, dict] = {r["id"]: r for r in data["include"]}
    arm = by_id["cann8.0.rc3-910b-ubuntu22.04-py3.10-torch_npu2.4.0-aarch64"]
    assert arm == {
        "id": "cann8.0.rc3-910b-ubuntu22.04-py3.10-torch_npu2.4.0-aarch64",
        "tag": "ascend-build/pytorch:cann8.0.rc3-910b-ubuntu22.04-py3.10-torch_npu2.4.0-aarch64",
        "arch": "aarch64",
        "chip": "910b",
        "cann": "8.0.RC3",
        "build_runner": "ubuntu-24.04-arm",
        "npu_runner": ["self-hosted", "linux", "ascend", "910b", "ARM64"],
        "content_hash": arm["content_hash"],
        "manifest": "ascend-build/pytorch:cann8.0.rc3-910b-ubuntu22.04-py3.10-torch_npu2.4.0",
        "members": [
            {"ref": "ascend-build/pytorch:cann8.0.rc3-910b-ubuntu22.04-py3.10-torch_npu2.4.0-aarch64",
             "content_hash": arm["content_hash"]},
            {"ref": "ascend-build/pytorch:cann8.0.rc3-910b-ubuntu22.04-py3.10-torch_npu2.4.0-x86_64",
             "content_hash": by_id["cann8.0.rc3-910b-ubuntu22.04-py3.10-torch_npu2.4.0-x86_64"]["content_hash"]},
        ],
    }
    a3 = by_id["cann8.5.0-a3-ubuntu22.04-py3.11-torch_npu2.8.0.post2-x86_64"]
    assert a3["build_runner"] == "ubuntu-24.04"
    assert a3["npu_runner"] == ["self-hosted", "linux", "ascend", "a3", "X64"]
    # The content hash is the label the built image carries (the workflow checks it).
    manifest = json.loads(render.render_cell(next(c for c in cells if c.id == a3["id"]))["manifest.json"])
    assert a3["content_hash"] == manifest["content_hash"]
    assert "\n" not in ci_matrix.to_json(ci_matrix.github_matrix(rows))


def test_members_list_siblings_even_when_only_one_arch_is_rebuilt(repo: Path):
    edit_matrix(repo, "  - cann: 8.3.RC1\n", "  - cann: 8.3.RC1\n    env_vars: {HCCL_BUFFSIZE: \"120\"}\n")
    rows = now(repo, "HEAD")
    assert ids(rows) == ["cann8.3.rc1-910b-ubuntu22.04-py3.11-torch_npu2.7.1-aarch64",
                         "cann8.3.rc1-910b-ubuntu22.04-py3.11-torch_npu2.7.1-x86_64"]
    debian = ci_matrix.entries(cells_of(repo), None, since=None, repo=repo)[-1]
    assert debian["manifest"] == "ascend-build/pytorch:cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0"
    assert [m["ref"] for m in debian["members"]] == ["ascend-build/pytorch:" + DEBIAN]


def test_runner_file_overrides(repo: Path, tmp_path: Path):
    runners_file = tmp_path / "runners.yml"
    runners_file.write_text(
        "build:\n"
        "  aarch64: [self-hosted, linux, ARM64, docker-build]\n"
        "npu:\n"
        "  910b: [self-hosted, linux, ascend, 910b, ARM64, lab-1]\n"
        "  910b/x86_64: ascend-x86\n")
    runners = ci_matrix.load_runners(runners_file)
    cells = cells_of(repo)
    rows = {r["id"]: r for r in ci_matrix.entries(cells, None, since=None, repo=repo, runners=runners)}
    arm = rows["cann8.0.rc3-910b-ubuntu22.04-py3.10-torch_npu2.4.0-aarch64"]
    x86 = rows["cann8.0.rc3-910b-ubuntu22.04-py3.10-torch_npu2.4.0-x86_64"]
    a3 = rows["cann8.5.0-a3-ubuntu22.04-py3.11-torch_npu2.8.0.post2-aarch64"]
    assert arm["build_runner"] == ["self-hosted", "linux", "ARM64", "docker-build"]
    assert x86["build_runner"] == "ubuntu-24.04"                      # default kept
    assert arm["npu_runner"] == ["self-hosted", "linux", "ascend", "910b", "ARM64", "lab-1"]
    assert x86["npu_runner"] == ["ascend-x86"]                        # chip/arch beats chip
    assert a3["npu_runner"] == ["self-hosted", "linux", "ascend", "a3", "ARM64"]  # default kept
    # JSON is YAML: the same file as JSON gives the same table.
    as_json = tmp_path / "runners.json"
    as_json.write_text(json.dumps(runners))
    assert ci_matrix.load_runners(as_json) == runners


@pytest.mark.parametrize("text, message", [
    ("builds:\n  x86_64: ubuntu-24.04\n", "unknown key"),
    ("build:\n  riscv64: ubuntu-24.04\n", "build.riscv64"),
    ("npu:\n  910c: [self-hosted]\n", "npu.910c"),
    ("npu:\n  910b: []\n", "npu.910b"),
    ("npu:\n  910b: [\"self-hosted, linux\"]\n", "npu.910b"),
    ("npu:\n  910b: [\"$(reboot)\"]\n", "npu.910b"),
    ("- just a list\n", "top level"),
    ("build: [\n", "not valid YAML"),
])
def test_bad_runner_files(tmp_path: Path, text: str, message: str):
    path = tmp_path / "runners.yml"
    path.write_text(text)
    with pytest.raises(UserError, match=message.replace("$", r"\$").replace("(", r"\(").replace(")", r"\)")):
        ci_matrix.load_runners(path)


def test_missing_runner_file(tmp_path: Path):
    with pytest.raises(UserError, match="cannot read runners file"):
        ci_matrix.load_runners(tmp_path / "absent.yml")


def test_a_runners_file_with_an_alias_bomb_or_no_file_is_refused_at_once(tmp_path):
    bomb = tmp_path / "runners.yaml"
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"{n}: &{n} [" + ",".join([f"*{p}"] * 9) + "]" for p, n in zip("abcdefg", "bcdefgh")]
    bomb.write_text("\n".join(lines) + "\n")  # 9**8 strings were it expanded
    with pytest.raises(UserError, match="YAML aliases are not accepted here"):
        ci_matrix.load_runners(bomb)
    with pytest.raises(UserError, match="is not a regular file"):
        ci_matrix.load_runners(Path("/dev/zero"))


@pytest.mark.parametrize("text", ["build: " + "[" * 3000 + "]" * 3000 + "\n",
                                  "{" * 800 + "}" * 800 + "\n"])
def test_a_runners_file_nested_past_any_need_is_refused_clearly(tmp_path, text):
    deep = tmp_path / "runners.yaml"
    deep.write_text(text)
    with pytest.raises(UserError) as refused:
        ci_matrix.load_runners(deep)
    assert str(deep) in refused.value.message and "nested deeper than 64 levels" in refused.value.message
