"""Copy validated images by digest, with every statement attached to them, to another registry
or an OCI image layout on disk, and from such a layout into a registry (`ascend-build mirror`).

What is copied, per selected tag: the manifest it names (an index and each arch's image, or one
image), every blob they name (config and layers), cosign's ``sha256-<hex>.att`` manifest of
each of them with its blobs (the DSSE envelopes), and each of them's referrers (the Sigstore
bundle manifests and the ``.att`` manifests listed by the source's referrers API, or else by its
``sha256-<hex>`` fallback index: `builder.trust.attached.refer`) with their blobs. In this order,
so that no tag ever names an image on the destination whose statements did not come along:

1. with a key, every selected image's statements are checked at the source (`builder.trust.policy.
   decide`, the one trust decision): one that is not trusted stops the run before any copy;
2. blobs: skipped when the destination holds them (a HEAD), mounted when source and
   destination are repositories of one registry (cross-repository mount: no byte sent), else
   streamed (never held in memory; the sha256 checked as the bytes pass);
3. the image manifests, by digest (each arch's, then the index), then the ``.att`` manifests,
   then the referrers, by digest;
4. on the destination: each ``.att`` manifest must be the very one of the source, and with a key
   the same trust decision must pass there;
5. on a destination without the referrers API (a registry answering 404 there, or a layout), the
   referrers copied are added to its fallback index of each image, so a referrers client finds
   them there too (a registry with the API lists them by their ``subject``);
6. only then the tags (the index's tag, the arch tags).

A failure stops the run with a `UserError` naming the image and what was and was not copied;
a run again skips what is there, so an unchanged selection moves no blob byte.

Example:
    >>> matches({Label.CANN: "8.0.RC3", Label.CHIP: "910b"}, Selection(cann="8.0.RC3"))
    True
    >>> matches({Label.CANN: "8.0.RC3"}, Selection(chip="a3"))
    False
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import BinaryIO, Callable, ContextManager, Dict, List, Optional, Sequence, Set, Tuple

from builder import documents
from builder.errors import UserError
from builder.node.oci_layout import Layout
from builder.registry import CONFIG_LIMIT, OCI_INDEX, Manifest, Reader, Registry, config_labels
from builder.trust import policy
from builder.trust import attached, variant
from builder.trust.attached import attestation_tag, is_attached_tag
from builder.trust.signing import PublicKey
from builder.vocabulary import Label

LAYOUT_PREFIX = "oci:"


@dataclass(frozen=True)
class Selection:
    """Which images: each filter given must match one of an image's (or an index's arch images') labels."""

    cann: Optional[str] = None
    chip: Optional[str] = None
    cells: Tuple[str, ...] = ()


def matches(labels: Dict[str, str], selection: Selection) -> bool:
    if selection.cann and labels.get(Label.CANN) != selection.cann:
        return False
    if selection.chip and labels.get(Label.CHIP) != selection.chip:
        return False
    return not selection.cells or labels.get(Label.CELL) in selection.cells


# --- the two kinds of place ---------------------------------------------------------------------------

class Place:
    """A repository of a registry, or an OCI image layout: what `mirror` reads from and writes to."""

    name: str
    reader: Reader        # for `builder.trust.policy.decide`
    repository: str       # as the reader expects it

    def tags(self) -> List[str]:
        raise NotImplementedError

    def manifest(self, reference: str) -> Manifest:
        return self.reader.manifest(self.repository, reference)

    def has_manifest(self, digest: str) -> bool:
        try:
            self.manifest(digest)
        except LookupError:
            return False
        return True

    def open_blob(self, digest: str, size: int) -> ContextManager[BinaryIO]:
        raise NotImplementedError

    def put_blob(self, digest: str, size: int, source: Callable[[], ContextManager[BinaryIO]],
                 origin: "Place") -> Tuple[int, str]:
        """(bytes sent, how: "there", "mounted" or "sent")."""
        raise NotImplementedError

    def put_manifest(self, reference: str, manifest: Manifest) -> None:
        raise NotImplementedError

    def referrers(self, digest: str) -> List[dict]:
        """The descriptors listed as ``digest``'s referrers: by the referrers API where there is
        one, else by the fallback index under `attached.referrers_tag` ([] when neither lists any)."""
        try:
            return attached.listed_referrers(self.manifest(attached.referrers_tag(digest)))
        except LookupError:
            return []

    def refer(self, subject: str, referrers: Sequence[dict]) -> bool:
        """List ``referrers`` among ``subject``'s where they are not found by the API (the fallback
        index, as `attached.refer` keeps it); whether an index was put."""
        raise NotImplementedError


