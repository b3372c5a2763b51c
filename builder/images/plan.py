"""What goes into one cell's images: every decision, made once, as typed values.

`resolve(facts)` decides, from a cell's facts (`builder.images.facts.CellFacts`, which
`resolve_facts` gathered from the knowledge base in one pass) and the vocabulary,
everything both images of a cell (the NPU image and its CPU twin) need: base image, OS
packages, CANN installers and environment, Python environment from the lock and the
lock's state, pins, files, labels, manifests, tags. It asks the knowledge base nothing.
It returns a `CellPlan` holding a `Plan` per variant (its Dockerfile as building blocks,
`builder.images.blocks`, and the files of its context) and what the pipeline needs beside
them. The functions that take ``(cell, kb, ...)`` (`plan`, `manifest`, `lock_inputs`,
`unrecorded_installers`, `final_env`) resolve the cell's facts first, for the callers that
hold a cell and not its facts. The blocks only format the values decided here; `render`
writes the files; the pipeline's steps take the `CellPlan` (see `builder.images.prepare`).
Values from the knowledge base are re-checked against strict patterns here, exactly like
the matrix's own values, so none can change a Dockerfile's structure.

Example:
    >>> resolved = resolve(resolve_facts(cell, knowledge.load(), lock, digest="0123456789abcdef"))  # doctest: +SKIP
    >>> p = resolved.plans[vocabulary.CPU]                                          # doctest: +SKIP
    >>> p.base_image, p.steps, p.block(LockedPackages).number                       # doctest: +SKIP
    ('debian:bookworm-slim', ('os', 'python', 'closure', 'env', 'files'), 3)
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Mapping, NamedTuple, Optional, Tuple, Type, TypeVar

from builder import installers as installer_names
from builder import python_env, vocabulary
from builder.images import conda_lock, stage
from builder.images import lock as locking
from builder.images.blocks import (BaseOs, Block, CannEnv, CannInstallers, ChipPackages, ContextInputs, DriverGuard,
                                   EnvDefaults, Header, ImageLabels, LockedPackages, PythonEnvironment, ShippedFiles,
                                   UnverifiedPackages, UvStage)
from builder.images.blocks.base_os import APT_COMPONENTS, FAMILIES
from builder.images.blocks.cann_installers import UNPACK_SCRIPT, InstallerFile
from builder.images.blocks.common import ALLOW_UNVERIFIED as ALLOW_UNVERIFIED  # the pipeline's build arg
from builder.images.facts import CellFacts, resolve_facts
from builder.images.matrix import Cell
from builder.knowledge import Installer
from builder.errors import UserError

# Field-guide defaults (section 2/3/5); a cell's env_vars override them by name. The
# allocator default (PYTORCH_NPU_ALLOC_CONF) comes from python_env: only the torch_npu
# releases that accept it get it.
DEFAULT_ENV = (
    ("ASCEND_GLOBAL_LOG_LEVEL", "3"),
    ("HCCL_CONNECT_TIMEOUT", "1800"),
)

# The context files the lock is installed from, one per step: the verified closure, the
# entries the lock could not verify (refused unless the build is asked), torch_npu.
LOCK_STEPS = {"closure": "lock.closure.txt", "unverified": "lock.unverified.txt", "torch_npu": "lock.torch_npu.txt"}
UV_FILE = "uv.txt"  # the context file pinning uv, the installer of the verified steps (builder/data/uv.yaml)

DRIVER_LIB = "/usr/local/Ascend/driver/lib64"  # mounted from the host at run time
HOME_VARIABLE = "ASCEND_TOOLKIT_HOME"  # set first; CANN's other ENV values refer to it
# NNAL installs with the toolkit's environment sourced, as the official images do.
TOOLKIT_SET_ENV = "/usr/local/Ascend/ascend-toolkit/set_env.sh"
# NNAL ships ATB built for both C++ ABIs; its set_env.sh takes the one torch reports
# (torch.compiled_with_cxx11_abi()), and so does this ENV. PyTorch's Linux wheels use the
# C++11 ABI from 2.7 on (pytorch/pytorch#143962); measured here: torch 2.1.0 (aarch64)
# reports False, 2.13.0+cpu (x86_64) True. The versions tier runs NNAL's set_env.sh to check.
CXX11_ABI_SINCE_TORCH = (2, 7)
ATB_HOME = "/usr/local/Ascend/nnal/atb/latest/atb/cxx_abi_{abi}"
# NNAL's set_env.sh (nnal/atb/set_env.sh), its settings as the official images write them.
NNAL_SETTINGS = (
    ("ATB_STREAM_SYNC_EVERY_KERNEL_ENABLE", "0"), ("ATB_STREAM_SYNC_EVERY_RUNNER_ENABLE", "0"),
    ("ATB_STREAM_SYNC_EVERY_OPERATION_ENABLE", "0"), ("ATB_OPSRUNNER_KERNEL_CACHE_LOCAL_COUNT", "1"),
    ("ATB_OPSRUNNER_KERNEL_CACHE_GLOABL_COUNT", "5"), ("ATB_WORKSPACE_MEM_ALLOC_ALG_TYPE", "1"),
    ("ATB_COMPARE_TILING_EVERY_KERNEL", "0"), ("ATB_SHARE_MEMORY_NAME_SUFFIX", ""),
    ("ATB_MATMUL_SHUFFLE_K_ENABLE", "1"), ("LCCL_DETERMINISTIC", "0"), ("LCCL_PARALLEL", "0"),
)

TORCH_NPU = "torch-npu"  # torch_npu's canonical name: its own step, and not in the twin

B = TypeVar("B", bound=Block)

_SAFE = {
    "url": re.compile(r"^https://[A-Za-z0-9._~:/?#@!&+,=%-]+$"),
    "channel": re.compile(r"^https?://[A-Za-z0-9._~:/?#@!&+,=%-]+$"),  # a conda channel: a mirror on a LAN may be http
    "sha256": re.compile(r"^[0-9a-f]{64}$"),
    "file": re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$"),
    "image": re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$"),
    "text": re.compile(r"^[A-Za-z0-9 _./:,=+@%()-]*$"),
}
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_NAME_END = re.compile(r"[=<>!~;\[ ]")  # where a requirement line's name ends


def _safe(kind: str, value: Optional[str], what: str) -> str:
    """Refuse a knowledge-base value that could change a Dockerfile's structure."""
    if not _SAFE[kind].fullmatch(value or ""):
        raise UserError(f"refusing to render {what} = {value!r}: not a plain {kind}",
                        fix="correct builder/data/ (the knowledge base) or override the value in the matrix")
    return value or ""


