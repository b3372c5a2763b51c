"""builder.knowledge and the ``kb`` descriptions of builder.cli.kb (installer names:
test_installers.py): every expected value below was read from the data files
(builder/data/ascend-compat.yaml, cann-packages.json, os.yaml, conda.yaml) or from
docs/ascend-facts.md, not derived from the code under test."""

from __future__ import annotations

import doctest
import json
import re
import time

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

from builder import installers, knowledge, versions, vocabulary
from builder.cli import kb as cli_kb
from builder.cli.kb import describe_cann, describe_torch_npu
from builder.errors import UserError
from builder.knowledge import OsInfo, TorchNpu, load
from tests.support.matrix import REPO

DATA = knowledge.DATA_DIR


@pytest.fixture(scope="module")
def kb():
    return load()


@pytest.fixture(scope="module")
def raw():
    with open(DATA / "ascend-compat.yaml") as fh:
        return yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@pytest.fixture(scope="module")
def packages():
    with open(DATA / "cann-packages.json") as fh:
        return json.load(fh)


# -- loading -----------------------------------------------------------------------------


def test_load_is_cached(kb):
    assert load() is load()
    assert load() is kb


# The parts a loaded knowledge base holds, by attribute name, and what each is.
PARTS = {"releases": knowledge.pairings.Releases, "environment": knowledge.environment.Environment,
         "drivers": knowledge.drivers.Drivers, "downloads": knowledge.downloads.Downloads}


def test_the_facade_holds_the_parts_and_nothing_else(kb):
    """No method of a part under a flat name of the facade: a caller names the part (``kb.drivers.min_driver``)."""
    assert sorted(vars(kb)) == sorted([*PARTS, "additions"])
    assert {name: type(getattr(kb, name)) for name in PARTS} == PARTS
    assert [name for name in dir(knowledge.KnowledgeBase) if not name.startswith("_")] == []


def _part_methods():
    """Each public method name of the four parts, with the part that answers it."""
    return {name: part for part, cls in PARTS.items() for name in dir(cls) if not name.startswith("_")}


def test_no_caller_asks_a_part_method_of_the_facade():
    """No module (builder/, tests/, benchmarks/, scripts/) nor docs page asks a part's method of the
    facade (``kb.<method>``, ``self.kb.<method>``, ``knowledge.load().<method>``): the facade has none."""
    methods = _part_methods()
    assert {"min_driver", "torch_npu", "os_info", "cann_release", "product_first_release"} <= set(methods)
    names = "|".join(sorted(methods, key=len, reverse=True))
    through_kb = re.compile(rf"(?<![\w.])(?:\w+\.)*_?kb\.({names})\b|(?<![\w.])(?:knowledge\.)?load\(\)\.({names})\b")
    # builder.knowledge's own module functions (chip_min_cann...) are no part's, when called on the module
    on_module = re.compile(rf"\bknowledge\.({names})\b")
    module_functions = set(vars(knowledge))
    files = [p for folder in ("builder", "tests", "benchmarks", "scripts") for p in (REPO / folder).rglob("*.py")]
    files += [*(REPO / "docs").rglob("*.md"), REPO / "README.md"]
    found = []
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            hits = [m.group(0) for m in through_kb.finditer(line)]
            hits += [m.group(0) for m in on_module.finditer(line) if m.group(1) not in module_functions]
            found += [f"{path.relative_to(REPO)}:{number}: {hit}" for hit in hits]
    assert len(files) > 300 and found == []


def test_module_examples_hold():
    parts = (knowledge, knowledge.pairings, knowledge.environment, knowledge.drivers, knowledge.downloads, knowledge.ascend_errors)
    results = [doctest.testmod(part, optionflags=doctest.ELLIPSIS) for part in parts]
    assert sum(r.attempted for r in results) > 20
    assert sum(r.failed for r in results) == 0