class RegistryPlace(Place):
    def __init__(self, registry: Registry, repository: str):
        self.registry, self.reader, self.repository = registry, registry, repository
        self.name = f"{registry.name}/{repository}"

    def tags(self) -> List[str]:
        return self.registry.tags(self.repository)

    def open_blob(self, digest: str, size: int) -> ContextManager[BinaryIO]:
        return self.registry.open_blob(self.repository, digest, size)  # type: ignore[return-value]

    def put_blob(self, digest, size, source, origin) -> Tuple[int, str]:
        if self.registry.has_blob(self.repository, digest):
            return 0, "there"
        same = isinstance(origin, RegistryPlace) and origin.registry.host == self.registry.host
        mount_from = origin.repository if same and origin.repository != self.repository else None
        sent = self.registry.put_blob_stream(self.repository, digest, size, source, mount_from)
        return sent, "sent" if sent else "mounted"

    def put_manifest(self, reference: str, manifest: Manifest) -> None:
        self.registry.put_manifest(self.repository, reference, manifest.body, manifest.media_type)

    def referrers(self, digest: str) -> List[dict]:
        api = self.registry.referrers(self.repository, digest)
        if api is not None:
            return [m for m in api["manifests"] if isinstance(m, dict) and isinstance(m.get("digest"), str)]
        return super().referrers(digest)

    def refer(self, subject: str, referrers: Sequence[dict]) -> bool:
        if self.registry.referrers(self.repository, subject) is not None:
            return False  # the API lists them by their subject
        return _refer(self, subject, referrers)


class LayoutPlace(Place):
    def __init__(self, layout: Layout):
        self.layout, self.reader, self.repository, self.name = layout, layout, "", layout.name

    def tags(self) -> List[str]:
        return self.layout.tags()

    def open_blob(self, digest: str, size: int) -> ContextManager[BinaryIO]:
        return self.layout.open_blob(digest, size)  # type: ignore[return-value]

    def put_blob(self, digest, size, source, origin) -> Tuple[int, str]:
        written = self.layout.put_blob(digest, size, source)
        return written, "sent" if written else "there"

    def put_manifest(self, reference: str, manifest: Manifest) -> None:
        self.layout.put_manifest(manifest.body, manifest.media_type,
                                 tag=None if reference.startswith("sha256:") else reference)

    def refer(self, subject: str, referrers: Sequence[dict]) -> bool:
        return _refer(self, subject, referrers)  # a layout has no API: the fallback index is the list


def _refer(where: Place, subject: str, referrers: Sequence[dict]) -> bool:
    """Add ``referrers`` to ``subject``'s fallback index at ``where``, as `attached.refer` keeps it
    (a tag there holding anything but an image index is refused, not overwritten)."""
    tag = attached.referrers_tag(subject)
    try:
        there: Optional[Manifest] = where.manifest(tag)
    except LookupError:
        there = None
    if there is not None and not attached.is_referrers_index(there):
        raise UserError(f"{where.name}:{tag} holds a {there.media_type or 'manifest'}, not the referrers image index "
                        f"of {subject}: it was left as it is", exit_code=1,
                        fix=f"remove the tag {tag} on the destination (it names no image) and run the mirror again")
    merged = attached.merged_index(there, referrers)
    if merged is None:
        return False
    where.put_manifest(tag, Manifest("sha256:" + hashlib.sha256(merged).hexdigest(), OCI_INDEX, merged,
                                     documents.load_json(merged, "a referrers index")))
    return True


