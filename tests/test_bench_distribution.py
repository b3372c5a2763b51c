"""What docs/distribution.md says of `bench_distribution`'s figures, checked on a small run: the
mirror moves nothing on a run again and only the sibling's own layers when it is added, and after
the first-byte prefetch, N pulls at once through the cache cost the source nothing more."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import bench_distribution as bench
from tests.support import mirror as hm

pytestmark = pytest.mark.skipif(not Path(hm.REGISTRY_BIN).exists(), reason="docker-registry missing")


def test_mirror_figures_meet_their_goals(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench, "SHARED", (("cann-toolkit", 4), ("python", 1)))
    monkeypatch.setattr(bench, "OWN", {"A": (("torch-a", 2),), "B": (("torch-b", 2),)})
    figures = bench.bench_mirror(tmp_path)
    assert figures["mirror run again (bytes sent)"] == "0 (goal 0)"
    sent, own = figures["mirror + sibling cell (bytes sent)"].replace(")", "").split(" (its own layers: ")
    assert sent == own and int(sent) > 2 << 20
    assert figures["largest layer / shared by two cells of one CANN"].startswith("4.0 MiB / 5.0 MiB")


def test_after_the_first_byte_prefetch_the_fan_out_costs_the_source_nothing(tmp_path):
    gets, written, blobs, size = bench._cache_run(tmp_path, 4, "touch")
    # one GET per blob for the cache's storage, one for the prefetch's hung-up stream, none for the 4 pulls
    assert gets == 2 * blobs
    assert size <= written < 1.9 * size

