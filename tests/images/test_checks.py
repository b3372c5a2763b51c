"""builder.images.checks: one minimal bad matrix per rule, asserting rule id, severity, the
line of the offending key, and the values and the fix named in the message.

Expected values come from builder/data (and docs/ascend-facts.md): CANN 7.0.RC1 pairs
with torch_npu 2.1.0rc1 and HDK 23.0.RC3; torch_npu 2.4.0 with CANN 8.0.RC3; etc.
"""

from __future__ import annotations

import doctest
import hashlib
import re
from pathlib import Path
from typing import Dict, List

import pytest
from typer.testing import CliRunner

from builder.images import checks, matrix, plan
from builder.cli.kb import describe_cann
from builder import cli, installers, knowledge, python_env, versions
from tests.support.knowledge import with_part
from tests.support.cann import synthetic_torch_npu_wheel
from tests.support.matrix import CANN_7, SHIPPED_MATRIX, VALID, all_findings, by_rule, write_cells


def only(findings, rule):
    """The one finding of ``rule`` (and say what else there was when there is not exactly one)."""
    found = by_rule(findings, rule)
    assert len(found) == 1, f"expected one {rule}, got: {[str(f) for f in findings]}"
    return found[0]


def cell_findings(tmp_path, *cells, **kw):
    path, lines = write_cells(tmp_path, *cells, **kw)
    return all_findings(path), lines, str(path)


def test_module_examples_hold():
    result = doctest.testmod(checks)
    assert result.attempted >= 4
    assert result.failed == 0


def test_the_valid_cells_have_no_finding(tmp_path):
    """The controls every bad matrix below is a one-key change of."""
    findings, _, _ = cell_findings(tmp_path, VALID, CANN_7)
    assert findings == []


# --- torch_npu_published ------------------------------------------------------------


def test_torch_npu_unpublished_names_the_paired_release(tmp_path):
    findings, lines, path = cell_findings(tmp_path, dict(CANN_7, torch_npu="2.1.0.post5"))
    f = only(findings, "torch-npu-unpublished")
    assert f.severity == "error"
    assert f.field == "cells[0].torch_npu"
    assert (f.where.file, f.where.line) == (path, lines[(0, "torch_npu")])
    assert f.message == "torch_npu 2.1.0.post5 was never published on PyPI"
    assert f.fix == "for CANN 7.0.RC1 use 2.1.0rc1"
    assert str(f).startswith(f"{path}:{lines[(0, 'torch_npu')]}:16: error: torch-npu-unpublished [cells[0].torch_npu]")


def test_torch_npu_named_by_huawei_but_not_on_pypi(tmp_path):
    findings, _, _ = cell_findings(tmp_path, dict(VALID, cann="8.0.RC1", torch_npu="2.1.0.post4"))
    f = only(findings, "torch-npu-unpublished")
    assert f.message == "torch_npu 2.1.0.post4 is named in Huawei's tables but has no files on PyPI"


# --- torch_matches_pin ----------------------------------------------------------------


def test_torch_mismatch(tmp_path):
    findings, lines, _ = cell_findings(tmp_path, dict(CANN_7, torch="2.2.0"))
    f = only(findings, "torch-mismatch")
    assert f.severity == "error"
    assert (f.field, f.where.line) == ("cells[0].torch", lines[(0, "torch")])
    assert f.message == "torch 2.2.0 does not match torch_npu 2.1.0rc1, which requires torch 2.1.0"
    assert f.fix == "set torch: 2.1.0 (or leave torch out: it follows from torch_npu)"


def test_torch_with_local_label_matches(tmp_path):
    findings, _, _ = cell_findings(tmp_path, dict(CANN_7, torch="2.1.0+cpu"))
    assert by_rule(findings, "torch-mismatch") == []


# --- cann_paired ------------------------------------------------------------------------


def test_cann_mismatch(tmp_path):
    """torch_npu 2.9.0 is PTA 7.3.0; every table that covers 7.3.0 and has a column for 8.0.RC3 leaves it out."""
    findings, lines, _ = cell_findings(tmp_path, dict(VALID, torch_npu="2.9.0", python="3.11"))
    f = only(findings, "cann-mismatch")
    assert f.severity == "error"
    assert (f.field, f.where.line) == ("cells[0].torch_npu", lines[(0, "torch_npu")])
    assert f.message == ("torch_npu 2.9.0 (PTA 7.3.0) is paired with CANN 8.5.0, not CANN 8.0.RC3: the published table "
                         "that covers PTA 7.3.0 lists CANN 8.5.0, 8.3.RC1, 8.2.RC1, 8.1.RC1, 8.0.0 for it, not 8.0.RC3 "
                         "(Ascend/pytorch@v26.1.0-beta.2-pytorch2.7.1:docs/zh/release_notes/release_notes.md, line 51; "
                         "5 older release notes agree)")
    assert f.fix == "set cann: 8.5.0 or another CANN that table lists, or for CANN 8.0.RC3 use 2.4.0 or 2.3.1.post2 or 2.1.0.post8"


def test_a_pair_no_published_table_covers_is_a_warning_that_strict_refuses(tmp_path):
    findings, lines, _ = cell_findings(tmp_path, dict(CANN_7, torch_npu="2.4.0"))
    f = only(findings, "cann-uncovered")
    assert f.severity == "warning" and (f.field, f.where.line) == ("cells[0].cann", lines[(0, "cann")])
    assert f.message == ("torch_npu 2.4.0 (PTA 6.0.rc3) is paired with CANN 8.0.RC3; no published table covers "
                         "PTA 6.0.rc3 with CANN 7.0.RC1, so the pair is unconfirmed (`validate --strict` refuses it)")
    assert checks.has_errors([f], strict=True) and not checks.has_errors([f])


def test_a_later_cann_of_the_same_line_is_a_warning_naming_the_published_pair(tmp_path):
    """torch_npu 2.6.0.post3 (PTA 7.2.0, paired with 8.3.RC1) on CANN 8.3.RC2: no table has a column for
    8.3.RC2 (they name 8.3.RC1 exactly), so the later release of the line is inferred, and said so."""
    findings, lines, _ = cell_findings(tmp_path, dict(VALID, cann="8.3.RC2", torch_npu="2.6.0.post3", python="3.11",
                                                      min_driver="25.0.RC1"))
    f = only(findings, "cann-adjacent")
    assert f.severity == "warning" and (f.field, f.where.line) == ("cells[0].cann", lines[(0, "cann")])
    assert f.message == ("torch_npu 2.6.0.post3 is paired with CANN 8.3.RC1 (published); CANN 8.3.RC2 is a later "
                         "release of the same line (8.3), inferred compatible but not published")
    assert by_rule(findings, "cann-mismatch") == []
    # a table whose column is the whole line (8.5.X) lists 8.5.1 for PTA 7.3.0: published, not inferred
    listed, _, _ = cell_findings(tmp_path, dict(VALID, cann="8.5.1", torch_npu="2.9.0", python="3.11",
                                                min_driver="25.0.RC1"))
    assert by_rule(listed, "cann-window") and not by_rule(listed, "cann-adjacent")


def test_cann_spelling_variants_are_the_same_release(tmp_path):
    findings, _, _ = cell_findings(tmp_path, dict(VALID, cann="8.0.rc3"))
    assert by_rule(findings, "cann-mismatch") == [] and by_rule(findings, "cann-unknown") == []


def test_cann_pairing_unknown_is_a_warning(tmp_path):
    findings, lines, _ = cell_findings(tmp_path, dict(VALID, os="debian12", env="venv", python="3.11",
                                                      cann="9.1.0", torch_npu="2.13.0", min_driver="25.2.RC1"))
    findings = [f for f in findings if f.rule != "installer-sha256-unknown"]  # 9.1.0's hashes: see that rule
    f = only(findings, "cann-pairing-unknown")
    assert f.severity == "warning"
    assert (f.field, f.where.line) == ("cells[0].torch_npu", lines[(0, "torch_npu")])
    assert f.message == ("no published CANN pairing for torch_npu 2.13.0; CANN 9.1.0 is unconfirmed "
                         "(inferred: CANN 9.1.0 or newer, from torch_npu 2.12.0)")
    assert "validate the image on an NPU host" in f.fix
    assert [x.rule for x in findings] == ["cann-pairing-unknown"]  # a warning only: not an error
    assert not checks.has_errors(findings) and checks.has_errors(findings, strict=True)


def test_cann_below_what_an_older_torch_npu_needs_is_refused_naming_the_evidence(tmp_path):
    findings, lines, _ = cell_findings(tmp_path, dict(VALID, os="debian12", env="venv", python="3.11",
                                                      cann="9.0.0", torch_npu="2.13.0", min_driver="25.0.RC1"))
    f = only(findings, "cann-below-inferred")
    assert f.severity == "error"
    assert (f.field, f.where.line) == ("cells[0].cann", lines[(0, "cann")])
    assert f.message == ("torch_npu 2.13.0 has no published CANN pairing, but the older torch_npu 2.12.0 is "
                         "paired with CANN 9.1.0, and a newer torch_npu never needs an older CANN (inferred): "
                         "CANN 9.0.0 is older than 9.1.0")
    assert f.fix == "set cann: 9.1.0 or newer, or for CANN 9.0.0 use torch_npu 2.10.0.post2, 2.10.0, 2.9.0.post2"
    assert by_rule(findings, "cann-pairing-unknown") == []


