"""The registry of smoke tiers (``vocabulary.SMOKE_TIERS``): every entry runs its function of the
smoke program, the docs' tier table is the registry, and a tier added to the registry alone (one
entry, plus its function where the entry says) is run, reported, held to its deadline and required
like the others: no other module lists the tiers. No torch and no engine are needed here."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from builder import vocabulary
from builder.images import pipeline, publish, smoke_run
from builder.images.prepare import smoke_plan
from builder.vocabulary import CPU, NPU, VARIANTS, Label, Tier

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "builder" / "smoke" / "smoke.py"
DOCS = ROOT / "docs" / "building-images.md"

# The throwaway tier: a static one every image owes, with a short deadline.
ECHO = Tier("echo", "tier_echo", 4, needs_device=False, owed_without_torch=(NPU, CPU), records_reads=False,
            proves="the smoke program runs a tier it was given through the registry alone")


@pytest.fixture(scope="module")
def smoke():
    spec = importlib.util.spec_from_file_location("ascend_build_smoke_for_tiers", SMOKE)
    assert spec is not None and spec.loader is not None, SMOKE
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---------------------------------------------------------------- the shipped registry
def test_every_entry_names_a_function_of_the_smoke_program_and_every_tier_function_has_an_entry(smoke):
    """No pairing by position: each entry names its function, and a function of the program shaped
    like a tier (``tier_<word>(ctx)``) that no entry names is a tier someone forgot to register."""
    names = vocabulary.tier_names()
    assert {name: f.__name__ for name, f in smoke.tier_functions(names).items()} == {
        t.name: t.function for t in vocabulary.SMOKE_TIERS}
    shaped = {node.name for node in ast.parse(SMOKE.read_text(encoding="utf-8")).body
              if isinstance(node, ast.FunctionDef) and node.name.startswith("tier_")
              and [a.arg for a in node.args.args] == ["ctx"]}
    assert shaped == {t.function for t in vocabulary.SMOKE_TIERS}


def test_entries_are_well_formed():
    """Names are lowercase words, once each: the pipeline reads a killed run's tiers back from the
    program's log (``\\w+``), and --tiers and the seal labels join them with commas. What a tier
    proves is one line (the docs' table, smoke.py --help)."""
    names = vocabulary.tier_names()
    assert len(set(names)) == len(names) >= 6
    for t in vocabulary.SMOKE_TIERS:
        assert t.name.isalpha() and t.name.islower(), t
        assert isinstance(t.seconds, int) and 0 < t.seconds < 3600, t
        assert set(t.owed_without_torch) <= set(VARIANTS), t
        assert t.proves and "\n" not in t.proves and "|" not in t.proves, t
    assert vocabulary.DEVICE_TIER in names  # the tier whose details name the NPU (attest's ranOn)


def test_the_registry_answers_what_the_program_and_the_pipeline_ask():
    assert vocabulary.static_tiers() == ("versions", "libraries")
    assert vocabulary.recorded_tiers() == ("import", "device", "train")
    assert vocabulary.required_tiers(NPU, cann_only=False) == vocabulary.tier_names()
    assert vocabulary.required_tiers(NPU, cann_only=True) == ("versions", "libraries")
    assert vocabulary.required_tiers(CPU, cann_only=True) == ("versions",)
    with pytest.raises(KeyError):
        vocabulary.tier("bogus")


def docs_tier_table():
    """The rows of the table under "### The smoke tiers" in docs/building-images.md."""
    lines = DOCS.read_text(encoding="utf-8").split("### The smoke tiers\n", 1)[1].splitlines()
    table = [line for line in lines[:next(i for i, line in enumerate(lines) if line.startswith("#"))]
             if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in table[2:]]


def test_the_docs_tier_table_is_the_registry():
    assert docs_tier_table() == [[t.name, "yes" if t.needs_device else "no", f"{t.seconds} s", t.proves]
                                 for t in vocabulary.SMOKE_TIERS]


def test_smoke_help_lists_each_tier_with_what_it_proves():
    done = subprocess.run([sys.executable, str(SMOKE), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    for t in vocabulary.SMOKE_TIERS:
        assert f"\n  {t.name:<11} {t.proves}\n" in done.stderr  # the program sends all but its report to stderr


# ---------------------------------------------------------------- a tier added through the registry alone
# The smoke program with one more entry in the registry and its function where the entry says:
# nothing else of the program or of the package changes. HOW is how the tier answers.
WITH_ECHO = """
import importlib.util, sys, time
spec = importlib.util.spec_from_file_location("smoke_with_echo", {smoke!r})
smoke = importlib.util.module_from_spec(spec)
spec.loader.exec_module(smoke)

def tier_echo(ctx):
    if {how!r} == "hang":
        time.sleep(600)
    result = smoke.passed if {how!r} == "pass" else smoke.failed
    return result("echo %s on %s" % ({how!r}, ctx.device), device=ctx.device)

if {how!r} != "no function":
    smoke.tier_echo = tier_echo
smoke.vocabulary.SMOKE_TIERS += (smoke.vocabulary.Tier(*{entry!r}),)
sys.exit(smoke.main())
"""


def run_with_echo(tmp_path, how, *args):
    program = tmp_path / f"smoke_with_echo_{how.replace(' ', '_')}.py"
    program.write_text(WITH_ECHO.format(smoke=str(SMOKE), how=how, entry=tuple(ECHO)))
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"schema": 1, "cell": "echo-cell", "variant": "cpu"}))
    done = subprocess.run([sys.executable, str(program), "--manifest", str(manifest), "--device", "cpu", *args],
                          capture_output=True, text=True, timeout=240, env=dict(os.environ, ASCEND_BUILD_SMOKE_TEST="1"))
    lines = done.stdout.splitlines()
    assert len(lines) == 1, (done.stdout, done.stderr)
    return done.returncode, json.loads(lines[0]), done.stderr


