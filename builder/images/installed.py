"""Which file each Python step of an image installed, as the build recorded it: for the SBOM.

A lock allows, for each distribution, every file its index offers (a wheel per platform, an
sdist): up to 172 sha256 for one. The build records which one it installed, per step, in
`vocabulary.INSTALLED_DIR` of the image (the Dockerfile's Python steps write it; `read` takes it
out of the built image):

- ``<step>.txt`` for uv's verified steps. uv (pinned, ``uv.txt``) keeps, for each wheel it
  installs, an entry in its cache (``--cache-dir /tmp/uv-cache``, removed before the step ends):
  ``wheels-v*/<index>/.../<name>/<version>-<tags>.http`` (``.rev`` for a file of the wheelhouse),
  which holds the wheel's file name and the sha256 uv checked it against. uv has no report of
  its own, and that entry's layout is uv's, not a published format: the step records each
  entry's path and every 64-hex-digit string in it, one line each (``<path> <hex> <hex> ...``).
  `matched` takes, for a locked distribution, the one recorded sha256 the lock allows for it:
  the entry names the file by its version and tags, and the hash is the file's by construction
  (uv refuses a file whose hash the lock does not allow).
- ``<step>.json`` for pip's unverified step: pip's installation report (``pip install --report``,
  https://pip.pypa.io/en/stable/reference/installation-report/), whose ``install`` items give each
  distribution's name, version, the URL of the file installed and its sha256.

Example:
    >>> lines = "wheels-v8/pypi/six/1.17.0-py2.py3-none-any.http " + "ab" * 32 + "\\n"
    >>> found = matched([Entry("six", "1.17.0", ("ab" * 32, "cd" * 32))], from_uv(lines), {})
    >>> found["six"].file, found["six"].sha256 == "ab" * 32
    ('six-1.17.0-py2.py3-none-any.whl', True)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Protocol, Sequence, Set, Tuple

from packaging.utils import canonicalize_name

from builder.images.lock import Entry
from builder.vocabulary import INSTALLED_DIR

_HEX = re.compile(r"[0-9a-f]{64}")
RECORD_LIMIT = 4 << 20  # a record is a line per distribution


@dataclass(frozen=True)
class Installed:
    """The file a step installed of one distribution: its name and sha256, and which record said so."""

    file: str
    sha256: str
    source: str  # "uv cache entry" or "pip report"


def from_uv(text: str) -> Dict[str, List[Tuple[str, Set[str]]]]:
    """A uv step's record: {canonical name: [(``<version>-<tags>`` of the entry, the sha256s in it)]}."""
    found: Dict[str, List[Tuple[str, Set[str]]]] = {}
    for line in text.splitlines():
        path, _, rest = line.strip().partition(" ")
        parts = path.split("/")
        if len(parts) < 3 or not parts[0].startswith("wheels-v") or not parts[-1].endswith((".http", ".rev")):
            continue
        stem = parts[-1].rsplit(".", 1)[0]
        found.setdefault(canonicalize_name(parts[-2]), []).append((stem, set(_HEX.findall(rest))))
    return found


def _object(parent: Dict, key: str) -> Dict:
    found = parent.get(key)
    return found if isinstance(found, dict) else {}


def from_pip_report(data: object) -> Dict[str, Installed]:
    """pip's installation report (version 1): {canonical name: the file installed and its sha256}."""
    found: Dict[str, Installed] = {}
    items = data.get("install") if isinstance(data, dict) else None
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        metadata, info = _object(item, "metadata"), _object(item, "download_info")
        archive = _object(info, "archive_info")
        hashes = _object(archive, "hashes")
        sha256 = hashes.get("sha256") or str(archive.get("hash") or "").partition("sha256=")[2]
        name, url = metadata.get("name"), str(info.get("url") or "")
        if isinstance(name, str) and isinstance(sha256, str) and _HEX.fullmatch(sha256):
            found[canonicalize_name(name)] = Installed(url.rsplit("/", 1)[-1].split("#")[0], sha256, "pip report")
    return found


def matched(entries: Iterable[Entry], uv: Dict[str, List[Tuple[str, Set[str]]]],
            pip: Dict[str, Installed]) -> Dict[str, Installed]:
    """For each locked distribution, the file the records say was installed: for an entry with
    hashes, the one uv entry whose recorded sha256 the lock allows (none or several: not known);
    for one without (the unverified step), what pip's report says."""
    found: Dict[str, Installed] = {}
    for entry in entries:
        if not entry.hashes:
            if entry.name in pip:
                found[entry.name] = pip[entry.name]
            continue
        allowed = set(entry.hashes)
        hits = {(stem, sha) for stem, shas in uv.get(entry.name, []) for sha in shas & allowed}
        if len({sha for _, sha in hits}) == 1:
            stem, sha = sorted(hits)[0]
            found[entry.name] = Installed(f"{entry.name.replace('-', '_')}-{stem}.whl", sha, "uv cache entry")
    return found


class _Reads(Protocol):
    def read_file(self, ref: str, *paths: str, limit: int = ...) -> Optional[bytes]: ...


def read(engine: _Reads, ref: str, steps: Sequence[Tuple[str, bool]], entries: Iterable[Entry]) -> Dict[str, Installed]:
    """What image ``ref`` recorded of its Python ``steps`` ((step name, verified), ...), matched to
    the lock's ``entries``; {} for an image without records (built before they were made)."""
    uv: Dict[str, List[Tuple[str, Set[str]]]] = {}
    pip: Dict[str, Installed] = {}
    for step, verified in steps:
        raw = engine.read_file(ref, f"{INSTALLED_DIR}/{step}.{'txt' if verified else 'json'}", limit=RECORD_LIMIT)
        if raw is None:
            continue
        if verified:
            for name, seen in from_uv(raw.decode("utf-8", errors="replace")).items():
                uv.setdefault(name, []).extend(seen)
        else:
            try:
                pip.update(from_pip_report(json.loads(raw)))
            except ValueError:
                continue
    return matched(entries, uv, pip)