@dataclass(frozen=True)
class Install:
    """One step of the Python environment: a requirements file from the lock and how pip takes it.

    ``verified``: every line has its sha256 and pip installs exactly those files
    (``--require-hashes --no-deps``). Otherwise the step is refused unless the build is
    asked (``ALLOW_UNVERIFIED``); ``resolve`` says pip still resolves dependencies (no lock).
    """

    step: str
    file: str
    lines: Tuple[str, ...]
    verified: bool
    resolve: bool = False
    reason: str = ""
    text: bytes = field(init=False, repr=False, compare=False)  # the file's bytes, made once

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", ("\n".join(self.lines) + "\n").encode())

    @property
    def names(self) -> Tuple[str, ...]:
        """The names its lines install (worked out once per process for the same lines)."""
        return _names(self.lines)


@lru_cache(maxsize=64)
def _apt_components(os_id: str) -> str:
    """The archive components of an apt OS's mirror line: by distribution (the id without its version)."""
    return APT_COMPONENTS.get(re.sub(r"[0-9.]+$", "", os_id), "main")


@lru_cache(maxsize=1024)
def _names(lines: Tuple[str, ...]) -> Tuple[str, ...]:
    return tuple(_NAME_END.split(line, maxsplit=1)[0] for line in lines if not line.startswith((" ", "#")))


@lru_cache(maxsize=4096)
def _block(kind: Type[B], *values) -> B:
    """The block ``kind(*values)``, made once per process: the cells that share it share the very
    same block, which formats its fragment once (`Block.text`)."""
    return kind(*values)


@dataclass(frozen=True)
class Plan:
    """One image of a cell: its Dockerfile as building blocks (`builder.images.blocks`, in
    Dockerfile order), and what its build context holds beside the Dockerfile.

    ``steps`` names its numbered steps in order (each block holds its own number).
    """

    cell_id: str
    variant: str
    dockerfile: str                       # its file name in dockerfiles/<cell>/
    manifest_file: str                    # its manifest's file name there
    lock_state: str                       # ok | incomplete | missing | stale (locking.status)
    steps: Tuple[str, ...]
    blocks: Tuple[Block, ...]
    installs: Tuple[Install, ...]         # the Python steps' requirements files, in order
    uv: str                               # uv's requirement line when a step is verified, else ""
    conda_explicit: str                   # the lock's conda part as `conda create --file` takes it ("" if none)
    scripts: Tuple[str, ...]              # the scripts of builder/templates/ its context carries as they are
    base_image: str                       # the default of the BASE_IMAGE build arg (its header block's)

    def find(self, kind: Type[B]) -> Optional[B]:
        """The plan's block of ``kind`` (the first one), None when the image has none."""
        return next((b for b in self.blocks if isinstance(b, kind)), None)

    def block(self, kind: Type[B]) -> B:
        """The plan's block of ``kind`` (the first one); LookupError when the image has none."""
        found = self.find(kind)
        if found is None:
            raise LookupError(f"the {self.variant} image of {self.cell_id} has no {kind.__name__} block")
        return found

    @property
    def npu(self) -> bool:
        return self.variant == vocabulary.NPU

    @property
    def installers(self) -> Tuple[InstallerFile, ...]:
        """The CANN packages, in install order (() for the twin and for CANN from an image)."""
        cann = self.find(CannInstallers)
        return cann.installers if cann else ()

    @property
    def python_environment(self) -> PythonEnvironment:
        return self.block(PythonEnvironment)

    @property
    def conda_file(self) -> str:
        """Miniforge's installer file name ("" for a venv)."""
        return self.python_environment.installer_file

    @property
    def unverified(self) -> Tuple[Install, ...]:
        return tuple(i for i in self.installs if not i.verified)

    def number(self, step: str) -> int:
        """The printed number of ``step``: consecutive in each variant."""
        return self.steps.index(step) + 1

    @property
    def labels(self) -> Tuple[Tuple[str, str], ...]:
        return self.block(ImageLabels).labels

    def with_content_hash(self, digest: str) -> "Plan":
        """This plan with ``digest`` as the content hash its label says (`CellPlan.with_content_hash`)."""
        key = vocabulary.Label.CONTENT_HASH
        return replace(self, blocks=tuple(
            replace(b, labels=tuple((k, digest if k == key else v) for k, v in b.labels))
            if isinstance(b, ImageLabels) else b for b in self.blocks))


