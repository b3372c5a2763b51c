"""`make bench`: every benchmark in one run, their headline figures side by side, in RESULTS.md.

Each benchmark prints its own table as it goes and returns its headline figures; this
prints them together at the end, measured in this one run, and writes them whole to
benchmarks/RESULTS.md with when, on which commit and on which machine they were measured
(a benchmark that fails stops the run, and RESULTS.md is then left as it was).
`--only a,b` runs some of them; RESULTS.md then says at its top which ran and that it is
not a whole `make bench`. A section headed `SINGLE_RUNS` at the end of RESULTS.md (runs of one
benchmark alone that `make bench` does not make, such as `bench_validate_render --vs`, each with
its own commit and load) is kept as it is when the table above it is written again.

Run (from the repository root): .venv/bin/python -m benchmarks.run_all [--only NAME,NAME]
     (needs `make engine` first)
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from builder import writes

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "RESULTS.md"

BENCHMARKS = ("bench_validate_render", "bench_build", "bench_chips", "bench_verdict", "bench_lock", "bench_arm64",
              "bench_hostile", "bench_faults", "bench_attest", "bench_distribution", "bench_lazy", "trace_cell_path")

SINGLE_RUNS = "## Runs of one benchmark alone"

Row = Tuple[str, str, str]  # benchmark, figure, value


def command(name: str) -> str:
    return f"python -m benchmarks.{name}"


def run(names: Sequence[str]) -> List[Row]:
    """Each benchmark's main(), in order; their figures as rows."""
    rows: List[Row] = []
    for name in names:
        print(f"\n== {name}", flush=True)
        start = time.monotonic()
        figures = importlib.import_module(f"benchmarks.{name}").main()
        rows += [(name, what, value) for what, value in figures.items()]
        print(f"({name}: {time.monotonic() - start:.0f} s)", flush=True)
    return rows


def load_average() -> str:
    with open("/proc/loadavg") as fh:
        return " ".join(fh.read().split()[:3])


def commit() -> str:
    """The short commit of the checkout, with "(dirty)" when its tree has changes."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return f"{head} (dirty)" if dirty else head


def machine() -> Dict[str, str]:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {"CPUs (nproc)": str(cpus), "memory": f"{memory / 2**30:.1f} GiB", "kernel": platform.release(),
            "python": platform.python_version()}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(rows: Sequence[Row], ran: Sequence[str], whole: bool, started: datetime.datetime, seconds: float,
             checkout: str, host: Dict[str, str], load_start: str, load_end: str) -> str:
    if whole:
        scope = "A whole `make bench` (`python -m benchmarks.run_all`): every benchmark ran."
    else:
        scope = (f"**A partial run, not a whole `make bench`**: only {', '.join(ran)} ran "
                 f"(`python -m benchmarks.run_all --only {','.join(ran)}`).")
    lines = ["# Benchmark results", "", scope, "",
             f"- date: {started.strftime('%Y-%m-%d %H:%M')} UTC (the run took {seconds:.0f} s)",
             f"- commit: {checkout}",
             "- machine: " + ", ".join(f"{key} {value}" for key, value in host.items()),
             f"- load average (1, 5, 15 min): {load_start} at the start, {load_end} at the end",
             "", "| benchmark | figure | value | command |", "|---|---|---|---|"]
    lines += [f"| {name} | {_cell(what)} | {_cell(value)} | `{command(name)}` |" for name, what, value in rows]
    return "\n".join(lines) + "\n"


def single_runs(path: Path) -> str:
    """The `SINGLE_RUNS` section of the results file at ``path``, from its heading to the end; "" when none."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""
    at = text.find(f"\n{SINGLE_RUNS}\n")
    return text[at + 1:] if at >= 0 else ""


def parse(argv: Optional[Sequence[str]]) -> List[str]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated benchmark names, e.g. bench_verdict,bench_chips "
                                                   "(bench_ may be left out: --only distribution)")
    only = [name.strip() for name in parser.parse_args(argv).only.split(",") if name.strip()]
    only = [f"bench_{name}" if f"bench_{name}" in BENCHMARKS else name for name in only]  # --only distribution
    unknown = [name for name in only if name not in BENCHMARKS]
    if unknown:
        parser.error(f"--only: no benchmark named {', '.join(unknown)}; the benchmarks are {', '.join(BENCHMARKS)}")
    return [name for name in BENCHMARKS if name in only] if only else list(BENCHMARKS)


def main(argv: Optional[Sequence[str]] = None) -> None:
    names = parse(argv)
    started, load_start, checkout = datetime.datetime.now(datetime.timezone.utc), load_average(), commit()
    clock = time.monotonic()
    rows = run(names)
    text = markdown(rows, names, whole=list(names) == list(BENCHMARKS), started=started,
                    seconds=time.monotonic() - clock, checkout=checkout, host=machine(), load_start=load_start,
                    load_end=load_average())
    if rows:
        width = max(len(what) for _, what, _ in rows)
        print("\n== summary (this run)")
        for _, what, value in rows:
            print(f"{what:<{width}}  {value}")
    kept = single_runs(RESULTS)
    writes.replace_file(RESULTS, (text + ("\n" + kept if kept else "")).encode())
    print(f"\nwritten: {RESULTS}")


if __name__ == "__main__":
    main()
