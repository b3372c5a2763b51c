""""Node driver >= image minimum" is one rule: validate, pull, doctor and the smoke program
agree on it for every shipped cell and every driver the knowledge base knows."""

import importlib.util
from dataclasses import replace

import pytest

from builder import knowledge, versions
from builder.images import checks, matrix
from builder.node import doctor, pull
from builder.node.host import HostInfo
from builder.registry import ImageInfo
from builder.vocabulary import NPU, Label
from tests.support.matrix import SHIPPED_MATRIX

CELLS = matrix.load(SHIPPED_MATRIX).cells


def smoke_module():
    spec = importlib.util.spec_from_file_location("smoke_for_min_driver", knowledge.DATA_DIR.parent / "smoke" / "smoke.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SMOKE = smoke_module()
# Every HDK the knowledge base names (pairings, release notes), plus lines and junk.
DRIVERS = sorted({str(d) for d in ("6.0.0", "22.0.RC1", "23.0.RC3", "24.1.RC2", "24.1.rc3", "25.0.RC1", "25.0.rc1.1", "25.2.0", "25.3.RC1",
                                   "25.5.1", "26.0.RC1", "not-a-driver")}
                 | {knowledge.load().drivers.min_driver(c.cann) or "23.0.RC3" for c in CELLS})


def image(cell):
    labels = {Label.CELL: cell.id, Label.VARIANT: NPU, Label.VALIDATED: "true", Label.ARCH: cell.arch,
              Label.CHIP: cell.chip, Label.CANN: cell.cann, Label.MIN_DRIVER: cell.driver}
    return ImageInfo(tag=cell.tag, digest="sha256:" + "0" * 64, labels=labels, architecture=cell.arch)


def decisions(cell, driver):
    """What each caller decides for a node with ``driver`` and the image of ``cell``:
    True fits, False does not, None cannot tell (pull then refuses, doctor warns, the
    smoke program notes it)."""
    node = pull.Node(arch=cell.arch, chip=cell.chip, driver=driver, firmware=None)
    refused = [r for r in pull.why_not(image(cell), node, pull.Wanted()) if r.startswith(("driver", "node driver"))]
    checked = doctor.image_checks(image(cell).labels, {}, HostInfo(driver=driver, arch=cell.arch, chip=cell.chip))
    status = [c.status for c in checked if c.name == "image: driver vs CANN"]
    [one] = status
    by_doctor = {doctor.OK: True, doctor.FAIL: False, doctor.WARN: None}[one]
    problems, notes = SMOKE.check_host(driver, None, {"min_driver": cell.driver}, "npu")
    by_smoke = False if problems else (None if any("cannot order" in n for n in notes) else True)
    by_pull = not refused if by_doctor is not None else (None if refused else True)
    as_cell = replace(cell, driver=driver)
    by_validate = not any(f.rule == "driver-too-old" for f in checks.driver_supports_cann(as_cell, knowledge.load()))
    return by_pull, by_doctor, by_smoke, by_validate


@pytest.mark.parametrize("cell", CELLS, ids=lambda c: c.id)
def test_every_caller_agrees_on_the_minimum_driver(cell):
    assert cell.driver, "every shipped cell names its minimum driver"
    kb_min = knowledge.load().drivers.min_driver(cell.cann)
    for driver in DRIVERS:
        fits = versions.meets_minimum("hdk", driver, cell.driver)
        by_pull, by_doctor, by_smoke, by_validate = decisions(cell, driver)
        assert (by_pull, by_doctor, by_smoke) == (fits, fits, fits), driver
        if versions.lenient("hdk", driver) is not None:  # validate refuses junk by syntax, not by this rule
            assert by_validate == (versions.meets_minimum("hdk", driver, kb_min) is not False), driver


def test_the_grid_holds_drivers_on_both_sides_of_every_minimum():
    for cell in CELLS:
        outcomes = {versions.meets_minimum("hdk", d, cell.driver) for d in DRIVERS}
        assert {True, False} <= outcomes, cell.id
