"""One wheel's METADATA, read as cheaply as the index allows: PEP 658 file, HTTP range reads, or the whole wheel."""

from __future__ import annotations

import hashlib
import io
import zipfile
import zlib
from dataclasses import dataclass
from typing import Mapping, Sequence, Tuple

from packaging.utils import canonicalize_name

from builder.errors import UserError
from builder.build.releases.http_client import _fail, _Http, _NoRanges
from builder.build.releases.index import IndexFile
from builder.build.releases.remote_zip import RemoteZip
from builder.build.releases.wheels import WheelName, _normal, parse_metadata, torch_pin

# Metadata methods, as reported per wheel.
PEP658, RANGE, DOWNLOAD = "pep658", "range", "download"
_METHOD_TEXT = {PEP658: "PEP 658 .metadata", RANGE: "HTTP range reads", DOWNLOAD: "downloading the whole wheel"}


@dataclass
class MetadataRead:
    """What one wheel's METADATA said, and how it was read (``pep658`` | ``range`` | ``download``)."""

    filename: str
    arch: str
    method: str
    bytes_fetched: int
    requires_dist: Tuple[str, ...]
    torch_pin: str
    requires_python: str
    note: str = ""


def _is_metadata_member(name: str, wheel: WheelName) -> int:
    """0 = not METADATA; 2 = the wheel's own ``<name>-<version>.dist-info/METADATA``; 1 = another one."""
    folder, _, leaf = name.rpartition("/")
    if leaf != "METADATA" or not folder.endswith(".dist-info") or "/" in folder:
        return 0
    return 2 if canonicalize_name(folder[: -len(".dist-info")].rsplit("-", 1)[0]) == canonicalize_name(wheel.name) else 1


def _verify_hash(url: str, body: bytes, hashes: Mapping[str, str]) -> None:
    for name, expected in hashes.items():
        if name in hashlib.algorithms_guaranteed:
            if hashlib.new(name, body).hexdigest() != expected.lower():
                raise _fail(url, f"{name} of the download does not match the index ({expected})",
                            "the index or a proxy serves a corrupted file; try again or use another mirror")
            return


def _metadata_pep658(http: _Http, file: IndexFile) -> bytes:
    url = file.url + ".metadata"
    _, _, body, _ = http.get(url)
    _verify_hash(url, body, file.metadata or {})
    return body


def _metadata_download(http: _Http, file: IndexFile, wheel: WheelName) -> bytes:
    _, _, body, _ = http.get(file.url)
    _verify_hash(file.url, body, file.hashes)
    try:
        with zipfile.ZipFile(io.BytesIO(body)) as archive:
            name = _pick_member(archive.namelist(), wheel, file.url)
            return archive.read(name)
    except (zipfile.BadZipFile, zlib.error, NotImplementedError, RuntimeError) as exc:
        raise _fail(file.url, f"malformed wheel: {exc}") from None


def _pick_member(names: Sequence[str], wheel: WheelName, url: str) -> str:
    ranked = sorted(((_is_metadata_member(n, wheel), n) for n in names), reverse=True)
    if not ranked or ranked[0][0] == 0:
        raise _fail(url, "malformed wheel: no .dist-info/METADATA inside")
    return ranked[0][1]


def read_metadata(http: _Http, file: IndexFile, wheel: WheelName) -> MetadataRead:
    """One wheel's METADATA by the cheapest way the index allows (PEP 658, ranges, download).

    Example:
        >>> read_metadata(_Http(5), file, parse_wheel_filename(file.filename)).method   # doctest: +SKIP
        'pep658'
    """
    before, notes = http.bytes_fetched, []
    raw, method = None, PEP658
    if file.metadata is not None:
        try:
            raw = _metadata_pep658(http, file)
        except UserError as exc:
            if "HTTP 404" not in exc.message:
                raise
            notes.append("the index advertised a .metadata file but had none")
    if raw is None:
        try:
            method = RANGE
            raw = RemoteZip(http, file.url).read(lambda n: _is_metadata_member(n, wheel))[1]
        except _NoRanges:
            method = DOWNLOAD  # ReleaseCheck.full_downloads and the report say so
            raw = _metadata_download(http, file, wheel)
    name, version, requires, requires_python = parse_metadata(raw.decode("utf-8", "replace"))
    if canonicalize_name(name) != canonicalize_name(wheel.name) or _normal(version) != wheel.version:
        notes.append(f"METADATA names {name} {version}, the file name {wheel.name} {wheel.version}")
    return MetadataRead(
        filename=file.filename, arch=wheel.arch or "", method=method, bytes_fetched=http.bytes_fetched - before,
        requires_dist=requires, torch_pin=torch_pin(requires), requires_python=requires_python, note="; ".join(notes),
    )
