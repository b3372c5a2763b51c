"""Build -> smoke -> seal -> tag -> push (-> attest), one cell and variant at a time.

The rule this module exists to keep: **only an image that passed its smoke test
gets a release tag.** A build yields a candidate (an image ID, no tag). The
smoke program runs inside it on this host. Only when every required tier passed
is the candidate sealed (a tiny ``FROM`` step adding the report at
``vocabulary.VALIDATION_REPORT`` and the ``Label.VALIDATED*`` labels)
and tagged. A failed build or tier, or Ctrl-C, leaves no release tag; the build
log and the report stay under the state directory.

With a signing key, each pushed image that passed then gets its signed validation
statement and provenance attached to its digest (`attest_pushed`, `builder.images.attest`).

Without NPUs (``--no-device``, or no ``/dev/davinci*``) an NPU image can only run
its static tiers and earns at most a ``-candidate`` tag; `promote` later runs the
device tiers on an NPU host, seals and tags it.

Example:
    >>> outcomes = run(cells, Options(variants=("cpu",), state_dir=Path(".state")), Engine.connect(), print)  # doctest: +SKIP
    >>> [o.status for o in outcomes]                                                                      # doctest: +SKIP
    ['passed']
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from builder import bounded, claims, devices, documents, leftovers, writes
from builder.images import plan as planning
from builder.images import attest, fetch, free_space, installed, lazy, oci, own_wheel, progress, publish, render, sbom, stage, wheelhouse
from builder.images.blocks import CannInstallers
from builder.images.prepare import Job, Options, host_arch, prepare
from builder.images.matrix import Cell
from builder.engine import BuildFailed, Engine, RunTimeout
from builder.errors import UserError
from builder.registry import Registry
from builder.vocabulary import (ARCHS, CANDIDATE_SUFFIX, CPU, NPU, SMOKE_PROGRAM, VALIDATION_REPORT, VARIANTS, Label,
                                platform_of, release_tag, required_tiers)

Say = Callable[[str], None]


@dataclass
class Outcome:
    """What happened to one image; `cli` prints these as the summary table."""

    cell: str
    variant: str
    status: str = "error"                  # passed | candidate | failed | error
    image_id: str = ""
    tiers: List[Dict] = field(default_factory=list)
    tags: List[str] = field(default_factory=list)
    digests: Dict[str, str] = field(default_factory=dict)
    build_seconds: float = 0.0
    smoke_seconds: float = 0.0
    message: str = ""
    log: str = ""
    report: str = ""
    sbom: str = ""                         # the image's CycloneDX SBOM (state folder's sbom/)
    arches: Dict[str, str] = field(default_factory=dict)  # an index's entries: arch -> digest
    attested: Dict[str, str] = field(default_factory=dict)  # pushed ref -> its statements' .att manifest digest
    lazy: Dict[str, str] = field(default_factory=dict)  # the lazily pullable variant's ref -> its digest (--lazy)

    @property
    def ok(self) -> bool:
        return self.status in ("passed", "candidate")


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
    last = [""]  # the last progress line: where a stop came

    def tell(line: str) -> None:
        last[0] = line
        say(line)

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
        return outcomes + (indexes(outcomes, options.push, tell, options.push_deadline, options.declared)
                           if options.push else [])
    except KeyboardInterrupt as stop:
        raise type(stop)(stopped_summary(outcomes, current, last[0], signing=options.sign_key is not None)) from None


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


def build_one(cell: Cell, variant: str, options: Options, engine: Engine, say: Say,
              out: Optional[Outcome] = None) -> Outcome:
    """Prepare, build, smoke-test and conclude (seal, tag, push) one image, into ``out``;
    a refusal before the build is a `UserError`, a failed build or tier an outcome.

    The image is claimed in the state folder first (`claims`): a second run building it
    with the same state folder is refused, naming this one, until this one ends."""
    job = prepare(cell, variant, options)
    out = out if out is not None else Outcome(job.plan.cell_id, variant)
    out.cell = job.plan.cell_id
    held = options.state_dir / "claims" / f"{job.name}.lock"
    held.parent.mkdir(parents=True, exist_ok=True)
    with claims.claim(held, f"building {job.name} with the state folder {options.state_dir}", folder=False,
                      fix="wait for that run to finish, or give this one another --state-dir"):
        proof = attest.evidence(job) if options.sign_key else None  # the inputs as the build reads them
        sealed = already_sealed(job, engine)
        if sealed is not None:
            return reuse_sealed(job, sealed, out, options, engine, say, proof, sbom.of(job, recorded(job, engine, job.ref)))
        if not build(job, options, engine, say, out):
            return out
        report = smoke_test(job, engine, say, out)
        bom = sbom.of(job, recorded(job, engine, out.image_id))  # with the files the image recorded installing
        out.sbom = _keep_sbom(bom, job.name, options.state_dir)  # before any tag: a full disk fails it untagged
        out = conclude(out, engine, report, job.smoke.tiers, job.smoke.final, job.ref, job.name, options, say)
        out = attest_pushed(out, report, job.smoke.tiers, job.plan.content_hash, proof, options, say, bom)
        return lazy_variant(out, report, job.smoke.tiers, job.plan.content_hash, job.plan.arch, job.name, options, say)


def recorded(job: Job, engine: Engine, image: str) -> Dict[str, installed.Installed]:
    """Which file of each locked distribution ``image`` recorded installing (`builder.images.installed`)."""
    lock = job.plan.lock
    entries = lock.entries if lock is not None else ()
    return installed.read(engine, image, [(i.step, i.verified) for i in job.image.installs], entries)


def _keep_sbom(bom: Dict, name: str, state: Path) -> str:
    """Write the image's SBOM into the state folder (``sbom/``, apart from the reports, which
    tools read as smoke reports); its path."""
    path = state / "sbom" / f"{name}.cdx.json"
    _keep_json(bom, path)
    return str(path)


def _keep_json(document: Dict, path: Path) -> bytes:
    """Write ``document`` to ``path`` as indented, key-sorted JSON, whole or not at all (a
    report or an SBOM is evidence: `writes.replace_file`); its bytes."""
    data = (json.dumps(document, indent=2, sort_keys=True) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    writes.replace_file(path, data)
    return data


def already_sealed(job: Job, engine: Engine) -> Optional[Dict]:
    """The validation report inside the image ``job.ref`` names, when that image is this job's
    own, sealed already: same cell, variant and content hash, validated. None otherwise (it is
    built and tested). Removing the tag (``docker rmi``) makes the next run build it again."""
    if engine.image_id(job.ref) is None:
        return None
    labels = engine.labels(job.ref)
    if (labels.get(Label.VALIDATED) != "true" or labels.get(Label.CONTENT_HASH) != job.plan.content_hash
            or labels.get(Label.CELL) != job.plan.cell_id or labels.get(Label.VARIANT) != job.variant):
        return None
    raw = engine.read_file(job.ref, VALIDATION_REPORT)
    try:
        report = documents.load_json((raw or b"").decode("utf-8", errors="replace"), f"{job.ref}'s validation report")
    except (ValueError, UserError):  # no report, or one past the bounds: build it again
        return None
    return report if isinstance(report, dict) and report.get("passed") is True else None


def reuse_sealed(job: Job, report: Dict, out: Outcome, options: Options, engine: Engine, say: Say,
                 proof: Optional[attest.Evidence], bom: Optional[Dict] = None) -> Outcome:
    """Publish an image sealed by an earlier run as it is: tag, push and attest it, with the
    report it carries, without building or smoke-testing it again."""
    say(f"[{job.name}] {job.ref} is this image sealed already (content hash {job.plan.content_hash}, "
        "passed): not built or smoke-tested again")
    out.status, out.tiers = "passed", list(report.get("tiers") or [])
    out.message = "sealed by an earlier run: not built or smoke-tested again"
    out.sbom = _keep_sbom(bom, job.name, options.state_dir) if bom is not None else ""  # before any tag
    out = tag_and_push(out, engine, engine.image_id(job.ref) or "", job.ref, options, job.name, say)
    tiers = required_tiers(job.variant, job.plan.cann_only)
    out = attest_pushed(out, report, tiers, job.plan.content_hash, proof, options, say, bom)
    return lazy_variant(out, report, tiers, job.plan.content_hash, job.plan.arch, job.name, options, say)


# Under qemu a training step of the smoke model takes about 23 s (its backward pass is
# emulated instruction by instruction): four steps still show the loss falling (to about
# a third natively), thirty would take twelve minutes.
EMULATED_STEPS = 4


# Every tier's deadline is multiplied by this under qemu (the smoke program's --timeout-scale):
# the emulated smoke test took 141 s against 17 s natively, its training steps 4 x 25 s.
EMULATED_SCALE = 4.0
# Multiplies every tier's deadline and the engine's limit once more (a slow machine), e.g. 2.
SCALE_ENV = "ASCEND_BUILD_SMOKE_TIMEOUT_SCALE"
# The engine's limit over the smoke program's own longest run: the interpreter's start and the report.
ENGINE_MARGIN_SECONDS = 120


def smoke_scale(emulated: bool) -> float:
    """The factor of every tier's deadline: ``EMULATED_SCALE`` under qemu, times ``SCALE_ENV``."""
    text = os.environ.get(SCALE_ENV, "").strip()
    try:
        factor = float(text) if text else 1.0
    except ValueError:
        factor = -1.0
    if not 0 < factor <= 100:
        raise UserError(f"{SCALE_ENV}={text[:40]!r} is not a factor between 0 and 100", exit_code=2,
                        fix=f"e.g. {SCALE_ENV}=2 doubles every smoke tier's deadline, or unset it")
    return factor * (EMULATED_SCALE if emulated else 1.0)


