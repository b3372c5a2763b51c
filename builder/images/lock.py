"""A cell's whole Python closure, resolved once, every distribution with its sha256: the lock.

Why: an image is only "validated" if what the smoke test ran is what ships. Without a
lock, every build resolves again (numpy 2 arrives one day and CANN 7 breaks). With it,
images install the lock and nothing else (``--require-hashes --no-deps``), the CPU twin
installs the same closure minus torch_npu, and the smoke program checks that what is
installed equals the lock.

`resolve` hands the cell's requirements to uv (``uv pip compile --python-platform
--python-version --generate-hashes``), a kept resolver that resolves for another
platform without installing anything; nothing here resolves by itself. The lock is
written to ``dockerfiles/<cell>/requirements.lock``: a pip requirements file (pip and
uv can install it as it is) whose header says what it was made from (`Inputs.digest`,
so a changed cell makes it stale), for which target, how many entries it holds and their
sha256 (so a lock cut short, even between two entries, is refused as damaged), and what is
**incomplete** and why. An entry without hashes is incomplete: its source could not be reached where the
lock was made (the PyTorch CPU index serves x86_64's ``torch==X+cpu``); the build
refuses it unless asked (``--allow-incomplete-lock``), and a lock made where the source
is reachable completes it.

Example:
    >>> lock = Lock.parse(SAMPLE)
    >>> lock.entry("numpy").version, lock.complete, [e.name for e in lock.incomplete]
    ('1.26.4', False, ['torch'])
    >>> Lock.parse(lock.text()) == lock
    True
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from packaging.utils import canonicalize_name, parse_wheel_filename

from builder import bounded, commands, python_env
from builder.images import conda_lock, own_wheel
from builder.errors import UserError

LOCK_FILE = "requirements.lock"
SCHEMA = 1
# Where uv resolves for a platform: the manylinux tags it knows (uv --python-platform).
_MANYLINUX = (17, 28, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40)
# What a CPU build of torch leaves out of PyPI's (CUDA) torch of the same version.
_CUDA_ONLY = re.compile(r"^(nvidia-.*|triton|pytorch-triton|cuda-.*)$")
# Of those, the ones that are also packages of their own a cell may pin on purpose.
_CUDA_DEPENDENCY = frozenset({"triton", "pytorch-triton"})
_HEADER = re.compile(r"^# ([a-z-]+): (.*)$")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)\s*(\\)?\s*$")
_HASH = re.compile(r"^\s+--hash=sha256:([0-9a-f]{64})\s*(\\)?\s*$")
REACH_TIMEOUT = 10.0
PAGE_DEADLINE = 300.0  # a torch index page is a few MB: it comes whole well within this


@dataclass(frozen=True)
class Inputs:
    """What a lock is made from. Its digest is written into the lock: a lock whose digest
    differs from the cell's current inputs is stale.

    ``requirements`` are what the image must hold (CANN's Python packages, torch as
    torch_npu pins it, torch_npu, the cell's extra pins, pip itself); ``constraints``
    bound versions without requiring them (CANN's own limits, e.g. numpy<2).
    """

    cell: str
    python: str                    # X.Y
    platform: str                  # uv's --python-platform, e.g. x86_64-manylinux_2_35
    requirements: Tuple[str, ...]
    constraints: Tuple[str, ...]
    torch_index: str               # where torch==X+cpu is served; "" when PyPI serves torch
    own_wheels: Tuple[Tuple[str, str], ...] = ()   # (path, sha256): wheels the cell brings (torch_npu's)
    conda: Tuple[str, ...] = ()    # what a conda cell asks of conda (conda_lock.specs); () for a venv
    conda_channel: str = ""        # the channel they are solved against, without credentials (conda_lock.public)
    # who asks for each requirement and constraint (not part of the digest: it names, it does not decide)
    asked_by: Tuple[Tuple[str, str], ...] = field(default=(), compare=False)

    @property
    def digest(self) -> str:
        data = {"schema": SCHEMA, "python": self.python, "platform": self.platform,
                "requirements": sorted(self.requirements), "constraints": sorted(self.constraints),
                "torch_index": self.torch_index}
        if self.own_wheels:  # their bytes, not where they lie (and no key at all without them)
            data["own_wheels"] = sorted(sha256 for _, sha256 in self.own_wheels)
        if self.conda:  # a conda cell's lock holds its conda part too (and a venv cell's digest is unchanged)
            data["conda"] = {"specs": sorted(self.conda), "channel": self.conda_channel}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Entry:
    """One locked distribution: name (canonical), exact version, the sha256 of its files
    (empty when incomplete, with the reason in ``note``)."""

    name: str
    version: str
    hashes: Tuple[str, ...] = ()
    note: str = ""

    @property
    def complete(self) -> bool:
        return bool(self.hashes)

    def lines(self) -> List[str]:
        """As pip reads it: ``name==version`` with one ``--hash`` line per file."""
        if not self.hashes:
            return [f"{self.name}=={self.version}"]
        return [f"{self.name}=={self.version} \\"] + [
            f"    --hash=sha256:{h}" + (" \\" if i < len(self.hashes) - 1 else "") for i, h in enumerate(self.hashes)]


@dataclass(frozen=True)
class Lock:
    """A cell's locked closure; `text` and `parse` are each other's inverse.

    ``content`` is that text, formatted once when the lock is made: the build context's
    content hash and the lock file both read it (an attribute, nothing formatted again)."""

    cell: str
    inputs: str                    # Inputs.digest it was made from
    target: str                    # python X.Y on a platform, in words
    resolver: str                  # e.g. "uv 0.13.9"
    entries: Tuple[Entry, ...]
    unpinned: Tuple[str, ...] = ()  # what could not be pinned, and why (e.g. conda's python)
    installers: Tuple[Tuple[str, str], ...] = ()  # (file, sha256) of CANN installers recorded on first fetch
    conda: Optional[conda_lock.Part] = None       # a conda cell's conda environment (None for a venv cell)
    content: str = field(init=False, repr=False, compare=False)  # text(), formatted once

    def __post_init__(self) -> None:
        object.__setattr__(self, "content", self._format())

    def installer_sha256(self, filename: str) -> Optional[str]:
        """The sha256 recorded for a CANN installer the knowledge base has none for."""
        return dict(self.installers).get(filename)

    def entry(self, name: str) -> Optional[Entry]:
        key = canonicalize_name(name)
        return next((e for e in self.entries if e.name == key), None)

    @property
    def incomplete(self) -> Tuple[Entry, ...]:
        return tuple(e for e in self.entries if not e.complete)

    @property
    def complete(self) -> bool:
        return self.complete_but_conda and (self.conda is None or self.conda.complete)

    @property
    def complete_but_conda(self) -> bool:
        """Whether every pip entry has its sha256 (the conda part left aside)."""
        return not self.incomplete

    def text(self) -> str:
        """The lock file's text (``content``)."""
        return self.content

    def _format(self) -> str:
        head = [f"# ascend-build lock of cell {self.cell}: written by `ascend-build lock`, do not edit.",
                f"# inputs: {self.inputs}", f"# target: {self.target}", f"# resolver: {self.resolver}",
                f"# entries: {_entries_seal(self.entries)}"]
        head += [f"# unpinned: {u}" for u in self.unpinned]
        head += [f"# installer: {name} sha256:{sha}" for name, sha in sorted(self.installers)]
        head += [f"# incomplete: {e.name}=={e.version}: {e.note}" for e in self.incomplete]
        head += self.conda.lines() if self.conda is not None else []
        body = [line for e in self.entries for line in e.lines()]
        return "\n".join(head + body) + "\n"

    @classmethod
    def parse(cls, text: str, where: str = "lock") -> "Lock":
        """Read a lock's text; UserError naming ``where`` and the line when it is no lock."""
        meta: Dict[str, List[str]] = {}
        entries: List[Entry] = []
        name: Optional[str] = None
        version = ""  # the pin's, once there is a name
        hashes: List[str] = []
        for number, line in enumerate(text.splitlines(), 1):
            header, pin, digest = _HEADER.match(line), _PIN.match(line), _HASH.match(line)
            if header:
                meta.setdefault(header.group(1), []).append(header.group(2))
            elif pin:
                if name:
                    entries.append(Entry(name, version, tuple(hashes)))
                name, version, hashes = str(canonicalize_name(pin.group(1))), pin.group(2), []
            elif digest and name:
                hashes.append(digest.group(1))
            elif line.strip() and not line.startswith("#"):
                raise UserError(f"{where}:{number}: not a line of an ascend-build lock: {line.strip()[:80]!r}",
                                fix=f"run {commands.suggest('lock')} to write it again")
        if name:
            entries.append(Entry(name, version, tuple(hashes)))
        if not meta.get("inputs"):
            raise UserError(f"{where}: no '# inputs:' line: not written by `ascend-build lock`",
                            fix=f"run {commands.suggest('lock')} to write it again")
        sealed, held = next(iter(meta.get("entries", [])), None), _entries_seal(entries)
        if sealed is None and not entries:  # cut before its "# entries:" line: every lock pins pip at least
            raise UserError(f"{where}: damaged: no '# entries:' line and no entry: it was cut short",
                            fix=f"restore it from version control, or run {commands.suggest('lock')} to write it again",
                            exit_code=1)
        if sealed is not None and sealed != held:  # cut short (on an entry boundary too) or edited
            raise UserError(f"{where}: damaged: its header says {sealed.split(' sha256:')[0]} entries "
                            f"({sealed.rpartition(':')[2][:12]}...), the file holds {len(entries)} "
                            f"({held.rpartition(':')[2][:12]}...): it was cut short or edited",
                            fix=f"restore it from version control, or run {commands.suggest('lock')} to write it again",
                            exit_code=1)
        notes = dict(_incomplete_note(n) for n in meta.get("incomplete", []))
        entries = [replace(e, note=notes.get(e.name, "")) if not e.complete else e for e in entries]
        first = text.split("\n", 1)[0]  # "# ascend-build lock of cell <id>: ..."
        cell = first.split(" of cell ", 1)[1].split(":", 1)[0] if " of cell " in first else ""
        conda = (conda_lock.Part.parse(meta.get("conda-channel", []), meta.get("conda", []),
                                       meta.get("conda-incomplete", []), where)
                 if any(k in meta for k in ("conda-channel", "conda", "conda-incomplete")) else None)
        return cls(cell=cell, inputs=meta["inputs"][0], target=(meta.get("target") or [""])[0],
                   resolver=(meta.get("resolver") or [""])[0], entries=tuple(entries),
                   unpinned=tuple(meta.get("unpinned", [])), installers=tuple(sorted(
                       _installer_line(line, where) for line in meta.get("installer", []))), conda=conda)

    def without(self, *names: str) -> Tuple[Entry, ...]:
        """The entries but ``names``: the twin's closure is the lock without torch_npu."""
        drop = {canonicalize_name(n) for n in names}
        return tuple(e for e in self.entries if e.name not in drop)


def _entries_seal(entries: Sequence[Entry]) -> str:
    """``N sha256:<hex>``: how many entries a lock holds and the sha256 of their lines, written in
    its header so that a lock cut short, even between two entries, is told from a whole one (a
    lock written before this line existed has none, and is read as it is)."""
    body = "\n".join(line for e in entries for line in e.lines())
    return f"{len(entries)} sha256:{hashlib.sha256(body.encode()).hexdigest()}"


def _installer_line(text: str, where: str) -> Tuple[str, str]:
    match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._+-]*) sha256:([0-9a-f]{64})", text.strip())
    if not match:
        raise UserError(f"{where}: not an installer line of an ascend-build lock: {text[:80]!r}",
                        fix=f"run {commands.suggest('lock')} to write it again")
    return match.group(1), match.group(2)


