"""A team's project (builder/project.py, builder/scaffold.py, builder/knowledge/additions.py): `init`,
the default matrix of the folder a command runs in, the project's additions to the knowledge base,
where `releases ... --write` writes, and which commit of ascend-build the provenance names."""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from builder import knowledge, project, scaffold
from builder.errors import UserError
from builder.images import attest, matrix
from builder.knowledge import additions
from builder.releases import compat_file
from tests.support.matrix import run_cli
from tests.support.package_index import NEW, Index, new_release

REPO = Path(__file__).resolve().parent.parent
STARTER = scaffold.TEMPLATES / "matrix.yaml"


def _tree(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def team(tmp_path) -> Path:
    """A project made by `ascend-build init`, outside the checkout."""
    folder = tmp_path / "team"
    done = run_cli("init", "team", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return folder


# --- init -------------------------------------------------------------------------------------


def test_init_writes_the_project_and_its_matrix_validates_from_the_folder(team):
    assert sorted(_tree(team)) == [".github/workflows/ascend-build.yml", ".gitignore", "ascend-build/knowledge.yaml",
                                   "matrix/default.yaml"]
    done = run_cli("validate", cwd=team)  # no --matrix: ./matrix/ of the folder
    assert done.returncode == 0, done.stderr
    assert done.stdout == "3 cells valid (5 warning(s)) in matrix/default.yaml\n"
    listed = run_cli("list", "--json", cwd=team)
    assert [row["ref"].split(":")[0] for row in json.loads(listed.stdout)] == ["team/pytorch"] * 3


def test_init_never_overwrites_and_writes_nothing_when_one_file_is_there(tmp_path):
    (tmp_path / ".gitignore").write_text("mine\n")
    done = run_cli("init", ".", cwd=tmp_path)
    assert done.returncode == 2
    assert ".gitignore already there: init never overwrites a file, and wrote none" in done.stderr
    assert _tree(tmp_path) == {".gitignore": b"mine\n"}
    again = tmp_path / "again"
    assert run_cli("init", again).returncode == 0
    before = _tree(again)
    second = run_cli("init", again)
    assert second.returncode == 2 and "matrix/default.yaml" in second.stderr and "Traceback" not in second.stderr
    assert _tree(again) == before


def test_init_refuses_a_folder_whose_parent_is_missing(tmp_path):
    done = run_cli("init", tmp_path / "no" / "such")
    assert done.returncode == 2 and "init makes such/ only inside an existing folder" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_starter_matrix_is_cells_of_the_shipped_matrix():
    """What init writes is validated and locked by this project itself (matrix/, dockerfiles/)."""
    shipped = {c.id for c in matrix.load(REPO / "matrix").cells}
    starter = matrix.load(STARTER)
    assert starter.findings == [] and len(starter.cells) == 3
    assert {c.id for c in starter.cells} <= shipped


def test_the_gitignore_covers_private_keys_and_state(tmp_path):
    git = shutil.which("git")
    assert git, "git is needed by the checkout's own tests"
    scaffold.init(tmp_path)
    subprocess.run([git, "init", "-q", str(tmp_path)], check=True)
    for path in ("keys/team.key", ".state/logs/x.log", "dockerfiles/c/wheelhouse/a.whl", "dockerfiles/c/installers/a.run"):
        assert subprocess.run([git, "-C", str(tmp_path), "check-ignore", "-q", path]).returncode == 0, path
    for path in ("keys/team.pub", "matrix/default.yaml", "ascend-build/knowledge.yaml", "dockerfiles/c/Dockerfile"):
        assert subprocess.run([git, "-C", str(tmp_path), "check-ignore", "-q", path]).returncode == 1, path


def _tool(name: str) -> str:
    found = Path(sys.executable).with_name(name)
    assert found.exists(), f"{name} is missing: pip install -e '.[test]'"
    return str(found)


def test_the_workflow_init_writes_is_valid_pinned_and_installs_this_release(tmp_path):
    scaffold.init(tmp_path)
    workflow = tmp_path / ".github" / "workflows" / "ascend-build.yml"
    text = workflow.read_text()
    assert f'ASCEND_BUILD: "ascend-build=={metadata.version("ascend-build")}"' in text and "@VERSION@" not in text
    doc = yaml.safe_load(text)
    runs = [step.get("run", "") for job in doc["jobs"].values() for step in job["steps"]]
    assert {"ascend-build validate", "ascend-build lock --check", "ascend-build render --check"} <= set(runs)
    assert all("${{" not in run for run in runs)
    for line in text.splitlines():
        if "uses:" in line:
            assert re.search(r"uses: [\w.-]+/[\w.-]+@[0-9a-f]{40}  # v\d", line), line
    env = dict(os.environ, HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9")
    schema = subprocess.run([_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(workflow)],
                            capture_output=True, text=True, env=env, timeout=300)
    assert schema.returncode == 0, schema.stdout + schema.stderr
    audit = subprocess.run([_tool("zizmor"), "--offline", "--format", "json", ".github/workflows/ascend-build.yml"],
                           cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert audit.returncode == 0 or 10 <= audit.returncode <= 14, audit.stderr
    high = [f["ident"] for f in json.loads(audit.stdout) if f["determinations"]["severity"] == "High"]
    assert high == []


# --- the default matrix is the folder's ---------------------------------------------------------


@pytest.mark.parametrize("command", [["validate"], ["list"], ["render"], ["lock", "--check"]])
def test_without_a_matrix_folder_a_command_names_init(tmp_path, command):
    done = run_cli(*command, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert f"error: no matrix/ in {tmp_path}" in done.stderr and "ascend-build init ." in done.stderr
    assert "site-packages" not in done.stderr and list(tmp_path.iterdir()) == []


def test_a_matrix_given_in_a_folder_without_one_renders_beside_it(tmp_path):
    shutil.copyfile(STARTER, tmp_path / "team.yaml")
    done = run_cli("render", "--matrix", "team.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "note: --matrix team.yaml is not the default matrix (./matrix/)" in done.stderr
    assert len(list((tmp_path / "dockerfiles").iterdir())) == 3


# --- the project's additions to the knowledge base ------------------------------------------------


def _uncommented_example() -> str:
    """The example the scaffolded additions file shows in its comments, as YAML."""
    lines = (scaffold.TEMPLATES / "knowledge.yaml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# torch_npu_releases:"))
    return "\n".join(line[2:] for line in lines[start:]) + "\n"


def test_the_example_in_the_additions_file_is_read_on_top_of_the_packaged_data(tmp_path, monkeypatch):
    (tmp_path / "ascend-build").mkdir()
    (tmp_path / "ascend-build" / "knowledge.yaml").write_text(_uncommented_example())
    monkeypatch.chdir(tmp_path)
    kb = knowledge.load()
    added = kb.releases.torch_npu("2.99.0")
    assert added is not None and added.cann is None and added.python["x86_64"] == ("3.11",)
    assert "9.9.0" in kb.releases.cann_releases() and kb.drivers.paired_hdk("9.9.0") == "26.9.0"
    assert kb.additions is not None and kb.additions.torch_npu == ("2.99.0",) and kb.additions.cann == ("9.9.0",)
    monkeypatch.chdir(REPO)
    assert knowledge.load().releases.torch_npu("2.99.0") is None  # another folder: the packaged data alone


def test_an_entry_the_package_knows_is_superseded_and_kb_names_it(team):
    (team / "ascend-build" / "knowledge.yaml").write_text(
        "torch_npu_releases:\n  items:\n  - version: 2.4.0\n    torch: 9.9.9\n  - version: 2.99.0\n    torch: 2.99.0\n")
    shown = run_cli("kb", "--json", cwd=team)
    assert shown.returncode == 0, shown.stderr
    added = json.loads(shown.stdout)["additions"]
    assert added["file"] == "ascend-build/knowledge.yaml" and added["torch_npu_releases"] == ["2.99.0"]
    assert added["superseded (the package knows them: delete these entries)"] == ["torch_npu 2.4.0"]
    pinned = json.loads(run_cli("kb", "torch-npu", "2.4.0", "--json", cwd=team).stdout)
    assert pinned["torch"]["x86_64"]["requirement"] == "torch==2.4.0+cpu"  # the package's entry, not 9.9.9


@pytest.mark.parametrize("text, said", [
    ("torch_npu_releases:\n  items:\n  - version: not-a-version\n    torch: 2.4.0\n", "is no torch_npu version"),
    ("torch_npu_releases:\n  items:\n  - version: 2.99.0\n", "lacks torch"),
    ("chips: {}\n", "chips is no key an additions file holds"),
    ("torch_npu_releases: [1]\n", "is not a mapping with one list, items"),
    ("- a\n", "is not a mapping"),
    ("a: [\n", "is not valid YAML"),
])
def test_a_broken_additions_file_is_a_clear_error_naming_it(team, text, said):
    (team / "ascend-build" / "knowledge.yaml").write_text(text)
    done = run_cli("validate", cwd=team)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "error: ascend-build/knowledge.yaml" in done.stderr and said in done.stderr


# --- where releases --write and --propose write --------------------------------------------------


@pytest.fixture
def index(monkeypatch):
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    served = Index(new_release())
    yield served
    served.stop()


def test_releases_check_write_and_propose_write_the_project_never_the_package(team, index):
    packaged = _tree(knowledge.DATA_DIR)
    done = run_cli("releases", "check", "--index-url", index.url, "--write", "--propose", cwd=team)
    assert done.returncode == 0, done.stderr
    assert f"added torch_npu {NEW} to ascend-build/knowledge.yaml" in done.stderr
    assert _tree(knowledge.DATA_DIR) == packaged
    text = (team / "ascend-build" / "knowledge.yaml").read_text()
    assert text.startswith((scaffold.TEMPLATES / "knowledge.yaml").read_text())  # the comments kept, the list after
    shown = json.loads(run_cli("kb", "torch-npu", NEW, "--json", cwd=team).stdout)
    assert shown["version"] == NEW and shown["cann"] is None
    assert (team / "matrix" / "proposed" / "torch_npu.yaml").is_file()
    again = run_cli("releases", "check", "--index-url", index.url, "--write", cwd=team)
    assert again.returncode == 0 and "added" not in again.stderr  # known now: nothing written twice
    assert (team / "ascend-build" / "knowledge.yaml").read_text() == text


@pytest.mark.parametrize("options, said", [
    (["releases", "check", "--write"], "releases check --write adds to the project's ascend-build/knowledge.yaml"),
    (["releases", "check", "--propose"], "releases check --propose drafts cells in ./matrix/proposed/"),
    (["releases", "tables", "--write", "--documents", "."], "releases tables --write writes builder/data/ of ascend-build"),
    (["releases", "tables"], "releases tables reads the documents kept in tests/fixtures/documents/"),
])
def test_release_writes_outside_a_project_or_a_checkout_are_refused_first(tmp_path, options, said):
    done = run_cli(*options, "--index-url", "http://127.0.0.1:9/simple/", cwd=tmp_path) if options[1] == "check" \
        else run_cli(*options, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and "127.0.0.1:9" not in done.stderr  # refused before the index is asked
    assert list(tmp_path.iterdir()) == []


def test_inside_the_checkout_releases_write_the_package_data(monkeypatch):
    """Where maintainers run them: the checkout's builder/data (only the target is asked here: the
    shipped data is never written by a test)."""
    monkeypatch.chdir(REPO / "docs")
    assert project.in_checkout()
    assert project.additions_to_write("releases check --write") == knowledge.DATA_DIR / "ascend-compat.yaml"
    assert project.data_to_write("releases tables --write") == knowledge.DATA_DIR


def test_writing_the_additions_file_keeps_its_bytes_and_orders_the_entries(tmp_path, index):
    from builder import releases

    path = tmp_path / "ascend-build" / "knowledge.yaml"
    result = releases.check(index.url, timeout=5)
    assert compat_file.write(result, path, additions=True) == [NEW]  # made when missing
    made = path.read_text()
    assert made.startswith(additions.STARTER.read_text())  # as init writes it, then the list
    assert [i["version"] for i in additions.read(path)["torch_npu_releases"]["items"]] == [NEW]
    older = Index(new_release("2.14.5"))
    try:
        assert compat_file.write(releases.check(older.url, timeout=5), path, additions=True) == ["2.14.5"]
    finally:
        older.stop()
    assert [i["version"] for i in additions.read(path)["torch_npu_releases"]["items"]] == ["2.14.5", NEW]
    kept = [line for line in difflib.ndiff(made.splitlines(), path.read_text().splitlines()) if line.startswith("- ")]
    assert kept == []  # the older release went in before the newer; no line of the file changed


# --- which ascend-build the provenance names --------------------------------------------------------


def _git(folder: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                   capture_output=True)


def _repo(folder: Path, pyproject: str) -> Path:
    (folder / "builder").mkdir(parents=True)
    (folder / "pyproject.toml").write_text(pyproject)
    (folder / "builder" / "__init__.py").write_text("")
    _git(folder, "init", "-q")
    _git(folder, "add", ".")
    _git(folder, "commit", "-q", "-m", "x")
    return folder


@pytest.mark.parametrize("layout, names_a_commit, writes_its_data", [
    ("checkout", True, True),                   # builder/ at the top of ascend-build's work tree (editable)
    ("installed-in-its-checkout", True, False),  # `pip install .` into a venv inside that work tree
    ("installed-in-team-repo", False, False),    # site-packages inside a team's own repository
    ("other-project", False, False),            # a builder/ package at the top of another project
    ("no-git", False, False),                   # an unpacked sdist
])
def test_a_checkout_of_ascend_build_is_told_from_an_installed_package(tmp_path, monkeypatch, layout, names_a_commit,
                                                                      writes_its_data):
    named = '[project]\nname = "ascend-build"\nversion = "0.1.0"\n'
    site = Path(".venv") / "lib" / "python3.11" / "site-packages"
    if layout == "checkout":
        package = _repo(tmp_path / "ab", named) / "builder"
    elif layout == "installed-in-its-checkout":
        package = _repo(tmp_path / "ab", named) / site / "builder"
        package.mkdir(parents=True)
    elif layout == "installed-in-team-repo":
        team = _repo(tmp_path / "team", '[project]\nname = "team-images"\n')
        package = team / site / "builder"
        package.mkdir(parents=True)
        (package.parent / "pyproject.toml").write_text(named)  # a stray file of that name beside it does not count
    elif layout == "other-project":
        package = _repo(tmp_path / "other", '[project]\nname = "other"\n[tool.x]\nname = "ascend-build"\n') / "builder"
    else:
        package = tmp_path / "sdist" / "builder"
        package.mkdir(parents=True)
        (package.parent / "pyproject.toml").write_text(named)
    monkeypatch.setattr(project, "PACKAGE", package)
    project.checkout.cache_clear()
    try:
        top = project.checkout()
        assert (top is not None) is names_a_commit
        assert top is None or package.is_relative_to(top)
        assert project.runs_from_checkout() is writes_its_data
        monkeypatch.chdir(package.parent)  # inside the work tree, if there is one
        assert project.in_checkout() is writes_its_data
    finally:
        project.checkout.cache_clear()


def test_the_provenance_names_the_package_version_and_a_commit_only_from_a_checkout(monkeypatch):
    proof = attest.Evidence(cell_id="c", variant="cpu", arch="x86_64", matrix_file="", matrix_sha256="",
                            lock_sha256="", lock_state="complete", installers=(), base_image="debian:12")
    here = attest.provenance_predicate(proof, {})["runDetails"]["builder"]["version"]
    assert here["ascend-build"] == metadata.version("ascend-build")
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", here["git-commit"])  # the test suite runs from a checkout
    monkeypatch.setattr(project, "checkout", lambda: None)  # as installed from a wheel
    installed = attest.provenance_predicate(proof, {})["runDetails"]["builder"]["version"]
    assert installed == {"ascend-build": metadata.version("ascend-build")}


def test_data_to_write_outside_the_checkout_says_where_the_facts_go(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as refused:
        project.data_to_write("releases tables --write")
    assert refused.value.exit_code == 2 and "ascend-build/knowledge.yaml" in refused.value.fix
