"""Every download a build needs is asked for before its first step (issue 32), with the fix that
applies: the base image (--base-image, and --twin-os for a twin), Miniforge's installer for a
conda image (--conda-installer). The engine is stood in for (what it answers of the base image);
the download server is made unreachable for certain by a proxy on a closed loopback port."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import List

import pytest
from tests.support import registry as hr
from tests.support.matrix import SHIPPED_DOCKERFILES, SHIPPED_MATRIX

from builder.errors import UserError
from builder.images import image_run, matrix, prepare
from builder.vocabulary import CPU

CONDA_CELL = "cann8.0.rc3-910b-ubuntu22.04-py3.10-torch_npu2.4.0-aarch64"
VENV_CELL = "cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64"


class Engine:
    """What the pipeline asks an engine before a build: whether the base image can be had."""

    def __init__(self, missing: str = ""):
        self.missing = missing
        self.asked: List[str] = []

    def base_unavailable(self, ref: str) -> str:
        self.asked.append(ref)
        return self.missing

    def os_release(self, ref: str) -> dict:
        return {}

    def identity(self, ref: str) -> dict:
        return {"id": None, "digests": []}  # the base is not on this engine: nothing to read of it

    def data_root(self):
        return None, "a stand-in"  # the free space is free_space's tests' (tests/images/test_free_space.py)


def _job(cell_id: str, **options):
    cell = next(c for c in matrix.load(SHIPPED_MATRIX).cells if c.id == cell_id)
    chosen = prepare.Options(locks_dir=SHIPPED_DOCKERFILES, allow_incomplete_lock=True, **options)
    return prepare.prepare(cell, CPU, chosen), chosen


@pytest.fixture
def offline(monkeypatch):
    """Every download goes to a proxy that is not there."""
    server, port = hr.serve(BaseHTTPRequestHandler)
    server.shutdown()
    server.server_close()
    for name in ("https_proxy", "http_proxy", "HTTPS_PROXY", "HTTP_PROXY"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{port}")
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.setenv(name, "")


def test_a_base_image_that_cannot_be_had_stops_the_build_with_base_image_and_twin_os(offline):
    job, options = _job(VENV_CELL)
    engine = Engine(missing="Get https://registry.invalid/v2/: dial tcp: no such host")
    with pytest.raises(UserError) as caught:
        image_run.preflight(job, image_run.ImageRun.of(job, options, engine, lambda line: None))  # type: ignore[arg-type]  # an Engine stand-in
    assert engine.asked == [job.image.base_image]
    assert (f"the cell's base image {job.image.base_image} is not on this engine and its registry cannot serve it "
            "(Get https://registry.invalid/v2/: dial tcp: no such host); nothing was built") in caught.value.message
    assert "--base-image IMAGE of debian12 that this engine has" in caught.value.fix
    assert "--twin-os OS" in caught.value.fix


def test_a_conda_twin_asks_for_miniforges_installer_before_the_build(offline):
    job, options = _job(CONDA_CELL)
    assert job.image.conda_file.startswith("Miniforge3-")
    with pytest.raises(UserError) as caught:
        image_run.preflight(job, image_run.ImageRun.of(job, options, Engine(), lambda line: None))  # type: ignore[arg-type]  # an Engine stand-in
    assert caught.value.message.startswith(job.image.python_environment.installer_url)
    assert "nothing was built" in caught.value.message
    assert caught.value.fix.startswith(f"pass --conda-installer FILE with Miniforge's installer {job.image.conda_file}")


def test_a_local_miniforge_installer_or_a_venv_cell_asks_no_download_server(offline, tmp_path):
    installer = tmp_path / "Miniforge3.sh"
    installer.write_text("#!/bin/sh\n")
    job, options = _job(CONDA_CELL, conda_installer=Path(installer))
    image_run.preflight(job, image_run.ImageRun.of(job, options, Engine(), lambda line: None))  # type: ignore[arg-type]  # an Engine stand-in  # nothing to ask: it is here
    job, options = _job(VENV_CELL)
    image_run.preflight(job, image_run.ImageRun.of(job, options, Engine(), lambda line: None))  # type: ignore[arg-type]  # an Engine stand-in