def _incomplete_note(text: str) -> Tuple[str, str]:
    pin, _, note = text.partition(": ")
    return str(canonicalize_name(pin.split("==")[0])), note


MAX_LOCK_BYTES = 16 << 20  # a lock of a thousand distributions is a few hundred KB


def read(folder: Path) -> Optional[Lock]:
    """The lock in ``folder`` (a cell's folder of dockerfiles/), None when there is none; a
    file too large to be a lock, not UTF-8 text, or no regular file (a FIFO is not waited on,
    a folder or a device is no missing lock either) is refused naming it."""
    path = Path(folder) / LOCK_FILE
    def fix() -> str:  # only a refusal says it
        return f"run {commands.suggest('lock')} to make it again (or restore it from version control)"

    try:
        size = path.stat().st_size
        data = bounded.read_file(path, MAX_LOCK_BYTES + 1)  # no further: it may have grown since the stat
    except (FileNotFoundError, NotADirectoryError):  # none, a link to nothing, or no cell folder there
        return None
    except bounded.NotRegular:
        raise UserError(f"{path} is not a regular file (a FIFO, a device or a folder): not a lock", fix=fix(),
                        exit_code=1) from None
    except OSError as exc:
        raise UserError(f"{path} cannot be read ({exc.strerror or exc})", fix=fix(), exit_code=1) from None
    if len(data) > MAX_LOCK_BYTES:
        raise UserError(f"{path} has {max(size, len(data))} bytes: no lock is that large", fix=fix(), exit_code=1)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path} is not UTF-8 text (byte {exc.start}): not a lock", fix=fix(), exit_code=1) from None
    return Lock.parse(text, where=str(path))


