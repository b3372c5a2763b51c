"""builder/smoke/driver_guard.py, the ENTRYPOINT of every image: its decision, and the guard
run as a program the way an image runs it (a standalone copy of the shipped files, by a link).

The same guard started through the real engine in a built twin: test_driver_guard_e2e.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builder import knowledge, versions, vocabulary
from builder.images import render
from builder.devices import run_argv
from builder.node import explain
from builder.smoke import driver_guard as guard
from builder.smoke import error_table

TABLE = error_table.compile_table(knowledge.error_entries())
NEED = {"ASCEND_REQUIRE_DRIVER": "25.0.RC1", "ASCEND_REQUIRE_FIRMWARE": "7.7.0.1.231"}


def info(version: str) -> str:
    return f"Version={version}\nascendhal_version=7.35.23\ncompatible_version_fw=[7.0.0,7.7.99]\n"


def test_a_driver_below_the_minimum_is_refused_with_the_tables_cause_and_fix():
    decision = guard.decide(NEED, info("24.1.rc3"), None, TABLE)
    assert decision.run is False
    assert decision.lines[0] == ("ascend-driver-guard: refused: this image needs NPU driver 25.0.RC1 or newer; "
                                 "/usr/local/Ascend/driver/version.info says 24.1.rc3")
    entry = next(e for e in TABLE if e.id == "driver-too-old")
    assert decision.lines[1] == "  cause: " + entry.cause
    assert decision.lines[2].startswith("  fix: Upgrade the host driver") and "to at least 25.0.RC1" in decision.lines[2]
    assert "the host driver 24.1.rc3" in decision.lines[2]
    assert decision.lines[3] == "  to start it anyway (unsafe): ASCEND_DRIVER_GUARD=off-unsafe"


@pytest.mark.parametrize("have, need, runs", [
    ("25.0.RC1", "25.0.RC1", True),       # at the minimum
    ("25.0.rc1", "25.0.RC1", True),       # version.info writes rc, the matrix RC
    ("25.0.rc1.1", "25.0.RC1", True),     # a patch of the RC
    ("25.0.0", "25.0.RC1", True),         # the final release after its RCs
    ("26.1.0.b083", "26.1.0", True),      # a build after its release
    ("24.1.0.1", "25.0.RC1", False),      # an older line, however patched
    ("25.0.T1", "25.0.RC1", False),       # a test build sorts before RC1
    ("25.2.rc1", "25.0.X", True),         # a line name stands for its first RC
    ("24.1.rc3", "25.0.X", False),
])
def test_the_decision_follows_ascend_version_order(have, need, runs):
    decision = guard.decide({"ASCEND_REQUIRE_DRIVER": need}, info(have), None, TABLE)
    assert decision.run is runs
    assert (decision.lines == []) is runs


def test_no_driver_mounted_runs_and_says_so_on_one_line():
    decision = guard.decide(NEED, None, None, TABLE)
    assert decision.run is True
    assert decision.lines == ["ascend-driver-guard: no NPU driver found (no /usr/local/Ascend/driver/version.info): "
                              "running without the driver check; this image needs driver 25.0.RC1 or newer on an NPU node"]


def test_only_off_unsafe_turns_the_check_off():
    off = guard.decide({**NEED, "ASCEND_DRIVER_GUARD": "off-unsafe"}, info("23.0.0"), None, TABLE)
    assert off.run is True and off.lines == [
        "ascend-driver-guard: ASCEND_DRIVER_GUARD=off-unsafe: the NPU driver is NOT checked (this image needs 25.0.RC1 or newer)"]
    for value in ("off", "0", "false", "OFF-UNSAFE"):
        kept = guard.decide({**NEED, "ASCEND_DRIVER_GUARD": value}, info("23.0.0"), None, TABLE)
        assert kept.run is False, value
        assert kept.lines[0] == (f"ascend-driver-guard: ASCEND_DRIVER_GUARD={value} is not understood: only off-unsafe "
                                 "turns the check off; checking")


def test_a_broken_driver_file_is_refused_not_waved_through():
    for text, why in ((False, "is there but cannot be read"), ("no version here\n", "has no Version= line"),
                      ("Version=banana\n", "says Version=banana, which is no hdk version")):
        decision = guard.decide(NEED, text, None, TABLE)
        assert decision.run is False and why in decision.lines[0], text


def test_firmware_is_checked_only_when_mounted_and_stated():
    old_fw = "Version=7.5.0.1.129\n"
    refused = guard.decide(NEED, info("25.0.RC1"), old_fw, TABLE)
    assert refused.run is False
    assert refused.lines[0] == ("ascend-driver-guard: refused: this image needs NPU firmware 7.7.0.1.231 or newer; "
                                "/usr/local/Ascend/firmware/version.info says 7.5.0.1.129")
    assert guard.decide(NEED, info("25.0.RC1"), None, TABLE).run is True  # the device plugin mounts no firmware file
    assert guard.decide({"ASCEND_REQUIRE_DRIVER": "25.0.RC1", "ASCEND_REQUIRE_FIRMWARE": ""},
                        info("25.0.RC1"), old_fw, TABLE).run is True
    assert guard.decide(NEED, info("25.0.RC1"), "Version=7.7.0.1.231\n", TABLE).run is True


def test_a_file_the_image_states_no_minimum_for_refuses_nothing():
    """An image with a driver minimum and no firmware minimum (most shipped ones) starts beside a firmware
    version.info the guard cannot parse or read; one with a firmware minimum alone ignores a broken driver file."""
    driver_only = {"ASCEND_REQUIRE_DRIVER": "25.0.RC1"}
    for broken in (False, "no version here\n", "Version=banana\n"):
        assert guard.decide(driver_only, info("25.0.RC1"), broken, TABLE) == guard.Decision(True, []), broken
        assert guard.decide(driver_only, info("24.1.rc3"), broken, TABLE).run is False  # the driver still decides
        firmware_only = guard.decide({"ASCEND_REQUIRE_FIRMWARE": "7.7.0.1.231"}, broken, "Version=7.7.0.1.231\n", TABLE)
        assert firmware_only == guard.Decision(True, []), broken
    refused = guard.decide(NEED, info("25.0.RC1"), "Version=banana\n", TABLE)  # stated: a broken file still refuses
    assert refused.run is False and "firmware/version.info says Version=banana" in refused.lines[0]


def test_an_image_that_states_nothing_runs_silently_and_a_broken_requirement_is_refused():
    assert guard.decide({}, info("1.0.0"), None, TABLE) == guard.Decision(True, [])
    broken = guard.decide({"ASCEND_REQUIRE_DRIVER": "latest"}, info("25.0.RC1"), None, TABLE)
    assert broken.run is False and "ASCEND_REQUIRE_DRIVER=latest is no driver version" in broken.lines[0]


def test_explain_reads_the_refusal_from_a_pods_log():
    """`ascend-build explain` on the guard's output (kubectl logs) fills the fix from the text itself."""
    log = "\n".join(guard.decide(NEED, info("24.1.rc3"), None, TABLE).lines)
    [match] = explain.explain(log)
    assert match.id == "driver-too-old"
    assert "to at least 25.0.RC1" in match.fix and "the host driver 24.1.rc3" in match.fix