def test_queries_are_fast(kb):
    """1,000 cells' worth of lookups stays well under the 1 s budget of validate+render."""
    start = time.perf_counter()
    for i in range(1000):
        v = ("2.1.0.post3", "2.4.0", "2.7.1.post2", "2.13.0")[i % 4]
        c = ("8.0.RC1", "8.0.RC3", "8.5.0", "9.0.0")[i % 4]
        arch = ("x86_64", "aarch64")[i % 2]
        kb.releases.torch_npu(v)
        kb.environment.torch_requirement(v, arch)
        kb.environment.glibc_floor(v, arch)
        kb.drivers.min_driver(c)
        kb.drivers.paired_firmware(kb.drivers.min_driver(c), "910b")
        installers.ops_package(kb, "910b", c, arch)
        installers.cann_installers(kb, c, "910b", arch)
        kb.releases.torch_npu_for_cann(c)
    assert time.perf_counter() - start < 0.5


# -- torch_npu ---------------------------------------------------------------------------


def test_all_67_pypi_releases_are_known(kb, raw):
    items = raw["torch_npu_releases"]["items"]
    assert len(items) == 67
    for item in items:
        rel = kb.releases.torch_npu(item["version"])
        assert isinstance(rel, TorchNpu)
        assert rel.version == item["version"]
    listed = kb.releases.torch_npu_versions()
    assert len(listed) == 67
    assert set(listed) == {item["version"] for item in items}
    assert listed == sorted(listed, key=Version)
    assert listed[0] == "2.1.0rc1" and listed[-1] == "2.14.0"


def test_2_1_0rc1_pairs_with_cann_7_0_rc1(kb):
    for spelling in ("2.1.0rc1", "2.1.0.rc1", "2.1.0-rc1"):
        rel = kb.releases.torch_npu(spelling)
        assert rel is not None and rel.version == "2.1.0rc1"
    rel = kb.releases.torch_npu("2.1.0.rc1")
    assert rel.cann == "7.0.RC1"
    assert rel.torch == "2.1.0"
    assert rel.python == {"x86_64": ("3.8", "3.9", "3.10"), "aarch64": ("3.8", "3.9", "3.10")}
    assert rel.prerelease is True
    assert rel.requires_torch == {"x86_64": "", "aarch64": ""}
    assert rel.manylinux == {"x86_64": "2_17", "aarch64": "2_17"}
    assert rel.branch == "v2.1.0-5.0.rc3"
    assert rel.sources == ("PYPI_SIMPLE_JSON", "PYPI_WHEEL_METADATA")
    assert [r.version for r in kb.releases.torch_npu_for_cann("7.0.RC1")] == ["2.1.0rc1"]


def test_2_1_0_post5_was_never_published(kb):
    assert kb.releases.torch_npu("2.1.0.post5") is None
    assert kb.releases.unpublished("2.1.0.post5") is None
    with pytest.raises(UserError) as err:
        describe_torch_npu(kb, "2.1.0.post5")
    assert err.value.exit_code == 1
    assert "2.1.0.post4" not in err.value.fix  # only PyPI releases are offered
    assert "2.1.0.post3" in err.value.fix


def test_unpublished_entry(kb):
    entry = kb.releases.unpublished("2.1.0.post4")
    assert entry == {"version": "2.1.0.post4", "cann": "8.0.RC1", "branch": "v2.1.0-6.0.rc1", "source": ["PTA_COMPAT"]}
    entry["cann"] = "changed"
    assert kb.releases.unpublished("2.1.0.post4")["cann"] == "8.0.RC1"  # a copy, not the cached data
    assert kb.releases.torch_npu("2.1.0.post4") is None
    described = describe_torch_npu(kb, "2.1.0.post4")
    assert described["on_pypi"] is False and described["cann"] == "8.0.RC1"


