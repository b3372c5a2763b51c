"""A torch_npu wheel the cell brings (``torch_npu_wheel: {path, sha256}``): the file-name
check, `validate` accepting the right bytes and refusing others, the lock recording exactly
its sha256, and the build context carrying it (over a wheelhouse file of the same name)."""

from __future__ import annotations

import doctest
import hashlib
from dataclasses import replace

import pytest
import yaml

from builder import knowledge
from builder.images import lock, own_wheel, plan, render, stage
from builder.errors import UserError
from tests.support.cann import synthetic_torch_npu_wheel
from tests.support.locks import entry
from tests.support.matrix import SHIPPED_MATRIX, all_findings, by_rule, write_cells
from builder.images import matrix

DEMO = next(c for c in matrix.load(SHIPPED_MATRIX).cells if c.id == "cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64")
CELL = {"os": "debian12", "arch": "x86_64", "chip": "910b", "cann": "9.1.0", "python": "3.11", "torch_npu": "2.13.0",
        "env": "venv", "min_driver": "25.2.RC1"}


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def findings_of(tmp_path, **cell):
    path, lines = write_cells(tmp_path, dict(CELL, **cell))
    return all_findings(path), lines


def test_module_examples_hold():
    assert doctest.testmod(own_wheel).failed == 0


def test_the_right_bytes_are_accepted(tmp_path):
    wheel = synthetic_torch_npu_wheel(tmp_path)
    findings, _ = findings_of(tmp_path, torch_npu_wheel={"path": str(wheel), "sha256": sha256(wheel)})
    assert [f for f in findings if f.severity == "error"] == []
    assert not [f for f in findings if f.rule.startswith("torch-npu-wheel")]


def test_other_bytes_are_refused_at_the_line_of_the_wheel(tmp_path):
    wheel = synthetic_torch_npu_wheel(tmp_path)
    findings, lines = findings_of(tmp_path, torch_npu_wheel={"path": str(wheel), "sha256": "0" * 64})
    (f,) = by_rule(findings, "torch-npu-wheel-sha256")
    assert f.severity == "error" and f.where.line == lines[(0, "torch_npu_wheel")]
    assert f.field == "cells[0].torch_npu_wheel"
    assert f.message == f"{wheel} has sha256 {sha256(wheel)}, not the {'0' * 64} the matrix gives"


def test_a_wheel_of_another_version_python_or_arch_is_refused(tmp_path):
    cases = {
        synthetic_torch_npu_wheel(tmp_path, version="2.12.0"): "is torch_npu 2.12.0, not 2.13.0",
        synthetic_torch_npu_wheel(tmp_path, tag="cp310-cp310"): "is built for cp310 on manylinux_2_17_x86_64, "
                                                                "not CPython 3.11 on x86_64",
        synthetic_torch_npu_wheel(tmp_path, platform="manylinux_2_17_aarch64"): "is built for cp311 on "
                                                                                 "manylinux_2_17_aarch64, not CPython 3.11 on x86_64",
    }
    for wheel, why in cases.items():
        findings, _ = findings_of(tmp_path, torch_npu_wheel={"path": str(wheel), "sha256": sha256(wheel)})
        (f,) = by_rule(findings, "torch-npu-wheel-mismatch")
        assert f.message == f"{wheel.name} {why}"


def test_a_wheel_not_on_this_machine_is_a_warning_and_the_build_refuses_it(tmp_path):
    findings, _ = findings_of(tmp_path, torch_npu_wheel={"path": "nowhere/torch_npu-2.13.0-cp311-cp311-linux_x86_64.whl",
                                                         "sha256": "0" * 64})
    assert [(f.rule, f.severity) for f in findings if f.rule.startswith("torch-npu-wheel")] == [
        ("torch-npu-wheel-absent", "warning")]
    with pytest.raises(UserError, match="is not a readable file"):
        own_wheel.verified("nowhere/torch_npu-2.13.0-cp311-cp311-linux_x86_64.whl", "0" * 64)


