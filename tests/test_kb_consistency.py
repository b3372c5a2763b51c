"""The knowledge base agrees with itself: every cross-reference in builder/data resolves,
and every pairing the knowledge base itself lists passes `validate`.

The walk reads the data files directly (not only through builder.knowledge), so an entry
the lookup tables would skip silently (a CANN spelled no way versions.cann reads, a
torch_npu pairing with a release nobody lists) fails here by name.
"""

from __future__ import annotations

import re
from typing import Dict, List, Tuple

import pytest
import yaml

from builder import installers, knowledge, python_env, versions
from builder.images import checks, matrix
from builder.knowledge import compat_tables
from tests.support.matrix import cell_index, write_cells

DATA = knowledge.DATA_DIR

# Pre-releases the knowledge base pairs torch_npu with although no official image fetched
# them, so their download folder is unknown (cann-downloads.yaml, prerelease_folders): a
# cell brings their installers (cann_source: local, with sha256). Each is named with why.
FOLDER_UNKNOWN = {
    "8.0.RC2.alpha002": "named only by Ascend/pytorch's README (torch_npu 2.3.1rc1); no official image",
    "8.0.RC3.alpha001": "named only by Ascend/pytorch's README (torch_npu 2.4.0rc1); no official image",
    "8.0.0.alpha001": "named only by Ascend/pytorch's README (torch_npu 2.5.1rc1); no official image",
}


def _yaml(name):
    return yaml.safe_load((DATA / name).read_text())


@pytest.fixture(scope="module")
def kb():
    return knowledge.load()


@pytest.fixture(scope="module")
def compat():
    return _yaml("ascend-compat.yaml")


def _known(kb, cann) -> bool:
    wanted = versions.lenient("cann", str(cann))
    return wanted is not None and any(versions.cann(k) == wanted for k in kb.releases.cann_releases())


def _pairings(compat):
    """(torch_npu, CANN, where) of every pairing the data states: parsed from a published table
    (torchnpu-tables.yaml) or hand-kept with its source (ascend-compat.yaml)."""
    kb = knowledge.load()
    for item in compat["torch_npu_releases"]["items"]:
        release = kb.releases.torch_npu(str(item["version"]))
        if release is not None and release.cann:
            yield release.version, release.cann, "torch_npu_releases"
    for item in compat["torch_npu_not_on_pypi"]["items"]:
        if item.get("cann"):
            yield str(item["version"]), str(item["cann"]), "torch_npu_not_on_pypi"
    for pair in compat["downstream_pairings"]["pairs"]:
        yield str(pair["torch_npu"]), str(pair["cann"]), "downstream_pairings"


def test_every_cann_a_torch_npu_pairs_with_is_a_known_release_with_hdk_and_installers(kb, compat):
    pairings = list(_pairings(compat))
    assert len(pairings) >= 71
    unknown = sorted({(c, where) for _, c, where in pairings if not _known(kb, c)})
    assert unknown == []
    for cann in sorted({c for _, c, _ in pairings}, key=versions.cann):
        assert kb.drivers.min_driver(cann) is not None, cann
        assert kb.drivers.hdk_known(kb.drivers.min_driver(cann))[0] or versions.lenient("hdk", kb.drivers.min_driver(cann)) is not None, cann
        for arch in knowledge.ARCHES:
            kinds = [i.kind for i in installers.cann_installers(kb, cann, "910b", arch)]
            if kb.releases.canonical_cann(cann) in FOLDER_UNKNOWN:
                assert kinds == [], cann
            else:
                assert kinds == ["toolkit", "ops"], (cann, arch)


def test_the_listed_exceptions_are_exactly_the_pre_releases_without_a_folder(kb, compat):
    no_folder = {kb.releases.canonical_cann(c) for _, c, _ in _pairings(compat) if kb.downloads.cann_release_folder(c) is None
                 and kb.releases.cann_package(c) is None}
    assert no_folder == set(FOLDER_UNKNOWN)