# --- python_has_wheel -------------------------------------------------------------------


def test_python_no_wheel(tmp_path):
    findings, lines, _ = cell_findings(tmp_path, dict(VALID, cann="8.0.RC2", torch_npu="2.3.1", python="3.11"))
    f = only(findings, "python-no-wheel")
    assert f.severity == "error"
    assert (f.field, f.where.line) == ("cells[0].python", lines[(0, "python")])
    assert f.message == "torch_npu 2.3.1 has no wheel for Python 3.11 on x86_64"
    assert f.fix == "use Python 3.8 or 3.9 or 3.10"


def test_python_patch_version_uses_its_minor(tmp_path):
    findings, _, _ = cell_findings(tmp_path, dict(VALID, python="3.10.14"))
    assert by_rule(findings, "python-no-wheel") == []


# --- glibc_new_enough -------------------------------------------------------------------


def test_glibc_too_old(tmp_path):
    findings, lines, _ = cell_findings(tmp_path, dict(VALID, os="ubuntu18.04", cann="8.3.RC1",
                                                      torch_npu="2.7.1", python="3.10"))
    f = only(findings, "glibc-too-old")
    assert f.severity == "error"
    assert (f.field, f.where.line) == ("cells[0].os", lines[(0, "os")])
    assert f.message == "ubuntu18.04 has glibc 2.27, below the manylinux_2_28 floor of torch_npu 2.7.1"
    assert f.fix == ("use a newer OS: ubuntu20.04, ubuntu22.04, ubuntu24.04, debian11, debian12, "
                     "openeuler20.03, openeuler22.03, openeuler24.03")


def test_glibc_2_17_wheel_runs_on_ubuntu18(tmp_path):
    findings, _, _ = cell_findings(tmp_path, dict(CANN_7, os="ubuntu18.04"))
    assert by_rule(findings, "glibc-too-old") == []


# --- driver_supports_cann ----------------------------------------------------------------


def test_driver_too_old(tmp_path):
    findings, lines, _ = cell_findings(tmp_path, dict(VALID, min_driver="23.0.3"))
    f = only(findings, "driver-too-old")
    assert f.severity == "error"
    assert (f.field, f.where.line) == ("cells[0].min_driver", lines[(0, "min_driver")])
    assert f.message.startswith("min_driver 23.0.3 is below 24.1.RC3, the minimum HDK for CANN 8.0.RC3 "
                                "(its paired HDK 24.1.RC3): min_driver is the oldest driver the image declares it "
                                "runs on (its min-driver label")
    assert "not your nodes' driver" in f.message
    assert f.fix.startswith("leave min_driver out (it follows from CANN: 24.1.RC3), or set min_driver: 24.1.RC3 or newer")


def test_the_old_driver_key_still_works_with_a_warning_naming_its_new_name(tmp_path):
    findings, lines, path = cell_findings(tmp_path, dict(VALID, driver="23.0.3"))
    renamed = only(findings, "driver-key-renamed")
    assert renamed.severity == "warning"
    assert (renamed.field, renamed.where.line) == ("cells[0].driver", lines[(0, "driver")])
    assert "old name of min_driver" in renamed.message and renamed.fix.startswith("rename it to min_driver:")
    # the value is still read: the same rule refuses it as under its new name
    assert only(findings, "driver-too-old").field == "cells[0].driver"
    assert matrix.load(Path(path)).cells[0].driver == "23.0.3"


def test_both_names_of_min_driver_in_one_cell_are_refused(tmp_path):
    findings, _, _ = cell_findings(tmp_path, dict(VALID, driver="24.1.RC3", min_driver="25.0.RC1"))
    assert [f.message for f in findings if f.severity == "error"] == [
        "cells[0] gives both min_driver and driver (its old name)"]


def test_newer_driver_runs_older_cann(tmp_path):
    findings, _, _ = cell_findings(tmp_path, dict(CANN_7, min_driver="24.1.RC3"))
    assert by_rule(findings, "driver-too-old") == []


def test_driver_rule_is_the_node_rule(tmp_path):
    """validate decides with versions.meets_minimum, as pull, run, doctor and smoke do."""
    assert knowledge.load().drivers.min_driver("8.5.0") == "25.0.RC1"  # the floor of min_hdk_line 25.0.X
    for driver in ("25.0.RC1", "25.0.rc1.1", "24.1.RC3", "23.0.3"):
        cell = dict(VALID, cann="8.5.0", torch_npu="2.8.0.post2", python="3.11", min_driver=driver)
        findings, _, _ = cell_findings(tmp_path, cell)
        too_old = bool(by_rule(findings, "driver-too-old"))
        assert too_old is (not versions.meets_minimum("hdk", driver, "25.0.RC1")), driver
        assert too_old is (driver in ("24.1.RC3", "23.0.3")), driver


def test_driver_missing_when_unknown(tmp_path):
    findings, lines, _ = cell_findings(tmp_path, dict(VALID, cann="8.4.0"))
    f = only(findings, "driver-missing")
    assert f.severity == "error"
    # no driver key in the cell: the finding points at the cell itself
    assert f.field == "cells[0].min_driver"  # not written: located at the cell, named by its path
    assert f.where.line == lines[(0, "os")]
    assert f.message == "no min_driver given and none known for CANN 8.4.0"
    assert f.fix.startswith("set min_driver: ")


def test_driver_version_syntax(tmp_path):
    findings, lines, _ = cell_findings(tmp_path, dict(VALID, min_driver="24.1.xx"))
    f = only(findings, "version-syntax")
    assert f.severity == "error"
    assert (f.field, f.where.line) == ("cells[0].min_driver", lines[(0, "min_driver")])
    assert "24.1.xx" in f.message
    assert f.fix


def test_cann_version_syntax(tmp_path):
    findings, lines, _ = cell_findings(tmp_path, dict(VALID, cann="8.x"))
    f = only(findings, "version-syntax")
    assert (f.field, f.where.line) == ("cells[0].cann", lines[(0, "cann")])
    assert "8.x" in f.message


# --- firmware_in_range -------------------------------------------------------------------


def test_firmware_out_of_range(tmp_path):
    kb = knowledge.load()
    assert kb.drivers.firmware_range("24.1.RC1") == ("7.0.0", "7.2.99")  # the driver's version.info
    findings, lines, _ = cell_findings(tmp_path, dict(CANN_7, min_driver="24.1.RC1", firmware="7.5.0.1.129"))
    f = only(findings, "firmware-out-of-range")
    assert f.severity == "error"
    assert (f.field, f.where.line) == ("cells[0].firmware", lines[(0, "firmware")])
    assert f.message == "firmware 7.5.0.1.129 is outside [7.0.0, 7.2.99], the range driver 24.1.RC1 accepts"
    assert f.fix == "use the firmware of the same HDK release as driver 24.1.RC1 (7.1.0.6.220)"


def test_firmware_in_a_second_recorded_range_is_accepted(tmp_path):
    """Driver 25.0.rc1.1 dumps list [6.4.0,6.4.99] besides [7.0.0,7.7.99]: either range is fine."""
    cell = dict(VALID, cann="8.1.RC1", torch_npu="2.5.1", python="3.10", min_driver="25.0.rc1.1")
    findings, _, _ = cell_findings(tmp_path, dict(cell, firmware="6.4.0.4.220"))
    assert by_rule(findings, "firmware-out-of-range") == []
    findings, _, _ = cell_findings(tmp_path, dict(cell, firmware="6.3.0.1.241"))
    f = only(findings, "firmware-out-of-range")
    assert f.message == ("firmware 6.3.0.1.241 is outside [7.0.0, 7.7.99], [6.4.0, 6.4.99], "
                         "the range driver 25.0.rc1.1 accepts")


@pytest.mark.parametrize("firmware", ["7.0.0.1.1", "7.1.0.6.220", "7.2.99.9.999"])
def test_firmware_in_range(tmp_path, firmware):
    findings, _, _ = cell_findings(tmp_path, dict(CANN_7, min_driver="24.1.RC1", firmware=firmware))
    assert by_rule(findings, "firmware-out-of-range") == []


def test_firmware_version_syntax(tmp_path):
    findings, lines, _ = cell_findings(tmp_path, dict(CANN_7, firmware="7.5.0"))
    f = only(findings, "version-syntax")
    assert (f.field, f.where.line) == ("cells[0].firmware", lines[(0, "firmware")])


# --- chip_supported ----------------------------------------------------------------------


