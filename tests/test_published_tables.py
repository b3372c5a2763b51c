"""Facts read from Ascend's own documents, never typed: the data files under builder/data that a
parser makes are exactly what their kept documents (tests/fixtures/documents/) generate, the
parsers read each shape of table right, and `validate` decides a torch_npu/CANN pair by the
evidence those tables give, naming the document and row.

The expected rows below were read by eye in the fixtures (each document's line = the fixture's
line - 1, the fixture's first line naming where the document was published).
"""

from __future__ import annotations

import shutil

import pytest
import yaml

from builder import knowledge, versions
from builder.errors import UserError
from builder.images import checks
from builder.knowledge.compat_tables import CompatTables
from builder.releases import doc_tables, published, torchnpu_notes
from tests.support.matrix import all_findings, by_rule, write_cells
from tests.support.promptly import refused_promptly

DOCS = published.FIXTURES / "ascend-pytorch"


def _notes(tag: str, name: str = "release_notes.md") -> torchnpu_notes.Notes:
    text = (DOCS / tag / name).read_text(encoding="utf-8").partition("\n")[2]
    return torchnpu_notes.read(text, tag)


# --- the data files are what the documents generate -------------------------------------------


def test_every_generated_data_file_equals_the_parse_of_its_documents():
    assert [k.data_file for k in published.KINDS] == ["torchnpu-tables.yaml", "mindcluster-tables.yaml",
                                                      "cann-products.yaml", "downstream-pins.yaml",
                                                      "torch-npu-requires.yaml"]
    assert published.stale() == []


# CANN releases a kept document names that ascend-compat.yaml has no entry for yet, each with why.
NAMED_NOT_KNOWN = {
    "8.5.0-beta.1": "its release notes are kept for the products they name; its HDK pairing was not read, "
                    "so cann_hdk.releases has no entry for it",
}


def test_every_cann_release_a_parsed_document_names_is_one_the_knowledge_base_knows():
    """A CANN release's notes kept under tests/fixtures/documents/ (or a MindCluster page, or a TorchNPU
    version mapping row from CANN 7.0 on) naming a release that ``cann_hdk.releases`` of ascend-compat.yaml
    lacks: the rules read the releases from that list alone, so the parsed facts would never be used."""
    known = {versions.cann(c) for c in knowledge.load().releases.cann_releases()}
    data = {kind.data_file: yaml.safe_load((knowledge.DATA_DIR / kind.data_file).read_text(encoding="utf-8"))
            for kind in published.KINDS}
    named = {(str(r["cann"]), "cann-products.yaml") for r in data["cann-products.yaml"]["releases"]}
    named |= {(str(r["cann"]), "mindcluster-tables.yaml") for r in data["mindcluster-tables.yaml"]["hdk"]}
    named |= {(str(c), "torchnpu-tables.yaml") for r in data["torchnpu-tables.yaml"]["mapping"] for c in r["cann"]
              if versions.cann(str(c)) >= versions.cann("7.0.RC1")}
    assert len(named) >= 20
    unknown = sorted((cann, where) for cann, where in named
                     if versions.lenient("cann", cann) not in known and cann not in NAMED_NOT_KNOWN)
    assert unknown == [], "add each release to cann_hdk.releases of builder/data/ascend-compat.yaml, with its source"
    assert all(versions.lenient("cann", c) not in known for c in NAMED_NOT_KNOWN)  # an exception that is known: drop it


def test_every_cann_release_of_the_hand_kept_file_names_its_sources():
    """What no parser reads of a CANN release (its paired and supported HDK) is kept by hand in
    ``cann_hdk.releases``, and only with the documents it was read from: each entry names one or
    more ids of ``sources`` (a URL, a repository or a package each), never none and never one not listed."""
    compat = yaml.safe_load((knowledge.DATA_DIR / "ascend-compat.yaml").read_text(encoding="utf-8"))
    entries = compat["cann_hdk"]["releases"]
    assert len(entries) >= 40
    unsourced = [str(e["version"]) for e in entries
                 if not e.get("source") or any(s not in compat["sources"] for s in e["source"])]
    assert unsourced == [], "name the release notes each entry was read from, as an id of `sources`"
    where = {s: compat["sources"][s] for e in entries for s in e["source"]}
    assert [s for s, w in where.items() if not (w.get("url") or w.get("repo") or w.get("package"))] == []