def test_every_cross_reference_of_the_data_resolves(kb, compat):
    downloads = _yaml("cann-downloads.yaml")
    env = _yaml("python-env.yaml")
    # every CANN named anywhere is a release the knowledge base knows
    named = [downloads["nnal"]["since"], *downloads["prerelease_folders"]]
    for item in env["cann_python"]["constraints"]:
        named += [item["cann_from"]] + ([item["below"]] if item.get("below") else [])
    for item in env["cann_python"].get("python", []):
        named.append(item["cann"])
    named += [kb.drivers.chip_min_cann(c) for c in kb.drivers.chips() if kb.drivers.chip_min_cann(c)]
    assert [c for c in named if not _known(kb, c)] == []
    # every pre-release folder is one of that release's own official images' folders
    for cann, entry in downloads["prerelease_folders"].items():
        assert re.fullmatch(r"Ascend/cann-container-image@[0-9a-f]{40}:(cann|manylinux)/\S+/Dockerfile", entry["source"])
        assert kb.downloads.cann_release_folder(cann) == entry["folder"]
    # every HDK a CANN release is paired with is an HDK the knowledge base names
    for entry in compat["cann_hdk"]["releases"]:
        paired = kb.drivers.paired_hdk(str(entry["version"]))
        if paired and not paired.upper().endswith(".X"):
            assert kb.drivers.hdk_known(paired)[0], (entry["version"], paired)
    # every downstream pairing names a torch_npu on PyPI, one Huawei names without PyPI files,
    # or a build the downstream fetched itself (a dev or local version)
    for pair in compat["downstream_pairings"]["pairs"]:
        name, version = str(pair["torch_npu"]), versions.python_package(str(pair["torch_npu"]))
        assert kb.releases.torch_npu(name) or kb.releases.unpublished(name) or version.is_devrelease or version.local, pair
    # every torch_npu release's Python tags and manylinux tags name each arch it has wheels for
    for name in kb.releases.torch_npu_versions():
        release = kb.releases.torch_npu(name)
        assert set(release.python) <= set(knowledge.ARCHES) and set(release.manylinux) <= set(knowledge.ARCHES)
    # every base OS the matrix may name carries glibc and Python
    assert all(kb.environment.os_info(o).glibc >= (2, 17) and kb.environment.os_info(o).python for o in kb.environment.os_ids())


def _cells(kb, compat):
    """One cell per pairing, arch and Python the torch_npu wheel and CANN's stated range both allow."""
    cells: List[Tuple[str, dict]] = []
    for npu, cann, where in _pairings(compat):
        release = kb.releases.torch_npu(npu)
        if release is None:  # not on PyPI: the torch_npu-published rule refuses it by design
            continue
        for arch in knowledge.ARCHES:
            for py in release.python.get(arch, ()):
                stated = python_env.python_range(cann)
                if stated is not None and not stated.allows(py):  # outside the guide: python-outside-cann
                    continue
                cell = {"name": f"kb-{len(cells)}", "cann": cann, "chip": "910b", "os": "ubuntu22.04", "env": "conda",
                        "python": py, "arch": arch, "torch_npu": npu}
                if kb.releases.canonical_cann(cann) in FOLDER_UNKNOWN:
                    cell["cann_source"] = {"local": "/srv/cann"}
                    cell["sha256"] = {installers.package(kb, k, cann, "910b", arch): "0" * 64
                                      for k in installers.kinds(False)}
                cells.append((where, cell))
    return cells


def test_every_pairing_the_knowledge_base_lists_validates(kb, compat, tmp_path):
    cells = _cells(kb, compat)
    path = tmp_path / "kb.yaml"
    path.write_text(yaml.safe_dump({"image": "kb/consistency", "cells": [c for _, c in cells]}))
    loaded = matrix.load(path)
    assert loaded.findings == []
    errors: Dict[tuple, List[str]] = {}
    for f in checks.check(loaded.cells, kb):
        if f.severity == "error":
            cell = cells[cell_index(f.field)]
            errors.setdefault((cell[0], cell[1]["torch_npu"], cell[1]["cann"], cell[1]["arch"]), []).append(f.rule)
    assert errors == {}
    assert len(cells) >= 380
    # every pairing of a torch_npu on PyPI has at least one Python both allow
    walked = {(c["torch_npu"], c["cann"]) for _, c in cells}
    listed = {(n, c) for n, c, _ in _pairings(compat) if kb.releases.torch_npu(n) is not None}
    assert listed == walked


def test_a_pre_release_without_a_known_folder_is_refused_with_the_way_out(kb, tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({"image": "kb/x", "cells": [{"cann": "8.0.RC2.alpha002", "chip": "910b",
                                    "os": "ubuntu22.04", "env": "conda", "python": "3.10", "arch": "x86_64",
                                    "torch_npu": "2.3.1rc1", "cann_source": "installer"}]}))
    found = [f for f in checks.check(matrix.load(path).cells, kb) if f.severity == "error"]
    assert [f.rule for f in found] == ["installer-unknown"]
    assert "cann_source: {local: DIR}" in found[0].fix


def test_python_env_reads_every_cann_it_names(kb):
    # a constraint whose bounds do not parse would silently never apply
    for item in _yaml("python-env.yaml")["cann_python"]["constraints"]:
        assert python_env.constraints(item["cann_from"]), item


