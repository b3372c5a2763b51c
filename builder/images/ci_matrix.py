"""Which cells CI must rebuild, as the job matrix a GitHub Actions workflow takes.

`entries` returns one entry per cell to build; `github_matrix` wraps them in the
``{"include": [...]}`` shape of ``strategy.matrix`` and `to_json` prints that on one
line (what ``$GITHUB_OUTPUT`` needs). ``ascend-build ci-matrix [--changed-since REF]
[--runners FILE]`` is these three calls.

Deciding what changed: compare rendered output, not source files
--------------------------------------------------------------------
With ``since=REF`` a cell is kept when its freshly rendered build context differs
from the ``dockerfiles/<cell>/`` folder *committed at REF*: the sha256 over the
whole file set (every file name and every byte) of one against the other.

That folder is exactly "the rendered Dockerfile, its context, and every input that
shaped them". The templates, the smoke program, the knowledge base under
``builder/data/``, the renderer's own code and the cell's matrix entry all reach
the image only through these files, so:

* a change to a shared template or to the smoke program changes every cell's
  files, so every cell is rebuilt;
* a change to one cell's matrix entry changes only that cell's files;
* a change that leaves the rendered bytes alone (a comment in the matrix, a
  refactoring of the renderer, a README) rebuilds nothing: the images would be
  the same;
* a cell absent at REF is new and is built; a cell removed since REF is not
  built, whatever REF held.

It works even when REF's *code* differs from today's (another renderer, other
templates, another layout of the knowledge base): nothing from REF is run, only
its committed files are read. Those files are trustworthy because CI fails every
commit whose ``dockerfiles/`` is stale (``ascend-build render --check``), so at
any REF that passed CI they are what REF's code rendered from REF's matrix.
Diffing source paths instead (``git diff --name-only``) would have to know which
source file feeds which cell, and would be wrong the day that mapping changes.
Ancestry does not matter either: REF may be any commit, tag or branch (the last
published one, a commit before a force-push), the comparison is of content.

Runner labels
-------------
Each entry names the GitHub-hosted runner that builds it (by arch) and the
self-hosted labels of the NPU host that validates it (by chip and arch). The
defaults are in `DEFAULT_BUILD_RUNNERS` and `default_npu_runner`; a small YAML or
JSON file (``--runners FILE``, read by `load_runners`) overrides them::

    build:                    # arch -> runs-on of the build job (a label or a list)
      x86_64: ubuntu-24.04
      aarch64: [self-hosted, linux, ARM64, docker-build]
    npu:                      # chip, or chip/arch for one arch -> runs-on labels
      910b: [self-hosted, linux, ascend, 910b, ARM64]
      a3/x86_64: [self-hosted, linux, ascend, a3, X64, lab-2]

Example:
    >>> rows = entries(cells, render.render_all(cells), since="origin/main", repo=Path("."))  # doctest: +SKIP
    >>> print(to_json(github_matrix(rows)))                                                      # doctest: +SKIP
    {"include":[{"id":"cann8.0.rc3-910b-...-aarch64","tag":"ascend-build/pytorch:...", ...}]}
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from pathlib import Path, PurePosixPath
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import yaml

from builder import documents
from builder.images import render
from builder.errors import UserError
from builder.images.matrix import Cell
from builder.vocabulary import ARCHS, CHIPS, NPU, manifest_name

# GitHub-hosted runners per arch. ubuntu-24.04-arm is free for public repositories;
# private ones need a larger arm64 runner (override it in the runners file).
DEFAULT_BUILD_RUNNERS: Dict[str, str] = {"x86_64": "ubuntu-24.04", "aarch64": "ubuntu-24.04-arm"}
# The architecture label every self-hosted runner gets automatically from the runner
# application (labels are case-insensitive). An x86_64 image cannot run on an aarch64
# NPU host, so the NPU job asks for the arch too; registering a runner needs nothing extra.
RUNNER_ARCH_LABEL: Dict[str, str] = {"x86_64": "X64", "aarch64": "ARM64"}

_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
RunsOn = Union[str, List[str]]


def default_npu_runner(chip: str, arch: str) -> List[str]:
    """Labels of the self-hosted NPU host that validates a cell: ``self-hosted, linux, ascend, <chip>, <ARCH>``."""
    return ["self-hosted", "linux", "ascend", chip, RUNNER_ARCH_LABEL[arch]]


# --- runner configuration -----------------------------------------------------

def _runs_on(value: object, where: str) -> RunsOn:
    """One label or a non-empty list of labels, each a plain word (it ends up in ``runs-on``)."""
    labels = [value] if isinstance(value, str) else value
    if not isinstance(labels, list) or not labels or not all(isinstance(v, str) and _LABEL.fullmatch(v) for v in labels):
        raise UserError(f"runners file: {where} = {value!r} is not a runner label or a list of labels",
                        fix="write a label such as ubuntu-24.04, or a list such as [self-hosted, linux, ascend, 910b]")
    return value if isinstance(value, str) else list(labels)


def check_runners(runners: Mapping) -> Dict[str, Dict[str, RunsOn]]:
    """Validate a runners mapping (``{"build": {arch: ...}, "npu": {chip or chip/arch: ...}}``)."""
    if not isinstance(runners, Mapping):
        raise UserError("runners file: the top level must be a mapping with 'build' and/or 'npu'",
                        fix="see docs/ci.md (the runners file) for the format")
    unknown = sorted(set(runners) - {"build", "npu"})
    if unknown:
        raise UserError(f"runners file: unknown key(s) {', '.join(map(str, unknown))}", fix="use only 'build' and 'npu'")
    out: Dict[str, Dict[str, RunsOn]] = {"build": {}, "npu": {}}
    for section in ("build", "npu"):
        table = runners.get(section) or {}
        if not isinstance(table, Mapping):
            raise UserError(f"runners file: '{section}' must be a mapping", fix=f"write {section}: followed by KEY: labels lines")
        for key, value in table.items():
            key = str(key)
            chip, _, arch = key.partition("/")
            ok = key in ARCHS if section == "build" else chip in CHIPS and (not arch or arch in ARCHS)
            if not ok:
                allowed = ", ".join(ARCHS) if section == "build" else f"a chip ({', '.join(CHIPS)}) or chip/arch"
                raise UserError(f"runners file: {section}.{key} is not a known key", fix=f"use {allowed}")
            out[section][key] = _runs_on(value, f"{section}.{key}")
    return out


class _NoAliases(yaml.SafeLoader):
    """A runners file is a few labels: anchors and aliases are refused, so a few hundred
    bytes of nested aliases cannot expand into gigabytes."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.events.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, "YAML aliases are not accepted here", event.start_mark)
        return super().compose_node(parent, index)


