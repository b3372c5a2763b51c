"""What goes into one cell's images: every decision, made once, as typed values.

`resolve(facts)` decides, from a cell's facts (`builder.images.facts.CellFacts`, which
`resolve_facts` gathered from the knowledge base in one pass) and the vocabulary,
everything both images of a cell (the NPU image and its CPU twin) need: base image, OS
packages, CANN installers and environment, Python environment from the lock and the
lock's state, pins, files, labels, manifests, tags. It asks the knowledge base nothing.
It returns a `CellPlan` holding a `Plan` per variant (the facts of its Dockerfile) and
what the pipeline needs beside them. The functions that take ``(cell, kb, ...)``
(`plan`, `manifest`, `lock_inputs`, `unrecorded_installers`, `final_env`) resolve the
cell's facts first, for the callers that hold a cell and not its facts.
The template (``builder/templates/Dockerfile.j2``) only formats a `Plan`; `render`
writes the files; the pipeline's steps take the `CellPlan` (see `builder.images.prepare`).
Values from the knowledge base are re-checked against strict patterns here, exactly like
the matrix's own values, so none can change a Dockerfile's structure.

Example:
    >>> resolved = resolve(resolve_facts(cell, knowledge.load(), lock, digest="0123456789abcdef"))  # doctest: +SKIP
    >>> p = resolved.plans[vocabulary.CPU]                                          # doctest: +SKIP
    >>> p.base_image, p.steps, p.number("closure")                                  # doctest: +SKIP
    ('debian:bookworm-slim', ('os', 'python', 'closure', 'env', 'files'), 3)
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Dict, Mapping, Optional, Tuple


from builder import installers as installer_names
from builder import python_env, vocabulary
from builder.images import conda_lock, stage
from builder.images import lock as locking
from builder.images.facts import CellFacts, resolve_facts
from builder.images.matrix import Cell
from builder.errors import UserError

# Field-guide defaults (section 2/3/5); a cell's env_vars override them by name. The
# allocator default (PYTORCH_NPU_ALLOC_CONF) comes from python_env: only the torch_npu
# releases that accept it get it.
DEFAULT_ENV = (
    ("ASCEND_GLOBAL_LOG_LEVEL", "3"),
    ("HCCL_CONNECT_TIMEOUT", "1800"),
)

OS_PACKAGES = {
    # bash/curl/unzip fetch and unpack installers; python3 runs CANN's install scripts
    # (and is the interpreter of venv cells); gcc/g++/make: CANN's operator compiler.
    "apt": ("bash", "ca-certificates", "curl", "unzip", "python3", "python3-venv",
            "gcc", "g++", "make", "libc6-dev", "libgomp1", "libnuma1"),
    "dnf": ("bash", "ca-certificates", "curl", "unzip", "python3", "gcc", "gcc-c++", "make",
            "libgomp", "numactl-libs", "tar", "gzip", "findutils", "which"),
}
# The CPU twin needs no compiler and no installers.
OS_PACKAGES_CPU = {
    "apt": ("bash", "ca-certificates", "curl", "python3", "python3-venv", "libgomp1"),
    "dnf": ("bash", "ca-certificates", "curl", "python3", "libgomp", "findutils"),
}
APT_COMPONENTS = {"ubuntu": "main universe", "debian": "main"}

# The context files the lock is installed from, one per step: the verified closure, the
# entries the lock could not verify (refused unless the build is asked), torch_npu.
LOCK_STEPS = {"closure": "lock.closure.txt", "unverified": "lock.unverified.txt", "torch_npu": "lock.torch_npu.txt"}
ALLOW_UNVERIFIED = "ASCEND_BUILD_ALLOW_UNVERIFIED"  # the build arg that lets unverified entries in
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
class InstallerFile:
    """A CANN package: fetched (or copied from the context's installers folder), checked,
    unpacked when it is a signed bundle (``unpack-cann.sh``), run. ``sha256`` is "" when
    neither the knowledge base nor the lock has one yet: the step then refuses to start."""

    filename: str
    url: str
    sha256: str
    run: str
    sources: str = ""  # a script sourced before the installer runs (NNAL: the toolkit's set_env.sh)
    kind: str = "toolkit"  # toolkit | ops | nnal

    @property
    def bundle(self) -> bool:
        return self.filename.endswith(".zip")


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

    @cached_property
    def names(self) -> Tuple[str, ...]:
        """The names its lines install (the template says them twice: worked out once)."""
        return tuple(_NAME_END.split(line, maxsplit=1)[0] for line in self.lines if not line.startswith((" ", "#")))

    def text(self) -> bytes:
        return ("\n".join(self.lines) + "\n").encode()


# The file time of everything torch_npu's step writes (1980-01-01, as reproducible builds use):
# its layer then depends on the bytes installed, not on when or on which chip it was built.
FIXED_MTIME = 315532800


@dataclass(frozen=True)
class Plan:
    """Every fact the Dockerfile of one cell and variant is made of; the template formats it.

    CANN fields are empty for the CPU twin; ``steps`` names its numbered steps in order.
    """

    # what it is and where it came from
    cell_id: str
    variant: str
    npu: bool
    matrix_file: str                      # as the header names it: folder/name
    dockerfile: str                       # its file name in dockerfiles/<cell>/
    base_image: str                       # default of the BASE_IMAGE build arg
    wheelhouse: str                       # context folder and stage of optional wheels
    installers_folder: str                # context folder of a local CANN cell's installers
    # 1. OS packages
    os_family: str                        # apt | dnf
    os_codename: str
    apt_components: str
    os_packages: Tuple[str, ...]
    # CANN (NPU image only)
    cann: str
    chip: str
    cann_source: str                      # installer | local | image ("" for the twin)
    installers: Tuple[InstallerFile, ...]
    download_referer: str                 # the Referer CANN downloads send ("" for the twin)
    cann_env: Tuple[Tuple[str, str], ...]  # ENV lines in order; later ones may refer to earlier ones
    # Python and its packages
    python: str
    env_manager: str                      # conda | venv
    env_prefix: str
    conda_url: str
    conda_sha256: str
    conda_file: str                       # Miniforge's installer file name ("" for a venv)
    conda_explicit: str                   # the lock's conda part as `conda create --file` takes it ("" if none)
    lock_state: str                       # ok | incomplete | missing | stale (locking.status)
    installs: Tuple[Install, ...]         # the Python steps, in order
    torch_index: str                      # where unverified torch==X+cpu may come from
    torch_npu: str                        # "" for the twin
    uv: str                               # uv's requirement line when a step is verified, else ""
    env_vars: Tuple[Tuple[str, str], ...]
    # what the image says of itself
    tool_dir: str
    shipped_files: Tuple[str, ...]        # beside the smoke program, but the guard
    manifest_file: str
    manifest_path: str
    lock_file: str                        # "" when the cell has no usable lock
    lock_path: str
    labels: Tuple[Tuple[str, str], ...]
    shipped_guard: str                    # the guard's file among the shipped ones, copied executable
    guard: str                            # the ENTRYPOINT, vocabulary.GUARD: a link to it
    requirement: Tuple[Tuple[str, str], ...]  # the guard's ENV: the minimum driver and firmware
    steps: Tuple[str, ...]

    @property
    def wheelhouse_glob(self) -> str:
        """A COPY source that matches the wheelhouse folder, and nothing when it is absent."""
        return f"{self.wheelhouse[:-1]}[{self.wheelhouse[-1]}]"

    @property
    def conda_installer_folder(self) -> str:
        """The context folder (and stage) that may hold Miniforge's installer."""
        return stage.CONDA_INSTALLER

    @property
    def conda_installer_glob(self) -> str:
        """A COPY source that matches that folder, and nothing when it is absent."""
        return f"{stage.CONDA_INSTALLER[:-1]}[{stage.CONDA_INSTALLER[-1]}]"

    @property
    def conda_packages(self) -> str:
        """The context file listing the conda packages by hash, "" when the lock has none complete."""
        return conda_lock.EXPLICIT_FILE if self.conda_explicit else ""

    @property
    def conda_fetch(self) -> str:
        """The script that fetches and checks them (builder/templates/)."""
        return conda_lock.FETCH_SCRIPT

    @property
    def conda_secrets(self) -> str:
        """The script that refuses a conda layer holding the channel's credential (builder/templates/)."""
        return conda_lock.SECRETS_SCRIPT

    @property
    def allow_unverified(self) -> str:
        """The build arg that lets the steps the lock could not verify run."""
        return ALLOW_UNVERIFIED

    @property
    def toolkit_installers(self) -> Tuple[InstallerFile, ...]:
        """The toolkit: installed right after the OS, below the Python environment."""
        return tuple(f for f in self.installers if f.kind == "toolkit")

    @property
    def chip_installers(self) -> Tuple[InstallerFile, ...]:
        """The chip's package (and NNAL): installed above the Python closure, below torch_npu."""
        return tuple(f for f in self.installers if f.kind != "toolkit")

    @property
    def same_torch_npu_on_every_chip(self) -> bool:
        """Whether torch_npu's layer, above the chip's, is built to be the same bytes on every
        chip (see the template: mount points laid down below it, fixed file times in it)."""
        return bool(self.chip_installers) and any(i.step == "torch_npu" and i.verified for i in self.installs)

    @property
    def installed_dir(self) -> str:
        """Where each Python step records which file it installed (`builder.images.installed`)."""
        return vocabulary.INSTALLED_DIR

    @property
    def fixed_mtime(self) -> int:
        """The file time of what torch_npu's step writes (see FIXED_MTIME)."""
        return FIXED_MTIME

    @property
    def uv_file(self) -> str:
        return UV_FILE

    @property
    def unverified(self) -> Tuple[Install, ...]:
        return tuple(i for i in self.installs if not i.verified)

    def number(self, step: str) -> int:
        """The printed number of ``step``: consecutive in each variant."""
        return self.steps.index(step) + 1


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
    env: Dict[str, str] = {}
    for name, value in cann:
        if all(ref in env for ref in _REFERENCE.findall(value)):
            env[name] = _REFERENCE.sub(lambda m: env[m.group(1)], value)
        else:
            env.pop(name, None)
    env.update(own)
    env.update(requirement(cell))
    return env


def installer_files(f: CellFacts) -> Tuple[InstallerFile, ...]:
    """Toolkit first, then the chip's ops package, then NNAL when the cell asks for it, each with
    the sha256 that must match: the cell's own, else the knowledge base's, else the one the lock
    recorded on first fetch. A local folder supplies each package the knowledge base lacks."""
    given, recorded = dict(f.cell.sha256), dict(f.lock.installers if f.lock else ())
    known = {item.kind: item for item in f.installers}
    local = dict(f.local_packages)
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
    return tuple((k, _safe("text", v, k)) for k, v in pairs)


def requirement(cell: Cell) -> Tuple[Tuple[str, str], ...]:
    """What the driver guard checks, as ENV: the cell's minimum driver and firmware, in both
    images (the twin states its NPU image's, so the guard can be run where no NPU is).

    Example:
        >>> from types import SimpleNamespace as C
        >>> requirement(C(driver="25.0.RC1", firmware=None))
        (('ASCEND_REQUIRE_DRIVER', '25.0.RC1'), ('ASCEND_REQUIRE_FIRMWARE', ''))
    """
    return tuple((k, _safe("text", v, k)) for k, v in ((vocabulary.REQUIRE_DRIVER_ENV, cell.driver or ""),
                                                       (vocabulary.REQUIRE_FIRMWARE_ENV, cell.firmware or "")))


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

def _installs(f: CellFacts, variant: str) -> Tuple[Install, ...]:
    """The Python steps of ``variant``: the verified closure, then what the lock could not
    verify, then torch_npu (NPU image only). The twin's steps are the same minus torch_npu:
    the same closure.

    Without a usable lock (missing, or made from other inputs), every requirement is
    unverified and pip resolves: refused unless the build is asked.
    """
    npu = variant == vocabulary.NPU
    if f.state in ("missing", "stale"):
        lines = f.unlocked
        reason = f"The cell's lock is {f.state}: run `ascend-build lock`"
        is_npu = [python_env.name_of(line) == "torch-npu" for line in lines]
        others = tuple(line for line, own in zip(lines, is_npu) if not own)
        steps = [Install("unverified", LOCK_STEPS["unverified"], others, False, True, reason)]
        if npu and any(is_npu):
            steps.append(Install("torch_npu", LOCK_STEPS["torch_npu"], tuple(line for line, own in zip(lines, is_npu) if own),
                                 False, True, reason))
        return tuple(steps)
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
    if npu and tnpu is not None:
        steps.append(Install("torch_npu", LOCK_STEPS["torch_npu"], tnpu.lines, tnpu.complete, False, tnpu.note))
    return tuple(steps)


def _manifest(f: CellFacts, variant: str, words: _Words) -> Dict[str, object]:
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
        "env": _expand(cann_env(f) if npu else (), env_vars(cell, f.default_env), cell),
        "content_hash": f.digest,
        "lock": {"state": f.state, "file": vocabulary.LOCK if usable else None,
                 "distributions": {e.name: e.version for e in entries},
                 "unverified": sorted(e.name for e in entries if not e.complete),
                 **({"conda": {c.name: f"{c.version} {c.build}" for c in lock.conda.packages}}
                    if lock is not None and usable and cell.env == "conda" and lock.conda and lock.conda.complete else {})},
        **({"nnal": True} if npu and cell.nnal else {}),  # the libraries tier then requires libatb.so
        **({"stand_in": f.stand_in} if f.stand_in else {}),
    }


