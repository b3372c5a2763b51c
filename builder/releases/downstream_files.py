"""Downstream projects' published torch / torch-npu requirements, read from their own files.

What: a downstream project (vllm-ascend) states at each release tag, in ``requirements.txt``
and ``pyproject.toml``, which torch-npu, torch and torchvision it needs. `parse` reads those
files from a fixture, `generate` turns all fixtures into the data document and `render` gives
its text, which ``make knowledge`` (`builder.releases.published`, the kind ``downstream``) writes
to ``builder/data/downstream-pins.yaml`` with the other generated data files.

Why a parser: a fact a project publishes is read, never typed (DESIGN.md, "Facts are read,
not typed"). The files are kept verbatim as fixtures under
``tests/fixtures/documents/downstream/<project>/<tag>.txt``, with their repository, tag and
commit, and a test regenerates the data from them and fails on any difference.

A fixture holds one release (or more, one after another)::

    # downstream release: project=P repo=OWNER/NAME tag=TAG commit=SHA
    # any further comment lines
    == PATH SIZE BLOB
    <SIZE bytes: the file at that commit, verbatim>
    == PATH SIZE BLOB
    ...

``BLOB`` is the file's git blob id, so an edit of the copy (or a truncated one) is refused,
and anyone can check the copy against the repository with ``git cat-file``. Each file's
bytes are followed by one newline of the fixture's own, as files need not end in one.

Which requirements count: every line of ``requirements*.txt`` (what the project's setup.py
installs), and ``[build-system] requires`` and ``[project] dependencies`` of
``pyproject.toml`` (the torch-npu a release's extension is compiled against is a
requirement too); extras are optional and left out.

Example:
    >>> files = {"requirements.txt": b"torch==2.8.0\\ntorch-npu==2.8.0.post2  # the NPU build\\n"}
    >>> [release] = parse(fixture_text("vllm-ascend", "o/r", "v0.13.0", "0" * 40, files), "f.txt")
    >>> release.version, [(p.name, p.specifier, p.at) for p in release.pins]
    ('0.13.0', [('torch', '==2.8.0', 'line 1'), ('torch-npu', '==2.8.0.post2', 'line 2')])
"""

from __future__ import annotations

import hashlib
import importlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Tuple

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from builder import bounded
from builder.errors import UserError
from builder.knowledge.files import DATA_DIR

# The checkout's fixtures; an installed package has none (generating is a developer's and CI's job).
FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "documents" / "downstream"
DATA_FILE = DATA_DIR / "downstream-pins.yaml"
WHAT = "downstream releases' torch-npu, torch and torchvision requirements at each release tag"

# The packages whose pins a cell's own torch_npu / torch / torchvision must meet.
NAMES = ("torch", "torch-npu", "torchvision")
HEADER = "# downstream release: "
MAX_FIXTURE = 1 << 20  # one release's requirement files are a few KiB

_HEADER = re.compile(r"# downstream release: project=(?P<project>[A-Za-z0-9][A-Za-z0-9._-]*) "
                     r"repo=(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+) tag=(?P<tag>\S+) commit=(?P<commit>[0-9a-f]{40})")
_FILE = re.compile(r"== (?P<path>[^\s]+) (?P<size>\d{1,9}) (?P<blob>[0-9a-f]{40})")
# pip's comment rule: a '#' at the start or after whitespace starts a comment
_COMMENT = re.compile(r"(^|\s)#.*$")
_PYPROJECT_KEYS = (("build-system", "requires"), ("project", "dependencies"))


@dataclass(frozen=True)
class Pin:
    """One requirement a release states on a package of `NAMES`.

    ``written`` is the requirement as the file writes it; ``specifier`` its version
    specifier, PEP 440-normalised and sorted ("" for none); ``at`` where in ``path``.
    """

    name: str
    written: str
    specifier: str
    marker: str
    path: str
    at: str


@dataclass(frozen=True)
class Release:
    """A release's requirement files as one fixture holds them, and the pins read from them."""

    project: str
    version: str
    repo: str
    tag: str
    commit: str
    files: Tuple[str, ...]
    pins: Tuple[Pin, ...]