@pytest.mark.parametrize("chip, cann, torch_npu, python, first", [
    ("a3", "8.0.RC3", "2.4.0", "3.10", "8.1.RC1"),
    ("950", "8.5.0", "2.8.0.post2", "3.11", "9.0.0"),
])
def test_chip_unsupported(tmp_path, chip, cann, torch_npu, python, first):
    findings, lines, _ = cell_findings(tmp_path, dict(VALID, chip=chip, cann=cann, torch_npu=torch_npu,
                                                      python=python, arch="aarch64"))
    f = only(findings, "chip-unsupported")
    assert f.severity == "error"
    assert (f.field, f.where.line) == ("cells[0].chip", lines[(0, "chip")])
    assert f.message == f"chip {chip} is not supported by CANN {cann}; it needs CANN {first} or later"
    assert f.fix == f"set cann: {first} or newer, or pick another chip"


def test_chip_unsupported_with_local_installers_is_still_a_finding(tmp_path):
    """The installer check must not crash on a chip the CANN predates (no ops package name)."""
    findings, _, _ = cell_findings(tmp_path, dict(VALID, chip="a3", arch="aarch64",
                                                  cann_source={"local": "/srv/cann"}))
    assert only(findings, "chip-unsupported").severity == "error"


# --- venv_python_matches -----------------------------------------------------------------


def test_venv_python_mismatch(tmp_path):
    findings, lines, _ = cell_findings(tmp_path, dict(VALID, os="debian12", env="venv", python="3.10"))
    f = only(findings, "venv-python-mismatch")
    assert f.severity == "error"
    assert (f.field, f.where.line) == ("cells[0].python", lines[(0, "python")])
    assert f.message == "env venv uses debian12's Python 3.11, but the cell asks for Python 3.10"
    assert f.fix == 'use env: conda, or python: "3.11"'


def test_conda_may_choose_any_python(tmp_path):
    findings, _, _ = cell_findings(tmp_path, dict(VALID, os="debian12", env="conda", python="3.10"))
    assert by_rule(findings, "venv-python-mismatch") == []


# --- installers_verifiable ---------------------------------------------------------------

A3_83 = dict(VALID, chip="a3", arch="aarch64", cann="8.3.RC1", torch_npu="2.7.1", python="3.10")


def test_installer_unknown(tmp_path):
    findings, lines, _ = cell_findings(tmp_path, dict(A3_83, cann="8.4.0", cann_source="installer"))
    f = only(findings, "installer-unknown")
    assert f.severity == "error"
    assert (f.field, f.where.line) == ("cells[0].cann_source", lines[(0, "cann_source")])
    assert f.message == "the knowledge base has no official a3/aarch64 installers for CANN 8.4.0"
    assert f.fix == "use cann_source: {local: DIR} with sha256: {FILE: HEX}, or {image: REF@sha256:DIGEST}"


def test_installer_unknown_points_at_defaults_when_set_there(tmp_path):
    cell = dict(A3_83, cann="8.4.0")
    findings, lines, _ = cell_findings(tmp_path, cell, defaults={"cann_source": "installer"})
    f = only(findings, "installer-unknown")
    assert (f.field, f.where.line) == ("defaults.cann_source", lines[("defaults", "cann_source")])


def test_installer_unknown_without_cann_source_points_at_the_cann(tmp_path):
    findings, lines, _ = cell_findings(tmp_path, dict(A3_83, cann="8.4.0"))
    f = only(findings, "installer-unknown")
    assert (f.field, f.where.line) == ("cells[0].cann", lines[(0, "cann")])


def test_a_known_release_without_published_hashes_installs_from_its_folder(tmp_path):
    """A3 kernels for 8.3.RC1 are published without a sha256 in the data: not refused for that
    alone; the lock records the hash on first fetch, and until then a warning says so."""
    findings, _, path = cell_findings(tmp_path, dict(A3_83, cann_source="installer"))
    assert by_rule(findings, "installer-unknown") == []
    cell = matrix.load(Path(path)).cells[0]
    assert plan.unrecorded_installers(cell, knowledge.load(), None) == ("Atlas-A3-cann-kernels_8.3.RC1_linux-aarch64.run",)
    [warning] = checks.installer_findings([cell], {cell.id: ("Atlas-A3-cann-kernels_8.3.RC1_linux-aarch64.run",)})
    assert (warning.rule, warning.severity, warning.field) == ("installer-sha256-unrecorded", "warning", "cells[0].cann")
    assert warning.message.startswith("no sha256 known yet for Atlas-A3-cann-kernels_8.3.RC1_linux-aarch64.run")
    assert "ascend-build lock" in warning.fix
    assert checks.installer_findings([cell], {cell.id: ()}) == []


def test_cann_image_unpinned_is_a_warning(tmp_path):
    findings, lines, _ = cell_findings(tmp_path, dict(VALID, cann_source={"image": "x:tag"}))
    f = only(findings, "cann-image-unpinned")
    assert f.severity == "warning"
    assert (f.field, f.where.line) == ("cells[0].cann_source", lines[(0, "cann_source")])
    assert f.message == "CANN base image x:tag is not pinned by digest"
    assert f.fix == "write it as REF@sha256:DIGEST so every build starts from the same bytes"
    assert [x.rule for x in findings] == ["cann-image-unpinned"]


def test_cann_image_pinned_by_digest_is_clean(tmp_path):
    findings, _, _ = cell_findings(tmp_path, dict(VALID, cann_source={"image": "x:tag@sha256:" + "0" * 64}))
    assert findings == []


def test_local_installer_without_sha256(tmp_path):
    findings, lines, _ = cell_findings(tmp_path, dict(A3_83, cann_source={"local": "/srv/cann"},
                                                      sha256={"unrelated.run": "0" * 64}))
    f = only(findings, "installer-sha256-unknown")  # the toolkit's sha256 is known, the A3 kernels' is not
    assert f.severity == "error"
    assert (f.field, f.where.line) == ("cells[0].sha256", lines[(0, "sha256")])
    assert f.message == "no sha256 known for Atlas-A3-cann-kernels_8.3.RC1_linux-aarch64.run"
    assert f.fix == "add sha256: {Atlas-A3-cann-kernels_8.3.RC1_linux-aarch64.run: <64 hex digits>} " \
                    "taken from the vendor's download page"


def test_local_installer_with_sha256_is_clean(tmp_path):
    findings, _, _ = cell_findings(tmp_path, dict(A3_83, cann_source={"local": "/srv/cann"},
                                                  sha256={"Atlas-A3-cann-kernels_8.3.RC1_linux-aarch64.run": "0" * 64}))
    assert findings == []


def _no_conda_checksum(kb):
    """The knowledge base, except that the conda installer's sha256 is unknown."""
    from dataclasses import replace

    def conda_installers():
        return {arch: replace(found, sha256=None) for arch, found in kb.downloads.conda_installers().items()}

    return with_part(kb, "downloads", conda_installers=conda_installers)


def test_conda_installer_without_sha256(tmp_path):
    path, lines = write_cells(tmp_path, dict(VALID, env="conda"))
    kb = _no_conda_checksum(knowledge.load())
    bootstrap = installers.conda_installer(kb, "x86_64")
    assert bootstrap is not None and bootstrap.sha256 is None
    name = bootstrap.filename
    f = only(checks.check(matrix.load(path).cells, kb), "installer-sha256-unknown")
    assert (f.severity, f.field, f.where.line) == ("error", "cells[0].env", lines[(0, "env")])
    assert f.message == f"no verified sha256 for {name} (x86_64)"
    assert f.fix == f"add sha256: {{{name}: <64 hex digits>}}, or use env: venv"
    # a checksum given in the matrix settles it
    path, _ = write_cells(tmp_path, dict(VALID, env="conda", sha256={name: "1" * 64}))
    assert by_rule(checks.check(matrix.load(path).cells, kb), "installer-sha256-unknown") == []


# --- cann_known -------------------------------------------------------------------------


def test_cann_unknown_is_an_error_naming_the_nearest_releases(tmp_path):
    findings, lines, _ = cell_findings(tmp_path, dict(VALID, cann="8.4.0"))
    f = only(findings, "cann-unknown")
    assert f.severity == "error"
    assert (f.field, f.where.line) == ("cells[0].cann", lines[(0, "cann")])
    assert f.message == "CANN 8.4.0 is not a release the knowledge base knows (nearest: 8.3.RC2, 8.5.0.alpha001)"
    assert "`ascend-build kb cann`" in f.fix and "unlisted: true" in f.fix


def test_an_unlisted_cann_must_be_verifiable(tmp_path):
    findings, lines, _ = cell_findings(tmp_path, dict(VALID, cann="8.4.0", unlisted="true"))
    f = only(findings, "cann-unlisted-unverifiable")
    assert f.severity == "error" and (f.field, f.where.line) == ("cells[0].unlisted", lines[(0, "unlisted")])
    assert by_rule(findings, "cann-unknown") == []
    ref = "local/cann:8.4.0@sha256:" + "1" * 64
    findings, _, _ = cell_findings(tmp_path, dict(VALID, cann="8.4.0", unlisted="true", cann_source={"image": ref}))
    f = only(findings, "cann-unlisted")
    assert f.severity == "warning" and f.message.startswith("CANN 8.4.0 is unlisted on purpose")


# --- driver_known ------------------------------------------------------------------------


