"""Build -> smoke -> seal -> tag -> push, one cell and variant at a time.

The rule this module exists to keep: **only an image that passed its smoke test
gets a release tag.** A build yields a candidate (an image ID, no tag). The
smoke program runs inside it on this host. Only when every required tier passed
is the candidate sealed (a tiny ``FROM`` step adding the report at
``/etc/ascend-build/validation.json`` and ``io.ascend-build.validated*`` labels)
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
import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from builder import devices
from builder.build import render, stage
from builder.engine import BuildFailed, Engine
from builder.errors import UserError
from builder.build.matrix import Cell

STATIC_TIERS = ("versions", "libraries")
ALL_TIERS = ("versions", "libraries", "import", "device", "train", "collective")
SMOKE = ["python", "/opt/ascend-build/smoke.py"]
REPORT_IN_IMAGE = "/etc/ascend-build/validation.json"

Say = Callable[[str], None]


@dataclass
class Options:
    """How to build: which variants, where state goes, what the host offers."""

    variants: Tuple[str, ...] = ("npu", "cpu")
    state_dir: Path = Path(".state")
    no_device: bool = False
    devices: Optional[str] = None          # "0,1"; None = every NPU of the host
    push: Optional[str] = None             # registry host[:port][/namespace]
    base_image: Optional[str] = None       # overrides every cell's OS base image
    wheelhouse: Optional[Path] = None
    ca_bundle: Optional[Path] = None
    root: Path = Path("/")                 # where to look for /dev and the driver (tests)
    quiet: bool = False


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

    @property
    def ok(self) -> bool:
        return self.status in ("passed", "candidate")


def variants_for(choice: str, has_npu: bool) -> Tuple[str, ...]:
    """``--variant`` to the variants to build: ``auto`` is both on an NPU host, the CPU twin elsewhere."""
    table = {"auto": ("npu", "cpu") if has_npu else ("cpu",), "both": ("npu", "cpu"), "npu": ("npu",), "cpu": ("cpu",)}
    if choice not in table:
        raise UserError(f"--variant {choice!r} is not one of {', '.join(table)}", fix="pick one of them")
    return table[choice]


def image_name(cell: Cell, variant: str) -> str:
    """File-system name of an image: the cell id, ``-cpu`` for the twin."""
    return cell.id if variant == "npu" else f"{cell.id}-cpu"


def release_ref(cell: Cell, variant: str) -> str:
    """``image:tag`` of the NPU image, ``image:tag-cpu`` of its CPU twin."""
    return f"{cell.image}:{cell.tag}{'' if variant == 'npu' else '-cpu'}"


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


def _plan(variant: str, options: Options) -> Tuple[str, Tuple[str, ...], List[str], List[Tuple[str, str, bool]], bool]:
    """(device, tiers, docker devices, mounts, final) for a smoke run of ``variant`` on this host.

    ``final`` says whether passing earns the release tag (True) or only ``-candidate``.
    """
    if variant == "cpu":
        return "cpu", ALL_TIERS, [], [], True
    present = [] if options.no_device else devices.npu_devices(options.root)
    if not present:
        return "npu", STATIC_TIERS, [], devices.driver_mounts(options.root), False
    chosen = devices.choose(present, options.devices)
    return ("npu", ALL_TIERS, devices.docker_devices(chosen, options.root),
            devices.driver_mounts(options.root), True)


def smoke(engine: Engine, image: str, device: str, tiers: Tuple[str, ...], docker_devices: List[str],
          mounts: List[Tuple[str, str, bool]]) -> Tuple[Dict, float]:
    """Run the smoke program inside ``image``; return its JSON report and the seconds it took."""
    command = SMOKE + ["--device", device, "--tiers", ",".join(tiers)]
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


def _passed(report: Dict, tiers: Tuple[str, ...]) -> bool:
    by_name = {t.get("name"): t.get("status") for t in report.get("tiers", [])}
    required_ok = all(by_name.get(t) in ("passed", "skipped") for t in tiers)
    return bool(report.get("passed")) and report.get("exit_code") == 0 and required_ok


def seal(engine: Engine, candidate: str, report_bytes: bytes, labels: Dict[str, str], folder: Path,
         log: Path) -> str:
    """A tiny ``FROM candidate`` build adding the validation report and labels; returns the new ID."""
    temp_ref = f"ascend-build-candidate:{candidate.split(':')[-1][:20]}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "validation.json").write_bytes(report_bytes)
    (folder / "Dockerfile").write_text(f"FROM {temp_ref}\nCOPY validation.json {REPORT_IN_IMAGE}\n")
    engine.tag(candidate, temp_ref)
    try:
        return engine.build(folder, labels=labels, log_path=log)
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


def build_one(cell: Cell, variant: str, options: Options, engine: Engine, say: Say) -> Outcome:
    """Build, smoke-test and (if it passed) seal, tag and push one image."""
    name = image_name(cell, variant)
    out = Outcome(cell.id, variant)
    state = options.state_dir
    if options.base_image:
        cell = replace(cell, base_image=options.base_image)
    dockerfile, _ = render.variant_files(variant)
    installers = Path(cell.cann_local) if (variant == "npu" and cell.cann_source == "local") else None
    context = stage.context(render.render_cell(cell), state / "contexts" / name, options.wheelhouse, installers)
    log = state / "logs" / f"{name}.build.log"
    out.log = str(log)

    say(f"[{name}] building {variant} image")
    start = time.monotonic()
    try:
        with stage.secrets(cell, options.ca_bundle) as secret_files:
            candidate = engine.build(context, dockerfile, secrets=secret_files, log_path=log,
                                     on_line=_Progress(name, say, options.quiet))
    except BuildFailed as exc:
        out.build_seconds = time.monotonic() - start
        out.status, out.message = "failed", str(exc)
        return out
    out.build_seconds = time.monotonic() - start
    out.image_id = candidate

    device, tiers, docker_devices, mounts, final = _plan(variant, options)
    say(f"[{name}] smoke test on {device}: {', '.join(tiers)}")
    report, out.smoke_seconds = smoke(engine, candidate, device, tiers, docker_devices, mounts)
    report["content_hash"] = render.content_hash(cell)
    return _conclude(out, engine, report, tiers, final, release_ref(cell, variant), name, options)


def _conclude(out: Outcome, engine: Engine, report: Dict, tiers: Tuple[str, ...], final: bool, ref: str,
              name: str, options: Options) -> Outcome:
    """Keep the report; if the required tiers passed, seal (when final) and tag, then push."""
    state = options.state_dir
    candidate = out.image_id
    report.update({"cell": out.cell, "variant": out.variant, "candidate": candidate, "required_tiers": list(tiers)})
    out.tiers = report.get("tiers", [])
    report_bytes = (json.dumps(report, indent=2, sort_keys=True) + "\n").encode()
    report_path = state / "reports" / f"{name}.json"
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_bytes(report_bytes)
    out.report = str(report_path)

    if not _passed(report, tiers):
        failed = [t for t in out.tiers if t.get("status") == "failed"]
        out.status = "failed"
        out.message = "; ".join(f"{t.get('name')}: {t.get('summary', '')}" for t in failed) or "smoke test failed"
        return out

    if final:
        host = report.get("host") or {}
        labels = {"io.ascend-build.validated": "true", "io.ascend-build.validated-device": report.get("device", ""),
                  "io.ascend-build.validated-tiers": ",".join(tiers),
                  "io.ascend-build.validated-driver": str(host.get("driver") or ""),
                  "io.ascend-build.validated-firmware": str(host.get("firmware") or "")}
        image_id = seal(engine, candidate, report_bytes, labels, state / "seal" / name,
                        state / "logs" / f"{name}.seal.log")
        out.status = "passed"
    else:
        ref, image_id = f"{ref}-candidate", candidate
        out.status = "candidate"
    refs = [ref] + ([_registry_ref(options.push, ref)] if options.push else [])
    _apply_tags(engine, image_id, refs)
    out.image_id, out.tags = image_id, refs
    if options.push:
        try:
            out.digests[refs[1]] = engine.push(refs[1])
        except UserError as exc:  # e.g. refused credentials: keep the outcome (id, tags, report) and the image
            out.status = "error"
            out.message = f"{exc.message} (kept locally as {', '.join(refs)})" + (f"\n  fix: {exc.fix}" if exc.fix else "")
    return out


def run(cells: List[Cell], options: Options, engine: Engine, say: Say) -> List[Outcome]:
    """Every (cell, variant) in order; one failure does not stop the others."""
    outcomes = []
    for cell in cells:
        for variant in options.variants:
            try:
                outcomes.append(build_one(cell, variant, options, engine, say))
            except UserError as exc:  # e.g. a refused push: report it, keep the local image
                outcomes.append(Outcome(cell.id, variant, status="error", message=str(exc)))
    return outcomes


def promote(ref: str, options: Options, engine: Engine, say: Say) -> Outcome:
    """Run the device tiers on an NPU host for a ``-candidate`` image; seal and tag it if they pass."""
    labels = engine.labels(ref)
    cell_id = labels.get("io.ascend-build.cell")
    if not cell_id or labels.get("io.ascend-build.variant") != "npu":
        raise UserError(f"{ref} is not an NPU image built by ascend-build (no io.ascend-build labels)", exit_code=1,
                        fix="promote a '-candidate' image made by `ascend-build image --no-device`")
    present = devices.npu_devices(options.root)
    if not present or options.no_device:
        raise UserError("promote runs the device tiers, and this host has no NPU (/dev/davinci*)", exit_code=1,
                        fix="run it on an Ascend host with the driver installed")
    chosen = devices.choose(present, options.devices)
    out = Outcome(cell_id, "npu", image_id=engine.image_id(ref) or "")
    say(f"[{cell_id}] device tiers on npu {chosen}")
    report, out.smoke_seconds = smoke(engine, ref, "npu", ALL_TIERS, devices.docker_devices(chosen, options.root),
                                      devices.driver_mounts(options.root))
    release = ref[: -len("-candidate")] if ref.endswith("-candidate") else ref
    if options.push:  # the registry prefix is added again by _conclude
        release = release.split("/", 1)[-1] if release.startswith(options.push.rstrip("/") + "/") else release
    return _conclude(out, engine, report, ALL_TIERS, True, release, cell_id, options)
