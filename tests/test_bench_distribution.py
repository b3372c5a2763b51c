"""What docs/distribution.md says of `bench_distribution`'s figures, checked on a small run: the
mirror moves nothing on a run again and only the sibling's own layers when it is added; after the
warm, N pulls at once through the cache cost the source nothing more, where a cold cache costs more
than N pulls from the source; the throttle holds its rate; and which rendered steps two cells of
one CANN share."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from benchmarks import bench_distribution as bench
from builder.registry import Registry
from tests.support import mirror as hm
from tests.support.throttle import Throttle

ROOT = Path(__file__).resolve().parents[1]
needs_registry = pytest.mark.skipif(not Path(hm.REGISTRY_BIN).exists(), reason="docker-registry missing")


@needs_registry
def test_mirror_figures_meet_their_goals(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench, "SHARED", (("cann-toolkit", 4), ("python", 1)))
    monkeypatch.setattr(bench, "OWN", {"A": (("torch-a", 2),), "B": (("torch-b", 2),)})
    figures = bench.bench_mirror(tmp_path, rate=None)
    assert figures["mirror run again (bytes sent)"].startswith("0 (goal 0), ")
    sent, own = figures["mirror + sibling cell (bytes sent)"].split(")")[0].split(" (its own layers: ")
    assert sent == own and int(sent) > 2 << 20
    assert figures["largest layer / shared by two cells of one CANN"].startswith("4.0 MiB / 5.0 MiB")


@needs_registry
def test_after_the_warm_the_fan_out_costs_the_source_nothing_and_cold_it_costs_more_than_direct(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "CACHE_IMAGE", (("base", 4),))
    source = hm.serve(tmp_path / "source")
    link = Throttle(source.host, 16 << 20)
    try:
        hm.push_image(Registry(source.host), bench.REPO, "v1", {}, b"top", base=bench._layers(bench.CACHE_IMAGE))
        size, _ = bench._size(source.host, bench.REPO, "v1")
        direct, cold, warm = (bench._cache_run(tmp_path, link, 4, mode) for mode in ("direct", "cold", "warm"))
    finally:
        link.stop()
        source.stop()
    assert 4 * size <= direct.crossed < 4 * size + (64 << 10)  # the manifests' and headers' few KB
    assert cold.crossed > direct.crossed  # the cache's own copy on top of each pull's stream
    # one copy, and what the warm's hung-up asks had in flight (the link's rate times a hang-up's latency)
    assert size <= warm.crossed < min(1.5 * size, cold.crossed / 2)
    assert 0 < warm.warm_seconds < warm.seconds


@needs_registry
def test_the_throttle_holds_its_rate_and_counts_what_crosses(tmp_path):
    source = hm.serve(tmp_path / "source")
    link = Throttle(source.host, 8 << 20)
    try:
        hm.push_image(Registry(source.host), "t/x", "v1", {}, b"top", base=bench._layers((("base", 4),)))
        size, _ = bench._size(source.host, "t/x", "v1")
        started = time.monotonic()
        assert bench._pull(link.host, "t/x", "v1") == size
        seconds = time.monotonic() - started
    finally:
        link.stop()
        source.stop()
    assert size <= link.bytes_down < size + (16 << 10)
    assert seconds >= (size - (256 << 10)) / (8 << 20)  # no faster than the rate (the bucket's depth aside)


def test_two_rendered_cells_of_one_cann_share_every_step_before_the_operator_package():
    cells = ROOT / "dockerfiles"
    shared, own = bench.shared_steps(cells / "cann8.5.0-910b-ubuntu22.04-py3.11-torch_npu2.8.0.post2-x86_64/Dockerfile",
                                     cells / "cann8.5.0-a3-ubuntu22.04-py3.11-torch_npu2.8.0.post2-x86_64/Dockerfile")
    assert [s.split(".")[0] for s in shared] == ["1", "2", "3", "4", "5"]
    assert shared[0].startswith("1. OS packages") and shared[1].startswith("2. CANN 8.5.0's toolkit")
    assert own[0] == "6. The 910b operator package" and own[1].startswith("7. torch_npu")
