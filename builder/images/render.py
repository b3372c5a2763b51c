"""Render each cell into a complete build context: Dockerfiles, manifests, lock steps, smoke program.

``dockerfiles/<cell>/`` holds, byte-identical on every run, everything a build needs
(docker-library style: each folder is a complete context, buildable by hand):

* the NPU image's Dockerfile and its CPU twin's (``vocabulary.dockerfile_name``): the
  twin has the same OS, Python, torch and pins, no CANN and no torch_npu;
* one manifest per variant (``vocabulary.manifest_name``): the run record the smoke
  test checks against;
* the cell's lock (``requirements.lock``, an input `ascend-build lock` writes) and the
  requirements file of each install step made from it (``plan.LOCK_STEPS``);
* ``vocabulary.SHIPPED_FILES``: the smoke program and the files it runs with.

What goes in is decided by `builder.images.plan` (one `Plan` per cell and variant); here
the plans are only formatted, and the knowledge base is asked nothing while formatting.

Example:
    >>> files = render_cell(cell)                                                    # doctest: +SKIP
    >>> {vocabulary.dockerfile_name(v) for v in vocabulary.VARIANTS} <= set(files)   # doctest: +SKIP
    True
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import stat
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Dict, Iterator, List, Mapping, Optional, Tuple

import jinja2

from builder import claims, knowledge, vocabulary, writes
from builder.images import conda_lock
from builder.images import lock as locking
from builder.images import plan as planning
from builder.images import stage
from builder.images.facts import resolve_facts
from builder.images.matrix import DERIVED, Cell
from builder.errors import UserError

PACKAGE_DIR = Path(__file__).resolve().parent.parent
TEMPLATES = PACKAGE_DIR / "templates"
UNPACK_SCRIPT = "unpack-cann.sh"  # shipped beside the Dockerfile of a cell whose CANN comes as signed bundles
# The files every image carries beside the smoke program, from where they live here.
SMOKE_FILES = {name: (PACKAGE_DIR / name if name in ("versions.py", "vocabulary.py") else PACKAGE_DIR / "smoke" / name)
               for name in vocabulary.SHIPPED_FILES if name.endswith(".py")}
# Folders a cell's folder may hold beside the rendered files: the inputs of a build
# by hand (wheels, CANN installers). `render` neither writes nor reports them.
INPUT_FOLDERS = (stage.WHEELHOUSE, stage.INSTALLERS, stage.CONDA_INSTALLER)



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
    templates = [path for path in sorted(TEMPLATES.iterdir()) if path.is_file()]  # not a __pycache__ folder
    for path in templates + [SMOKE_FILES[k] for k in sorted(SMOKE_FILES)] + [knowledge.ERRORS_FILE]:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def content_hash(cell: Cell, lock: Optional[locking.Lock] = None) -> str:
    """A short hash of the cell's values, its lock and the shared inputs (templates, smoke
    program, error table): what the build context is made of. A changed lock changes it,
    so `ci-matrix` rebuilds exactly the cells whose lock moved.

    Mirrors are left out: they change where bytes come from, not which bytes (so is the
    path of a cell's own torch_npu wheel: its sha256 stands for it).
    """
    # a shallow copy: dataclasses.asdict deep-copies every value and was most of render's time
    data = {f.name: getattr(cell, f.name) for f in fields(cell)
            if f.name not in ("where", "path", "fields", "mirrors", "torch_npu_wheel", *DERIVED)}
    if cell.torch_npu_wheel:  # its bytes, not where the file lies
        data["torch_npu_wheel"] = cell.torch_npu_wheel[1]
    blob = json.dumps(data, sort_keys=True, default=str) + _inputs_digest() + (lock.content if lock else "")
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _json(data: object) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()


@lru_cache(maxsize=1)
def _template() -> jinja2.Template:
    """The Dockerfile's template, compiled once per process: ``get_template`` would look at
    the file again on every call (a stat per Dockerfile, half of what formatting one cost)."""
    return _environment().get_template("Dockerfile.j2")


def dockerfile(p: planning.Plan) -> bytes:
    return _template().render(plan=p).encode()


def resolve(cell: Cell, kb=None, lock: Optional[locking.Lock] = None,
            closure_of: Optional[Cell] = None) -> planning.CellPlan:
    """``cell`` resolved once: its facts (`facts.resolve_facts`, the one pass over the knowledge
    base), with the content hash of what its context is made of, then its plan (`plan.resolve`)."""
    cell_facts = resolve_facts(cell, kb or knowledge.load(), lock, closure_of, content_hash(cell, lock))
    return planning.resolve(cell_facts)


def files(resolved: planning.CellPlan) -> Dict[str, bytes]:
    """Every file of a cell's build context, as bytes, keyed by file name: formatted from
    its plan alone. The lock's file is part of the context; without one the steps are unverified."""
    out: Dict[str, bytes] = {}
    for variant in vocabulary.VARIANTS:
        p = resolved.plans[variant]
        out[p.dockerfile] = dockerfile(p)
        out[p.manifest_file] = _json(resolved.manifests[variant])
        out.update({step.file: step.text() for step in p.installs})
        if p.uv:
            out[p.uv_file] = (p.uv + "\n").encode()
        if any(f.bundle for f in p.installers):
            out[UNPACK_SCRIPT] = _shipped(UNPACK_SCRIPT)
        if p.env_manager == "conda":
            out[p.conda_secrets] = _shipped(p.conda_secrets)
        if p.conda_packages:
            out[p.conda_packages] = p.conda_explicit.encode()
            out[p.conda_fetch] = _shipped(p.conda_fetch)
    if resolved.lock is not None:
        out[locking.LOCK_FILE] = resolved.lock.content.encode()
    out.update(_smoke_files())
    return out


@lru_cache(maxsize=None)
def _shipped(name: str) -> bytes:
    """A file of ``TEMPLATES`` shipped as it is (read once per process, not once per cell)."""
    return (TEMPLATES / name).read_bytes()


def render_cell(cell: Cell, kb=None, lock: Optional[locking.Lock] = None,
                closure_of: Optional[Cell] = None) -> Dict[str, bytes]:
    """Every file of a cell's build context (see `files`). ``lock`` is the cell's lock;
    ``closure_of``: the cell whose lock this is, when ``cell`` is a stand-in for it."""
    return files(resolve(cell, kb, lock, closure_of))


@lru_cache(maxsize=1)
def _smoke_files() -> Dict[str, bytes]:
    """The smoke program and the error table it explains failures with (the one `explain`
    and `doctor` use), read once per process like `_inputs_digest`."""
    files = {name: path.read_bytes() for name, path in SMOKE_FILES.items()}
    files["errors.json"] = _json([{k: e[k] for k in ("id", "patterns", "cause", "fix")} for e in knowledge.error_entries()])
    return files


def render_all(cells: List[Cell], kb=None, locks: Optional[Mapping[str, locking.Lock]] = None) -> Dict[str, Dict[str, bytes]]:
    """Every cell's files; ``locks`` by cell id (`locking.read_all`)."""
    kb = kb or knowledge.load()
    locks = locks or {}
    return {cell.id: render_cell(cell, kb, locks.get(cell.id)) for cell in cells}


GENERATED = b"# DO NOT EDIT: generated by ascend-build"  # how every rendered Dockerfile starts


def _is_cell_folder(path: Path) -> bool:
    """A folder render made: its Dockerfile starts with the do-not-edit header. Anything else
    in ``out`` (a user's folder, a file) is never reported, overwritten or removed."""
    try:
        with open(path / "Dockerfile", "rb") as fh:
            return path.is_dir() and not path.is_symlink() and fh.read(len(GENERATED)) == GENERATED
    except OSError:
        return False


def _present(out: Path) -> set:
    """The cell folders in ``out`` (a cell folder `write` staged and a kill left under its
    temporary name is none: the next write of that cell stages it afresh)."""
    return {p.name for p in out.iterdir() if not p.name.endswith(writes.TMP_SUFFIX) and _is_cell_folder(p)} \
        if out.is_dir() else set()


# What render writes in a cell folder, and so may remove when it no longer writes it. The lock
# is `lock`'s, and anything else (a user's notes, folders) is nobody's to remove: both stay.
_RENDERED_NAME = re.compile(r"Dockerfile(\.cpu)?|manifest(\.cpu)?\.json|lock\.[a-z_]+\.txt|uv\.txt|"
                            + "|".join(re.escape(n) for n in (*vocabulary.SHIPPED_FILES, UNPACK_SCRIPT, conda_lock.EXPLICIT_FILE,
                                                              conda_lock.FETCH_SCRIPT, conda_lock.SECRETS_SCRIPT))
                            # what a write killed before its rename left (render's, lock's)
                            + r"|\..+" + re.escape(writes.TMP_SUFFIX))


def _renders(path: Path) -> bool:
    """Whether ``path`` (in a cell folder) is a file render writes: render may remove it."""
    return bool(_RENDERED_NAME.fullmatch(path.name)) and path.is_file() and not path.is_symlink()


def _same(path: Path, data: bytes) -> bool:
    """Whether ``path`` holds exactly ``data``: read only when it is a regular file of that size
    (a FIFO, a device or a 4 GiB file is "different" without a read that would block or fill memory)."""
    try:
        st = path.lstat()
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_size != len(data):
        return False
    with open(path, "rb") as fh:
        return fh.read(len(data) + 1) == data


KEEP = b"\0keep"  # a change only reported: a file render did not write is never removed


def _differences(rendered: Dict[str, Dict[str, bytes]], out: Path) -> Iterator[Tuple[Path, str, Optional[bytes]]]:
    """(path, why, bytes to write, None to delete, or KEEP) for everything under ``out``
    that differs from a fresh render; each existing file is read once. Only what render
    writes is ever deleted: a file someone else put in a cell folder is reported, and kept."""
    for cell_id in sorted(_present(out) - set(rendered)):
        yield out / cell_id, "no longer in the matrix", None
    for cell_id, files in rendered.items():
        folder = out / cell_id
        present = {p.name for p in folder.iterdir() if not (p.name in INPUT_FOLDERS and p.is_dir())} \
            if folder.is_dir() else set()
        for name in sorted(present - set(files)):
            ours = _renders(folder / name)
            yield folder / name, "not rendered" if ours else "not rendered, not ascend-build's: kept", None if ours else KEEP
        for name, data in sorted(files.items()):
            path = folder / name
            if name not in present:
                yield path, "missing", data
            elif not _same(path, data):
                yield path, "differs", data


def _remove_cell(folder: Path) -> str:
    """Remove what render wrote in a cell folder gone from the matrix; the folder goes too
    when nothing else is left in it. Returns what was kept ("" when nothing)."""
    for path in folder.iterdir():
        if _renders(path):
            path.unlink()
    left = sorted(p.name for p in folder.iterdir())
    if not left:
        folder.rmdir()
        return ""
    return f"{folder}/ kept {', '.join(left)}: not written by render (a lock is `lock`'s; delete it yourself if the cell is gone for good)"


def _sweep(out: Path, ours: set) -> None:
    """Remove the cell folders a killed write left staged in ``out`` (``.<cell>.ascend-build-tmp``)
    other than ``ours``: the files render writes in them, then each folder if it is empty."""
    if not out.is_dir():
        return
    for folder in out.iterdir():
        if folder.name.startswith(".") and folder.name.endswith(writes.TMP_SUFFIX) and folder not in ours \
                and folder.is_dir() and not folder.is_symlink():
            _remove_cell(folder)


def _line(path: Path, why: str) -> str:
    return f"{path}{'/' if why == 'no longer in the matrix' else ''} ({why})"


def stale(rendered: Dict[str, Dict[str, bytes]], out: Path) -> List[str]:
    """Paths under ``out`` that differ from a fresh render (missing, changed or left over)."""
    return [_line(path, why) for path, why, _ in _differences(rendered, out)]


def _refuse(out: Path, rendered: Dict[str, Dict[str, bytes]], changes: List[Tuple[Path, str, Optional[bytes]]]) -> None:
    """Everything that would make a write unsafe, found before anything is written: a path
    below ``out`` that is a symlink (it would write outside ``out``), a cell path that is a
    file, an ``out`` that is no folder, and an empty matrix removing every cell's folder."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is not a folder", fix="pass a folder (it is created when missing)", exit_code=2)
    seen = {out}  # folders looked at already: a cell's folder is looked at once, not once per file
    for path, why, _ in changes:
        # a "missing" path was not in its folder's listing: no link there (its folder is checked)
        parts = [path.parent] if why == "missing" else [path, path.parent]
        for part in parts:
            while part not in seen:
                seen.add(part)
                if part.is_symlink():
                    raise UserError(f"{part} is a symlink: render writes only inside {out}, nothing was written",
                                    fix="replace the symlink with a folder or file of its own", exit_code=1)
                part = part.parent
    for cell_id in rendered:
        if (out / cell_id).exists() and not (out / cell_id).is_dir():
            raise UserError(f"{out / cell_id} is a file where cell {cell_id}'s folder goes; nothing was written",
                            fix="move the file away and render again", exit_code=1)
    for path, why, data in changes:
        if data is not None and data is not KEEP and why != "missing" and path.exists() and not path.is_file():
            raise UserError(f"{path} is not a regular file (a folder, a FIFO, a device) where render writes one; "
                            "nothing was written", fix="move it away and render again", exit_code=1)
    if not rendered and any(data is None for _, _, data in changes):
        raise UserError(f"the matrix has no cells: rendering it would remove every cell folder in {out} "
                        "(their locks with them); nothing was removed",
                        fix="check the matrix; to drop cells, remove them from a matrix that keeps others", exit_code=1)


def _make_folders(folder: Path) -> List[Path]:
    """Make ``folder`` and the folders above it that are missing; the ones made, outermost first."""
    missing = []
    while not os.path.lexists(folder):
        missing.append(folder)
        folder = folder.parent
    for one in reversed(missing):
        one.mkdir()
    return missing[::-1]


@contextlib.contextmanager
def claimed(out: Path) -> Iterator[None]:
    """``out`` for this run alone (`claims.claim` on the folder) while it reads and writes
    there: a second render or lock into it is refused, naming this one. ``out`` is made
    when missing, and removed again if the run fails and leaves it empty."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is not a folder", fix="pass a folder (it is created when missing)", exit_code=2)
    try:
        made = _make_folders(out)
    except OSError as exc:
        raise writes.write_error(exc, exc.filename or out, "nothing was written") from None
    try:
        with contextlib.ExitStack() as held:
            try:
                held.enter_context(claims.claim(out, f"writing into {out}", folder=True))
            except OSError as exc:  # e.g. a symlink to nothing
                raise writes.write_error(exc, out, "nothing was written") from None
            yield
    except BaseException:
        for folder in reversed(made):
            try:
                folder.rmdir()
            except OSError:
                pass
        raise


