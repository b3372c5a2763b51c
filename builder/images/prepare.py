"""One image to build, decided before anything is built: a cell's plan with this run's choices.

`prepare` applies the run's options to a cell (a stand-in OS for the CPU twin, a base
image override), reads the cell's lock, resolves the cell once (`render.resolve_context`: its
facts, the one pass over the knowledge base, then its plan, from the build context to the
report, and the build context's files its content hash names), decides which tiers this host can run, and
refuses what cannot succeed (a lock that is missing, stale or incomplete; CANN installers
with no sha256 anywhere) before a build starts. The pipeline's later steps take the
`Job` alone: none goes back to the cell or the knowledge base.

Example:
    >>> job = prepare(cell, "cpu", Options(locks_dir=Path("dockerfiles")))   # doctest: +SKIP
    >>> job.name, job.smoke.tiers[-1], job.plan.lock_state                   # doctest: +SKIP
    ('cann9.1.0-910b-...-x86_64-cpu', 'collective', 'ok')
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Tuple

from builder import commands, devices, knowledge
from builder.images import lock as locking
from builder.images import render
from builder.images.matrix import Cell
from builder.images.plan import CellPlan, Plan
from builder.errors import UserError
from builder.trust.signing import PrivateKey
from builder.vocabulary import CPU, NPU, VARIANTS, normalize_arch, required_tiers, static_tiers


PUSH_DEADLINE = 900.0  # seconds, `image --push-deadline`'s default


@dataclass
class Options:
    """How to build: which variants, where state goes, what the host offers."""

    variants: Tuple[str, ...] = VARIANTS
    state_dir: Path = Path(".state")
    no_device: bool = False
    devices: Optional[str] = None          # "0,1"; None = every NPU of the host
    push: Optional[str] = None             # registry host[:port][/namespace]
    base_image: Optional[str] = None       # overrides every cell's OS base image
    wheelhouse: Optional[Path] = None
    conda_installer: Optional[Path] = None  # Miniforge's installer, a local file (its sha256 is still checked)
    ca_bundle: Optional[Path] = None
    root: Path = Path("/")                 # where to look for /dev and the driver (tests)
    quiet: bool = False
    locks_dir: Path = Path("dockerfiles")  # where each cell's lock is: <locks_dir>/<cell>/requirements.lock
    twin_os: Optional[str] = None          # build CPU twins on this OS instead (a stand-in; same closure)
    allow_incomplete_lock: bool = False    # build a cell whose lock is not complete (entries unverified)
    sign_key: Optional[PrivateKey] = None  # the team's key: what is pushed and passed gets signed statements
    push_deadline: float = PUSH_DEADLINE   # seconds each image's push, its statements and each index may take (0: none)
    # family (a cell id without its arch) -> the arches the matrix declares for it: what its index covers
    declared: Optional[Dict[str, Tuple[str, ...]]] = None
    lazy: Optional[str] = None             # after the push: also push this lazily pullable variant ("estargz")
    no_cache: bool = False                 # run every build step again (the benchmarks' cold builds)


class SmokePlan(NamedTuple):
    """What a smoke run of an image does on this host. ``final``: passing earns the release
    tag (True) or only ``-candidate`` (the device tiers are owed to an NPU host)."""

    device: str
    tiers: Tuple[str, ...]
    docker_devices: List[str]
    mounts: List[Tuple[str, str, bool]]
    final: bool


@dataclass(frozen=True)
class Job:
    """One image of one cell, everything decided: what the pipeline's steps take. Its fields are
    values, read without calling back into the plan once the build has started."""

    variant: str
    plan: CellPlan             # the cell, resolved once
    name: str                  # its name in the state folder (logs, reports)
    ref: str                   # the release reference it earns by passing
    emulated: bool             # another arch than this host's: built and run under qemu
    lock_file: Path            # the lock the build installs from, on disk
    smoke: SmokePlan
    image: Plan                # the Dockerfile's plan of this variant
    base_image: str            # the image its FROM names (--base-image, the cell's, or CANN's image)
    npu: bool                  # the NPU image (else the CPU twin)
    files: Dict[str, bytes]    # its build context's files: the bytes its content hash names, staged as they are
    matrix_path: str = ""      # the matrix file the cell was read from (the provenance names it)


# This machine's arch in the matrix's words, normalized once (the matrix's cells are at load).
HOST_ARCH = normalize_arch(platform.machine()) or platform.machine()


def host_arch() -> str:
    """This machine's arch in the matrix's words (`HOST_ARCH`)."""
    return HOST_ARCH


def smoke_plan(variant: str, options: Options, cann_only: bool = False) -> SmokePlan:
    """What a smoke run of ``variant`` does on this host (see `SmokePlan`).

    A CANN-only image has no torch tiers: its twin runs the versions tier, its NPU image
    the static tiers, on an NPU host too (nothing in it runs on the device).
    """
    if variant == CPU:
        return SmokePlan(CPU, required_tiers(CPU, bool(cann_only)), [], [], True)
    present = [] if options.no_device else devices.npu_devices(options.root)
    if not present:  # a build machine: the tiers it owes that need no device, for a -candidate
        owed = required_tiers(NPU, bool(cann_only))
        return SmokePlan(NPU, tuple(t for t in static_tiers() if t in owed), [], devices.driver_mounts(options.root), False)
    chosen = devices.choose(present, options.devices)
    return SmokePlan(NPU, required_tiers(NPU, bool(cann_only)), devices.docker_devices(chosen, options.root),
                     devices.driver_mounts(options.root), True)


def _stand_in(cell: Cell, twin_os: str) -> Cell:
    """``cell`` on ``twin_os``'s base with a venv: a stand-in twin installing ``cell``'s closure."""
    found = knowledge.load().environment.os_info(twin_os)
    if found is None or found.python != cell.python:
        raise UserError(f"--twin-os {twin_os}: its python3 is {found.python if found else 'unknown'}, "
                        f"cell {cell.id} needs Python {cell.python}",
                        fix="pick an OS of builder/data/os.yaml whose python3 is the cell's (debian11: 3.9, debian12: 3.11)")
    return replace(cell, os=twin_os, env="venv")


def _refuse_unusable(resolved: CellPlan, variant: str, options: Options) -> None:
    """Refuse, before any build, an image whose lock or installers are not usable."""
    state, lock = resolved.lock_state, resolved.lock
    if state != "ok" and not options.allow_incomplete_lock:
        why = {"missing": "has no lock", "stale": "has a lock made from other inputs",
               "incomplete": "has a lock with entries lacking a sha256 (" + ", ".join(
                   [f"{e.name}=={e.version}" for e in (lock.incomplete if lock else ())]
                   + (["its conda part"] if lock and lock.conda and not lock.conda.complete else [])) + ")"}[state]
        raise UserError(f"{resolved.cell_id} {why} in {options.locks_dir}: its image would install unverified packages",
                        fix=f"run {commands.suggest('lock', cell=resolved.cell_id)} (where every source is reachable), "
                            "or pass --allow-incomplete-lock")
    if variant == NPU and resolved.unrecorded:  # the Dockerfile refuses too; saying it here spares a build
        raise UserError(f"{resolved.cell_id}: no sha256 known for {', '.join(resolved.unrecorded)}: "
                        "no installer runs unverified",
                        fix=f"run {commands.suggest('lock', cell=resolved.cell_id)} where the download server answers "
                            "(it records each file's "
                            "sha256 on first fetch), or add sha256: {FILE: HEX} to the cell")


def prepare(cell: Cell, variant: str, options: Options) -> Job:
    """Decide everything about the image of ``cell`` in ``variant`` for this run and host.

    A cell of another arch than this host's is built and smoke-tested under qemu. With
    ``options.twin_os`` the CPU twin is built on that OS's base (venv, its own python3)
    with the cell's locked closure: a stand-in, tagged and labelled as one, never as the
    cell's own twin.
    """
    closure_of = None
    if variant == CPU and options.twin_os and options.twin_os != cell.os:
        closure_of, cell = cell, _stand_in(cell, options.twin_os)
    if options.base_image:
        cell = replace(cell, base_image=options.base_image)
    owner = (closure_of or cell).id
    resolved, files = render.resolve_context(cell, lock=locking.read(options.locks_dir / owner), closure_of=closure_of)
    _refuse_unusable(resolved, variant, options)
    image = resolved.plans[variant]
    return Job(variant=variant, plan=resolved, name=resolved.names[variant], ref=resolved.refs[variant],
               emulated=resolved.arch != host_arch(), lock_file=options.locks_dir / owner / locking.LOCK_FILE,
               smoke=smoke_plan(variant, options, resolved.cann_only), image=image, base_image=image.base_image,
               npu=variant == NPU, files=files,
               matrix_path=(closure_of or cell).where.file if (closure_of or cell).where else "")
