"""Warm a pull-through cache (`ascend-build mirror SRC CACHE --warm`): make the cache store every
blob of the selected images before the nodes pull through it, so that N nodes pulling at once cost
the source one copy of each blob.

Why it is needed: docker-registry 2.8 (the distribution registry) as a pull-through cache
(`proxy.remoteurl`) fetches a blob it does not store once for its storage and once more for every
client asking for it until it is stored, so N nodes pulling at once through a cold cache cost the
source about N + 1 copies (docs/distribution.md, "Measured").

How, per selected tag (the selection and the trust check are `mirror`'s, at the source):

1. the cache must answer the tag with the source's digest (else it is not a cache of the source);
   each manifest (an index and each arch's image, and their ``.att`` statements) is read through
   the cache by digest, which makes the cache store it;
2. each blob (configs, layers, the statements' envelopes) is asked of the cache once, for its first
   byte only (`Registry.holds_blob`, hanging up on the answer's head): a cache that stores it
   answers 206; one that does not answers 200 and, asked, starts storing it from the source;
3. the blobs it did not store are asked again, one at a time (the cache fetches them all
   meanwhile), with a pause that doubles up to `POLL_CAP`, until each answers 206. Every ask while
   the cache still fetches costs the source what was in flight before the hang-up: about the
   link's rate times the hang-up's latency (a HEAD would cost a whole copy: docker-registry answers
   a HEAD for a blob it does not store by reading the blob from its source).

The 206-from-storage signal is docker-registry's: another cache that answers ranges while it
streams from its source would look warm before it is.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from builder.errors import UserError
from builder.node import mirror
from builder.registry import Manifest, Registry, Transient
from builder.trust import policy
from builder.trust.signing import PublicKey

POLL_FIRST = 0.05  # seconds before the first ask again
POLL_CAP = 2.0     # the pause doubles up to this


@dataclass
class Warmed:
    """What a warm did: blobs the cache held already, blobs it fetched (their bytes), the asks sent."""

    blobs_held: int = 0
    bytes_held: int = 0
    blobs_fetched: int = 0
    bytes_fetched: int = 0
    asks: int = 0
    manifests: int = 0
    seconds: float = 0.0
    done: Dict[str, int] = field(default_factory=dict, repr=False)  # digest -> size, counted once a run

    def to_dict(self) -> Dict[str, object]:
        return {k: v for k, v in self.__dict__.items() if k != "done"}


def describe(figures: Warmed) -> str:
    """The figures as the CLI prints them."""
    return (f"blobs: {figures.blobs_fetched} fetched by the cache ({figures.bytes_fetched} bytes), "
            f"{figures.blobs_held} held already ({figures.bytes_held} bytes); manifests read through it: "
            f"{figures.manifests}; {figures.asks} first-byte asks in {figures.seconds:.1f} s")


def _blobs(manifests: Sequence[Manifest]) -> List[Tuple[str, int]]:
    found: Dict[str, int] = {}
    for manifest in manifests:
        if manifest.is_index:
            continue
        config = manifest.data.get("config")
        for item in ([config] if isinstance(config, dict) else []) + list(manifest.data.get("layers") or []):
            if isinstance(item, dict) and isinstance(item.get("digest"), str) and isinstance(item.get("size"), int):
                found.setdefault(item["digest"], item["size"])
    return list(found.items())


def cache_of(text: str, source: mirror.Place) -> Registry:
    """The cache ``text`` names: ``HOST[:PORT]``, or ``HOST[:PORT]/REPOSITORY`` when REPOSITORY is the
    source's (a pull-through cache serves the source's repositories under their own names)."""
    if text.startswith(mirror.LAYOUT_PREFIX):
        raise UserError(f"--warm needs a pull-through cache as DST, not the layout {text!r}", exit_code=2,
                        fix="give the cache as HOST[:PORT], e.g. 10.0.0.5:5000")
    host, _, repository = text.strip("/").partition("/")
    if repository and repository != source.repository:
        raise UserError(f"the cache {text!r} names the repository {repository!r}, the source {source.repository!r}",
                        exit_code=2, fix=f"a pull-through cache serves {source.repository} under that very name: "
                                         f"give the cache as {host} (or {host}/{source.repository})")
    return Registry(host)


def warm(source: mirror.Place, cache: Registry, selection: mirror.Selection, key: Optional[PublicKey] = None,
         require: str = policy.ANY, say: Callable[[str], None] = lambda _: None,
         sleep: Callable[[float], None] = time.sleep) -> Tuple[List[mirror.Unit], Warmed]:
    """Warm ``cache`` (serving ``source``'s repository under the same name) with every unit `mirror.select`
    finds at ``source``; the units and the figures."""
    if not isinstance(source, mirror.RegistryPlace):
        raise UserError(f"--warm needs a registry as SRC, not the layout {source.name}", exit_code=2,
                        fix="name the registry the cache pulls through from (its proxy.remoteurl)")
    units = mirror.select(source, selection)
    if not units:
        raise UserError(f"nothing in {source.name} matches the selection", exit_code=1,
                        fix="check the source and the --cann/--chip/--cell filters (`ascend-build pull` lists images)")
    refused = mirror.untrusted(source, units, key, require)
    if refused:
        raise UserError(f"the statements of {len(refused)} image(s) in {source.name} do not verify; the cache "
                        "was not asked for anything:\n  " + "\n  ".join(refused), exit_code=1,
                        fix="narrow the selection (--cell, --cann, --chip) to images whose statements verify")
    figures = Warmed()
    started = time.monotonic()
    for unit in units:
        _warm_unit(source, cache, unit, figures, sleep)
        say(f"{unit.tag}: {unit.top.digest} ({len(unit.images)} image(s))")
    figures.seconds = time.monotonic() - started
    return units, figures


def _where(cache: Registry, repository: str) -> str:
    return f"{cache.name}/{repository}"


def _warm_unit(source: mirror.RegistryPlace, cache: Registry, unit: mirror.Unit, figures: Warmed,
               sleep: Callable[[float], None]) -> None:
    repository = source.repository
    where = _where(cache, repository)
    try:
        answered = cache.manifest(repository, unit.tag).digest
    except LookupError:
        answered = "nothing"
    if answered != unit.top.digest:
        raise UserError(f"the cache {where} answers {unit.tag} with {answered}, the source {source.name} with "
                        f"{unit.top.digest}", exit_code=1,
                        fix=f"give a pull-through cache of {source.registry.name} (its proxy.remoteurl) as the "
                            "destination, serving the same repository name")
    manifests = unit.manifests()
    for manifest in manifests:
        if cache.manifest(repository, manifest.digest).digest != manifest.digest:  # Registry checks the hash too
            raise UserError(f"the cache {where} served another manifest for {manifest.digest}", exit_code=1)
        figures.manifests += 1
    waiting: Dict[str, Tuple[int, float]] = {}  # digest -> (size, until)
    for digest, size in _blobs(manifests):
        if digest in figures.done:
            continue
        figures.asks += 1
        if _ask(cache, repository, digest, unit):
            figures.blobs_held, figures.bytes_held = figures.blobs_held + 1, figures.bytes_held + size
            figures.done[digest] = size
        else:
            waiting[digest] = (size, time.monotonic() + cache.blob_deadline(size))
    pause = POLL_FIRST
    while waiting:  # one blob asked at a time: the cache fetches them all meanwhile, and each ask costs
        sleep(pause)
        digest, (size, until) = next(iter(waiting.items()))
        figures.asks += 1
        if _ask(cache, repository, digest, unit):
            figures.blobs_fetched, figures.bytes_fetched = figures.blobs_fetched + 1, figures.bytes_fetched + size
            figures.done[digest] = size
            del waiting[digest]
            pause = POLL_FIRST
        elif time.monotonic() > until:
            raise UserError(f"the cache {where} did not store {digest} ({size} bytes) of {unit.what} within "
                            f"{cache.blob_deadline(size):.0f} s; {len(figures.done)} blob(s) are stored, "
                            f"{len(waiting)} not yet", exit_code=1,
                            fix="check the cache's log and its route to the source, then run the command again: "
                                "what the cache stores is not fetched again")
        else:
            pause = min(POLL_CAP, pause * 2)


def _ask(cache: Registry, repository: str, digest: str, unit: mirror.Unit) -> bool:
    try:
        return cache.holds_blob(repository, digest)
    except LookupError:
        raise UserError(f"the cache {_where(cache, repository)} has no blob {digest} of {unit.what} and does not "
                        "fetch it", exit_code=1,
                        fix="give a pull-through cache of the source (proxy.remoteurl) as the destination") from None
    except Transient as failure:
        raise UserError(f"the cache {_where(cache, repository)}: {failure.message}", exit_code=1,
                        fix="check the cache, then run the command again") from None
