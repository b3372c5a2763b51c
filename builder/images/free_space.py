"""The free space a build needs, estimated and checked before its first step.

A build that runs out of space fails late: after the OS packages and the installers, or
after the smoke test when the seal or the SBOM cannot be written. What a build will write is
partly known beforehand: the files its context holds (the wheelhouse's wheels, a local CANN
installer folder, the cell's own torch_npu wheel, Miniforge's installer). What it downloads
while it runs (OS packages, the Python environment, CANN installers by URL, the base image) is
not, and stands in as a floor. So this is an estimate, and a low one: it catches a file system
that is nearly full, not every one that is too small.

Two file systems are checked, before anything is built, downloaded or tagged:

* the state folder's: `STATE_FLOOR` (build log, smoke report, SBOM, seal context) plus each
  context file on another file system (the context links a file on the same one, copies the
  others);
* the engine's data root (``docker info``'s DockerRootDir), when the engine is on this host
  (`Engine.data_root`): `ENGINE_FLOOR` plus `CONTEXT_FACTOR` times the context files' sizes.
  An engine elsewhere is not checked, and the run says so.

When both are one file system, their needs add up there.

Example:
    >>> print(size(3 << 30), size(5 << 20), size(512))
    3.0 GiB 5.0 MiB 512 B
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional

from builder import writes
from builder.engine import Engine
from builder.errors import UserError
from builder.images import own_wheel
from builder.images.prepare import Job, Options
from builder.sizes import size

# The state folder's own files for one image: its build log (a few hundred KiB for a CANN
# image's BuildKit output), smoke report, SBOM and the seal's context: a few MiB, with room.
STATE_FLOOR = 16 << 20
# What the engine writes that no file here tells the size of: the base image, the OS packages
# and the Python environment (the shipped matrix's CPU twin takes 1.5 GB with its base image;
# an NPU image with CANN installed takes more, which this floor does not cover).
ENGINE_FLOOR = 2 << 30
# Each context file, in the engine: BuildKit's copy of the context (1x), the stage that copies
# it into the build (1x), and what it installs to (a wheel or CANN installer unpacks to about
# twice its packed size).
CONTEXT_FACTOR = 4


@dataclass(frozen=True)
class Need:
    """Bytes the build will write under ``where`` (``place`` says which folder that is): a
    floor for what no file tells the size of, and ``times`` x the ``files`` bytes of context
    files (``for_floor`` and ``for_files`` say what for, in the refusal alone)."""

    place: str
    where: Path
    floor: int
    for_floor: str
    files: int = 0
    times: int = 1
    for_files: str = ""

    @property
    def bytes(self) -> int:
        return self.floor + self.times * self.files

    def what(self) -> str:
        """What the bytes are for, as the refusal says it."""
        text = f"{size(self.floor)} {self.for_floor}"
        if self.files:
            text += f" and {f'{self.times} x ' if self.times != 1 else ''}{size(self.files)} {self.for_files}"
        return text


def context_files(job: Job, options: Options) -> List[Path]:
    """The files `stage.context` will put into the build context that are on this host
    already (one per name: the context keeps one). A wheel named by URL and the wheels fetched
    for an emulated build are downloaded after this check: not among them."""
    found: Dict[str, Path] = {}
    if options.wheelhouse is not None and options.wheelhouse.is_dir():
        found.update((p.name, p) for p in sorted(options.wheelhouse.glob("*.whl")))
    if job.npu and job.plan.own_wheel and not own_wheel.is_url(job.plan.own_wheel[0]):
        found[Path(job.plan.own_wheel[0]).name] = Path(job.plan.own_wheel[0])
    files = [p for p in found.values() if p.is_file()]
    if job.npu and job.plan.installers_dir and Path(job.plan.installers_dir).is_dir():
        files += [p for p in sorted(Path(job.plan.installers_dir).glob("*")) if p.is_file()]
    if options.conda_installer is not None and job.image.conda_file and options.conda_installer.is_file():
        files.append(options.conda_installer)
    return files


def _device(path: Path) -> int:
    """The file system ``path`` is on (that of its nearest existing folder)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return os.stat(path).st_dev


def estimate(job: Job, options: Options, data_root: Optional[Path]) -> List[Need]:
    """What the build of ``job`` will write into the state folder and, when ``data_root`` is
    given, into the engine's data root (see the module's text)."""
    files = [(p, os.stat(p)) for p in context_files(job, options)]
    state = options.state_dir
    copied = sum(st.st_size for _, st in files if st.st_dev != _device(state))
    needs = [Need("the state folder", state, STATE_FLOOR, "for its log, report, SBOM and seal",
                  copied, 1, "of context files copied from other file systems")]
    if data_root is not None:
        needs.append(Need("the engine's data root", data_root, ENGINE_FLOOR,
                          "for the base image, packages and Python environment",
                          sum(st.st_size for _, st in files), CONTEXT_FACTOR, f"for {len(files)} context file(s)"))
    return needs


def shortfall(needs: List[Need], name: str) -> Optional[UserError]:
    """The refusal when a file system holds less free space than ``needs`` add up to there; None when all fit."""
    by_device: Dict[int, List[Need]] = {}
    for need in needs:
        by_device.setdefault(_device(need.where), []).append(need)
    for together in by_device.values():
        wanted, free = sum(n.bytes for n in together), writes.free_bytes(together[0].where)
        if 0 <= free < wanted:
            places = " and ".join(f"{n.place} {n.where}" for n in together)
            parts = "; ".join((f"{n.place}: " if len(together) > 1 else "") + n.what() for n in together)
            return UserError(
                f"[{name}] not enough free space for this build on the file system of {places}: "
                f"{size(free)} free, about {size(wanted)} needed ({parts}; an estimate); nothing was built",
                fix="free space there (old build logs, `docker image prune`, `docker builder prune`), or point "
                    "--state-dir or the engine's data root (dockerd --data-root) at a file system with room, "
                    "then run again", exit_code=1)
    return None


def check(job: Job, options: Options, engine: Engine, say: Callable[[str], None]) -> None:
    """Refuse the build of ``job`` (a `UserError`) when the state folder's file system, or the
    engine's data root on this host, has less free space than `estimate` says it needs."""
    data_root, why_not = engine.data_root()
    if data_root is None:
        say(f"[{job.name}] the engine's free space is not checked: {why_not}")
    refused = shortfall(estimate(job, options, data_root), job.name)
    if refused is not None:
        raise refused