def engine_timeout(tiers: Tuple[str, ...], scale: float) -> float:
    """The engine's limit on a smoke container: the longest the smoke program's own supervisor lets
    the run last (`builder.smoke.smoke.longest_run`: every tier's deadline, the gap before the first
    and after each, stopping a hung tier; scaled), plus a margin for Python's start and the report.
    The smoke program ends a hung tier itself before it."""
    from builder.smoke import smoke as program

    return float(program.longest_run(tiers, scale)) + ENGINE_MARGIN_SECONDS


_LOGGED_TIER = re.compile(r"^\[smoke\] (\w+) (passed|failed|skipped) \((\d{1,9}(?:\.\d{1,3})?) s\): (.*)$")


def _tiers_logged(stderr: str, tiers: Tuple[str, ...]) -> List[Dict]:
    """The tiers that ended before the container was killed, as the smoke program logged them
    (``[smoke] NAME STATUS (S s): SUMMARY``): the report it could not print."""
    found: Dict[str, Dict] = {}
    for line in stderr.splitlines():
        m = _LOGGED_TIER.match(line.strip())
        if m and m.group(1) in tiers and m.group(1) not in found:
            found[m.group(1)] = {"name": m.group(1), "status": m.group(2), "seconds": float(m.group(3)),
                                 "summary": m.group(4)[:2000],
                                 "details": {"from": "the smoke program's log: it was killed before its report"}}
    return [found[t] for t in tiers if t in found]


