"""The pipeline's side of the smoke deadlines (no engine): the smoke program's command line, the
engine's limit over every tier's deadline, and a failed report when the engine had to kill it.
The real hangs are in tests/test_smoke.py (the program) and test_pipeline_e2e.py (a container)."""

from __future__ import annotations

from typing import List

import pytest

from builder import vocabulary
from builder.images import smoke_run
from builder.engine import RunResult, RunTimeout
from builder.errors import UserError


class _Engine:
    """Answers engine.run with ``result``, or raises RunTimeout with it; records each call."""

    def __init__(self, result: RunResult, times_out: bool = False):
        self.result, self.times_out = result, times_out
        self.calls: List[tuple] = []

    def run(self, image, command, **kwargs):
        self.calls.append((command, kwargs))
        if self.times_out:
            raise RunTimeout("killed", self.result, kwargs["timeout"])
        return self.result


LOG = ("[smoke] versions ...\n[smoke] versions passed (0.1 s): python 3.11.7, torch 2.13.0\n"
       "[smoke] import ...\nnoise from a library\n[smoke] import failed (12.5 s): ImportError: no torch\n"
       "[smoke] collective ...\n[smoke] collective: hanging on purpose\n")


def test_native_runs_keep_the_old_command_and_the_limit_covers_every_deadline(monkeypatch):
    monkeypatch.delenv(smoke_run.SCALE_ENV, raising=False)
    engine = _Engine(RunResult(0, '{"schema": 1, "passed": true, "tiers": []}\n', "", 1.0))
    report, _ = smoke_run.smoke(engine, "img", "cpu", vocabulary.tier_names(), [], [], (), smoke_run.smoke_scale(False))  # type: ignore[arg-type]  # an Engine stand-in
    [(command, kwargs)] = engine.calls
    assert "--timeout-scale" not in command  # a -candidate image from before the option still runs
    assert kwargs["timeout"] == smoke_run.engine_timeout(vocabulary.tier_names(), 1.0)
    assert report["exit_code"] == 0


def test_under_qemu_every_deadline_and_the_limit_are_scaled(monkeypatch):
    monkeypatch.setenv(smoke_run.SCALE_ENV, "2")
    assert smoke_run.smoke_scale(True) == 2 * smoke_run.EMULATED_SCALE and smoke_run.smoke_scale(False) == 2
    engine = _Engine(RunResult(0, '{"tiers": []}', "", 1.0))
    smoke_run.smoke(engine, "img", "cpu", ("versions", "train"), [], [], ("--steps", "4"), 8.0)  # type: ignore[arg-type]  # an Engine stand-in
    [(command, kwargs)] = engine.calls
    assert command[-4:] == ["--steps", "4", "--timeout-scale", "8"]
    assert kwargs["timeout"] == smoke_run.engine_timeout(("versions", "train"), 8.0)
    assert kwargs["timeout"] - smoke_run.ENGINE_MARGIN_SECONDS == 8 * (
        smoke_run.engine_timeout(("versions", "train"), 1.0) - smoke_run.ENGINE_MARGIN_SECONDS)


@pytest.mark.parametrize("tier", vocabulary.tier_names())
def test_the_engine_limit_grows_with_every_deadline_of_the_smoke_program(monkeypatch, tier):
    """One source of truth: a tier's deadline, or the wait the supervisor allows before the first tier
    and after each, grown in the smoke program's constants, grows the engine's limit by at least as
    much as the program may now take (never computed here: only what changed is)."""
    scale = 2.0
    before = smoke_run.engine_timeout(vocabulary.tier_names(), scale)
    monkeypatch.setattr(vocabulary, "SMOKE_TIERS", tuple(t._replace(seconds=t.seconds + 1000) if t.name == tier else t
                                                    for t in vocabulary.SMOKE_TIERS))
    assert smoke_run.engine_timeout(vocabulary.tier_names(), scale) - before >= 1000 * scale
    grown = smoke_run.engine_timeout(vocabulary.tier_names(), scale)
    monkeypatch.setattr(vocabulary, "SMOKE_STARTUP_SECONDS", vocabulary.SMOKE_STARTUP_SECONDS + 10)
    waits = len(vocabulary.tier_names()) + 1  # supervise waits before the first tier and after each
    assert smoke_run.engine_timeout(vocabulary.tier_names(), scale) - grown >= waits * 10 * scale


@pytest.mark.parametrize("value", ["0", "-1", "x", "1e9"])
def test_a_bad_scale_is_a_usage_error(monkeypatch, value):
    monkeypatch.setenv(smoke_run.SCALE_ENV, value)
    with pytest.raises(UserError, match=smoke_run.SCALE_ENV):
        smoke_run.smoke_scale(False)


def test_killed_by_the_engine_the_report_is_a_failed_one_with_the_tiers_it_logged(monkeypatch):
    monkeypatch.delenv(smoke_run.SCALE_ENV, raising=False)
    engine = _Engine(RunResult(-1, "", LOG, 300.4), times_out=True)
    report, seconds = smoke_run.smoke(engine, "img", "cpu", vocabulary.tier_names(), [], [])  # type: ignore[arg-type]  # an Engine stand-in
    assert seconds == 300.4 and report["passed"] is False and report["exit_code"] == -1
    assert [(t["name"], t["status"], t["seconds"]) for t in report["tiers"]] == [
        ("versions", "passed", 0.1), ("import", "failed", 12.5), ("smoke", "failed", 300.4)]
    smoke = report["tiers"][-1]
    limit = smoke_run.engine_timeout(vocabulary.tier_names(), 1.0)
    assert smoke["summary"].startswith(f"the smoke program did not finish within {limit:g} s, the engine's limit")
    assert f"{smoke_run.SCALE_ENV}=2 doubles every deadline" in smoke["summary"]
    assert "collective: hanging on purpose" in smoke["details"]["stderr_tail"]
    judged = smoke_run.verdict(report, vocabulary.tier_names(), final=True)
    assert judged.status == "failed" and "smoke: the smoke program did not finish" in judged.message
    assert "collective: not run" in judged.message and "raise the timeout" not in judged.message


def test_the_engine_fix_names_no_option_that_does_not_exist():
    exc = RunTimeout("x did not finish", RunResult(-1, "", "", 1.0), 5)
    assert "timeout" not in exc.fix and exc.timeout == 5
