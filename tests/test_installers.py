"""builder.installers: which official installer files a cell needs. Every expected name,
URL and sha256 below was read from builder/data/cann-packages.json and conda.yaml, or from
docs/ascend-facts.md (the naming eras), not derived from the code under test."""

from __future__ import annotations

import doctest
import json

import pytest

from builder import installers, knowledge
from builder.errors import UserError
from builder.installers import Installer, cann_installers, conda_installer, ops_package, toolkit_package

DATA = knowledge.DATA_DIR


@pytest.fixture(scope="module")
def kb():
    return knowledge.load()


@pytest.fixture(scope="module")
def packages():
    with open(DATA / "cann-packages.json") as fh:
        return json.load(fh)


def test_module_examples_hold():
    result = doctest.testmod(installers, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 10
    assert result.failed == 0


# -- CANN package names ------------------------------------------------------------------


@pytest.mark.parametrize(
    "chip, cann, arch, expected",
    [
        ("910b", "7.0.RC1", "aarch64", "Ascend-cann-kernels-910b_7.0.RC1_linux.run"),
        ("910b", "7.0.RC1", "x86_64", "Ascend-cann-kernels-910b_7.0.RC1_linux.run"),
        ("910b", "8.0.RC3", "aarch64", "Ascend-cann-kernels-910b_8.0.RC3_linux-aarch64.run"),
        ("910b", "8.0.RC3", "x86_64", "Ascend-cann-kernels-910b_8.0.RC3_linux-x86_64.run"),
        ("910b", "8.5.0", "x86_64", "Ascend-cann-910b-ops_8.5.0_linux-x86_64.run"),
        ("a3", "8.5.0", "aarch64", "Ascend-cann-A3-ops_8.5.0_linux-aarch64.run"),
        ("310p", "8.0.RC2", "x86_64", "Ascend-cann-kernels-310p_8.0.RC2_linux.run"),
        ("910", "9.0.0", "aarch64", "Ascend-cann-910-ops_9.0.0_linux-aarch64.run"),
    ],
)
def test_ops_package_names_listed_in_cann_packages(kb, packages, chip, cann, arch, expected):
    assert ops_package(kb, chip, cann, arch) == expected
    assert expected[: -len(".run")] + ".zip" in packages["cann"][cann]["files"]


def test_ops_package_era_rule_where_the_data_has_no_file(kb, packages):
    # The deployer data has no A3 kernels before 8.5; Huawei's name for them (facts doc,
    # chips[a3].cann_ops_package "Atlas-A3-cann-kernels (8.1.RC1-8.3)"):
    assert not any("A3" in f for f in packages["cann"]["8.1.RC1"]["files"])
    assert ops_package(kb, "a3", "8.1.RC1", "aarch64") == "Atlas-A3-cann-kernels_8.1.RC1_linux-aarch64.run"
    assert ops_package(kb, "a3", "8.3.RC1", "x86_64") == "Atlas-A3-cann-kernels_8.3.RC1_linux-x86_64.run"
    assert ops_package(kb, "950", "9.0.0", "aarch64") == "Ascend-cann-950-ops_9.0.0_linux-aarch64.run"
    assert ops_package(kb, "910b", "9.1.0", "aarch64") == "Ascend-cann-910b-ops_9.1.0_linux-aarch64.run"
    assert ops_package(kb, "910b", "8.3.rc2", "aarch64") == "Ascend-cann-kernels-910b_8.3.RC2_linux-aarch64.run"
    with pytest.raises(UserError):
        ops_package(kb, "a3", "8.0.0", "aarch64")
    with pytest.raises(UserError):
        ops_package(kb, "950", "8.5.0", "aarch64")
    with pytest.raises(UserError):
        ops_package(kb, "910c", "8.5.0", "aarch64")


def test_ops_package_refuses_what_is_no_arch_or_no_cann(kb):
    with pytest.raises(UserError) as err:
        ops_package(kb, "910b", "8.5.0", "s390x")
    assert err.value.fix == "use x86_64 or aarch64"
    with pytest.raises(UserError) as err:
        ops_package(kb, "910b", "eight", "aarch64")
    assert err.value.fix == "write it like 8.0.RC3 or 8.5.0"
    assert ops_package(kb, "A3", "8.5.0", "arm64") == "Ascend-cann-A3-ops_8.5.0_linux-aarch64.run"


def test_toolkit_package(kb, packages):
    assert toolkit_package(kb, "7.0.RC1", "aarch64") == "Ascend-cann-toolkit_7.0.RC1_linux-aarch64.run"
    assert "Ascend-cann-toolkit_7.0.RC1_linux-aarch64.zip" in packages["cann"]["7.0.RC1"]["files"]
    assert toolkit_package(kb, "8.5.0", "x86_64") == "Ascend-cann-toolkit_8.5.0_linux-x86_64.run"
    assert toolkit_package(kb, "8.3.rc1", "x86_64") == "Ascend-cann-toolkit_8.3.RC1_linux-x86_64.run"
    assert toolkit_package(kb, "9.1.0", "aarch64") == "Ascend-cann-toolkit_9.1.0_linux-aarch64.run"  # not in the data
    with pytest.raises(UserError):
        toolkit_package(kb, "8.5.0", "s390x")


# -- CANN installers with checksums -------------------------------------------------------


def test_installers_carry_the_right_checksums(kb):
    toolkit, ops = cann_installers(kb, "7.0.RC1", "910b", "aarch64")
    assert isinstance(toolkit, Installer) and toolkit.kind == "toolkit"
    assert toolkit.filename == "Ascend-cann-toolkit_7.0.RC1_linux-aarch64.zip"
    assert toolkit.run == "Ascend-cann-toolkit_7.0.RC1_linux-aarch64.run"
    assert ops.kind == "ops"
    assert ops.filename == "Ascend-cann-kernels-910b_7.0.RC1_linux.zip"
    assert ops.sha256 == "e7e12c493c3580f4c1682af46ec9b10a94801e5f6851c94acaf3418777eb4955"
    assert ops.url.endswith("/CANN%207.0.RC1/Ascend-cann-kernels-910b_7.0.RC1_linux.zip")
    assert ops.run == ops_package(kb, "910b", "7.0.RC1", "aarch64")

    toolkit, ops = cann_installers(kb, "8.5.0", "a3", "x86_64")
    assert toolkit.sha256 == "5637d98ef0974dd7fe848e8e341d62ff36c89cf47e929114f6a628f32072251a"
    assert ops.filename == "Ascend-cann-A3-ops_8.5.0_linux-x86_64.zip"
    assert ops.sha256 == "fafa328819f8a647cbab2176901e5c6c882b50a8f9281755d6ff290fb03710f7"


def packages_of(kb, cann):
    """The URLs cann-packages.json lists for a release."""
    return [f["url"] for f in kb.releases.cann_package(cann)[1]["files"].values()]


def test_installers_match_cann_packages_for_every_release(kb, packages):
    for ver, entry in packages["cann"].items():
        for arch in ("x86_64", "aarch64"):
            for chip in kb.drivers.chips():
                for inst in cann_installers(kb, ver, chip, arch):
                    if inst.sha256 is None:  # not in the data: the .run from the release's folder
                        assert inst.filename == inst.run and inst.filename not in entry["files"]
                        assert inst.url == kb.downloads.cann_release_folder(ver) + inst.filename
                        continue
                    assert entry["files"][inst.filename]["sha256"] == inst.sha256
                    assert entry["files"][inst.filename]["url"] == inst.url


def test_files_the_data_lacks_are_the_release_folders_run_without_a_sha256(kb):
    toolkit, ops = cann_installers(kb, "8.1.RC1", "a3", "x86_64")
    assert toolkit.sha256 and toolkit.filename.endswith(".zip")  # listed in cann-packages.json
    assert (ops.filename, ops.sha256) == ("Atlas-A3-cann-kernels_8.1.RC1_linux-x86_64.run", None)
    assert ops.url == "https://ascend-repo.obs.cn-east-2.myhuaweicloud.com/CANN/CANN%208.1.RC1/" + ops.filename
    assert [(i.filename, i.sha256) for i in cann_installers(kb, "9.1.0", "910b", "aarch64")] == [
        ("Ascend-cann-toolkit_9.1.0_linux-aarch64.run", None), ("Ascend-cann-910b-ops_9.1.0_linux-aarch64.run", None)]
    # every such URL lies where the data's own URLs of that release lie
    listed = next(iter(packages_of(kb, "8.1.RC1")))
    assert listed.rsplit("/", 1)[0] == ops.url.rsplit("/", 1)[0]
    assert cann_installers(kb, "8.0", "910b", "x86_64") == []  # no such release
    assert cann_installers(kb, "8.0.RC3", "910b", "s390x") == []


def test_installers_name_their_source(kb):
    toolkit, _ = cann_installers(kb, "8.0.RC3", "910b", "x86_64")
    assert toolkit.source.startswith("cann-packages.json (ascend-deployer ")
    assert (toolkit.version, toolkit.arch) == ("8.0.RC3", "x86_64")


# -- conda bootstrap -----------------------------------------------------------------------


def test_conda_installer(kb):
    x86 = conda_installer(kb, "x86_64")
    assert x86 is not None
    assert x86.kind == "conda" and x86.version == "26.3.2-3"
    assert x86.filename == "Miniforge3-26.3.2-3-Linux-x86_64.sh"
    assert x86.sha256 == "848194851a98903134187fbb4ab50efe87b003e0c0f808f97644b7524a62bf2c"
    assert x86.url.endswith("/26.3.2-3/" + x86.filename)
    arm = conda_installer(kb, "aarch64")
    assert arm is not None
    assert arm.sha256 == "2c113a69297e612b01ca0f320c22a3107a11f2ab9b573d79ac868a175945ce29"
    assert conda_installer(kb, "arm64") == arm
    assert "spack/spack-packages" in arm.source
    assert conda_installer(kb, "ppc64le") is None


def test_read_conda_leaves_an_unverified_sha256_empty():
    doc = {"version": "1.0-0", "installers": {"aarch64": {"filename": "M.sh", "url": "https://x/M.sh", "sha256": ""}}}
    found = knowledge.downloads.read_conda(doc)["aarch64"]
    assert (found.sha256, found.run, found.source, found.version, found.arch) == (None, "M.sh", "", "1.0-0", "aarch64")