def place(text: str, default_repository: str, create: bool) -> Place:
    """``oci:FOLDER`` -> a layout (made when ``create`` and absent); ``HOST[:PORT][/REPOSITORY]`` -> a registry."""
    from pathlib import Path

    if text.startswith(LAYOUT_PREFIX):
        folder = text[len(LAYOUT_PREFIX):]
        if not folder:
            raise UserError(f"{text!r} names no folder", exit_code=2, fix="write oci:FOLDER, e.g. oci:./mirror")
        return LayoutPlace(Layout(Path(folder), create=create))
    host, _, repository = text.strip("/").partition("/")
    if not host:
        raise UserError(f"{text!r} names no registry host", exit_code=2,
                        fix="write HOST[:PORT]/REPOSITORY, e.g. 127.0.0.1:5000/ascend-build/pytorch, or oci:FOLDER")
    return RegistryPlace(Registry(host), repository or default_repository)


# --- what is copied ------------------------------------------------------------------------------------

@dataclass
class Image:
    """One image manifest (one arch) with its labels and its ``.att`` manifest (None: none attached)."""

    manifest: Manifest
    labels: Dict[str, str]
    statements: Optional[Manifest]


@dataclass
class Unit:
    """One tag of the source: the manifest it names (an index or an image) and its images."""

    tag: str
    top: Manifest
    images: List[Image]
    top_statements: Optional[Manifest] = None  # an index's own .att manifest, if one is attached
    # {subject digest: [(its descriptor as the source lists it, the manifest)]}: each image's (and the
    # index's) referrers that the source holds, about that subject
    referrers: Dict[str, List[Tuple[dict, Manifest]]] = field(default_factory=dict)

    @property
    def what(self) -> str:
        return f"{self.tag} ({self.top.digest})"

    def manifests(self) -> List[Manifest]:
        """Every manifest to copy: the images', the index (if any), then the .att manifests."""
        made = [i.manifest for i in self.images] + ([self.top] if self.top.is_index else [])
        made += [m for m in [i.statements for i in self.images] + [self.top_statements] if m is not None]
        seen = {m.digest for m in made}
        for listed in self.referrers.values():
            for _, manifest in listed:
                if manifest.digest not in seen:  # the current .att manifest is a referrer too
                    made.append(manifest)
                    seen.add(manifest.digest)
        return made


@dataclass
class Figures:
    """What a run moved: blobs sent (and their bytes), already there, mounted; manifests and tags put."""

    blobs_sent: int = 0
    bytes_sent: int = 0
    blobs_there: int = 0
    bytes_there: int = 0
    blobs_mounted: int = 0
    bytes_mounted: int = 0
    manifests_put: int = 0
    tags_put: List[str] = field(default_factory=list)
    tags_unchanged: List[str] = field(default_factory=list)
    done: Set[str] = field(default_factory=set, repr=False)  # blobs handled in this run (counted once)

    def count(self, how: str, size: int) -> None:
        if how == "sent":
            self.blobs_sent, self.bytes_sent = self.blobs_sent + 1, self.bytes_sent + size
        elif how == "mounted":
            self.blobs_mounted, self.bytes_mounted = self.blobs_mounted + 1, self.bytes_mounted + size
        else:
            self.blobs_there, self.bytes_there = self.blobs_there + 1, self.bytes_there + size

    def to_dict(self) -> Dict[str, object]:
        return {k: v for k, v in self.__dict__.items() if k != "done"}


def _labels(source: Place, manifest: Manifest) -> Dict[str, str]:
    config = manifest.data.get("config")
    digest = config.get("digest") if isinstance(config, dict) else None
    if not isinstance(digest, str):
        return {}
    try:
        data = documents.load_json(source.reader.blob(source.repository, digest, CONFIG_LIMIT), f"the config {digest}")
    except (LookupError, ValueError):
        return {}
    return config_labels(data) if isinstance(data, dict) else {}


def _statements(source: Place, digest: str) -> Optional[Manifest]:
    try:
        return source.manifest(attestation_tag(digest))
    except LookupError:
        return None


