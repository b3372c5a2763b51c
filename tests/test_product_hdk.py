"""The HDK per product: where a CANN release numbers its HDK apart per product (MindCluster's
release notes, parsed: for CANN 9.1.0 Atlas 950 SuperPoD 25.1.RC1, Atlas 350 25.7.RC1, Atlas 850
25.6.RC1, the rest 26.1.0; for 9.0.0 Atlas 350 1.0.RC1, Atlas 850 and the SuperPoD 25.1.RC1, the
rest 26.0.RC1), a cell's ``product:`` picks the number, and validate's rule, the
image's min-driver label and driver guard, a node's NFD ordinal and `k8s job`'s affinity all
use it. Without ``product:`` nothing changes: the CANN's own minimum, as before.
"""

from __future__ import annotations

import copy

from builder import knowledge, versions
from builder.images import checks, matrix, plan
from builder.images.blocks import DriverGuard
from builder.k8s import pod
from builder.knowledge.files import DATA_DIR, read_json, read_yaml
from builder.node import labels as keys
from builder.node import nfd
from builder.node.host import HostInfo
from builder.vocabulary import Label
from tests.support.matrix import write_cells

# A CANN-only 950 cell on CANN 9.1.0 (no torch_npu: the 950's torch_npu is not the point here).
SUPERPOD = {"os": "ubuntu22.04", "arch": "aarch64", "chip": "950", "cann": "9.1.0", "python": "3.11",
            "product": "atlas-950-superpod"}


def _kb_without(release: str) -> knowledge.KnowledgeBase:
    """The shipped knowledge base without MindCluster's rows for ``release``."""
    mindcluster = copy.deepcopy(read_yaml(DATA_DIR / knowledge.MINDCLUSTER_FILE))
    mindcluster["hdk"] = [r for r in mindcluster["hdk"] if str(r["cann"]) != release]
    return knowledge.KnowledgeBase(read_yaml(DATA_DIR / "ascend-compat.yaml"), read_json(DATA_DIR / "cann-packages.json"),
                                   read_yaml(DATA_DIR / "os.yaml"), read_yaml(DATA_DIR / "conda.yaml"),
                                   read_yaml(DATA_DIR / "cann-downloads.yaml"), read_yaml(DATA_DIR / "uv.yaml"),
                                   tables_doc=read_yaml(DATA_DIR / knowledge.TABLES_FILE), mindcluster_doc=mindcluster)


def _cells(tmp_path, *cells):
    path, lines = write_cells(tmp_path, *cells)
    loaded = matrix.load(path)
    return loaded, lines


def _rules(findings):
    return sorted((f.rule, f.severity) for f in findings if not f.rule.startswith(("lock-", "installer-sha256")))


def test_the_950_superpod_at_its_documented_driver_validates_and_below_it_is_refused(tmp_path):
    loaded, _ = _cells(tmp_path, dict(SUPERPOD, min_driver="25.1.RC1"))
    assert loaded.findings == []
    assert _rules(checks.check(loaded.cells)) == []
    low, lines = _cells(tmp_path, dict(SUPERPOD, min_driver="25.0.RC1"))
    [refusal] = [f for f in checks.check(low.cells) if f.rule == "driver-too-old"]
    assert refusal.severity == "error" and refusal.where is not None
    assert (refusal.field, refusal.where.line) == ("cells[0].min_driver", lines[(0, "min_driver")])
    assert refusal.message.startswith("min_driver 25.0.RC1 is below 25.1.RC1, the minimum HDK for CANN 9.1.0 on "
                                      "atlas-950-superpod (its per-product HDK table (Ascend/mind-cluster@master:docs/zh/release_notes.md, line 35) pairs it with "
                                      "HDK 25.1.RC1 on Atlas 950 SuperPoD)")
    assert refusal.fix.startswith("leave min_driver out (it follows from CANN and product: 25.1.RC1)")


def test_the_same_cell_without_the_table_entry_is_refused_at_25_1_rc1(tmp_path):
    """The table entry is what lets the SuperPoD's number through: without it, the CANN's own
    minimum (25.2.RC1, from its release notes) refuses it."""
    loaded, _ = _cells(tmp_path, dict(SUPERPOD, min_driver="25.1.RC1"))
    bare = _kb_without("9.1.0")
    assert bare.drivers.min_driver("9.1.0", "atlas-950-superpod") == "25.2.RC1"
    assert ("driver-too-old", "error") in _rules(checks.check(loaded.cells, bare))