def test_an_unpublished_version_needs_its_torch_and_is_only_warned_about(tmp_path):
    wheel = synthetic_torch_npu_wheel(tmp_path, version="2.13.0rc7")
    own = {"path": str(wheel), "sha256": sha256(wheel)}
    findings, _ = findings_of(tmp_path, torch_npu="2.13.0rc7", torch_npu_wheel=own)
    assert {f.rule for f in findings if f.severity == "error"} == {"torch-unknown"}
    assert not by_rule(findings, "torch-npu-unpublished")  # the cell brings it: PyPI need not have it
    findings, _ = findings_of(tmp_path, torch_npu="2.13.0rc7", torch="2.13.0", torch_npu_wheel=own)
    assert [f.rule for f in findings if f.severity == "error"] == []
    assert [f.rule for f in findings] == ["cann-pairing-unknown"]
    # without the wheel the same version is refused: nothing could install it
    findings, _ = findings_of(tmp_path, torch_npu="2.13.0rc7", torch="2.13.0")
    assert by_rule(findings, "torch-npu-unpublished")


@pytest.mark.parametrize("value, message", [
    ({"path": "a.whl"}, "cells[0].torch_npu_wheel must have the keys path (or url) and sha256"),
    ({"path": "a.tar.gz", "sha256": "0" * 64}, "cells[0].torch_npu_wheel.path = 'a.tar.gz' is not a wheel"),
    ({"path": "a.whl", "sha256": "XYZ"}, "cells[0].torch_npu_wheel.sha256 = 'XYZ' is not a valid sha256"),
])
def test_schema(tmp_path, value, message):
    findings, _ = findings_of(tmp_path, torch_npu_wheel=value)
    assert [f.message for f in findings if f.rule.startswith("schema")][0].startswith(message)


def test_the_lock_inputs_carry_the_wheels_bytes_not_its_place(tmp_path):
    wheel = synthetic_torch_npu_wheel(tmp_path)
    own = replace(DEMO, torch_npu_wheel=(str(wheel), sha256(wheel)))
    moved = replace(DEMO, torch_npu_wheel=("elsewhere/" + wheel.name, sha256(wheel)))
    other = replace(DEMO, torch_npu_wheel=(str(wheel), "0" * 64))
    kb = knowledge.load()
    own_digest = plan.lock_inputs(own, kb).digest
    assert own_digest != plan.lock_inputs(DEMO, kb).digest        # a lock made for PyPI's is stale
    assert plan.lock_inputs(moved, kb).digest == own_digest       # the same bytes elsewhere: still fresh
    assert plan.lock_inputs(other, kb).digest != own_digest       # other bytes: stale
    hashes = {name: render.content_hash(c) for name, c in (("pypi", DEMO), ("own", own), ("moved", moved), ("other", other))}
    assert hashes["moved"] == hashes["own"] and len({hashes["pypi"], hashes["own"], hashes["other"]}) == 3


def test_the_context_carries_the_own_wheel_over_a_wheelhouse_file_of_its_name(tmp_path):
    (tmp_path / "own").mkdir()
    (tmp_path / "house").mkdir()
    own, house = synthetic_torch_npu_wheel(tmp_path / "own"), tmp_path / "house"
    synthetic_torch_npu_wheel(house, marker="PyPI's")
    folder = stage.context({"Dockerfile": b"FROM scratch\n"}, tmp_path / "ctx", house, own_wheels=[own])
    assert sha256(folder / stage.WHEELHOUSE / own.name) == sha256(own) != sha256(house / own.name)


@pytest.mark.index
def test_the_lock_records_exactly_the_wheels_sha256(tmp_path, monkeypatch):
    """uv resolves torch_npu's requirements from the wheel itself; its entry has its sha256 alone."""
    from pathlib import Path

    wheelhouse = Path("/opt/wheels")
    if not list(wheelhouse.glob("torch-2.13.0+cpu-cp311-*.whl")):
        pytest.skip("no torch 2.13.0+cpu wheel in /opt/wheels")
    wheel = synthetic_torch_npu_wheel(tmp_path)
    cell = replace(DEMO, torch_npu_wheel=(str(wheel), sha256(wheel)))
    made = lock.resolve(plan.lock_inputs(cell, knowledge.load()), wheelhouse=wheelhouse)
    assert entry(made, "torch-npu").hashes == (sha256(wheel),)
    assert made.complete and entry(made, "torch").version == "2.13.0+cpu"
    with pytest.raises(UserError, match="not the 0000"):
        lock.resolve(plan.lock_inputs(replace(cell, torch_npu_wheel=(str(wheel), "0" * 64)), knowledge.load()),
                     wheelhouse=wheelhouse)


