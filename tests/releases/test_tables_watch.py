"""The tables' watcher: documents kept from a clone of TorchNPU's repository the same way every
time, the data files checked by `releases tables`, and the pairs a newer table enables drafted as
cells. The repository here is a real git repository made in the test (git, no network)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from builder import knowledge
from builder.knowledge import KnowledgeBase
from builder.knowledge.files import DATA_DIR, read_json, read_yaml
from builder.releases import keep_documents, published, tables_watch, torchnpu_notes
from tests.support.matrix import run_cli


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_AUTHOR_DATE": "2026-07-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2026-07-01T00:00:00Z", "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout


def _repository(tmp_path: Path) -> Path:
    repo = tmp_path / "pytorch"
    (repo / "docs" / "zh" / "release_notes").mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "master")
    (repo / "COMPATIBILITY.en.md").write_text("| TorchNPU installation package version | GitCode Branch | PyTorch Version "
                                              "| CANN version |\n|:-:|:-:|:-:|:-:|\n| 2.9.0 | v2.9.0-7.3.0 | 2.9.0 "
                                              "| CANN 8.5.0 |\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "compatibility page")
    _git(repo, "tag", "v9.9.1-pytorch2.7.1")  # a release tag whose tree has no notes: skipped
    (repo / "docs" / "zh" / "release_notes" / "release_notes.md").write_text(torchnpu_notes.EXAMPLE)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "notes")
    _git(repo, "tag", "v9.9.0-pytorch2.7.1")
    _git(repo, "tag", "v9.9.0-pytorch2.6.0")   # the same release on an older PyTorch: the one kept
    _git(repo, "tag", "v2.6.0-9.9.0")          # no release tag (a branch-like name): skipped
    return repo / ".git"


def test_documents_are_kept_under_their_source_line_once(tmp_path):
    gitdir = _repository(tmp_path)
    out = tmp_path / "kept"
    written = keep_documents.keep(gitdir, out)
    assert [Path(p).relative_to(out).as_posix() for p in written] == [
        "master/COMPATIBILITY.en.md", "v9.9.0-pytorch2.6.0/release_notes.md"]
    commit = _git(gitdir.parent, "rev-parse", "v9.9.0-pytorch2.6.0^{commit}").strip()
    text = (out / "v9.9.0-pytorch2.6.0" / "release_notes.md").read_text(encoding="utf-8")
    first, _, body = text.partition("\n")
    assert first == (f"<!-- Ascend/pytorch, docs/zh/release_notes/release_notes.md at tag v9.9.0-pytorch2.6.0, "
                     f"commit {commit} (2026-07-01), verbatim below -->")
    assert body == torchnpu_notes.EXAMPLE  # verbatim
    assert published.source(first, "x").id == "Ascend/pytorch@v9.9.0-pytorch2.6.0:docs/zh/release_notes/release_notes.md"
    assert keep_documents.keep(gitdir, out) == []  # an unchanged repository writes nothing
    kinds = published.torchnpu_tables(out)  # the generator reads what was kept
    assert [r["torch_npu"] for r in kinds["mapping"]] == ["2.9.0", "2.9.0"]
    assert [r["pta"] for r in kinds["compat"]] == ["7.3.0", "7.2.0"]


def test_releases_tables_says_which_data_files_are_stale(tmp_path):
    done = run_cli("releases", "tables")
    assert done.returncode == 0 and "torchnpu-tables.yaml: current" in done.stdout, done.stderr
    fixtures = tmp_path / "documents"
    shutil.copytree(published.FIXTURES, fixtures)
    shutil.rmtree(fixtures / "ascend-pytorch" / "v7.3.0-pytorch2.7.1")
    done = run_cli("releases", "tables", "--documents", fixtures)
    assert done.returncode == 1 and "torchnpu-tables.yaml: stale" in done.stdout
    assert "torchnpu-tables.yaml differ from what their documents generate" in done.stderr
    assert "make knowledge" in done.stderr and "Traceback" not in done.stderr


def _kb_with_tables(tables_doc) -> KnowledgeBase:
    return KnowledgeBase(compat=read_yaml(DATA_DIR / "ascend-compat.yaml"),
                         packages=read_json(DATA_DIR / "cann-packages.json"), os_doc=read_yaml(DATA_DIR / "os.yaml"),
                         conda_doc=read_yaml(DATA_DIR / "conda.yaml"), downloads_doc=read_yaml(DATA_DIR / "cann-downloads.yaml"),
                         uv_doc=read_yaml(DATA_DIR / "uv.yaml"), tables_doc=tables_doc)


def test_a_newer_table_enables_pairs_and_drafts_cells_that_validate(tmp_path):
    shipped = read_yaml(DATA_DIR / knowledge.TABLES_FILE)
    newest = shipped["documents"][-2]["id"]  # the newest release notes (the compatibility page is last)
    assert newest == "Ascend/pytorch@v26.2.0-beta.1-pytorch2.13.0:docs/zh/release_notes.md"
    older = dict(shipped, compat=[r for r in shipped["compat"] if r["document"] != newest])
    pairs = tables_watch.enabled(_kb_with_tables(older), knowledge.load())
    by_pair = {(p.torch_npu, p.cann): p for p in pairs}
    assert by_pair[("2.9.0", "9.0.0")].was == "mismatch"   # the 26.1.0 notes said "/"; the newest say Y
    assert by_pair[("2.9.0", "9.0.0")].where[0] == f"{newest}, line 75"
    assert ("2.9.0", "8.0.RC3") not in by_pair            # still left out by every table
    text = tables_watch.proposal(pairs, knowledge.load())
    cells = yaml.safe_load(text)["cells"]
    assert len(cells) == len(pairs) and {"cann": "9.0.0", "torch_npu": "2.9.0"}.items() <= cells[
        [(c["torch_npu"], c["cann"]) for c in cells].index(("2.9.0", "9.0.0"))].items()
    path = tmp_path / "proposed.yaml"
    path.write_text(text)
    done = run_cli("validate", "--matrix", path, "--out", tmp_path / "out")
    assert done.returncode == 0, done.stdout + done.stderr
    assert tables_watch.enabled(knowledge.load(), knowledge.load()) == []


def test_mindclusters_release_notes_are_kept_from_its_tags_and_its_branch(tmp_path):
    repo = tmp_path / "mind-cluster"
    (repo / "docs" / "zh").mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "master")
    (repo / "docs" / "zh" / "release_notes.md").write_text("## 相关产品版本配套说明\n\n|产品名称|版本|\n|--|--|\n"
                                                            "|Ascend HDK|26.9.0|\n|CANN|9.9.0|\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "notes")
    for tag in ("v26.9.0", "v26.9.0.beta.1", "v7.3.0.SPC1"):  # the last is no release tag kept
        _git(repo, "tag", tag)
    out = tmp_path / "kept"
    written = keep_documents.keep(repo / ".git", out, "mind-cluster")
    assert [Path(p).relative_to(out).as_posix() for p in written] == [
        "master/release_notes.md", "v26.9.0.beta.1/release_notes.md", "v26.9.0/release_notes.md"]
    first = (out / "master" / "release_notes.md").read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("<!-- Ascend/mind-cluster, docs/zh/release_notes.md at branch master, commit ")


def test_from_git_takes_a_kind_and_a_folder(tmp_path):
    done = run_cli("releases", "tables", "--from-git", f"pytorch={tmp_path}")
    assert done.returncode == 2 and "not KIND=GITDIR with KIND one of ascend-pytorch, mind-cluster" in done.stderr
    done = run_cli("releases", "tables", "--from-git", "--write")
    assert done.returncode == 2 and "Traceback" not in done.stderr
