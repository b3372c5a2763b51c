"""An OCI image layout on disk (a folder a team carries into an air-gapped site): read and written.

The folder is what the OCI image-layout spec (image-spec ``image-layout.md``) describes:

- ``oci-layout``: ``{"imageLayoutVersion": "1.0.0"}``;
- ``blobs/sha256/<hex>``: every blob and every manifest, named by the sha256 of its bytes;
- ``index.json``: an image index whose entries are the layout's tags, each a manifest
  descriptor annotated with the OCI ``ref.name`` annotation (`REF_NAME`) = the tag (cosign's
  ``sha256-<hex>.att`` tags are entries too, so the statements travel with the images).

Every entry of ``index.json`` has an OCI media type, since common readers of a layout (skopeo and
the containers/image library under it, 1.9.3) pass over an entry of any other type: "no descriptor
found for reference". A Docker image manifest or manifest list (what ``docker push`` writes) keeps
its bytes, since its digest is what the signed statements name; its tag's entry names a **wrapper**
instead, an OCI image index this layout writes (`WRAPS`): for an image, one entry, that image with
its platform from its config; for a list, the list's own entries. A reader of the layout finds the
OCI index, picks the image for its platform by digest, and reads its Docker type from the manifest
itself, so ``skopeo copy oci:FOLDER:TAG docker://...`` writes the very manifest the statements are
about. `Layout.manifest` reads a wrapped tag as the manifest it wraps, so ``mirror`` copies out of
the layout what went in, digests and all.

A blob is written under a temporary name beside its place, hashed while it is written, and
renamed into place only when its sha256 and size are the ones named: a blob file that is there
is whole. ``index.json`` is replaced whole (`builder.writes.replace_file`), after the blobs it
names. It reads like the registry client (`manifest`, `blob`), so `builder.trust.attached.verify`
checks statements in a layout exactly as in a registry.

Example:
    >>> import tempfile
    >>> layout = Layout(Path(tempfile.mkdtemp()) / "mirror", create=True)
    >>> body = b'{"schemaVersion": 2, "layers": []}'
    >>> digest = layout.put_manifest(body, "application/vnd.oci.image.manifest.v1+json", tag="v1")
    >>> layout.tags(), layout.manifest("any", "v1").digest == digest
    (['v1'], True)
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import stat
import re
from pathlib import Path
from typing import BinaryIO, Callable, ContextManager, Dict, Iterator, List, Optional

from builder import bounded, documents, writes
from builder.errors import UserError
from builder.vocabulary import LABEL_PREFIX, OCI_PREFIX
from builder.registry import (CONFIG_LIMIT, DOCKER_LIST, DOCKER_MANIFEST, MANIFEST_LIMIT, OCI_INDEX, TAG_GRAMMAR, BadBlob,
                              Checked, Manifest)

LAYOUT_FILE = "oci-layout"
LAYOUT_VERSION = "1.0.0"
INDEX_FILE = "index.json"
REF_NAME = OCI_PREFIX + "ref.name"  # image-spec annotations.md
WRAPS = LABEL_PREFIX + "layout.wraps"  # on a wrapper index: the digest of the Docker manifest or list it stands for
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_TMP = ".partial-"  # a blob being written: blobs/sha256/.partial-<hex>


class Layout:
    """One OCI image layout folder. ``create``: make it when it is not there (a destination)."""

    def __init__(self, folder: Path, create: bool = False):
        self.folder = Path(folder)
        self.name = f"oci:{self.folder}"
        marker = self.folder / LAYOUT_FILE
        if not marker.is_file():
            if not create:
                raise UserError(f"{self.folder} is not an OCI image layout (it has no {LAYOUT_FILE} file)",
                                exit_code=2, fix="name a folder `ascend-build mirror REGISTRY/REPO oci:FOLDER` wrote")
            if self.folder.exists() and any(self.folder.iterdir()):
                raise UserError(f"{self.folder} is neither empty nor an OCI image layout", exit_code=2,
                                fix="name an empty or new folder for the layout")
            try:
                (self.folder / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise writes.write_error(exc, self.folder, "nothing was written") from None
            writes.replace_file(self.folder / INDEX_FILE, _index_json([]))
            writes.replace_file(marker, json.dumps({"imageLayoutVersion": LAYOUT_VERSION}).encode())
        for folder in (self.folder / "blobs", self.folder / "blobs" / "sha256"):
            if folder.is_symlink() or not folder.is_dir():  # a link would send the blobs elsewhere
                raise UserError(f"{folder} is {'a link' if folder.is_symlink() else 'no folder'}: a layout's blobs "
                                "live in a folder of its own", exit_code=1,
                                fix="remove it, or name another folder for the layout")
        version = self._json(marker, 4096).get("imageLayoutVersion")
        if version != LAYOUT_VERSION:
            raise UserError(f"{marker}: imageLayoutVersion {version!r}, not {LAYOUT_VERSION}", exit_code=1,
                            fix="this tool reads layouts of the OCI image-layout spec 1.0.0")

    # --- reading ------------------------------------------------------------------------------------

    def _json(self, path: Path, limit: int) -> dict:
        try:
            data = documents.load_json(bounded.read_file(path, limit + 1), str(path))
        except (OSError, ValueError) as exc:
            raise UserError(f"{path}: cannot be read as JSON ({exc})", exit_code=1,
                            fix="the layout is damaged: write it again with `ascend-build mirror`") from None
        if not isinstance(data, dict):
            raise UserError(f"{path}: not a JSON object", exit_code=1, fix="the layout is damaged: write it again")
        return data

    def entries(self) -> List[dict]:
        """``index.json``'s manifest descriptors."""
        listed = self._json(self.folder / INDEX_FILE, MANIFEST_LIMIT).get("manifests") or []
        return [e for e in listed if isinstance(e, dict) and isinstance(e.get("digest"), str)
                and _DIGEST.match(e["digest"])] if isinstance(listed, list) else []

    def tags(self) -> List[str]:
        """The tags ``index.json`` names; one that is no tag of the distribution grammar (``../x``,
        a ``?`` or a line break: it would be sent into a registry's URL) is refused, naming it."""
        found = sorted({str(e["annotations"][REF_NAME]) for e in self.entries()
                        if isinstance(e.get("annotations"), dict) and e["annotations"].get(REF_NAME)})
        for tag in found:
            if not TAG_GRAMMAR.fullmatch(tag):
                raise UserError(f"{self.folder / INDEX_FILE} names the tag {tag[:80]!r}, which is no tag "
                                "(letters, digits, '_', '.', '-', at most 128, not starting with '.' or '-')",
                                exit_code=1, fix="the layout is damaged or was altered: write it again with "
                                                 "`ascend-build mirror`")
        return found

    def path(self, digest: str) -> Path:
        if not _DIGEST.match(digest):
            raise UserError(f"{digest!r} is not a sha256 digest", exit_code=1, fix="the layout is damaged")
        return self.folder / "blobs" / "sha256" / digest.split(":", 1)[1]

    def manifest(self, repository: str, reference: str) -> Manifest:
        """The manifest a tag of ``index.json`` (or a digest) names, checked against its digest;
        LookupError when there is none. A tag whose entry is a wrapper (`WRAPS`) names the manifest
        it wraps. ``repository`` is ignored: a layout holds one."""
        if reference.startswith("sha256:"):
            return self._manifest(reference)
        named = [e for e in self.entries()
                 if isinstance(e.get("annotations"), dict) and e["annotations"].get(REF_NAME) == reference]
        if not named:
            raise LookupError(reference)
        found = self._manifest(named[-1]["digest"])
        wrapped = found.data.get("annotations", {}).get(WRAPS) if isinstance(found.data.get("annotations"), dict) else None
        if not found.is_index or not isinstance(wrapped, str):
            return found
        inner = self._manifest(wrapped)
        if self._wrapper(inner) != found.body:  # a reader of the OCI index would see other images than this tag names
            raise UserError(f"{self.folder / INDEX_FILE}: the tag {reference} names {inner.digest} through an index "
                            f"({found.digest}) that lists other manifests", exit_code=1,
                            fix="the layout is damaged or was altered: write it again with `ascend-build mirror`")
        return inner

    def _manifest(self, digest: str) -> Manifest:
        body = self.blob("", digest, MANIFEST_LIMIT)
        data = documents.load_json(body, f"{self.name}@{digest}")
        if not isinstance(data, dict):
            raise UserError(f"{self.name}@{digest} is not a JSON manifest", exit_code=1, fix="the layout is damaged")
        return Manifest(digest, str(data.get("mediaType", "")), body, data)

    def _wrapper(self, manifest: Manifest) -> bytes:
        """The OCI image index that names a Docker image manifest or manifest list in ``index.json``
        (see the module's docstring): the same bytes for the same manifest."""
        if manifest.media_type == DOCKER_LIST:
            listed = manifest.data.get("manifests")
            entries = listed if isinstance(listed, list) else []
        else:
            entry: Dict = {"mediaType": manifest.media_type, "digest": manifest.digest, "size": len(manifest.body)}
            platform = self._platform(manifest)
            if platform:
                entry["platform"] = platform
            entries = [entry]
        return (json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries,
                            "annotations": {WRAPS: manifest.digest}}, indent=2, sort_keys=True) + "\n").encode()

    def _platform(self, manifest: Manifest) -> Dict[str, str]:
        """An image's platform as its config says it (``architecture``, ``os``, ``variant``), which a
        reader of the wrapper matches against its own; {} when the config does not say."""
        config = manifest.data.get("config")
        digest = config.get("digest") if isinstance(config, dict) else None
        try:
            data = documents.load_json(self.blob("", digest), f"the config {digest}") if isinstance(digest, str) else None
        except (LookupError, ValueError):
            return {}
        if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in ("architecture", "os")):
            return {}
        return {k: data[k] for k in ("architecture", "os", "variant") if isinstance(data.get(k), str) and data[k]}

    def blob(self, repository: str, digest: str, limit: int = CONFIG_LIMIT) -> bytes:
        """The blob ``digest``, at most ``limit`` bytes, checked against its digest; LookupError if absent."""
        try:
            body = bounded.read_file(self.path(digest), limit + 1)
        except FileNotFoundError:
            raise LookupError(digest) from None
        except OSError as exc:
            raise UserError(f"{self.name}: cannot read the blob {digest} ({exc})", exit_code=1,
                            fix="check the layout folder") from None
        if len(body) > limit or "sha256:" + hashlib.sha256(body).hexdigest() != digest:
            raise UserError(f"{self.name}: the blob {digest} does not hash to its digest", exit_code=1,
                            fix="the layout is damaged: write it again with `ascend-build mirror`")
        return body

    def has_blob(self, digest: str, size: int) -> bool:
        """Whether the blob is there whole: a regular file of that size whose bytes hash to the digest
        (a file planted under the name, of the right size, is no blob of it)."""
        path = self.path(digest)
        try:
            if path.is_symlink() or not path.is_file() or path.stat().st_size != size:
                return False
            made = hashlib.sha256()
            with open(path, "rb") as stream:
                for chunk in iter(lambda: stream.read(bounded.CHUNK), b""):
                    made.update(chunk)
            return "sha256:" + made.hexdigest() == digest
        except FileNotFoundError:
            return False

    @contextlib.contextmanager
    def open_blob(self, digest: str, size: int) -> Iterator[Checked]:
        """The blob as a `Checked` stream; LookupError when it is not there. Only a regular file is
        opened (without blocking: a FIFO under a blob's name is refused, never waited on)."""
        try:
            fd = os.open(self.path(digest), os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError:
            raise LookupError(digest) from None
        except OSError as exc:
            raise UserError(f"{self.name}: cannot read the blob {digest} ({exc.strerror or exc})", exit_code=1,
                            fix="check the layout folder") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise UserError(f"{self.name}: the blob {digest} is not a regular file (a FIFO, a device or a folder)",
                            exit_code=1, fix="the layout is damaged: write it again with `ascend-build mirror`")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as stream:
            yield Checked(stream, digest, size, f"{self.name}@{digest}")

    # --- writing ------------------------------------------------------------------------------------

    def put_blob(self, digest: str, size: int, source: Callable[[], ContextManager[BinaryIO]]) -> int:
        """Write the blob from ``source()`` unless it is there; the bytes written (0 when it was).
        A full disk or any failed write leaves no partial blob and raises `UserError`."""
        final = self.path(digest)
        if self.has_blob(digest, size):
            return 0
        partial = final.with_name(_TMP + final.name)
        try:
            out = writes.stream_to(partial, mode=0o644)  # a link planted under the name goes, its target untouched
            with out, source() as stream:
                checked = stream if isinstance(stream, Checked) else Checked(stream, digest, size, digest)
                while True:
                    chunk = checked.read(bounded.CHUNK)
                    if not chunk:
                        break
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            os.replace(partial, final)
        except OSError as exc:
            partial.unlink(missing_ok=True)
            raise writes.write_error(exc, final, "no part of this blob was kept") from None
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        return size

    def put_manifest(self, body: bytes, media_type: str, tag: Optional[str] = None) -> str:
        """Write a manifest's bytes as a blob, and with ``tag`` name it in ``index.json`` (the one
        there under that tag replaced): a Docker manifest or list through its wrapper, after the
        blobs of an image (its config gives the platform); its digest."""
        digest = self._put_bytes(body)
        if tag is not None:
            named, named_type = body, media_type
            if media_type in (DOCKER_MANIFEST, DOCKER_LIST):
                data = documents.load_json(body, f"the manifest {digest}")
                named = self._wrapper(Manifest(digest, media_type, body, data if isinstance(data, dict) else {}))
                named_type = OCI_INDEX
                self._put_bytes(named)
            entry: Dict = {"mediaType": named_type, "digest": "sha256:" + hashlib.sha256(named).hexdigest(),
                           "size": len(named), "annotations": {REF_NAME: tag}}
            kept = [e for e in self.entries()
                    if not (isinstance(e.get("annotations"), dict) and e["annotations"].get(REF_NAME) == tag)]
            if entry not in kept:
                writes.replace_file(self.folder / INDEX_FILE, _index_json(sorted(
                    kept + [entry], key=lambda e: str((e.get("annotations") or {}).get(REF_NAME, "")))))
        return digest

    def _put_bytes(self, body: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        if not self.has_blob(digest, len(body)):
            self.put_blob(digest, len(body), lambda: contextlib.nullcontext(io.BytesIO(body)))
        return digest


def _index_json(manifests: List[dict]) -> bytes:
    return (json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests}, indent=2) + "\n").encode()


__all__ = ["Layout", "BadBlob", "LAYOUT_FILE", "INDEX_FILE", "REF_NAME", "WRAPS"]
