"""A cell's facts, resolved in one pass: everything its images are decided from, as one value.

`resolve_facts(cell, kb, lock)` is the one place the image wing asks the knowledge base
about a cell (with `builder.python_env`, CANN's Python data, and `builder.installers`,
which names CANN's files from the knowledge base). It returns a `CellFacts`: a frozen
value of strings, tuples and small frozen dataclasses that holds no knowledge base. The
plan (`builder.images.plan`) is made from it alone, and so are what render, lock and the
pipeline take from the plan; none of them asks the knowledge base again. The shape is
conda-lock's ``LockSpecification``: every input gathered into one value before anything
is decided, with a `CellFacts.content_hash` of them all.

Two hashes, two jobs: ``digest`` is the content hash of the cell's build context (the hash
of the context's files; `render.content_hash`), the one the image's labels carry;
`CellFacts.content_hash` hashes every resolved fact, the knowledge base's answers
included, so two resolutions that hash alike make the same plan.

Example:
    >>> facts = resolve_facts(cell, knowledge.load(), lock=lock)        # doctest: +SKIP
    >>> facts.os.codename, facts.torch, facts.state                       # doctest: +SKIP
    ('bookworm', 'torch==2.13.0+cpu', 'ok')
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple


from builder import installers as installer_names
from builder import python_env, versions
from builder.errors import UserError
from builder.images import conda_lock
from builder.images import lock as locking
from builder.images.lock import Locked
from builder.images.matrix import Cell
from builder.knowledge import Installer, KnowledgeBase, OsInfo

# The PyTorch project's index of CPU-only torch wheels. x86_64 torch_npu up to
# 2.11 pins torch==X+cpu, which exists only there; later releases still want a
# CPU torch, not the multi-GB CUDA build PyPI serves for x86_64.
PYTORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


_CANN_DIR_FROM = versions.cann("8.5.0-beta.1").key  # CANN lives in cann-<version> from this release on


@dataclass(frozen=True)
class CellFacts:
    """Everything both images of a cell are decided from, each looked up once (`resolve_facts`).

    Only plain values: the cell (a frozen dataclass of the matrix's values), the lock, and
    the knowledge base's answers as the frozen records it hands out (`OsInfo`, `Installer`).
    """

    cell: Cell                            # the cell (a stand-in twin: on its stand-in OS, with a venv)
    closure_of: Optional[Cell]            # the cell whose closure a stand-in twin installs
    digest: str                           # the content hash of its build context (render.content_hash)
    lock: Optional[locking.Lock]          # the closure owner's lock (None: none yet)
    locked: Tuple[Locked, ...]            # its distributions, in its order (() without a lock)
    # the cell's own derived values
    cann_only: bool
    ref: str                              # image:tag of its release
    tag: str
    cann_home: str                        # where CANN lives in the NPU image
    # the knowledge base's answers
    os: OsInfo                            # the cell's base OS
    torch: str                            # the torch requirement the image takes ("" for a CANN-only cell)
    torch_index: str                      # the extra index that serves it ("" when PyPI does)
    uv: str                               # uv's requirement line for the cell's arch ("" when unknown)
    download_referer: str                 # the Referer every CANN download sends
    conda: Optional[Installer]            # Miniforge's installer (a conda cell's), None otherwise
    installers: Tuple[Installer, ...]     # the CANN installers the knowledge base knows for the cell
    local_packages: Tuple[Tuple[str, str], ...]  # (kind, file) a local folder supplies for the others
    # the Python environment and the lock
    inputs: locking.Inputs                # what the lock is resolved from (the closure owner's)
    state: str                            # the lock's state (locking.status)
    unpinned: Tuple[str, ...]             # what the lock cannot pin, and why (its header)
    unlocked: Tuple[str, ...]             # the requirements when the lock is not usable (else ())
    cann_limits: Tuple[Tuple[str, str], ...]  # (name, specifier): CANN's limits on the packages it bounds
    default_env: Tuple[Tuple[str, str], ...]  # the environment defaults its torch_npu takes
    stand_in: str                         # why a stand-in twin runs on another OS ("" if not one)

    def content_hash(self) -> str:
        """A short hash of every fact (sha256 of their canonical JSON): stable across runs and
        processes, changed by any fact that changes.

        Example:
            >>> facts.content_hash() == replace(facts).content_hash()   # doctest: +SKIP
            True
        """
        text = json.dumps(_plain(self), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _plain(value: Any) -> Any:
    """``value`` as JSON data: dataclasses field by field, mappings by key, tuples as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def resolve_facts(cell: Cell, kb: KnowledgeBase, lock: Optional[locking.Lock] = None,
                  closure_of: Optional[Cell] = None, digest: str = "") -> CellFacts:
    """Ask the knowledge base (and CANN's Python data) everything ``cell``'s images need, once.

    ``lock`` is the lock of the cell whose closure is installed (``closure_of`` for a
    stand-in twin, else ``cell``); ``digest`` the content hash of the build context.
    Raises UserError for a cell whose OS the knowledge base does not know (`checks` refuses
    such a cell first; a knowledge base edited since may not have it).
    """
    owner = closure_of or cell
    # the matrix's own derived values first, then each source in turn, so each is entered once
    cann_only, ref, tag = cell.cann_only, cell.ref, cell.tag
    # the knowledge base: the Python environment, the downloads, then the installer files named from them
    os_info = kb.environment.os_info(cell.os)
    owner_os = kb.environment.os_info(owner.os) if closure_of else os_info
    if os_info is None or owner_os is None:
        missing = cell.os if os_info is None else owner.os
        raise UserError(f"{cell.id}: OS {missing!r} is not in builder/data/os.yaml", fix="pick an OS listed there")
    torch, index = _torch(cell, kb)  # the owner's too: a stand-in differs from it in its OS and env alone
    uv = kb.downloads.uv_requirement(cell.arch)
    referer = kb.downloads.download_referer()
    conda = kb.downloads.conda_installer(cell.arch) if cell.env == "conda" else None
    release = kb.downloads.cann_release(cell.cann)  # the CANN release, looked up once: the installers are named from it
    installers = tuple(installer_names.installers_of(release, cell.chip, cell.arch, cell.nnal))
    known = {item.kind for item in installers}
    local = tuple((kind, installer_names.package_of(release, kind, cell.chip, cell.arch))
                  for kind in installer_names.kinds(cell.nnal) if kind not in known) if cell.cann_source == "local" else ()
    # CANN's Python data
    cann_python = python_env.cann_python(cell.cann, owner.python, cell.torch_npu)
    requirements, constraints = cann_python.packages, cann_python.constraints
    limits, default_env = cann_python.limits, cann_python.default_env
    # the lock: what it is made from, its state, its distributions
    inputs = _inputs(owner, owner_os, torch, index, requirements, constraints)
    # a stand-in twin (a venv) installs the pip closure alone: the conda part is not its to complete
    state, locked = locking.locked(lock, inputs, conda=cell.env == "conda")
    return CellFacts(
        cell=cell, closure_of=closure_of, digest=digest, lock=lock, locked=locked,
        cann_only=cann_only, ref=ref, tag=tag, cann_home=cann_home(cell.cann, release.key),
        os=os_info, torch=torch, torch_index=index, uv=uv, download_referer=referer, conda=conda,
        installers=installers, local_packages=local,
        inputs=inputs, state=state, unpinned=_unpinned(owner, owner_os),
        unlocked=_unlocked_lines(inputs, limits) if state in ("missing", "stale") else (),
        cann_limits=limits, default_env=default_env,
        stand_in=stand_in_reason(cell, closure_of) if closure_of else "",
    )


def cann_home(cann: str, key: Optional[Tuple[int, ...]] = None) -> str:
    """Where CANN lives: ``ascend-toolkit/latest`` up to 8.3, ``cann-<ver>`` from 8.5 on.
    ``key``: the release's sort key when the caller holds it (its `CannRelease`'s), else
    ``cann`` is parsed here.

    Example:
        >>> cann_home("8.3.RC1"), cann_home("9.1.0")
        ('/usr/local/Ascend/ascend-toolkit/latest', '/usr/local/Ascend/cann-9.1.0')
    """
    if (key if key is not None else versions.cann(cann).key) >= _CANN_DIR_FROM:
        return f"/usr/local/Ascend/cann-{cann}"
    return "/usr/local/Ascend/ascend-toolkit/latest"


def _torch(cell: Cell, kb: KnowledgeBase) -> Tuple[str, str]:
    """The torch requirement and the extra index that serves it: the CPU build of the torch
    torch_npu pins, on every arch (``kb.environment.image_torch``: ``torch==X+cpu`` from the PyTorch
    CPU index on x86_64, and on aarch64 from 2.11, where PyPI's torch is the CUDA build),
    which also meets torch_npu's ``torch==X``/``torch==X.*`` pins.
    A CANN-only cell has none: ("", "")."""
    if not cell.torch_npu:
        return "", ""
    pinned, where = kb.environment.image_torch(cell.torch_npu, cell.torch, cell.arch)
    return pinned, (PYTORCH_CPU_INDEX if where == "pytorch-cpu" else "")


def _inputs(cell: Cell, os_info: OsInfo, torch: str, index: str, cann_packages: Tuple[str, ...],
            constraints: Tuple[python_env.Constraint, ...]) -> locking.Inputs:
    """What the cell's lock is resolved from: CANN's packages within CANN's limits, the CPU
    torch torch_npu pins, torch_npu (neither for a CANN-only cell), the matrix's extra pins,
    and the installer itself (pip; setuptools, which venvs of Python < 3.12 carry; wheel,
    which conda's env has)."""
    framework = (torch, f"torch-npu=={cell.torch_npu}") if cell.torch_npu else ()
    tools = ("pip", "setuptools") + (("wheel",) if cell.env == "conda" else ())
    asked_by = ([(p, f"CANN {cell.cann}'s Python packages") for p in cann_packages]
                + ([(torch, f"torch_npu {cell.torch_npu}'s torch, as a CPU build"),
                    (f"torch-npu=={cell.torch_npu}", "the cell's torch_npu")] if cell.torch_npu else [])
                + [(p, "the cell's pip:") for p in cell.pip] + [(t, "the installer") for t in tools]
                + [(c.requirement, f"CANN {cell.cann}'s limit, per {c.source}") for c in constraints])
    return locking.Inputs(
        cell=cell.id, python=cell.python, platform=locking.python_platform(cell.arch, os_info.glibc),
        requirements=(*cann_packages, *framework, *cell.pip, *tools),
        constraints=tuple(c.requirement for c in constraints),
        asked_by=tuple(asked_by),
        torch_index=index,
        own_wheels=(cell.torch_npu_wheel,) if cell.torch_npu_wheel else (),
        conda=conda_lock.specs(cell.python) if cell.env == "conda" else (),
        conda_channel=conda_lock.public(conda_channel(cell)) if cell.env == "conda" else "",
    )


def conda_channel(cell: Cell) -> str:
    """The channel a conda cell's environment comes from: ``mirrors.conda_channel`` (as given,
    credentials and all: only `ascend-build lock` and the build's secret see it), else conda-forge."""
    return dict(cell.mirrors).get("conda_channel") or conda_lock.DEFAULT_CHANNEL


def _unpinned(cell: Cell, os_info: OsInfo) -> Tuple[str, ...]:
    """What the lock cannot pin for ``cell``, and why (written into its header). A conda cell's
    Python is in the lock's conda part (or that part says why it is incomplete)."""
    if cell.env == "conda":
        return ()
    return (f"python: the base image's own python3 ({os_info.python} on {cell.os}; its patch release follows "
            f"the distribution's updates)",)


def _unlocked_lines(inputs: locking.Inputs, cann_limits: Tuple[Tuple[str, str], ...]) -> Tuple[str, ...]:
    """Without a usable lock: the top-level requirements, CANN's limits on the packages they bound."""
    limits: Dict[str, str] = {}
    for name, specifier in cann_limits:
        limits[name] = ",".join(filter(None, [limits.get(name), specifier]))
    lines = []
    for requirement in inputs.requirements:
        name = python_env.name_of(requirement)
        lines.append(f"{name}{limits[name]}" if name in limits and not python_env.requirement(requirement).specifier
                     else requirement)
    return tuple(lines)


def stand_in_reason(cell: Cell, closure_of: Cell) -> str:
    """Why a twin runs on ``cell``'s base instead of its own cell's."""
    return (f"{cell.os} stands in for {closure_of.os} with {closure_of.env}, which cannot be had on this build machine "
            f"(same arch, Python {closure_of.python} and locked packages)")