@pytest.mark.engine
@pytest.mark.index
def test_an_npu_image_installs_the_own_wheel_and_refuses_other_bytes_of_its_name(engine, base_image, tmp_path):
    """The demo cell on synthetic CANN installers, its torch_npu from a wheel of its own:
    the image holds that very wheel's module; the same file name with other bytes in the
    context fails the build at uv's hash check."""
    from pathlib import Path

    from builder.images import render
    from builder.engine import BuildFailed
    from tests.support.cann import installers_91

    wheelhouse, CA = Path("/opt/wheels"), Path("/etc/ssl/certs/ca-certificates.crt")
    if not list(wheelhouse.glob("torch-2.13.0+cpu-cp311-*.whl")):
        pytest.skip("no torch 2.13.0+cpu wheel in /opt/wheels")
    installers, mine, theirs = (tmp_path / "installers", tmp_path / "mine", tmp_path / "theirs")
    mine.mkdir(), theirs.mkdir()
    wheel, impostor = synthetic_torch_npu_wheel(mine), synthetic_torch_npu_wheel(theirs, marker="someone else's")
    path, _ = write_cells(tmp_path, dict(CELL, cann_source={"local": str(installers)}, sha256=installers_91(installers),
                                         torch_npu_wheel={"path": str(wheel), "sha256": sha256(wheel)}))
    cell = replace(matrix.load(path).cells[0], base_image=base_image)
    made = lock.resolve(plan.lock_inputs(cell, knowledge.load()), wheelhouse=wheelhouse)
    files = render.render_cell(cell, lock=made)
    images = []
    try:
        for own, folder in ((wheel, "ctx"), (impostor, "ctx-impostor")):
            context = stage.context(files, tmp_path / folder, wheelhouse, installers, own_wheels=[own])
            with stage.secrets(cell, CA if CA.is_file() else None) as secrets:
                if own is impostor:
                    # Under load, docker's plain progress can end at the failure before it prints the
                    # failed step's output (seen once in CI, 2026-12-01): the step is not cached, so a
                    # second build runs uv again, and must fail the same way.
                    logs = []
                    for attempt in range(2):
                        logs.append(tmp_path / f"impostor-{attempt}.log")
                        with pytest.raises(BuildFailed) as failed:
                            engine.build(context, "Dockerfile", secrets=secrets, log_path=logs[-1])
                        if "Hash mismatch" in logs[-1].read_text():
                            break
                    assert "Hash mismatch" in logs[-1].read_text()
                    assert "torch-npu" in str(failed.value) + logs[-1].read_text()
                    continue
                images.append(engine.build(context, "Dockerfile", secrets=secrets, log_path=tmp_path / "own.log"))
        shown = engine.run(images[0], ["python3", "-c", "import torch_npu; print(torch_npu.OWN)"], timeout=120)
        assert shown.stdout.strip().splitlines()[-1] == "own build"
    finally:
        for image in images:
            engine.remove(image, force=True)


# --- a wheel named by URL -------------------------------------------------------------------

@pytest.fixture
def wheel_server(tmp_path, serve_folder):
    """(folder, base URL) of a loopback server of tmp_path/served."""
    (tmp_path / "served").mkdir()
    return tmp_path / "served", serve_folder(tmp_path / "served")


def test_a_url_is_validated_by_its_file_name_and_not_fetched(tmp_path):
    url = "http://127.0.0.1:9/whl/torch_npu-2.13.0-cp311-cp311-manylinux_2_17_x86_64.whl"  # nothing listens there
    findings, _ = findings_of(tmp_path, torch_npu_wheel={"url": url, "sha256": "0" * 64})
    assert [f.rule for f in findings if f.rule.startswith("torch-npu-wheel") or f.severity == "error"] == []
    findings, _ = findings_of(tmp_path, torch_npu_wheel={"url": url.replace("cp311", "cp310"), "sha256": "0" * 64})
    assert [f.rule for f in findings if f.severity == "error"] == ["torch-npu-wheel-mismatch"]
    findings, _ = findings_of(tmp_path, torch_npu_wheel={"url": "ftp://x/torch_npu-2.13.0-py3-none-any.whl",
                                                         "sha256": "0" * 64})
    assert [f.field for f in findings if f.rule == "schema-value"] == ["cells[0].torch_npu_wheel.url"]