def read_all(folder: Path, cell_ids: Iterable[str]) -> Dict[str, Lock]:
    """The locks of those cells found in ``folder`` (dockerfiles/), by cell id."""
    found = {}
    for cell_id in cell_ids:
        lock = read(Path(folder) / cell_id)
        if lock is not None:
            found[cell_id] = lock
    return found


@dataclass(frozen=True)
class Locked:
    """One distribution of the lock as the plan installs it (an `Entry`, read once: `locked`)."""

    name: str                  # canonical
    version: str
    lines: Tuple[str, ...]     # its requirement lines, with their hashes
    complete: bool             # every file has its sha256
    note: str                  # why not, when not


def locked(lock: Optional[Lock], inputs: Inputs, conda: bool = True) -> Tuple[str, Tuple[Locked, ...]]:
    """The lock's state for ``inputs`` (`status`; without its conda part when not ``conda``)
    and its distributions as `Locked` records, in its order (() without a lock).

    Example:
        >>> locked(None, inputs)                                         # doctest: +SKIP
        ('missing', ())
    """
    if lock is None:
        return "missing", ()
    state = status(lock, inputs, conda=conda)
    return state, tuple(Locked(e.name, e.version, tuple(e.lines()), e.complete, e.note) for e in lock.entries)


def status(lock: Optional[Lock], inputs: Inputs, conda: bool = True) -> str:
    """``ok``, ``missing``, ``stale`` (made from other inputs) or ``incomplete`` (its conda
    part left aside when not ``conda``)."""
    if lock is None:
        return "missing"
    if lock.inputs != inputs.digest:
        return "stale"
    return "ok" if (lock.complete if conda else lock.complete_but_conda) else "incomplete"