def _referrers_of(source: Place, subject: str) -> List[Tuple[dict, Manifest]]:
    """The referrers the source lists for ``subject`` and holds: image manifests whose ``subject``
    is it (an entry the source does not hold, or about another digest, is left out)."""
    found = []
    for described in source.referrers(subject):
        try:
            manifest = source.manifest(described["digest"])
        except LookupError:
            continue
        about = manifest.data.get("subject")
        if manifest.is_index or not isinstance(about, dict) or about.get("digest") != subject:
            continue
        found.append((described, manifest))
    return found


def _children(manifest: Manifest) -> List[str]:
    listed = manifest.data.get("manifests")
    return [str(m["digest"]) for m in listed if isinstance(m, dict) and isinstance(m.get("digest"), str)] \
        if isinstance(listed, list) else []


def select(source: Place, selection: Selection) -> List[Unit]:
    """Every tag of ``source`` (cosign's statement tags aside) whose image, or one of whose arch
    images, matches ``selection``; an index comes with all its arch images. An index that names
    a manifest the source lacks, or another index (no image of ascend-build's is nested so), is
    refused: copied, it would be a tag without its images."""
    units = []
    for tag in source.tags():
        if is_attached_tag(tag):
            continue
        try:
            top = source.manifest(tag)
        except LookupError:
            continue  # deleted meanwhile
        digests = _children(top) if top.is_index else [top.digest]
        images = []
        for digest in digests:
            try:
                manifest = top if digest == top.digest else source.manifest(digest)
            except LookupError:
                raise UserError(f"{source.name}: {tag} ({top.digest}) is an index naming {digest}, which the "
                                "source does not hold: nothing was copied", exit_code=1,
                                fix="push that image to the source again, or leave the tag out (--cell, --cann)"
                                ) from None
            if manifest.is_index:
                raise UserError(f"{source.name}: {tag} ({top.digest}) is an index naming another index ({digest}): "
                                "not an image ascend-build mirrors; nothing was copied", exit_code=1,
                                fix="mirror the inner index's tag, or leave this tag out (--cell, --cann)")
            _descriptors(manifest, f"{source.name}: {tag} ({manifest.digest})")  # every blob named right
            images.append(Image(manifest, _labels(source, manifest), _statements(source, digest)))
        if any(matches(i.labels, selection) for i in images):
            subjects = [i.manifest.digest for i in images] + ([top.digest] if top.is_index else [])
            referrers = {s: listed for s in subjects for listed in [_referrers_of(source, s)] if listed}
            units.append(Unit(tag, top, images, _statements(source, top.digest) if top.is_index else None, referrers))
    return units


def _verdicts(where: Place, units: Sequence[Unit], key: Optional[PublicKey],
              require: str) -> List[Tuple[Unit, Image, policy.Verdict]]:
    """The trust decision about each image of ``units`` at ``where`` (none without a key)."""
    if key is None:
        return []
    return [(unit, image, policy.decide(where.reader, where.repository, image.manifest.digest, image.labels, key,
                                        require)) for unit in units for image in unit.images]


def _refused(told: Sequence[Tuple[Unit, Image, policy.Verdict]]) -> List[str]:
    return [f"{unit.tag} ({image.manifest.digest}): {verdict.line}" for unit, image, verdict in told if verdict.why_not]


def untrusted(where: Place, units: Sequence[Unit], key: Optional[PublicKey], require: str) -> List[str]:
    """"tag (arch image digest): why" for each image the trust decision refuses at ``where``."""
    return _refused(_verdicts(where, units, key, require))


def _descriptors(manifest: Manifest, what: str = "") -> List[Tuple[str, int]]:
    """(digest, size) of every blob an image manifest names: its config and layers. A descriptor
    without a sha256 digest and a whole size (a size written as text, say) is refused, never
    skipped: a copy without that blob would be an image that does not pull."""
    found = []
    config = manifest.data.get("config")
    layers = manifest.data.get("layers")
    if not isinstance(layers, list) and layers is not None:
        raise _malformed(what or manifest.digest, f"its layers are {type(layers).__name__}, not a list")
    for item in ([config] if config is not None else []) + list(layers or []):
        digest = item.get("digest") if isinstance(item, dict) else None
        size = item.get("size") if isinstance(item, dict) else None
        if not (isinstance(digest, str) and _SHA256.fullmatch(digest)):
            raise _malformed(what or manifest.digest, f"it names a blob by {str(digest)[:80]!r}, not a sha256 digest")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise _malformed(what or manifest.digest, f"its blob {digest} has the size {str(size)[:40]!r}, "
                                                      "not a number of bytes")
        found.append((digest, size))
    return found