def test_a_driver_no_hdk_release_names_is_refused_naming_the_nearest(tmp_path):
    findings, lines, _ = cell_findings(tmp_path, dict(VALID, min_driver="24.1.RC4"))
    f = only(findings, "driver-unknown")
    assert f.severity == "error" and (f.field, f.where.line) == ("cells[0].min_driver", lines[(0, "min_driver")])
    assert f.message == "driver 24.1.RC4 is no HDK release the knowledge base knows (nearest: 24.1.RC3, 24.1.0)"
    assert "unlisted: true" in f.fix
    findings, _, _ = cell_findings(tmp_path, dict(VALID, min_driver="24.1.RC4", unlisted="true"))
    assert only(findings, "driver-unlisted").severity == "warning" and by_rule(findings, "driver-unknown") == []


@pytest.mark.parametrize("driver", ["24.1.RC3", "24.1.rc3", "25.2.1", "25.0.RC1.1"])
def test_a_named_release_or_one_of_a_supported_line_is_known(tmp_path, driver):
    """Named by an observed pair or a pairing (either spelling), or inside a line release notes support (25.2.X)."""
    findings, _, _ = cell_findings(tmp_path, dict(VALID, min_driver=driver))
    assert by_rule(findings, "driver-unknown") == []


def test_a_firmware_nothing_vouches_for_is_refused(tmp_path):
    """Driver 25.2.1 is known by its line, but no version.info range of it is: a firmware never
    seen shipping is an error; one seen shipping passes; unlisted: true makes it a warning."""
    findings, lines, _ = cell_findings(tmp_path, dict(VALID, min_driver="25.2.1", firmware="7.5.0.1.130"))
    f = only(findings, "firmware-unknown")
    assert f.severity == "error" and (f.field, f.where.line) == ("cells[0].firmware", lines[(0, "firmware")])
    assert f.message.startswith("firmware 7.5.0.1.130: no range is known for driver 25.2.1")
    findings, _, _ = cell_findings(tmp_path, dict(VALID, min_driver="25.2.1", firmware="7.5.0.1.129"))
    assert by_rule(findings, "firmware-unknown") == []
    findings, _, _ = cell_findings(tmp_path, dict(VALID, min_driver="25.2.1", firmware="7.5.0.1.130", unlisted="true"))
    assert only(findings, "firmware-unlisted").severity == "warning"


# --- nnal_published ----------------------------------------------------------------------


def test_nnal_before_its_first_release_is_refused(tmp_path):
    findings, lines, _ = cell_findings(tmp_path, dict(CANN_7, nnal="true"))
    f = only(findings, "nnal-unpublished")
    assert f.severity == "error" and (f.field, f.where.line) == ("cells[0].nnal", lines[(0, "nnal")])
    assert f.message == "CANN 7.0.RC1 has no NNAL package the knowledge base knows: the first is CANN 8.0.RC3"
    assert f.fix == "use CANN >= 8.0.RC3, or drop nnal: true"
    assert by_rule(findings, "installer-unknown") == []  # said once, by the rule that knows why


def test_nnal_of_a_known_release_comes_from_its_folder_and_waits_for_its_hash(tmp_path):
    findings, _, path = cell_findings(tmp_path, dict(A3_83, nnal="true"))
    assert by_rule(findings, "nnal-unpublished") == by_rule(findings, "installer-unknown") == []
    cell = matrix.load(Path(path)).cells[0]
    assert plan.unrecorded_installers(cell, knowledge.load(), None) == (
        "Atlas-A3-cann-kernels_8.3.RC1_linux-aarch64.run", "Ascend-cann-nnal_8.3.RC1_linux-aarch64.run")


def test_nnal_from_a_local_folder_needs_its_sha256(tmp_path):
    toolkit = installers.toolkit_package(knowledge.load(), "8.3.RC1", "aarch64")
    kernels = "Atlas-A3-cann-kernels_8.3.RC1_linux-aarch64.run"
    findings, _, _ = cell_findings(tmp_path, dict(A3_83, nnal="true", cann_source={"local": "/srv/cann"},
                                                  sha256={toolkit: "1" * 64, kernels: "2" * 64}))
    f = only(findings, "installer-sha256-unknown")
    assert f.message == "no sha256 known for Ascend-cann-nnal_8.3.RC1_linux-aarch64.run"


def test_nnal_of_a_cann_image_is_the_images_own(tmp_path):
    findings, _, _ = cell_findings(tmp_path, dict(VALID, nnal="true", cann_source={"image": "x:tag@sha256:" + "0" * 64}))
    assert findings == []  # no release floor applies: the smoke test checks the image has libatb.so


# --- torch_atb_glibc ---------------------------------------------------------------------

CANN_91 = dict(VALID, os="debian12", env="venv", python="3.11", cann="9.1.0", torch_npu="2.13.0", min_driver="25.2.RC1")


def test_nnal_from_cann_9_1_on_an_os_older_than_glibc_2_38_is_refused(tmp_path):
    """Ascend's ATB installation page: from CANN 9.1 on, torch_atb needs glibc 2.38."""
    findings, lines, _ = cell_findings(tmp_path, dict(CANN_91, nnal="true"))
    f = only(findings, "nnal-glibc-too-old")
    assert f.severity == "error" and (f.field, f.where.line) == ("cells[0].nnal", lines[(0, "nnal")])
    assert f.message.startswith("NNAL's torch_atb from CANN 9.1.0 needs glibc 2.38; debian12 has glibc 2.36 "
                                "(per Ascend's ATB installation page (ascendtb_0034)")
    assert "openeuler24.03" in f.fix and "ubuntu24.04" in f.fix and "debian12" not in f.fix
    assert "CANN 9.0's torch_atb wheel" in f.fix
    # without NNAL, and on CANN 9.0 (before the change), nothing to say
    assert by_rule(cell_findings(tmp_path, CANN_91)[0], "nnal-glibc-too-old") == []
    assert by_rule(cell_findings(tmp_path, dict(VALID, os="ubuntu22.04", nnal="true", cann="9.0.0", python="3.11",
                                                torch_npu="2.8.0.post2"))[0], "nnal-glibc-too-old") == []


def test_nnal_glibc_is_a_warning_where_ascends_own_image_installs_it():
    """The official 9.1.0-beta.3 Ubuntu 22.04 images install NNAL (glibc 2.35): a warning naming them."""
    kb = knowledge.load()
    found = kb.downloads.torch_atb_glibc("9.1.0-beta.3", "ubuntu22.04")
    assert found is not None
    needs, source, image = found
    assert needs == "2.38" and "ascendtb_0034" in source
    assert image.startswith("Ascend/cann-container-image@fe522a35") and "9.1.0-beta.3-910b-ubuntu22.04" in image
    final = kb.downloads.torch_atb_glibc("9.1.0", "ubuntu22.04")
    assert final is not None and final[2] == ""  # no official image of the final release there
    assert kb.downloads.torch_atb_glibc("9.1.0", "openeuler24.03") is None  # glibc 2.38
    assert kb.downloads.torch_atb_glibc("9.0.0", "ubuntu22.04") is None


# --- unique_tags -------------------------------------------------------------------------


def test_duplicate_tag(tmp_path):
    findings, lines, _ = cell_findings(tmp_path, dict(VALID, name="same"), dict(CANN_7, name="same"))
    f = only(findings, "duplicate-tag")
    assert f.severity == "error"
    assert (f.field, f.where.line) == ("cells[1].name", lines[(1, "name")])  # the second one
    assert f.message == "ascend-build/pytorch:same is produced by 2 cells"
    assert f.fix == "give one of them a distinct name:, or remove the duplicate"


def test_duplicate_derived_tags(tmp_path):
    findings, lines, _ = cell_findings(tmp_path, VALID, VALID, VALID)
    found = by_rule(findings, "duplicate-tag")
    assert [f.where.line for f in found] == [lines[(1, "os")], lines[(2, "os")]]
    assert found[0].message.endswith("is produced by 3 cells")


# --- every rule has a test above -----------------------------------------------------------

COVERED = {
    "cann_known": ("cann-unknown", "version-syntax", "cann-unlisted-unverifiable", "cann-unlisted"),
    "torch_npu_published": ("torch-npu-unpublished",),
    "torch_matches_pin": ("torch-mismatch",),
    "cann_paired": ("cann-mismatch", "cann-pairing-unknown", "cann-below-inferred", "cann-adjacent", "cann-downstream",
                    "cann-window", "cann-uncovered"),
    "python_has_wheel": ("python-no-wheel",),
    "python_within_cann": ("python-outside-cann", "python-outside-cann-shipped"),
    "nnal_python": ("nnal-python",),
    "os_listed": ("os-not-listed",),  # tests/test_os_per_release.py (no shipped list lacks a family of os:)
    "glibc_new_enough": ("glibc-too-old",),
    "product_fits": ("product-chip", "product-unstated", "product-hdk-unknown"),  # tests/test_product_hdk.py
    "product_released": ("product-before-release",),  # tests/test_cann_products.py
    "pins_match_torch_npu": ("torch-npu-requires",),  # tests/test_wheel_requires.py
    "downstream_pins_fit": ("downstream-pin", "downstream-release-unknown"),  # tests/test_downstream_pins.py
    "driver_supports_cann": ("driver-too-old", "driver-missing", "version-syntax", "driver-downstream"),
    "firmware_in_range": ("firmware-out-of-range", "version-syntax", "firmware-unknown", "firmware-unlisted"),
    "driver_known": ("driver-unknown", "driver-unlisted"),
    "chip_supported": ("chip-unsupported",),
    "venv_python_matches": ("venv-python-mismatch",),
    "installers_verifiable": ("installer-unknown", "cann-image-unpinned", "installer-sha256-unknown"),
    "tag_fits": ("tag-too-long",),
    "pins_within_cann_limits": ("cann-python-constraint", "cann-python-constraint-shipped"),
    "env_vars_accepted": ("env-var-rejected", "env-var-unverified"),
    "nnal_published": ("nnal-unpublished",),
    "torch_atb_glibc": ("nnal-glibc-too-old", "nnal-glibc-shipped"),
    "own_wheel_fits": ("torch-npu-wheel-mismatch", "torch-npu-wheel-sha256", "torch-npu-wheel-absent",
                       "torch-unknown"),  # tests/images/test_own_wheel.py
}