def atb_home(torch: str) -> str:
    """Where NNAL's ATB for the ABI of the cell's torch (its requirement) lives (``ATB_HOME_PATH``).

    Example:
        >>> atb_home("torch==2.1.0+cpu"), atb_home("torch==2.13.0+cpu")[-9:]
        ('/usr/local/Ascend/nnal/atb/latest/atb/cxx_abi_0', 'cxx_abi_1')
    """
    found = re.search(r"==\s*(\d+)\.(\d+)", torch)
    release = (int(found.group(1)), int(found.group(2))) if found else CXX11_ABI_SINCE_TORCH
    return ATB_HOME.format(abi=int(release >= CXX11_ABI_SINCE_TORCH))


def cann_env(f: CellFacts) -> Tuple[Tuple[str, str], ...]:
    """CANN's ``set_env.sh`` written out as ENV lines, so non-interactive shells have it too
    (and NNAL's, for a cell with ``nnal``).

    Like ``set_env.sh``, the toolkit's home is set first and referred to afterwards;
    LD_LIBRARY_PATH is built up in four lines (CANN's libraries, op tiling, the AML tools',
    the driver's). set_env.sh adds some entries only when their folder exists (tools/aml,
    tools/profiler, ...); they are always here, harmless when absent. The versions tier
    runs the installed set_env.sh (and NNAL's) against this ENV and fails naming any
    variable it lacks or sets otherwise.
    """
    home = "${" + HOME_VARIABLE + "}"
    nnal = (
        ("ATB_HOME_PATH", atb_home(f.torch)),
        ("LD_LIBRARY_PATH", "${LD_LIBRARY_PATH}:${ATB_HOME_PATH}/lib:${ATB_HOME_PATH}/examples"
                            ":${ATB_HOME_PATH}/tests/atbopstest"),
        ("PATH", "${PATH}:${ATB_HOME_PATH}/bin"),
        *NNAL_SETTINGS,
    ) if f.cell.nnal else ()
    return (
        (HOME_VARIABLE, f.cann_home),
        ("ASCEND_HOME_PATH", home),
        ("ASCEND_AICPU_PATH", home),
        ("ASCEND_OPP_PATH", f"{home}/opp"),
        ("TOOLCHAIN_HOME", f"{home}/toolkit"),
        ("LD_LIBRARY_PATH", f"{home}/lib64:{home}/lib64/plugin/opskernel:{home}/lib64/plugin/nnengine"),
        ("LD_LIBRARY_PATH", f"${{LD_LIBRARY_PATH}}:{home}/opp/built-in/op_impl/ai_core/tbe/op_tiling"),
        ("LD_LIBRARY_PATH", f"${{LD_LIBRARY_PATH}}:{home}/tools/aml/lib64:{home}/tools/aml/lib64/plugin"),
        ("LD_LIBRARY_PATH", f"${{LD_LIBRARY_PATH}}:{DRIVER_LIB}:{DRIVER_LIB}/common:{DRIVER_LIB}/driver"),
        ("PYTHONPATH", f"{home}/python/site-packages:{home}/opp/built-in/op_impl/ai_core/tbe"),
        ("PATH", f"{home}/bin:{home}/compiler/ccec_compiler/bin:{home}/tools/ccec_compiler/bin:${{PATH}}"),
        ("PATH", f"${{PATH}}:{home}/tools/profiler/bin:{home}/python/site-packages/bin"),
        *nnal,
    )


def env_vars(cell: Cell, defaults: Optional[Tuple[Tuple[str, str], ...]] = None) -> Tuple[Tuple[str, str], ...]:
    """The field-guide defaults (and ``defaults``, those its torch_npu accepts: `CellFacts.default_env`)
    with the cell's env_vars over them, by name."""
    merged = dict(DEFAULT_ENV + (python_env.default_env(cell.torch_npu) if defaults is None else defaults))
    merged.update(dict(cell.env_vars))
    return tuple(sorted(merged.items()))


def final_env(cell: Cell, variant: str, kb) -> Dict[str, str]:
    """The ENV values the finished image has, literal, as Docker expands them: CANN's first,
    then the cell's env_vars (written later, so they win). A value referring to a variable
    this plan does not set (PATH: the Python step prepends to it again) is left out. The driver
    guard's requirement comes last (both images state it)."""
    f = resolve_facts(cell, kb)
    return _expand(cann_env(f) if variant == vocabulary.NPU else (), env_vars(cell, f.default_env), cell)


