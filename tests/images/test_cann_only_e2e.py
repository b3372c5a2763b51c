"""A CANN-only cell (no torch_npu: CANN and Python, as the official CANN images are),
through the real CLI and the real engine: `lock`, then `image`.

- Its twin builds from its lock and passes the versions tier alone (no torch tiers):
  Python, the locked closure (CANN's Python packages, pip's tools), pip check, no CANN,
  no torch. It is tagged.
- Its NPU image, on synthetic CANN installers (no runtime libraries in them), passes the
  versions tier (CANN's version file, set_env.sh against the ENV) and fails the libraries
  tier naming libascendcl.so and libhccl.so: no tag.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import yaml

from tests.support.cann import installers_91
from tests.support.matrix import run_cli

WHEELHOUSE = Path("/opt/wheels")
CELL = {"cann": "9.1.0", "chip": "910b", "os": "debian12", "env": "venv", "arch": "x86_64", "python": "3.11"}
CELL_ID = "cann9.1.0-910b-debian12-py3.11-x86_64"


def tiers_of(state: Path, name: str) -> dict:
    """Tier name -> result, from the report `image` keeps for ``name``."""
    return {t["name"]: t for t in json.loads((state / "reports" / f"{name}.json").read_text())["tiers"]}


@pytest.mark.engine
@pytest.mark.index
def test_a_cann_only_cell_builds_its_twin_without_torch_tiers_and_its_npu_image_needs_cann_runtime(
        engine, base_image, tmp_path):
    installers = tmp_path / "installers"
    sha = installers_91(installers)
    image = f"ascend-build-test/cann-only-{uuid.uuid4().hex[:8]}"
    (tmp_path / "m.yaml").write_text(yaml.safe_dump({"image": image, "cells": [
        dict(CELL, cann_source={"local": str(installers)}, sha256=sha)]}))
    common = ["-m", tmp_path / "m.yaml", "-o", tmp_path / "out"]
    locked = run_cli("lock", *common, "--wheelhouse", WHEELHOUSE, timeout=600)
    assert locked.returncode == 0, locked.stdout + locked.stderr
    lock_text = (tmp_path / "out" / CELL_ID / "requirements.lock").read_text()
    assert "numpy==" in lock_text and "torch" not in lock_text.split("# resolver")[1]
    state = tmp_path / "state"
    try:
        twin = run_cli("image", *common, "--variant", "cpu", "--base-image", base_image, "--wheelhouse", WHEELHOUSE,
                       "--state-dir", state, "--json", timeout=1200)
        assert twin.returncode == 0, twin.stdout + twin.stderr
        tiers = tiers_of(state, f"{CELL_ID}-cpu")
        assert list(tiers) == ["versions"] and tiers["versions"]["status"] == "passed"
        summary = tiers["versions"]["summary"]
        assert "no torch (CANN-only)" in summary and "distributions as locked, pip check clean" in summary
        tag = f"{image}:{CELL_ID}-cpu"
        found = engine.run(tag, ["python", "-c", "import importlib.util as u; print(u.find_spec('torch'), "
                                 "u.find_spec('numpy') is not None)"], timeout=120)
        assert found.stdout.strip().splitlines()[-1] == "None True"

        npu = run_cli("image", *common, "--variant", "npu", "--no-device", "--base-image", base_image,
                      "--wheelhouse", WHEELHOUSE, "--state-dir", state, "--json", timeout=1200)
        assert npu.returncode != 0
        tiers = tiers_of(state, CELL_ID)
        assert tiers["versions"]["status"] == "passed", tiers["versions"]["summary"]
        assert "CANN 9.1.0" in tiers["versions"]["summary"] and "no torch (CANN-only)" in tiers["versions"]["summary"]
        assert tiers["libraries"]["status"] == "failed"
        assert "libascendcl.so, libhccl.so not found on LD_LIBRARY_PATH" in tiers["libraries"]["summary"]
        assert engine.image_id(f"{image}:{CELL_ID}") is None and engine.image_id(f"{image}:{CELL_ID}-candidate") is None
    finally:
        for ref in (f"{image}:{CELL_ID}-cpu", f"{image}:{CELL_ID}", f"{image}:{CELL_ID}-candidate"):
            engine.remove(ref, force=True)
        for report in (state / "reports").glob("*.json"):  # a failed image is kept, unnamed, for a look
            engine.remove_if_unnamed(json.loads(report.read_text())["candidate"])