def test_every_rule_is_covered_here():
    assert sorted(rule.__name__ for rule in checks.RULES) == sorted(COVERED)


def test_tag_too_long(tmp_path):
    long_name = "x" * 120
    findings, lines, _ = cell_findings(tmp_path, dict(CANN_7, name=long_name))
    f = only(findings, "tag-too-long")
    assert f.severity == "error" and f.where.line == lines[(0, "name")]
    assert f.message == f"tag {long_name}-candidate has 130 characters; Docker allows 128"
    findings, _, _ = cell_findings(tmp_path, dict(CANN_7, name="x" * 118))
    assert by_rule(findings, "tag-too-long") == []


# --- the shipped matrix and --strict -------------------------------------------------------


def test_shipped_matrix_has_no_error():
    loaded = matrix.load(SHIPPED_MATRIX)
    findings = loaded.findings + checks.check(loaded.cells)
    assert [str(f) for f in findings if f.severity == "error"] == []
    # its one known warning: torch_npu 2.13.0 has no published CANN pairing yet
    assert {f.rule for f in findings} == {"cann-pairing-unknown"}


def test_strict_turns_the_warning_into_exit_1():
    runner = CliRunner()
    relaxed = runner.invoke(cli.app, ["validate", "--matrix", str(SHIPPED_MATRIX)])
    assert relaxed.exit_code == 0, relaxed.output
    assert "warning: cann-pairing-unknown" in relaxed.output
    strict = runner.invoke(cli.app, ["validate", "--matrix", str(SHIPPED_MATRIX), "--strict"])
    assert strict.exit_code == 1
    assert "warning: cann-pairing-unknown" in strict.output
    # the warnings: one pairing, the twelve conda cells' locks (no conda channel answers here: their
    # conda part is incomplete; five of them lack x86_64's torch==X+cpu sha256 too), and CANN 9.1.0's
    # installers, published without one
    assert strict.output.count("warning: lock-incomplete") == 12
    assert strict.output.count("the conda part (the conda channel https://conda.anaconda.org/conda-forge could not be "
                               "reached") == 12
    assert strict.output.count("warning: installer-sha256-unrecorded") == 1  # the demo cell's CANN 9.1.0
    # and what --strict alone reports: the Python of CANN 7.0.RC1's, 8.0.RC3's and 8.3.RC1's cells is not
    # checked (the knowledge base holds no installation guide's range of theirs); without --strict, not said
    assert strict.output.count("warning: python-not-checked") == 3 and "python-not-checked" not in relaxed.output
    # and their OS: the knowledge base holds no installation guide's OS list of those three releases
    assert strict.output.count("warning: os-not-checked") == 3 and "os-not-checked" not in relaxed.output
    assert f"20 error(s) in {SHIPPED_MATRIX}" in strict.output


# --- CANN's Python limits and torch_npu's environment options (builder/data/python-env.yaml) -----------


def test_a_pin_cann_refuses_is_an_error_with_its_line_and_source(tmp_path):
    findings, lines, path = cell_findings(tmp_path, dict(CANN_7, pip=["numpy==2.0.2"]))
    f = only(findings, "cann-python-constraint")
    assert f.severity == "error" and f.where.line == lines[(0, "pip")] and f.field == "cells[0].pip"
    assert f.message.startswith("numpy==2.0.2 is outside numpy<2, which CANN 7.0.RC1 needs (inferred from NumPy 2 (2024-06)")
    assert f.fix == "pin numpy within numpy<2, or drop the pin and let the lock choose"
    # within the limits, or a package CANN does not bound: no finding
    for pins in (["numpy==1.26.4"], ["einops==0.8.0"]):
        assert by_rule(cell_findings(tmp_path, dict(CANN_7, pip=pins))[0], "cann-python-constraint") == []


def test_cann_8_limits_come_from_the_install_guide(tmp_path):
    findings, _, _ = cell_findings(tmp_path, dict(VALID, pip=["numpy==1.26.4", "protobuf==4.25.3"]))
    messages = [f.message for f in by_rule(findings, "cann-python-constraint")]
    assert len(messages) == 2
    assert "numpy==1.26.4 is outside numpy>=1.19.2,<=1.24.0, which CANN 8.0.RC3 needs (per CANN installation guide" in messages[0]
    assert "protobuf==4.25.3 is outside protobuf>=3.20,<3.21" in messages[1]


def test_canns_own_floors_on_the_packages_its_tools_import_refuse_a_pin_below_them(tmp_path):
    """The 8.0.RC2 .. 9.1.0 guides: decorator >=4.4.0, sympy >=1.5.1, cffi >=1.12.3."""
    findings, _, _ = cell_findings(tmp_path, dict(VALID, pip=["sympy==1.4", "decorator==4.3.2", "cffi==1.12.3"]))
    found = by_rule(findings, "cann-python-constraint")
    assert [f.message.split(",")[0] for f in found] == ["sympy==1.4 is outside sympy>=1.5.1",
                                                        "decorator==4.3.2 is outside decorator>=4.4.0"]
    assert all(f.severity == "error" and "which CANN 8.0.RC3 needs (per CANN installation guides" in f.message
               for f in found)
    assert found[0].fix == "pin sympy within sympy>=1.5.1, or drop the pin and let the lock choose"
    for cann, npu, python in (("8.0.RC2", "2.3.1", "3.10"), ("9.1.0", "2.11.0", "3.11")):  # both ends of the guides read
        cell = dict(VALID, cann=cann, torch_npu=npu, python=python, pip=["sympy==1.4"])
        assert by_rule(cell_findings(tmp_path, cell)[0], "cann-python-constraint"), cann
    # before 8.0.RC2 no guide read states them: not checked there
    assert not by_rule(cell_findings(tmp_path, dict(CANN_7, pip=["sympy==1.4"]))[0], "cann-python-constraint")
    # kb cann shows the floors
    assert {"decorator>=4.4.0", "sympy>=1.5.1", "cffi>=1.12.3"} <= set(describe_cann(knowledge.load(), "8.3.RC1")
                                                                       ["python_limits"])


def test_a_driver_cann_refuses_but_mindie_runs_is_a_warning_naming_mindie(tmp_path):
    """CANN's notes bound 8.2.RC1 at HDK 25.0.RC1 (8.5.0's 25.0.X); MindIE 2.1.RC1's notes run it
    on 24.1.RC2 .. 25.2.0: the strictest is the default, what MindIE ships a named warning."""
    cell = dict(VALID, cann="8.2.RC1", torch_npu="2.5.1.post1", python="3.10")
    f = only(cell_findings(tmp_path, dict(cell, driver="24.1.RC3"))[0], "driver-downstream")
    assert f.severity == "warning" and "below 25.0.RC1, the minimum HDK for CANN 8.2.RC1" in f.message
    assert "MindIE 2.1.RC1 release notes" in f.message and f.fix.endswith("or set driver: 25.0.RC1 or newer")
    # a driver MindIE does not name stays an error; the minimum itself needs nothing
    findings = cell_findings(tmp_path, dict(cell, driver="24.1.RC1"))[0]
    assert only(findings, "driver-too-old").severity == "error" and by_rule(findings, "driver-downstream") == []
    assert by_rule(cell_findings(tmp_path, dict(cell, driver="25.0.RC1"))[0], "driver-downstream") == []


def test_a_pin_the_guide_excludes_but_vllm_ascend_ships_is_a_warning_naming_it(tmp_path):
    """The 8.0.RC2 .. 9.0.x guides ask for protobuf 3.20.x; vllm-ascend installs protobuf>3.20.0 on 8.2.RC1 .. 9.0.1."""
    cell = dict(VALID, cann="8.3.RC2", torch_npu="2.7.1", python="3.11", env="conda", driver="25.0.RC1")
    f = only(cell_findings(tmp_path, dict(cell, pip=["protobuf==5.29.3"]))[0], "cann-python-constraint-shipped")
    assert f.severity == "warning" and "vllm-project/vllm-ascend@v0.11.0:Dockerfile" in f.message
    assert by_rule(cell_findings(tmp_path, dict(cell, pip=["protobuf==5.29.3"]))[0], "cann-python-constraint") == []
    # on a CANN vllm-ascend never shipped it on, the guide's limit stays an error
    older = dict(VALID, pip=["protobuf==5.29.3"])  # CANN 8.0.RC3
    assert only(cell_findings(tmp_path, older)[0], "cann-python-constraint").severity == "error"
    # and the lock still resolves within the guide's limit (the strictest is the default)
    assert "protobuf>=3.20,<3.21" in {c.requirement for c in python_env.constraints("8.3.RC2", "3.11")}