RUNNERS_MAX_BYTES = 1 << 16


def load_runners(path: Path) -> Dict[str, Dict[str, RunsOn]]:
    """Read a runners file (YAML, of which JSON is a subset) and validate it."""
    try:
        if Path(path).exists() and not Path(path).is_file():
            raise UserError(f"runners file {path} is not a regular file", fix="check the --runners path")
        with open(path, "rb") as fh:
            raw = fh.read(RUNNERS_MAX_BYTES + 1)
        if len(raw) > RUNNERS_MAX_BYTES:
            raise UserError(f"runners file {path} is over {RUNNERS_MAX_BYTES} bytes", fix="a runners file is a few labels")
        data = documents.load_yaml(raw.decode("utf-8"), f"runners file {path}", loader=_NoAliases)
    except UnicodeDecodeError:
        raise UserError(f"runners file {path} is not UTF-8 text", fix="save it as UTF-8") from None
    except OSError as exc:
        raise UserError(f"cannot read runners file {path}: {exc.strerror or exc}", fix="check the --runners path") from None
    except yaml.YAMLError as exc:
        raise UserError(f"runners file {path} is not valid YAML/JSON: {exc}", fix="correct the file") from None
    return check_runners(data or {})


def build_runner(cell: Cell, runners: Optional[Mapping] = None) -> RunsOn:
    table = (runners or {}).get("build") or {}
    return table.get(cell.arch, DEFAULT_BUILD_RUNNERS[cell.arch])


def npu_runner(cell: Cell, runners: Optional[Mapping] = None) -> List[str]:
    table = (runners or {}).get("npu") or {}
    chosen = table.get(f"{cell.chip}/{cell.arch}", table.get(cell.chip))
    if chosen is None:
        return default_npu_runner(cell.chip, cell.arch)
    return [chosen] if isinstance(chosen, str) else list(chosen)


# --- what changed since REF ---------------------------------------------------