def smoke(engine: Engine, image: str, device: str, tiers: Tuple[str, ...], docker_devices: List[str],
          mounts: List[Tuple[str, str, bool]], extra: Tuple[str, ...] = (), scale: float = 1.0) -> Tuple[Dict, float]:
    """Run the smoke program inside ``image``; return its JSON report and the seconds it took.

    Each tier has its own deadline (its entry's ``seconds`` in ``vocabulary.SMOKE_TIERS``, times
    ``scale``), kept by the smoke program; the container runs under an init, and the engine kills it after
    `engine_timeout`: then the report is a failed one that says so, with the output's tail.
    """
    command = ["python", SMOKE_PROGRAM, "--device", device, "--tiers", ",".join(tiers), *extra]
    if scale != 1.0:  # only then: a -candidate image built before the option existed still runs
        command += ["--timeout-scale", f"{scale:g}"]
    limit = engine_timeout(tiers, scale)
    try:
        result = engine.run(image, command, devices=docker_devices, mounts=mounts, shm_size="1g",
                            ipc_mode="host" if docker_devices else None, timeout=limit)
    except RunTimeout as exc:
        result, limit = exc.result, exc.timeout or limit
        tail = "\n    ".join(result.stderr.strip().splitlines()[-30:])
        report = {"schema": 1, "passed": False, "device": device, "tiers": [*_tiers_logged(result.stderr, tiers), {
            "name": "smoke", "status": "failed", "seconds": round(result.seconds, 3),
            "summary": f"the smoke program did not finish within {limit:g} s, the engine's limit over every "
                       f"tier's own deadline, and its container was killed: the program itself stopped "
                       f"answering (its output's tail is in details); {SCALE_ENV}=2 doubles every deadline",
            "details": {"stderr_tail": tail, "timeout_seconds": limit}}], "exit_code": result.exit_code}
        return report, result.seconds
    lines = [ln for ln in result.stdout.splitlines() if ln.strip()]
    try:
        report = documents.load_json(lines[-1], "the smoke report")
        if not isinstance(report, dict) or "tiers" not in report:
            raise ValueError("no tiers in the report")
    except (IndexError, ValueError) as exc:
        tail = "\n    ".join(result.stderr.strip().splitlines()[-15:])
        report = {"schema": 1, "passed": False, "device": device, "tiers": [{
            "name": "smoke", "status": "failed", "seconds": result.seconds,
            "summary": f"the smoke program gave no report (exit code {result.exit_code}: {exc})",
            "details": {"stderr_tail": tail}}]}
    report["exit_code"] = result.exit_code
    return report, result.seconds


