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

What goes in is decided by `builder.images.plan` (one `Plan` per cell and variant, its
Dockerfile as building blocks: `builder.images.blocks`); here the plans are only formatted,
and the knowledge base is asked nothing while formatting. Each image's labels and manifest
carry the content hash of the context (`content_hash`): the hash of the context's own
files, made with the hash's place left empty (see `_hashed`).

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
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Mapping, Optional, Set, Tuple

from builder import claims, knowledge, vocabulary, writes
from builder.images import blocks, conda_lock
from builder.images import lock as locking
from builder.images import plan as planning
from builder.images import stage
from builder.images.blocks.cann_installers import UNPACK_SCRIPT
from builder.images.facts import resolve_facts
from builder.images.matrix import Cell
from builder.errors import UserError

PACKAGE_DIR = Path(__file__).resolve().parent.parent
TEMPLATES = PACKAGE_DIR / "templates"
# The files every image carries beside the smoke program, from where they live here.
SMOKE_FILES = {name: (PACKAGE_DIR / name if name in ("versions.py", "vocabulary.py") else PACKAGE_DIR / "smoke" / name)
               for name in vocabulary.SHIPPED_FILES if name.endswith(".py")}
# Folders a cell's folder may hold beside the rendered files: the inputs of a build
# by hand (wheels, CANN installers). `render` neither writes nor reports them.
INPUT_FOLDERS = (stage.WHEELHOUSE, stage.INSTALLERS, stage.CONDA_INSTALLER)
# The scripts of TEMPLATES a context may carry as they are (`planning.Plan.scripts`).
SHIPPED_SCRIPTS = (UNPACK_SCRIPT, conda_lock.FETCH_SCRIPT, conda_lock.SECRETS_SCRIPT)



def content_hash(cell: Cell, lock: Optional[locking.Lock] = None, kb=None, closure_of: Optional[Cell] = None) -> str:
    """The content hash of ``cell``'s build context (see `resolve`): the label its images carry."""
    return resolve(cell, kb, lock, closure_of).content_hash


def _context_hash(drafted: Mapping[str, bytes], own_wheel: Optional[Tuple[str, str]],
                  shared: Mapping[str, Tuple[bytes, str]]) -> str:
    """The sha256 of a context's listing, one line per file, ``NAME SHA256``, sorted by name (what
    `sha256sum` prints), then the sha256 of the cell's own torch_npu wheel when it brings one
    (staged into the build, and named by no file of the context when the cell has no lock);
    16 hex digits. The files every context may share (``shared``: `_shared_digests`) are hashed
    once per process."""
    listing = []
    for name in sorted(drafted):
        data = drafted[name]
        known = shared.get(name)
        listing.append(f"{name} {known[1] if known is not None and known[0] is data else hashlib.sha256(data).hexdigest()}\n")
    if own_wheel:
        listing.append(f"torch_npu wheel {own_wheel[1]}\n")
    return hashlib.sha256("".join(listing).encode()).hexdigest()[:16]


@lru_cache(maxsize=1)
def _shared_digests() -> Dict[str, Tuple[bytes, str]]:
    """The files every context may share, as read once (`_smoke_files`, `_shipped`), with their sha256."""
    found = {**_smoke_files(), **{name: _shipped(name) for name in SHIPPED_SCRIPTS}}
    return {name: (data, hashlib.sha256(data).hexdigest()) for name, data in found.items()}


def _json(data: object) -> bytes:
    """``data`` as ``json.dumps(data, indent=2, sort_keys=True)`` writes it, and a newline.

    A manifest's top-level keys are written here, each value by json's C encoder when it is a
    string; a nested value (the environment, the lock, the pins) is written by json once per
    process for each distinct value (`_nested`): most cells share theirs with other cells, and
    json's indenting encoder is pure Python. Anything but a mapping with string keys goes to json.
    """
    if type(data) is not dict or not data or _types(data) != _STRINGS:
        return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()
    items = []
    for key in sorted(data):
        value = data[key]
        kind = type(value)
        if kind is str:
            text = _ENCODE(value)
        elif kind is dict or kind is list or kind is tuple:
            text = _nested(_frozen(value), value)
        elif value is None or kind is bool:
            text = _SCALARS[value]
        elif kind is int:
            text = int.__repr__(value)
        else:
            text = json.dumps(value)
        items.append(f"{_ENCODE(key)}: {text}")
    return ("{\n  " + ",\n  ".join(items) + "\n}\n").encode()


_ENCODE = json.encoder.encode_basestring_ascii  # the C encoder json.dumps uses for a string (ensure_ascii)
_NESTED: Dict[object, str] = {}  # a nested value's frozen form -> its JSON one level in (see `_nested`)


_SCALARS = {None: "null", True: "true", False: "false"}
_STRINGS = {str}


def _types(values: Iterable[object]) -> Set[type]:
    return set(map(type, values))


