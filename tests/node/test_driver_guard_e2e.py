"""The driver guard for real: a twin built and sealed by `ascend-build image` (its smoke test runs
behind the guard, with no driver), then started through the real engine with a fixture node's
``driver/version.info`` bind-mounted where the device plugin and `ascend-build run` mount it:
below the image's minimum (refused, with the cause and fix), at it (the command runs).

The twin is the CANN-only cell's (Python and its locked closure, no torch: the cheapest image
the pipeline seals); it states its NPU image's minimum driver, 25.2.RC1 for CANN 9.1.0.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import yaml

from helpers_cann import installers_91
from helpers_matrix import run_cli
from helpers_node import DRIVER_INFO, make_node

WHEELHOUSE = Path("/opt/wheels")
CELL = {"cann": "9.1.0", "chip": "910b", "os": "debian12", "env": "venv", "arch": "x86_64", "python": "3.11"}
CELL_ID = "cann9.1.0-910b-debian12-py3.11-x86_64"
MINIMUM = "25.2.RC1"  # knowledge: CANN 9.1.0's minimum driver
VERSION_INFO = "/usr/local/Ascend/driver/version.info"
COMMAND = ["python", "-c", "import sys; print('the command ran', sys.argv[1:])", "x"]


@pytest.fixture(scope="module")
def twin(engine, base_image, tmp_path_factory):
    """The sealed twin's tag; removed afterwards."""
    tmp = tmp_path_factory.mktemp("guard")
    installers = tmp / "installers"
    sha = installers_91(installers)
    image = f"ascend-build-test/guard-{uuid.uuid4().hex[:8]}"
    (tmp / "m.yaml").write_text(yaml.safe_dump({"image": image, "cells": [
        dict(CELL, cann_source={"local": str(installers)}, sha256=sha)]}))
    common = ["-m", tmp / "m.yaml", "-o", tmp / "out"]
    locked = run_cli("lock", *common, "--wheelhouse", WHEELHOUSE, timeout=600)
    assert locked.returncode == 0, locked.stdout + locked.stderr
    tag = f"{image}:{CELL_ID}-cpu"
    try:
        built = run_cli("image", *common, "--variant", "cpu", "--base-image", base_image, "--wheelhouse", WHEELHOUSE,
                        "--state-dir", tmp / "state", "--json", timeout=1200)
        assert built.returncode == 0, built.stdout + built.stderr
        report = json.loads((tmp / "state" / "reports" / f"{CELL_ID}-cpu.json").read_text())
        assert [t["status"] for t in report["tiers"]] == ["passed"]  # the smoke test ran behind the guard
        yield tag
    finally:
        engine.remove(tag, force=True)


def node_with_driver(root: Path, version: str) -> Path:
    """A fixture node whose driver/version.info is the knowledge base's sample at ``version``."""
    make_node(root, driver=DRIVER_INFO.replace("24.1.rc3", version), devices=0)
    return root / VERSION_INFO.lstrip("/")


@pytest.mark.engine
@pytest.mark.index
def test_the_twin_states_its_requirement_and_starts_through_the_guard(engine, twin):
    config = engine.client.images.get(twin).attrs["Config"]
    assert config["Entrypoint"] == ["/usr/local/bin/ascend-driver-guard"]
    assert f"ASCEND_REQUIRE_DRIVER={MINIMUM}" in config["Env"]
    assert config["Labels"]["io.ascend-build.validated"]  # sealed


@pytest.mark.engine
@pytest.mark.index
def test_below_the_minimum_the_guard_refuses_with_cause_and_fix(engine, twin, tmp_path):
    old = node_with_driver(tmp_path / "node", "24.1.rc3")
    result = engine.run(twin, COMMAND, mounts=[(str(old), VERSION_INFO, True)], timeout=120)
    assert result.exit_code == 78
    assert "the command ran" not in result.stdout
    lines = result.stderr.splitlines()
    assert lines[0] == (f"ascend-driver-guard: refused: this image needs NPU driver {MINIMUM} or newer; "
                        f"{VERSION_INFO} says 24.1.rc3")
    assert lines[1].startswith("  cause: The host's NPU driver is older than this CANN needs.")
    assert lines[2].startswith("  fix: Upgrade the host driver") and f"to at least {MINIMUM}" in lines[2]
    assert lines[3] == "  to start it anyway (unsafe): ASCEND_DRIVER_GUARD=off-unsafe"
    # the one override, said loudly
    forced = engine.run(twin, COMMAND, mounts=[(str(old), VERSION_INFO, True)],
                        env={"ASCEND_DRIVER_GUARD": "off-unsafe"}, timeout=120)
    assert forced.exit_code == 0 and "the command ran ['x']" in forced.stdout
    assert "the NPU driver is NOT checked" in forced.stderr


@pytest.mark.engine
@pytest.mark.index
def test_at_the_minimum_the_command_runs_and_without_a_driver_it_runs_with_one_line(engine, twin, tmp_path):
    at = node_with_driver(tmp_path / "node", "25.2.rc1")
    result = engine.run(twin, COMMAND, mounts=[(str(at), VERSION_INFO, True)], timeout=120)
    assert (result.exit_code, result.stdout, result.stderr) == (0, "the command ran ['x']\n", "")
    bare = engine.run(twin, COMMAND, timeout=120)
    assert bare.exit_code == 0 and bare.stdout == "the command ran ['x']\n"
    assert bare.stderr.splitlines() == [
        f"ascend-driver-guard: no NPU driver found (no {VERSION_INFO}): running without the driver check; "
        f"this image needs driver {MINIMUM} or newer on an NPU node"]
