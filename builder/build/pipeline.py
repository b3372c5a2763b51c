"""Build -> smoke -> seal -> tag -> push, one cell and variant at a time.

The rule this module exists to keep: **only an image that passed its smoke test
gets a release tag.** A build yields a candidate (an image ID, no tag). The
smoke program runs inside it on this host. Only when every required tier passed
is the candidate sealed (a tiny ``FROM`` step adding the report at
``vocabulary.VALIDATION_REPORT`` and the ``Label.VALIDATED*`` labels)
and tagged. A failed build or tier, or Ctrl-C, leaves no release tag; the build
log and the report stay under the state directory.

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
import platform
import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from builder import devices
from builder import knowledge
from builder.build import lock as locking
from builder.build import plan as planning
from builder.build import own_wheel, publish, render, stage, wheels
from builder.build.matrix import Cell
from builder.engine import BuildFailed, Engine
from builder.errors import UserError
from builder.registry import Registry
from builder.vocabulary import (ARCHS, CANDIDATE_SUFFIX, CPU, NPU, SMOKE_PROGRAM, STATIC_TIERS, VALIDATION_REPORT,
                                VARIANTS, Label, dockerfile_name, normalize_arch, platform_of, release_tag,
                                required_tiers, stand_in_tag)

Say = Callable[[str], None]


@dataclass
class Options:
    """How to build: which variants, where state goes, what the host offers."""

    variants: Tuple[str, ...] = VARIANTS
    state_dir: Path = Path(".state")
    no_device: bool = False
    devices: Optional[str] = None          # "0,1"; None = every NPU of the host
    push: Optional[str] = None             # registry host[:port][/namespace]
    base_image: Optional[str] = None       # overrides every cell's OS base image
    wheelhouse: Optional[Path] = None
    ca_bundle: Optional[Path] = None
    root: Path = Path("/")                 # where to look for /dev and the driver (tests)
    quiet: bool = False
    locks_dir: Path = Path("dockerfiles")  # where each cell's lock is: <locks_dir>/<cell>/requirements.lock
    twin_os: Optional[str] = None          # build CPU twins on this OS instead (a stand-in; same closure)
    allow_incomplete_lock: bool = False    # build a cell whose lock is not complete (entries unverified)


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
    arches: Dict[str, str] = field(default_factory=dict)  # an index's entries: arch -> digest

    @property
    def ok(self) -> bool:
        return self.status in ("passed", "candidate")


def variants_for(choice: str, has_npu: bool) -> Tuple[str, ...]:
    """``--variant`` to the variants to build: ``auto`` is both on an NPU host, the CPU twin elsewhere."""
    table = {"auto": VARIANTS if has_npu else (CPU,), "both": VARIANTS, NPU: (NPU,), CPU: (CPU,)}
    if choice not in table:
        raise UserError(f"--variant {choice!r} is not one of {', '.join(table)}", fix="pick one of them")
    return table[choice]


def image_name(cell: Cell, variant: str) -> str:
    """File-system name of an image (state files): the cell id, ``-cpu`` for the twin."""
    return release_tag(cell.id, variant)


def release_ref(cell: Cell, variant: str) -> str:
    """``image:tag`` of the NPU image, ``image:tag-cpu`` of its CPU twin."""
    return f"{cell.image}:{release_tag(cell.tag, variant)}"


def _registry_ref(registry: Optional[str], ref: str) -> Optional[str]:
    return f"{registry.rstrip('/')}/{ref}" if registry else None


class _Progress:
    """Turns BuildKit's plain output into one line per step (``[2/7] RUN ...``)."""

    STEP = re.compile(r"^#\d+ \[(?:[\w.-]+ )?(\d+/\d+)\] (.*)$")

    def __init__(self, name: str, say: Say, quiet: bool):
        self.name, self.say, self.quiet, self.last = name, say, quiet, ""

    def __call__(self, line: str) -> None:
        match = self.STEP.match(line)
        if match and not self.quiet and match.group(1) != self.last:
            self.last = match.group(1)
            text = " ".join(match.group(2).split())
            self.say(f"[{self.name}] step {match.group(1)} {text[:100]}")


def _plan(variant: str, options: Options, cann_only: bool = False
          ) -> Tuple[str, Tuple[str, ...], List[str], List[Tuple[str, str, bool]], bool]:
    """(device, tiers, docker devices, mounts, final) for a smoke run of ``variant`` on this host.

    ``final`` says whether passing earns the release tag (True) or only ``-candidate``.
    A CANN-only image has no torch tiers: its twin runs the versions tier, its NPU image
    the static tiers, on an NPU host too (nothing in it runs on the device).
    """
    if variant == CPU:
        return CPU, required_tiers(CPU, cann_only), [], [], True
    present = [] if options.no_device else devices.npu_devices(options.root)
    if not present:
        return NPU, STATIC_TIERS, [], devices.driver_mounts(options.root), False
    chosen = devices.choose(present, options.devices)
    return (NPU, required_tiers(NPU, cann_only), devices.docker_devices(chosen, options.root),
            devices.driver_mounts(options.root), True)