@dataclass(frozen=True)
class Verdict:
    """What a smoke report earns: ``passed`` (seal and release tag), ``candidate`` (a
    ``-candidate`` tag: static tiers passed, device tiers owed) or ``failed`` (no tag)."""

    status: str
    message: str = ""
    seal_labels: Dict[str, str] = field(default_factory=dict)


def verdict(report: Dict, tiers: Tuple[str, ...], final: bool) -> Verdict:
    """Decide from the report alone: every required tier passed (or was skipped with a
    reason), the program said it passed and exited 0. ``final`` runs earn the seal.

    The seal says what happened: ``Label.VALIDATED_TIERS`` lists only the tiers that
    passed, ``Label.SKIPPED_TIERS`` the ones skipped (their reasons are in the report and
    the signed validation statement), e.g. the all-reduce with one NPU visible.

    Example:
        >>> ok = {"passed": True, "exit_code": 0, "device": "cpu", "host": {},
        ...       "tiers": [{"name": "versions", "status": "passed"}, {"name": "import", "status": "skipped"}]}
        >>> verdict(ok, ("versions",), final=False).status
        'candidate'
        >>> verdict(ok, ("versions", "train"), final=True).status
        'failed'
        >>> sealed = verdict(ok, ("versions", "import"), final=True).seal_labels
        >>> sealed[Label.VALIDATED_TIERS], sealed[Label.SKIPPED_TIERS]
        ('versions', 'import')
    """
    by_name = {t.get("name"): t.get("status") for t in report.get("tiers", [])}
    required_ok = all(by_name.get(t) in ("passed", "skipped") for t in tiers)
    if not (report.get("passed") and report.get("exit_code") == 0 and required_ok):
        failed = [t for t in report.get("tiers", []) if t.get("status") == "failed"]
        missing = [t for t in tiers if t not in by_name]
        why = [f"{t.get('name')}: {t.get('summary', '')}" for t in failed] + [f"{t}: not run" for t in missing]
        return Verdict("failed", "; ".join(why) or "smoke test failed")
    if not final:
        return Verdict("candidate")
    host = report.get("host") or {}
    skipped = [t for t in tiers if by_name.get(t) == "skipped"]
    return Verdict("passed", seal_labels={
        Label.VALIDATED: "true", Label.VALIDATED_DEVICE: report.get("device", ""),
        Label.VALIDATED_TIERS: ",".join(t for t in tiers if by_name.get(t) == "passed"),
        **({Label.SKIPPED_TIERS: ",".join(skipped)} if skipped else {}),
        Label.VALIDATED_DRIVER: str(host.get("driver") or ""),
        Label.VALIDATED_FIRMWARE: str(host.get("firmware") or ""),
        Label.VALIDATED_UNDER: str(report.get("emulated") or "native")})


