"""Benchmark (not a test): how long the twin's verdict takes, tier by tier, median of 3.

Builds the demo cell's CPU twin through the pipeline (from its lock; the BuildKit cache
may be warm, this measures the smoke test, not the build), then runs the smoke program in
it three times, as `ascend-build image` does (one container, every tier), and prints each
tier's median seconds and the whole verdict's median beside the 15 s goal. Each run also
prints the host's load average before it, and what the train tier saw of the CPU inside the
container (usable CPUs, cgroup quota, torch's threads and the ones it trained with, ATen's
kernel level, whether bf16 matmuls go to oneDNN): the train tier's time depends on them.

Run: .venv/bin/python -m benchmarks.bench_verdict   (needs `make engine`)
"""

from __future__ import annotations

import os
import statistics
import tempfile
from pathlib import Path
from typing import Dict, List

from builder.images import matrix, pipeline, smoke_run
from builder.engine import Engine
from builder.vocabulary import tier_names

ROOT = Path(__file__).resolve().parent.parent

CELL_ID = "cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64"
CA = Path("/etc/ssl/certs/ca-certificates.crt")
WHEELHOUSE = Path("/opt/wheels")
RUNS = 3
GOAL = 15.0


def main() -> Dict[str, str]:
    engine = Engine.connect()
    cell = next(c for c in matrix.load(ROOT / "matrix").cells if c.id == CELL_ID)
    with tempfile.TemporaryDirectory(prefix="ascend-bench-verdict-") as tmp:
        options = pipeline.Options(variants=("cpu",), state_dir=Path(tmp), base_image="local/debian:12",
                                   wheelhouse=WHEELHOUSE if WHEELHOUSE.is_dir() else None,
                                   ca_bundle=CA if CA.is_file() else None, quiet=True, locks_dir=ROOT / "dockerfiles")
        [out] = pipeline.run([cell], options, engine, lambda line: None)
        if out.status != "passed":
            raise SystemExit(f"the twin did not pass: {out.message}")
        per_tier: Dict[str, List[float]] = {name: [] for name in tier_names()}
        totals = []
        print(f"host: {os.cpu_count()} CPUs, {cpu_model()}")
        for run in range(RUNS):
            load = load_average()
            report, seconds = smoke_run.smoke(engine, out.image_id, "cpu", tier_names(), [], [])
            if not report.get("passed"):
                raise SystemExit("a smoke run failed: " + "; ".join(t.get("summary", "") for t in report["tiers"]))
            totals.append(seconds)
            for tier in report["tiers"]:
                per_tier[tier["name"]].append(tier["seconds"])
            train = next(t for t in report["tiers"] if t["name"] == "train")
            print(f"  run {run + 1}: {seconds:.1f} s, train {train['seconds']:.1f} s, load average before {load}; "
                  + cpu_seen(train["details"]))
        for tag in out.tags:
            engine.untag(tag)
    print(f"twin verdict of {CELL_ID}, {RUNS} runs (median, seconds):")
    for name, values in per_tier.items():
        print(f"  {name:12}{statistics.median(values):>8.2f}")
    median = statistics.median(totals)
    print(f"  {'whole run':12}{median:>8.2f}   (container start to report; runs: "
          + ", ".join(f"{t:.1f}" for t in totals) + f"); goal < {GOAL:.0f} s: {'met' if median < GOAL else 'NOT met'}")
    return {f"twin verdict, median of {RUNS}": f"{median:.1f} s (goal < {GOAL:.0f} s); " + ", ".join(
        f"{name} {statistics.median(values):.2f}" for name, values in per_tier.items())}


def load_average() -> str:
    with open("/proc/loadavg") as fh:
        return " ".join(fh.read().split()[:3])


def cpu_model() -> str:
    with open("/proc/cpuinfo") as fh:
        text = fh.read()
    name = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "?")
    flags = set(text.split())
    return name + ", " + " ".join(f"{flag} {'yes' if flag in flags else 'no'}" for flag in ("avx2", "avx512f", "avx512_bf16"))


def cpu_seen(d: Dict) -> str:
    """What the train tier saw of the CPU in the container (its report's details)."""
    quota = d.get("cpu_quota")
    return (f"in the container {d.get('cpus_usable')} CPUs usable, "
            f"{'no cgroup quota' if quota is None else f'quota {quota} CPUs'}, torch threads "
            f"{d.get('cpu_threads_default')} (trained with {d.get('cpu_threads')}), ATen {d.get('cpu_capability')}, "
            f"bf16 matmul by oneDNN {d.get('cpu_bf16_onednn')}, avx512_bf16/amx_bf16 {d.get('cpu_native_bf16')}")


if __name__ == "__main__":
    main()