def _plan(f: CellFacts, variant: str, words: _Words) -> Plan:
    """Every fact of the Dockerfile of ``variant``, from the facts looked up once."""
    cell, os_info, npu = f.cell, f.os, variant == vocabulary.NPU
    conda = f.conda
    conda_sha = dict(cell.sha256).get(conda.filename, conda.sha256) if conda else ""
    from_image = npu and cell.cann_source == "image"
    base = cell.cann_image if from_image else (cell.base_image or os_info.image)
    python_steps = _installs(f, variant)
    usable = f.state in ("ok", "incomplete")
    verified = any(step.verified for step in python_steps)
    uv = f.uv if verified else ""
    if verified and not uv:
        raise UserError(f"no uv for {cell.arch} in builder/data/uv.yaml", fix="add its wheel's sha256 there")
    installers = installer_files(f) if npu and not from_image else ()
    python = tuple(i.step for i in python_steps)
    if any(i.kind != "toolkit" for i in installers):  # the chip's layers: right below torch_npu's, else last
        python = (*python[:-1], "chip", python[-1]) if python[-1:] == ("torch_npu",) else (*python, "chip")
    steps = ("os", *(("cann",) if npu else ()), "python", *python, "env", "files")
    return Plan(
        cell_id=cell.id, variant=variant, npu=npu, matrix_file=matrix_name(cell),
        dockerfile=words.dockerfile, base_image=_safe("image", base, "base image"),
        wheelhouse=stage.WHEELHOUSE, installers_folder=stage.INSTALLERS,
        os_family=os_info.family, os_codename=os_info.codename or "",
        apt_components=APT_COMPONENTS.get(re.sub(r"[0-9.]+$", "", cell.os), "main"),
        os_packages=(OS_PACKAGES if npu else OS_PACKAGES_CPU)[os_info.family],
        cann=cell.cann if npu else "", chip=cell.chip if npu else "", cann_source=cell.cann_source if npu else "",
        installers=installers,
        download_referer=_safe("url", f.download_referer, "download referer") if npu else "",
        cann_env=cann_env(f) if npu else (),
        python=cell.python, env_manager=cell.env, env_prefix=env_prefix(cell),
        conda_url=_safe("url", conda.url, "conda installer URL") if conda else "",
        conda_sha256=_safe("sha256", conda_sha, "conda sha256") if conda else "",
        conda_file=_safe("file", conda.filename, "conda installer file") if conda else "",
        conda_explicit=_conda_explicit(f) if conda else "",
        lock_state=f.state, installs=python_steps, torch_index=f.torch_index,
        torch_npu=cell.torch_npu if npu else "", uv=uv, env_vars=env_vars(cell, f.default_env),
        tool_dir=vocabulary.TOOL_DIR,
        shipped_files=tuple(n for n in vocabulary.SHIPPED_FILES if n != vocabulary.GUARD_FILE),
        manifest_file=words.manifest, manifest_path=vocabulary.MANIFEST,
        lock_file=locking.LOCK_FILE if usable else "", lock_path=vocabulary.LOCK,
        labels=_labels(cell, variant, f.digest, f.state, f.stand_in, words, f.cann_only),
        shipped_guard=vocabulary.GUARD_FILE, guard=vocabulary.GUARD, requirement=requirement(cell),
        steps=steps,
    )


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
    return _plan(f, variant, _variant_words(f, variant))


def manifest(cell: Cell, variant: str, digest: str, kb, lock: Optional[locking.Lock] = None,
             closure_of: Optional[Cell] = None) -> Dict[str, object]:
    """The run record of ``cell``'s image of ``variant`` (see `_manifest`)."""
    f = resolve_facts(cell, kb, lock, closure_of, digest)
    return _manifest(f, variant, _variant_words(f, variant))


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
    plans = {variant: _plan(f, variant, words[variant]) for variant in vocabulary.VARIANTS}
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
        plans=plans, manifests={variant: _manifest(f, variant, words[variant]) for variant in vocabulary.VARIANTS},
    )