def files_digest(files: Mapping[str, bytes]) -> str:
    """sha256 of a file set: every (name, content) pair in name order, so a renamed,
    added or removed file changes it as surely as a changed byte."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode("utf-8") + b"\0" + hashlib.sha256(files[name]).digest())
    return h.hexdigest()


def _git(repo: Path, *args: str, stdin: Optional[bytes] = None) -> bytes:
    try:
        proc = subprocess.run(["git", "-C", str(repo), *args], input=stdin, capture_output=True, check=False)
    except FileNotFoundError:
        raise UserError("git is not installed", fix="install git; --changed-since reads committed files with it") from None
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, args, proc.stdout, proc.stderr)
    return proc.stdout


def resolve(repo: Path, ref: str) -> str:
    """The commit id REF names in ``repo``; a UserError naming REF otherwise."""
    fix = ("pass a commit, branch or tag that exists in this clone "
           "(in CI, check out with fetch-depth: 0 so older commits are present)")
    if not ref or ref.startswith("-") or any(c.isspace() or c == "\0" for c in ref):
        raise UserError(f"--changed-since {ref!r} is not a git revision", fix=fix)
    try:
        _git(repo, "rev-parse", "--git-dir")
    except subprocess.CalledProcessError:
        raise UserError(f"--changed-since {ref}: {repo} is not inside a git repository",
                        fix="run it from a clone of the repository (or pass the clone as repo)") from None
    try:
        return _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").decode().strip()
    except subprocess.CalledProcessError:
        raise UserError(f"--changed-since {ref}: no such commit in {repo}", fix=fix) from None


def _pathspec(out_dir: Union[str, Path]) -> str:
    """``out_dir`` as git prints it: relative to ``repo``, forward slashes, no ``./``."""
    path = PurePosixPath(Path(out_dir).as_posix())
    if path.is_absolute() or ".." in path.parts or str(path) in ("", "."):
        raise UserError(f"out_dir {out_dir!s} must be a folder inside the repository, relative to it",
                        fix="pass e.g. out_dir='dockerfiles'")
    return str(path)


def committed_contexts(repo: Path, commit: str, out_dir: Union[str, Path] = "dockerfiles") -> Dict[str, Dict[str, bytes]]:
    """Every ``<out_dir>/<cell>/`` folder committed at ``commit``: cell id -> {file name: bytes}.

    One ``git ls-tree`` lists the blobs, one ``git cat-file --batch`` reads them all.
    """
    prefix = _pathspec(out_dir)
    listing = _git(repo, "ls-tree", "-r", "-z", commit, "--", prefix)
    where: List[Tuple[str, str, str]] = []  # (cell, file name inside the cell folder, object id)
    for record in filter(None, listing.split(b"\0")):
        meta, _, path = record.decode("utf-8", errors="surrogateescape").partition("\t")
        object_id = meta.split()[2]
        if not path.startswith(prefix + "/"):
            continue
        cell, _, name = path[len(prefix) + 1:].partition("/")
        if name:  # files directly under out_dir belong to no cell
            where.append((cell, name, object_id))
    contents = _read_objects(repo, [object_id for _, _, object_id in where])
    out: Dict[str, Dict[str, bytes]] = {}
    for cell, name, object_id in where:
        out.setdefault(cell, {})[name] = contents[object_id]
    return out


def _read_objects(repo: Path, object_ids: Sequence[str]) -> Dict[str, bytes]:
    unique = sorted(set(object_ids))
    if not unique:
        return {}
    raw = _git(repo, "cat-file", "--batch", stdin="".join(f"{o}\n" for o in unique).encode())
    out: Dict[str, bytes] = {}
    pos = 0
    for object_id in unique:
        end = raw.index(b"\n", pos)
        header = raw[pos:end].decode().split()
        if len(header) != 3:  # "<id> missing"
            raise UserError(f"git object {object_id} is missing from {repo}", fix="fetch the full history")
        size = int(header[2])
        out[object_id] = raw[end + 1:end + 1 + size]
        pos = end + 1 + size + 1  # content, then a newline
    return out


def changed_cells(cells: Iterable[Cell], rendered: Mapping[str, Mapping[str, bytes]], *, since: str, repo: Path,
                  out_dir: Union[str, Path] = "dockerfiles") -> List[str]:
    """Ids of the cells whose rendered context differs from REF's committed one (or is absent at REF)."""
    commit = resolve(Path(repo), since)
    try:
        before = committed_contexts(Path(repo), commit, out_dir)
    except subprocess.CalledProcessError as exc:
        raise UserError(f"--changed-since {since}: cannot list {out_dir}/ at {commit[:12]}: "
                        f"{exc.stderr.decode(errors='replace').strip()}", fix="check the repository and the ref") from None
    return [c.id for c in cells
            if c.id not in before or files_digest(before[c.id]) != files_digest(rendered[c.id])]


