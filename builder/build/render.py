"""Render each cell into a self-contained build context: Dockerfile(s) plus context files.

``dockerfiles/<cell>/`` holds, byte-identical on every run:

* ``Dockerfile``           the NPU image (CANN + torch + torch_npu);
* ``Dockerfile.cpu``       its CPU twin: same OS, Python, torch and pins, no CANN/torch_npu;
* ``manifest.json`` / ``manifest.cpu.json``   the run record the smoke test checks against;
* ``environment.yml`` (conda) or ``requirements.txt`` (venv)   the environment spec;
* ``smoke.py``, ``versions.py`` and ``errors.json``   the smoke program that runs inside
  the image; every context holds them, so ``dockerfiles/`` keeps them once, in ``_shared/``.

All decisions live here, none in the template: which base image, which
installers, which index serves torch, which ENV CANN needs. Values from the
knowledge base are re-checked against strict patterns before they reach the
template, exactly like the matrix's own values.

Example:
    >>> files = render_cell(cell)                        # doctest: +SKIP
    >>> sorted(files)[:2]                                # doctest: +SKIP
    ['Dockerfile', 'Dockerfile.cpu']
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import jinja2

from builder.node import explain
from builder import knowledge, versions
from builder.errors import UserError
from builder.build.matrix import Cell

PACKAGE_DIR = Path(__file__).resolve().parent.parent
TEMPLATES = PACKAGE_DIR / "templates"
SMOKE_FILES = {"smoke.py": PACKAGE_DIR / "smoke" / "smoke.py", "versions.py": PACKAGE_DIR / "versions.py"}

# The PyTorch project's index of CPU-only torch wheels. x86_64 torch_npu up to
# 2.11 pins torch==X+cpu, which exists only there; later releases still want a
# CPU torch, not the multi-GB CUDA build PyPI serves for x86_64.
PYTORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"

# Field-guide defaults (section 2/3/5); a cell's env_vars override them by name.
DEFAULT_ENV = (
    ("ASCEND_GLOBAL_LOG_LEVEL", "3"),
    ("HCCL_CONNECT_TIMEOUT", "1800"),
    ("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:True"),
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

# Python packages CANN's operator compiler and tools import at run time (the
# official CANN images install the same list). Unpinned upstream; see README.
CANN_PYTHON_PACKAGES = ("attrs", "decorator", "sympy", "cffi", "pyyaml", "pathlib2", "psutil",
                        "protobuf", "scipy", "requests", "absl-py", "numpy")

_cann = lru_cache(maxsize=4096)(versions.cann)

_SAFE = {
    "url": re.compile(r"^https://[A-Za-z0-9._~:/?#@!&+,=%-]+$"),
    "sha256": re.compile(r"^[0-9a-f]{64}$"),
    "file": re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$"),
    "image": re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$"),
    "text": re.compile(r"^[A-Za-z0-9 _./:,=+@%()-]*$"),
    "env": re.compile(r"^[A-Za-z0-9_./:,=+@%-]*(\$\{PATH\})?$"),
}


def _safe(kind: str, value: str, what: str) -> str:
    """Refuse a knowledge-base value that could change a Dockerfile's structure."""
    if not _SAFE[kind].fullmatch(value or ""):
        raise UserError(f"refusing to render {what} = {value!r}: not a plain {kind}",
                        fix="correct builder/data/ (the knowledge base) or override the value in the matrix")
    return value


@dataclass(frozen=True)
class InstallerFile:
    filename: str
    url: str
    sha256: str
    run: str


def cann_home(cell: Cell) -> str:
    """Where CANN lives: ``ascend-toolkit/latest`` up to 8.3, ``cann-<ver>`` from 8.5 on."""
    if _cann(cell.cann) >= _cann("8.5.0-beta.1"):
        return f"/usr/local/Ascend/cann-{cell.cann}"
    return "/usr/local/Ascend/ascend-toolkit/latest"


def cann_env(cell: Cell) -> Tuple[Tuple[str, str], ...]:
    """CANN's ``set_env.sh`` written out as ENV, so non-interactive shells have it too."""
    home = cann_home(cell)
    driver = "/usr/local/Ascend/driver/lib64"
    return (
        ("ASCEND_TOOLKIT_HOME", home),
        ("ASCEND_HOME_PATH", home),
        ("ASCEND_AICPU_PATH", home),
        ("ASCEND_OPP_PATH", f"{home}/opp"),
        ("TOOLCHAIN_HOME", f"{home}/toolkit"),
        ("LD_LIBRARY_PATH", f"{home}/lib64:{home}/lib64/plugin/opskernel:{home}/lib64/plugin/nnengine:"
                            f"{home}/opp/built-in/op_impl/ai_core/tbe/op_tiling:{driver}:{driver}/common:{driver}/driver"),
        ("PYTHONPATH", f"{home}/python/site-packages:{home}/opp/built-in/op_impl/ai_core/tbe"),
        ("PATH", f"{home}/bin:{home}/compiler/ccec_compiler/bin:{home}/tools/ccec_compiler/bin:${{PATH}}"),
    )


