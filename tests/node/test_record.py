"""builder.node.record: the field guide's run record (section 7), measured, never overwritten."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict

import pytest

from builder.node import record as rec
from builder.errors import UserError
from builder.node.host import HostInfo, probe
from tests.support.node import SMI_910B3, make_node, write
from tests.support.promptly import promptly

GUIDE_EXAMPLE = ["model=qwen2.5-27b", "train_mode=lora", "seq_len=4096", "batch_size=8",
                 "learning_rate=3e-5", "world_size=8"]
MANIFEST: Dict[str, Any] = {
    "schema": 1, "framework": "pytorch", "cell": "cann8.0.rc3-910b-ubuntu22.04-py3.10-torch_npu2.4.0-aarch64",
    "variant": "npu", "image": "ascend-build/pytorch:cann8.0.rc3-910b-ubuntu22.04-py3.10-torch_npu2.4.0-aarch64",
    "os": "ubuntu22.04", "arch": "aarch64", "chip": "910b", "python_version": "3.10", "torch_version": "2.4.0",
    "torch_npu_version": "2.4.0", "cann_version": "8.0.RC3", "min_driver": "24.1.RC3",
    "min_firmware": None, "env_manager": "venv", "pip": [], "env": {"HCCL_CONNECT_TIMEOUT": "1800"},
    "content_hash": "1b3a6901c6daa20c",
}
VALIDATION = {"schema": 1, "passed": True, "device": "npu", "started": "2026-11-29T20:00:00+00:00",
              "host": {"driver": "24.1.rc3", "firmware": "7.5.0.1.129"},
              "tiers": [{"name": "versions", "status": "passed", "summary": "...", "details": {}},
                        {"name": "collective", "status": "skipped", "summary": "...", "details": {}}],
              "lock": "ok", "base_image": {"ref": "ubuntu:22.04", "id": "sha256:" + "1" * 64,
                                           "digests": ["ubuntu@sha256:" + "2" * 64]}}


@pytest.fixture
def no_torch(monkeypatch):
    """This interpreter's facts as if it had no torch: the record must fall back to the manifest."""
    real = rec.interpreter_facts()
    monkeypatch.setattr(rec, "interpreter_facts", lambda: dict(real, torch=None, torch_npu=None))


@pytest.mark.parametrize("text, value", [
    ("8", 8), ("-3", -3), ("0", 0), ("4096", 4096), ("3e-5", 3e-05), ("0.1", 0.1), ("1e3", 1000.0), ("1.", 1.0),
    ("2.1.0", "2.1.0"), ("08", "08"), ("0x10", "0x10"), ("nan", "nan"), ("inf", "inf"), ("1e999", "1e999"),
    ("true", "true"), ("", ""), ("+5", "+5"), ("1_000", "1_000"), ("qwen2.5-27b", "qwen2.5-27b"),
    # a float would drop the written zero: 1.10 is a version (data_version=1.10), not 1.1
    ("1.10", "1.10"), ("0.50", "0.50"), ("1.50e3", "1.50e3"), ("2.0", 2.0), ("2.05", 2.05),
])
def test_parse_value(text, value):
    got = rec.parse_value(text)
    assert got == value and type(got) is type(value)


def test_parse_pairs_and_bad_pairs():
    assert rec.parse_pairs(["a=1", "b.c=x=y", "d="]) == {"a": "1", "b.c": "x=y", "d": ""}
    for bad in (["novalue"], ["=1"], ["1a=2"], ["a b=1"]):
        with pytest.raises(UserError):
            rec.parse_pairs(bad)
    with pytest.raises(UserError, match="given twice"):
        rec.parse_pairs(["a=1", "a=2"])


