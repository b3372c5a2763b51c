"""Which CANN release's notes first name a product, and whether a release's notes name it
(``builder/data/cann-products.yaml``, generated from the notes by `builder.releases.cann_notes`).

Why apart from `drivers`: this data file is made by a parser, not kept by hand, and answers
one question (since when do CANN's notes name a product); the products themselves and their
HDK stay `drivers`'s. Each answer carries its evidence (`Source`: repository, commit, path,
line), so a finding can cite it.

"Not named" is no verdict by itself: the notes list products whose support or OS list is new
in the release, not every product the release supports (see the data file's ``note``).
``listed`` is None for a release without parsed notes (none copied, or notes without the
list): nothing is known there.

Example:
    >>> release, source = first_release("atlas-350")
    >>> release, source.name, source.cite()
    ('9.0.0', 'Atlas 350 加速卡', 'hicann/release-management@68ef36b7dbee7c104d3214af96dad5390661a0eb:9.0.0/release-notes.md, line 81')
    >>> listed("9.0.0", "atlas-350"), listed("9.0.0", "atlas-950-superpod"), listed("8.5.0", "atlas-350")
    (True, False, None)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Dict, Mapping, Optional, Tuple

from builder import versions
from builder.knowledge.files import DATA_DIR, read_yaml

DATA_FILE = DATA_DIR / "cann-products.yaml"


@dataclass(frozen=True)
class Source:
    """Where the notes say it: ``line`` of ``path`` in ``repo`` at ``commit``; ``name``: the
    product as spelled there ("" for the list item itself)."""

    repo: str
    commit: str
    path: str
    line: int
    name: str = ""

    def cite(self) -> str:
        """``repo@commit:path, line N``, as a finding prints it."""
        return f"{self.repo}@{self.commit}:{self.path}, line {self.line}"


@dataclass(frozen=True)
class _Notes:
    """One release's parsed notes: the list item's source, and each product id it names with its source."""

    source: Source
    ids: Mapping[str, Source]


class CannProducts:
    """The answers over one loaded data file (``doc``: its parsed YAML)."""

    def __init__(self, doc: Mapping[str, Any]) -> None:
        self._notes: Dict[versions.AscendVersion, Tuple[str, _Notes]] = {}
        for entry in doc.get("releases") or ():
            products = entry.get("products")
            if products is None:  # notes without the list: nothing known for this release
                continue
            src = entry["source"]
            where = dict(repo=str(src["repo"]), commit=str(src["commit"]), path=str(src["path"]))
            ids = {str(p["id"]): Source(**where, line=int(p["line"]), name=str(p["name"]))
                   for p in products if p.get("id")}
            release = str(entry["cann"])
            self._notes[versions.cann(release)] = (release, _Notes(Source(**where, line=int(src["line"])), ids))
        self._order = sorted(self._notes)

    def first_release(self, product_id: str) -> Optional[Tuple[str, Source]]:
        """The oldest CANN release whose notes name ``product_id``, with where they do; None if none does."""
        for key in self._order:
            release, notes = self._notes[key]
            if product_id in notes.ids:
                return release, notes.ids[product_id]
        return None

    def listed(self, cann: str, product_id: str) -> Optional[bool]:
        """Whether CANN ``cann``'s notes name ``product_id``; None when that release has no parsed notes
        (or ``cann`` is no version: the matrix stage reports that)."""
        notes = self._of(cann)
        return None if notes is None else product_id in notes.ids

    def source(self, cann: str) -> Optional[Source]:
        """Where CANN ``cann``'s notes list their products; None when that release has no parsed notes."""
        notes = self._of(cann)
        return None if notes is None else notes.source

    def _of(self, cann: str) -> Optional[_Notes]:
        key = versions.lenient("cann", cann)
        found = self._notes.get(key) if key is not None else None
        return found[1] if found else None


@lru_cache(maxsize=None)
def load() -> CannProducts:
    """The shipped data file's answers, read once per process (cached)."""
    return CannProducts(read_yaml(DATA_FILE))


def first_release(product_id: str) -> Optional[Tuple[str, Source]]:
    """`CannProducts.first_release` over the shipped data."""
    return load().first_release(product_id)


def listed(cann: str, product_id: str) -> Optional[bool]:
    """`CannProducts.listed` over the shipped data."""
    return load().listed(cann, product_id)


def source(cann: str) -> Optional[Source]:
    """`CannProducts.source` over the shipped data."""
    return load().source(cann)
