"""Published documents kept as fixtures, and the data files generated from them.

Ascend's facts come into ``builder/data/`` through parsers, never by hand: each document
is kept verbatim under ``tests/fixtures/documents/<source>/`` with a first line naming its
repository, path, tag and commit, and `generate` turns every document of a kind into one
data file. ``make knowledge`` (``ascend-build releases tables --write``) writes them;
``tests/test_published_tables.py`` regenerates them and fails on any difference, so a data
file cannot drift from its documents nor be edited by hand.

`KINDS` lists the kinds of document: where their fixtures live, the data file they make,
and the function that makes it. Adding a kind of document is one entry here plus its
parser module (see docs/knowledge-base.md, "Adding a document").

Example:
    >>> header = ("<!-- Ascend/pytorch, docs/zh/release_notes.md at tag v26.2.0-beta.1-pytorch2.13.0, "
    ...           "commit " + "9" * 40 + " (2026-08-19), verbatim below -->")
    >>> source(header, "f.md").id
    'Ascend/pytorch@v26.2.0-beta.1-pytorch2.13.0:docs/zh/release_notes.md'
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import yaml

from builder import bounded
from builder.errors import UserError
from builder.knowledge.files import DATA_DIR, MINDCLUSTER_FILE, TABLES_FILE
from builder.releases import torchnpu_notes

# The checkout's fixtures; an installed package has none (generating is a developer's and CI's job).
FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "documents"
DOCUMENT_MAX = 4 << 20  # the largest release notes page is about 70 KiB
_HEADER = re.compile(r"^<!-- (?P<repo>[\w.-]+/[\w.-]+), (?P<path>\S+) at (?:(?:tag|branch) (?P<ref>\S+), )?"
                     r"commit (?P<commit>[0-9a-f]{40}) \((?P<date>\d{4}-\d{2}-\d{2})\), verbatim below -->$")


@dataclass(frozen=True)
class Source:
    """Where a kept document was published: repository, path, tag (or ""), commit, commit date."""

    repo: str
    path: str
    ref: str
    commit: str
    date: str
    fixture: str

    @property
    def id(self) -> str:
        return f"{self.repo}@{self.ref or self.commit[:12]}:{self.path}"

    def entry(self) -> Dict[str, str]:
        """The document as a generated data file lists it."""
        return {"id": self.id, "repo": self.repo, "path": self.path, "ref": self.ref, "commit": self.commit,
                "date": self.date, "fixture": self.fixture}


def source(first_line: str, fixture: str) -> Source:
    """The source a fixture's first line names; a fixture without one is refused."""
    m = _HEADER.match(first_line.strip())
    if m is None:
        raise UserError(f"{fixture}: the first line does not name the document's source",
                        fix="start it with <!-- OWNER/REPO, PATH at tag TAG (or branch NAME), commit SHA (YYYY-MM-DD), verbatim below -->",
                        exit_code=1)
    return Source(m["repo"], m["path"], m["ref"] or "", m["commit"], m["date"], fixture)


def _read(path: Path) -> str:
    """A kept document's text: a regular file of UTF-8 within `DOCUMENT_MAX`, else a UserError naming it."""
    try:
        data = bounded.read_file(path, DOCUMENT_MAX + 1)
        if len(data) > DOCUMENT_MAX:
            raise UserError(f"{path}: larger than {DOCUMENT_MAX} bytes: no release notes page is", exit_code=1,
                            fix="keep the document itself, not another file under its name")
        return data.decode("utf-8")
    except OSError as exc:
        raise UserError(f"{path}: cannot be read as a document ({exc.strerror or exc})", exit_code=1,
                        fix="a kept document is a regular file; remove what stands in its place") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text (byte {exc.start})", exit_code=1,
                        fix="keep the document verbatim as published (UTF-8)") from None


def kept(folder: Path) -> List[Tuple[Source, str]]:
    """Every document under ``folder`` (``*.md``), as (its source, its text without the header line),
    oldest commit first: where two documents disagree, a reader takes the later one's word."""
    found = []
    for path in sorted(folder.rglob("*.md")):
        text = _read(path)
        first, _, body = text.partition("\n")
        found.append((source(first, str(path.relative_to(folder.parent))), body))
    if not found:
        raise UserError(f"{folder}: no documents", fix="run from a checkout of ascend-build, whose "
                        "tests/fixtures/documents/ holds them", exit_code=1)
    return sorted(found, key=lambda d: (d[0].date, d[0].ref, d[0].path))


def torchnpu_tables(folder: Path) -> Dict[str, Any]:
    """``torchnpu-tables.yaml``: every compatibility and version mapping row of TorchNPU's release notes."""
    documents, compat, mapping = [], [], []
    for src, text in kept(folder):
        # a release notes page holds both tables; the compatibility page the version mapping alone
        notes = torchnpu_notes.read(text, src.id, need_compat=not src.path.startswith("COMPATIBILITY"))
        documents.append(src.entry())
        compat += [{"document": r.document, "line": r.line, "pta": r.pta, "cann": [[c, ok] for c, ok in r.cann]}
                   for r in notes.compat]
        mapping += [{"document": r.document, "line": r.line, "branch": r.branch, "pytorch": r.pytorch,
                     "pta": r.pta, "torch_npu": r.torch_npu, "cann": list(r.cann), "python": list(r.python)}
                    for r in notes.mapping]
    return {"documents": documents, "compat": compat, "mapping": mapping}