_SHA256 = re.compile(r"sha256:[0-9a-f]{64}")


def _malformed(what: str, why: str) -> UserError:
    return UserError(f"{what}: the manifest is malformed: {why}; nothing was copied", exit_code=1,
                     fix="push the image to the source again (with docker push or ascend-build), or leave it out "
                         "(--cell, --cann)")


# --- the copy ---------------------------------------------------------------------------------------

@dataclass
class Progress:
    """What was done for the unit being copied (said when it fails)."""

    blobs: int = 0
    blobs_total: int = 0
    manifests: int = 0
    statements_checked: bool = False


def mirror(source: Place, destination: Place, selection: Selection, key: Optional[PublicKey] = None,
           require: str = policy.ANY, say: Callable[[str], None] = lambda _: None) -> Tuple[List[Unit], Figures]:
    """Copy every unit `select` finds, in the order the module's docstring gives; the units and the figures."""
    # a lazy variant is trusted on the destination through its validated image: that image goes first
    units = sorted(select(source, selection), key=lambda unit: any(variant.is_lazy(i.manifest) for i in unit.images))
    if not units:
        raise UserError(f"nothing in {source.name} matches the selection", exit_code=1,
                        fix="check the source and the --cann/--chip/--cell filters (`ascend-build pull` lists images)")
    refused = untrusted(source, units, key, require)
    if refused:
        raise UserError(f"the statements of {len(refused)} image(s) in {source.name} do not verify; nothing was "
                        "copied:\n  " + "\n  ".join(refused), exit_code=1,
                        fix="narrow the selection (--cell, --cann, --chip) to images whose statements verify, or "
                            "attach their statements at the source")
    figures = Figures()
    for number, unit in enumerate(units):
        progress = Progress()
        try:
            lazy = _copy(source, destination, unit, key, require, figures, progress)
        except UserError as exc:
            raise _stopped(destination, units, number, progress, exc) from None
        except KeyboardInterrupt as stop:  # Ctrl-C, SIGTERM: said with what was and was not copied
            told = _stopped(destination, units, number, progress, UserError("interrupted"))
            raise type(stop)(told.message.replace("\n  ", "; ")) from None
        say(f"{unit.tag}: {unit.top.digest} ({len(unit.images)} image(s), "
            f"{sum(1 for i in unit.images if i.statements)} with statements"
            + "".join(f"; {said}" for said in lazy) + ")")
    return units, figures