def blob_id(content: bytes) -> str:
    """The git blob id of ``content`` (what ``git hash-object`` prints).

    Example:
        >>> blob_id(b"")
        'e69de29bb2d1d6434b8b29ae775ad8c2e48c5391'
    """
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def fixture_text(project: str, repo: str, tag: str, commit: str, files: Mapping[str, bytes]) -> str:
    """The fixture holding ``files`` (path -> bytes at ``commit``), in path order: what `parse` reads.

    Example:
        >>> print(fixture_text("p", "o/r", "v1.0", "a" * 40, {"requirements.txt": b"torch==2.1.0"}).splitlines()[2])
        == requirements.txt 12 846d92140c1de0c944dad3bf516ab865a388374e
    """
    head = (f"{HEADER}project={project} repo={repo} tag={tag} commit={commit}\n"
            "# Each file follows a line '== PATH SIZE BLOB': its SIZE bytes verbatim at that commit "
            "(BLOB: its git blob id), then a newline.\n")
    parts = [head.encode("utf-8")]
    for path in sorted(files):
        content = files[path]
        parts.append(f"== {path} {len(content)} {blob_id(content)}\n".encode("utf-8") + content + b"\n")
    return b"".join(parts).decode("utf-8")


def parse(text: str, name: str = "fixture") -> List[Release]:
    """The releases a fixture holds, each with the pins its files state on `NAMES`.

    Raises UserError naming the fixture (``name``) and line for anything malformed: a
    bad header, a file copy whose size or blob id does not match, a requirement no
    parser reads.
    """
    data = text.encode("utf-8")
    releases: List[Release] = []
    pos = 0
    while pos < len(data):
        line, after = _line(data, pos, name)
        header = _HEADER.fullmatch(line)
        if not header:
            raise _malformed(name, data, pos, f"expected '{HEADER}project=P repo=OWNER/NAME tag=TAG commit=SHA'")
        pos = after
        files: Dict[str, bytes] = {}
        while pos < len(data):
            line, after = _line(data, pos, name)
            if line.startswith(HEADER):
                break
            if line.startswith("#"):
                pos = after
                continue
            path, content, pos = _file_copy(data, pos, line, after, name)
            if path in files:
                raise _malformed(name, data, pos, f"holds {path} twice")
            files[path] = content
        releases.append(_release(header, files, name))
    if not releases:
        raise UserError(f"{name} holds no release", fix=f"start it with '{HEADER}...' (see builder/releases/downstream_files.py)")
    return releases


def _line(data: bytes, pos: int, name: str) -> Tuple[str, int]:
    """The text of the line at ``pos`` and where the next one starts."""
    end = data.find(b"\n", pos)
    if end < 0:
        raise _malformed(name, data, pos, "ends without a newline")
    return data[pos:end].decode("utf-8"), end + 1


def _malformed(name: str, data: bytes, pos: int, what: str) -> UserError:
    line = data.count(b"\n", 0, pos) + 1
    return UserError(f"{name}:{line}: {what}",
                     fix="write the fixture again from the repository with fixture_text() "
                         "(builder/releases/downstream_files.py); never edit a copy by hand")


def _file_copy(data: bytes, pos: int, line: str, after: int, name: str) -> Tuple[str, bytes, int]:
    """One ``== PATH SIZE BLOB`` section at ``pos``: its path, its bytes, where the next line starts."""
    head = _FILE.fullmatch(line)
    if not head:
        raise _malformed(name, data, pos, f"expected '== PATH SIZE BLOB', found {line[:60]!r}")
    size = int(head["size"])
    content = data[after:after + size]
    if len(content) < size or data[after + size:after + size + 1] != b"\n":
        raise _malformed(name, data, pos, f"{head['path']} is not {size} bytes followed by a newline (a truncated or edited copy)")
    if blob_id(content) != head["blob"]:
        raise _malformed(name, data, pos, f"{head['path']} is not the file of blob {head['blob']} (an edited copy)")
    return head["path"], content, after + size + 1