def _frozen(value: object) -> object:
    """A hashable form of a JSON value that tells apart what json writes apart (a dict from a
    list, True from 1, 1 from "1", 0.0 from -0.0)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        if _types(value) <= _STRINGS and _types(value.values()) <= _STRINGS:  # strings only: as they are
            return ("{", tuple(value.items()))
        return ("{", tuple((_frozen(key), _frozen(item)) for key, item in value.items()))
    if isinstance(value, (list, tuple)):
        return ("[", tuple(_frozen(item) for item in value))
    return (type(value).__name__, repr(value) if isinstance(value, float) else value)


def _nested(frozen: object, value: object) -> str:
    """``value`` as json writes it one level in (each line after the first indented two more)."""
    text = _NESTED.get(frozen)
    if text is None:
        text = json.dumps(value, indent=2, sort_keys=True).replace("\n", "\n  ")
        if len(_NESTED) > 4096:  # a bound on a long process's memory; the next ones are written again
            _NESTED.clear()
        _NESTED[frozen] = text
    return text


def dockerfile(p: planning.Plan) -> bytes:
    """The Dockerfile of ``p``: its blocks' fragments, in order."""
    return blocks.dockerfile(p.blocks).encode()


def resolve(cell: Cell, kb=None, lock: Optional[locking.Lock] = None,
            closure_of: Optional[Cell] = None) -> planning.CellPlan:
    """``cell`` resolved once: its facts (`facts.resolve_facts`, the one pass over the knowledge
    base), its plan (`plan.resolve`), and the content hash of its build context (`_hashed`)."""
    return resolve_context(cell, kb, lock, closure_of)[0]


def resolve_context(cell: Cell, kb=None, lock: Optional[locking.Lock] = None,
                    closure_of: Optional[Cell] = None) -> Tuple[planning.CellPlan, Dict[str, bytes]]:
    """`resolve`, and the files of the cell's build context: the very bytes its content hash
    names, which a build stages as they are (`prepare.Job.files`)."""
    unhashed, digest, stamped = _hashed(cell, kb, lock, closure_of)
    return unhashed.with_content_hash(digest), stamped


def _hashed(cell: Cell, kb, lock: Optional[locking.Lock],
            closure_of: Optional[Cell]) -> Tuple[planning.CellPlan, str, Dict[str, bytes]]:
    """``cell``'s plan made with its content hash left empty, the content hash, and the files of
    its context with the hash in place.

    The content hash is the hash of the build context itself (`_context_hash`), every file made
    with the hash's own place left empty (the content-hash label, the manifests' ``content_hash``):
    every byte that reaches a build counts (the cell's values, its lock, the knowledge base's
    answers, the smoke program, how the blocks format them), and nothing else does (a refactoring
    of the renderer that moves no byte leaves every hash alone). The hash then takes its place:
    in the plan, and in the files, where the empty value is replaced (`_stamped`; `files` of the
    plan makes the same bytes).
    """
    shared = _shared_digests()  # the shared inputs (the error table among them) read before the cell's facts
    unhashed = planning.resolve(resolve_facts(cell, kb or knowledge.load(), lock, closure_of, ""))
    drafted = files(unhashed)
    digest = _context_hash(drafted, cell.torch_npu_wheel, shared)
    return unhashed, digest, _stamped(drafted, unhashed, digest)


_EMPTY_LABEL = f'{vocabulary.Label.CONTENT_HASH}=""'.encode()
_EMPTY_KEY = b'"content_hash": ""'


def _stamped(drafted: Dict[str, bytes], unhashed: planning.CellPlan, digest: str) -> Dict[str, bytes]:
    """``drafted`` with ``digest`` where the content hash was left empty: in each Dockerfile, the
    label (in `blocks.ImageLabels`, the last block: its last such text), in each manifest the
    top-level key (keys are sorted, and any other ``content_hash`` key is nested in one after it)."""
    out = dict(drafted)
    label, key = f'{vocabulary.Label.CONTENT_HASH}="{digest}"'.encode(), f'"content_hash": "{digest}"'.encode()
    for p in unhashed.plans.values():
        head, _, tail = drafted[p.dockerfile].rpartition(_EMPTY_LABEL)
        out[p.dockerfile] = head + label + tail
        out[p.manifest_file] = drafted[p.manifest_file].replace(_EMPTY_KEY, key, 1)
    return out


def files(resolved: planning.CellPlan) -> Dict[str, bytes]:
    """Every file of a cell's build context, as bytes, keyed by file name: formatted from
    its plan alone. The lock's file is part of the context; without one the steps are unverified."""
    out: Dict[str, bytes] = {}
    for variant in vocabulary.VARIANTS:
        p = resolved.plans[variant]
        out[p.dockerfile] = dockerfile(p)
        out[p.manifest_file] = _json(resolved.manifests[variant])
        out.update({step.file: step.text for step in p.installs})
        if p.uv:
            out[planning.UV_FILE] = (p.uv + "\n").encode()
        if p.conda_explicit:
            out[conda_lock.EXPLICIT_FILE] = p.conda_explicit.encode()
        out.update({name: _shipped(name) for name in p.scripts})
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
    return _hashed(cell, kb, lock, closure_of)[2]


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
                    os.close(os.open(target, os.O_WRONLY | os.O_APPEND))  # writable? (opened and closed: nothing written)
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