def python_platform(arch: str, glibc: Tuple[int, int]) -> str:
    """uv's platform for an OS: the newest manylinux tag its glibc runs.

    Example:
        >>> python_platform("x86_64", (2, 35)), python_platform("aarch64", (2, 27))
        ('x86_64-manylinux_2_35', 'aarch64-manylinux_2_17')
    """
    minor = max(m for m in _MANYLINUX if m <= glibc[1]) if glibc[0] == 2 and glibc[1] >= 17 else 17
    return f"{arch}-manylinux_2_{minor}"


# ---------------------------------------------------------------------------------------
# resolving


@functools.lru_cache(maxsize=1)
def _uv_binary() -> str:
    try:
        from uv import find_uv_bin  # the PyPI package ships the binary

        return find_uv_bin()
    except (ImportError, FileNotFoundError, TypeError):  # TypeError: sysconfig not ready in a thread
        return shutil.which("uv") or ""


def uv_command() -> List[str]:
    """The uv binary: the `uv` package's, else one on PATH (found once per process, before
    any thread needs it: the package's finder reads sysconfig, which is not thread-safe)."""
    found = _uv_binary()
    if not found:
        raise UserError("uv is not installed: `ascend-build lock` resolves with it",
                        fix="pip install uv (it comes with ascend-build's dependencies)")
    return [found]