def test_2_3_1_has_no_cp311(kb):
    rel = kb.releases.torch_npu("2.3.1")
    assert rel.python == {"x86_64": ("3.8", "3.9", "3.10"), "aarch64": ("3.8", "3.9", "3.10")}
    assert kb.releases.torch_npu("2.3.1.post2").python["x86_64"] == ("3.8", "3.9", "3.10", "3.11")
    # Huawei's table lists 3.11 for the 2.3.1 line: the wheel tags are what counts
    assert "3.11" in kb.environment.python_official("2.3.1")


def test_requires_torch_is_the_torch_part_of_requires_dist(kb):
    assert kb.releases.torch_npu("2.1.0.post3").requires_torch == {"x86_64": "torch==2.1.0+cpu", "aarch64": "torch==2.1.0"}
    assert kb.releases.torch_npu("2.7.1.post11").requires_torch == {"x86_64": "torch==2.7.1+cpu", "aarch64": "torch==2.7.1"}
    assert kb.releases.torch_npu("2.7.1.post11").requires_dist["x86_64"] == "torch==2.7.1+cpu, numpy, pyyaml"
    assert kb.releases.torch_npu("2.13.0").requires_torch == {"x86_64": "torch==2.13.0.*", "aarch64": "torch==2.13.0.*"}
    assert kb.releases.torch_npu("2.12.0").requires_torch["x86_64"] == "torch==2.12.0"


def test_torch_requirement_rule_per_arch_and_era(kb):
    assert kb.environment.torch_requirement("2.1.0.post3", "x86_64") == ("torch==2.1.0+cpu", "pytorch-cpu")
    assert kb.environment.torch_requirement("2.1.0.post3", "aarch64") == ("torch==2.1.0", "pypi")
    assert kb.environment.torch_requirement("2.13.0", "x86_64") == ("torch==2.13.0", "pypi")
    assert kb.environment.torch_requirement("2.13.0", "aarch64") == ("torch==2.13.0", "pypi")
    assert kb.environment.torch_requirement("2.11.0.post3", "x86_64") == ("torch==2.11.0+cpu", "pytorch-cpu")
    assert kb.environment.torch_requirement("2.12.0", "x86_64") == ("torch==2.12.0", "pypi")
    # no Requires-Dist in the wheel: the era rule still applies
    assert kb.environment.torch_requirement("2.1.0rc1", "x86_64") == ("torch==2.1.0+cpu", "pytorch-cpu")
    # named by Huawei but not on PyPI: torch is the version's release part
    assert kb.environment.torch_requirement("2.4.0.post3", "aarch64") == ("torch==2.4.0", "pypi")
    assert kb.environment.torch_requirement("2.4.0", "amd64") == ("torch==2.4.0+cpu", "pytorch-cpu")
    with pytest.raises(UserError):
        kb.environment.torch_requirement("2.4.0", "riscv64")


def test_torch_requirement_satisfies_every_wheels_requires_dist(kb, raw):
    for item in raw["torch_npu_releases"]["items"]:
        for arch, requires in item["requires_dist"].items():
            torch_req = next((p.strip() for p in requires.split(",") if p.strip().startswith("torch")), "")
            if not torch_req:
                continue
            pin, _ = kb.environment.torch_requirement(item["version"], arch)
            pinned = pin.split("==", 1)[1]
            assert Requirement(torch_req).specifier.contains(pinned, prereleases=True), (item["version"], arch)


def test_torch_npu_for_cann_compares_cann_versions(kb):
    # torch_npu_releases with cann: 8.0.RC2 are 2.1.0.post6, 2.2.0.post2, 2.3.1
    expected = ["2.3.1", "2.2.0.post2", "2.1.0.post6"]
    assert [r.version for r in kb.releases.torch_npu_for_cann("8.0.RC2")] == expected
    assert [r.version for r in kb.releases.torch_npu_for_cann("8.0.RC2.beta1")] == expected
    assert [r.version for r in kb.releases.torch_npu_for_cann("8.0.RC2.alpha002")] == ["2.3.1rc1"]
    assert kb.releases.torch_npu_for_cann("5.0.RC1") == []
    assert kb.releases.torch_npu_for_cann("garbage") == []