def _copy(source: Place, destination: Place, unit: Unit, key: Optional[PublicKey], require: str,
          figures: Figures, progress: Progress) -> List[str]:
    """Copy ``unit``; for each of its images trusted on the destination as a lazy variant, what vouches
    for it there ("a lazy variant of X, whose validation statement verifies")."""
    manifests = unit.manifests()
    blobs = list(dict.fromkeys(b for m in manifests if not m.is_index for b in _descriptors(m)))
    progress.blobs_total = len(blobs)
    for digest, size in blobs:
        if digest not in figures.done:  # another tag of this run brought it already
            try:
                _, how = destination.put_blob(digest, size, _opener(source, digest, size), source)
            except LookupError:
                raise UserError(f"{source.name} lacks the blob {digest} that {unit.what} names", exit_code=1,
                                fix="push the image to the source again, or leave the tag out (--cell, --cann)"
                                ) from None
            figures.count(how, size)
            figures.done.add(digest)
        progress.blobs += 1
    for manifest in manifests:  # images, the index, then the .att manifests: their order in `manifests`
        attested = next((i.manifest.digest for i in unit.images if i.statements is manifest), None)
        if attested is None and manifest is unit.top_statements:
            attested = unit.top.digest
        if attested:
            there = _statements(destination, attested)
            needed = there is None or there.digest != manifest.digest
        else:
            needed = not destination.has_manifest(manifest.digest)
        if needed:
            try:
                destination.put_manifest(attestation_tag(attested) if attested else manifest.digest, manifest)
            except UserError:
                if attested and _statements(destination, attested) is not None:  # it came, other bytes than sent
                    _arrived(destination, attested, manifest)
                raise
            figures.manifests_put += 1
        progress.manifests += 1
    for image in unit.images:  # the statements came along, byte for byte, and verify there
        if image.statements is not None:
            _arrived(destination, image.manifest.digest, image.statements)
    told = _verdicts(destination, [unit], key, require)
    refused = _refused(told)
    if refused:
        raise UserError(f"on {destination.name}, the statements do not verify: " + "; ".join(refused), exit_code=1,
                        fix="the copy was changed in transit or at the destination: run the mirror again, "
                            "and check the destination's storage")
    progress.statements_checked = True
    for subject, listed in unit.referrers.items():  # where no referrers API lists them: the fallback index
        if destination.refer(subject, [described for described, _ in listed]):
            figures.manifests_put += 1
    try:
        current: Optional[str] = destination.manifest(unit.tag).digest
    except LookupError:
        current = None
    if current == unit.top.digest:
        figures.tags_unchanged.append(unit.tag)
    else:
        destination.put_manifest(unit.tag, unit.top)
        figures.tags_put.append(unit.tag)
    return [verdict.vouched for _, _, verdict in told if verdict.lazy_of]


def _arrived(destination: Place, digest: str, statements: Manifest) -> None:
    """Refuse unless ``destination`` holds the very ``.att`` manifest ``statements`` of the image ``digest``."""
    there = _statements(destination, digest)
    if there is not None and there.digest == statements.digest:
        return
    what = f"did not arrive on {destination.name}" if there is None else \
        (f"arrived altered on {destination.name}: its {attestation_tag(digest)} there is {there.digest}, not the "
         f"source's {statements.digest}")
    raise UserError(f"the signed statements of {digest} {what}", exit_code=1,
                    fix="something on the way changed them (a proxy or gateway that rewrites uploads), or another writer "
                        "at the destination did; no tag names the image there: find and stop what alters uploads to it")


def statements_attached(units: Sequence[Unit]) -> int:
    """How many ``.att`` manifests the units carry (each image's and each index's own), each once."""
    return len({m.digest for u in units for m in [i.statements for i in u.images] + [u.top_statements] if m is not None})


def _opener(source: Place, digest: str, size: int) -> Callable[[], ContextManager[BinaryIO]]:
    def opened() -> ContextManager[BinaryIO]:
        return source.open_blob(digest, size)
    return opened


def _stopped(destination: Place, units: Sequence[Unit], number: int, progress: Progress, exc: UserError) -> UserError:
    unit = units[number]
    done = ", ".join(u.tag for u in units[:number]) or "none"
    left = ", ".join(u.tag for u in units[number + 1:]) or "none"
    copied = (f"{progress.blobs} of {progress.blobs_total} blobs and {progress.manifests} of "
              f"{len(unit.manifests())} manifests were copied, "
              + ("the statements verified there, " if progress.statements_checked else "")
              + "no tag was put for it")
    return UserError(f"mirror to {destination.name} stopped at {unit.what}: {exc.message}\n"
                     f"  {copied}\n  tags copied before it: {done}\n  not copied: {left}", exit_code=exc.exit_code,
                     fix=(exc.fix + "; then " if exc.fix else "") + "run the same command again: what is there is "
                                                                    "skipped, the rest copied")


def describe(figures: Figures) -> str:
    """The figures as the CLI prints them."""
    return (f"blobs: {figures.blobs_sent} copied ({figures.bytes_sent} bytes), {figures.blobs_there} already there "
            f"({figures.bytes_there} bytes), {figures.blobs_mounted} mounted ({figures.bytes_mounted} bytes); "
            f"manifests put: {figures.manifests_put}; tags put: {', '.join(figures.tags_put) or 'none'}"
            + (f"; tags unchanged: {', '.join(figures.tags_unchanged)}" if figures.tags_unchanged else ""))