def test_the_allocator_default_is_a_key_every_release_it_is_set_for_parses(kb):
    variable = "PYTORCH_NPU_ALLOC_CONF"
    later = [v for v in kb.releases.torch_npu_versions() if python_env.default_env(v)]
    assert len(later) > 50
    for version in later:
        for var, value in python_env.default_env(version):
            assert var == variable
            # False would mean the image's own default stops torch_npu at its first allocation
            assert all(python_env.accepts(variable, key, version) is not False for key in python_env.option_keys(value))


def test_every_torch_npu_on_pypi_has_its_allocator_keys_unless_no_tag_can_say(kb):
    """A release between two tagged releases of its line is answered; the rest are release
    candidates (tagged alpha, not read) or newer than the snapshot's newest tag of their line."""
    variable = "PYTORCH_NPU_ALLOC_CONF"
    table = _yaml("python-env.yaml")["torch_npu_env"][variable]["releases"]
    assert len(table) >= 79
    assert all(re.fullmatch(r"[0-9a-f]{40}", e["commit"]) and e["keys"] and e["files"] for e in table.values())
    unanswered = [v for v in kb.releases.torch_npu_versions() if python_env.accepts(variable, "max_split_size_mb", v) is None]
    for version in unanswered:
        parsed = versions.python_package(version)
        newest = python_env.newest(variable, version)
        assert parsed.pre or not newest or parsed > versions.python_package(newest), version
    assert len(unanswered) < len(kb.releases.torch_npu_versions()) / 2


def test_every_piece_of_disagreeing_evidence_names_what_the_knowledge_base_knows(kb, compat):
    env = _yaml("python-env.yaml")["cann_python"]
    for item in env["shipped"]:
        assert [c for c in item["evidence"] if not _known(kb, c)] == []
        assert all(re.fullmatch(r"vllm-project/vllm-ascend@v[\w.]+:Dockerfile", e) for e in item["evidence"].values())
    for item in env["python"]:  # a Python shipped outside the guide's range is outside it
        stated = python_env.python_range(item["cann"])
        assert stated is not None, item["cann"]
        assert [d["python"] for d in item.get("shipped", ()) if stated.allows(d["python"])] == []
    for entry in compat["cann_hdk"]["releases"]:
        named = [str(h) for h in (entry.get("downstream_hdk") or {}).get("hdk", ())]
        assert all(kb.drivers.hdk_known(h)[0] for h in named), entry["version"]
        if named:  # some of it lies below CANN's own minimum, else it would not disagree
            minimum = versions.hdk(kb.drivers.min_driver(str(entry["version"])))
            assert any(versions.hdk(h) < minimum for h in named), entry["version"]


def test_every_pair_a_published_table_or_window_lists_validates(kb, compat, tmp_path):
    """Every torch_npu on PyPI whose PTA release a parsed table row (torchnpu-tables.yaml) or a
    hand-kept window marks compatible with a CANN release validates with it, without an error."""
    windows = compat["pta_lines"]["compat_windows"]
    assert windows and kb.releases.compat_windows()
    for window in windows:
        assert window["source"] and all(s in compat["sources"] for s in window["source"]), window
        assert [c for c in window["cann"] if not _known(kb, c)] == [], window
    finals = [c for c in kb.releases.cann_releases() if versions.cann(c).key[4] == 2]  # no alphas or betas
    tables = kb.releases.tables
    for row in tables.rows:  # every column a row marks compatible is a release the knowledge base knows
        assert [c for c in row.compatible if not any(compat_tables.column_matches(c, k) for k in finals)] == [], row
    cells: List[dict] = []
    for npu in kb.releases.torch_npu_versions():
        pta = kb.releases.pta_of(npu)
        for cann in finals if pta else ():
            fit = kb.releases.cann_fit(npu, cann)
            if fit is None or fit.kind != "window":
                continue
            stated = python_env.python_range(cann)
            pythons = [p for p in kb.releases.torch_npu(npu).python.get("aarch64", ()) if stated is None or stated.allows(p)]
            if pythons and kb.releases.cann_package(cann) is not None:  # installers known: nothing else refuses the cell
                cells.append({"name": f"w-{len(cells)}", "cann": cann, "chip": "910b", "os": "ubuntu22.04",
                              "env": "conda", "python": pythons[0], "arch": "aarch64", "torch_npu": npu})
    assert len(cells) >= 140
    path = tmp_path / "windows.yaml"
    path.write_text(yaml.safe_dump({"image": "kb/windows", "cells": cells}))
    loaded = matrix.load(path)
    errors = [(cells[cell_index(f.field)]["torch_npu"], cells[cell_index(f.field)]["cann"], f.rule)
              for f in checks.check(loaded.cells, kb) if f.severity == "error"]
    assert errors == []