def installer_files(cell: Cell, kb) -> List[InstallerFile]:
    """Toolkit first, then the chip's ops package, each with the sha256 that must match."""
    given = dict(cell.sha256)
    known = {item.kind: item for item in kb.installers(cell.cann, cell.chip, cell.arch)}
    local = ({"toolkit": kb.toolkit_package(cell.cann, cell.arch), "ops": kb.ops_package(cell.chip, cell.cann, cell.arch)}
             if cell.cann_source == "local" else {})
    files = []
    for kind in ("toolkit", "ops"):  # a local folder supplies each package the knowledge base lacks
        item = known.get(kind)
        if item is not None:
            sha = given.get(item.filename, item.sha256)
            files.append(InstallerFile(_safe("file", item.filename, "installer file"), _safe("url", item.url, "installer URL"),
                                       _safe("sha256", sha, f"sha256 of {item.filename}"), _safe("file", item.run, "installer")))
        elif kind in local:
            name = local[kind]
            if name not in given:
                raise UserError(f"no sha256 for {name}", fix=f"add sha256: {{{name}: HEX}} to the cell")
            files.append(InstallerFile(_safe("file", name, "installer file"), "", _safe("sha256", given[name], f"sha256 of {name}"),
                                       name))
    return files


def _env_prefix(cell: Cell) -> str:
    return "/opt/conda/envs/ascend" if cell.env == "conda" else "/opt/venv"


def _torch(cell: Cell, kb) -> Tuple[str, str]:
    """The torch requirement and the extra index that serves it."""
    requirement, _ = kb.torch_requirement(cell.torch_npu, cell.arch)
    if not requirement:
        requirement = f"torch=={cell.torch}"
    return requirement, (PYTORCH_CPU_INDEX if cell.arch == "x86_64" else "")


def manifest(cell: Cell, variant: str, digest: str) -> Dict[str, object]:
    """The run record of the field guide (section 7), describing what the image must contain."""
    npu = variant == "npu"
    return {
        "schema": 1,
        "framework": "pytorch",
        "cell": cell.id,
        "variant": variant,
        "image": cell.ref if npu else f"{cell.ref}-cpu",
        "os": cell.os,
        "arch": cell.arch,
        "chip": cell.chip if npu else None,
        "python_version": cell.python,
        "torch_version": cell.torch,
        "torch_npu_version": cell.torch_npu if npu else None,
        "cann_version": cell.cann if npu else None,
        "min_driver": cell.driver if npu else None,
        "min_firmware": cell.firmware if npu else None,
        "env_manager": cell.env,
        "pip": list(cell.pip),
        "env": _final_env(cell, npu),
        "content_hash": digest,
    }


def _final_env(cell: Cell, npu: bool) -> Dict[str, str]:
    """The ENV values the finished image has, as the Dockerfile sets them: CANN's first, then
    the cell's env_vars (written later, so they win). PATH is left out: the Python environment
    step prepends to it again, so CANN's ``...:${PATH}`` is never its final, literal value."""
    env = {k: v for k, v in (cann_env(cell) if npu else ()) if "${" not in v}
    env.update(_env_vars(cell))
    return env


def _env_vars(cell: Cell) -> Tuple[Tuple[str, str], ...]:
    merged = dict(DEFAULT_ENV)
    merged.update(dict(cell.env_vars))
    return tuple(sorted(merged.items()))


