"""A candidate's smoke test and what its report earns: run the smoke program inside the image
(`smoke`, each tier within its deadline, the container within the engine's limit), judge the
report (`verdict`: passed, candidate or failed), and seal a pass (`seal`: the report and the
``Label.VALIDATED*`` labels added by a tiny ``FROM`` build).

The steps of one image's run (`builder.images.image_run`) and `pipeline.promote` use them;
nothing here tags or pushes.

Example:
    >>> report, seconds = smoke(engine, image_id, "cpu", ("versions",), [], [])   # doctest: +SKIP
    >>> verdict(report, ("versions",), final=True).status                          # doctest: +SKIP
    'passed'
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Tuple

from builder import documents, leftovers, writes
from builder.engine import Engine, RunTimeout
from builder.errors import UserError
from builder.vocabulary import SMOKE_PROGRAM, VALIDATION_REPORT, Label

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