def _uv_version(uv: List[str]) -> str:
    out = subprocess.run(uv + ["--version"], capture_output=True, text=True, timeout=30)
    return " ".join(out.stdout.split()[:2]) or "uv"


def reachable(url: str, timeout: float = REACH_TIMEOUT) -> bool:
    """Whether an index page answers at all (any HTTP answer below 500 counts)."""
    try:
        with bounded.opened(urllib.request.Request(url, method="GET"), timeout=timeout,
                            deadline=time.monotonic() + timeout) as r:
            return r.status < 500
    except urllib.error.HTTPError as exc:
        return exc.code < 500
    except (OSError, ValueError, bounded.Cut):
        return False


def local_wheels(folder: Optional[Path], name: str, version: str) -> List[Path]:
    """Wheels of ``name==version`` (local label included) in a wheelhouse folder."""
    if not folder or not Path(folder).is_dir():
        return []
    found = []
    for path in sorted(Path(folder).glob("*.whl")):
        try:
            wheel_name, wheel_version, _, _ = parse_wheel_filename(path.name)
        except ValueError:
            continue
        if wheel_name == canonicalize_name(name) and str(wheel_version) == version:
            found.append(path)
    return found


_ANCHOR = re.compile(r"""<a\s[^>]*href=["']([^"'#]+)#sha256=([0-9a-f]{64})["']""", re.IGNORECASE)


def page_hashes(page: str, name: str, version: str, python: str, arch: str, *, timeout: float = 60.0,
                deadline: float = PAGE_DEADLINE, max_bytes: int = 8 << 20) -> Tuple[str, ...]:
    """The sha256 a simple-index project page gives for the wheels of ``name==version``
    that run on CPython ``python`` (X.Y) and ``arch`` (read from its ``#sha256=`` links; of a
    page longer than ``max_bytes``, its first ``max_bytes``)."""
    got, until = bytearray(), time.monotonic() + deadline
    try:
        with bounded.opened(page, timeout=timeout, deadline=until) as answer:
            for chunk in bounded.chunks(answer, limit=max_bytes + bounded.CHUNK, deadline=until):
                got += chunk
                if len(got) >= max_bytes:
                    break
    except (OSError, ValueError, bounded.Cut):
        return ()
    html = bytes(got[:max_bytes]).decode("utf-8", errors="replace")
    wanted = "cp" + python.replace(".", "")
    found = []
    for href, digest in _ANCHOR.findall(html):
        filename = urllib.request.url2pathname(href.rsplit("/", 1)[-1])
        try:
            wheel_name, wheel_version, _, tags = parse_wheel_filename(urllib.parse.unquote(filename))
        except ValueError:
            continue
        if (wheel_name == canonicalize_name(name) and str(wheel_version) == version
                and any(t.interpreter == wanted and arch in t.platform for t in tags)):
            found.append(digest)
    return tuple(sorted(set(found)))


