"""One image's run through the pipeline: its value (`ImageRun`) and its steps, from the build
to the lazy variant.

`build_one` prepares the image's `Job`, makes its `ImageRun` once, and hands that to each step in
turn: build (`preflight` first), `smoke_test`, `conclude` (keep the report, judge it, seal a
pass, `tag_and_push`), `attest_pushed`, `lazy_variant`. An image this engine already holds sealed
skips the build and the smoke test (`already_sealed`, `reuse_sealed`). The steps that build and
test read the `Job` (what to build); the run carries everything else they share, and what they
produce along the way (the report, the build's evidence, the SBOM) for the steps after them.

A refusal before the build is a `UserError`; a failed build, tier, push or attachment is said in
the run's `Outcome` (its status and message), which `build_one` and each step from `conclude` on
return.

Example:
    >>> out = build_one(cell, "cpu", Options(state_dir=Path(".state")), Engine.connect(), print)   # doctest: +SKIP
    >>> out.status, out.tags                                                                      # doctest: +SKIP
    ('passed', ['ascend:cann9.1.0-...-x86_64-cpu'])
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from builder import bounded, claims, documents, writes
from builder.images import plan as planning
from builder.images import attest, fetch, free_space, installed, lazy, oci, own_wheel, progress, sbom, stage, wheelhouse
from builder.images.blocks import CannInstallers
from builder.images.prepare import Job, Options, host_arch, prepare
from builder.images.matrix import Cell
from builder.images.smoke_run import EMULATED_STEPS, seal, smoke, smoke_scale, verdict
from builder.engine import BuildFailed, Engine
from builder.errors import UserError
from builder.vocabulary import CANDIDATE_SUFFIX, VALIDATION_REPORT, Label, platform_of, required_tiers

Say = Callable[[str], None]

# The outcome's message for an image sealed by an earlier run (`reuse_sealed`).
REUSED = "sealed by an earlier run: not built or smoke-tested again"


class Said:
    """Where a run's progress lines go (``say``), the last one kept (``last``): a stopped run
    says where it stopped (`pipeline.stopped_summary`)."""

    def __init__(self, say: Say) -> None:
        self.say, self.last = say, ""

    def __call__(self, line: str) -> None:
        self.last = line
        self.say(line)


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


@dataclass
class ImageRun:
    """One image on its way through the steps: what they all share (this run's options, the
    engine, where progress lines go, the outcome they fill in), which image it is, and what
    the steps produce for the steps after them (the report, the evidence, the SBOM).

    `build_one` makes it from the `Job` (`of`); `pipeline.promote` from a ``-candidate``
    image's labels (no job: it was built elsewhere)."""

    name: str                      # the image's name in the state folder and the progress lines
    ref: str                       # the release reference a pass earns (the registry's prefix added on a push)
    out: Outcome                   # what happened to it, filled in step by step
    options: Options
    engine: Engine
    say: Say
    content_hash: str = ""         # the plan's, as the labels and statements name it
    arch: str = ""
    tiers: Tuple[str, ...] = ()    # the tiers its verdict requires (and its statements name)
    final: bool = True             # a pass earns the seal and the release tag; else a -candidate tag
    report: Dict = field(default_factory=dict)  # the smoke report (or the one a sealed image carries)
    proof: Optional[attest.Evidence] = None     # the build's inputs, for the provenance (with a signing key)
    bom: Optional[Dict] = None                  # the image's SBOM (`builder.images.sbom`)
    base: Dict = field(default_factory=dict)    # the base image as the engine knew it at the build: ref, id, digests

    @classmethod
    def of(cls, job: Job, options: Options, engine: Engine, say: Say, out: Optional[Outcome] = None) -> "ImageRun":
        """The run of ``job``'s image, its outcome ``out`` (a new one if None) named after the job's cell."""
        out = out if out is not None else Outcome(job.plan.cell_id, job.variant)
        out.cell = job.plan.cell_id
        return cls(job.name, job.ref, out, options, engine, say, job.plan.content_hash, job.plan.arch,
                   job.smoke.tiers, job.smoke.final)


