"""The docs: README.md is a front door, docs/ a site that builds strictly, the command
reference is what the CLI says, and no page reads as a run log (no commit hashes, no dates,
no development-history phrases)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
CLI_REFERENCE = DOCS / "reference" / "cli.md"
README_MAX_LINES = 200

needs_mkdocs = pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None,
                                  reason="mkdocs is not installed (pip install -e '.[test]' brings it)")


def prose_files():
    """README.md and every page of docs/ (the generated reference included)."""
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def mkdocs_build(config_dir: Path, site: Path) -> subprocess.CompletedProcess:
    # NO_MKDOCS_2_WARNING: the theme's banner about its own future, not a finding of the build.
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=config_dir, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))


# A commit hash: 7 to 40 hex digits with at least one digit and one letter (so neither a plain
# number such as a driver ordinal nor an English word like "decade" counts).
HASH = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
DATE = re.compile(r"\b(?:19|20)\d\d-[01]\d(?:-[0-3]\d)?\b")
HISTORY = re.compile(r"\b(?:this stop|after the merges?|no longer|now|(?:this|last|previous) session)\b", re.IGNORECASE)
# Lab notes: the development machine's load, cores and timings, or "here" meaning that machine. A
# user's page says what the tool does and what a user can expect; the figures of one run on one
# machine belong in benchmarks/RESULTS.md and docs/benchmarks.md.
LAB_NOTE = re.compile(r"load\s+average|\bload\s+\d"
                      r"|\b(?:this|our)(?:\s+(?:loaded|shared))?\s+machine\b|\b(?:loaded|shared|development)(?:\s+test)?\s+machine\b"
                      r"|\b(?:2|two)(?:\s+loaded|\s+shared)?\s+cores\b|\b2-core\b"
                      r"|\b(?:run|runs|ran|built|measured|seen|tried|downloaded|shown|show)\s+here\b"
                      r"|\b(?:image|images|host|node|machine)\s+here\b", re.IGNORECASE)
LAB_NOTES_ALLOWED = (DOCS / "benchmarks.md", DOCS / "contributing.md")


def test_the_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines, more than {README_MAX_LINES}: move the detail into a page of docs/")


@pytest.mark.parametrize("path", prose_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_names_a_commit_or_a_date(path):
    text = path.read_text(encoding="utf-8")
    found = [f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
             for pattern in (HASH, DATE) for m in pattern.finditer(text)]
    assert found == [], "figures and runs belong in benchmarks/RESULTS.md and history in CHANGELOG.md"


@pytest.mark.parametrize("path", [p for p in prose_files() if p != CLI_REFERENCE], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_tells_the_history_of_the_code(path):
    text = path.read_text(encoding="utf-8")
    found = [f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}" for m in HISTORY.finditer(text)]
    assert found == [], "say what the code does, in the present tense; history belongs in CHANGELOG.md"


@pytest.mark.parametrize("path", [p for p in prose_files() if p not in LAB_NOTES_ALLOWED],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_no_user_page_holds_lab_notes(path):
    text = path.read_text(encoding="utf-8")
    found = [f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {' '.join(m.group(0).split())}"
             for m in LAB_NOTE.finditer(text)]
    assert found == [], ("the development machine's figures (its load, cores, timings, 'here') belong in "
                         "benchmarks/RESULTS.md and docs/benchmarks.md; say what a user can expect instead")


def test_the_patterns_catch_what_they_are_for():
    assert HASH.search("at commit 35e090f") and HASH.search("ee97ce09") and not HASH.search("2400110030000000")
    assert not HASH.search("a decade") and not HASH.search("sha256")
    assert DATE.search("run of 2026-12-01") and DATE.search("2026-11") and not DATE.search("CANN 8.0.RC3")
    assert HISTORY.search("pull now checks") and HISTORY.search("no longer pays") and HISTORY.search("as last session's run")
    assert not HISTORY.search("known")
    for note in ("at load average 9.1", "took 155 s at load 3", "on this loaded\nmachine", "2 loaded cores",
                 "a 2-core machine", "no CANN installer can be downloaded here", "no NPU image here"):
        assert LAB_NOTE.search(note), note
    for prose in ("the loader reads it", "the image named here", "the lines named here", "loaded by dlopen",
                  "the host's platform", "an arm64 build under qemu takes several times longer"):
        assert not LAB_NOTE.search(prose), prose


def test_the_command_reference_is_what_the_cli_says(tmp_path):
    fresh = tmp_path / "cli.md"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "cli_reference.py"), str(fresh)],
                   cwd=ROOT, check=True, capture_output=True, timeout=300)
    assert fresh.read_text(encoding="utf-8") == CLI_REFERENCE.read_text(encoding="utf-8"), (
        "docs/reference/cli.md is stale: run `make cli-reference` and commit it")


def test_the_command_reference_names_every_command_and_no_local_path():
    text = CLI_REFERENCE.read_text(encoding="utf-8")
    for command in ("validate", "render", "lock", "list", "image", "promote", "index", "ci-matrix", "host", "pull",
                    "run", "doctor", "explain", "record", "verify", "kb torch-npu", "kb cann", "releases check",
                    "releases cann", "k8s job", "keys generate", "policy kyverno"):
        assert f"## `ascend-build {command}`" in text, command
    assert str(ROOT) not in text and "/home/" not in text


@needs_mkdocs
def test_the_site_builds_strictly(tmp_path):
    done = mkdocs_build(ROOT, tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "reference" / "cli.html").is_file()


@needs_mkdocs
@pytest.mark.parametrize("breakage", ["broken link", "missing anchor", "page left out of the nav"])
def test_the_strict_build_fails_on(tmp_path, breakage):
    """The settings in mkdocs.yml make each of these an error, not a warning that scrolls by."""
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(DOCS, tmp_path / "docs")
    page = tmp_path / "docs" / "getting-started.md"
    if breakage == "broken link":
        named = "gone.md"
        page.write_text(page.read_text(encoding="utf-8") + "\nSee [the gone page](gone.md).\n", encoding="utf-8")
    elif breakage == "missing anchor":
        named = "no-such-section"
        page.write_text(page.read_text(encoding="utf-8") + "\nSee [a section](matrix.md#no-such-section).\n",
                        encoding="utf-8")
    else:
        named = "stray.md"
        (tmp_path / "docs" / "stray.md").write_text("# Stray\n", encoding="utf-8")
    done = mkdocs_build(tmp_path, tmp_path / "site")
    told = done.stdout + done.stderr
    assert done.returncode != 0, f"the strict build accepted a {breakage}: {told}"
    assert re.search(rf"WARNING.*{re.escape(named)}", told, re.DOTALL), told