def seal(engine: Engine, candidate: str, report_bytes: bytes, labels: Dict[str, str], folder: Path,
         log: Path) -> str:
    """A tiny ``FROM candidate`` build adding the validation report and labels; returns the new ID."""
    temp_ref = leftovers.candidate_tag(candidate)  # a killed run's is swept by the next (Engine.remove_orphans)
    folder.mkdir(parents=True, exist_ok=True)
    # whole or not at all: a full disk here is a clear error before the seal build, never half a report sealed
    writes.replace_file(folder / "validation.json", report_bytes)
    writes.replace_file(folder / "Dockerfile", f"FROM {temp_ref}\nCOPY validation.json {VALIDATION_REPORT}\n".encode())
    engine.tag(candidate, temp_ref)
    try:  # built for the candidate's own platform, else BuildKit would look for an amd64 one
        arch = engine.architecture(candidate)
        return engine.build(folder, labels=labels, log_path=log, platform=f"linux/{arch}" if arch else None)
    finally:
        engine.untag(temp_ref)


def _apply_tags(engine: Engine, image_id: str, refs: List[str]) -> None:
    """Tag all or nothing: an interruption half-way removes the tags already set."""
    done: List[str] = []
    try:
        for ref in refs:
            engine.tag(image_id, ref)
            done.append(ref)
    except BaseException:
        for ref in done:
            engine.untag(ref)
        raise


def preflight(job: Job, options: Options, engine: Engine, say: Say) -> None:
    """What would fail or mislead the build, found before its first step, each download the
    build needs asked first (a UserError with the fix that applies: the build would fetch
    them only after the OS packages, minutes under qemu): the base image (not on this engine
    and its registry does not serve it: --base-image, or --twin-os for a twin), Miniforge's
    installer for a conda image (--conda-installer, or mirrors.conda_installer), the CANN
    download server for each installer; and a ``--base-image`` whose OS is not the cell's (a
    warning: the image would be labelled with an OS it does not have); then the free space the
    build needs, on the state folder's file system and the engine's (`free_space`)."""
    image = job.image
    base_problem = engine.base_unavailable(image.base_image)
    if base_problem:
        given = "--base-image" if options.base_image else "the cell's base image"
        fixes = [f"pull or load {image.base_image} into this engine where it can be had (docker save | docker load)",
                 f"or pass --base-image IMAGE of {job.plan.manifests[job.variant]['os']} that this engine has"]
        if not job.npu:
            fixes.append("or --twin-os OS to build the CPU twin on an OS whose base image this engine has "
                         "(a stand-in, labelled as one)")
        raise UserError(f"[{job.name}] {given} {image.base_image} is not on this engine and its registry cannot "
                        f"serve it ({base_problem}); nothing was built", fix=", ".join(fixes), exit_code=1)
    if options.base_image:
        wanted = str(job.plan.manifests[job.variant]["os"])
        found = engine.os_release(options.base_image)
        have = f"{found.get('ID', '')}{found.get('VERSION_ID', '')}".lower()
        if found and have != wanted:
            say(f"[{job.name}] warning: --base-image {options.base_image} is {found.get('PRETTY_NAME') or have}, "
                f"not the cell's {wanted}: the image is labelled {wanted} all the same (fix: a base image "
                f"of {wanted}, or --twin-os for a stand-in twin labelled as one)")
    if image.conda_file and not options.conda_installer:
        mirror = dict(job.plan.mirrors).get("conda_installer")
        url = f"{mirror.rstrip('/')}/{image.conda_file}" if mirror else image.python_environment.installer_url
        fetch.reachable(url, referer="", fix=f"pass --conda-installer FILE with Miniforge's installer {image.conda_file} "
                                             "(its sha256 is checked all the same), or set the matrix's "
                                             "mirrors.conda_installer to a folder URL that serves it")
    cann = image.find(CannInstallers)
    if job.npu and cann is not None and cann.source == "installer":
        for file in cann.installers:
            fetch.reachable(file.url, referer=cann.referer)
    free_space.check(job, options, engine, say)