def test_the_numpy_limit_of_cann_8_5_depends_on_the_python(tmp_path):
    """CANN 8.5.0's guide: numpy >= 1.19.2, < 2.0 below Python 3.13; numpy > 2.1 from 3.13."""
    cell = dict(VALID, cann="8.5.0", driver="25.0.RC1", torch_npu="2.9.0", env="conda")
    on_311 = by_rule(cell_findings(tmp_path, dict(cell, python="3.11", pip=["numpy==2.2.6"]))[0], "cann-python-constraint")
    assert [f.message.split(" (per ")[0] for f in on_311] == [
        "numpy==2.2.6 is outside numpy>=1.19.2,<2, which CANN 8.5.0 needs on Python < 3.13"]
    assert "canncommercial/850/softwareinst/instg/instg_0045.html" in on_311[0].message
    # on 3.13 numpy 2.2 is what the guide asks for, and numpy 1.26 is refused
    cell13 = dict(cell, cann="8.5.0", torch_npu="2.11.0rc1", python="3.13")
    assert by_rule(cell_findings(tmp_path, dict(cell13, pip=["numpy==2.2.6"]))[0], "cann-python-constraint") == []
    on_313 = by_rule(cell_findings(tmp_path, dict(cell13, pip=["numpy==1.26.4"]))[0], "cann-python-constraint")
    assert [f.message.split(" (per ")[0] for f in on_313] == [
        "numpy==1.26.4 is outside numpy>2.1, which CANN 8.5.0 needs on Python >= 3.13"]


def test_a_python_outside_the_cann_guide_is_an_error_naming_range_and_source(tmp_path):
    # CANN 8.0.RC2's guide: Python 3.7.x to 3.10.x; a CANN-only cell is checked too
    cann_only = {k: v for k, v in VALID.items() if k != "torch_npu"}
    findings, lines, _ = cell_findings(tmp_path, dict(cann_only, cann="8.0.RC2", python="3.11", env="conda"))
    f = only(findings, "python-outside-cann")
    assert f.severity == "error" and f.where.line == lines[(0, "python")]
    assert f.message.startswith("Python 3.11 is outside 3.7 to 3.10, the Pythons CANN 8.0.RC2's installation guide "
                                "supports (per CANN 8.0.RC2 installation guide")
    assert "canncommercial/80RC2/softwareinst/instg/instg_0048.html" in f.message
    assert f.fix == "use Python 3.7 to 3.10, or a CANN release that supports Python 3.11"
    # the range moves with the release: 3.13 is in 8.5.0's and 9.1.0's, 3.14 only in 9.1.0's
    for cann, python, refused in (("8.5.0", "3.13", False), ("8.5.0", "3.14", True), ("9.1.0", "3.14", False),
                                  ("8.0.RC2", "3.10", False)):
        cell = dict(cann_only, cann=cann, python=python, env="conda", driver="26.0.RC1")
        assert bool(by_rule(cell_findings(tmp_path, cell)[0], "python-outside-cann")) is refused, (cann, python)
    # a release whose guide the knowledge base does not hold is not checked (unknown, not incompatible)
    assert by_rule(cell_findings(tmp_path, dict(cann_only, cann="8.1.RC1", python="3.13", env="conda",
                                                driver="25.0.RC1"))[0], "python-outside-cann") == []


def test_a_python_the_guide_excludes_but_ascend_and_vllm_ship_is_a_named_warning(tmp_path):
    # CANN 9.0.0's guide ends at 3.11; Ascend's own 9.0.0 images and vllm-ascend v0.21.0rc1 run it on 3.12
    cell = dict(VALID, cann="9.0.0", python="3.12", torch_npu="2.10.0", env="conda", driver="25.0.RC1")
    findings, _, _ = cell_findings(tmp_path, cell)
    f = only(findings, "python-outside-cann-shipped")
    assert f.severity == "warning" and by_rule(findings, "python-outside-cann") == []
    assert "Ascend/cann-container-image@8145b0b2" in f.message and "vllm-project/vllm-ascend@v0.21.0rc1" in f.message
    # 3.13, which nobody is known to ship on 9.0.0, stays an error (the strictest source is the default)
    findings, _, _ = cell_findings(tmp_path, dict(cell, python="3.13"))
    assert only(findings, "python-outside-cann").severity == "error"


def test_an_allocator_option_the_torch_npu_refuses_is_an_error(tmp_path):
    cell = dict(CANN_7, env_vars={"PYTORCH_NPU_ALLOC_CONF": "max_split_size_mb:128,expandable_segments:True"})
    findings, lines, _ = cell_findings(tmp_path, cell)
    f = only(findings, "env-var-rejected")
    assert f.severity == "error" and f.where.line == lines[(0, "env_vars")]
    assert f.message.startswith("torch_npu 2.1.0rc1 refuses PYTORCH_NPU_ALLOC_CONF key 'expandable_segments'")
    assert "Unrecognized CachingAllocator option" in f.message and "Ascend/pytorch@579994f8" in f.message
    assert f.fix == "drop expandable_segments from PYTORCH_NPU_ALLOC_CONF, or use torch_npu 2.1.0 or newer"
    # the keys 2.1.0rc1 knows pass; 2.4.0 takes expandable_segments
    ok = dict(CANN_7, env_vars={"PYTORCH_NPU_ALLOC_CONF": "max_split_size_mb:128,garbage_collection_threshold:0.8"})
    assert by_rule(cell_findings(tmp_path, ok)[0], "env-var-rejected") == []
    newer = dict(VALID, env_vars={"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"})
    assert by_rule(cell_findings(tmp_path, newer)[0], "env-var-rejected") == []


def test_an_allocator_option_of_a_release_whose_parser_was_not_read_is_a_warning(tmp_path):
    # 2.5.1rc1 predates every release tag of the 2.5 line: what it parses is unknown, not refused
    cell = dict(VALID, torch_npu="2.5.1rc1", env_vars={"PYTORCH_NPU_ALLOC_CONF": "page_size:1g"})
    f = only(cell_findings(tmp_path, cell)[0], "env-var-unverified")
    assert f.severity == "warning" and "has not read the parser of torch_npu 2.5.1rc1" in f.message


def test_allocator_keys_come_from_the_parser_at_each_release_tag(tmp_path):
    # torch_npu 2.4.0 (tag v6.0.rc3-pytorch2.4.0) has no page_size: an error citing that tag's parser
    findings, _, _ = cell_findings(tmp_path, dict(VALID, env_vars={"PYTORCH_NPU_ALLOC_CONF": "page_size:1g"}))
    f = only(findings, "env-var-rejected")
    assert "Ascend/pytorch@5762ec634b89b96f0a809cd9bc0247939681b5b6:torch_npu/csrc/core/npu/NPUCachingAllocator.cpp " \
           "(tag v6.0.rc3-pytorch2.4.0)" in f.message
    assert f.fix == "drop page_size from PYTORCH_NPU_ALLOC_CONF, or use torch_npu 2.4.0.post4 or newer"
    # a key the release parses gets no finding at all, however new (2.13.0's throw_on_npumalloc_oom)
    new = dict(VALID, os="debian12", cann="9.1.0", python="3.11", env="venv", torch_npu="2.13.0",
               env_vars={"PYTORCH_NPU_ALLOC_CONF": "throw_on_npumalloc_oom:True,expandable_segments:True"})
    assert [f.rule for f in cell_findings(tmp_path, new)[0] if f.rule.startswith("env-var")] == []
    # 2.13.0 refuses with its own message
    f = only(cell_findings(tmp_path, dict(new, env_vars={"PYTORCH_NPU_ALLOC_CONF": "align_hugepages:True"}))[0],
             "env-var-rejected")
    assert 'with "Unrecognized key"' in f.message and "(tag v26.2.0-0day-pytorch2.13.0)" in f.message
    # keys also go away: align_hugepages is parsed by 6.0.rc2's releases only (2.3.1, 2.3.1.post1 on its line)
    old = dict(VALID, cann="8.0.RC2", torch_npu="2.3.1", env_vars={"PYTORCH_NPU_ALLOC_CONF": "align_hugepages:True"})
    assert by_rule(cell_findings(tmp_path, old)[0], "env-var-rejected") == []
    f = only(cell_findings(tmp_path, dict(old, cann="8.0.RC3", torch_npu="2.3.1.post2"))[0], "env-var-rejected")
    assert f.fix == "drop align_hugepages from PYTORCH_NPU_ALLOC_CONF, or use a torch_npu that parses it (2.3.1 to 2.3.1.post1)"