def test_every_cann_release_has_a_python_range_with_a_source_or_the_not_checked_marker(kb):
    env = _yaml("python-env.yaml")["cann_python"]
    ranged = [str(i["cann"]) for i in env["python"]]
    marked = [str(i["cann"]) for i in env["python_not_checked"]]
    assert all(re.search(r"https?://\S+$", str(i["source"])) for i in env["python"])  # ends with the page read
    assert all(str(i["why"]).strip() for i in env["python_not_checked"])
    assert [c for c in ranged + marked if not _known(kb, c)] == []
    both = {kb.releases.canonical_cann(c) for c in ranged} & {kb.releases.canonical_cann(c) for c in marked}
    assert both == set()  # a range read and a marker would contradict each other
    for cann in kb.releases.cann_releases():  # exactly one of the two, for every release the knowledge base knows
        assert (python_env.python_range(cann) is not None) != bool(python_env.python_not_checked(cann)), cann
    # NNAL's Pythons, where stated, lie inside the release's own range, each with the guide's words
    for item in env["python"]:
        if item.get("nnal"):
            stated = python_env.python_range(str(item["cann"]))
            assert stated is not None and all(stated.allows(p) for p in item["nnal"]) and item["nnal_quote"], item


def test_every_hdk_per_product_table_names_known_products_and_each_row_validates(kb, compat, tmp_path):
    """The per-product HDK tables (parsed from MindCluster's notes, or kept by hand in
    ``cann_hdk.releases[].paired_hdk_by_product``) and the products (``chips.products``) agree:
    every value is an HDK the knowledge base names, every table names where it is published, every
    product is of a known chip and in some table; and a CANN-only cell of each product at its number
    validates on every arch with no error."""
    products = compat["chips"]["products"]["items"]
    assert len({str(p["id"]) for p in products}) == len(products)
    assert [p["id"] for p in products if str(p["chip"]) not in kb.drivers.chips()] == []
    tabled = set()
    cells = []
    for cann in kb.releases.cann_releases():
        table = kb.drivers.hdk_by_product(cann)
        if not table:
            continue
        assert kb.drivers.hdk_by_product_source(cann), cann
        assert [v for _, v in table if not kb.drivers.hdk_known(v)[0]] == [], cann
        for product_id, hdk in table:
            if product_id == knowledge.OTHER_PRODUCTS:
                continue
            tabled.add(product_id)
            product = kb.drivers.product(product_id)
            assert kb.drivers.min_driver(cann, product.id) == hdk
            cells += [{"os": "ubuntu22.04", "arch": arch, "chip": product.chip, "cann": cann,
                       "python": "3.11", "product": product.id, "min_driver": hdk} for arch in ("aarch64", "x86_64")]
    assert tabled == {str(p["id"]) for p in products}  # a product no table names would change nothing
    assert len(cells) >= 12
    path, _ = write_cells(tmp_path, *cells)
    loaded = matrix.load(path)
    assert loaded.findings == []
    assert [(f.field, f.rule) for f in checks.check(loaded.cells, kb) if f.severity == "error"] == []


def test_every_cann_release_has_an_os_list_with_its_page_or_the_not_checked_marker(kb):
    """``os.yaml``'s ``cann_os``: every release the knowledge base knows has its guide's OS list
    (with the page it was read on) or an os_not_checked entry with why, never both and never
    neither; every os id's family is spelled for the guides, and every such family is named by
    some list (else the rule could never tell it apart)."""
    cann_os = _yaml("os.yaml")["cann_os"]
    listed_ = [str(i["cann"]) for i in cann_os["listed"]]
    marked = [str(i["cann"]) for i in cann_os["os_not_checked"]]
    assert all(re.search(r"https?://\S+$", str(i["source"])) for i in cann_os["listed"])
    assert all(i["os"] and isinstance(i.get("complete", True), bool) for i in cann_os["listed"])
    assert all(str(i["why"]).strip() for i in cann_os["os_not_checked"])
    assert [c for c in listed_ + marked if not _known(kb, c)] == []
    assert len(listed_ + marked) == len({kb.releases.canonical_cann(c) for c in listed_ + marked})  # each release once
    for cann in kb.releases.cann_releases():
        assert (kb.environment.cann_os(cann) is not None) != bool(kb.environment.cann_os_not_checked(cann)), cann
    assert [o for o in kb.environment.os_ids() if kb.environment.os_family_name(o) is None] == []
    for family in cann_os["family_names"].values():
        assert any(kb.environment.cann_os(c).names(family) for c in listed_), family
