"""A CANN-only cell (no torch_npu): how it is written, validated, locked and rendered.
Its builds through the real engine are in test_cann_only_e2e.py."""

from __future__ import annotations

import json

from builder import knowledge
from builder.images import matrix, plan, render
from tests.support.matrix import all_findings, by_rule, write_cells

CELL = {"cann": "9.1.0", "chip": "910b", "os": "debian12", "env": "venv", "arch": "x86_64", "python": "3.11"}


def loaded(tmp_path, **keys):
    path, lines = write_cells(tmp_path, dict(CELL, **keys))
    return matrix.load(path), path, lines


def test_a_cell_without_torch_npu_is_cann_only_and_named_without_it(tmp_path):
    m, path, _ = loaded(tmp_path)
    (cell,) = m.cells
    assert cell.cann_only and cell.torch == "" and cell.id == "cann9.1.0-910b-debian12-py3.11-x86_64"
    assert [f.rule for f in all_findings(path) if f.severity == "error"] == []


def test_torch_or_an_own_wheel_without_torch_npu_is_refused_at_its_line(tmp_path):
    for key, value in (("torch", "2.13.0"), ("torch_npu_wheel", {"path": "a.whl", "sha256": "0" * 64})):
        m, _, lines = loaded(tmp_path, **{key: value})
        (f,) = by_rule(m.findings, "schema-value")
        assert f.field == f"cells[0].{key}" and f.where.line == lines[(0, key)]
        assert f.message == f"cells[0].{key} is given but torch_npu is not: a CANN-only cell has no PyTorch"
        assert m.cells == []


def test_its_lock_inputs_hold_no_torch(tmp_path):
    (cell,) = loaded(tmp_path)[0].cells
    names = [r.split("==")[0].split("<")[0].split(">")[0] for r in plan.lock_inputs(cell, knowledge.load()).requirements]
    assert "torch" not in names and "torch-npu" not in names and "numpy" in names


def test_its_npu_dockerfile_installs_the_chip_package_last_and_no_torch_npu(tmp_path):
    (cell,) = loaded(tmp_path, cann_source={"local": "/srv/cann"},
                           sha256={"Ascend-cann-toolkit_9.1.0_linux-x86_64.run": "1" * 64,
                                   "Ascend-cann-910b-ops_9.1.0_linux-x86_64.run": "2" * 64})[0].cells
    files = render.render_cell(cell)
    text = files["Dockerfile"].decode()
    steps = [line for line in text.splitlines() if line[:2] == "# " and line[2:3].isdigit()]
    assert [s.split(". ", 1)[1].split(":")[0].rstrip(".") for s in steps] == [
        "OS packages, at the versions of the base image's distribution",
        "CANN 9.1.0's toolkit; the 910b operator package installs in step 5",
        "Python 3.11 in a dedicated venv environment",
        "NOT VERIFIED",
        "The 910b operator package",
        "Defaults from the field guide; each can be overridden per cell (env_vars)",
        "The smoke program, the driver guard and this image's manifest (the run record of the cell)"]
    assert "torch_npu" not in text.split("# 4.")[1].split("LABEL")[0]
    manifest = json.loads(files["manifest.json"])
    assert (manifest["framework"], manifest["torch_version"], manifest["torch_npu_version"]) == (None, None, None)
    assert 'org.opencontainers.image.description="CANN 9.1.0 for 910b with Python 3.11 (no PyTorch)"' in text