def build_one(cell: Cell, variant: str, options: Options, engine: Engine, say: Say,
              out: Optional[Outcome] = None) -> Outcome:
    """Prepare, build, smoke-test and conclude (seal, tag, push) one image, into ``out``;
    a refusal before the build is a `UserError`, a failed build or tier an outcome.

    The image is claimed in the state folder first (`claims`): a second run building it
    with the same state folder is refused, naming this one, until this one ends."""
    job = prepare(cell, variant, options)
    run = ImageRun.of(job, options, engine, say, out)
    held = options.state_dir / "claims" / f"{job.name}.lock"
    held.parent.mkdir(parents=True, exist_ok=True)
    with claims.claim(held, f"building {job.name} with the state folder {options.state_dir}", folder=False,
                      fix="wait for that run to finish, or give this one another --state-dir"):
        run.proof = attest.evidence(job) if options.sign_key else None  # the inputs as the build reads them
        sealed = already_sealed(job, engine)
        if sealed is not None:
            return reuse_sealed(job, run, sealed)
        if not build(job, run):
            return run.out
        run.report = smoke_test(job, run)
        _keep_sbom(run, sbom.of(job, recorded(job, engine, run.out.image_id)))  # with the files the image recorded installing
        conclude(run)
        attest_pushed(run)
        return lazy_variant(run)


def recorded(job: Job, engine: Engine, image: str) -> Dict[str, installed.Installed]:
    """Which file of each locked distribution ``image`` recorded installing (`builder.images.installed`)."""
    lock = job.plan.lock
    entries = lock.entries if lock is not None else ()
    return installed.read(engine, image, [(i.step, i.verified) for i in job.image.installs], entries)


def _keep_sbom(run: ImageRun, bom: Dict) -> None:
    """Keep ``bom`` as the image's SBOM: in the run (its statements attach it) and in the state
    folder (``sbom/``, apart from the reports, which tools read as smoke reports), before any
    tag: a full disk fails the image untagged."""
    path = run.options.state_dir / "sbom" / f"{run.name}.cdx.json"
    _keep_json(bom, path)
    run.bom, run.out.sbom = bom, str(path)


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


def reuse_sealed(job: Job, run: ImageRun, report: Dict) -> Outcome:
    """Publish an image sealed by an earlier run as it is: tag, push and attest it, with the
    report it carries, without building or smoke-testing it again."""
    out, bom = run.out, sbom.of(job, recorded(job, run.engine, job.ref))
    run.say(f"[{job.name}] {job.ref} is this image sealed already (content hash {job.plan.content_hash}, "
            "passed): not built or smoke-tested again")
    out.status, out.tiers = "passed", list(report.get("tiers") or [])
    out.message = REUSED
    _keep_sbom(run, bom)
    run.report, run.tiers = report, required_tiers(job.variant, job.plan.cann_only)
    tag_and_push(run, run.engine.image_id(job.ref) or "", job.ref)
    attest_pushed(run)
    return lazy_variant(run)