def test_a_changed_document_makes_its_data_file_stale_and_changes_the_verdict(tmp_path):
    """The regeneration test fails on a difference, and the knowledge base follows the documents."""
    fixtures = tmp_path / "documents"
    shutil.copytree(published.FIXTURES, fixtures)
    newest = fixtures / "ascend-pytorch" / "v26.2.0-beta.1-pytorch2.13.0" / "release_notes.md"
    text = newest.read_text(encoding="utf-8")
    # the row 7.3.X (its <tr> on line 75 of the document, index 75 here under the source line):
    # its second cell, 9.0.X, from Y to /
    lines = text.split("\n")
    assert [x.strip() for x in lines[75:79]] == ["<tr>", '<td class="tg-c3ow">7.3.X</td>',
                                                 '<td class="tg-c3ow">Y</td>', '<td class="tg-c3ow">Y</td>']
    lines[78] = lines[78].replace(">Y<", ">/<")
    newest.write_text("\n".join(lines), encoding="utf-8")
    assert published.stale(fixtures) == ["torchnpu-tables.yaml"]
    data = tmp_path / "data"
    data.mkdir()
    assert published.write(fixtures, data)[:2] == ["torchnpu-tables.yaml", "mindcluster-tables.yaml"]
    assert published.stale(fixtures, data) == []
    changed = CompatTables(yaml.safe_load((data / "torchnpu-tables.yaml").read_text(encoding="utf-8")))
    shipped = knowledge.load().releases.tables
    assert [r.where for r in shipped.listing("7.3.0", "9.0.0")] == [
        "Ascend/pytorch@v26.2.0-beta.1-pytorch2.13.0:docs/zh/release_notes.md, line 75"]
    assert changed.listing("7.3.0", "9.0.0") == []
    assert "Ascend/pytorch@v26.2.0-beta.1-pytorch2.13.0:docs/zh/release_notes.md, line 75" in [
        r.where for r in changed.excluding("7.3.0", "9.0.0")]


def test_no_pairing_a_parser_reads_is_typed_in_the_hand_kept_file():
    compat = yaml.safe_load((knowledge.DATA_DIR / "ascend-compat.yaml").read_text(encoding="utf-8"))
    tables = knowledge.load().releases.tables
    typed = [item["version"] for item in compat["torch_npu_releases"]["items"]
             if item.get("cann") and tables.pta_of(str(item["version"])) is not None]
    assert typed == []
    assert "lines" not in compat["pta_lines"]  # the PTA of a torch_npu comes from the mapping rows and branches
    # what the parser reads is what the knowledge base says: 2.9.0's pair, from the compatibility page
    release = knowledge.load().releases.torch_npu("2.9.0")
    assert release is not None and (release.cann, release.cann_sources[0]) == ("8.5.0", "Ascend/pytorch@master:COMPATIBILITY.en.md, line 28")


def test_a_fixture_without_its_source_line_is_refused(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "notes.md").write_text("# 版本说明\n")
    with pytest.raises(UserError, match="does not name the document's source"):
        published.kept(tmp_path / "x")
    with pytest.raises(UserError, match="no documents"):
        published.kept(tmp_path / "empty")


# --- the parsers -------------------------------------------------------------------------------


def test_the_grid_shape_is_read_with_its_slashes():
    notes = _notes("v26.1.0-pytorch2.7.1")
    assert [(r.line, r.pta, r.cann) for r in notes.compat] == [
        (73, "7.3.0", (("8.5.0", True), ("9.0.0", False), ("9.1.0", False))),
        (79, "26.0.0", (("8.5.0", True), ("9.0.0", True), ("9.1.0", False))),
        (85, "26.1.0", (("8.5.0", True), ("9.0.0", True), ("9.1.0", True)))]
    assert [(m.line, m.torch_npu, m.pta, m.cann) for m in notes.mapping][:2] == [
        (41, "2.7.1.post8", "26.1.0", ("9.1.0",)), (42, "2.9.0.post6", "26.1.0", ("9.1.0",))]