def test_a_url_is_downloaded_only_when_its_bytes_match(tmp_path, wheel_server):
    folder, base = wheel_server
    wheel = synthetic_torch_npu_wheel(folder)
    url = f"{base}/{wheel.name.replace('+', '%2B')}"
    got = own_wheel.verified(url, sha256(wheel), downloads=tmp_path / "downloads")
    assert got.name == wheel.name and sha256(got) == sha256(wheel)
    wheel.unlink()  # the server no longer has it: the file already downloaded is used, not fetched again
    assert own_wheel.verified(url, sha256(got), downloads=tmp_path / "downloads") == got
    other = synthetic_torch_npu_wheel(folder, marker="other")
    with pytest.raises(UserError) as caught:
        own_wheel.verified(url, "1" * 64, downloads=tmp_path / "elsewhere")
    assert caught.value.message == f"{url}: its sha256 is {sha256(other)}, not the {'1' * 64} the matrix gives"
    assert not [p for p in (tmp_path / "elsewhere").rglob("*") if p.is_file()]  # nothing kept of other bytes


@pytest.mark.index
def test_the_lock_downloads_a_url_wheel_and_records_its_sha256(tmp_path, wheel_server):
    from pathlib import Path

    wheelhouse = Path("/opt/wheels")
    if not list(wheelhouse.glob("torch-2.13.0+cpu-cp311-*.whl")):
        pytest.skip("no torch 2.13.0+cpu wheel in /opt/wheels")
    folder, base = wheel_server
    wheel = synthetic_torch_npu_wheel(folder)
    cell = replace(DEMO, torch_npu_wheel=(f"{base}/{wheel.name}", sha256(wheel)))
    made = lock.resolve(plan.lock_inputs(cell, knowledge.load()), wheelhouse=wheelhouse)
    assert entry(made, "torch-npu").hashes == (sha256(wheel),) and made.complete


@pytest.mark.engine
@pytest.mark.index
def test_the_cli_builds_an_npu_image_with_a_wheel_named_by_url(engine, base_image, tmp_path, wheel_server):
    """`lock` and `image` through the real CLI: the wheel is downloaded from its URL, its bytes
    checked, and the image holds it. (The synthetic wheel has no shared objects, so the
    libraries tier fails and nothing is tagged: the untagged candidate is what is looked into.)"""
    import json
    from pathlib import Path

    from tests.support.cann import installers_91
    from tests.support.matrix import run_cli

    folder, base = wheel_server
    wheel = synthetic_torch_npu_wheel(folder)
    installers = tmp_path / "installers"
    image = f"ascend-build-test/own-wheel-{tmp_path.name[-8:]}"
    (tmp_path / "m.yaml").write_text(yaml.safe_dump({"image": image, "cells": [dict(
        CELL, cann_source={"local": str(installers)}, sha256=installers_91(installers),
        torch_npu_wheel={"url": f"{base}/{wheel.name}", "sha256": sha256(wheel)})]}))
    common = ["-m", tmp_path / "m.yaml", "-o", tmp_path / "out"]
    locked = run_cli("lock", *common, "--wheelhouse", "/opt/wheels", timeout=600)
    assert locked.returncode == 0, locked.stdout + locked.stderr
    built = run_cli("image", *common, "--variant", "npu", "--no-device", "--base-image", base_image, "--wheelhouse",
                    "/opt/wheels", "--state-dir", tmp_path / "state", "--json", timeout=1200)
    (row,) = json.loads(built.stdout)
    try:
        tiers = {t["name"]: t for t in row["tiers"]}
        assert tiers["versions"]["status"] == "passed" and "torch_npu 2.13.0" in tiers["versions"]["summary"]
        assert tiers["libraries"]["summary"].startswith("torch_npu is not installed (no shared objects found)")
        assert row["status"] == "failed" and engine.image_id(f"{image}:{row['cell']}-candidate") is None
        shown = engine.run(row["image_id"], ["python", "-c", "import torch_npu; print(torch_npu.OWN)"], timeout=120)
        assert shown.stdout.strip().splitlines()[-1] == "own build"
        assert [p.name for p in Path(tmp_path / "state" / "own-wheels").rglob("*.whl")] == [wheel.name]
    finally:
        engine.remove(row["image_id"], force=True)