@pytest.fixture
def shipped(tmp_path) -> Path:
    """The guard as an image holds it: the shipped files in a tool folder (no `builder` package
    importable) and the fixed path a link to the guard among them."""
    tools = tmp_path / "tools"
    tools.mkdir()
    for name, data in render.files(render.resolve(_any_cell())).items():
        if name in vocabulary.SHIPPED_FILES:
            (tools / name).write_bytes(data)
    (tools / vocabulary.GUARD_FILE).chmod(0o755)
    link = tmp_path / "ascend-driver-guard"
    link.symlink_to(tools / vocabulary.GUARD_FILE)
    return link


def _any_cell():
    from builder.images import matrix
    from tests.support.matrix import SHIPPED_MATRIX

    return matrix.load(SHIPPED_MATRIX).cells[0]


def _run(link: Path, *command: str, **env: str) -> subprocess.CompletedProcess:
    # -I: neither the repository nor PYTHONPATH on sys.path, as in an image; the guard finds its
    # siblings through the link. The interpreter is named, since /usr/bin/env python3 may be another.
    return subprocess.run([sys.executable, "-I", str(link), *command], capture_output=True, text=True, timeout=60,
                          env={"PATH": os.environ["PATH"], **env})


@pytest.mark.skipif(os.path.exists("/usr/local/Ascend/driver/version.info"), reason="this machine has an NPU driver")
def test_the_shipped_guard_execs_the_command_with_its_arguments_and_exit_code(shipped):
    done = _run(shipped, "sh", "-c", 'echo "$0 $1"; exit 7', "a b", "c", **NEED)
    assert done.returncode == 7  # exec: the command's own code
    assert done.stdout == "a b c\n"
    assert done.stderr.startswith("ascend-driver-guard: no NPU driver found")
    assert len(done.stderr.splitlines()) == 1