@dataclass(frozen=True)
class Written:
    """What `write` did. ``changed``: the paths it changed, as `stale` reports them; ``said``:
    what to say by name, in order: a cell folder removed, and what render left because it
    did not write it (a file in a cell folder, a removed cell's lock)."""

    changed: List[str]
    said: List[str]


def write(rendered: Dict[str, Dict[str, bytes]], out: Path) -> Written:
    """Bring ``out`` in line with a fresh render.

    Checked first (see `_refuse`), then in two steps: every new file is written beside its
    target under a temporary name, created exclusively (`writes.stage`), except that a cell
    folder that does not exist yet is written whole as a folder of its own under a temporary
    name (`writes.stage_folder`, `writes.stage_in`); every file to be replaced or removed is
    opened for writing (an immutable or read-only one fails here); then all the new files are
    flushed to disk at once (`writes.flush`: one flush per file system for the whole render,
    not one per file); only when all of that worked are the files, and the new folders, each
    in one step, renamed into place and the leftovers removed. A failure in the first step
    leaves ``out`` as it was (the staged files and folders and the folders made for them
    removed again); the second only renames and unlinks. A kill at any point leaves each path
    with its old bytes or its new ones (a new cell folder absent, or there with all its
    files), and so does a crash of the machine: nothing is renamed before its bytes are on
    disk. What a killed write left under a temporary name is replaced or removed by the next.
    """
    changes = list(_differences(rendered, out))
    _refuse(out, rendered, changes)
    staged: Dict[Path, Path] = {}  # target -> its new bytes under a temporary name
    made: List[Path] = []  # folders made for them, outermost first
    there: set = set()  # folders known to exist: each is looked up (or made) once
    # a cell folder that does not exist yet is staged whole and renamed into place in one step
    new_folders = {out / cell_id for cell_id in rendered if not os.path.lexists(out / cell_id)}
    folders: Dict[Path, Path] = {}  # new cell folder -> its staged folder
    path = out
    try:
        for path, why, data in changes:
            if data is KEEP:
                continue
            targets = [p for p in path.iterdir() if _renders(p)] if data is None and path.is_dir() else [path]
            for target in targets:
                if why != "missing" and target.exists():
                    os.close(os.open(target, os.O_WRONLY | os.O_APPEND))  # writable? (changes nothing)
            if data is not None and path.parent in new_folders:
                if path.parent not in folders:
                    if out not in there:
                        made += _make_folders(out)
                        there.add(out)
                    folders[path.parent] = writes.stage_folder(path.parent)
                staged[path] = writes.stage_in(folders[path.parent], path.name, data)
            elif data is not None:
                if path.parent not in there:
                    made += _make_folders(path.parent)
                    there.add(path.parent)
                staged[path] = writes.stage(path, data, sync=False)
        writes.flush([*staged.values(), *folders.values()])  # every new byte on disk before any name points at it
    except OSError as exc:
        for tmp in staged.values():
            tmp.unlink(missing_ok=True)
        for tmp in folders.values():
            shutil.rmtree(tmp, ignore_errors=True)
        for folder in reversed(made):
            try:
                folder.rmdir()  # empty again, its staged files gone (unless someone else wrote there)
            except OSError:
                pass
        raise writes.write_error(exc, exc.filename or path, "nothing was changed") from None
    written = Written([], [])
    temporary = set(staged.values())
    moved: set = set()  # the staged cell folders renamed into place
    try:
        for path, why, data in changes:
            line = _line(path, why)
            if data is KEEP:
                written.said.append(line)
                continue
            written.changed.append(line)
            if data is None and path.is_dir():
                written.said.append(line)
                kept = _remove_cell(path)
                if kept:
                    written.said.append(kept)
            elif data is None:
                if path not in temporary:  # a killed run's staged file: staged afresh above
                    path.unlink()
            elif path.parent in folders:
                if path.parent not in moved:  # its folder's first file: the folder, whole
                    os.replace(folders[path.parent], path.parent)  # never onto a link or a folder with files
                    moved.add(path.parent)
            else:
                os.replace(staged[path], path)
        _sweep(out, set(folders.values()))
    except OSError as exc:
        raise writes.write_error(exc, exc.filename or out, "the files before it were renamed into place, "
                                "the ones after it not: run render again") from None
    return written