def _release(header: "re.Match[str]", files: Mapping[str, bytes], name: str) -> Release:
    tag = header["tag"]
    try:
        version = str(Version(tag[1:] if tag[:1] in "vV" else tag))
    except InvalidVersion:
        raise UserError(f"{name}: tag {tag} names no release version (PEP 440)",
                        fix="keep only release tags (vX.Y.Z, vX.Y.ZrcN) as fixtures") from None
    pins: List[Pin] = []
    for path, content in files.items():
        label = f"{name}: {path}"
        try:
            text = content.decode("utf-8")
        except UnicodeDecodeError:
            raise UserError(f"{label} is not UTF-8 text", fix="copy the file again from the repository") from None
        pins.extend(_pins(path, text, label))
    pins.sort(key=lambda p: (p.name, p.path, _at_order(p.at)))
    return Release(canonicalize_name(header["project"]), version, header["repo"], tag, header["commit"],
                   tuple(sorted(files)), tuple(pins))


def _at_order(at: str) -> Tuple[int, str]:
    number = at[5:] if at.startswith("line ") else ""
    return (int(number), "") if number.isdigit() else (0, at)


def _pins(path: str, text: str, label: str) -> Iterator[Pin]:
    """The pins one file states on `NAMES`, by the kind of file its name says it is."""
    base = path.rsplit("/", 1)[-1]
    if base == "pyproject.toml":
        for where, written in _pyproject_requirements(text, label):
            yield from _pin(written, path, where, label)
    elif base.startswith("requirements") and base.endswith(".txt"):
        for number, written in _requirement_lines(text, label):
            yield from _pin(written, path, f"line {number}", label)
    else:
        raise UserError(f"{label}: no parser for a file named {base}",
                        fix="keep requirements*.txt and pyproject.toml files only")


def _requirement_lines(text: str, label: str) -> Iterator[Tuple[int, str]]:
    """(line number, requirement) of a requirements file, as pip reads it: comments and
    options (``--pre``, ``--extra-index-url``) left out; an include is refused, its file is not here.

    Example:
        >>> list(_requirement_lines("# note\\n--pre\\ntorch==2.1.0  # why\\n\\n", "f"))
        [(3, 'torch==2.1.0')]
    """
    for number, raw in enumerate(text.splitlines(), 1):
        line = _COMMENT.sub("", raw).strip()
        if line.startswith(("-r", "--requirement", "-c", "--constraint")):
            raise UserError(f"{label}:{number}: {line!r} includes another file, which this fixture does not hold",
                            fix="add the included file to the fixture and read it here too")
        if line and not line.startswith("-"):
            yield number, line


def _pyproject_requirements(text: str, label: str) -> Iterator[Tuple[str, str]]:
    """(where, requirement) of ``[build-system] requires`` and ``[project] dependencies``."""
    try:
        toml = importlib.import_module("tomllib")
    except ModuleNotFoundError:
        raise UserError(f"{label}: reading pyproject.toml needs Python 3.11 or newer (tomllib)",
                        fix="run make knowledge with Python 3.11 or newer") from None
    try:
        document = toml.loads(text)
    except toml.TOMLDecodeError as exc:
        raise UserError(f"{label}: not TOML ({exc})", fix="copy the file again from the repository") from None
    for table, key in _PYPROJECT_KEYS:
        listed = document.get(table, {}).get(key, [])
        if not isinstance(listed, list) or not all(isinstance(item, str) for item in listed):
            raise UserError(f"{label}: [{table}] {key} is not a list of strings", fix="copy the file again from the repository")
        for written in listed:
            yield f"[{table}] {key}", written.strip()


def _pin(written: str, path: str, at: str, label: str) -> Iterator[Pin]:
    """The requirement ``written`` as a Pin, when it names one of `NAMES`."""
    try:
        requirement = Requirement(written)
    except InvalidRequirement as exc:
        raise UserError(f"{label} ({at}): {written!r} is no requirement ({str(exc).splitlines()[0]})",
                        fix="extend the parser if the project writes a form it does not read") from None
    name = canonicalize_name(requirement.name)
    if name in NAMES:
        yield Pin(name, written, normal_specifier(requirement.specifier), str(requirement.marker or ""), path, at)