def test_the_shipped_guard_says_what_is_wrong_without_a_command_or_a_program(shipped):
    usage = _run(shipped, **NEED)
    assert usage.returncode == 2 and usage.stderr.startswith("usage: ascend-driver-guard COMMAND")
    missing = _run(shipped, "no-such-program-here", ASCEND_DRIVER_GUARD="off-unsafe")
    assert missing.returncode == 127 and "cannot run no-such-program-here" in missing.stderr


def test_the_shipped_guard_refuses_by_its_own_exit_code(shipped):
    """A broken requirement is refused before any file is read: the refusal path of the shipped copy."""
    refused = _run(shipped, "true", ASCEND_REQUIRE_DRIVER="latest")
    assert refused.returncode == guard.REFUSED == 78
    assert "refused: ASCEND_REQUIRE_DRIVER=latest" in refused.stderr


def test_ascend_build_run_keeps_the_images_entrypoint():
    argv = run_argv("img", [0], ["python", "train.py"], root=Path("/nonexistent"), interactive=False)
    assert not any(a.startswith("--entrypoint") for a in argv)
    assert argv[-3:] == ["img", "python", "train.py"]  # the command is CMD: it runs behind the guard


def test_run_mounts_the_firmware_file_only_for_an_image_stating_a_firmware_minimum(tmp_path):
    from builder import devices

    for path in (devices.FIRMWARE_INFO, "/usr/local/Ascend/driver/version.info"):
        (tmp_path / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path.lstrip("/")).write_text(info("25.0.RC1"))
    mounted = [run_argv("img", [], root=tmp_path, interactive=False, firmware=firmware) for firmware in (True, False)]
    firmware = f"{devices.FIRMWARE_INFO}:{devices.FIRMWARE_INFO}:ro"
    assert firmware in mounted[0] and firmware not in mounted[1]
    assert mounted[0][: mounted[0].index(firmware) - 1] + mounted[0][mounted[0].index(firmware) + 1:] == mounted[1]
    assert "/usr/local/Ascend/driver/version.info:/usr/local/Ascend/driver/version.info:ro" in mounted[1]


def test_the_guard_reads_a_fixture_file_as_the_image_does(tmp_path):
    path = tmp_path / "version.info"
    assert guard.read_info(str(path)) is None
    path.write_text(info("25.0.RC1"))
    assert guard.read_info(str(path)) == info("25.0.RC1")
    path.unlink()
    path.mkdir()  # a directory mounted where the file belongs
    assert guard.read_info(str(path)) is False
    shutil.rmtree(path)
    path.write_bytes(b"Version=\0\0")
    assert guard.read_info(str(path)) is False


@st.composite
def hdk_texts(draw) -> str:
    line = f"{draw(st.integers(20, 30))}.{draw(st.integers(0, 9))}"
    stage = draw(st.sampled_from(["T", "RC", "rc", ""]))
    number = draw(st.integers(0, 5))
    if stage == "T":
        return f"{line}.T{number}"
    suffix = draw(st.sampled_from(["", f".{draw(st.integers(1, 3))}", f".b{draw(st.integers(1, 999)):03d}"]))
    return f"{line}.{stage}{number}{suffix}"


@settings(max_examples=300, deadline=None)
@given(hdk_texts(), st.one_of(hdk_texts(), st.builds(lambda n: f"{n}.X", st.sampled_from(["24.1", "25.0", "25.2"]))))
def test_the_guard_and_the_schedulers_ordinal_selection_agree(node_driver, need):
    """A node the `k8s job` affinity admits (ordinal > ordinal(minimum) - 1) is one the guard lets
    run, and the other way round: the two ends decide "driver at least the minimum" alike."""
    minimum = versions.minimum("hdk", need)
    assert minimum is not None, need
    admitted = versions.driver_ordinal(node_driver) > versions.driver_ordinal(minimum) - 1
    runs = guard.decide({"ASCEND_REQUIRE_DRIVER": need}, info(node_driver), None, TABLE).run
    assert admitted is runs


def test_the_k8s_manifests_name_the_guard_at_the_path_images_have_it():
    from builder.k8s import pod

    assert pod.GUARD_PATH == vocabulary.GUARD == "/usr/local/bin/ascend-driver-guard"