def test_each_product_takes_its_own_number_and_the_rest_the_canns(tmp_path):
    kb = knowledge.load()
    assert {p.id: kb.drivers.min_driver("9.1.0", p.id) for p in kb.drivers.products()} == {
        "atlas-950-superpod": "25.1.RC1", "atlas-350": "25.7.RC1", "atlas-850": "25.6.RC1"}
    assert kb.drivers.min_driver("9.1.0") == kb.drivers.min_driver("9.1.0", "") == "25.2.RC1"  # no product: as before
    loaded, _ = _cells(tmp_path, dict(SUPERPOD, product="atlas-350", min_driver="25.6.RC1"))
    assert ("driver-too-old", "error") in _rules(checks.check(loaded.cells))  # the 350's number is higher


def test_min_driver_left_out_follows_from_the_product():
    cell = matrix.complete(matrix.Cell(id="c", image="i", os="ubuntu22.04", arch="aarch64", chip="950", cann="9.1.0",
                                       driver="", firmware=None, python="3.11", torch="", torch_npu="",
                                       product="atlas-850"))
    assert cell.driver == "25.6.RC1"


def test_the_cell_id_names_the_product(tmp_path):
    loaded, _ = _cells(tmp_path, SUPERPOD, dict(SUPERPOD, product="atlas-350"))
    assert [c.id for c in loaded.cells] == ["cann9.1.0-950-atlas-950-superpod-ubuntu22.04-py3.11-aarch64",
                                            "cann9.1.0-950-atlas-350-ubuntu22.04-py3.11-aarch64"]


def test_a_950_cell_without_a_product_on_a_release_that_numbers_per_product_is_told(tmp_path):
    no_product = {k: v for k, v in SUPERPOD.items() if k != "product"}
    loaded, _ = _cells(tmp_path, no_product)
    [told] = [f for f in checks.check(loaded.cells) if f.rule == "product-unstated"]
    assert told.severity == "warning" and told.field == "cells[0].chip"
    assert "atlas-950-superpod 25.1.RC1, atlas-350 25.7.RC1, atlas-850 25.6.RC1; Ascend/mind-cluster@master:docs/zh/release_notes.md, line 35" in told.message
    assert told.fix.startswith("add product: atlas-950-superpod")
    assert loaded.cells[0].driver == "25.2.RC1"  # the CANN's own minimum, as before
    # a release with no per-product table, or another chip, says nothing
    older, _ = _cells(tmp_path, dict(no_product, cann="8.5.0"), dict(no_product, chip="910b"))
    assert [f for f in checks.check(older.cells) if f.rule.startswith("product")] == []


def test_a_product_of_another_chip_is_refused_and_an_unmapped_release_is_a_warning(tmp_path):
    loaded, lines = _cells(tmp_path, dict(SUPERPOD, chip="910b"), dict(SUPERPOD, cann="8.5.0"))
    found = {(f.rule, f.field): f for f in checks.check(loaded.cells) if f.rule.startswith("product")}
    chip = found[("product-chip", "cells[0].product")]
    assert chip.severity == "error" and chip.where is not None and chip.where.line == lines[(0, "product")]
    assert chip.message == "product atlas-950-superpod (Atlas 950 SuperPoD) is a chip 950 product; the cell's chip is 910b"
    unknown = found[("product-hdk-unknown", "cells[1].product")]
    assert unknown.severity == "warning"
    assert unknown.message.startswith("the knowledge base holds no HDK of Atlas 950 SuperPoD for CANN 8.5.0")
    assert loaded.cells[1].driver == knowledge.load().drivers.min_driver("8.5.0")


def test_an_unknown_product_is_a_schema_error_naming_the_products(tmp_path):
    loaded, lines = _cells(tmp_path, dict(SUPERPOD, product="atlas-950-superpot"))
    [f] = loaded.findings
    assert (f.rule, f.field, f.where.line) == ("schema-value", "cells[0].product", lines[(0, "product")])
    assert "did you mean 'atlas-950-superpod'?" in f.fix