def test_glibc_floors(kb):
    assert kb.environment.glibc_floor("2.5.1", "x86_64") == (2, 17)
    assert kb.environment.glibc_floor("2.5.1", "aarch64") == (2, 17)
    assert kb.environment.glibc_floor("2.6.0", "x86_64") == (2, 17)  # 2.6.0 is mixed
    assert kb.environment.glibc_floor("2.6.0", "aarch64") == (2, 28)
    assert kb.environment.glibc_floor("2.7.1", "x86_64") == (2, 28)
    assert kb.environment.glibc_floor("2.13.0", "aarch64") == (2, 28)
    assert kb.environment.glibc_floor("2.1.0.post5", "x86_64") is None


def test_lookups_are_lenient(kb):
    assert kb.releases.torch_npu("not a version") is None
    assert kb.releases.torch_npu("") is None
    assert kb.drivers.paired_hdk("garbage") is None
    assert kb.drivers.min_driver("") is None
    assert kb.drivers.paired_firmware(None, "910b") is None
    assert kb.drivers.firmware_range("nope") is None
    assert installers.cann_installers(kb, "8.0", "910b", "x86_64") == []


# -- CANN, driver, firmware --------------------------------------------------------------


def test_cann_releases_cover_both_sources_in_order(kb, raw, packages):
    known = kb.releases.cann_releases()
    assert set(packages["cann"]) <= set(known)
    assert {e["version"] for e in raw["cann_hdk"]["releases"]} <= set(known)
    assert known == sorted(known, key=versions.cann)
    assert known[0] == "6.0.RC1"
    assert known.index("8.5.0.alpha001") < known.index("8.5.0") < known.index("9.0.0-beta.1") < known.index("9.0.0")


def test_paired_hdk(kb, packages):
    assert kb.drivers.paired_hdk("7.0.RC1") == "23.0.RC3"
    assert packages["cann"]["7.0.RC1"]["requires"] == [{"name": "NPU", "version": "23.0.RC3"}]
    assert kb.drivers.paired_hdk("8.0.RC3") == "24.1.RC3"
    assert kb.drivers.paired_hdk("8.0.RC2.beta1") == "24.1.RC2"
    # several listed (26.0.RC1, 25.5.2, 25.5.1): the lowest
    assert kb.drivers.paired_hdk("8.5.2") == "25.5.1"
    assert kb.drivers.paired_hdk("9.0.1") == "25.5.1"
    assert kb.drivers.paired_hdk("9.1.0") == "26.0.RC1"
    assert kb.drivers.paired_hdk("8.5.1") is None  # only a prose note in the data
    assert kb.drivers.paired_hdk("4.0.0") is None


def test_min_driver(kb):
    assert kb.drivers.min_driver("7.0.RC1") == "23.0.RC3"
    assert kb.drivers.min_driver("8.0.0") == "24.1.0"
    # min_hdk_line 25.0.X (8.5.0, 9.0.0), 25.2.X (9.1.0), 25.3.X (9.2.0): that line's floor
    assert kb.drivers.min_driver("8.5.0") == versions.hdk_line_floor("25.0.X").text
    assert kb.drivers.min_driver("9.0.0") == versions.hdk_line_floor("25.0.X").text
    assert kb.drivers.min_driver("9.1.0") == versions.hdk_line_floor("25.2.X").text
    assert kb.drivers.min_driver("9.2.0") == versions.hdk_line_floor("25.3.X").text
    assert versions.hdk(kb.drivers.min_driver("8.5.0")) < versions.hdk(kb.drivers.paired_hdk("8.5.0"))
    assert kb.drivers.supported_hdk_lines("9.1.0") == ("25.2.X", "25.3.X", "25.5.X", "26.0.RC1/25.7.RC1", "26.1.0", "26.1.1", "26.2.RC1")


