"""The release watcher: which torch_npu releases does the package index have that the knowledge base lacks?

``check`` asks a standard simple index (PEP 691 JSON, else PEP 503 HTML) for the
project's files, groups the wheels by version and, for every version the knowledge
base does not know, reads one wheel's METADATA per arch to learn the torch pin and
Requires-Python. It reads METADATA as cheaply as the index allows:

1. PEP 658/714: the index serves ``<wheel url>.metadata`` (a few KiB);
2. HTTP range requests: the standard ``zipfile`` reads the wheel through a seekable
   file over ``Range`` requests (the tail, the central directory, the METADATA member:
   tens of KiB of a wheel that weighs tens of MiB);
3. the whole wheel, only when the server ignores ``Range`` (the result says so).

The new releases come back as entries in the shape of ``torch_npu_releases.items``
with ``cann: null``: the CANN pairing is a human's call, never a guess. ``write``
inserts them into ``ascend-compat.yaml`` without reformatting the rest of the file,
``propose`` drafts matrix cells for them, ``format_check`` / ``to_dict`` report.

Example:
    >>> from builder import releases
    >>> result = releases.check(releases.default_index_url())     # doctest: +SKIP
    >>> print(releases.format_check(result))                       # doctest: +SKIP
    index: .../simple/torch-npu/ (PEP 691 JSON, api 1.1)
    ...
"""

from __future__ import annotations

from builder.releases.compat_file import insert_entries, write
from builder.releases.entries import build_entry
from builder.releases.http_client import RangeFile
from builder.releases.index import INDEX_URL_ENV, PROJECT, IndexFile, default_index_url
from builder.releases.metadata import MetadataRead
from builder.releases.proposal import default_proposal_path, propose, suggest_cann
from builder.releases.release_check import NewRelease, ReleaseCheck, YankedFile, check
from builder.releases.report import format_check
from builder.releases.wheel_names import WheelName, parse_metadata, parse_wheel_filename, torch_of_pin, torch_pin

__all__ = [
    "INDEX_URL_ENV", "PROJECT", "ReleaseCheck", "NewRelease", "MetadataRead", "YankedFile",
    "IndexFile", "WheelName", "RangeFile", "check", "write", "propose", "format_check", "default_index_url",
    "default_proposal_path", "parse_wheel_filename", "parse_metadata", "torch_pin", "torch_of_pin",
    "suggest_cann", "build_entry", "insert_entries",
]