# Under qemu a training step of the smoke model takes about 23 s (its backward pass is
# emulated instruction by instruction): four steps still show the loss falling (to about
# a third natively), thirty would take twelve minutes.
EMULATED_STEPS = 4


def smoke(engine: Engine, image: str, device: str, tiers: Tuple[str, ...], docker_devices: List[str],
          mounts: List[Tuple[str, str, bool]], extra: Tuple[str, ...] = ()) -> Tuple[Dict, float]:
    """Run the smoke program inside ``image``; return its JSON report and the seconds it took."""
    command = ["python", SMOKE_PROGRAM, "--device", device, "--tiers", ",".join(tiers), *extra]
    result = engine.run(image, command, devices=docker_devices, mounts=mounts, shm_size="1g",
                        ipc_mode="host" if docker_devices else None, timeout=1800)
    lines = [ln for ln in result.stdout.splitlines() if ln.strip()]
    try:
        report = json.loads(lines[-1])
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

    Example:
        >>> ok = {"passed": True, "exit_code": 0, "device": "cpu", "host": {},
        ...       "tiers": [{"name": "versions", "status": "passed"}]}
        >>> verdict(ok, ("versions",), final=False).status
        'candidate'
        >>> verdict(ok, ("versions", "train"), final=True).status
        'failed'
        >>> verdict(ok, ("versions",), final=True).seal_labels[Label.VALIDATED_TIERS]
        'versions'
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
    return Verdict("passed", seal_labels={
        Label.VALIDATED: "true", Label.VALIDATED_DEVICE: report.get("device", ""),
        Label.VALIDATED_TIERS: ",".join(tiers), Label.VALIDATED_DRIVER: str(host.get("driver") or ""),
        Label.VALIDATED_FIRMWARE: str(host.get("firmware") or ""),
        Label.VALIDATED_UNDER: str(report.get("emulated") or "native")})


def seal(engine: Engine, candidate: str, report_bytes: bytes, labels: Dict[str, str], folder: Path,
         log: Path) -> str:
    """A tiny ``FROM candidate`` build adding the validation report and labels; returns the new ID."""
    temp_ref = f"ascend-build-candidate:{candidate.split(':')[-1][:20]}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "validation.json").write_bytes(report_bytes)
    (folder / "Dockerfile").write_text(f"FROM {temp_ref}\nCOPY validation.json {VALIDATION_REPORT}\n")
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


def host_arch() -> str:
    """This machine's arch in the matrix's words."""
    return normalize_arch(platform.machine()) or platform.machine()