def build(job: Job, options: Options, engine: Engine, say: Say, out: Outcome) -> bool:
    """Stage the job's context (its own wheel checked, the lock's wheels fetched natively for
    an emulated arch) and build it: the candidate's ID in ``out``, or why it failed."""
    plan, state = job.plan, options.state_dir
    preflight(job, options, engine, say)
    # the cell's own torch_npu wheel: its bytes checked before any build starts
    own = ([own_wheel.verified(*plan.own_wheel, downloads=state / "own-wheels")]
           if job.npu and plan.own_wheel else [])
    fetched = _fetch_wheels(job, state / "wheels" / job.name, say) if job.emulated and plan.lock_state == "ok" else None
    installers = Path(plan.installers_dir) if job.npu and plan.installers_dir else None
    out.log = str(state / "logs" / f"{job.name}.build.log")
    with stage.claim(state / "contexts", plan.arch, job.variant) as folder:
        conda = (options.conda_installer, job.image.conda_file) if options.conda_installer and job.image.conda_file else None
        context = stage.context(render.files(plan), folder, options.wheelhouse, installers, fetched, own, conda)
        say(f"[{job.name}] building {job.variant} image" + (f" for {plan.arch} under qemu" if job.emulated else ""))
        start = time.monotonic()
        try:
            with stage.secrets(plan, options.ca_bundle, offline_pip=fetched is not None) as secret_files:
                out.image_id = engine.build(
                    context, job.image.dockerfile, secrets=secret_files, log_path=Path(out.log),
                    build_args={planning.ALLOW_UNVERIFIED: "1"} if plan.lock_state != "ok" else {},
                    labels=oci.build_labels(job.matrix_path, job.image.base_image,
                                            base_digest=_base_digest(engine, job.image.base_image)),
                    on_line=progress.Progress(job.name, say, options.quiet,
                                              (context / job.image.dockerfile).read_text(encoding="utf-8")),
                    platform=platform_of(plan.arch) if job.emulated else None, no_cache=options.no_cache)
        except BuildFailed as exc:
            out.status, out.message = "failed", str(exc)
            return False
        finally:
            out.build_seconds = time.monotonic() - start
    return True


def _base_digest(engine: Engine, base: str) -> str:
    """The registry manifest digest of the base image when the engine knows one (it was pulled), else ""."""
    for found in engine.repo_digests(base):
        if "@sha256:" in found:
            return found.rpartition("@")[2]
    return ""


def smoke_test(job: Job, engine: Engine, say: Say, out: Outcome) -> Dict:
    """Run the job's tiers in its candidate; the report, with what the image was built from."""
    plan, tiers = job.plan, job.smoke.tiers
    say(f"[{job.name}] smoke test on {job.smoke.device}: {', '.join(tiers)}")
    report, out.smoke_seconds = smoke(engine, out.image_id, job.smoke.device, tiers, job.smoke.docker_devices,
                                      job.smoke.mounts, ("--steps", str(EMULATED_STEPS)) if job.emulated else (),
                                      smoke_scale(job.emulated))
    base = job.image.base_image
    report.update({
        "content_hash": plan.content_hash, "lock": plan.lock_state,
        "emulated": f"qemu-user: {plan.arch} on an {host_arch()} host" if job.emulated else None,
        "stand_in": plan.stand_in or None,
        "base_image": {"ref": base, "id": engine.image_id(base), "digests": engine.repo_digests(base)},
    })
    return report


def _fetch_wheels(job: Job, folder: Path, say: Say) -> Optional[Path]:
    """The lock's wheels for the job's platform, downloaded natively (see `wheels`); None if not."""
    start, plan = time.monotonic(), job.plan
    uv = folder.with_name(f"{folder.name}.uv.txt")  # the installer the build uses comes offline too
    folder.parent.mkdir(parents=True, exist_ok=True)
    writes.replace_file(uv, (plan.uv + "\n").encode())
    why_not = wheelhouse.download((job.lock_file, uv), folder, python=plan.python, arch=plan.arch, glibc=plan.glibc)
    if why_not:
        say(f"[{job.name}] wheels will be fetched inside the emulated build: {why_not}")
        return None
    say(f"[{job.name}] {len(list(folder.glob('*.whl')))} wheels of the lock fetched natively for {plan.arch} "
        f"in {time.monotonic() - start:.1f} s; the build installs them offline")
    return folder


