"""Benchmark (not a test): how long the twin's verdict takes, tier by tier, median of 3.

Builds the demo cell's CPU twin through the pipeline (from its lock; the BuildKit cache
may be warm, this measures the smoke test, not the build), then runs the smoke program in
it three times, as `ascend-build image` does (one container, every tier), and prints each
tier's median seconds and the whole verdict's median beside the 15 s goal.

Run: .venv/bin/python benchmarks/bench_verdict.py   (needs `make engine`)
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path
from typing import Dict

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from builder.build import matrix, pipeline  # noqa: E402
from builder.engine import Engine  # noqa: E402
from builder.vocabulary import TIERS  # noqa: E402

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
        per_tier = {name: [] for name in TIERS}
        totals = []
        for _ in range(RUNS):
            report, seconds = pipeline.smoke(engine, out.image_id, "cpu", TIERS, [], [])
            if not report.get("passed"):
                raise SystemExit("a smoke run failed: " + "; ".join(t.get("summary", "") for t in report["tiers"]))
            totals.append(seconds)
            for tier in report["tiers"]:
                per_tier[tier["name"]].append(tier["seconds"])
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


if __name__ == "__main__":
    main()