def test_the_image_the_guard_the_nfd_ordinal_and_the_job_affinity_use_the_products_number(tmp_path):
    loaded, _ = _cells(tmp_path, SUPERPOD)
    [cell] = loaded.cells
    built = plan.plan(cell, knowledge.load(), "npu", "0" * 16)
    labels = dict(built.labels)
    assert (labels[Label.MIN_DRIVER], labels[Label.PRODUCT]) == ("25.1.RC1", "atlas-950-superpod")
    assert dict(built.block(DriverGuard).requirement)["ASCEND_REQUIRE_DRIVER"] == "25.1.RC1"
    spec = pod.PodSpec(image="r/i@sha256:" + "0" * 64, chip="950", arch="aarch64", npus=8, command=("python", "t.py"),
                       min_driver=labels[Label.MIN_DRIVER], chip_values=("Ascend950PR",), drivers=())
    terms = pod.affinity(spec)["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    [gt] = {e["values"][0] for t in terms for e in t["matchExpressions"] if e["key"] == keys.DRIVER_ORDINAL_LABEL}

    def node_ordinal(driver):
        return int(dict(nfd.features(HostInfo(arch="aarch64", driver=driver, soc="Ascend950PR"))[0])[keys.DRIVER_ORDINAL_LABEL])

    assert node_ordinal("25.1.rc1") > int(gt) >= node_ordinal("25.0.rc1")  # a SuperPoD node at its HDK fits, below it not
    assert int(gt) == versions.driver_ordinal(versions.hdk("25.1.RC1")) - 1


def test_a_cell_without_a_product_carries_no_product_label(tmp_path):
    loaded, _ = _cells(tmp_path, {k: v for k, v in SUPERPOD.items() if k != "product"})
    labels = dict(plan.plan(loaded.cells[0], knowledge.load(), "npu", "0" * 16).labels)
    assert Label.PRODUCT not in labels and labels[Label.MIN_DRIVER] == "25.2.RC1"


def test_kb_cann_shows_the_table_per_product():
    from builder.cli.kb import describe_cann

    d = describe_cann(knowledge.load(), "9.1.0")
    assert [(r["product"], r["paired_hdk"], r["min_driver"]) for r in d["hdk_by_product"]] == [
        ("atlas-950-superpod", "25.1.RC1", "25.1.RC1"), ("atlas-350", "25.7.RC1", "25.7.RC1"),
        ("atlas-850", "25.6.RC1", "25.6.RC1"), ("other_products", "26.1.0", "25.2.RC1")]
    assert d["hdk_by_product_source"] == "Ascend/mind-cluster@master:docs/zh/release_notes.md, line 35"
    assert describe_cann(knowledge.load(), "8.5.0")["hdk_by_product"] == []


def test_two_releases_of_mindcluster_on_one_cann_merge_the_later_pages_word_winning():
    """MindCluster 26.0.0's notes pair CANN 9.0.0 with HDK 25.1.RC1 on the Atlas 350, 850 and SuperPoD;
    26.0.1's (and 26.1.0-beta.1's) name the Atlas 350 alone, with HDK 1.0.RC1: the later word wins for
    the 350, the earlier one stands for the products the later page does not name."""
    kb = knowledge.load()
    assert kb.drivers.hdk_by_product("9.0.0") == (("atlas-950-superpod", "25.1.RC1"), ("atlas-350", "1.0.RC1"),
                                          ("atlas-850", "25.1.RC1"), ("other_products", "26.0.RC1"))
    assert kb.drivers.min_driver_reason("9.0.0", "atlas-350")[1].endswith(
        "(Ascend/mind-cluster@v26.1.0.beta.1:docs/zh/release_notes.md, line 33) pairs it with HDK 1.0.RC1 on Atlas 350 card")
    assert kb.drivers.min_driver_reason("9.0.0", "atlas-850")[1].startswith(
        "its per-product HDK table (Ascend/mind-cluster@v26.0.0:docs/zh/release_notes.md, line 36)")
    assert kb.drivers.hdk_known("1.0.RC1") == (True, ())  # an HDK a parsed page names is a known release
