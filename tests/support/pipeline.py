"""What the pipeline's engine tests share: the shipped Debian 12 cell, the CLI, and how to run and clean up after it."""

from __future__ import annotations

import base64
import json
import os
import platform
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set

import pytest

from builder import leftovers
from tests.support import listing
from tests.support.matrix import SHIPPED_DOCKERFILES

CELL_ID = "cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64"
WHEELHOUSE = Path("/opt/wheels")
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
CLI = Path(sys.executable).with_name("ascend-build")
DOCKER = "/usr/bin/docker"
TEMP_TAG_REPO = "ascend-build-candidate"  # smoke_run.seal's temporary name

# The shipped Debian 12 cell (matrix/default.yaml), keys in the same order.
CELL = {"cann": "9.1.0", "chip": "910b", "arch": "x86_64", "os": "debian12", "env": "venv",
        "python": '"3.11"', "torch_npu": "2.13.0"}


def _torch_wheel() -> Optional[Path]:
    return next(iter(sorted(WHEELHOUSE.glob("torch-2.13.0*cp311*x86_64.whl"))), None) if WHEELHOUSE.is_dir() else None


REMOTE_SECRET = "s3cret-in-the-remote-url"

needs_build = pytest.mark.skipif(
    platform.machine() != "x86_64" or _torch_wheel() is None or not CLI.exists(),
    reason="needs an x86_64 host, the torch 2.13.0 cp311 wheel in /opt/wheels and the ascend-build script")


# --- helpers ---------------------------------------------------------------------------


def write_matrix(folder: Path, repo: str, **extra: str) -> Path:
    """The shipped Debian 12 cell, tagged into ``repo``; ``extra`` adds YAML keys verbatim."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [f"image: {repo}", "cells:"]
    for i, (key, value) in enumerate({**CELL, **extra}.items()):
        lines.append(f"{'  - ' if i == 0 else '    '}{key}: {value}")
    path = folder / "matrix.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def image_args(matrix_file: Path, state: Path, base_image: str, *extra: str,
               wheelhouse: Path = WHEELHOUSE, as_json: bool = True) -> List[str]:
    # the matrix is a test's own, its cell the shipped one: its lock is in the shipped dockerfiles/
    args = ["image", "--matrix", str(matrix_file), "--out", str(SHIPPED_DOCKERFILES), "--cell", CELL_ID,
            "--base-image", base_image, "--wheelhouse", str(wheelhouse), "--state-dir", str(state)] \
        + (["--json"] if as_json else [])
    if CA_BUNDLE.is_file():  # the CLI's default too; explicit here so the test says what it uses
        args += ["--ca-bundle", str(CA_BUNDLE)]
    return args + list(extra)


def cli_env(**extra: str) -> Dict[str, str]:
    """This environment without registry credentials of the caller, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_BUILD_REGISTRY_")}
    env.update(extra)
    return env


def run_cli(args: List[str], cwd: Path, timeout: float = 1800, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), *args], cwd=cwd, env=cli_env(**env), capture_output=True,
                          text=True, timeout=timeout)


def outcomes_of(result: subprocess.CompletedProcess) -> List[Dict]:
    try:
        return json.loads(result.stdout)
    except ValueError:
        pytest.fail(f"no JSON summary (exit {result.returncode})\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}")


def all_refs(repo: str) -> List[str]:
    """Every tag a run could give the cell: release and -candidate, of the NPU image and its twin."""
    return [f"{repo}:{CELL_ID}{suffix}" for suffix in ("", "-candidate", "-cpu", "-cpu-candidate")]


def temp_tags(engine) -> Set[str]:
    """The seal's temporary tags a test could have left: those of this process and of processes that
    have ended (a CLI run the test started, killed or not). Not those of another live process on the
    engine: a benchmark, another suite or another worker sealing at this moment is no leftover of the
    test's (a fresh-clone run with `make bench` beside it saw the bench's seal here)."""
    def another_live_owner(tag: str) -> bool:
        mark = leftovers.owner(tag)
        return mark is not None and (mark[0] != leftovers.host_mark() or
                                     (mark[1] != os.getpid() and leftovers.alive(mark[1])))

    return {t for img in listing.images(engine, name=TEMP_TAG_REPO) for t in img.tags if not another_live_owner(t)}


def smoke_containers(engine, release: str) -> List:
    """Containers of smoke_run.smoke (engine.run labels them) made from the image titled ``release``."""
    return listing.containers(engine, all=True, filters={"label": [
        "ascend-build.run=1", f"org.opencontainers.image.title={release}"]})


def stream_find(chunks: Iterable[bytes], needles: Iterable[bytes]) -> Set[bytes]:
    """Which ``needles`` occur in a byte stream, without holding it (docker save is > 1 GB)."""
    needles = [n for n in set(needles) if n]
    keep = b""
    found: Set[bytes] = set()
    width = max(len(n) for n in needles) - 1
    for chunk in chunks:
        buf = keep + chunk
        found.update(n for n in needles if n not in found and n in buf)
        keep = buf[-width:] if width else b""
    return found


def pem_bodies(text: str) -> List[str]:
    """Base64 bodies of the PEM certificates in ``text``, one string per certificate."""
    return ["".join(m.split()) for m in
            re.findall(r"-----BEGIN CERTIFICATE-----(.*?)-----END CERTIFICATE-----", text, re.S)]


def pem_lines(text: str) -> List[List[str]]:
    return [[ln for ln in m.splitlines() if ln.strip()] for m in
            re.findall(r"-----BEGIN CERTIFICATE-----\n(.*?)-----END CERTIFICATE-----", text, re.S)]


def registry_tags(registry, repo: str) -> int:
    """HTTP status of the registry's tag list of ``repo`` (200: exists, 404: never pushed)."""
    request = urllib.request.Request(f"http://{registry.host}/v2/{repo}/tags/list")
    auth = base64.b64encode(f"{registry.username}:{registry.password}".encode()).decode()
    request.add_header("Authorization", f"Basic {auth}")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        return opener.open(request, timeout=10).status
    except urllib.error.HTTPError as e:
        return e.code


def drop_images(engine, needle: str) -> None:
    """Remove every tag and digest reference containing ``needle``, then the nameless images
    (failed candidates) titled with it. The BuildKit cache stays: later builds stay fast."""
    for img in listing.images(engine):
        for ref in img.tags + img.digests:
            if needle in ref:
                try:
                    engine.untag(ref)
                except Exception:  # best effort: a test's own assertion matters more than cleanup
                    pass
    for img in listing.images(engine, filters={"dangling": True}):
        if needle in (img.labels or {}).get("org.opencontainers.image.title", ""):
            try:
                engine.remove(img.id)
            except Exception:
                pass
