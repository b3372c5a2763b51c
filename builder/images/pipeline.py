"""Build -> smoke -> seal -> tag -> push (-> attest), one cell and variant at a time; then the
indexes. Each image's run is `builder.images.image_run`'s (its `ImageRun` and steps); this
module runs them in turn, publishes each cell's index, promotes a ``-candidate`` image, and says
what a stopped run leaves (`stopped_summary`).

The rule the pipeline exists to keep: **only an image that passed its smoke test
gets a release tag.** A build yields a candidate (an image ID, no tag). The
smoke program runs inside it on this host. Only when every required tier passed
is the candidate sealed (a tiny ``FROM`` step adding the report at
``vocabulary.VALIDATION_REPORT`` and the ``Label.VALIDATED*`` labels)
and tagged. A failed build or tier, or Ctrl-C, leaves no release tag; the build
log and the report stay under the state directory.

With a signing key, each pushed image that passed then gets its signed validation
statement and provenance attached to its digest (`image_run.attest_pushed`, `builder.images.attest`).

Without NPUs (``--no-device``, or no ``/dev/davinci*``) an NPU image can only run
its static tiers and earns at most a ``-candidate`` tag; `promote` later runs the
device tiers on an NPU host, seals and tags it.

Example:
    >>> outcomes = run(cells, Options(variants=("cpu",), state_dir=Path(".state")), Engine.connect(), print)  # doctest: +SKIP
    >>> [o.status for o in outcomes]                                                                      # doctest: +SKIP
    ['passed']
"""

from __future__ import annotations

from typing import List, Optional, Tuple

from builder import bounded, devices, writes
from builder.images import publish
from builder.images.image_run import ImageRun, Outcome, Said, Say, attest_pushed, build_one, conclude
from builder.images.prepare import Options
from builder.images.matrix import Cell
from builder.images.smoke_run import smoke, smoke_scale
from builder.engine import Engine
from builder.errors import UserError
from builder.registry import Registry
from builder.vocabulary import ARCHS, CANDIDATE_SUFFIX, CPU, NPU, VARIANTS, Label, release_tag, required_tiers


def variants_for(choice: str, has_npu: bool) -> Tuple[str, ...]:
    """``--variant`` to the variants to build: ``auto`` is both on an NPU host, the CPU twin elsewhere."""
    table = {"auto": VARIANTS if has_npu else (CPU,), "both": VARIANTS, NPU: (NPU,), CPU: (CPU,)}
    if choice not in table:
        raise UserError(f"--variant {choice!r} is not one of {', '.join(table)}", fix="pick one of them")
    return table[choice]


def run(cells: List[Cell], options: Options, engine: Engine, say: Say) -> List[Outcome]:
    """Every (cell, variant) in order; one failure does not stop the others. With a push,
    each cell whose every arch is now in the registry gets its index (see `indexes`).

    Stopped by Ctrl-C or SIGTERM (a ``KeyboardInterrupt``), it raises one again whose
    message says what was published, what was tagged here only, and where it stopped
    (`stopped_summary`)."""
    outcomes: List[Outcome] = []
    tell = Said(say)  # remembers the last progress line: where a stop came
    current: Optional[Outcome] = None
    try:
        for cell in cells:
            for variant in options.variants:
                current = Outcome(cell.id, variant)
                try:
                    outcomes.append(build_one(cell, variant, options, engine, tell, current))
                except UserError as exc:  # e.g. a refused push: report it, keep the local image
                    outcomes.append(Outcome(cell.id, variant, status="error", message=str(exc)))
                except OSError as exc:  # the state folder's disk is full, or not writable
                    error = writes.write_error(exc, options.state_dir, "nothing was tagged")
                    outcomes.append(Outcome(cell.id, variant, status="error", message=str(error)))
                current = None
        return outcomes + indexes(outcomes, options, tell)
    except KeyboardInterrupt as stop:
        raise type(stop)(stopped_summary(outcomes, current, tell.last, signing=options.sign_key is not None)) from None


def stopped_summary(outcomes: List[Outcome], current: Optional[Outcome], last_line: str, signing: bool = False) -> str:
    """One line on a stopped run: what is published (pushed, with its digest), what is only
    tagged here (every tag names an image that passed), and the image that was not finished.
    With ``signing``, a digest the stop caught before its statements were attached is said to
    be pushed without them, not published: `verify` refuses it.

    Examples:
        >>> stopped_summary([Outcome("c", "cpu", "passed", tags=["r:c-cpu"])], Outcome("d", "cpu"), "[d-cpu] step 2/9 RUN x")
        'published nothing; tagged here only: r:c-cpu; not finished: d (cpu), no tag (stopped at "[d-cpu] step 2/9 RUN x")'
        >>> stopped_summary([], Outcome("d", "cpu", "passed", tags=["d-cpu", "r/d-cpu"], digests={"r/d-cpu": "sha256:1"}),
        ...                 "", signing=True)
        'published nothing; pushed WITHOUT its signed statements (stopped before they were attached; `ascend-build verify` refuses it): r/d-cpu@sha256:1; tagged here only: d-cpu; not finished: d (cpu)'
    """
    done = outcomes + ([current] if current is not None else [])
    unsigned = [(ref, digest) for o in done for ref, digest in o.digests.items()
                if signing and o.status != "candidate" and ref not in o.attested]
    published = [f"{ref}@{digest}" for o in done for ref, digest in o.digests.items() if (ref, digest) not in unsigned]
    local = [t for o in done for t in o.tags if t not in {r for o2 in done for r in o2.digests}]
    text = ("published " + ", ".join(published) if published else "published nothing")
    if unsigned:
        text += ("; pushed WITHOUT its signed statements (stopped before they were attached; `ascend-build verify` "
                 "refuses it): " + ", ".join(f"{ref}@{digest}" for ref, digest in unsigned))
    text += f"; tagged here only: {', '.join(local)}" if local else ""
    if current is not None:
        text += f"; not finished: {current.cell} ({current.variant})" + ("" if current.tags else ", no tag")
    return text + (f' (stopped at "{last_line[:120]}")' if last_line else "")