def test_measured_keys_cannot_be_set(tmp_path):
    with pytest.raises(UserError, match="torch_version"):
        rec.write_record(tmp_path, {"torch_version": "2.1.0"}, HostInfo(), {}, root=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_guide_example_on_a_fixture_node(tmp_path):
    facts = dict(rec.interpreter_facts(), torch="2.1.0", torch_npu="2.1.0rc1", executable="/opt/venv/bin/python3")
    node = make_node(tmp_path / "node")
    host = probe(node, run_npu_smi=False)
    env = {"HCCL_CONNECT_TIMEOUT": "1800", "ASCEND_GLOBAL_LOG_LEVEL": "3", "HOME": "/root", "SECRET_TOKEN": "x"}
    path = rec.write_record(tmp_path / "ckpt", rec.parse_pairs(GUIDE_EXAMPLE), host, env, root=node, facts=facts)
    data = json.loads(path.read_text())
    assert path.name == "ascend-build-record.json"
    assert (data["framework"], data["torch_version"], data["torch_npu_version"], data["cann_version"]) == \
        ("pytorch", "2.1.0", "2.1.0rc1", "8.0.0")
    assert (data["driver"], data["firmware"], data["arch"]) == ("24.1.rc3", "7.5.0.1.129", "aarch64")
    assert data["seq_len"] == 4096 and data["learning_rate"] == 3e-5 and data["model"] == "qwen2.5-27b"
    assert data["env"] == {"ASCEND_GLOBAL_LOG_LEVEL": "3", "HCCL_CONNECT_TIMEOUT": "1800"}  # nothing else leaks
    assert data["sources"]["cann_version"] == "/usr/local/Ascend/ascend-toolkit/latest/version.cfg"
    assert data["sources"]["torch_version"] == "importlib.metadata of /opt/venv/bin/python3"
    assert data["image"] is None and data["python_version"].count(".") == 2


def test_never_overwrites(tmp_path, no_torch):
    paths = [rec.write_record(tmp_path, {"run": str(i)}, HostInfo(), {}, root=tmp_path) for i in range(3)]
    assert [p.name for p in paths] == ["ascend-build-record.json", "ascend-build-record.1.json",
                                       "ascend-build-record.2.json"]
    assert [json.loads(p.read_text())["run"] for p in paths] == [0, 1, 2]


def test_a_gap_is_not_filled_over_an_existing_file(tmp_path, no_torch):
    write(tmp_path / "ascend-build-record.json", "{}")
    write(tmp_path / "ascend-build-record.2.json", "keep me")
    assert rec.write_record(tmp_path, {}, HostInfo(), {}, root=tmp_path).name == "ascend-build-record.1.json"
    assert rec.write_record(tmp_path, {}, HostInfo(), {}, root=tmp_path).name == "ascend-build-record.3.json"
    assert (tmp_path / "ascend-build-record.2.json").read_text() == "keep me"


def test_output_dir_is_created_and_a_file_is_refused(tmp_path, no_torch):
    assert rec.write_record(tmp_path / "a", {}, HostInfo(), {}, root=tmp_path).parent == tmp_path / "a"
    write(tmp_path / "file", "x")
    with pytest.raises(UserError, match="not a folder"):
        rec.write_record(tmp_path / "file", {}, HostInfo(), {}, root=tmp_path)


def test_inside_an_ascend_build_image(tmp_path, no_torch):
    """No torch visible to this interpreter, no CANN file: declared values, and sources say so."""
    node = make_node(tmp_path / "node", cann_cfg=None)
    write(node / "etc/ascend-build/manifest.json", json.dumps(MANIFEST))
    write(node / "etc/ascend-build/validation.json", json.dumps(VALIDATION))
    labels = {"io.ascend-build.cell": MANIFEST["cell"], "maintainer": "someone"}
    path = rec.write_record(tmp_path / "out", {}, probe(node, run_npu_smi=False), {}, labels, root=node)
    data = json.loads(path.read_text())
    assert (data["torch_version"], data["torch_npu_version"], data["cann_version"]) == ("2.4.0", "2.4.0", "8.0.RC3")
    assert data["sources"]["torch_version"] == "image manifest (not measurable here)"
    assert data["driver"] == "24.1.rc3"  # the host's, never the manifest's min_driver
    image = data["image"]
    assert image["ref"] == MANIFEST["image"] and image["content_hash"] == "1b3a6901c6daa20c"
    assert image["manifest"]["cell"] == MANIFEST["cell"]
    assert image["validation"] == {"passed": True, "device": "npu", "started": "2026-11-29T20:00:00+00:00",
                                   "host": {"driver": "24.1.rc3", "firmware": "7.5.0.1.129"},
                                   "tiers": {"versions": "passed", "collective": "skipped"},
                                   "lock": "ok", "base_image": VALIDATION["base_image"]}
    assert image["labels"] == {"io.ascend-build.cell": MANIFEST["cell"]}


@pytest.mark.parametrize("content, note", [
    ("{not json", "cannot read /etc/ascend-build/manifest.json"),
    ("[1, 2]", "/etc/ascend-build/manifest.json is not a JSON object"),
])
def test_garbage_manifest_is_a_note(tmp_path, no_torch, content, note):
    write(tmp_path / "etc/ascend-build/manifest.json", content)
    data = json.loads(rec.write_record(tmp_path / "o", {}, HostInfo(), {}, root=tmp_path).read_text())
    assert data["image"] is None and note in " ".join(data["problems"])


@pytest.mark.parametrize("plant", ["folder", "fifo", "huge"])
def test_a_manifest_that_is_no_regular_file_or_too_large_is_a_note_never_a_hang(tmp_path, no_torch, monkeypatch, plant):
    path = tmp_path / "etc/ascend-build/manifest.json"
    path.parent.mkdir(parents=True)
    if plant == "folder":
        path.mkdir()
    elif plant == "fifo":
        os.mkfifo(path)  # no writer: a plain open() would wait for ever
    else:
        monkeypatch.setattr(rec, "RECORD_READ_MAX", 64)
        path.write_text(json.dumps({"cell": "x" * 100}))
    written, _ = promptly(lambda: rec.write_record(tmp_path / "o", {}, HostInfo(), {}, root=tmp_path), path)
    data = json.loads(written.read_text())
    said = " ".join(data["problems"])
    assert data["image"] is None
    assert ("/etc/ascend-build/manifest.json is over 64 bytes" if plant == "huge" else
            "/etc/ascend-build/manifest.json is not a regular file (a FIFO, a device or a folder)") in said, said


def test_fake_npu_run_record_end_to_end(tmp_path, no_torch):
    node = make_node(tmp_path / "node", smi=SMI_910B3)
    path, data = rec.run_record(tmp_path / "ckpt", ["seq_len=4096"], root=node, environ={"HCCL_BUFFER_SIZE": "200"})
    assert path.is_file() and data == json.loads(path.read_text())
    assert (data["chip"], data["soc"], data["driver"]) == ("910b", "Ascend910B3", "24.1.rc3")
    assert data["env"] == {"HCCL_BUFFER_SIZE": "200"} and data["problems"] == []
    text = rec.format_record(path, data)
    assert text.splitlines()[0] == f"wrote {path}"
    assert "  chip               910b" in text and "  seq_len            4096" in text


def test_a_missing_nested_output_path_is_an_error_not_created(tmp_path, no_torch):
    with pytest.raises(UserError, match=r"b/c: its folder .*/a/b does not exist") as refused:
        rec.write_record(tmp_path / "a/b/c", {}, HostInfo(), {}, root=tmp_path)
    assert "mkdir -p" in refused.value.fix
    assert not (tmp_path / "a").exists()


def test_the_record_lists_every_distribution_of_the_running_environment(tmp_path):
    """Called from the job's own Python (the library, not the CLI): this interpreter is the run's."""
    import importlib.metadata
    import sys

    data = json.loads(rec.write_record(tmp_path / "o", {}, HostInfo(), {}, root=tmp_path).read_text())
    mine = {d.metadata["Name"].lower().replace("_", "-"): d.version for d in importlib.metadata.distributions()
            if str(d.locate_file("")).startswith(sys.prefix)}
    assert data["distributions"]["typer"] == mine["typer"] and data["distributions"]["pyyaml"] == mine["pyyaml"]
    assert len(data["distributions"]) >= 10
    with pytest.raises(UserError, match="measured by ascend-build"):
        rec.build_record({"distributions": "x"}, HostInfo(), {}, root=tmp_path)


def test_hostile_values_and_folders_are_clear_errors_or_kept_as_text(tmp_path, no_torch):
    # a 5,000-digit number stays text, as written (int() refuses more than 4,300 digits)
    assert rec.parse_value("9" * 5000) == "9" * 5000 and rec.parse_value("-" + "9" * 18) == -int("9" * 18)
    path = rec.write_record(tmp_path / "run", {"seq_len": "9" * 5000}, HostInfo(), {}, root=tmp_path)
    assert json.loads(path.read_text())["seq_len"] == "9" * 5000
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(UserError, match="is a symlink to nothing"):
        rec.write_record(dangling, {}, HostInfo(), {}, root=tmp_path)
    with pytest.raises(UserError, match="File name too long"):
        rec.write_record(tmp_path / ("a" * 300), {}, HostInfo(), {}, root=tmp_path)


def test_a_manifest_nested_past_any_need_is_a_note(tmp_path, no_torch):
    write(tmp_path / "etc/ascend-build/manifest.json", "[" * 100000 + "]" * 100000)
    data = json.loads(rec.write_record(tmp_path / "o", {}, HostInfo(), {}, root=tmp_path).read_text())
    assert data["image"] is None
    assert any("/etc/ascend-build/manifest.json" in p and "nested deeper than 64 levels" in p for p in data["problems"])


# --- the CLI: the run's environment, never the CLI's own (issue 26) ------------------------

CLI = str(Path(__import__("sys").executable).with_name("ascend-build"))
CLI_ONLY = ("pytest", "zizmor", "ruff", "mypy")  # in ascend-build's own venv, in no run's environment


def record_cli(*args, path_dirs=()):
    import os
    import subprocess
    env = dict(os.environ, PATH=os.pathsep.join([*map(str, path_dirs), "/nonexistent"]))
    return subprocess.run([CLI, "record", *map(str, args)], capture_output=True, text=True, env=env, timeout=300)


def test_record_measures_the_python3_on_path_not_the_cli_s_own_venv(tmp_path):
    """The job's interpreter here: the host Python with torch (ASCEND_BUILD_TORCH_PYTHON), put on PATH."""
    import os
    import subprocess
    torch_python = os.environ.get("ASCEND_BUILD_TORCH_PYTHON", "/work/main/.venv-torch/bin/python")
    if not Path(torch_python).is_file():
        pytest.skip("set ASCEND_BUILD_TORCH_PYTHON to a Python with torch")
    bin_dir = tmp_path / "job-bin"
    bin_dir.mkdir()
    write(bin_dir / "python3", f'#!/bin/sh\nexec {torch_python} "$@"\n', 0o755)  # a venv knows itself by its path
    torch = subprocess.run([torch_python, "-c", "import importlib.metadata as m; print(m.version('torch'))"],
                           capture_output=True, text=True).stdout.strip()
    node = make_node(tmp_path / "node", smi=SMI_910B3)
    done = record_cli(tmp_path / "ckpt", "--root", node, "--set", "seq_len=4096",
                      path_dirs=[bin_dir, "/usr/bin", "/bin"])  # npu-smi (a fake: a shell script) needs cat
    assert done.returncode == 0, done.stderr
    data = json.loads((tmp_path / "ckpt/ascend-build-record.json").read_text())
    assert data["torch_version"] == torch and data["distributions"]["torch"] == torch
    assert not set(CLI_ONLY) & set(data["distributions"]), sorted(data["distributions"])
    assert data["sources"]["torch_version"].startswith("importlib.metadata of ")
    assert (data["driver"], data["chip"], data["seq_len"]) == ("24.1.rc3", "910b", 4096)


def test_record_without_python3_on_path_or_with_a_missing_nested_folder_is_an_error(tmp_path):
    node = make_node(tmp_path / "node")
    none = record_cli(tmp_path / "ckpt", "--root", node)
    assert none.returncode == 1 and "no python3 on PATH" in none.stderr and "--image" in none.stderr
    nested = record_cli(tmp_path / "a/b/c", "--root", node, path_dirs=["/usr/bin"])
    assert nested.returncode == 1 and "does not exist" in nested.stderr and "Traceback" not in nested.stderr
    assert not (tmp_path / "a").exists()


@pytest.fixture(scope="module")
def python_image(engine, base_image, tmp_path_factory):
    """A real image with its own Python 3 (Debian's), a torch 2.4.0 distribution's metadata (no
    wheel: the record reads metadata) and an ascend-build manifest: the run's environment."""
    folder = tmp_path_factory.mktemp("python-image")
    write(folder / "torch-2.4.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: torch\nVersion: 2.4.0\n")
    write(folder / "manifest.json", json.dumps(MANIFEST))
    write(folder / "Dockerfile", f"FROM {base_image}\n"
          "RUN apt-get update && apt-get install -y --no-install-recommends python3 && rm -rf /var/lib/apt/lists/*\n"
          "COPY torch-2.4.0.dist-info /usr/lib/python3/dist-packages/torch-2.4.0.dist-info\n"
          "COPY manifest.json /etc/ascend-build/manifest.json\n"
          "ENV HCCL_CONNECT_TIMEOUT=1800\n")
    labels = {"io.ascend-build.cell": MANIFEST["cell"]}
    image = engine.build(folder, labels=labels, log_path=folder / "build.log")
    ref = f"ascend-build-test/record:{image.split(':')[-1][:12]}"
    engine.tag(image, ref)
    yield ref
    engine.untag(ref)


@pytest.mark.engine
def test_record_image_measures_inside_the_image_fake_npu(tmp_path, python_image):
    node = make_node(tmp_path / "node", smi=SMI_910B3)
    done = record_cli(tmp_path / "ckpt", "--image", python_image, "--root", node, "--set", "model=qwen2.5-27b")
    assert done.returncode == 0, done.stderr
    data = json.loads((tmp_path / "ckpt/ascend-build-record.json").read_text())
    assert data["torch_version"] == "2.4.0" and data["distributions"] == {"torch": "2.4.0"}
    assert not set(CLI_ONLY) & set(data["distributions"])
    assert data["python_version"].startswith("3.11.") and data["sources"]["python_version"].startswith(
        f"image {python_image}: /usr/bin/python3")
    assert data["image"]["ref"] == python_image and data["image"]["manifest"]["cell"] == MANIFEST["cell"]
    assert data["image"]["labels"] == {"io.ascend-build.cell": MANIFEST["cell"]}
    assert data["env"] == {"HCCL_CONNECT_TIMEOUT": "1800"}  # the image's ENV, not this shell's
    assert (data["driver"], data["chip"], data["model"]) == ("24.1.rc3", "910b", "qwen2.5-27b")


@pytest.mark.engine
def test_record_image_that_does_not_exist_writes_nothing(tmp_path, engine):
    done = record_cli(tmp_path / "ckpt", "--image", "ascend-build-test/record:absent", "--root", tmp_path)
    assert done.returncode == 1 and "image ascend-build-test/record:absent not found" in done.stderr
    assert not (tmp_path / "ckpt").exists()


def test_record_image_names_the_image_by_digest_as_well_as_tag(tmp_path):
    """`record --image` asks the engine for the image's id and registry digests (a tag can move
    after the run); the engine is stood in for, answering as Docker does for a pushed image."""
    from builder.engine import RunResult
    from builder.node import doctor

    ref = "127.0.0.1:5000/team/pytorch:cann8.0.rc3-910b-ubuntu22.04-py3.10-torch_npu2.4.0-aarch64"
    digest = "sha256:" + "d" * 64

    class Engine:
        def labels(self, image):
            return {"io.ascend-build.cell": MANIFEST["cell"]}

        def identity(self, image):
            return {"id": "sha256:" + "e" * 64,
                    "digests": ["team/pytorch@sha256:" + "0" * 64, f"127.0.0.1:5000/team/pytorch@{digest}"]}

        def run(self, image, command, timeout):
            return RunResult(0, doctor.MARK + json.dumps(rec.interpreter_facts()) + "\n", "", 0.1)

    node = make_node(tmp_path / "node", smi=SMI_910B3)
    path, data = rec.run_record(tmp_path / "ckpt", image=ref, engine=Engine(), root=node, run_npu_smi=False)
    assert data["image"]["ref"] == ref
    assert data["image"]["by_digest"] == f"127.0.0.1:5000/team/pytorch@{digest}"
    assert data["image"]["id"] == "sha256:" + "e" * 64 and len(data["image"]["digests"]) == 2
    assert f"image digest       127.0.0.1:5000/team/pytorch@{digest}" in rec.format_record(path, data)
