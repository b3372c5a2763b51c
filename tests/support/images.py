"""Images carrying exactly the labels the pipeline writes, on a tiny base, for tests that choose images
from a registry (`pull`, `k8s job`): a validated NPU image cannot exist on this machine, so the tests
that use these say `fake_npu`."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path

from builder.images import matrix, plan, render

ROOT = Path(__file__).resolve().parents[2]
MISSION_CELL = "cann7.0.rc1-910b-ubuntu22.04-py3.9-torch_npu2.1.0rc1-aarch64"  # its installers' sha256 are known


def job_of(variant: str):
    """The build job of the mission cell's ``variant``, on the shipped lock (the SBOM tests' subject)."""
    from builder.images.prepare import Options, prepare

    cell = next(c for c in matrix.load(ROOT / "matrix").cells if c.id == MISSION_CELL)
    # the shipped lock's conda part is incomplete here (no conda channel answers); its pip entries are whole
    return prepare(cell, variant, Options(locks_dir=ROOT / "dockerfiles", allow_incomplete_lock=True))


def cell_8_0_rc3(**over) -> matrix.Cell:
    """The x86_64 CANN 8.0.RC3 cell of the matrix (910b, driver 24.1.RC3), with fields replaced."""
    loaded = matrix.load(ROOT / "matrix")
    base = next(c for c in loaded.cells if c.cann == "8.0.RC3" and c.arch == "x86_64")
    return replace(base, **over)


def pipeline_labels(cell: matrix.Cell, validated: bool = True, variant: str = "npu") -> dict:
    labels = dict(plan.labels(cell, variant, render.content_hash(cell)))
    if validated:
        labels.update({"io.ascend-build.validated": "true", "io.ascend-build.validated-device": "npu",
                       "io.ascend-build.validated-tiers": "versions,libraries,import,device,train,collective"})
    return labels


def labelled_image(engine, base_image, tmp_path, labels: dict) -> str:
    folder = tmp_path / f"ctx-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    (folder / "Dockerfile").write_text(f"FROM {base_image}\n")
    return engine.build(folder, labels=labels, log_path=folder / "build.log")
