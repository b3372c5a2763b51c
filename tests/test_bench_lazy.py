"""What docs/distribution.md says of `bench_lazy`'s figures, checked on the synthetic image: the
variant is the image's files with its list first, the reader fetches about the list's bytes (not the
image's) before the first step, in a handful of Range requests, and the figures say which image."""

from __future__ import annotations

import re

import pytest

from benchmarks import bench_lazy as bench
from tests.support.lazy import need_tools

pytestmark = pytest.mark.engine  # containerd and ctr-remote (no Docker Engine)


def test_the_synthetic_run_reads_about_the_list_not_the_image(tmp_path, monkeypatch):
    need_tools()
    monkeypatch.setattr(bench, "SYNTHETIC_BYTES", 8 << 20)
    monkeypatch.setattr(bench, "SYNTHETIC_FILES", 40)
    figures = bench.main(python="", use_twin=False)
    assert figures["image"].startswith("synthetic image: 40 files")
    share = float(figures["prefetch list / image compressed bytes"].split("%")[0])
    assert 1.0 <= share <= 3.5  # the 3% chosen, plus gzip and tar headers
    step = figures["bytes by Range before the first training step"]
    assert float(step.split("(")[1].split("%")[0]) <= 4.0  # the list and the TOC, never the whole image
    requests = int(re.search(r"(\d+) requests", step).group(1))  # type: ignore[union-attr]
    assert requests <= 6  # footer, TOC, and the list's chunks in one merged range per tier
    overhead = float(figures["variant size overhead"].split("%")[0])
    assert 0 < overhead < 3