def _parse_uv(text: str) -> List[Entry]:
    """uv's output (``--no-header --no-annotate --generate-hashes``) -> entries."""
    return list(Lock.parse("# inputs: -\n" + text, where="uv output").entries)


def _compile(uv: List[str], inputs: Inputs, requirements: Sequence[str], overrides: Sequence[str],
             find_links: Sequence[str], index_url: Optional[str], previous: Optional[Lock],
             run: Callable = subprocess.run) -> List[Entry]:
    with tempfile.TemporaryDirectory(prefix="ascend-build-lock-") as tmp:
        folder = Path(tmp)  # a private folder made for this call: its files are written plainly (no writes.*)
        (folder / "requirements.in").write_text("\n".join(requirements) + "\n")
        (folder / "constraints.txt").write_text("\n".join(inputs.constraints) + "\n")
        (folder / "overrides.txt").write_text("\n".join(overrides) + "\n")
        out = folder / "requirements.txt"
        # uv keeps the versions of an existing output file where they still fit: a lock
        # made again moves only what must move.
        out.write_text("".join(f"{e.name}=={e.version}\n" for e in (previous.entries if previous else ())))
        argv = uv + ["pip", "compile", str(folder / "requirements.in"), "-c", str(folder / "constraints.txt"),
                     "--override", str(folder / "overrides.txt"), "-o", str(out),
                     "--python-version", inputs.python, "--python-platform", inputs.platform,
                     "--generate-hashes", "--no-header", "--no-annotate", "--quiet", "--no-progress",
                     # With a cache, uv unpacks the wheelhouse's torch (700 MB) into it again
                     # and again, never reclaimed: 37 copies, 26 GB, after a day of test runs
                     # here. It bought no speed: the shipped matrix locked in 58.7 s with a warm
                     # cache and 56.3 s with an empty one (bench_lock, before this flag).
                     "--no-cache",
                     # Nor may it touch uv's managed Pythons (~/.local/share/uv/python): the resolution
                     # needs no interpreter (--python-version), and lock writes nothing outside the project.
                     "--no-python-downloads"]
        for link in find_links:
            argv += ["--find-links", link]
        if index_url:
            argv += ["--index-url", index_url]
        waiting_on = f"uv resolving cell {inputs.cell}"
        try:
            result = run(argv, capture_output=True, text=True, timeout=bounded.remaining(900, waiting_on))
        except subprocess.TimeoutExpired:
            bounded.check_deadline(waiting_on)  # the command's deadline came first: say that
            raise UserError(f"uv did not resolve cell {inputs.cell} within 15 minutes", exit_code=1,
                            fix=f"check the network to the package index, then run {commands.suggest('lock', cell=inputs.cell)} again") from None
        if result.returncode != 0:
            said = (result.stderr or result.stdout).strip()
            tail = "\n  ".join(said.splitlines()[-12:])
            who = conflict(inputs, said)
            raise UserError(f"uv could not resolve cell {inputs.cell} for {inputs.platform}, Python {inputs.python}:\n  {tail}"
                            + ("\n  the requirements on the packages uv names, and who asks for each:\n    "
                               + "\n    ".join(who) if who else ""),
                            exit_code=1, fix="change or drop the pin the cell asks for, or pick the torch_npu or CANN "
                                             "whose requirements admit it (`ascend-build validate` names what each "
                                             "release declares)")
        return _parse_uv(out.read_text())


