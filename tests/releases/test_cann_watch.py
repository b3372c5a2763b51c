"""The release watcher's CANN side against Ascend's publications served on loopback: the
compatibility table (tests/fixtures, a verbatim copy, plus rows a future release would
add) and an image build matrix in the shape of build_cann_arg.json. It proposes, with
sources, what the knowledge base lacks, and never touches the knowledge base."""

from __future__ import annotations

import doctest
import hashlib
import json
from pathlib import Path

import pytest
import yaml

from builder import knowledge
from builder.releases import cann_watch
from tests.support.matrix import REPO, run_cli

TABLE = Path(__file__).parent.parent / "fixtures" / "documents" / "ascend-pytorch" / "master" / "COMPATIBILITY.en.md"
KB_FILE = REPO / "builder" / "data" / "ascend-compat.yaml"
# rows a future table would add: torch_npu 2.14.0 (on PyPI, its CANN unknown here) and a 2.99.0 nobody knows
NEW_ROWS = ("|                2.99.0                 | v2.99.0-27.0.0 |     2.99.0      |  CANN 9.3.0  |\n"
            "|                2.14.0                 | v2.14.0-27.0.0 |     2.14.0      |  CANN 9.3.0  |\n")


def matrix_json(*tags: str) -> str:
    return json.dumps({"cann": [{"cann_version": t.split("-")[0], "tags": [t]} for t in tags]})


@pytest.fixture
def served(tmp_path, serve_folder):
    """(folder, base URL) of a loopback server of tmp_path."""
    return tmp_path, serve_folder(tmp_path)


def test_module_examples_hold():
    assert doctest.testmod(cann_watch).failed == 0


def test_the_published_table_since_the_knowledge_bases_scope_is_all_known_but_old_gaps():
    proposal = cann_watch.propose(knowledge.load(), cann_watch.table_rows(TABLE.read_text()), [], "table", "")
    assert {r["version"] for r in proposal["cann_releases"]} == {"6.3.RC3", "6.3.RC3.1"}  # older than 7.0
    assert proposal["torch_npu_pairings"] == [] and proposal["chips"] == [] and proposal["os"] == []


def test_new_releases_chips_and_pairings_are_proposed_with_their_source_and_nothing_is_applied(served):
    folder, base = served
    table = TABLE.read_text().replace("|  CANN 9.1.0  |\n", "|  CANN 9.1.0  |\n" + NEW_ROWS, 1)
    table = table.replace("|     2.12.0      |  CANN 9.1.0  |", "|     2.12.0      |  CANN 9.2.0  |", 1)
    (folder / "COMPATIBILITY.en.md").write_text(table)
    (folder / "build_cann_arg.json").write_text(matrix_json("9.3.0-910c-ubuntu26.04-py3.13", "9.1.0-910b-ubuntu22.04-py3.11"))
    before = hashlib.sha256(KB_FILE.read_bytes()).hexdigest()
    out = run_cli("releases", "cann", "--table", f"{base}/COMPATIBILITY.en.md", "--images", f"{base}/build_cann_arg.json",
                  "--out", folder / "proposal.yaml")
    assert out.returncode == 0, out.stderr
    proposal = yaml.safe_load((folder / "proposal.yaml").read_text())
    assert proposal == yaml.safe_load(out.stdout)
    assert [r["version"] for r in proposal["cann_releases"][:2]] == ["6.3.RC3", "6.3.RC3.1"]  # the old gaps, as above
    assert proposal["cann_releases"][2:] == [{"version": "9.3.0", "named_by": [
        f"{base}/COMPATIBILITY.en.md: torch_npu 2.14.0", f"{base}/COMPATIBILITY.en.md: torch_npu 2.99.0",
        f"{base}/build_cann_arg.json: 9.3.0-910c-ubuntu26.04-py3.13"]}]
    unknown = proposal["torch_npu_unknown"]
    assert {"torch_npu": "2.99.0", "torch": "2.99.0", "cann": "9.3.0", "source": f"{base}/COMPATIBILITY.en.md"} in unknown
    already = cann_watch.propose(knowledge.load(), cann_watch.table_rows(TABLE.read_text()), [], "t", "")["torch_npu_unknown"]
    assert sorted(u["torch_npu"] for u in unknown) == sorted(["2.99.0"] + [u["torch_npu"] for u in already])
    assert proposal["torch_npu_pairings"] == [  # a pairing the knowledge base lacks, and one it holds otherwise
        {"torch_npu": "2.12.0", "cann": "9.2.0", "knowledge_base": "9.1.0", "source": f"{base}/COMPATIBILITY.en.md"},
        {"torch_npu": "2.14.0", "cann": "9.3.0", "knowledge_base": None, "source": f"{base}/COMPATIBILITY.en.md"}]
    assert proposal["chips"] == [{"chip": "910c", "named_by": f"{base}/build_cann_arg.json: 9.3.0-910c-ubuntu26.04-py3.13"}]
    assert proposal["os"] == [{"os": "ubuntu26.04", "named_by": f"{base}/build_cann_arg.json: 9.3.0-910c-ubuntu26.04-py3.13"}]
    assert hashlib.sha256(KB_FILE.read_bytes()).hexdigest() == before  # proposed, never applied