def render_torchnpu_tables(folder: Path) -> str:
    """``torchnpu-tables.yaml``'s text (the same documents give the same bytes)."""
    return _generated(folder, "TorchNPU release notes\n# and compatibility page", torchnpu_tables(folder))


def _generated(folder: Path, what: str, data: Dict[str, Any]) -> str:
    """A generated data file's text: the line saying where it comes from, then ``data`` as YAML."""
    body = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=None, width=4096)
    return (f"# Generated by `make knowledge` from tests/fixtures/documents/{folder.name}/ ({what}).\n"
            "# Never edit it by hand: change the documents or their parser, and generate it again.\n" + body)


def render_mindcluster_tables(folder: Path) -> str:
    """``mindcluster-tables.yaml``'s text: the Ascend HDK of each CANN release, per product, by MindCluster's notes."""
    from builder import knowledge
    from builder.releases import mindcluster_notes
    documents, rows = [], []
    for src, text in kept(folder):
        documents.append(src.entry())
        rows += mindcluster_notes.data(mindcluster_notes.read(text, src.id), knowledge.load().drivers.products())
    return _generated(folder, "MindCluster release notes", {"documents": documents, "hdk": rows})


def render_cann_products(folder: Path) -> str:
    """``cann-products.yaml``'s text: the products each CANN release's notes name."""
    from builder.releases import cann_notes
    return cann_notes.render(cann_notes.generate(folder))


def render_downstream_pins(folder: Path) -> str:
    """``downstream-pins.yaml``'s text: the torch-npu and torch each downstream release requires."""
    from builder.releases import downstream_files
    return downstream_files.render(downstream_files.generate(folder))


def render_torch_npu_requires(folder: Path) -> str:
    """``torch-npu-requires.yaml``'s text: what every torch_npu wheel declares (Requires-Dist)."""
    from builder.releases import torch_npu_wheels
    return torch_npu_wheels.render(folder)


@dataclass(frozen=True)
class Kind:
    """One kind of published document: its fixtures' folder, the data file it makes, its maker."""

    fixtures: str                                   # under tests/fixtures/documents/
    data_file: str                                  # under builder/data/
    render: Callable[[Path], str]                   # the data file's text from the fixtures' folder
    what: str


KINDS: Tuple[Kind, ...] = (
    Kind("ascend-pytorch", TABLES_FILE, render_torchnpu_tables,
         "TorchNPU release notes and compatibility page: compatibility tables, version mapping rows"),
    Kind("mind-cluster", MINDCLUSTER_FILE, render_mindcluster_tables,
         "MindCluster release notes: the Ascend HDK of each CANN release, per product"),
    Kind("cann-release-management", "cann-products.yaml", render_cann_products,
         "CANN release notes: the hardware products each release names"),
    Kind("downstream", "downstream-pins.yaml", render_downstream_pins,
         "downstream releases' torch-npu, torch and torchvision requirements at each release tag"),
    Kind("pypi-torch-npu", "torch-npu-requires.yaml", render_torch_npu_requires,
         "the package index's metadata of every torch_npu wheel: its Requires-Dist and Requires-Python"),
)


def stale(fixtures: Path = FIXTURES, data_dir: Path = DATA_DIR) -> List[str]:
    """The data files that differ from what their documents generate."""
    out = []
    for kind in KINDS:
        path = data_dir / kind.data_file
        have = _read(path) if path.exists() else None
        if have != kind.render(fixtures / kind.fixtures):
            out.append(kind.data_file)
    return out


def write(fixtures: Path = FIXTURES, data_dir: Path = DATA_DIR) -> List[str]:
    """Generate every data file; the names of those whose bytes changed."""
    from builder import writes
    changed = []
    for kind in KINDS:
        text = kind.render(fixtures / kind.fixtures)
        path = data_dir / kind.data_file
        if not path.exists() or _read(path) != text:
            writes.replace_file(path, text.encode("utf-8"))
            changed.append(kind.data_file)
    return changed


# The data files no parser makes: each fact in them carries its own `source` (docs/knowledge-base.md).
HAND_KEPT: Tuple[Tuple[str, str], ...] = (
    ("ascend-compat.yaml", "releases, HDK, firmware, chips, each fact's source"),
    ("python-env.yaml", "Python limits, from installation guides"),
    ("os.yaml", "base OSes; OS families per installation guide"),
    ("cann-packages.json", "CANN installers with sha256 (ascend-deployer)"),
    ("cann-downloads.yaml", "where CANN's installers are published"),
    ("conda.yaml", "Miniforge's installer per arch, with sha256"),
    ("uv.yaml", "the uv binary, with its sha256"),
    ("errors.yaml", "Ascend error strings with cause and fix"),
)


def facts() -> List[Dict[str, str]]:
    """Each data file: parsed (from which documents) or hand-kept, for ``ascend-build kb``.

    Example:
        >>> [(f["file"], f["how"]) for f in facts()][:2]
        [('torchnpu-tables.yaml', 'parsed'), ('mindcluster-tables.yaml', 'parsed')]
    """
    return ([{"file": k.data_file, "how": "parsed", "from": f"tests/fixtures/documents/{k.fixtures}/"}
             for k in KINDS]
            + [{"file": name, "how": "hand-kept", "from": what} for name, what in HAND_KEPT])