def _keep_report(out: Outcome, report: Dict, tiers: Tuple[str, ...], name: str, state: Path) -> bytes:
    """Write the report under the state directory (whatever the verdict); its bytes."""
    report.update({"cell": out.cell, "variant": out.variant, "candidate": out.image_id, "required_tiers": list(tiers)})
    out.tiers = report.get("tiers", [])
    report_path = state / "reports" / f"{name}.json"
    report_bytes = _keep_json(report, report_path)
    out.report = str(report_path)
    return report_bytes


def conclude(out: Outcome, engine: Engine, report: Dict, tiers: Tuple[str, ...], final: bool, ref: str,
              name: str, options: Options, say: Say = lambda line: None) -> Outcome:
    """Keep the report, judge it; a pass is sealed (when final) and tagged, then pushed.
    Each step says its progress line first (``[NAME] sealing``, ``tagging``, ``pushing``)."""
    state = options.state_dir
    report_bytes = _keep_report(out, report, tiers, name, state)
    judged = verdict(report, tiers, final)
    out.status, out.message = judged.status, judged.message
    if judged.status == "failed":
        return out
    if judged.status == "passed":
        say(f"[{name}] sealing: the report and the validated labels added")
        image_id = seal(engine, out.image_id, report_bytes, judged.seal_labels, state / "seal" / name,
                        state / "logs" / f"{name}.seal.log")
    else:
        ref, image_id = ref + CANDIDATE_SUFFIX, out.image_id
    candidate = out.image_id
    out = tag_and_push(out, engine, image_id, ref, options, name, say)
    if image_id != candidate:  # sealed: the candidate's layers live on in the sealed image
        engine.remove_if_unnamed(candidate)
    return out


def tag_and_push(out: Outcome, engine: Engine, image_id: str, ref: str, options: Options, name: str,
                 say: Say) -> Outcome:
    """Name ``image_id`` ``ref`` (and, with a push, its name in the registry) and push it. An
    image those names leave unnamed (an earlier seal under the same tag, 1-2 GB) is removed,
    never left dangling; one still named otherwise or in use stays."""
    pushed = f"{options.push.rstrip('/')}/{ref}" if options.push else ""
    refs = [ref] + ([pushed] if pushed else [])
    before = {found for found in map(engine.image_id, refs) if found and found != image_id}
    say(f"[{name}] tagging {', '.join(refs)}")
    _apply_tags(engine, image_id, refs)
    for old in before:
        engine.remove_if_unnamed(old)
    out.image_id, out.tags = image_id, refs
    if pushed:
        say(f"[{name}] pushing {pushed}")
        try:
            with bounded.command_deadline(options.push_deadline):
                digest = engine.push(pushed)
        except UserError as exc:  # e.g. refused credentials: keep the outcome (id, tags, report) and the image
            out.status = "error"
            out.message = f"{exc.message} (kept locally as {', '.join(refs)})" + (f"\n  fix: {exc.fix}" if exc.fix else "")
            return out
        now = engine.image_id(pushed)
        if now != image_id:  # the engine pushes what the name holds when it reads it: another run's image
            out.status = "error"
            out.message = (f"{pushed} was given to another image ({now or 'none'}) while this run pushed it: what "
                           f"went out as {digest} may not be this run's image {image_id}, so it counts as published "
                           "by neither and nothing is attested (kept locally by its ID)"
                           "\n  fix: run one build of a cell per registry name at a time; then push again")
            return out
        out.digests[pushed] = digest
    return out


def attest_pushed(out: Outcome, report: Dict, tiers: Tuple[str, ...], content_hash: str,
                  proof: Optional[attest.Evidence], options: Options, say: Say, bom: Optional[Dict] = None) -> Outcome:
    """After the push, with a signing key: attach the signed validation statement (and the
    provenance, when ``proof`` knows the build's inputs, and the SBOM ``bom``) to every pushed digest.

    Push and attach are one operation to the user: when attaching fails, the outcome fails
    and says what is published without its statements.
    """
    if options.sign_key is None or not out.digests:
        return out
    if out.status != "passed":
        if out.status == "candidate":
            say(f"[{out.cell}] not attested: a {CANDIDATE_SUFFIX} image is not validated yet")
        return out
    predicates = attest.statements_for(report, tiers, out.cell, out.variant, content_hash, proof, bom)
    for ref, digest in out.digests.items():
        start = time.monotonic()
        try:
            with bounded.command_deadline(options.push_deadline):
                out.attested[ref] = attest.attest(ref, digest, predicates, options.sign_key, out.image_id)
        except UserError as exc:
            out.status = "error"
            out.message = (f"{ref} ({digest}) is published WITHOUT its signed statements: {exc.message}; "
                           "`ascend-build verify` refuses it" + (f"\n  fix: {exc.fix}; then push again" if exc.fix else ""))
            return out
        say(f"[{out.cell}] attested {ref}@{digest}: {', '.join(kind for kind, _ in predicates)} "
            f"({time.monotonic() - start:.2f} s)")
    return out