def preflight(job: Job, run: ImageRun) -> None:
    """What would fail or mislead the build, found before its first step, each download the
    build needs asked first (a UserError with the fix that applies: the build would fetch
    them only after the OS packages, minutes under qemu): the base image (not on this engine
    and its registry does not serve it: --base-image, or --twin-os for a twin), Miniforge's
    installer for a conda image (--conda-installer, or mirrors.conda_installer), the CANN
    download server for each installer; and a ``--base-image`` whose OS is not the cell's (a
    warning: the image would be labelled with an OS it does not have); then the free space the
    build needs, on the state folder's file system and the engine's (`free_space`). What the
    engine knows of the base image (its ID and registry digests) goes into the run (``run.base``)."""
    image, options, engine, base = job.image, run.options, run.engine, job.base_image
    base_problem = engine.base_unavailable(base)
    if base_problem:
        given = "--base-image" if options.base_image else "the cell's base image"
        fixes = [f"pull or load {base} into this engine where it can be had (docker save | docker load)",
                 f"or pass --base-image IMAGE of {job.plan.manifests[job.variant]['os']} that this engine has"]
        if not job.npu:
            fixes.append("or --twin-os OS to build the CPU twin on an OS whose base image this engine has "
                         "(a stand-in, labelled as one)")
        raise UserError(f"[{job.name}] {given} {base} is not on this engine and its registry cannot "
                        f"serve it ({base_problem}); nothing was built", fix=", ".join(fixes), exit_code=1)
    # what the engine knows of the base, read once: the build's labels and the report name it
    run.base = {"ref": base, **engine.identity(base)}
    if options.base_image:
        wanted = str(job.plan.manifests[job.variant]["os"])
        found = engine.os_release(options.base_image)
        have = f"{found.get('ID', '')}{found.get('VERSION_ID', '')}".lower()
        if found and have != wanted:
            run.say(f"[{job.name}] warning: --base-image {options.base_image} is {found.get('PRETTY_NAME') or have}, "
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
    free_space.check(job, options, engine, run.say)


def build(job: Job, run: ImageRun) -> bool:
    """Stage the job's context (its own wheel checked, the lock's wheels fetched natively for
    an emulated arch) and build it: the candidate's ID in the run's outcome, or why it failed."""
    plan, options, out, say = job.plan, run.options, run.out, run.say
    state = options.state_dir
    preflight(job, run)
    # the cell's own torch_npu wheel: its bytes checked before any build starts
    own = ([own_wheel.verified(*plan.own_wheel, downloads=state / "own-wheels")]
           if job.npu and plan.own_wheel else [])
    fetched = _fetch_wheels(job, state / "wheels" / job.name, say) if job.emulated and plan.lock_state == "ok" else None
    installers = Path(plan.installers_dir) if job.npu and plan.installers_dir else None
    out.log = str(state / "logs" / f"{job.name}.build.log")
    with stage.claim(state / "contexts", plan.arch, job.variant) as folder:
        conda = (options.conda_installer, job.image.conda_file) if options.conda_installer and job.image.conda_file else None
        context = stage.context(job.files, folder, options.wheelhouse, installers, fetched, own, conda)
        say(f"[{job.name}] building {job.variant} image" + (f" for {plan.arch} under qemu" if job.emulated else ""))
        start = time.monotonic()
        try:
            with stage.secrets(plan, options.ca_bundle, offline_pip=fetched is not None) as secret_files:
                out.image_id = run.engine.build(
                    context, job.image.dockerfile, secrets=secret_files, log_path=Path(out.log),
                    build_args={planning.ALLOW_UNVERIFIED: "1"} if plan.lock_state != "ok" else {},
                    labels=oci.build_labels(job.matrix_path, job.base_image, base_digest=_manifest_digest(run.base)),
                    on_line=progress.Progress(job.name, say, options.quiet,
                                              (context / job.image.dockerfile).read_text(encoding="utf-8")),
                    platform=platform_of(plan.arch) if job.emulated else None, no_cache=options.no_cache)
        except BuildFailed as exc:
            out.status, out.message = "failed", str(exc)
            return False
        finally:
            out.build_seconds = time.monotonic() - start
    return True


def _manifest_digest(base: Dict) -> str:
    """The registry manifest digest of the base image when the engine knows one (it was pulled), else ""."""
    for found in base["digests"]:
        if "@sha256:" in found:
            return found.rpartition("@")[2]
    return ""


def smoke_test(job: Job, run: ImageRun) -> Dict:
    """Run the job's tiers in its candidate; the report, with what the image was built from."""
    plan, tiers, engine, out = job.plan, job.smoke.tiers, run.engine, run.out
    run.say(f"[{job.name}] smoke test on {job.smoke.device}: {', '.join(tiers)}")
    report, out.smoke_seconds = smoke(engine, out.image_id, job.smoke.device, tiers, job.smoke.docker_devices,
                                      job.smoke.mounts, ("--steps", str(EMULATED_STEPS)) if job.emulated else (),
                                      smoke_scale(job.emulated))
    report.update({
        "content_hash": plan.content_hash, "lock": plan.lock_state,
        "emulated": f"qemu-user: {plan.arch} on an {host_arch()} host" if job.emulated else None,
        "stand_in": plan.stand_in or None,
        "base_image": run.base,
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


def _keep_report(run: ImageRun) -> bytes:
    """Write the run's report under the state directory (whatever the verdict); its bytes."""
    out, report = run.out, run.report
    report.update({"cell": out.cell, "variant": out.variant, "candidate": out.image_id, "required_tiers": list(run.tiers)})
    out.tiers = report.get("tiers", [])
    report_path = run.options.state_dir / "reports" / f"{run.name}.json"
    report_bytes = _keep_json(report, report_path)
    out.report = str(report_path)
    return report_bytes


def conclude(run: ImageRun) -> Outcome:
    """Keep the run's report, judge it; a pass is sealed (when final) and tagged, then pushed.
    Each step says its progress line first (``[NAME] sealing``, ``tagging``, ``pushing``)."""
    out, name, state = run.out, run.name, run.options.state_dir
    report_bytes = _keep_report(run)
    judged = verdict(run.report, run.tiers, run.final)
    out.status, out.message = judged.status, judged.message
    if judged.status == "failed":
        return out
    candidate, ref = out.image_id, run.ref
    if judged.status == "passed":
        run.say(f"[{name}] sealing: the report and the validated labels added")
        image_id = seal(run.engine, candidate, report_bytes, judged.seal_labels, state / "seal" / name,
                        state / "logs" / f"{name}.seal.log")
    else:
        ref, image_id = ref + CANDIDATE_SUFFIX, candidate
    tag_and_push(run, image_id, ref)
    if image_id != candidate:  # sealed: the candidate's layers live on in the sealed image
        run.engine.remove_if_unnamed(candidate)
    return out


def tag_and_push(run: ImageRun, image_id: str, ref: str) -> Outcome:
    """Name ``image_id`` ``ref`` (and, with a push, its name in the registry) and push it. An
    image those names leave unnamed (an earlier seal under the same tag, 1-2 GB) is removed,
    never left dangling; one still named otherwise or in use stays."""
    out, options, engine = run.out, run.options, run.engine
    pushed = f"{options.push.rstrip('/')}/{ref}" if options.push else ""
    refs = [ref] + ([pushed] if pushed else [])
    before = {found for found in map(engine.image_id, refs) if found and found != image_id}
    run.say(f"[{run.name}] tagging {', '.join(refs)}")
    _apply_tags(engine, image_id, refs)
    for old in before:
        engine.remove_if_unnamed(old)
    out.image_id, out.tags = image_id, refs
    if pushed:
        run.say(f"[{run.name}] pushing {pushed}")
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


def attest_pushed(run: ImageRun) -> Outcome:
    """After the push, with a signing key: attach the signed validation statement (and the
    provenance, when the run's ``proof`` knows the build's inputs, and its SBOM) to every pushed digest.

    Push and attach are one operation to the user: when attaching fails, the outcome fails
    and says what is published without its statements.
    """
    out, options = run.out, run.options
    if options.sign_key is None or not out.digests:
        return out
    if out.status != "passed":
        if out.status == "candidate":
            run.say(f"[{out.cell}] not attested: a {CANDIDATE_SUFFIX} image is not validated yet")
        return out
    predicates = attest.statements_for(run.report, run.tiers, out.cell, out.variant, run.content_hash, run.proof, run.bom)
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
        run.say(f"[{out.cell}] attested {ref}@{digest}: {', '.join(kind for kind, _ in predicates)} "
                f"({time.monotonic() - start:.2f} s)")
    return out


def lazy_variant(run: ImageRun) -> Outcome:
    """With ``--lazy FORMAT``, after the push (and the statements): the lazily pullable variant of every
    pushed digest of a passed image, its prioritized files the report's ``files_read``
    (`builder.images.lazy`), and with a signing key the statement binding it to the pushed image.

    The variant comes after the validated image: when it fails, the outcome fails and says that the
    validated image is published (with its statements) and the variant is not, or is without its
    statement."""
    out, options = run.out, run.options
    if not options.lazy or out.status != "passed" or not out.digests:
        return out
    validation = attest.validation_predicate(run.report, run.tiers, out.cell, out.variant, run.content_hash)
    for ref, digest in out.digests.items():
        try:
            with bounded.command_deadline(options.push_deadline):
                target, lazy_digest = lazy.publish_variant(ref, digest, run.report, validation, run.arch,
                                                           options.state_dir, run.name, options.sign_key, options.lazy,
                                                           run.say)
        except UserError as exc:
            out.status = "error"
            out.message = (f"{ref} ({digest}) is published, its {options.lazy} variant is not (or is without its "
                           f"signed statement): {exc.message}" + (f"\n  fix: {exc.fix}" if exc.fix else ""))
            return out
        out.lazy[target] = lazy_digest
    return out