def _expand(cann: Tuple[Tuple[str, str], ...], own: Tuple[Tuple[str, str], ...], cell: Cell) -> Dict[str, str]:
    """`final_env` from its parts (the manifest's ``env`` is made here too, so the two agree)."""
    env = dict(_expanded(cann))
    env.update(own)
    env.update(requirement(cell))
    return env


@lru_cache(maxsize=256)
def _expanded(cann: Tuple[Tuple[str, str], ...]) -> Dict[str, str]:
    """CANN's ENV lines as Docker expands them, each line referring to the ones before it (the
    same lines for every cell of a CANN layout: expanded once; callers copy the result)."""
    env: Dict[str, str] = {}
    for name, value in cann:
        if all(ref in env for ref in _REFERENCE.findall(value)):
            env[name] = _REFERENCE.sub(lambda m: env[m.group(1)], value)
        else:
            env.pop(name, None)
    return env


def installer_files(f: CellFacts) -> Tuple[InstallerFile, ...]:
    """Toolkit first, then the chip's ops package, then NNAL when the cell asks for it, each with
    the sha256 that must match: the cell's own, else the knowledge base's, else the one the lock
    recorded on first fetch. A local folder supplies each package the knowledge base lacks."""
    return _installer_files(f.installers, f.cell.sha256, f.lock.installers if f.lock else (), f.local_packages)


@lru_cache(maxsize=1024)
def _installer_files(installers: Tuple[Installer, ...], given_pairs: Tuple[Tuple[str, str], ...],
                     recorded_pairs: Tuple[Tuple[str, str], ...],
                     local_pairs: Tuple[Tuple[str, str], ...]) -> Tuple[InstallerFile, ...]:
    """`installer_files` of these values, worked out once per process (the cells of a CANN
    release, chip and arch share them)."""
    given, recorded = dict(given_pairs), dict(recorded_pairs)
    known = {item.kind: item for item in installers}
    local = dict(local_pairs)
    files = []
    for kind in installer_names.KINDS:  # in install order
        sources = TOOLKIT_SET_ENV if kind == "nnal" else ""
        item = known.get(kind)
        if item is not None:
            sha = given.get(item.filename) or item.sha256 or recorded.get(item.filename)
            files.append(InstallerFile(_safe("file", item.filename, "installer file"), _safe("url", item.url, "installer URL"),
                                       _safe("sha256", sha, f"sha256 of {item.filename}") if sha else "",
                                       _safe("file", item.run, "installer"), sources, kind))
        elif kind in local:
            name = local[kind]
            if name not in given:
                raise UserError(f"no sha256 for {name}", fix=f"add sha256: {{{name}: HEX}} to the cell")
            files.append(InstallerFile(_safe("file", name, "installer file"), "", _safe("sha256", given[name], f"sha256 of {name}"),
                                       name, sources, kind))
    return tuple(files)


def unrecorded_installers(cell: Cell, kb, lock: Optional[locking.Lock]) -> Tuple[str, ...]:
    """The CANN installers of ``cell``'s NPU image with no sha256 anywhere yet (cell, knowledge
    base, lock): `ascend-build lock` records them on first fetch; until then the image is refused."""
    if cell.cann_source != "installer":
        return ()
    try:
        return unrecorded(resolve_facts(cell, kb, lock))
    except UserError:  # odd data: other rules report it
        return ()


def unrecorded(f: CellFacts) -> Tuple[str, ...]:
    """`unrecorded_installers` of a cell whose facts are resolved (`f.lock` the one to look in)."""
    if f.cell.cann_source != "installer":
        return ()
    try:
        return _unhashed(installer_files(f))
    except UserError:  # a value a rule refuses (`_safe`): other rules report it
        return ()


def _unhashed(installers: Tuple[InstallerFile, ...]) -> Tuple[str, ...]:
    return tuple(f.filename for f in installers if not f.sha256)


def env_prefix(cell: Cell) -> str:
    return "/opt/conda/envs/ascend" if cell.env == "conda" else "/opt/venv"


def lock_inputs(cell: Cell, kb) -> locking.Inputs:
    """What the cell's lock is resolved from (`CellFacts.inputs`)."""
    return resolve_facts(cell, kb).inputs


def labels(cell: Cell, variant: str, digest: str, lock_state: str = "missing",
           stand_in: str = "") -> Tuple[Tuple[str, str], ...]:
    """The image's labels: the node decides from these alone."""
    return _labels(cell, variant, digest, lock_state, stand_in, _words(cell.ref, cell.tag, cell.id, cell.os, stand_in)[variant],
                   cell.cann_only)


@dataclass(frozen=True)
class _Words:
    """One image's names in the vocabulary's words."""

    title: str       # image:tag it is released as (a stand-in: its own)
    tag: str         # its tag
    name: str        # its name in the state folder
    dockerfile: str  # its Dockerfile's file name
    manifest: str    # its manifest's file name


