"""OS per CANN release: each installation guide names the OS families it installs CANN on
(``os.yaml``'s ``cann_os``, a page per release). validate warns (os-not-listed) for a cell whose
OS family the guide of its release does not name; a release with no list read carries an explicit
marker that `kb cann X` and `validate --strict` report (os-not-checked), never silence.
"""

from __future__ import annotations

import copy

from typer.testing import CliRunner

from builder import cli, knowledge
from builder.cli.kb import describe_cann
from builder.images import checks, matrix
from builder.knowledge.files import DATA_DIR, read_json, read_yaml
from tests.support.matrix import write_cells

# A CANN-only cell on CANN 9.0.0, whose guide's list is held whole.
CELL = {"os": "debian12", "arch": "x86_64", "chip": "910b", "cann": "9.0.0", "python": "3.11", "env": "venv"}


def _kb(drop_from: str, family: str, complete: bool = True) -> knowledge.KnowledgeBase:
    """The shipped knowledge base with ``family`` left out of ``drop_from``'s guide list."""
    os_doc = copy.deepcopy(read_yaml(DATA_DIR / "os.yaml"))
    for item in os_doc["cann_os"]["listed"]:
        if str(item["cann"]) == drop_from:
            item["os"] = [o for o in item["os"] if o != family]
            item["complete"] = complete
    return knowledge.KnowledgeBase(read_yaml(DATA_DIR / "ascend-compat.yaml"), read_json(DATA_DIR / "cann-packages.json"),
                                   os_doc, read_yaml(DATA_DIR / "conda.yaml"), read_yaml(DATA_DIR / "cann-downloads.yaml"),
                                   read_yaml(DATA_DIR / "uv.yaml"))


def _os_findings(tmp_path, kb, *cells):
    path, lines = write_cells(tmp_path, *cells)
    return [f for f in checks.check(matrix.load(path).cells, kb) if f.rule.startswith("os-")], lines


def test_a_family_the_guide_of_the_release_does_not_name_is_a_warning_with_the_page(tmp_path):
    kb = _kb("9.0.0", "Debian")
    found, lines = _os_findings(tmp_path, kb, CELL, dict(CELL, os="ubuntu22.04", env="conda"))
    [f] = found
    assert (f.rule, f.severity, f.field, f.where.line if f.where else None) == (
        "os-not-listed", "warning", "cells[0].os", lines[(0, "os")])
    assert f.message.startswith("CANN 9.0.0's installation guide names no Debian among the operating systems it "
                                "installs on (openEuler, Ubuntu, veLinux, Kylin,")
    assert f.message.endswith("/CANNCommunityEdition/900/softwareinst/instg)")
    assert f.fix.startswith("use an OS of a family it names (ubuntu18.04, ubuntu20.04, ubuntu22.04, ubuntu24.04, "
                            "openeuler20.03, openeuler22.03, openeuler24.03)")


def test_the_shipped_lists_name_every_family_of_the_matrix_os_ids(tmp_path):
    """With the data as shipped, every os: of every listed release is named: no warning."""
    kb = knowledge.load()
    cells = [dict(CELL, os=o, cann=c.cann) for c in map(kb.environment.cann_os, ("8.5.0", "9.0.0", "9.1.0")) if c
             for o in ("ubuntu22.04", "openeuler22.03", "debian12")]
    found, _ = _os_findings(tmp_path, kb, *cells)
    assert found == []


def test_a_list_read_in_part_says_nothing_of_a_family_it_lacks(tmp_path):
    found, _ = _os_findings(tmp_path, _kb("9.1.0", "Debian", complete=False), dict(CELL, cann="9.1.0"))
    assert found == []
    found, _ = _os_findings(tmp_path, _kb("9.1.0", "Debian", complete=True), dict(CELL, cann="9.1.0"))
    assert [f.rule for f in found] == ["os-not-listed"]


def test_a_release_without_a_list_is_not_checked_by_strict_only_and_kb_says_so(tmp_path):
    path, _ = write_cells(tmp_path, dict(CELL, cann="8.1.RC1", os="ubuntu22.04", python="3.10", env="conda"))
    made = [f for f in checks.not_checked(matrix.load(path).cells) if f.rule == "os-not-checked"]
    assert [(f.severity, f.field) for f in made] == [("warning", "cells[0].os")]
    assert made[0].message.startswith("ubuntu22.04 is not checked against CANN 8.1.RC1: the knowledge base holds no "
                                      "list of the operating systems that release's installation guide names (not found:")
    runner = CliRunner()
    relaxed = runner.invoke(cli.app, ["validate", "--matrix", str(path), "--out", str(tmp_path / "out")])
    strict = runner.invoke(cli.app, ["validate", "--matrix", str(path), "--out", str(tmp_path / "out"), "--strict"])
    assert "os-not-checked" not in relaxed.output
    assert "warning: os-not-checked [cells[0].os]" in strict.output and strict.exit_code == 1
    kb = knowledge.load()
    assert describe_cann(kb, "8.1.RC1")["os"]["named"] == "not checked"
    listed = describe_cann(kb, "9.0.0")["os"]
    assert "Debian" in listed["named"] and listed["source"].endswith("/CANNCommunityEdition/900/softwareinst/instg")
    assert [f for f in checks.not_checked(matrix.load(write_cells(tmp_path, CELL, name="listed.yaml")[0]).cells)
            if f.rule == "os-not-checked"] == []