def build_one(cell: Cell, variant: str, options: Options, engine: Engine, say: Say) -> Outcome:
    """Build, smoke-test and (if it passed) seal, tag and push one image.

    A cell of another arch than this host's is built and smoke-tested under qemu (the
    report and the seal say so). With ``options.twin_os`` the CPU twin is built on that
    OS's base (venv, its own python3) with the cell's locked closure: a stand-in, tagged
    and labelled as one, never as the cell's own twin.
    """
    out = Outcome(cell.id, variant)
    state = options.state_dir
    closure_of = None
    if variant == CPU and options.twin_os and options.twin_os != cell.os:
        stand_in = knowledge.load().os_info(options.twin_os)
        if stand_in is None or stand_in.python != cell.python:
            raise UserError(f"--twin-os {options.twin_os}: its python3 is {stand_in.python if stand_in else 'unknown'}, "
                            f"cell {cell.id} needs Python {cell.python}",
                            fix="pick an OS of builder/data/os.yaml whose python3 is the cell's (debian11: 3.9, debian12: 3.11)")
        closure_of, cell = cell, replace(cell, os=options.twin_os, env="venv")
    name = image_name(cell, variant) + (f"-on-{cell.os}" if closure_of else "")
    if options.base_image:
        cell = replace(cell, base_image=options.base_image)
    emulated = cell.arch != host_arch()
    dockerfile = dockerfile_name(variant)
    lock = locking.read(options.locks_dir / (closure_of or cell).id)
    lock_state = locking.status(lock, planning.lock_inputs(closure_of or cell, knowledge.load()))
    if lock_state != "ok" and not options.allow_incomplete_lock:
        why = {"missing": "has no lock", "stale": "has a lock made from other inputs",
               "incomplete": "has a lock with entries lacking a sha256 (" + ", ".join(
                   f"{e.name}=={e.version}" for e in (lock.incomplete if lock else ())) + ")"}[lock_state]
        out.message = (f"{cell.id} {why} in {options.locks_dir}: its image would install unverified packages\n"
                       f"  fix: run `ascend-build lock` (where every source is reachable), or pass --allow-incomplete-lock")
        return out
    unrecorded = planning.unrecorded_installers(cell, knowledge.load(), lock) if variant == NPU else ()
    if unrecorded:  # the Dockerfile refuses too; saying it here spares a build that cannot succeed
        out.message = (f"{cell.id}: no sha256 known for {', '.join(unrecorded)}: no installer runs unverified\n"
                       f"  fix: run `ascend-build lock` where the download server answers (it records each "
                       f"file's sha256 on first fetch), or add sha256: {{FILE: HEX}} to the cell")
        return out
    installers = Path(cell.cann_local) if (variant == NPU and cell.cann_source == "local") else None
    try:  # the cell's own torch_npu wheel: its bytes checked before any build starts
        own = ([own_wheel.verified(*cell.torch_npu_wheel, downloads=state / "own-wheels")]
               if (variant == NPU and cell.torch_npu_wheel) else [])
    except UserError as exc:
        out.message = str(exc)
        return out
    fetched = (_fetch_wheels(cell, options.locks_dir / (closure_of or cell).id / locking.LOCK_FILE,
                             state / "wheels" / name, name, say) if emulated and lock_state == "ok" else None)
    with stage.claim(state / "contexts", cell.arch, variant) as folder:
        context = stage.context(render.render_cell(cell, lock=lock, closure_of=closure_of), folder,
                                options.wheelhouse, installers, fetched, own)
        log = state / "logs" / f"{name}.build.log"
        out.log = str(log)
        build_args = {planning.ALLOW_UNVERIFIED: "1"} if lock_state != "ok" else {}

        say(f"[{name}] building {variant} image" + (f" for {cell.arch} under qemu" if emulated else ""))
        start = time.monotonic()
        try:
            with stage.secrets(cell, options.ca_bundle, offline_pip=fetched is not None) as secret_files:
                candidate = engine.build(context, dockerfile, secrets=secret_files, log_path=log, build_args=build_args,
                                         on_line=_Progress(name, say, options.quiet),
                                         platform=platform_of(cell.arch) if emulated else None)
        except BuildFailed as exc:
            out.build_seconds = time.monotonic() - start
            out.status, out.message = "failed", str(exc)
            return out
    out.build_seconds = time.monotonic() - start
    out.image_id = candidate

    device, tiers, docker_devices, mounts, final = _plan(variant, options, cell.cann_only)
    say(f"[{name}] smoke test on {device}: {', '.join(tiers)}")
    report, out.smoke_seconds = smoke(engine, candidate, device, tiers, docker_devices, mounts,
                                      ("--steps", str(EMULATED_STEPS)) if emulated else ())
    report["content_hash"] = render.content_hash(cell, lock)
    report["lock"] = lock_state
    report["emulated"] = f"qemu-user: {cell.arch} on an {host_arch()} host" if emulated else None
    report["stand_in"] = planning.stand_in_reason(cell, closure_of) if closure_of else None
    base = (cell.cann_image if variant == NPU and cell.cann_source == "image"
            else cell.base_image or knowledge.load().os_info(cell.os).image)
    report["base_image"] = {"ref": base, "id": engine.image_id(base), "digests": engine.repo_digests(base)}
    ref = f"{cell.image}:{stand_in_tag(closure_of.tag, cell.os)}" if closure_of else release_ref(cell, variant)
    return _conclude(out, engine, report, tiers, final, ref, name, options)


def _fetch_wheels(cell: Cell, lock_file: Path, folder: Path, name: str, say: Say) -> Optional[Path]:
    """The lock's wheels for ``cell``'s platform, downloaded natively (see `wheels`); None if not."""
    start = time.monotonic()
    kb = knowledge.load()
    uv = folder.with_name(f"{folder.name}.uv.txt")  # the installer the build uses comes offline too
    folder.parent.mkdir(parents=True, exist_ok=True)
    uv.write_text(kb.uv_requirement(cell.arch) + "\n")
    why_not = wheels.download((lock_file, uv), folder, python=cell.python, arch=cell.arch,
                              glibc=kb.os_info(cell.os).glibc)
    if why_not:
        say(f"[{name}] wheels will be fetched inside the emulated build: {why_not}")
        return None
    say(f"[{name}] {len(list(folder.glob('*.whl')))} wheels of the lock fetched natively for {cell.arch} "
        f"in {time.monotonic() - start:.1f} s; the build installs them offline")
    return folder