# Each variant's names, read from the vocabulary once (its file ships in every image unchanged):
# what its release tag adds to the cell's tag, its Dockerfile's and its manifest's file names.
_TAG_SUFFIXES = {v: vocabulary.release_tag("", v) for v in vocabulary.VARIANTS}
_DOCKERFILE_NAMES = {v: vocabulary.dockerfile_name(v) for v in vocabulary.VARIANTS}
_MANIFEST_NAMES = {v: vocabulary.manifest_name(v) for v in vocabulary.VARIANTS}


def _words(ref: str, tag: str, cell_id: str, os_id: str, stand_in: str, suffix: str = "") -> Dict[str, _Words]:
    """Each variant's `_Words`, from the tables of its names."""
    return {v: _Words(title=vocabulary.stand_in_tag(ref, os_id) if stand_in else ref + _TAG_SUFFIXES[v],
                      tag=vocabulary.stand_in_tag(tag, os_id) if stand_in else tag + _TAG_SUFFIXES[v],
                      name=cell_id + _TAG_SUFFIXES[v] + suffix,
                      dockerfile=_DOCKERFILE_NAMES[v], manifest=_MANIFEST_NAMES[v])
            for v in vocabulary.VARIANTS}


def _labels(cell: Cell, variant: str, digest: str, lock_state: str, stand_in: str, words: _Words,
            cann_only: bool) -> Tuple[Tuple[str, str], ...]:
    npu = variant == vocabulary.NPU
    Label = vocabulary.Label
    pairs = [
        (Label.OCI_TITLE, words.title),
        (Label.OCI_DESCRIPTION, _description(cell, npu, cann_only)),
        (Label.OCI_VERSION, words.tag),
        (Label.CELL, cell.id),
        (Label.VARIANT, variant),
        (Label.OS, cell.os),
        (Label.ARCH, cell.arch),
        (Label.PYTHON, cell.python),
        (Label.TORCH, cell.torch),
        (Label.CONTENT_HASH, digest),
        (Label.LOCK, lock_state),
    ] + ([(Label.STAND_IN, stand_in)] if stand_in else [])
    if npu:
        pairs += [
            (Label.CANN, cell.cann),
            (Label.CHIP, cell.chip),
            (Label.TORCH_NPU, cell.torch_npu),
            (Label.MIN_DRIVER, cell.driver),
            (Label.MIN_FIRMWARE, cell.firmware or ""),
        ] + ([(Label.PRODUCT, cell.product)] if cell.product else [])  # whose HDK numbering min-driver is in
    return _texts(pairs)


def _texts(pairs) -> Tuple[Tuple[str, str], ...]:
    """``pairs`` of (name, value), each value checked to be plain text (`_safe`; None is ""). In one
    pass: the pattern is one character class repeated, so the values joined pass exactly when
    each of them does; the first that does not is then named."""
    checked = tuple((name, value or "") for name, value in pairs)
    if not _SAFE["text"].fullmatch("".join(value for _, value in checked)):
        for name, value in checked:
            _safe("text", value, name)
    return checked


def requirement(cell: Cell) -> Tuple[Tuple[str, str], ...]:
    """What the driver guard checks, as ENV: the cell's minimum driver and firmware, in both
    images (the twin states its NPU image's, so the guard can be run where no NPU is).

    Example:
        >>> from types import SimpleNamespace as C
        >>> requirement(C(driver="25.0.RC1", firmware=None))
        (('ASCEND_REQUIRE_DRIVER', '25.0.RC1'), ('ASCEND_REQUIRE_FIRMWARE', ''))
    """
    return _texts(((vocabulary.REQUIRE_DRIVER_ENV, cell.driver), (vocabulary.REQUIRE_FIRMWARE_ENV, cell.firmware)))


def _description(cell: Cell, npu: bool, cann_only: bool) -> str:
    if cann_only:
        return (f"CANN {cell.cann} for {cell.chip} with Python {cell.python} (no PyTorch)" if npu
                else f"CPU twin of {cell.id}: Python {cell.python} and its locked packages without CANN")
    return (f"PyTorch {cell.torch} + torch_npu {cell.torch_npu} on CANN {cell.cann} for {cell.chip}" if npu
            else f"CPU twin of {cell.id}: PyTorch {cell.torch} without CANN")


def matrix_name(cell: Cell) -> str:
    """The matrix file as the header names it: its folder and name (``matrix/default.yaml``).

    Only the last two parts, so the bytes are the same from any working directory,
    any checkout and any install of ascend-build (`render --check` compares them).
    """
    return _display_path(cell.where.file) if cell.where else "(matrix)"


@lru_cache(maxsize=64)
def _display_path(file: str) -> str:
    path = Path(os.path.abspath(file))
    return f"{path.parent.name}/{path.name}" if path.parent.name else path.name


# --- one cell, resolved once ---------------------------------------------------------------

class _Shared(NamedTuple):
    """What both images of a cell take alike, worked out once per cell."""

    installs: Tuple[Install, ...]         # the NPU image's Python steps (the twin's: all but torch_npu)
    env: Tuple[Tuple[str, str], ...]      # `env_vars`
    cann_env: Tuple[Tuple[str, str], ...]  # `cann_env` (the NPU image's)
    requirement: Tuple[Tuple[str, str], ...]  # `requirement`
    conda: Tuple[str, str, str]           # Miniforge's installer: file, URL, sha256 (all "" for a venv)
    conda_explicit: str                   # `_conda_explicit`