def test_firmware_range(kb):
    assert kb.drivers.firmware_range("24.1.rc3") == ("7.0.0", "7.5.99")
    assert kb.drivers.firmware_range("24.1.RC3") == ("7.0.0", "7.5.99")  # rc is case-insensitive
    assert kb.drivers.firmware_range("24.1.rc1") == ("7.0.0", "7.2.99")
    assert kb.drivers.firmware_range("25.0.rc1.1") == ("7.0.0", "7.7.99")
    assert kb.drivers.firmware_range("25.3.rc1") == ("7.0.0", "8.9.9")
    assert kb.drivers.firmware_range("23.0.0") is None


def test_paired_firmware(kb):
    assert kb.drivers.paired_firmware("23.0.rc3", "910b") == "6.4.0.4.220"
    assert kb.drivers.paired_firmware("23.0.RC3", "310p") == "7.0.0.5.242"
    assert kb.drivers.paired_firmware("23.0.rc3", "910") is None
    assert kb.drivers.paired_firmware("24.1.rc2", "910b") == "7.3.0.1.231"
    assert kb.drivers.paired_firmware("25.5.2", "910b") == "7.8.0.7.220"
    assert kb.drivers.paired_firmware("25.7.rc1.6", "950") == "9.0.0.105.229"
    assert kb.drivers.paired_firmware("25.7.rc1.6", "910b") is None  # that sample is an Ascend950PR
    assert kb.drivers.paired_firmware("22.0.0", "910b") is None


# -- chips, read-only views, installer delegations --------------------------------------


def test_chips(kb):
    assert kb.drivers.chips() == ("910", "910b", "a3", "310p", "950")
    assert kb.drivers.chip_min_cann("a3") == "8.1.RC1"
    assert kb.drivers.chip_min_cann("A3") == "8.1.RC1"
    assert kb.drivers.chip_min_cann("950") == "9.0.0"
    for chip in ("910", "910b", "310p"):
        assert kb.drivers.chip_min_cann(chip) is None


def test_the_facade_hands_out_its_parts_methods(kb):
    """The knowledge base is one facade over its parts: each name is the part's own method
    (no second copy of a rule), and no installer file name is the knowledge base's (those are
    builder.installers', which imports the knowledge base, never the other way round)."""
    assert kb.drivers.min_driver == kb.drivers.min_driver and kb.environment.os_info == kb.environment.os_info
    assert kb.releases.canonical_cann == kb.releases.canonical_cann and kb.downloads.uv_requirement == kb.downloads.uv_requirement
    assert not any(hasattr(kb, name) for name in ("ops_package", "toolkit_package", "installers"))
    assert kb.downloads.conda_installer("arm64") == installers.conda_installer(kb, "aarch64")


def test_cann_package_is_a_read_only_view(kb, packages):
    ver, entry = kb.releases.cann_package("8.0.rc3")
    assert ver == "8.0.RC3"
    assert dict(entry["files"]) == packages["cann"]["8.0.RC3"]["files"]
    assert entry["requires"] == ({"name": "NPU", "version": "24.1.RC3"},)
    with pytest.raises(TypeError):
        entry["files"]["x.zip"] = {}
    assert kb.releases.cann_package("4.0.0") is None and kb.releases.cann_package("garbage") is None


def test_cann_entry_is_a_copy(kb, raw):
    entry = kb.releases.cann_entry("7.0.rc1")
    assert entry == next(e for e in raw["cann_hdk"]["releases"] if e["version"] == "7.0.RC1")
    entry["paired_hdk"] = "changed"
    assert kb.releases.cann_entry("7.0.RC1")["paired_hdk"] != "changed"
    assert kb.releases.cann_entry("4.0.0") is None


def test_canonical_cann(kb):
    assert kb.releases.canonical_cann("8.3.rc1") == "8.3.RC1"
    assert kb.releases.canonical_cann("8.5.0") == "8.5.0"
    assert kb.releases.canonical_cann("9.9.rc2") == "9.9.RC2"  # unknown: only the rc is upper-cased