def lazy_variant(out: Outcome, report: Dict, tiers: Tuple[str, ...], content_hash: str, arch: str, name: str,
                 options: Options, say: Say) -> Outcome:
    """With ``--lazy FORMAT``, after the push (and the statements): the lazily pullable variant of every
    pushed digest of a passed image, its prioritized files the report's ``files_read``
    (`builder.images.lazy`), and with a signing key the statement binding it to the pushed image.

    The variant comes after the validated image: when it fails, the outcome fails and says that the
    validated image is published (with its statements) and the variant is not, or is without its
    statement."""
    if not options.lazy or out.status != "passed" or not out.digests:
        return out
    validation = attest.validation_predicate(report, tiers, out.cell, out.variant, content_hash)
    for ref, digest in out.digests.items():
        try:
            with bounded.command_deadline(options.push_deadline):
                target, lazy_digest = lazy.publish_variant(ref, digest, report, validation, arch, options.state_dir,
                                                           name, options.sign_key, options.lazy, say)
        except UserError as exc:
            out.status = "error"
            out.message = (f"{ref} ({digest}) is published, its {options.lazy} variant is not (or is without its "
                           f"signed statement): {exc.message}" + (f"\n  fix: {exc.fix}" if exc.fix else ""))
            return out
        out.lazy[target] = lazy_digest
    return out


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


def indexes(outcomes: List[Outcome], push: str, say: Say, deadline: float = 0,
            declared: Optional[Dict[str, Tuple[str, ...]]] = None) -> List[Outcome]:
    """After a push, the index of every cell whose every arch's tag is now in the registry:
    every arch the matrix declares for it (``declared``, `publish.declared_arches`; without
    it, every arch), so an arm64-only cell's index holds its one arch.

    An arch built elsewhere (another runner, an earlier run) counts once its tag is
    there; an arch not pushed yet means no index yet (said, not an error), and
    `publish` refuses any arch image that did not pass. Each index, from reading the tags
    on, within ``deadline`` seconds (0: each request's own deadline only).
    """
    host, _, namespace = push.strip("/").partition("/")
    registry, done, out = Registry(host), set(), []
    for o in outcomes:
        for ref in o.digests if o.status == "passed" else ():
            repository, _, tag = ref[len(host) + 1:].rpartition(":")
            found = publish.family_of(tag)
            if found is None or (repository, found) in done:
                continue
            done.add((repository, found))
            family, variant = found
            with bounded.command_deadline(deadline):
                try:
                    present = set(registry.tags(repository))
                except UserError as exc:
                    out.append(Outcome(family, variant, message=str(exc)))
                    continue
                archs, why = publish.index_arches(family, declared)
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
    out = Outcome(cell_id, NPU, image_id=engine.image_id(ref) or "")
    say(f"[{cell_id}] device tiers on npu {chosen}")
    tiers = required_tiers(NPU, cann_only=not labels.get(Label.TORCH))
    report, out.smoke_seconds = smoke(engine, ref, NPU, tiers, devices.docker_devices(chosen, options.root),
                                      devices.driver_mounts(options.root), scale=smoke_scale(False))
    release = ref[: -len(CANDIDATE_SUFFIX)] if ref.endswith(CANDIDATE_SUFFIX) else ref
    if options.push:  # the registry prefix is added again by conclude
        release = release.split("/", 1)[-1] if release.startswith(options.push.rstrip("/") + "/") else release
    out = conclude(out, engine, report, tiers, True, release, cell_id, options, say)
    return attest_pushed(out, report, tiers, labels.get(Label.CONTENT_HASH, ""), None, options, say)