def _shared(f: CellFacts) -> _Shared:
    conda, explicit = f.conda, _conda_explicit(f) if f.conda else ""
    installer = (_safe("file", conda.filename, "conda installer file"), _safe("url", conda.url, "conda installer URL"),
                 _safe("sha256", dict(f.cell.sha256).get(conda.filename, conda.sha256), "conda sha256")) \
        if conda else ("", "", "")
    return _Shared(_installs(f), env_vars(f.cell, f.default_env), cann_env(f), requirement(f.cell), installer, explicit)


def _variant_installs(shared: _Shared, variant: str) -> Tuple[Install, ...]:
    """The Python steps of ``variant``: the twin's are the NPU image's minus torch_npu, the same
    closure (the very same `Install` values)."""
    return shared.installs if variant == vocabulary.NPU else tuple(i for i in shared.installs if i.step != "torch_npu")


def _installs(f: CellFacts) -> Tuple[Install, ...]:
    """The Python steps of the NPU image: the verified closure, then what the lock could not
    verify, then torch_npu.

    Without a usable lock (missing, or made from other inputs), every requirement is
    unverified and pip resolves: refused unless the build is asked.
    """
    if f.state in ("missing", "stale"):
        return _unlocked_installs(f.state, f.unlocked)
    # "ok" and "incomplete" are states of a lock that exists: f.locked is its entries
    tnpu = next((e for e in f.locked if e.name == TORCH_NPU), None)
    rest = tuple(e for e in f.locked if e.name != TORCH_NPU)
    steps = []
    verified = tuple(line for e in rest if e.complete for line in e.lines)
    if verified:
        steps.append(Install("closure", LOCK_STEPS["closure"], verified, True))
    missing = tuple(e for e in rest if not e.complete)
    if missing:
        steps.append(Install("unverified", LOCK_STEPS["unverified"], tuple(line for e in missing for line in e.lines), False,
                             False, "; ".join(f"{e.name}: {e.note}" for e in missing)))
    if tnpu is not None:
        steps.append(Install("torch_npu", LOCK_STEPS["torch_npu"], tnpu.lines, tnpu.complete, False, tnpu.note))
    return tuple(steps)


@lru_cache(maxsize=1024)
def _unlocked_installs(state: str, lines: Tuple[str, ...]) -> Tuple[Install, ...]:
    """The steps without a usable lock: every requirement unverified, pip resolves (the cells
    that share their requirements share these steps, made once per process)."""
    reason = f"The cell's lock is {state}: run `ascend-build lock`"
    is_npu = [python_env.name_of(line) == "torch-npu" for line in lines]
    others = tuple(line for line, own in zip(lines, is_npu) if not own)
    steps = [Install("unverified", LOCK_STEPS["unverified"], others, False, True, reason)]
    if any(is_npu):
        steps.append(Install("torch_npu", LOCK_STEPS["torch_npu"], tuple(line for line, own in zip(lines, is_npu) if own),
                             False, True, reason))
    return tuple(steps)


def _manifest(f: CellFacts, variant: str, words: _Words, shared: _Shared) -> Dict[str, object]:
    """The run record of the field guide (section 7), describing what the image must contain.

    The lock lists every distribution the environment must hold, at its locked version
    (the twin's: all but torch_npu); the smoke program checks the image against it.
    """
    cell, lock, npu = f.cell, f.lock, variant == vocabulary.NPU
    usable = lock is not None and f.state in ("ok", "incomplete")
    entries = tuple(e for e in f.locked if npu or e.name != TORCH_NPU) if usable else ()
    return {
        "schema": 1,
        "framework": None if f.cann_only else "pytorch",  # None: CANN and Python only
        "cell": cell.id,
        "variant": variant,
        "image": words.title,
        "os": cell.os,
        "arch": cell.arch,
        "chip": cell.chip if npu else None,
        "python_version": cell.python,
        "torch_version": cell.torch or None,  # None: a CANN-only cell (no torch tiers)
        "torch_npu_version": (cell.torch_npu or None) if npu else None,
        "cann_version": cell.cann if npu else None,
        "min_driver": cell.driver if npu else None,
        "min_firmware": cell.firmware if npu else None,
        "env_manager": cell.env,
        "pip": list(cell.pip),
        "env": {**_expanded(shared.cann_env if npu else ()), **dict(shared.env), **dict(shared.requirement)},
        "content_hash": f.digest,
        "lock": {"state": f.state, "file": vocabulary.LOCK if usable else None,
                 "distributions": {e.name: e.version for e in entries},
                 "unverified": sorted(e.name for e in entries if not e.complete),
                 **({"conda": {c.name: f"{c.version} {c.build}" for c in lock.conda.packages}}
                    if lock is not None and usable and cell.env == "conda" and lock.conda and lock.conda.complete else {})},
        **({"nnal": True} if npu and cell.nnal else {}),  # the libraries tier then requires libatb.so
        **({"stand_in": f.stand_in} if f.stand_in else {}),
    }


