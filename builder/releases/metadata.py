"""One wheel's METADATA, read as cheaply as the index allows: PEP 658 file, HTTP range reads, or the whole wheel."""

from __future__ import annotations

import hashlib
import io
import struct
import zipfile
import zlib
from dataclasses import dataclass
from typing import Mapping, Protocol, Tuple

from packaging.utils import canonicalize_name

from builder.errors import UserError
from builder.releases.http_client import Http, NoRanges, RangeFile, url_error
from builder.releases.index import IndexFile
from builder.releases.wheel_names import WheelName, normal_version, parse_metadata, torch_pin
from builder.releases.wheel_names import parse_wheel_filename  # noqa: F401  (used by the examples)

# Metadata methods, as reported per wheel.
PEP658, RANGE, DOWNLOAD = "pep658", "range", "download"
METHOD_TEXT = {PEP658: "PEP 658 .metadata", RANGE: "HTTP range reads", DOWNLOAD: "downloading the whole wheel"}
# A METADATA file is a few KiB; more than this is a broken or hostile wheel (a zip
# bomb inflates a few KiB to GiB), refused before it can fill memory.
METADATA_MAX = 1 << 20


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


def read_metadata(http: Http, file: IndexFile, wheel: WheelName) -> MetadataRead:
    """One wheel's METADATA by the cheapest way the index allows (PEP 658, ranges, download).

    Example:
        >>> read_metadata(Http(5), file, parse_wheel_filename(file.filename)).method   # doctest: +SKIP
        'pep658'
    """
    before, notes = http.bytes_fetched, []
    raw, method = None, PEP658
    if file.metadata is not None:
        try:
            raw = metadata_pep658(http, file)
        except UserError as exc:
            if "HTTP 404" not in exc.message:
                raise
            notes.append("the index advertised a .metadata file but had none")
    if raw is None:
        try:
            method = RANGE
            raw = metadata_of_zip(RangeFile(http, file.url), wheel, file.url)
        except NoRanges:
            method = DOWNLOAD  # ReleaseCheck.full_downloads and the report say so
            _, _, body, _ = http.get(file.url)
            _verify_hash(file.url, body, file.hashes)
            raw = metadata_of_zip(io.BytesIO(body), wheel, file.url)
    name, version, requires, requires_python = parse_metadata(raw.decode("utf-8", "replace"))
    if canonicalize_name(name) != canonicalize_name(wheel.name) or normal_version(version) != wheel.version:
        notes.append(f"METADATA names {name} {version}, the file name {wheel.name} {wheel.version}")
    return MetadataRead(
        filename=file.filename, arch=wheel.arch or "", method=method, bytes_fetched=http.bytes_fetched - before,
        requires_dist=requires, torch_pin=torch_pin(requires), requires_python=requires_python, note="; ".join(notes),
    )


class ZipSource(Protocol):
    """What zipfile reads an archive from: an open file, a BytesIO, a RangeFile."""

    def seek(self, offset: int, whence: int = 0, /) -> int: ...

    def read(self, n: int = -1, /) -> bytes: ...

    def tell(self) -> int: ...


def metadata_of_zip(fileobj: ZipSource, wheel: WheelName, url: str) -> bytes:
    """The wheel's ``.dist-info/METADATA`` member: inflated, CRC-checked, at most METADATA_MAX bytes.

    zipfile reads only the zip's directory and that member, so over a RangeFile the
    rest of the wheel is never fetched. Anything zipfile refuses is a UserError
    naming ``url``.

    Example:
        >>> w = parse_wheel_filename("torch_npu-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl")
        >>> data = io.BytesIO()
        >>> with zipfile.ZipFile(data, "w", zipfile.ZIP_DEFLATED) as z:
        ...     z.writestr("torch_npu/__init__.py", "")
        ...     z.writestr("torch_npu-2.15.0.dist-info/METADATA", "Name: torch_npu\\nVersion: 2.15.0\\n")
        >>> metadata_of_zip(data, w, "http://127.0.0.1/t.whl")
        b'Name: torch_npu\\nVersion: 2.15.0\\n'
    """
    try:
        archive = zipfile.ZipFile(fileobj)
    except (zipfile.BadZipFile, EOFError, ValueError, OverflowError, struct.error, OSError) as exc:  # odd zip64 fields too
        raise url_error(url, f"malformed wheel: no zip end-of-central-directory record or central directory "
                             f"could be read ({exc})") from None
    with archive:
        name = max(archive.namelist(), key=lambda n: (_metadata_rank(n, wheel), n), default="")
        if not _metadata_rank(name, wheel):
            raise url_error(url, "malformed wheel: no .dist-info/METADATA inside")
        declared, data = archive.getinfo(name).file_size, b""
        try:
            if declared <= METADATA_MAX:  # a larger one is refused unread
                with archive.open(name) as member:
                    data = member.read(METADATA_MAX + 1)  # zipfile inflates at most this much
        except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError, OverflowError,
                struct.error, ValueError) as exc:
            raise url_error(url, f"malformed wheel: {name}: {exc}") from None
        if max(declared, len(data)) > METADATA_MAX:
            raise url_error(url, f"malformed wheel: {name} inflates to more than {METADATA_MAX} bytes; refused",
                            "a METADATA file is a few KiB; report the wheel to its publisher")
        return data


def _metadata_rank(name: str, wheel: WheelName) -> int:
    """0 = not METADATA; 2 = the wheel's own ``<name>-<version>.dist-info/METADATA``; 1 = another one."""
    folder, _, leaf = name.rpartition("/")
    if leaf != "METADATA" or not folder.endswith(".dist-info") or "/" in folder:
        return 0
    return 2 if canonicalize_name(folder[: -len(".dist-info")].rsplit("-", 1)[0]) == canonicalize_name(wheel.name) else 1


def _verify_hash(url: str, body: bytes, hashes: Mapping[str, str]) -> None:
    for name, expected in hashes.items():
        if name in hashlib.algorithms_guaranteed:
            if hashlib.new(name, body).hexdigest() != expected.lower():
                raise url_error(url, f"{name} of the download does not match the index ({expected})",
                                "the index or a proxy serves a corrupted file; try again or use another mirror")
            return


def metadata_pep658(http: Http, file: IndexFile) -> bytes:
    """A wheel's PEP 658 ``.metadata`` file, checked against the hash the index lists for it."""
    url = file.url + ".metadata"
    _, _, body, _ = http.get(url)
    _verify_hash(url, body, file.metadata or {})
    return body