def normal_specifier(specifier: SpecifierSet) -> str:
    """``specifier`` with each version PEP 440-normalised, sorted ("" for none).

    Example:
        >>> normal_specifier(SpecifierSet(" >= 2.5.1rc1, <3"))
        '<3,>=2.5.1rc1'
        >>> normal_specifier(SpecifierSet("==2.05.0.RC1"))
        '==2.5.0rc1'
    """
    parts = []
    for one in specifier:
        try:
            wildcard = one.version.endswith(".*")
            version = str(Version(one.version[:-2] if wildcard else one.version)) + (".*" if wildcard else "")
        except InvalidVersion:  # '===' takes any string
            version = one.version
        parts.append(f"{one.operator}{version}")
    return ",".join(sorted(parts))


def _fixtures(folder: Path) -> Iterator[Tuple[Path, str]]:
    """(path, text) of every fixture (``*.txt``) under ``folder``."""
    found = sorted(folder.rglob("*.txt"))
    if not found:
        raise UserError(f"{folder}: no fixtures", fix="run from a checkout of ascend-build, whose "
                        "tests/fixtures/documents/downstream/ holds them")
    for path in found:
        try:
            raw = bounded.read_file(path, MAX_FIXTURE + 1)
        except OSError as exc:
            raise UserError(f"cannot read {path}: {exc.strerror}", fix="check the path and its permissions") from None
        if len(raw) > MAX_FIXTURE:
            raise UserError(f"{path} is over {MAX_FIXTURE} bytes", fix="keep only the requirement files of one release in it")
        try:
            yield path, raw.decode("utf-8")
        except UnicodeDecodeError:
            raise UserError(f"{path} is not UTF-8 text", fix="write the fixture again with fixture_text()") from None


def generate(folder: Path = FIXTURES) -> Dict[str, Any]:
    """The data document: every release of every fixture under ``folder``, sorted by project and
    version; each names its fixture from ``folder``'s parent (``downstream/vllm-ascend/v0.13.0.txt``)."""
    folder = Path(folder)
    releases: List[Tuple[str, Version, Dict[str, Any]]] = []
    seen: Dict[Tuple[str, str], str] = {}
    for path, text in _fixtures(folder):
        shown = path.relative_to(folder.parent).as_posix()
        for release in parse(text, shown):
            key = (release.project, release.version)
            if key in seen:
                raise UserError(f"{shown} and {seen[key]} both hold {release.project} {release.version}",
                                fix="keep one fixture per release")
            seen[key] = shown
            releases.append((release.project, Version(release.version), _entry(release, shown)))
    releases.sort(key=lambda item: (item[0], item[1]))
    return {"releases": [entry for _, _, entry in releases]}


def _entry(release: Release, fixture: str) -> Dict[str, Any]:
    return {
        "project": release.project,
        "version": release.version,
        "source": {"repo": release.repo, "tag": release.tag, "commit": release.commit,
                   "files": list(release.files), "fixture": fixture},
        "requires": [{"name": p.name, "specifier": p.specifier, "marker": p.marker, "written": p.written,
                      "path": p.path, "at": p.at} for p in release.pins],
    }


def render(document: Mapping[str, Any]) -> str:
    """The data file's text for ``document`` (from `generate`): the same document, the same bytes.

    The header and layout are ``builder.releases.published``'s for its data files.
    """
    body = yaml.safe_dump(dict(document), sort_keys=False, allow_unicode=True, default_flow_style=None, width=4096)
    return (f"# Generated by `make knowledge` from tests/fixtures/documents/{FIXTURES.name}/ ({WHAT}).\n"
            "# Never edit it by hand: change the documents or their parser, and generate it again.\n" + body)


__all__ = ["NAMES", "FIXTURES", "DATA_FILE", "WHAT", "Pin", "Release", "blob_id", "fixture_text", "parse", "normal_specifier",
           "generate", "render"]