def _plan(f: CellFacts, variant: str, words: _Words, shared: _Shared) -> Plan:
    """The blocks of ``variant``'s Dockerfile, from the facts looked up once: every value decided
    and checked here; the blocks only format them."""
    cell, os_info, npu = f.cell, f.os, variant == vocabulary.NPU
    family = FAMILIES.get(os_info.family)
    if family is None:
        raise UserError(f"{cell.os}: no way to install OS packages of family {os_info.family!r} "
                        f"(known: {', '.join(FAMILIES)})",
                        fix="correct family: in builder/data/os.yaml, or add the family to "
                            "builder/images/blocks/base_os.py (FAMILIES)")
    from_image = npu and cell.cann_source == "image"
    python_steps = _variant_installs(shared, variant)
    usable = f.state in ("ok", "incomplete")
    verified = any(step.verified for step in python_steps)
    uv = f.uv if verified else ""
    if verified and not uv:
        raise UserError(f"no uv for {cell.arch} in builder/data/uv.yaml", fix="add its wheel's sha256 there")
    installers = installer_files(f) if npu and not from_image else ()
    base = _safe("image", cell.cann_image if from_image else (cell.base_image or os_info.image), "base image")
    chip_installers = tuple(i for i in installers if i.kind != "toolkit")
    python = tuple(i.step for i in python_steps)
    if chip_installers:  # the chip's layers: right below torch_npu's, else last
        python = (*python[:-1], "chip", python[-1]) if python[-1:] == ("torch_npu",) else (*python, "chip")
    steps = ("os", *(("cann",) if npu else ()), "python", *python, "env", "files")
    number = {step: n for n, step in enumerate(steps, 1)}
    # torch_npu's layer, above the chip's, built to be the same bytes on every chip
    same_on_every_chip = bool(chip_installers) and any(i.step == "torch_npu" and i.verified for i in python_steps)
    explicit = shared.conda_explicit
    parts: List[Block] = [
        Header(cell.id, matrix_name(cell), not npu, words.dockerfile, base,
               stage.INSTALLERS if npu and cell.cann_source == "local" else ""),
        _block(ContextInputs, stage.WHEELHOUSE, stage.CONDA_INSTALLER if cell.env == "conda" else ""),
        _block(BaseOs, os_info.family, family.npu_packages if npu else family.cpu_packages, number["os"],
               "os" if installers or uv else "", os_info.codename or "",
               _apt_components(cell.os)),
    ]
    if uv:
        parts.append(_block(UvStage, UV_FILE, not installers))
    if npu:
        parts.append(_block(CannInstallers, cell.cann, cell.chip, cell.cann_source, number["cann"], installers,
                            base, _safe("url", f.download_referer, "download referer"),
                            number["chip"] if chip_installers else 0, same_on_every_chip))
        parts.append(_block(CannEnv, shared.cann_env))
    prefix = env_prefix(cell)
    parts.append(_block(PythonEnvironment, cell.env, cell.python, prefix, number["python"], *shared.conda,
                        conda_lock.EXPLICIT_FILE if explicit else ""))
    installs = {i.step: i for i in python_steps}
    for step in python:
        if step == "chip":
            parts.append(_block(ChipPackages, cell.chip, number["chip"], chip_installers, same_on_every_chip))
            continue
        install = installs[step]
        parts.append(_block(LockedPackages, step, install.file, number[step], prefix,
                            step == "torch_npu" and same_on_every_chip)
                     if install.verified else
                     _block(UnverifiedPackages, step, install.file, number[step], install.names, install.reason,
                            install.resolve, f.torch_index))
    parts += [
        _block(EnvDefaults, number["env"], shared.env),
        _block(ShippedFiles, number["files"], words.manifest, locking.LOCK_FILE if usable else ""),
        _block(DriverGuard, shared.requirement),
        ImageLabels(_labels(cell, variant, f.digest, f.state, f.stand_in, words, f.cann_only)),
    ]
    # the scripts the context carries: unpack-cann.sh for signed bundles, conda's credential
    # check, the fetcher of the lock's conda packages
    scripts = (UNPACK_SCRIPT if any(i.bundle for i in installers) else "",
               conda_lock.SECRETS_SCRIPT if cell.env == "conda" else "", conda_lock.FETCH_SCRIPT if explicit else "")
    return Plan(cell_id=cell.id, variant=variant, dockerfile=words.dockerfile, manifest_file=words.manifest,
                lock_state=f.state, steps=steps, blocks=tuple(parts), installs=python_steps, uv=uv,
                conda_explicit=explicit, scripts=tuple(name for name in scripts if name), base_image=base)


def _conda_explicit(f: CellFacts) -> str:
    """The lock's conda part as an explicit list, when the lock is usable and that part complete."""
    part = f.lock.conda if f.lock is not None and f.state in ("ok", "incomplete") else None
    if part is None or not part.complete:
        return ""
    _safe("channel", part.channel, "the lock's conda channel")  # conda-fetch.sh reads it from the explicit list
    return part.explicit(conda_lock.SUBDIRS[f.cell.arch])