@pytest.mark.parametrize("name, body, message", [
    ("build_cann_arg.json", "{\"versions\": []}", "is not the image build matrix"),
    ("missing.json", None, "HTTP 404"),
])
def test_a_wrong_or_missing_publication_is_a_clear_error(served, name, body, message):
    folder, base = served
    (folder / "COMPATIBILITY.en.md").write_text(TABLE.read_text())
    if body is not None:
        (folder / name).write_text(body)
    out = run_cli("releases", "cann", "--table", f"{base}/COMPATIBILITY.en.md", "--images", f"{base}/{name}")
    assert out.returncode == 1 and message in out.stderr and "Traceback" not in out.stderr


def test_a_fifo_as_the_table_is_refused_not_waited_on(tmp_path):
    import os

    os.mkfifo(tmp_path / "table.md")
    out = run_cli("releases", "cann", "--table", tmp_path / "table.md", timeout=20)
    assert out.returncode == 1 and "cannot be read (not a regular file)" in out.stderr


def test_an_image_matrix_nested_past_any_need_is_a_clear_error(served):
    folder, base = served
    (folder / "COMPATIBILITY.en.md").write_text(TABLE.read_text())
    (folder / "build_cann_arg.json").write_text('{"cann": ' + "[" * 100000 + "]" * 100000 + "}")
    out = run_cli("releases", "cann", "--table", f"{base}/COMPATIBILITY.en.md", "--images", f"{base}/build_cann_arg.json")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "build_cann_arg.json" in out.stderr and "nested deeper than 64 levels" in out.stderr


def test_a_slow_drip_table_stops_at_the_commands_deadline():
    import os
    import subprocess
    import time
    from tests.support import registry as hr
    from tests.support.matrix import cli_exe

    server, port = hr.serve(hr.Trickle)
    env = dict(os.environ, NO_PROXY="127.0.0.1", no_proxy="127.0.0.1", ASCEND_BUILD_DEADLINE="2")
    started = time.monotonic()
    try:
        done = subprocess.run([*cli_exe(), "releases", "cann", "--table", f"http://127.0.0.1:{port}/COMPATIBILITY.en.md"],
                              capture_output=True, text=True, env=env, timeout=60)
    finally:
        server.shutdown()
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "the command's deadline of 2 s passed" in done.stderr
    assert time.monotonic() - started < 15


def test_releases_only_the_release_notes_and_the_image_folders_name_are_proposed(served):
    """Why 9.1.1 and 9.2.0-beta.1 were never proposed: no torch_npu row names them, and
    build_cann_arg.json holds only its commit's batch. The release notes repository's files
    and the images repository's Dockerfile folders name every release."""
    folder, base = served
    (folder / "COMPATIBILITY.en.md").write_text(TABLE.read_text())
    (folder / "files.txt").write_text("README.md\n9.1.0/release-notes.md\n9.1.1/release-notes.md\n"
                                      "9.3.0-beta.1/release-notes.md\n9.3.0-beta.1/release-plan.md\n")
    (folder / "dockerfiles.txt").write_text("cann/9.1.0-910b-ubuntu22.04-py3.11/Dockerfile\n"
                                            "cann/9.3.0-beta.2-910b-ubuntu22.04-py3.12-devel/Dockerfile\n")
    out = run_cli("releases", "cann", "--table", f"{base}/COMPATIBILITY.en.md", "--images", f"{base}/dockerfiles.txt",
                  "--release-notes", f"{base}/files.txt")
    assert out.returncode == 0, out.stderr
    proposed = {r["version"]: r["named_by"] for r in yaml.safe_load(out.stdout)["cann_releases"]}
    # 9.1.0 and 9.1.1 are known (9.1.1 from its release notes, CANN_RN_911); the new ones are proposed with their source
    assert "9.1.1" not in proposed and "9.1.0" not in proposed
    assert proposed["9.3.0-beta.1"] == [f"{base}/files.txt: 9.3.0-beta.1/"]
    assert proposed["9.3.0-beta.2"] == [f"{base}/dockerfiles.txt: 9.3.0-beta.2-910b-ubuntu22.04-py3.12-devel"]


def test_the_releases_after_9_1_0_the_watcher_missed_are_known_with_their_hdk():
    kb = knowledge.load()
    assert kb.drivers.paired_hdk("9.1.1") == "26.1.1" and kb.drivers.min_driver("9.1.1") == "25.2.RC1"  # 9.1.X drops 25.0.X
    assert "9.2.0-beta.1" in kb.releases.cann_releases() and kb.drivers.min_driver("9.2.0-beta.1") == "25.3.RC1"  # bounded by 9.2.0
    assert kb.downloads.cann_release_folder("9.2.0-beta.1") is None  # no official image fetched it: no folder made up


def test_a_proposal_out_in_a_missing_folder_is_a_clear_error_not_a_traceback(tmp_path):
    out = run_cli("releases", "cann", "--table", TABLE, "--out", tmp_path / "missing" / "proposal.yaml")
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert f"cannot write {tmp_path / 'missing' / 'proposal.yaml'}" in out.stderr
    assert not (tmp_path / "missing").exists()