def conflict(inputs: Inputs, said: str) -> List[str]:
    """Every requirement and constraint of the inputs on a package uv's message names, with who asks
    for it (``inputs.asked_by``), in the order they were asked.

    Example:
        >>> made = Inputs("c", "3.11", "x86_64-manylinux_2_35", ("torch-npu==2.9.0", "torch==2.9.1"), ("numpy<2",), "",
        ...               asked_by=(("torch==2.9.1", "the cell's pip:"), ("torch-npu==2.9.0", "the cell's torch_npu")))
        >>> print("; ".join(conflict(made, "Because torch-npu==2.9.0 depends on torch==2.9.0 and you require torch==2.9.1")))
        torch-npu==2.9.0 (the cell's torch_npu); torch==2.9.1 (the cell's pip:)
    """
    mentioned = {canonicalize_name(w) for w in re.findall(r"[A-Za-z0-9][A-Za-z0-9._-]*", said)}
    who = dict(inputs.asked_by)
    out = []
    for text in (*inputs.requirements, *inputs.constraints):
        name = re.split(r"[\s\[<>=!~;@(]", text.strip(), maxsplit=1)[0]
        if name and canonicalize_name(name) in mentioned:
            out.append(f"{text} ({who[text]})" if text in who else text)
    return list(dict.fromkeys(out))


def resolve(inputs: Inputs, **options) -> Lock:
    """Resolve ``inputs`` into a lock; nothing is installed or built (`_resolve` says how).

    A wheel the cell brings (``inputs.own_wheels``) is checked against its sha256, offered
    to uv from a folder of its own, and locked with exactly that sha256: no other file
    of that name and version can be installed in its place.
    """
    if not inputs.own_wheels:
        return _resolve(inputs, **options)
    with tempfile.TemporaryDirectory(prefix="ascend-build-own-wheels-") as folder:
        own: Dict[str, str] = {}  # canonical name: sha256
        for path, sha256 in inputs.own_wheels:
            source = own_wheel.verified(path, sha256, downloads=Path(folder) / "downloads")
            (Path(folder) / source.name).symlink_to(source.resolve())  # uv reads it through the link
            own[canonicalize_name(parse_wheel_filename(source.name)[0])] = sha256
        made = _resolve(inputs, own_links=(folder,), **options)
    return replace(made, entries=tuple(replace(e, hashes=(own[e.name],)) if e.name in own else e
                                       for e in made.entries))


def _resolve(inputs: Inputs, *, wheelhouse: Optional[Path] = None, index_url: Optional[str] = None,
             previous: Optional[Lock] = None, uv: Optional[List[str]] = None, own_links: Sequence[str] = (),
             is_reachable: Callable[[str], bool] = reachable, run: Callable = subprocess.run) -> Lock:
    """Resolve ``inputs`` into a lock, with ``own_links`` as extra wheel folders.

    torch==X+cpu (x86_64) is served by the PyTorch CPU index, not PyPI: its files are
    taken from the wheelhouse when it holds them, else from the index's torch page when
    that answers (``--find-links`` on that one page, so no other package can come from
    it). When neither can be had, torch's requirements are read from PyPI's torch X
    without the CUDA packages a CPU build leaves out, and the torch entry is written
    without hashes: incomplete, with that reason.
    """
    uv = uv or uv_command()
    torch_pin = next((r for r in inputs.requirements if canonicalize_name(r.split("==")[0]) == "torch"), "")
    torch_version = torch_pin.split("==", 1)[1] if "==" in torch_pin else ""
    links = [*own_links] + ([str(wheelhouse)] if wheelhouse and Path(wheelhouse).is_dir() else [])
    page = ""
    incomplete_torch = ""
    requirements, overrides = list(inputs.requirements), []
    if "+" in torch_version:
        if local_wheels(wheelhouse, "torch", torch_version):
            pass  # the wheelhouse serves it (uv hashes the files there)
        elif inputs.torch_index and is_reachable(inputs.torch_index.rstrip("/") + "/torch/"):
            page = inputs.torch_index.rstrip("/") + "/torch/"
            links.append(page)
        else:
            public = torch_version.split("+", 1)[0]
            incomplete_torch = (f"torch {torch_version} is served by {inputs.torch_index or 'the PyTorch CPU index'}, "
                                f"which could not be reached where the lock was made; its requirements are PyPI's "
                                f"torch {public} without the CUDA packages a CPU build leaves out")
            requirements = [f"torch=={public}" if r == torch_pin else r for r in requirements]
            overrides = [f"torch=={public}"]
    entries = _compile(uv, inputs, requirements, overrides, links, index_url, previous, run)
    if page:  # uv takes torch from the page but leaves its hashes out: the page's own #sha256 links give them
        arch = inputs.platform.split("-", 1)[0]
        entries = [replace(e, hashes=page_hashes(page, "torch", e.version, inputs.python, arch),
                           note=f"{page} gives no sha256 for torch {e.version}") if e.name == "torch" and not e.hashes
                   else e for e in entries]
        entries = [replace(e, note="") if e.hashes else e for e in entries]
    if incomplete_torch:
        cuda = sorted(e.name for e in entries if _CUDA_ONLY.match(e.name))
        if cuda:  # resolve again without them, so nothing only they need stays in
            overrides += [f'{name} ; sys_platform == "never"' for name in cuda]
            entries = _compile(uv, inputs, requirements, overrides, links, index_url, previous, run)
        entries = [Entry("torch", torch_version, (), incomplete_torch) if e.name == "torch" else e for e in entries]
    refuse_cuda(inputs, entries)
    return Lock(cell=inputs.cell, inputs=inputs.digest, target=f"Python {inputs.python} on {inputs.platform}",
                resolver=_uv_version(uv), entries=tuple(sorted(entries, key=lambda e: e.name)))