def test_a_tier_added_to_the_registry_alone_runs_and_is_reported(tmp_path):
    code, report, err = run_with_echo(tmp_path, "pass", "--tiers", "echo")
    assert code == 0 and report["passed"] is True, err
    [echo] = report["tiers"]
    assert (echo["name"], echo["status"], echo["summary"], echo["details"]) == (
        "echo", "passed", "echo pass on cpu", {"device": "cpu"})
    assert "[smoke] echo passed (" in err  # the log line the pipeline reads back when a run is killed

    code, report, _ = run_with_echo(tmp_path, "fail", "--tiers", "echo")
    assert code == 1 and report["passed"] is False and report["tiers"][0]["status"] == "failed"


def test_an_entry_naming_no_function_is_bad_usage_before_any_tier_runs(tmp_path):
    code, report, err = run_with_echo(tmp_path, "no function", "--tiers", "versions,echo")
    assert code == 2 and "tiers" not in report, err
    assert report["error"] == "tier echo: its entry in vocabulary.SMOKE_TIERS names the function tier_echo, " \
                              "which smoke.py does not define"


def test_a_tier_added_to_the_registry_alone_runs_by_default_in_the_registrys_order(tmp_path):
    """Without --tiers the program runs every tier (here without torch: those that need it fail or
    skip); the added one runs where its entry stands, last."""
    _, report, err = run_with_echo(tmp_path, "pass")
    assert [t["name"] for t in report["tiers"]] == [*vocabulary.tier_names(), "echo"], err
    assert report["tiers"][-1]["status"] == "passed"


def test_a_tier_added_to_the_registry_alone_is_held_to_its_entrys_deadline(tmp_path):
    code, report, err = run_with_echo(tmp_path, "hang", "--tiers", "echo")
    [echo] = report["tiers"]
    assert code == 1 and echo["status"] == "failed", err
    assert echo["summary"].startswith(f"echo did not finish within {ECHO.seconds:g} s (its deadline)")
    assert echo["details"]["deadline_seconds"] == ECHO.seconds
    code, report, _ = run_with_echo(tmp_path, "pass", "--tiers", "echo", "--tier-seconds", "echo=30")
    assert code == 0  # --tier-seconds knows it too


def test_a_tier_added_to_the_registry_alone_is_required_like_the_others(tmp_path, monkeypatch):
    """In the pipeline: every image owes it, a build machine runs it (it needs no device), the
    engine's limit makes room for its deadline, the verdict and the index refuse an image without
    it, and the seal lists it."""
    shipped = vocabulary.tier_names()
    limit = smoke_run.engine_timeout(shipped, 2.0)
    _, ran, _ = run_with_echo(tmp_path, "pass", "--tiers", "echo")
    monkeypatch.setattr(vocabulary, "SMOKE_TIERS", vocabulary.SMOKE_TIERS + (ECHO,))

    for variant in VARIANTS:
        for cann_only in (False, True):
            assert "echo" in vocabulary.required_tiers(variant, cann_only)
    assert vocabulary.static_tiers()[-1] == "echo"
    assert smoke_plan(CPU, pipeline.Options(root=tmp_path)).tiers == (*shipped, "echo")
    assert smoke_plan(NPU, pipeline.Options(root=tmp_path)).tiers == ("versions", "libraries", "echo")  # no NPU here
    required = vocabulary.required_tiers(CPU, cann_only=False)
    assert smoke_run.engine_timeout(required, 2.0) - limit == (ECHO.seconds + vocabulary.SMOKE_STARTUP_SECONDS) * 2.0

    others = {"schema": 1, "passed": True, "exit_code": 0, "device": "cpu", "host": {},
              "tiers": [{"name": name, "status": "passed", "summary": "ok"} for name in shipped]}
    judged = smoke_run.verdict(others, required, final=True)
    assert judged.status == "failed" and "echo: not run" in judged.message
    sealed = smoke_run.verdict(dict(others, tiers=others["tiers"] + ran["tiers"]), required, final=True)
    assert sealed.status == "passed" and sealed.seal_labels[Label.VALIDATED_TIERS].split(",") == [*shipped, "echo"]

    family = "cann9.1.0-910b-x"
    labels = {Label.CELL: f"{family}-x86_64", Label.VARIANT: CPU, Label.TORCH: "2.13.0", Label.VALIDATED: "true"}
    image = publish.ArchImage("x86_64", f"{family}-x86_64-cpu", "sha256:" + "a" * 64, "m", 1,
                              dict(labels, **{Label.VALIDATED_TIERS: ",".join(shipped)}))
    assert why_not_tiers(image, family) == ["it did not pass every tier (not validated: echo missing)"]
    image = publish.ArchImage(image.arch, image.tag, image.digest, image.media_type, image.size,
                              dict(labels, **sealed.seal_labels))
    assert why_not_tiers(image, family) == []


def why_not_tiers(image, family):
    return [reason for reason in publish.why_not(image, family, CPU, "amd64") if "tier" in reason]


def test_the_registry_loads_where_the_smoke_program_runs():
    """vocabulary.py is copied into images beside smoke.py and imported there on its own: Python 3.8
    syntax (CANN 7.0's images), the standard library only."""
    tree = ast.parse(Path(vocabulary.__file__).read_text(encoding="utf-8"), feature_version=(3, 8))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= {"__future__", "typing"}
