"""Benchmark (not a test): what an aarch64 twin costs under qemu beside a native x86_64 one.

Side by side in one run, each cold (every step run again, no cache), through the pipeline
as `ascend-build image` runs it:

1. the demo cell's CPU twin, native x86_64 (Debian 12, Python 3.11, torch 2.13.0);
2. the mission cell's CPU twin for aarch64 under qemu (CANN 7.0.RC1's closure: Python
   3.9, torch 2.1.0, on Debian 11 standing in for Ubuntu 22.04 with conda), its wheels
   fetched natively first (what `image` does: builder/images/wheelhouse.py);
3. the same, with pip fetching the wheels inside the emulated build (the speed-up off).

pip's own cache is off (PIP_NO_CACHE_DIR), so the native fetch downloads as a cold
build would. Prints build and smoke seconds of each, the emulated/native ratios, what
the native fetch saved, the train tier's step time of each, and the smoke steps the
emulated run uses instead of 30.

Run: .venv/bin/python -m benchmarks.bench_arm64   (needs `make engine`)
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Dict

from builder.images import image_run, matrix, pipeline, smoke_run
from builder.engine import Engine

ROOT = Path(__file__).resolve().parent.parent

CA = Path("/etc/ssl/certs/ca-certificates.crt")
WHEELHOUSE = Path("/opt/wheels")
MISSION = "cann7.0.rc1-910b-ubuntu22.04-py3.9-torch_npu2.1.0rc1-aarch64"
RUNS = (("x86_64 native", "cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64", "local/debian:12", None),
        ("aarch64 qemu", MISSION, "local/debian:11-arm64", "debian11"),
        ("aarch64 qemu, fetched inside", MISSION, "local/debian:11-arm64", "debian11"))


def main() -> Dict[str, str]:
    os.environ["PIP_NO_CACHE_DIR"] = "1"
    engine = Engine.connect()
    fetch_natively = image_run._fetch_wheels
    cells = {c.id: c for c in matrix.load(ROOT / "matrix").cells}
    rows = []
    with tempfile.TemporaryDirectory(prefix="ascend-bench-arm64-") as tmp:
        for name, cell_id, base, twin_os in RUNS:
            # the third run turns the native fetch off, as a host without pip would have it
            image_run._fetch_wheels = (lambda *a: None) if "inside" in name else fetch_natively
            options = pipeline.Options(variants=("cpu",), state_dir=Path(tmp) / name.replace(" ", "_"), base_image=base,
                                       wheelhouse=WHEELHOUSE if WHEELHOUSE.is_dir() else None,
                                       ca_bundle=CA if CA.is_file() else None, quiet=True,
                                       locks_dir=ROOT / "dockerfiles", twin_os=twin_os, no_cache=True)
            [out] = pipeline.run([cells[cell_id]], options, engine, lambda line: None)
            if out.status != "passed":
                raise SystemExit(f"{name}: {out.status}: {out.message}")
            train = next(t for t in out.tiers if t["name"] == "train")["details"]
            rows.append((name, out.build_seconds, out.smoke_seconds, train["mean_step_ms"], train["steps"]))
            for tag in out.tags:
                engine.untag(tag)
    print(f"{'CPU twin, cold':28}{'build s':>10}{'smoke s':>10}{'train step ms':>15}{'steps':>7}")
    for name, build, smoke, step, steps in rows:
        print(f"{name:28}{build:>10.1f}{smoke:>10.1f}{step:>15.1f}{steps:>7}")
    (_, nb, ns, nstep, _), (_, eb, es, estep, _), (_, ib, _, _, _) = rows
    print(f"emulated / native: build {eb / nb:.1f}x, smoke {es / ns:.1f}x, one training step {estep / nstep:.0f}x")
    print(f"fetching the wheels natively: build {ib:.1f} s -> {eb:.1f} s ({eb / ib:.2f}x, {ib - eb:.0f} s saved)")
    print(f"the emulated smoke trains {smoke_run.EMULATED_STEPS} steps instead of 30: at this step time 30 would add "
          f"{(30 - smoke_run.EMULATED_STEPS) * estep / 1000:.0f} s")
    return {"arm64 twin under qemu / native x86_64": f"build {eb / nb:.1f}x, smoke {es / ns:.1f}x",
            "arm64 build, wheels fetched natively vs inside": f"{eb:.0f} s vs {ib:.0f} s"}


if __name__ == "__main__":
    main()