def test_the_list_shape_excludes_what_the_table_names_for_another_row_only():
    notes = _notes("v26.0.0-pytorch2.7.1")
    first = notes.compat[0]
    assert (first.line, first.pta) == (50, "26.0.0")
    assert [c for c, ok in first.cann if ok] == ["9.0.0", "8.5.0", "8.3.RC1", "8.2.RC1", "8.1.RC1"]
    assert [c for c, ok in first.cann if not ok] == ["8.0.0", "8.0.RC3", "8.0.RC2"]  # listed for 7.x rows only
    assert [(m.torch_npu, m.cann, m.python) for m in notes.mapping][2] == (
        "2.9.0.post2", ("9.0.0",), ("3.10", "3.11", "3.12", "3.13"))


def test_the_compatibility_page_gives_pairings_with_the_pta_of_each_branch():
    notes = torchnpu_notes.read((DOCS / "master" / "COMPATIBILITY.en.md").read_text(encoding="utf-8")
                                .partition("\n")[2], "compat", need_compat=False)
    rows = {m.torch_npu: (m.pta, m.cann) for m in notes.mapping}
    assert len(notes.mapping) == 62 and notes.compat == ()
    assert rows["2.12.0"] == ("26.1.0", ("9.1.0",)) and rows["2.1.0.rc1"] == ("5.0.rc3", ("7.0.RC1",))
    assert rows["1.11.0.rc2"] == ("3.0.0", ("6.0.1",))  # "(beta)" dropped
    assert rows["1.5.0.post4"] == ("", ("5.0.4",))        # its branch 2.0.4.tr5 names no PTA


def test_a_release_notes_page_without_its_tables_is_refused_naming_it():
    with pytest.raises(UserError, match=r"pages/x: no a compatibility table and no a version mapping table|"
                                        r"pages/x: no a compatibility table"):
        torchnpu_notes.read("# 版本说明\n\n|a|b|\n|--|--|\n|1|2|\n", "pages/x")
    bad = torchnpu_notes.EXAMPLE.replace("|7.2.0|", "|seven|")
    with pytest.raises(UserError, match=r"doc:12: 'seven' is no TorchNPU release"):
        torchnpu_notes.read(bad, "doc")


def test_hostile_tables_are_bounded():
    """A span of a billion columns or rows, or ten thousand rows, is cut at the bounds."""
    html = ('<table><thead><tr><th rowspan="999999999">A</th><th colspan="999999999">B</th></tr></thead>'
            + "<tr><td>1</td></tr>" * 3 + "</table>")
    [table] = doc_tables.tables(html)
    assert len(table.header) == doc_tables.MAX_COLS and len(table.rows) == 3
    pipes = "## h\n|a|\n|--|\n" + "|x|\n" * 10_000
    [table] = doc_tables.tables(pipes)
    assert len(table.rows) == doc_tables.MAX_ROWS


# --- verdicts by evidence ------------------------------------------------------------------------

BASE = {"os": "ubuntu22.04", "arch": "x86_64", "chip": "910b", "env": "venv", "python": "3.11"}
NEWEST = "Ascend/pytorch@v26.2.0-beta.1-pytorch2.13.0:docs/zh/release_notes.md"