def index_outcome(registry: Registry, repository: str, family: str, variant: str,
                  trust: Optional[publish.Trust] = None, archs: Tuple[str, ...] = ARCHS, why: str = "") -> Outcome:
    """Publish one index over ``archs`` (``why``: why those, said in its message), as an outcome of
    its own (``arches``: what it points at); with ``trust``, only over arch images whose signed
    validation statement it trusts."""
    ref = f"{registry.name}/{repository}:{publish.index_tag(family, variant)}"
    out = Outcome(family, variant, tags=[ref])
    try:
        digest, out.arches = publish.publish(registry, repository, family, variant, archs=archs, trust=trust)
    except UserError as exc:
        out.message = str(exc)
        return out
    out.status, out.digests = "passed", {ref: digest}
    out.message = "index of " + ", ".join(f"{arch} {d}" for arch, d in sorted(out.arches.items())) + (
        f" ({why})" if why else "")
    return out


def indexes(outcomes: List[Outcome], options: Options, say: Say) -> List[Outcome]:
    """After a push (``options.push``; none without one), the index of every cell whose every
    arch's tag is now in the registry: every arch the matrix declares for it
    (``options.declared``, `publish.declared_arches`; without it, every arch), so an
    arm64-only cell's index holds its one arch.

    An arch built elsewhere (another runner, an earlier run) counts once its tag is
    there; an arch not pushed yet means no index yet (said, not an error), and
    `publish` refuses any arch image that did not pass. Each index, from reading the tags
    on, within ``options.push_deadline`` seconds (0: each request's own deadline only).
    """
    if not options.push:
        return []
    host, _, namespace = options.push.strip("/").partition("/")
    registry, done, out = Registry(host), set(), []
    for o in outcomes:
        for ref in o.digests if o.status == "passed" else ():
            repository, _, tag = ref[len(host) + 1:].rpartition(":")
            found = publish.family_of(tag)
            if found is None or (repository, found) in done:
                continue
            done.add((repository, found))
            family, variant = found
            with bounded.command_deadline(options.push_deadline):
                try:
                    present = set(registry.tags(repository))
                except UserError as exc:
                    out.append(Outcome(family, variant, message=str(exc)))
                    continue
                archs, why = publish.index_arches(family, options.declared)
                waiting = [a for a in archs if release_tag(f"{family}-{a}", variant) not in present]
                if waiting:
                    say(f"[{family}] no index yet: {', '.join(waiting)} not in {host}/{repository} ({why})")
                    continue
                say(f"[{family}] publishing the index {host}/{repository}:{publish.index_tag(family, variant)} "
                    f"of {', '.join(archs)} ({why})")
                out.append(index_outcome(registry, repository, family, variant, archs=archs, why=why))
    return out


def promote(ref: str, options: Options, engine: Engine, say: Say) -> Outcome:
    """Run the device tiers on an NPU host for a ``-candidate`` image; seal and tag it if they pass."""
    labels = engine.labels(ref)
    cell_id = labels.get(Label.CELL)
    if not cell_id or labels.get(Label.VARIANT) != NPU:
        raise UserError(f"{ref} is not an NPU image built by ascend-build (no io.ascend-build labels)", exit_code=1,
                        fix="promote a '-candidate' image made by `ascend-build image --no-device`")
    present = devices.npu_devices(options.root)
    if not present or options.no_device:
        raise UserError("promote runs the device tiers, and this host has no NPU (/dev/davinci*)", exit_code=1,
                        fix="run it on an Ascend host with the driver installed")
    chosen = devices.choose(present, options.devices)
    release = ref[: -len(CANDIDATE_SUFFIX)] if ref.endswith(CANDIDATE_SUFFIX) else ref
    if options.push:  # the registry prefix is added again by tag_and_push
        release = release.split("/", 1)[-1] if release.startswith(options.push.rstrip("/") + "/") else release
    promoted = ImageRun(cell_id, release, Outcome(cell_id, NPU, image_id=engine.image_id(ref) or ""), options, engine, say,
                        content_hash=labels.get(Label.CONTENT_HASH, ""),
                        tiers=required_tiers(NPU, cann_only=not labels.get(Label.TORCH)))
    say(f"[{cell_id}] device tiers on npu {chosen}")
    promoted.report, promoted.out.smoke_seconds = smoke(engine, ref, NPU, promoted.tiers, devices.docker_devices(chosen, options.root),
                                                        devices.driver_mounts(options.root), scale=smoke_scale(False))
    conclude(promoted)
    return attest_pushed(promoted)
