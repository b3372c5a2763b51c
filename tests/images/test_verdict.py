"""smoke_run.verdict: what a smoke report earns, decided from the report alone (no engine)."""

import pytest

from builder.images.smoke_run import verdict
from builder.vocabulary import Label, static_tiers, tier_names


def report(statuses, passed=True, exit_code=0, **extra):
    return {"passed": passed, "exit_code": exit_code, "device": "cpu",
            "tiers": [{"name": n, "status": s, "summary": f"{n} {s}"} for n, s in statuses.items()], **extra}


ALL_PASSED = {name: "passed" for name in tier_names()}


def test_a_full_pass_is_sealed_with_the_tiers_device_and_host():
    judged = verdict(report(ALL_PASSED, host={"driver": "25.0.RC1", "firmware": "7.7.0.1.231"}), tier_names(), final=True)
    assert judged.status == "passed" and judged.message == ""
    assert judged.seal_labels == {Label.VALIDATED: "true", Label.VALIDATED_DEVICE: "cpu",
                                  Label.VALIDATED_TIERS: ",".join(tier_names()), Label.VALIDATED_DRIVER: "25.0.RC1",
                                  Label.VALIDATED_FIRMWARE: "7.7.0.1.231", Label.VALIDATED_UNDER: "native"}


def test_static_tiers_without_a_device_earn_only_a_candidate():
    judged = verdict(report({n: "passed" for n in static_tiers()}), static_tiers(), final=False)
    assert (judged.status, judged.seal_labels) == ("candidate", {})


def test_a_skipped_tier_with_a_reason_still_passes():
    statuses = dict(ALL_PASSED, collective="skipped")
    assert verdict(report(statuses), tier_names(), final=True).status == "passed"


@pytest.mark.parametrize("statuses, kwargs, expected", [
    (dict(ALL_PASSED, train="failed"), {}, "train: train failed"),
    ({n: "passed" for n in static_tiers()}, {}, "import: not run"),          # a required tier is missing
    (ALL_PASSED, {"exit_code": 1}, "smoke test failed"),                   # the program exited non-zero
    (ALL_PASSED, {"passed": False}, "smoke test failed"),                  # the program said it failed
])
def test_anything_short_of_every_required_tier_fails_with_the_reason(statuses, kwargs, expected):
    judged = verdict(report(statuses, **kwargs), tier_names(), final=True)
    assert judged.status == "failed" and expected in judged.message and judged.seal_labels == {}


def test_the_seal_lists_only_the_tiers_that_passed_and_names_the_skipped_apart():
    """A tier skipped with a reason (the all-reduce with one NPU visible) earns the seal, but the
    validated-tiers label no longer lists it: the skipped-tiers label does."""
    judged = verdict(report(dict(ALL_PASSED, collective="skipped")), tier_names(), final=True)
    assert judged.seal_labels[Label.VALIDATED_TIERS] == ",".join(t for t in tier_names() if t != "collective")
    assert judged.seal_labels[Label.SKIPPED_TIERS] == "collective"
    assert Label.SKIPPED_TIERS not in verdict(report(ALL_PASSED), tier_names(), final=True).seal_labels


def test_the_seals_report_is_written_whole_or_the_seal_stops_before_its_build():
    """A full disk while the seal writes its files: a clear error, and no half report left to be
    sealed into an image. The engine is never reached (the write comes first): None stands in."""
    from builder.errors import UserError
    from builder.images.smoke_run import seal
    from tests.support.faults import CannotMount, fill, small_fs

    report = b'{"passed": true, "tiers": []}' + b" " * 20000
    try:
        with small_fs("64k") as point:
            folder = point / "seal"
            folder.mkdir()
            filler = fill(point, keep=8192)
            with pytest.raises(UserError, match="no space left on the file system of .*validation.json"):
                seal(None, "sha256:" + "0" * 64, report, {}, folder, point / "log")  # type: ignore[arg-type]
            assert list(folder.iterdir()) == []  # neither a half report nor a staged file
            filler.unlink()
    except CannotMount as why:
        pytest.skip(f"no tmpfs here: {why}")
