"""`make bench` writes benchmarks/RESULTS.md: when, which commit, which machine, one row per figure."""

from __future__ import annotations

import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from benchmarks import run_all

ROOT = Path(__file__).resolve().parents[1]


def _fake(name: str, figures: dict) -> types.ModuleType:
    module = types.ModuleType(f"benchmarks.{name}")
    module.main = lambda: dict(figures)  # type: ignore[attr-defined]  # a stand-in for a benchmark module
    return module


@pytest.fixture
def fake_benchmarks(monkeypatch, tmp_path):
    """Two tiny benchmarks in place of the real ones (as `benchmarks.<name>` modules), RESULTS.md in tmp_path."""
    monkeypatch.setitem(sys.modules, "benchmarks.fake_fast", _fake("fake_fast", {"speed": "1.5 s (goal < 2 s)"}))
    monkeypatch.setitem(sys.modules, "benchmarks.fake_pipes",
                        _fake("fake_pipes", {"a | b": "3 / 4", "second figure": "ok"}))
    monkeypatch.setattr(run_all, "BENCHMARKS", ("fake_fast", "fake_pipes"))
    monkeypatch.setattr(run_all, "RESULTS", tmp_path / "RESULTS.md")
    return tmp_path / "RESULTS.md"


def _table(text: str) -> list:
    rows = [line for line in text.splitlines() if line.startswith("|")]
    assert rows[:2] == ["| benchmark | figure | value | command |", "|---|---|---|---|"]
    return rows[2:]


def test_a_whole_run_writes_when_where_and_one_row_per_figure(fake_benchmarks):
    run_all.main([])
    text = fake_benchmarks.read_text()
    assert text.startswith("# Benchmark results\n\nA whole `make bench`")
    assert "partial" not in text.lower()
    assert re.search(r"^- date: \d{4}-\d\d-\d\d \d\d:\d\d UTC \(the run took \d+ s\)$", text, re.M)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.strip()
    assert f"\n- commit: {head}{' (dirty)' if dirty else ''}\n" in text
    machine = re.search(r"^- machine: CPUs \(nproc\) (\d+), memory ([\d.]+) GiB, kernel (\S+), python (\S+)$", text, re.M)
    assert machine and int(machine[1]) >= 1 and float(machine[2]) > 0
    assert machine[3] == subprocess.run(["uname", "-r"], capture_output=True, text=True).stdout.strip()
    assert machine[4] == ".".join(map(str, sys.version_info[:3]))
    assert re.search(r"^- load average \(1, 5, 15 min\): [\d.]+ [\d.]+ [\d.]+ at the start, "
                     r"[\d.]+ [\d.]+ [\d.]+ at the end$", text, re.M)
    assert _table(text) == [
        "| fake_fast | speed | 1.5 s (goal < 2 s) | `python -m benchmarks.fake_fast` |",
        "| fake_pipes | a \\| b | 3 / 4 | `python -m benchmarks.fake_pipes` |",
        "| fake_pipes | second figure | ok | `python -m benchmarks.fake_pipes` |",
    ]


def test_a_run_keeps_the_section_of_single_runs_and_writes_the_table_again(fake_benchmarks):
    single = (f"{run_all.SINGLE_RUNS}\n\nOne benchmark alone, with its own commit and load.\n\n"
              "| figure | value |\n|---|---|\n| in-process | 0.371 s |\n")
    fake_benchmarks.write_text("# Benchmark results\n\nan older run\n\n| stale | row |\n\n" + single)
    run_all.main([])
    text = fake_benchmarks.read_text()
    assert "an older run" not in text and "| stale | row |" not in text
    assert text.endswith("`python -m benchmarks.fake_pipes` |\n\n" + single)


def test_a_partial_run_says_so_at_the_top_and_holds_only_what_ran(fake_benchmarks):
    run_all.main(["--only", "fake_pipes"])
    text = fake_benchmarks.read_text()
    assert text.splitlines()[2] == ("**A partial run, not a whole `make bench`**: only fake_pipes ran "
                                    "(`python -m benchmarks.run_all --only fake_pipes`).")
    assert [row.split(" | ")[0] for row in _table(text)] == ["| fake_pipes", "| fake_pipes"]


def test_an_unknown_name_in_only_is_refused_naming_the_benchmarks(fake_benchmarks, capsys):
    with pytest.raises(SystemExit) as stopped:
        run_all.main(["--only", "fake_fast,bench_nothing"])
    assert stopped.value.code == 2
    assert "no benchmark named bench_nothing; the benchmarks are fake_fast, fake_pipes" in capsys.readouterr().err
    assert not fake_benchmarks.exists()


def test_a_failing_benchmark_leaves_the_results_as_they_were(fake_benchmarks, monkeypatch):
    fake_benchmarks.write_text("the last run\n")

    def broken() -> dict:
        raise SystemExit("the twin did not pass")

    monkeypatch.setattr(sys.modules["benchmarks.fake_pipes"], "main", broken)
    with pytest.raises(SystemExit, match="the twin did not pass"):
        run_all.main([])
    assert fake_benchmarks.read_text() == "the last run\n"


def test_every_benchmark_named_in_run_all_is_a_module_of_the_package():
    assert sorted(run_all.BENCHMARKS) == sorted(
        p.stem for p in (ROOT / "benchmarks").glob("*.py") if p.stem not in ("__init__", "run_all"))


def test_only_takes_a_name_without_its_bench_prefix():
    assert run_all.parse(["--only", "distribution"]) == ["bench_distribution"]
    assert run_all.parse(["--only", "bench_distribution,attest"]) == ["bench_attest", "bench_distribution"]