def test_lock_states_become_warnings_on_the_cell():
    cells = matrix.load(SHIPPED_MATRIX).cells
    states = {cells[0].id: ("missing", ""), cells[1].id: ("stale", ""), cells[2].id: ("incomplete", "torch: why"),
              cells[3].id: ("ok", "")}
    found = checks.lock_findings(cells[:4], states)
    assert [(f.rule, f.severity) for f in found] == [("lock-missing", "warning"), ("lock-stale", "warning"),
                                                     ("lock-incomplete", "warning")]
    assert found[2].message.endswith(": torch: why") and "ascend-build lock" in found[0].fix


# --- one shape for every finding ------------------------------------------------------------

# One matrix per rule id (a one- or two-key change of VALID or CANN_7): each must produce that rule.
A3_LOCAL = dict(VALID, arch="aarch64", chip="a3", cann="8.3.RC1", torch_npu="2.7.1", cann_source={"local": "/srv/cann"},
                sha256={"unrelated.run": "0" * 64})
SHAPE_CASES: Dict[str, List[dict]] = {
    "torch-npu-unpublished": [dict(CANN_7, torch_npu="2.1.0.post5")],
    "torch-mismatch": [dict(CANN_7, torch="2.2.0")],
    "cann-mismatch": [dict(VALID, torch_npu="2.9.0", python="3.11")],
    "cann-uncovered": [dict(CANN_7, torch_npu="2.4.0")],
    "cann-adjacent": [dict(VALID, cann="8.3.RC2", python="3.11", torch_npu="2.6.0.post3", min_driver="25.0.RC1")],
    "product-before-release": [dict(VALID, arch="aarch64", chip="950", cann="8.5.0", python="3.11", torch_npu="2.9.0",
                                    product="atlas-350")],
    "torch-npu-requires": [dict(VALID, cann="8.5.0", python="3.11", torch_npu="2.9.0", pip=["torch==2.9.1"])],
    "downstream-pin": [dict(VALID, cann="8.5.0", python="3.11", torch_npu="2.9.0", pip=["vllm-ascend==0.13.0"])],
    "downstream-release-unknown": [dict(VALID, cann="8.5.0", python="3.11", torch_npu="2.9.0",
                                        pip=["vllm-ascend==0.0.1"])],
    "cann-downstream": [dict(VALID, cann="9.1.0-beta.1", torch_npu="2.10.0", python="3.11")],
    "cann-window": [dict(VALID, cann="8.0.RC3", torch_npu="2.5.1")],
    "cann-pairing-unknown": [dict(VALID, os="debian12", cann="9.1.0", python="3.11", torch_npu="2.13.0", env="venv")],
    "cann-below-inferred": [dict(VALID, os="debian12", cann="9.0.0", python="3.11", torch_npu="2.13.0", env="venv")],
    "nnal-glibc-too-old": [dict(VALID, os="debian12", cann="9.1.0", python="3.11", torch_npu="2.13.0", env="venv",
                                nnal="true")],
    "nnal-glibc-shipped": [dict(VALID, os="ubuntu22.04", cann="9.1.0-beta.3", python="3.11", torch_npu="2.13.0",
                                nnal="true")],
    "cann-unknown": [dict(VALID, cann="8.4.0")],
    "cann-unlisted-unverifiable": [dict(VALID, cann="8.4.0", unlisted=True)],
    "cann-unlisted": [dict(VALID, cann="8.4.0", unlisted=True,
                           cann_source={"image": "local/cann:8.4.0@sha256:" + "1" * 64})],
    "cann-image-unpinned": [dict(VALID, cann_source={"image": "x:tag"})],
    "installer-unknown": [dict(VALID, cann="8.4.0")],
    "installer-sha256-unknown": [A3_LOCAL],
    "driver-missing": [dict(VALID, cann="8.4.0")],
    "product-chip": [dict(VALID, product="atlas-350")],
    "product-unstated": [dict(VALID, arch="aarch64", chip="950", cann="9.1.0", python="3.11", torch_npu="2.12.0")],
    "product-hdk-unknown": [dict(VALID, arch="aarch64", chip="950", cann="9.0.1", python="3.11", torch_npu="2.9.0.post2",
                                 product="atlas-350")],
    "driver-too-old": [dict(VALID, min_driver="23.0.3")],
    "driver-downstream": [dict(VALID, cann="8.2.RC1", torch_npu="2.5.1.post1", python="3.10", min_driver="24.1.RC3")],
    "driver-key-renamed": [dict(VALID, driver="24.1.RC3")],
    "driver-unknown": [dict(VALID, min_driver="24.1.RC4")],
    "driver-unlisted": [dict(VALID, min_driver="24.1.RC4", unlisted=True)],
    "version-syntax": [dict(VALID, min_driver="24.1.xx")],
    "firmware-out-of-range": [dict(CANN_7, min_driver="24.1.RC1", firmware="7.5.0.1.129")],
    "firmware-unknown": [dict(VALID, min_driver="25.2.1", firmware="7.5.0.1.130")],
    "firmware-unlisted": [dict(VALID, min_driver="25.2.1", firmware="7.5.0.1.130", unlisted=True)],
    "chip-unsupported": [dict(VALID, arch="aarch64", chip="a3")],
    "python-no-wheel": [dict(VALID, cann="8.0.RC2", python="3.11", torch_npu="2.3.1")],
    "glibc-too-old": [dict(VALID, os="ubuntu18.04", cann="8.3.RC1", torch_npu="2.7.1")],
    "python-outside-cann": [dict(VALID, cann="8.0.RC2", python="3.11", torch_npu="2.3.1", env="conda")],
    "python-outside-cann-shipped": [dict(VALID, cann="9.0.0", python="3.12", torch_npu="2.10.0", env="conda",
                                         driver="25.0.RC1")],
    "venv-python-mismatch": [dict(VALID, os="debian12", env="venv")],
    "nnal-unpublished": [dict(CANN_7, nnal=True)],
    "nnal-python": [dict(VALID, cann="8.5.0", python="3.9", torch_npu="2.8.0.post2", nnal=True)],
    "tag-too-long": [dict(CANN_7, name="x" * 120)],
    "duplicate-tag": [dict(VALID, name="same"), dict(CANN_7, name="same")],
    "cann-python-constraint": [dict(CANN_7, pip=["numpy==2.0.2"])],
    "cann-python-constraint-shipped": [dict(VALID, cann="8.3.RC2", torch_npu="2.7.1", python="3.11", env="conda",
                                            driver="25.0.RC1", pip=["protobuf==5.29.3"])],
    "env-var-rejected": [dict(CANN_7, env_vars={"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"})],
    "env-var-unverified": [dict(VALID, torch_npu="2.5.1rc1", env_vars={"PYTORCH_NPU_ALLOC_CONF": "page_size:1g"})],
    "schema-missing": [{k: v for k, v in VALID.items() if k != "python"}],
    "schema-type": [dict(VALID, pip="numpy")],
    "schema-unknown-key": [dict(VALID, torch_npu_version="2.4.0")],
    "schema-value": [dict(VALID, arch="sparc")],
    # OWN_WHEEL: a synthetic torch_npu 2.4.0 wheel for CPython 3.10 on x86_64 the test writes
    "torch-npu-wheel-mismatch": [dict(VALID, torch_npu_wheel={"path": "OWN_WHEEL", "sha256": "OWN_SHA"},
                                      python="3.11")],
    "torch-npu-wheel-sha256": [dict(VALID, torch_npu_wheel={"path": "OWN_WHEEL", "sha256": "0" * 64})],
    "torch-npu-wheel-absent": [dict(VALID, torch_npu_wheel={"path": "no/torch_npu-2.4.0-py3-none-any.whl",
                                                            "sha256": "0" * 64})],
    "torch-unknown": [dict(VALID, torch_npu="2.4.9", torch_npu_wheel={"path": "no/torch_npu-2.4.9-py3-none-any.whl",
                                                                      "sha256": "0" * 64})],
}
# file:line:column: severity: rule [field path]: message on one line, then the fix on its own line
SHAPE = re.compile(r"(?P<file>/\S+\.yaml):[1-9]\d*:[1-9]\d*: (error|warning): (?P<rule>[a-z0-9]+(-[a-z0-9]+)+) "
                   r"\[(?P<field>cells\[\d+\](\.[a-z0-9_]+)*)\]: \S[^\n]*\n  fix: \S[^\n]*")


@pytest.mark.parametrize("rule", sorted(SHAPE_CASES))
def test_every_finding_has_one_shape(tmp_path, rule):
    wheel = synthetic_torch_npu_wheel(tmp_path, version="2.4.0", torch="2.4.0", tag="cp310-cp310",
                                      platform="manylinux_2_17_x86_64")
    own = {"OWN_WHEEL": str(wheel), "OWN_SHA": hashlib.sha256(wheel.read_bytes()).hexdigest()}
    cells = [dict(c, torch_npu_wheel={k: own.get(v, v) for k, v in c["torch_npu_wheel"].items()})
             if "torch_npu_wheel" in c else c for c in SHAPE_CASES[rule]]
    findings, _, path = cell_findings(tmp_path, *cells)
    assert by_rule(findings, rule), f"{rule} not produced: {[str(f) for f in findings]}"
    for f in findings:
        shape = SHAPE.fullmatch(str(f))
        assert shape, f"not in the common shape: {str(f)!r}"
        assert shape["file"] == path and shape["field"] == f.field