def _keep_report(out: Outcome, report: Dict, tiers: Tuple[str, ...], name: str, state: Path) -> bytes:
    """Write the report under the state directory (whatever the verdict); its bytes."""
    report.update({"cell": out.cell, "variant": out.variant, "candidate": out.image_id, "required_tiers": list(tiers)})
    out.tiers = report.get("tiers", [])
    report_bytes = (json.dumps(report, indent=2, sort_keys=True) + "\n").encode()
    report_path = state / "reports" / f"{name}.json"
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_bytes(report_bytes)
    out.report = str(report_path)
    return report_bytes


def _conclude(out: Outcome, engine: Engine, report: Dict, tiers: Tuple[str, ...], final: bool, ref: str,
              name: str, options: Options) -> Outcome:
    """Keep the report, judge it; a pass is sealed (when final) and tagged, then pushed."""
    state = options.state_dir
    report_bytes = _keep_report(out, report, tiers, name, state)
    judged = verdict(report, tiers, final)
    out.status, out.message = judged.status, judged.message
    if judged.status == "failed":
        return out
    if judged.status == "passed":
        image_id = seal(engine, out.image_id, report_bytes, judged.seal_labels, state / "seal" / name,
                        state / "logs" / f"{name}.seal.log")
    else:
        ref, image_id = ref + CANDIDATE_SUFFIX, out.image_id
    refs = [ref] + ([_registry_ref(options.push, ref)] if options.push else [])
    _apply_tags(engine, image_id, refs)
    if image_id != out.image_id:  # sealed: the candidate's layers live on in the sealed image
        engine.remove_if_unnamed(out.image_id)
    out.image_id, out.tags = image_id, refs
    if options.push:
        try:
            out.digests[refs[1]] = engine.push(refs[1])
        except UserError as exc:  # e.g. refused credentials: keep the outcome (id, tags, report) and the image
            out.status = "error"
            out.message = f"{exc.message} (kept locally as {', '.join(refs)})" + (f"\n  fix: {exc.fix}" if exc.fix else "")
    return out


def run(cells: List[Cell], options: Options, engine: Engine, say: Say) -> List[Outcome]:
    """Every (cell, variant) in order; one failure does not stop the others. With a push,
    each cell whose every arch is now in the registry gets its index (see `indexes`)."""
    outcomes = []
    for cell in cells:
        for variant in options.variants:
            try:
                outcomes.append(build_one(cell, variant, options, engine, say))
            except UserError as exc:  # e.g. a refused push: report it, keep the local image
                outcomes.append(Outcome(cell.id, variant, status="error", message=str(exc)))
    return outcomes + (indexes(outcomes, options.push, say) if options.push else [])


def index_outcome(registry: Registry, repository: str, family: str, variant: str) -> Outcome:
    """Publish one index, as an outcome of its own (``arches``: what it points at)."""
    ref = f"{registry.name}/{repository}:{publish.index_tag(family, variant)}"
    out = Outcome(family, variant, tags=[ref])
    try:
        digest, out.arches = publish.publish(registry, repository, family, variant)
    except UserError as exc:
        out.message = str(exc)
        return out
    out.status, out.digests = "passed", {ref: digest}
    out.message = "index of " + ", ".join(f"{arch} {d}" for arch, d in sorted(out.arches.items()))
    return out


def indexes(outcomes: List[Outcome], push: str, say: Say) -> List[Outcome]:
    """After a push, the index of every cell whose every arch's tag is now in the registry.

    An arch built elsewhere (another runner, an earlier run) counts once its tag is
    there; an arch not pushed yet means no index yet (said, not an error), and
    `publish` refuses any arch image that did not pass.
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
            try:
                present = set(registry.tags(repository))
            except UserError as exc:
                out.append(Outcome(family, variant, message=str(exc)))
                continue
            waiting = [a for a in ARCHS if release_tag(f"{family}-{a}", variant) not in present]
            if waiting:
                say(f"[{family}] no index yet: {', '.join(waiting)} not in {host}/{repository}")
                continue
            out.append(index_outcome(registry, repository, family, variant))
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
                                      devices.driver_mounts(options.root))
    release = ref[: -len(CANDIDATE_SUFFIX)] if ref.endswith(CANDIDATE_SUFFIX) else ref
    if options.push:  # the registry prefix is added again by _conclude
        release = release.split("/", 1)[-1] if release.startswith(options.push.rstrip("/") + "/") else release
    return _conclude(out, engine, report, tiers, True, release, cell_id, options)