@pytest.mark.parametrize("npu, cann, rule, severity, quoted", [
    # a table of its PTA lists it: a warning naming the newest document and row
    ("2.9.0", "9.0.0", "cann-window", "warning", f"PTA 7.3.0 compatible with it ({NEWEST}, line 75)"),
    ("2.12.0", "9.0.0", "cann-window", "warning", f"({NEWEST}, line 87; 1 older release notes agree)"),
    ("2.9.0", "8.5.1", "cann-window", "warning", f"({NEWEST}, line 75)"),                 # 8.5.X
    # no published pair, its PTA from its branch (v2.7.1-26.0.0): the table still speaks
    ("2.7.1.post6", "9.1.0", "cann-window", "warning", "(PTA 26.0.0) has no published CANN pairing"),
    # a table covers its PTA and leaves the CANN out: an error naming the table and what it lists
    ("2.9.0", "8.0.RC3", "cann-mismatch", "error", "lists CANN 8.5.0, 8.3.RC1, 8.2.RC1, 8.1.RC1, 8.0.0 for it"),
    ("2.6.0.post3", "8.5.0", "cann-mismatch", "error",
     "the published table that covers PTA 7.2.0 lists CANN 8.3.RC1, 8.2.RC1, 8.1.RC1, 8.0.0, 8.0.RC3, 8.0.RC2"),
    ("2.8.0.post5", "8.0.RC2", "cann-mismatch", "error", "(PTA 26.0.0) has no published CANN pairing, not CANN 8.0.RC2"),
    # no table covers it: a warning that --strict refuses
    ("2.4.0", "7.0.RC1", "cann-uncovered", "warning", "no published table covers PTA 6.0.rc3 with CANN 7.0.RC1"),
    ("2.7.1.post8", "8.3.RC1", "cann-uncovered", "warning", "no published table covers PTA 26.1.0 with CANN 8.3.RC1"),
])
def test_a_pair_is_judged_by_the_evidence_and_the_message_names_it(tmp_path, npu, cann, rule, severity, quoted):
    findings = all_findings(write_cells(tmp_path, dict(BASE, torch_npu=npu, cann=cann))[0])
    pairing = [f for f in findings if f.rule.startswith("cann-") and f.rule not in ("cann-python-constraint",)]
    assert [(f.rule, f.severity) for f in pairing] == [(rule, severity)], [str(f) for f in findings]
    assert quoted in pairing[0].message
    assert checks.has_errors(pairing, strict=True)  # every one of them is refused under --strict


def test_the_evidence_order_downstream_before_a_table_that_leaves_it_out(tmp_path):
    """vllm-ascend ships torch_npu 2.10.0 (PTA 26.0.0) on 9.1.0-beta.1; no table has a column for a beta."""
    findings = all_findings(write_cells(tmp_path, dict(BASE, torch_npu="2.10.0", cann="9.1.0-beta.1",
                                                       python="3.11"))[0])
    assert [f.rule for f in findings if f.rule.startswith("cann-d") or f.rule == "cann-mismatch"] == ["cann-downstream"]


def test_kb_torch_npu_prints_the_tables_of_its_line():
    from builder.cli.kb import describe_torch_npu
    rows = describe_torch_npu(knowledge.load(), "2.6.0.post3")["cann_tables"]
    assert rows[0] == {"pta": "7.2.0", "compatible": "8.3.RC1, 8.2.RC1, 8.1.RC1, 8.0.0, 8.0.RC3, 8.0.RC2",
                       "not_compatible": "9.0.0, 8.5.0",
                       "source": "Ascend/pytorch@v26.1.0-beta.2-pytorch2.7.1:docs/zh/release_notes/release_notes.md, line 52"}
    assert len(rows) == 6 and all(r["pta"] == "7.2.0" for r in rows)


def test_validate_of_a_published_table_row_is_quick_to_write(tmp_path):
    """One cell per row of a fresh table: `by_rule` finds the verdict (a guard against a silent no-op)."""
    path, _ = write_cells(tmp_path, dict(BASE, torch_npu="2.9.0", cann="8.0.RC3"))
    assert by_rule(all_findings(path), "cann-mismatch")


def test_kb_says_of_every_data_file_whether_it_is_parsed_or_hand_kept():
    listed = {f["file"]: f["how"] for f in published.facts()}
    on_disk = {p.name for p in knowledge.DATA_DIR.iterdir() if p.suffix in (".yaml", ".json")}
    assert set(listed) == on_disk  # a new data file must say which it is
    assert {k.data_file for k in published.KINDS} == {f for f, how in listed.items() if how == "parsed"}


# --- MindCluster's version mapping -------------------------------------------------------------


def _mindcluster(ref: str):
    from builder.releases import mindcluster_notes
    path = published.FIXTURES / "mind-cluster" / ref / "release_notes.md"
    return mindcluster_notes.read(path.read_text(encoding="utf-8").partition("\n")[2], ref)