def test_lock_and_installer_findings_have_the_same_shape(tmp_path):
    path, _ = write_cells(tmp_path, VALID)
    cell = matrix.load(path).cells[0]
    made = checks.lock_findings([cell] * 3, {cell.id: ("missing", "")}) + checks.lock_findings(
        [cell], {cell.id: ("incomplete", "torch")}) + checks.installer_findings([cell], {cell.id: ("X.run",)})
    assert {f.rule for f in made} == {"lock-missing", "lock-incomplete", "installer-sha256-unrecorded"}
    for f in made:
        assert SHAPE.fullmatch(str(f)), str(f)


def test_the_shape_cases_cover_every_rule_id():
    """Every rule id the source can emit has a case above (found by reading the source)."""
    from builder.images import downstream_checks, pin_checks, product_checks
    source = "\n".join(p.read_text() for p in (Path(checks.__file__), Path(matrix.__file__), Path(pin_checks.__file__),
                                                 Path(product_checks.__file__), Path(downstream_checks.__file__)))
    emitted = set(re.findall(r'_finding\(cell, "[a-z_]+"(?: if [^,]+ else "[a-z_]+")?, "([a-z0-9-]+)"', source))
    emitted |= set(re.findall(r'"(firmware-unlisted)" if', source))
    emitted |= set(re.findall(r'out\.(?:error|warning)\("([a-z0-9-]+)"', source))
    emitted |= {rule for rule, _, _ in checks.LOCK_RULES.values()}
    assert len(emitted) > 30
    assert emitted - set(SHAPE_CASES) - {"lock-missing", "lock-stale", "lock-incomplete",
                                          "installer-sha256-unrecorded", "python-not-checked", "os-not-checked",
                                          "os-not-listed"} == set()  # the last two: tests/test_os_per_release.py


def test_python_not_checked_is_reported_by_strict_only_with_the_marker_and_the_same_shape(tmp_path):
    """A release whose Python range no guide gave the knowledge base carries an explicit marker
    (python_not_checked): `validate --strict` names it, plain `validate` stays silent (unknown is
    not incompatible), `kb cann` says "not checked"."""
    cell = dict(VALID, cann="8.1.RC1", torch_npu="2.5.1", arch="aarch64")
    path, _ = write_cells(tmp_path, cell)
    made = checks.not_checked(matrix.load(path).cells)
    assert [f.rule for f in made] == ["python-not-checked", "os-not-checked"] and made[0].severity == "warning"
    assert made[0].message.startswith("Python 3.10 is not checked against CANN 8.1.RC1: the knowledge base holds no "
                                      "Python range of that release (searched, not found:")
    assert SHAPE.fullmatch(str(made[0])), str(made[0])
    assert checks.not_checked(matrix.load(write_cells(tmp_path, dict(VALID, cann="8.5.0", python="3.11",
                                                                     torch_npu="2.8.0.post2"),
                                                          name="ranged.yaml")[0]).cells) == []
    runner = CliRunner()
    relaxed = runner.invoke(cli.app, ["validate", "--matrix", str(path), "--out", str(tmp_path / "out")])
    strict = runner.invoke(cli.app, ["validate", "--matrix", str(path), "--out", str(tmp_path / "out"), "--strict"])
    assert "python-not-checked" not in relaxed.output and relaxed.exit_code == 0, relaxed.output
    assert "warning: python-not-checked [cells[0].python]" in strict.output and strict.exit_code == 1


def test_nnal_on_a_python_its_guide_does_not_list_for_nnal_is_a_warning(tmp_path):
    findings, lines, _ = cell_findings(tmp_path, dict(VALID, cann="8.5.0", python="3.9", torch_npu="2.8.0.post2",
                                                      nnal=True))
    f = only(findings, "nnal-python")
    assert f.severity == "warning" and (f.field, f.where.line) == ("cells[0].nnal", lines[(0, "nnal")])
    assert f.message.startswith("NNAL's Python library (torch_atb) of CANN 8.5.0 needs Python 3.10 or 3.11; the cell "
                                "has Python 3.9 (per CANN 8.5.0 installation guide: 'If the Python library of the NNAL")
    for python, npu in (("3.10", "2.8.0.post2"), ("3.11", "2.8.0.post2")):  # the Pythons it names
        assert not by_rule(cell_findings(tmp_path, dict(VALID, cann="8.5.0", python=python, torch_npu=npu,
                                                        nnal=True))[0], "nnal-python"), python
    # without nnal, or on a release whose guide says nothing of NNAL's Python, nothing is said
    assert not by_rule(cell_findings(tmp_path, dict(VALID, cann="8.5.0", python="3.9", torch_npu="2.8.0.post2"))[0],
                       "nnal-python")


def test_a_pair_a_downstream_project_ships_is_a_warning_naming_it(tmp_path):
    findings, lines, _ = cell_findings(tmp_path, dict(VALID, cann="9.1.0-beta.1", torch_npu="2.10.0", python="3.11"))
    f = only(findings, "cann-downstream")
    assert f.severity == "warning" and (f.field, f.where.line) == ("cells[0].cann", lines[(0, "cann")])
    assert f.message == ("torch_npu 2.10.0 is paired with CANN 9.0.0 (published); CANN 9.1.0-beta.1 is not published "
                         "for it, but a downstream project ships this pair (vllm-project/vllm-ascend@v0.20.2rc1:Dockerfile.310p)")
    assert not by_rule(findings, "cann-mismatch")
    # one release further from the pair, with no such evidence and no table that speaks of 9.2.0: unconfirmed
    assert by_rule(cell_findings(tmp_path, dict(VALID, cann="9.2.0", torch_npu="2.10.0", python="3.11"))[0],
                   "cann-uncovered")


def test_a_pair_inside_a_published_compatibility_window_is_a_warning_naming_the_window(tmp_path):
    """TorchNPU 7.3.1's release notes list PTA 7.0.0 with CANN 8.3.RC1 .. 8.0.RC2: torch_npu 2.5.1 (PTA 7.0.0,
    paired with 8.1.RC1) on CANN 8.0.RC3 is documented compatible; the message names the document and row."""
    findings, lines, _ = cell_findings(tmp_path, dict(VALID, cann="8.0.RC3", torch_npu="2.5.1"))
    f = only(findings, "cann-window")
    assert f.severity == "warning" and (f.field, f.where.line) == ("cells[0].cann", lines[(0, "cann")])
    assert f.message == ("torch_npu 2.5.1 (PTA 7.0.0) is paired with CANN 8.1.RC1; CANN 8.0.RC3 is not its pair, but a "
                         "published table marks PTA 7.0.0 compatible with it (Ascend/pytorch@v7.3.1-pytorch2.7.1:"
                         "docs/zh/release_notes/release_notes.md, line 69; 1 older release notes agree)")
    assert f.fix == "keep it (Ascend documents it compatible), or set cann: 8.1.RC1 for the published pair"
    assert not [g for g in findings if g.severity == "error"]
    # the hand-kept window (PTA 6.0.0, from a page no copy of which is kept) names its page
    found = only(cell_findings(tmp_path, dict(VALID, cann="8.3.RC1", torch_npu="2.4.0.post2"))[0], "cann-window")
    assert found.message.endswith("(https://www.hiascend.com/document/detail/zh/Pytorch/720/releasenote/"
                                  "releasenote_0005.html)")
    for npu, cann in (("2.1.0.post10", "8.3.RC1"), ("2.6.0.post3", "8.0.RC2"), ("2.4.0.post4", "8.2.RC1")):
        found = cell_findings(tmp_path, dict(VALID, cann=cann, torch_npu=npu, python="3.10"))[0]
        assert by_rule(found, "cann-window") and not by_rule(found, "cann-mismatch"), (npu, cann)
    # a table that covers PTA 7.0.0 and has a column for 8.5.0 leaves it out: refused, naming the table
    outside = only(cell_findings(tmp_path, dict(VALID, cann="8.5.0", torch_npu="2.5.1", python="3.10"))[0],
                   "cann-mismatch")
    assert outside.severity == "error"
    assert outside.message.startswith("torch_npu 2.5.1 (PTA 7.0.0) is paired with CANN 8.1.RC1, not CANN 8.5.0: the "
                                      "published table that covers PTA 7.0.0 lists CANN 8.3.RC1, 8.2.RC1, 8.1.RC1, "
                                      "8.0.0, 8.0.RC3, 8.0.RC2 for it, not 8.5.0 (Ascend/pytorch@v7.3.1-pytorch2.7.1")
    # what `lock` and `image` take (checks.refused) is what validate accepts
    path, _ = write_cells(tmp_path, dict(VALID, cann="8.0.RC3", torch_npu="2.5.1"))
    assert checks.refused(matrix.load(path).cells) == []
