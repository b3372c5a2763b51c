"""Before the first build step (issue 26): the CANN download server is asked for each
installer, and a --base-image of another OS than the cell's is said (read through the engine).

The download server is made unreachable for certain by pointing the proxy at a closed
loopback port (urllib honours https_proxy), so the test means the same with or without a
route to it."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.support import registry as hr
from http.server import BaseHTTPRequestHandler
from tests.support.matrix import REPO, cli_exe

pytestmark = pytest.mark.engine

ARM_CELL = "cann8.0.rc3-910b-ubuntu22.04-py3.10-torch_npu2.4.0-aarch64"  # complete lock in dockerfiles/


def closed_port() -> int:
    server, port = hr.serve(BaseHTTPRequestHandler)
    server.shutdown()
    server.server_close()
    return port


def test_os_release_of_a_base_image_is_read_without_running_it(engine):
    found = engine.os_release("local/debian:12-arm64")  # another arch: created, never started
    assert (found["ID"], found["VERSION_ID"]) == ("debian", "12")
    assert engine.os_release("local/no-such-image:1") == {}


def test_an_npu_build_stops_before_its_first_step_when_the_download_server_is_unreachable(engine, tmp_path):
    proxy = f"http://127.0.0.1:{closed_port()}"
    env = dict(os.environ, https_proxy=proxy, http_proxy=proxy, HTTPS_PROXY=proxy, HTTP_PROXY=proxy,
               no_proxy="", NO_PROXY="", COLUMNS="200", NO_COLOR="1")
    result = subprocess.run(cli_exe() + ["image", "--cell", ARM_CELL, "--variant", "npu", "--no-device",
                                         "--base-image", "local/debian:12-arm64", "--state-dir", str(tmp_path),
                                         # the shipped lock's conda part is incomplete here (no channel answers)
                                         "--allow-incomplete-lock", "--quiet"],
                            cwd=str(REPO), env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert (f"[{ARM_CELL}] warning: --base-image local/debian:12-arm64 is Debian GNU/Linux 12 (bookworm), "
            "not the cell's ubuntu22.04") in result.stderr
    assert "the download server cannot be reached" in result.stderr and "nothing was built" in result.stderr
    assert not (tmp_path / "logs").exists() or not any((tmp_path / "logs").iterdir())  # no build started


def test_the_engine_says_whether_a_base_image_can_be_had_without_pulling_it(engine):
    assert engine.base_unavailable("local/debian:12") == ""  # on this engine
    missing = engine.base_unavailable(f"127.0.0.1:{closed_port()}/ascend-build-cluster/no-such-base:1")
    assert missing and "connection refused" in missing.lower()