def refuse_cuda(inputs: Inputs, entries: Sequence[Entry]) -> None:
    """Refuse a lock of an Ascend cell that holds a CUDA package: a CUDA build of torch
    (``+cuNNN``), ``nvidia-*``/``cuda-*`` distributions, or triton pulled in by torch (one
    the cell pins itself is its own business). Such a closure is the CUDA twin of the image:
    gigabytes more, `pip check` failing on a CUDA package, and a libraries tier blaming CANN
    for a missing libcuda.so.1.

    Example:
        >>> made = Inputs("c", "3.11", "aarch64-manylinux_2_35", ("torch==2.13.0",), (), "")
        >>> try:
        ...     refuse_cuda(made, [Entry("torch", "2.13.0", ("0" * 64,)), Entry("nvidia-cublas", "13.1", ("0" * 64,))])
        ... except UserError as refused:
        ...     print(refused.message)
        cell c: the lock would hold CUDA packages (nvidia-cublas), the CUDA build of torch's closure; an Ascend image takes torch's CPU build
    """
    asked = {canonicalize_name(python_env.requirement(r).name) for r in inputs.requirements if r.strip()}
    cuda = [e.name for e in entries if _CUDA_ONLY.match(e.name) and not (e.name in _CUDA_DEPENDENCY and e.name in asked)]
    cuda += [f"torch=={e.version}" for e in entries if e.name == "torch" and re.search(r"\+cu\d", e.version)]
    if cuda:
        raise UserError(f"cell {inputs.cell}: the lock would hold CUDA packages ({', '.join(cuda)}), the CUDA build of "
                        "torch's closure; an Ascend image takes torch's CPU build", exit_code=1,
                        fix="lock torch's CPU build (`ascend-build kb torch-npu` names the pin and its index); if "
                            "this cell's pip pins pulled them in, drop those pins")


SAMPLE = """\
# ascend-build lock of cell demo: written by `ascend-build lock`, do not edit.
# inputs: 0123456789abcdef
# target: Python 3.9 on x86_64-manylinux_2_35
# resolver: uv 0.13.9
# incomplete: torch==2.1.0+cpu: the PyTorch CPU index could not be reached
numpy==1.26.4 \\
    --hash=sha256:03a8c78d01d9781b28a6989f6fa1bb2c4f2d51201cf99d3dd875df6fbd96b23b
torch==2.1.0+cpu
"""