def test_both_shapes_of_mindclusters_version_mapping_are_read():
    [row] = _mindcluster("v26.0.0")  # 产品名称 | 版本, an "Ascend HDK" row above a "CANN" row
    assert (row.line, row.cann) == (36, "9.0.0")
    assert row.hdk == (("Atlas 350 加速卡", "25.1.RC1"), ("Atlas 850 系列硬件产品", "25.1.RC1"),
                       ("Atlas 950 SuperPoD", "25.1.RC1"), ("其他产品", "26.0.RC1"))
    [row] = _mindcluster("master")   # MindCluster | CANN | HDK | ...
    assert (row.line, row.cann) == (35, "9.1.0")
    assert row.hdk == (("Atlas 350 标卡", "25.7.RC1"), ("Atlas 950 SuperPoD", "25.1.RC1"),
                       ("Atlas 850 Server", "25.6.RC1"), ("其他产品", "26.1.0"))
    [row] = _mindcluster("v26.1.0.beta.2")  # one HDK for every product
    assert row.hdk == (("", "26.1.0"),)


def test_product_names_are_matched_by_their_model_words_and_families_match_none():
    from builder.releases import mindcluster_notes
    products = knowledge.load().drivers.products()
    assert [mindcluster_notes.product_id(n, products) for n in (
        "Atlas 350 标卡", "Atlas 850 Server", "Atlas 850 系列硬件产品", "Atlas 950 SuperPoD", "其他产品",
        "Atlas A2/A3 系列产品", "Ascend 950 系列产品")] == [
        "atlas-350", "atlas-850", "atlas-850", "atlas-950-superpod", "other_products", None, None]


def test_a_mindcluster_page_without_its_version_mapping_is_refused_naming_it():
    from builder.releases import mindcluster_notes
    with pytest.raises(UserError, match="notes/x: no version mapping of CANN and Ascend HDK found"):
        mindcluster_notes.read("# 版本说明\n\n## 相关产品版本配套说明\n\n|a|b|\n|--|--|\n|1|2|\n", "notes/x")
    bad = mindcluster_notes.EXAMPLE.replace("26.0.RC1", "soon")
    with pytest.raises(UserError, match=r"doc:5: no HDK version in '其他产品：soon'"):
        mindcluster_notes.read(bad, "doc")


def test_what_releases_check_wrote_of_each_release_agrees_with_every_kept_wheel():
    """``torch_npu_releases[]``'s requires_dist, Python tags and manylinux floor are written by
    `releases check --write` from the index; every wheel kept under pypi-torch-npu/ (parsed into
    torch-npu-requires.yaml) says the same: each Python tag written has a kept wheel, and it declares
    that Requires-Dist."""
    from packaging.requirements import Requirement

    from builder.knowledge import wheel_requires

    kb = knowledge.load()
    checked = 0
    for version in kb.releases.torch_npu_versions():
        release = kb.releases.torch_npu(version)
        assert release is not None
        for arch in ("x86_64", "aarch64"):
            written = sorted(str(Requirement(r.strip())) for r in release.requires_dist.get(arch, "").split(",") if r.strip())
            for python in release.python.get(arch, ()):
                declared = wheel_requires.requires(version, arch, python)
                assert declared is not None, (version, arch, python)  # a tag without a kept wheel
                assert sorted({str(Requirement(r)) for r in declared if "extra ==" not in r}) == written, (version, arch)
                checked += 1
    assert checked >= 480


@pytest.mark.parametrize("plant", ["fifo", "bytes", "huge"])
def test_a_kept_document_that_is_no_text_file_is_refused_by_name(tmp_path, plant):
    import os
    folder = tmp_path / "ascend-pytorch" / "v9.9.9-pytorch2.7.1"
    folder.mkdir(parents=True)
    path = folder / "release_notes.md"
    if plant == "fifo":
        os.mkfifo(path)  # a FIFO with no writer: refused, never waited on
    elif plant == "bytes":
        path.write_bytes(b"\xff\xfe<!-- x -->")
    else:
        with open(path, "wb") as out:
            out.truncate(published.DOCUMENT_MAX + 1)
    caught = refused_promptly(lambda: published.kept(tmp_path / "ascend-pytorch"), path)
    assert str(path) in caught.message
    assert {"fifo": "not a regular file", "bytes": "not UTF-8 text", "huge": "larger than"}[plant] in caught.message