def test_arches_and_chips_are_the_vocabulary_words():
    assert set(knowledge.ARCHES) == set(vocabulary.ARCHS)
    assert knowledge.CHIPS is vocabulary.CHIPS


# -- base OS ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "os_id, glibc, python, family, codename",
    [
        ("ubuntu18.04", (2, 27), "3.6", "apt", "bionic"),
        ("ubuntu20.04", (2, 31), "3.8", "apt", "focal"),
        ("ubuntu22.04", (2, 35), "3.10", "apt", "jammy"),
        ("ubuntu24.04", (2, 39), "3.12", "apt", "noble"),
        ("debian12", (2, 36), "3.11", "apt", "bookworm"),
        ("openeuler20.03", (2, 28), "3.7", "dnf", None),
        ("openeuler22.03", (2, 34), "3.9", "dnf", None),
        ("openeuler24.03", (2, 38), "3.11", "dnf", None),
    ],
)
def test_os_info(kb, os_id, glibc, python, family, codename):
    info = kb.environment.os_info(os_id)
    assert isinstance(info, OsInfo)
    assert (info.id, info.glibc, info.python, info.family, info.codename) == (os_id, glibc, python, family, codename)
    assert info.image and info.source


def test_os_ids_and_images(kb):
    assert set(kb.environment.os_ids()) == {
        "ubuntu18.04", "ubuntu20.04", "ubuntu22.04", "ubuntu24.04",
        "openeuler20.03", "openeuler22.03", "openeuler24.03", "debian11", "debian12",
    }
    assert (kb.environment.os_info("debian11").python, kb.environment.os_info("debian11").glibc) == ("3.9", (2, 31))
    assert kb.environment.os_info("ubuntu22.04").image == "ubuntu:22.04"
    assert kb.environment.os_info("openeuler22.03").image == "openeuler/openeuler:22.03-lts"
    assert kb.environment.os_info("debian12").image == "debian:bookworm-slim"
    assert kb.environment.os_info("centos7") is None


# -- CLI descriptions (builder.cli.kb) --------------------------------------------------