def _labels(cell: Cell, variant: str, digest: str) -> List[Tuple[str, str]]:
    npu = variant == "npu"
    labels = [
        ("org.opencontainers.image.title", f"{cell.image}:{cell.tag}{'' if npu else '-cpu'}"),
        ("org.opencontainers.image.description",
         f"PyTorch {cell.torch} + torch_npu {cell.torch_npu} on CANN {cell.cann} for {cell.chip}" if npu
         else f"CPU twin of {cell.id}: PyTorch {cell.torch} without CANN"),
        ("org.opencontainers.image.version", cell.tag if npu else f"{cell.tag}-cpu"),
        ("io.ascend-build.cell", cell.id),
        ("io.ascend-build.variant", variant),
        ("io.ascend-build.os", cell.os),
        ("io.ascend-build.arch", cell.arch),
        ("io.ascend-build.python", cell.python),
        ("io.ascend-build.torch", cell.torch),
        ("io.ascend-build.content-hash", digest),
    ]
    if npu:
        labels += [
            ("io.ascend-build.cann", cell.cann),
            ("io.ascend-build.chip", cell.chip),
            ("io.ascend-build.torch-npu", cell.torch_npu),
            ("io.ascend-build.min-driver", cell.driver),
            ("io.ascend-build.min-firmware", cell.firmware or ""),
        ]
    return [(k, _safe("text", v, k)) for k, v in labels]


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


@lru_cache(maxsize=1)
def _inputs_digest() -> str:
    """Hash of everything besides the cell that shapes a context: templates and the smoke program."""
    h = hashlib.sha256()
    for path in sorted(TEMPLATES.iterdir()) + [SMOKE_FILES[k] for k in sorted(SMOKE_FILES)] + [explain.ERRORS_FILE]:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def content_hash(cell: Cell) -> str:
    """A short hash of the cell's values plus the shared inputs: same hash, same image content.

    Mirrors are left out: they change where bytes come from, not which bytes.
    """
    # a shallow copy: dataclasses.asdict deep-copies every value and was most of render's time
    data = {f.name: getattr(cell, f.name) for f in fields(cell) if f.name not in ("where", "fields", "mirrors")}
    blob = json.dumps(data, sort_keys=True, default=str) + _inputs_digest()
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _json(data: object) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()


def env_spec(cell: Cell, kb, variant: str = "npu") -> Tuple[str, str, bytes]:
    """The environment spec of a variant: (file in the context, name in the image, content).

    The CPU twin's spec has every pin of the NPU image's except torch_npu.
    """
    torch_requirement, _ = _torch(cell, kb)
    npu_pin = [f"torch_npu=={cell.torch_npu}"] if variant == "npu" else []
    pins = [torch_requirement, *npu_pin, *cell.pip]
    infix = "" if variant == "npu" else ".cpu"
    if cell.env == "conda":
        lines = ["# Generated by ascend-build: the environment of this image.", "name: ascend",
                 "dependencies:", f"  - python={cell.python}", "  - pip", "  - pip:"]
        lines += [f"      - {p}" for p in pins]
        return f"environment{infix}.yml", "environment.yml", ("\n".join(lines) + "\n").encode()
    lines = ["# Generated by ascend-build: the environment of this image.", f"# python=={cell.python} (venv)", *pins]
    return f"requirements{infix}.txt", "requirements.txt", ("\n".join(lines) + "\n").encode()


def _matrix_name(cell: Cell) -> str:
    """The matrix file as the header names it: its folder and name (``matrix/default.yaml``).

    Only the last two parts, so the bytes are the same from any working directory,
    any checkout and any install of ascend-build (`render --check` compares them).
    """
    return _display_path(cell.where.file) if cell.where else "(matrix)"


@lru_cache(maxsize=64)
def _display_path(file: str) -> str:
    path = Path(os.path.abspath(file))
    return f"{path.parent.name}/{path.name}" if path.parent.name else path.name


def render_cell(cell: Cell, kb=None) -> Dict[str, bytes]:
    """Every file of a cell's build context, as bytes, keyed by file name."""
    kb = kb or knowledge.load()
    os_info = kb.os_info(cell.os)
    digest = content_hash(cell)
    torch_requirement, torch_index = _torch(cell, kb)
    conda = kb.conda_installer(cell.arch) if cell.env == "conda" else None
    conda_sha = dict(cell.sha256).get(conda.filename, conda.sha256) if conda else ""
    os_base = cell.base_image or os_info.image
    files: Dict[str, bytes] = {}
    for variant in ("npu", "cpu"):
        npu = variant == "npu"
        spec_file, spec_target, files[spec_file] = env_spec(cell, kb, variant)
        context = dict(
            matrix_file=_matrix_name(cell),
            cell_id=cell.id, variant=variant, cann=cell.cann, chip=cell.chip, python=cell.python,
            base_image=_safe("image", cell.cann_image if (npu and cell.cann_source == "image") else os_base, "base image"),
            os_family=os_info.family, os_codename=os_info.codename or "",
            apt_components=APT_COMPONENTS.get(re.sub(r"[0-9.]+$", "", cell.os), "main"),
            os_packages=(OS_PACKAGES if npu else OS_PACKAGES_CPU)[os_info.family],
            cann_source=cell.cann_source, installers=installer_files(cell, kb) if npu and cell.cann_source != "image" else [],
            cann_env=cann_env(cell) if npu else (),
            env_manager=cell.env, env_prefix=_env_prefix(cell),
            conda={"url": _safe("url", conda.url, "conda installer URL"), "sha256": _safe("sha256", conda_sha, "conda sha256")}
            if conda else {},
            torch_requirement=torch_requirement, torch_index=torch_index,
            torch_npu=cell.torch_npu if npu else "", torch_npu_requirement=f"torch_npu=={cell.torch_npu}",
            cann_python_packages=CANN_PYTHON_PACKAGES, extra_packages=cell.pip,
            env_vars=_env_vars(cell), labels=_labels(cell, variant, digest),
            manifest_file="manifest.json" if npu else "manifest.cpu.json", env_spec_file=spec_file,
            env_spec_target=spec_target,
        )
        text = _environment().get_template("Dockerfile.j2").render(**context)
        files["Dockerfile" if npu else "Dockerfile.cpu"] = text.encode()
        files[context["manifest_file"]] = _json(manifest(cell, variant, digest))
    files.update(_smoke_files())
    return files