# --- the entries ------------------------------------------------------------------

def _group_tag(cell: Cell) -> Optional[str]:
    """The multi-arch tag a cell belongs to: its id without the ``-<arch>`` suffix (None if it has none)."""
    suffix = f"-{cell.arch}"
    return cell.id[: -len(suffix)] if cell.id.endswith(suffix) and len(cell.id) > len(suffix) else None


def entries(cells: Sequence[Cell], rendered: Optional[Mapping[str, Mapping[str, bytes]]] = None, *,
            since: Optional[str] = None, repo: Path = Path("."), out_dir: Union[str, Path] = "dockerfiles",
            runners: Optional[Mapping] = None) -> List[dict]:
    """One entry per cell to build, in matrix order.

    Each entry::

        id            the cell id (``--cell``)
        tag           its release reference, ``image:tag`` (``cell.ref``)
        arch, chip, cann
        build_runner  runs-on of the build job (GitHub-hosted, by arch)
        npu_runner    runs-on labels of the NPU host that promotes it (self-hosted, by chip and arch)
        content_hash  the ``Label.CONTENT_HASH`` label its images carry: a job can
                      refuse a stale image left in the registry by an earlier run
        manifest      the multi-arch release reference (``image:<id without -arch>``), or None
        members       [{ref, content_hash}] of every cell of the matrix behind ``manifest``,
                      including those not rebuilt now (their published tags still count)

    ``since=None`` keeps every cell; ``since=REF`` keeps those whose rendered context
    differs from REF's committed ``<out_dir>/<cell>/`` (see the module docstring).
    ``rendered`` is ``render.render_all(cells)``; cells missing from it are rendered here.
    ``runners`` is what `load_runners` returns (or the same shape; validated again).
    """
    cells = list(cells)
    table = check_runners(runners) if runners else None
    rendered = dict(rendered or {})
    for cell in cells:
        if cell.id not in rendered:
            rendered[cell.id] = render.render_cell(cell)
    keep = set(changed_cells(cells, rendered, since=since, repo=repo, out_dir=out_dir)) if since is not None \
        else {c.id for c in cells}
    # the hash the rendered images carry (their manifest says it), lock included
    hashes = {c.id: json.loads(rendered[c.id][manifest_name(NPU)])["content_hash"] for c in cells}
    groups: Dict[Tuple[str, str], List[Cell]] = {}
    for cell in cells:
        group = _group_tag(cell)
        if group:
            groups.setdefault((cell.image, group), []).append(cell)
    out = []
    for cell in cells:
        if cell.id not in keep:
            continue
        group = _group_tag(cell)
        members = groups.get((cell.image, group), []) if group else []
        out.append({
            "id": cell.id,
            "tag": cell.ref,
            "arch": cell.arch,
            "chip": cell.chip,
            "cann": cell.cann,
            "build_runner": build_runner(cell, table),
            "npu_runner": npu_runner(cell, table),
            "content_hash": hashes[cell.id],
            "manifest": f"{cell.image}:{group}" if group else None,
            "members": [{"ref": m.ref, "content_hash": hashes[m.id]} for m in members],
        })
    return out


def github_matrix(rows: Sequence[dict]) -> dict:
    """What ``strategy.matrix`` takes. No cell gives ``{"include": []}``, a valid value that a
    workflow skips with a job-level ``if:`` on a separate output (images.yml: ``any``) or on
    ``fromJSON(needs.plan.outputs.matrix).include[0] != null``; a matrix job never runs empty."""
    return {"include": [dict(row) for row in rows]}


def to_json(matrix: dict) -> str:
    """One line of JSON (``$GITHUB_OUTPUT`` takes ``name=value`` lines)."""
    return json.dumps(matrix, separators=(",", ":"))


def summary(rows: Sequence[dict]) -> str:
    """Human lines for a log or ``$GITHUB_STEP_SUMMARY``: one cell per line with its runners."""
    if not rows:
        return "no cell to rebuild"
    return "\n".join(f"{r['id']}  build: {r['build_runner']}  npu: {','.join(r['npu_runner'])}" for r in rows)