def test_cli_kb_examples_hold():
    result = doctest.testmod(cli_kb, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 5
    assert result.failed == 0


def test_describe_torch_npu(kb):
    d = describe_torch_npu(kb, "2.4.0")
    assert d["version"] == "2.4.0" and d["on_pypi"] is True
    assert d["torch"] == {
        "x86_64": {"requirement": "torch==2.4.0+cpu", "index": "pytorch-cpu"},
        "aarch64": {"requirement": "torch==2.4.0", "index": "pypi"},
    }
    assert d["cann"] == "8.0.RC3"
    assert d["python"]["aarch64"] == ["3.8", "3.9", "3.10", "3.11"]
    assert d["glibc_floor"] == {"x86_64": "2.17", "aarch64": "2.17"}
    assert d["prerelease"] is False
    assert d["sources"] == ["PYPI_SIMPLE_JSON", "PYPI_WHEEL_METADATA"]
    json.dumps(d)  # plain data


def test_describe_cann(kb):
    d = describe_cann(kb, "7.0.RC1")
    assert d["paired_hdk"] == "23.0.RC3" and d["min_driver"] == "23.0.RC3"
    assert d["torch_npu"] == ["2.1.0rc1"]
    names = [row["filename"] for row in d["installers"]["aarch64"]]
    assert names[0] == "Ascend-cann-toolkit_7.0.RC1_linux-aarch64.zip"
    assert "Ascend-cann-kernels-910b_7.0.RC1_linux.zip" in names
    assert names.count("Ascend-cann-toolkit_7.0.RC1_linux-aarch64.zip") == 1
    assert not any(row["kind"] == "nnal" for row in d["installers"]["aarch64"])  # the first NNAL known is 8.0.RC3's
    kinds = [(row["kind"], row["run"]) for row in describe_cann(kb, "8.0.0")["installers"]["x86_64"]]
    assert kinds[-1] == ("nnal", "Ascend-cann-nnal_8.0.0_linux-x86_64.run")
    assert [k for k, _ in kinds] == ["toolkit"] + ["ops"] * (len(kinds) - 2) + ["nnal"]
    json.dumps(d)
    with pytest.raises(UserError) as err:
        describe_cann(kb, "5.0.RC1")
    assert err.value.exit_code == 1
    with pytest.raises(versions.VersionError):
        describe_cann(kb, "eight")


# --- inference rules: the orders the published data keeps, and what they let us infer ------------


def _paired():
    from packaging.version import Version
    kb = knowledge.load()
    releases = [kb.releases.torch_npu(v) for v in kb.releases.torch_npu_versions()]
    return kb, sorted((r for r in releases if r is not None and r.cann), key=lambda r: Version(r.version))


def test_within_a_torch_line_a_later_torch_npu_never_pairs_with_an_older_cann():
    from packaging.version import Version
    kb, paired = _paired()
    line = lambda r: Version(r.version).release[:2]  # noqa: E731
    broken = [(a.version, a.cann, b.version, b.cann) for i, b in enumerate(paired) for a in paired[:i]
              if line(a) == line(b) and versions.cann(a.cann) > versions.cann(b.cann)]
    assert broken == [] and len(paired) > 40


def test_first_final_releases_of_newer_lines_never_pair_with_an_older_cann():
    from packaging.version import Version
    kb, paired = _paired()
    firsts: dict = {}  # (major, minor) -> its first final release
    for r in paired:
        if not Version(r.version).is_prerelease:
            firsts.setdefault(Version(r.version).release[:2], r)
    order = sorted(firsts)
    broken = [(firsts[a].version, firsts[b].version) for i, a in enumerate(order) for b in order[i + 1:]
              if versions.cann(firsts[a].cann) > versions.cann(firsts[b].cann)]
    assert broken == [] and len(order) >= 10
    # and the reason pre-releases are left out of that order: it does not hold for them
    assert versions.cann(kb.releases.torch_npu("2.12.0rc1").cann) < versions.cann(kb.releases.torch_npu("2.11.0").cann)


def test_the_inferred_floor_never_contradicts_a_published_pair():
    kb, paired = _paired()
    contradicted = [(r.version, r.cann, kb.releases.cann_floor(r.version)) for r in paired
                    if kb.releases.cann_floor(r.version) and versions.cann(r.cann) < versions.cann(kb.releases.cann_floor(r.version)[0])]
    assert contradicted == []


def test_the_floor_names_its_evidence():
    kb = knowledge.load()
    assert kb.releases.cann_floor("2.13.0") == ("9.1.0", "2.12.0")
    assert kb.releases.cann_floor("2.9.1") == ("9.1.0", "2.9.0.post6")   # same line, later release
    assert kb.releases.cann_floor("2.13.0rc1") is None                   # a pre-release of a new line: unbounded


def test_the_minimum_driver_never_falls_as_cann_rises():
    kb = knowledge.load()
    known = [(c, driver) for c in kb.releases.cann_releases() for driver in [kb.drivers.min_driver(c)] if driver]
    falls = [(a, da, b, db) for i, (a, da) in enumerate(known) for b, db in known[i + 1:]
             if versions.hdk(da) > versions.hdk(db)]
    assert falls == [] and len(known) >= 20


def test_older_cann_runs_on_a_driver_a_newer_one_runs_on_with_the_reason():
    kb = knowledge.load()
    assert kb.drivers.min_driver_reason("8.3.RC1") == (
        "25.0.RC1", "CANN 8.5.0 runs on HDK 25.0.RC1 (its release notes support HDK 25.0.X), "
                    "and a driver that runs a newer CANN runs an older one")
    assert kb.drivers.min_driver("8.3.RC1") == kb.drivers.min_driver("8.5.0") == kb.drivers.min_driver("9.0.0")
    assert kb.drivers.min_driver_reason("8.0.RC3") == ("24.1.RC3", "its paired HDK 24.1.RC3")


def test_kb_cann_shows_the_python_range_and_the_download_folder():
    from typer.testing import CliRunner

    from builder import cli

    out = CliRunner().invoke(cli.app, ["kb", "cann", "8.2.RC1.alpha003"]).output
    # the pre-release's folder is the internal-code folder its official image fetches from
    assert "download_folder: https://ascend-repo.obs.cn-east-2.myhuaweicloud.com/Milan-ASL/Milan-ASL%20V100R001C22B800TP052/" in out
    assert "download_folder_source: Ascend/cann-container-image@75e81fcb3b8f063a7780ed45c5d88d73bb891333:" in out
    # no guide of 8.2.RC1.alpha003 is held: an explicit marker says so (unknown, not refused)
    assert "python:\n  supported: not checked\n  why: no installation guide of this release was read" in out
    out = CliRunner().invoke(cli.app, ["kb", "cann", "9.1.0"]).output
    assert "python:\n  supported: 3.7 to 3.14\n  source: CANN 9.1.0 installation guide" in out
    assert "download_folder: https://ascend-repo.obs.cn-east-2.myhuaweicloud.com/CANN/CANN%209.1.0/\n" in out
    # a pre-release no official image fetched has no folder: none is made up
    data = describe_cann(load(), "8.0.RC2.alpha002")
    assert data["download_folder"] is None and data["installers"] == {"x86_64": [], "aarch64": []}


def test_the_cpu_build_of_torch_per_arch_and_version(kb):
    # x86_64: always the CPU index (PyPI's x86_64 torch is the CUDA build)
    assert kb.environment.cpu_torch("2.1.0", "x86_64") == ("torch==2.1.0+cpu", "pytorch-cpu")
    assert kb.environment.cpu_torch("2.13.0", "amd64") == ("torch==2.13.0+cpu", "pytorch-cpu")
    # aarch64: PyPI's torch is the CPU build up to 2.10, the CUDA build from 2.11 (measured, see knowledge/environment.py)
    assert kb.environment.cpu_torch("2.10.0", "aarch64") == ("torch==2.10.0", "pypi")
    assert kb.environment.cpu_torch("2.11.0", "aarch64") == ("torch==2.11.0+cpu", "pytorch-cpu")
    assert kb.environment.cpu_torch("2.13.0+cpu", "aarch64") == ("torch==2.13.0+cpu", "pytorch-cpu")  # a local label is not doubled
    with pytest.raises(UserError):
        kb.environment.cpu_torch("2.13.0", "sparc")


def test_kb_shows_the_published_tables_of_a_release_and_of_a_cann():
    kb = knowledge.load()
    data = describe_torch_npu(kb, "2.4.0.post2")
    assert data["pta"] == "6.0.0"
    assert data["cann_tables"] == [{"pta": "6.0.0", "compatible": "8.0.RC2, 8.0.RC3, 8.0.0, 8.1.RC1, 8.2.RC1, 8.3.RC1",
                                    "not_compatible": "-",
                                    "source": "https://www.hiascend.com/document/detail/zh/Pytorch/720/releasenote/"
                                              "releasenote_0005.html"}]  # the hand-kept window: no parsed table
    assert describe_torch_npu(kb, "2.4.0")["cann_tables"] == []  # PTA 6.0.rc3: no table published
    assert [r["pta"] for r in describe_cann(kb, "8.1.RC1")["compatible_pta"]][-1] == "6.0.0"
    assert {r["pta"] for r in describe_cann(kb, "8.1.RC1")["compatible_pta"]} == {"26.0.0", "7.3.0", "7.2.0", "7.1.0",
                                                                                  "7.0.0", "6.0.0"}
    assert describe_cann(kb, "7.0.RC1")["compatible_pta"] == []
