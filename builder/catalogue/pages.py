"""The catalogue as a static site: ``index.html`` (every image), one page per CANN release, chip and
arch (``cann-8.0.RC3.html``, ``chip-910b.html``, ``arch-aarch64.html``), and ``catalogue.json``.

No page needs JavaScript: the filters are pages of their own, linked from every page, and each
image and CANN group has an anchor. Jinja2 renders them with autoescaping on, so a label, a tag or
a refusal read from a registry is text on the page, never markup. The same catalogue gives the
same bytes: everything is sorted, and no time is written unless the catalogue was given one.

Example:
    >>> page_name("cann", "8.0.RC3"), page_name("chip", "../x")
    ('cann-8.0.RC3.html', 'chip--d6b96a97d147daaa.html')
    >>> size(1536), size(3 * 1024 ** 3), seconds(2.25), seconds(None)
    ('1.5 KiB', '3.0 GiB', '2.2 s', '')
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import jinja2

from builder import writes
from builder.catalogue.collect import Catalogue, Missing, Refused, Validated, order, unique_bytes
from builder.errors import UserError
from builder.sizes import size
from builder.vocabulary import CPU, NPU

TEMPLATES = Path(__file__).resolve().parent / "templates"
JSON_NAME = "catalogue.json"
INDEX = "index.html"
FILTERS = (("cann", "CANN"), ("chip", "Chip"), ("arch", "Arch"))
# what the statement's ranOn.kind means, said for a reader
RAN_ON = {"npu-host": "an NPU host (its device tiers ran on NPUs)",
          "cpu-twin": "the CPU twin on a build machine (no NPU: the same closure on CPU)",
          "emulated": "the CPU twin under emulation (qemu) on a build machine",
          "stand-in": "a stand-in twin on another OS than its cell's"}
VARIANT_NAMES = {NPU: "NPU image", CPU: "CPU twin"}
_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def page_name(kind: str, value: str) -> str:
    """The file of the page of ``kind`` = ``value``: the value itself when it is a plain name, else a
    hash of it (a value read from a registry never names a path)."""
    if _PLAIN.fullmatch(value) and ".." not in value:
        return f"{kind}-{value}.html"
    return f"{kind}--{hashlib.sha256(value.encode()).hexdigest()[:16]}.html"


def seconds(value: Optional[float]) -> str:
    return "" if value is None else f"{value:.1f} s"


@dataclass(frozen=True)
class Group:
    cann: str
    anchor: str
    images: Tuple[Validated, ...]


@dataclass(frozen=True)
class Page:
    name: str
    title: str
    heading: str
    validated: Tuple[Validated, ...]
    missing: Tuple[Missing, ...]
    refused: Tuple[Refused, ...]

    @property
    def groups(self) -> List[Group]:
        cans: Dict[str, List[Validated]] = {}
        for image in self.validated:  # in the catalogue's order: newest CANN first
            cans.setdefault(image.cann, []).append(image)
        return [Group(cann, "cann-" + hashlib.sha256(cann.encode()).hexdigest()[:12], tuple(images))
                for cann, images in cans.items()]

    @property
    def total_bytes(self) -> int:
        return sum(v.compressed_bytes for v in self.validated)

    @property
    def unique_bytes(self) -> int:
        return unique_bytes(self.validated)


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                                     undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                                     keep_trailing_newline=True)
    environment.filters.update(size=size, seconds=seconds)
    return environment


def _values(catalogue: Catalogue, kind: str) -> List[Tuple[str, str]]:
    """(value, page file) of every ``kind`` value an image or a missing cell has, in the catalogue's order."""
    rows = [(v.cann, v.chip, v.arch) for v in catalogue.validated] + [(m.cann, m.chip, m.arch) for m in catalogue.missing]
    position = [name for name, _ in FILTERS].index(kind)
    values = {row[position] for row in rows} - {""}
    ordered = sorted(values, key=lambda v: order(v, "", "", "", NPU) if kind == "cann" else (v,))
    return [(v, page_name(kind, v)) for v in ordered]


def _page(catalogue: Catalogue, kind: str, value: str) -> Page:
    label = dict(FILTERS)[kind]
    return Page(page_name(kind, value), f"{label} {value}: validated images", f"{label} {value}",
                tuple(v for v in catalogue.validated if getattr(v, kind) == value),
                tuple(m for m in catalogue.missing if getattr(m, kind) == value), ())


def render(catalogue: Catalogue) -> Dict[str, bytes]:
    """Every file of the site, by name."""
    template = _environment().get_template("page.html.j2")
    filters = [{"label": label, "choices": _values(catalogue, kind)} for kind, label in FILTERS]
    pages = [Page(INDEX, "Validated images", "Every image", catalogue.validated, catalogue.missing, catalogue.refused)]
    pages += [_page(catalogue, kind, value) for kind, _ in FILTERS for value, _ in _values(catalogue, kind)]
    files = {page.name: template.render(catalogue=catalogue, page=page, filters=filters, ran_on=RAN_ON,
                                        variant_names=VARIANT_NAMES, cpu=CPU, index=INDEX,
                                        json_name=JSON_NAME).encode() for page in pages}
    files[JSON_NAME] = (json.dumps(catalogue.to_dict(), indent=2, sort_keys=True) + "\n").encode()
    return files


def write(folder: Path, files: Dict[str, bytes]) -> None:
    """Put the site in ``folder`` whole: staged beside it, then renamed into place. A folder there
    already is replaced only when it is an earlier catalogue (it holds catalogue.json) or empty;
    anything else there (a file, a link, a folder of other files) is refused, untouched."""
    folder = Path(folder)
    if folder.is_symlink() or (folder.exists() and (not folder.is_dir() or (
            any(folder.iterdir()) and not (folder / JSON_NAME).is_file()))):
        raise UserError(f"{folder} is there and is no catalogue (no {JSON_NAME} in it): nothing was written",
                        exit_code=2, fix="give --out a new folder, or the folder of an earlier catalogue")
    try:
        staged = writes.stage_folder(folder)
        written = [writes.stage_in(staged, name, data) for name, data in sorted(files.items())]
        writes.flush([*written, staged])
        old = folder.with_name(f".{folder.name}.old{writes.TMP_SUFFIX}")
        if folder.exists():
            if old.exists():
                shutil.rmtree(old)
            os.rename(folder, old)
        os.rename(staged, folder)
        if old.exists():
            shutil.rmtree(old)
    except OSError as exc:
        raise writes.write_error(exc, folder) from None


def site(catalogue: Catalogue, folder: Path) -> Sequence[str]:
    """Render ``catalogue`` and write it to ``folder``; the names of the files written."""
    files = render(catalogue)
    write(folder, files)
    return sorted(files)