def plan(cell: Cell, kb, variant: str, digest: str, lock: Optional[locking.Lock] = None,
         closure_of: Optional[Cell] = None) -> Plan:
    """Decide everything about the Dockerfile of ``cell`` in ``variant``; ``digest`` is its content
    hash, ``lock`` the cell's lock (None: none yet). `resolve` decides both images at once."""
    f = resolve_facts(cell, kb, lock, closure_of, digest)
    return _plan(f, variant, _variant_words(f, variant), _shared(f))


def manifest(cell: Cell, variant: str, digest: str, kb, lock: Optional[locking.Lock] = None,
             closure_of: Optional[Cell] = None) -> Dict[str, object]:
    """The run record of ``cell``'s image of ``variant`` (see `_manifest`)."""
    f = resolve_facts(cell, kb, lock, closure_of, digest)
    return _manifest(f, variant, _variant_words(f, variant), _shared(f))


@dataclass(frozen=True)
class CellPlan:
    """A cell resolved once: every fact both of its images need, from the build context to
    the report. `render` formats it; the pipeline's steps take it (with the host's
    choices, see `builder.images.prepare`); neither goes back to the cell or the knowledge base.

    ``plans`` and ``manifests`` are by variant (`vocabulary.VARIANTS`).
    """

    cell_id: str
    arch: str
    python: str
    glibc: Tuple[int, int]                # the OS's, for wheels fetched natively for ``arch``
    uv: str                               # uv's requirement line for ``arch`` (the build's installer)
    repository: str                       # where the release tags go (the matrix's image name)
    tags: Mapping[str, str]               # the release tag of each variant (a stand-in's own tag)
    refs: Mapping[str, str]               # image:tag of each variant's release
    names: Mapping[str, str]              # each image's name in the state folder (logs, reports)
    lock: Optional[locking.Lock]
    lock_owner: str                       # the cell whose lock it is (a stand-in's: the cell it stands in for)
    lock_state: str                       # ok | incomplete | missing | stale
    content_hash: str
    stand_in: str                         # why a stand-in twin runs on another OS ("" if not one)
    unrecorded: Tuple[str, ...]           # NPU image's CANN installers with no sha256 anywhere yet
    installers_dir: str                   # a local-CANN cell's installer folder ("" otherwise)
    own_wheel: Optional[Tuple[str, str]]  # the cell's own torch_npu wheel (path, sha256)
    mirrors: Tuple[Tuple[str, str], ...]  # build-time settings (a secret at build time, never in a layer)
    cann_only: bool
    plans: Mapping[str, Plan]
    manifests: Mapping[str, Mapping[str, object]]

    def ref(self, variant: str) -> str:
        """``image:tag`` of ``variant``'s release."""
        return self.refs[variant]

    def with_content_hash(self, digest: str) -> "CellPlan":
        """This cell's plan with ``digest`` as its content hash, in both images' labels and
        manifests too (`render.resolve` hashes the context made with the hash left empty)."""
        return replace(self, content_hash=digest,
                       plans={v: p.with_content_hash(digest) for v, p in self.plans.items()},
                       manifests={v: {**m, "content_hash": digest} for v, m in self.manifests.items()})


def _facts_words(f: CellFacts) -> Dict[str, _Words]:
    return _words(f.ref, f.tag, f.cell.id, f.cell.os, f.stand_in, f"-on-{f.cell.os}" if f.closure_of else "")


def _variant_words(f: CellFacts, variant: str) -> _Words:
    if variant not in vocabulary.VARIANTS:
        raise ValueError(f"unknown variant {variant!r}")
    return _facts_words(f)[variant]


def resolve(f: CellFacts) -> CellPlan:
    """Decide everything about both images of a cell from its facts (`resolve_facts`), asking
    the knowledge base nothing.

    Example:
        >>> resolved = resolve(resolve_facts(cell, knowledge.load(), lock, digest=digest))  # doctest: +SKIP
        >>> resolved.lock_state, resolved.plans["cpu"].steps                                # doctest: +SKIP
        ('ok', ('os', 'python', 'closure', 'env', 'files'))
    """
    cell, closure_of = f.cell, f.closure_of
    words = _facts_words(f)
    shared = _shared(f)
    plans = {variant: _plan(f, variant, words[variant], shared) for variant in vocabulary.VARIANTS}
    npu = plans[vocabulary.NPU]
    return CellPlan(
        cell_id=cell.id, arch=cell.arch, python=cell.python, glibc=f.os.glibc,
        uv=f.uv, repository=cell.image,
        tags={v: w.tag for v, w in words.items()}, refs={v: f"{cell.image}:{w.tag}" for v, w in words.items()},
        names={v: w.name for v, w in words.items()},
        lock=f.lock, lock_owner=(closure_of or cell).id, lock_state=f.state, content_hash=f.digest,
        stand_in=f.stand_in, unrecorded=_unhashed(npu.installers) if cell.cann_source == "installer" else (),
        installers_dir=(cell.cann_local or "") if cell.cann_source == "local" else "",
        own_wheel=cell.torch_npu_wheel, mirrors=cell.mirrors, cann_only=f.cann_only,
        plans=plans, manifests={variant: _manifest(f, variant, words[variant], shared) for variant in vocabulary.VARIANTS},
    )