@lru_cache(maxsize=1)
def _smoke_files() -> Dict[str, bytes]:
    """The smoke program and the error table it explains failures with (the one `explain`
    and `doctor` use), read once per process like `_inputs_digest`."""
    files = {name: path.read_bytes() for name, path in SMOKE_FILES.items()}
    files["errors.json"] = _json(explain.for_images())
    return files


def render_all(cells: List[Cell], kb=None) -> Dict[str, Dict[str, bytes]]:
    kb = kb or knowledge.load()
    return {cell.id: render_cell(cell, kb) for cell in cells}


# dockerfiles/ keeps one copy of what every context holds (the smoke program, its
# version module, the error table) in _shared/; `stage.context` lays out the full
# context from a fresh render, so a build never reads dockerfiles/ at all.
SHARED = "_shared"


def own_files(files: Dict[str, bytes]) -> Dict[str, bytes]:
    """A context's files without the ones every context shares: what ``dockerfiles/<cell>/`` holds."""
    shared = _smoke_files()
    return {name: data for name, data in files.items() if name not in shared}


def committed_tree(rendered: Dict[str, Dict[str, bytes]]) -> Dict[str, Dict[str, bytes]]:
    """The layout of ``dockerfiles/``: each cell's own files, and the shared ones once."""
    tree = {cell_id: own_files(files) for cell_id, files in rendered.items()}
    if rendered:
        first = next(iter(rendered.values()))
        tree[SHARED] = {name: first[name] for name in _smoke_files() if name in first}
    return tree


def _present(out: Path) -> set:
    return {p.name for p in out.iterdir() if p.is_dir()} if out.is_dir() else set()


def _differences(rendered: Dict[str, Dict[str, bytes]], out: Path) -> Iterator[Tuple[Path, str, Optional[bytes]]]:
    """(path, why, bytes to write or None to delete) for everything under ``out`` that
    differs from a fresh render; each existing file is read once."""
    rendered = committed_tree(rendered)
    for cell_id in sorted(_present(out) - set(rendered)):
        yield out / cell_id, "no longer in the matrix", None
    for cell_id, files in rendered.items():
        folder = out / cell_id
        present = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
        for name in sorted(present - set(files)):
            yield folder / name, "not rendered", None
        for name, data in sorted(files.items()):
            path = folder / name
            if name not in present:
                yield path, "missing", data
            elif path.read_bytes() != data:
                yield path, "differs", data


def stale(rendered: Dict[str, Dict[str, bytes]], out: Path) -> List[str]:
    """Paths under ``out`` that differ from a fresh render (missing, changed or left over)."""
    return [f"{path}{'/' if why == 'no longer in the matrix' else ''} ({why})"
            for path, why, _ in _differences(rendered, out)]


def write(rendered: Dict[str, Dict[str, bytes]], out: Path) -> List[str]:
    """Bring ``out`` in line with a fresh render; returns what `stale` would have reported."""
    changed = []
    for path, why, data in list(_differences(rendered, out)):
        changed.append(f"{path}{'/' if why == 'no longer in the matrix' else ''} ({why})")
        if data is None and path.is_dir():
            shutil.rmtree(path)
        elif data is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    return changed


def variant_files(variant: str) -> Tuple[str, str]:
    """(Dockerfile name, manifest name) of a variant."""
    return ("Dockerfile", "manifest.json") if variant == "npu" else ("Dockerfile.cpu", "manifest.cpu.json")
