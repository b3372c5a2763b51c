"""Host-side tests of the in-image smoke program (builder/smoke/smoke.py).

Pure functions are tested by importing smoke.py from its path (no torch needed).
The end-to-end runs start smoke.py as a subprocess with an interpreter that has
torch, named by ASCEND_BUILD_TORCH_PYTHON; the full in-image runs live in the e2e
tests.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from builder import vocabulary

SMOKE = Path(__file__).resolve().parents[1] / "builder" / "smoke" / "smoke.py"


@pytest.fixture(scope="module")
def smoke():
    spec = importlib.util.spec_from_file_location("ascend_build_smoke_under_test", SMOKE)
    assert spec is not None and spec.loader is not None, SMOKE
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def torch_python():
    exe = os.environ.get("ASCEND_BUILD_TORCH_PYTHON")
    if not exe:
        pytest.skip(
            "set ASCEND_BUILD_TORCH_PYTHON to a Python with torch, e.g. "
            "`python3 -m venv /tmp/smoke-venv && /tmp/smoke-venv/bin/pip install torch==2.13.0` "
            "then ASCEND_BUILD_TORCH_PYTHON=/tmp/smoke-venv/bin/python"
        )
    probe = subprocess.run([exe, "-c", "import importlib.metadata as m, platform; "
                            "print(m.version('torch'), platform.python_version())"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.fail(f"ASCEND_BUILD_TORCH_PYTHON={exe} has no torch: {probe.stderr.strip()}")
    torch_version, py = probe.stdout.split()
    return {"exe": exe, "torch": torch_version.split("+")[0], "python": py}


def manifest(tmp_path, info, **over):
    m = {
        "schema": 1, "framework": "pytorch", "cell": "test-cpu", "variant": "cpu",
        "os": "debian12", "arch": "x86_64", "chip": None,
        "python_version": ".".join(info["python"].split(".")[:2]),
        "torch_version": info["torch"], "torch_npu_version": None, "cann_version": None,
        "min_driver": None, "min_firmware": None,
        "env": {"ASCEND_BUILD_SMOKE_TEST": "1"}, "content_hash": "0" * 64,
    }
    m.update(over)
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(m))
    return path


def run(exe, *args, env=None, timeout=300):
    full_env = dict(os.environ, ASCEND_BUILD_SMOKE_TEST="1")
    full_env.update(env or {})
    proc = subprocess.run([exe, str(SMOKE), *map(str, args)], capture_output=True, text=True,
                          env=full_env, timeout=timeout)
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, f"stdout must be one JSON line, got {proc.stdout!r}\nstderr: {proc.stderr}"
    return proc.returncode, json.loads(lines[0]), proc.stderr


def tiers(report):
    return {t["name"]: t for t in report["tiers"]}


# ---------------------------------------------------------------- end to end (torch)
def test_cpu_manifest_all_tiers_pass(tmp_path, torch_python):
    path = manifest(tmp_path, torch_python)
    code, report, err = run(torch_python["exe"], "--manifest", path, "--device", "cpu", "--steps", "10")
    assert code == 0, err
    assert set(report) == {"schema", "cell", "variant", "device", "passed", "tiers", "host",
                           "python", "started", "files_read"}
    assert report["schema"] == 1 and report["passed"] is True
    assert (report["cell"], report["variant"], report["device"]) == ("test-cpu", "cpu", "cpu")
    assert report["host"] == {"driver": None, "firmware": None}
    assert report["python"] == torch_python["python"]
    assert [t["name"] for t in report["tiers"]] == list(vocabulary.tier_names())  # every tier, in the registry's order
    for t in report["tiers"]:
        assert set(t) == {"name", "status", "seconds", "summary", "details"}
        assert t["status"] == "passed", t
        assert isinstance(t["seconds"], float) and "\n" not in t["summary"]
    train = tiers(report)["train"]["details"]
    assert len(train["losses"]) == 10 and train["logits_dtype"] == "torch.bfloat16"
    assert "GradScaler" in train["grad_scaler"]
    assert train["cpu_threads"] == 1 and train["cpu_threads_default"] >= 1
    assert train["cpus_usable"] >= 1 and train["cpu_capability"] and isinstance(train["cpu_bf16_onednn"], bool)
    assert tiers(report)["collective"]["details"]["backend"] == "gloo"


def test_the_report_names_the_files_the_import_and_train_tiers_read(tmp_path, torch_python):
    """The prefetch list of the lazily pullable variant: what the tiers up to the first training step
    read, dlopen-ed libraries included (torch's _C loads libtorch_cpu.so: no audit event names it)."""
    path = manifest(tmp_path, torch_python)
    code, report, err = run(torch_python["exe"], "--manifest", path, "--device", "cpu", "--steps", "3",
                            "--tiers", "versions,import,device,train")
    assert code == 0, err
    read = report["files_read"]
    assert list(read) == ["import", "device", "train"]  # versions is not recorded
    names = [os.path.basename(p) for p in read["import"]]
    assert "__init__.py" in names and any(n.startswith("libtorch_cpu.so") for n in names)
    assert any(n.startswith("_C.") and n.endswith(".so") for n in names)  # torch's extension module
    assert os.path.realpath(torch_python["exe"]) in read["import"]  # the interpreter, mapped before the tiers
    everything = [p for tier in read.values() for p in tier]
    assert len(everything) == len(set(everything)) and all(os.path.isabs(p) and os.path.isfile(p) for p in everything)
    # nothing of the pseudo file systems or scratch folders, but the Python environment's files
    # wherever it lives (a fresh clone's venv may be under /tmp)
    environment = os.path.join(os.path.realpath(os.path.dirname(os.path.dirname(torch_python["exe"]))), "")
    assert not any(p.startswith(("/proc/", "/sys/", "/dev/", "/tmp/")) and not p.startswith(environment)
                   for p in everything)


def test_wrong_torch_version_fails_naming_both(tmp_path, torch_python):
    path = manifest(tmp_path, torch_python, torch_version="9.9.9", env={"ASCEND_BUILD_SMOKE_X": "on"})
    code, report, _ = run(torch_python["exe"], "--manifest", path, "--tiers", "versions")
    assert code == 1 and report["passed"] is False
    v = tiers(report)["versions"]
    assert v["status"] == "failed"
    assert "9.9.9" in v["summary"] and torch_python["torch"] in v["summary"]
    assert v["details"]["env_differs"] == {"ASCEND_BUILD_SMOKE_X": {"expected": "on", "actual": None}}


def test_npu_manifest_on_host_without_torch_npu(tmp_path, torch_python):
    path = manifest(tmp_path, torch_python, cell="test-npu", variant="npu", chip="910b",
                    torch_npu_version=torch_python["torch"], cann_version="8.5.0",
                    min_driver="25.5.0", min_firmware="7.8.0.7.220")
    code, report, _ = run(torch_python["exe"], "--manifest", path,
                          env={"ASCEND_HOME_PATH": str(tmp_path / "no-cann")})
    assert code == 1 and report["device"] == "npu" and report["passed"] is False
    t = tiers(report)
    assert t["versions"]["status"] == "failed"
    assert "torch_npu missing" in t["versions"]["summary"]
    assert "CANN 8.5.0 declared but no CANN version file found" in t["versions"]["summary"]
    for looked in (str(tmp_path / "no-cann" / "version.cfg"),
                   "/usr/local/Ascend/ascend-toolkit/latest/version.cfg",
                   "/usr/local/Ascend/ascend-toolkit/latest/x86_64-linux/ascend_toolkit_install.info"):
        assert looked in t["versions"]["summary"]
    assert t["libraries"]["status"] == "failed" and "torch_npu is not installed" in t["libraries"]["summary"]
    assert t["import"]["status"] == "failed" and "torch_npu" in t["import"]["summary"]
    for name in ("device", "train", "collective"):
        assert t[name]["status"] == "skipped" and t[name]["summary"].startswith("skipped: import failed")


def test_train_detects_a_model_that_does_not_learn(tmp_path, torch_python):
    path = manifest(tmp_path, torch_python)
    code, report, _ = run(torch_python["exe"], "--manifest", path, "--tiers", "import,train",
                          "--steps", "3", "--lr", "0")
    assert code == 1
    train = tiers(report)["train"]
    assert train["status"] == "failed" and "loss did not decrease" in train["summary"]


class _Threads:
    """A torch stand-in with only what the train tier's thread handling uses."""

    def __init__(self, count):
        self.count, self.backends, self.ops = count, None, None

    def get_num_threads(self):
        return self.count

    def set_num_threads(self, count):
        self.count = count


@pytest.mark.parametrize("device, during", [("cpu", 1), ("npu", 4)])
@pytest.mark.parametrize("fails", [False, True])
def test_train_runs_with_one_cpu_thread_and_restores_torchs_count(smoke, monkeypatch, device, during, fails):
    torch, seen = _Threads(4), []

    def train(ctx, cpu):
        seen.append((torch.get_num_threads(), cpu.get("cpu_threads"), cpu.get("cpu_threads_default")))
        if fails:
            raise RuntimeError("a broken step")
        return smoke.passed("ok")

    monkeypatch.setattr(smoke, "train", train)
    ctx = smoke.Ctx(None, {"variant": device}, device)
    ctx.torch = torch
    if fails:
        with pytest.raises(RuntimeError):
            smoke.tier_train(ctx)
    else:
        assert smoke.tier_train(ctx).status == "passed"
    assert seen == [(during, 1, 4) if device == "cpu" else (during, None, None)]
    assert torch.get_num_threads() == 4


@pytest.mark.parametrize("files, cpus", [
    ({"cpu.max": "150000 100000\n"}, 1.5),
    ({"cpu.max": "max 100000\n"}, None),
    ({"cpu/cpu.cfs_quota_us": "200000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 2.0),
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
    ({}, None),
])
def test_cpu_quota_reads_cgroup_v2_and_v1(smoke, tmp_path, files, cpus):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert smoke.cpu_quota(str(tmp_path)) == cpus


def test_device_detects_wrong_results_mocked_device(tmp_path, torch_python):
    """No NPU here, so the broken device is a mock: every tensor moved `.to()` the device comes
    back off by 0.5 (a device that computes wrong). The device tier must fail on it, naming the
    difference, while the same run without the mock passes."""
    path = manifest(tmp_path, torch_python)
    broken = tmp_path / "broken_device.py"
    broken.write_text(
        "import runpy, sys, torch\n"
        "to = torch.Tensor.to\n"
        "torch.Tensor.to = lambda self, *a, **k: to(self, *a, **k) + 0.5\n"
        f"sys.argv = [{str(SMOKE)!r}] + sys.argv[1:]\n"
        f"runpy.run_path({str(SMOKE)!r}, run_name='__main__')\n")
    proc = subprocess.run([torch_python["exe"], str(broken), "--manifest", str(path), "--tiers", "import,device"],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, ASCEND_BUILD_SMOKE_TEST="1"))
    device = tiers(json.loads(proc.stdout.splitlines()[-1]))["device"]
    assert proc.returncode == 1 and device["status"] == "failed", device
    assert "256x256 fp32 matmul on cpu differs from CPU" in device["summary"]
    code, report, _ = run(torch_python["exe"], "--manifest", path, "--tiers", "import,device")
    assert code == 0 and tiers(report)["device"]["status"] == "passed"


# ---------------------------------------------------------------- usage (no torch needed)
@pytest.mark.parametrize("args", [["--tiers", "versions,bogus"], ["--device", "gpu"], ["--steps", "1"]])
def test_bad_usage_exits_2(tmp_path, args):
    path = manifest(tmp_path, {"python": "3.11.7", "torch": "2.13.0"})
    code, report, err = run(sys.executable, "--manifest", path, *args)
    assert code == 2 and report["passed"] is False and report["error"]
    assert "usage" in err


def test_missing_manifest_exits_2(tmp_path):
    code, report, _ = run(sys.executable, "--manifest", tmp_path / "nope.json")
    assert code == 2 and "nope.json" in report["error"]


def test_runs_on_oldest_supported_python(tmp_path):
    """The image Python may be 3.8: the file must parse and its torch-free tiers run there."""
    ast.parse(SMOKE.read_text(), feature_version=(3, 8))
    candidates = [str(p) for p in sorted(Path.home().glob(".pyenv/versions/3.8*/bin/python3.8"))]
    candidates += [found for found in [shutil.which("python3.8")] if found]
    exe = next((c for c in candidates if subprocess.run([c, "-c", "pass"], capture_output=True).returncode == 0),
               None)
    if not exe:
        pytest.skip("no working python3.8 on this host")
    path = manifest(tmp_path, {"python": "3.8", "torch": "2.13.0"})
    code, report, err = run(exe, "--manifest", path, "--tiers", "versions,libraries")
    assert code == 1, err  # no torch there: both tiers fail, cleanly
    assert "torch not installed" in tiers(report)["versions"]["summary"]
    assert "versions.py from" in tiers(report)["versions"]["details"]["versions_module"]


# ---------------------------------------------------------------- pure functions
VERSION_CFG = """# version: 1.0
runtime_running_version=[7.6.0.1.220:8.0.0]
toolkit_running_version=[7.6.0.1.220:8.0.0]
toolkit_upgrade_version=[7.6.0.1.220:8.0.0]
"""
INSTALL_INFO = "package_name=Ascend-cann-toolkit\nversion=8.5.0\narch=x86_64\nos=linux\n"
DRIVER_INFO = """Version=24.1.rc3
ascendhal_version=7.35.23
compatible_version_fw=[7.0.0,7.5.99]
package_version=24.1.rc3
"""
FIRMWARE_INFO = """Version=7.5.0.1.129
package_version=24.1.rc3
compatible_version_drv=[23.0.0,23.0.0.],[24.1,24.1.]
"""
LDD = """\tlinux-vdso.so.1 (0x00007ffd5b7f2000)
\tlibc10.so => /opt/venv/lib/python3.11/site-packages/torch/lib/libc10.so (0x00007f0a1c000000)
\tlibascendcl.so => not found
\tlibhccl.so => not found
\tlibascend_hal.so => not found
\tlibdcmi.so => /usr/local/Ascend/driver/lib64/driver/libdcmi.so (0x00007f0a1b000000)
\t/lib64/ld-linux-x86-64.so.2 (0x00007f0a1d000000)
"""


def test_version_files(smoke):
    assert smoke.parsers.cann_version_from_cfg(VERSION_CFG) == "8.0.0"
    assert smoke.parsers.cann_version_from_cfg("runtime_running_version=[7.1.0.3.220:7.0.0]\n") == "7.0.0"
    assert smoke.parsers.cann_version_from_cfg("toolkit_running_version=[]\n") is None
    assert smoke.parsers.cann_version_from_install_info(INSTALL_INFO) == "8.5.0"
    assert smoke.parsers.info_version(DRIVER_INFO) == "24.1.rc3"
    assert smoke.parsers.info_version(FIRMWARE_INFO) == "7.5.0.1.129"
    assert smoke.parsers.info_version("nothing here\n") is None


def test_find_cann_reads_both_eras(smoke, tmp_path):
    home = tmp_path / "latest"
    (home / "aarch64-linux").mkdir(parents=True)
    (home / "version.cfg").write_text(VERSION_CFG)
    (home / "aarch64-linux" / "ascend_toolkit_install.info").write_text("version=8.0.0\n")
    found, looked = smoke.parsers.find_cann({"ASCEND_HOME_PATH": str(home)}, {"cann_version": "8.0.0"}, "aarch64")
    assert [f["version"] for f in found] == ["8.0.0", "8.0.0"]
    assert looked[:2] == [str(home / "version.cfg"), str(home / "aarch64-linux/ascend_toolkit_install.info")]
    assert "/usr/local/Ascend/cann-8.0.0/version.cfg" in looked


def test_cann_equality_follows_ascend_rules(smoke):
    mod, note = smoke.versions_module()
    assert mod is not None, note
    assert smoke.same_version("cann", "8.0.RC2.beta1", "8.0.RC2")
    assert not smoke.same_version("cann", "8.0.RC3", "8.0.RC2")
    assert smoke.at_least("hdk", "24.1.rc3", "23.0.RC3") is True


def test_parse_ldd_and_driver_libs(smoke):
    missing, resolved = smoke.parsers.parse_ldd(LDD)
    assert missing == ["libascendcl.so", "libhccl.so", "libascend_hal.so"]
    assert resolved["libdcmi.so"].startswith("/usr/local/Ascend/driver/")
    needed = {lib: ["libtorch_npu.so"] for lib in missing}
    fatal, host, optional = smoke.classify_missing(needed, driver_mount=False)
    assert sorted(fatal) == ["libascendcl.so", "libhccl.so"] and list(host) == ["libascend_hal.so"]
    fatal, host, optional = smoke.classify_missing(needed, driver_mount=True)
    assert "libascend_hal.so" in fatal and not host and not optional


def test_a_library_only_plugins_need_is_optional(smoke):
    """libatb.so (NNAL) is needed by libop_plugin_atb.so alone: import works without it."""
    needed = {"libatb.so": ["libop_plugin_atb.so"], "libhccl.so": ["libop_plugin_atb.so", "libtorch_npu.so"]}
    fatal, host, optional = smoke.classify_missing(needed, driver_mount=False)
    assert list(optional) == ["libatb.so"] and list(fatal) == ["libhccl.so"] and not host
    # an image that declares NNAL promises it: then it must resolve
    fatal, host, optional = smoke.classify_missing(needed, driver_mount=False, required=("libatb.so",))
    assert list(fatal) == ["libatb.so", "libhccl.so"] and not optional


def test_host_driver_and_firmware_minimums(smoke):
    m = {"min_driver": "25.5.0", "min_firmware": "7.8.0.7.220"}
    problems, _ = smoke.check_host("24.1.rc3", "7.5.0.1.129", m, "npu")
    assert any("24.1.rc3" in p and "25.5.0" in p for p in problems)
    assert any("7.5.0.1.129" in p and "7.8.0.7.220" in p for p in problems)
    assert smoke.check_host("25.5.0", "7.8.0.7.220", m, "npu")[0] == []
    problems, notes = smoke.check_host(None, None, m, "cpu")
    assert problems == [] and len(notes) == 2
    problems, _ = smoke.check_host(None, None, m, "npu")
    assert problems == ["host driver version unknown: mount -v /usr/local/Ascend/driver/version.info:"
                        "/usr/local/Ascend/driver/version.info"]


def test_matching_helpers(smoke):
    assert smoke.python_matches("3.11", "3.11.7") and smoke.python_matches("3.11.7", "3.11.7")
    assert not smoke.python_matches("3.1", "3.11.7")
    assert smoke.dist_matches("2.13.0", "2.13.0+cpu") and not smoke.dist_matches("2.13.0", "2.13.0.post1")
    assert smoke.env_differences({"A": "1", "B": "2"}, {"A": "1", "B": "3"}) == {
        "B": {"expected": "2", "actual": "3"}}


@pytest.mark.parametrize("text, entry", [
    ("OSError: libascend_hal.so: cannot open shared object file", "driver-libs-not-mounted"),
    ("ImportError: libhccl.so: cannot open shared object file", "cann-env-not-set"),
    ("RuntimeError: Failed to infer device type", "cann-env-not-set"),
    ("undefined symbol: _ZN3atb15CreateOperationERKNS_5infer", "torch-npu-cann-mismatch"),
    ("libtbe_adapter.so: undefined symbol: _ZN2ge", "torch-npu-cann-mismatch"),
    ("dcmi module initialize failed. ret is -8005", "dcmi-init-failed"),
    ("rtGetDeviceCount execute failed, reason=[driver error:no valid device]", "no-valid-device"),
])
def test_diagnose_known_errors_with_the_explain_table(smoke, text, entry):
    """The smoke program and `ascend-build explain` answer from one table."""
    from builder.node import explain

    hint = smoke.diagnose(text, {"cann_version": "8.5.0", "torch_npu_version": "2.8.0.post2"})
    assert hint.startswith(entry + ": ")
    assert explain.explain(text)[0].id == entry
    assert "{" not in hint  # every placeholder filled (known values or "unknown")
    assert smoke.diagnose("ZeroDivisionError: division by zero") is None


# ---------------------------------------------------------------- the closure against the lock
def test_closure_problems_name_the_package_the_locked_and_the_installed_version(smoke):
    locked = {"numpy": "1.26.4", "torch": "2.1.0+cpu", "torch-npu": "2.1.0rc1", "pip": "24.0"}
    installed = {"numpy": "2.0.2", "torch": "2.1.0+cpu", "torch-npu": "2.1.0.rc1", "wheel": "0.45.0"}
    assert smoke.closure_problems(locked, installed) == [
        "numpy 2.0.2 installed, 1.26.4 locked", "pip 24.0 locked, not installed", "wheel 0.45.0 installed, not in the lock"]
    assert smoke.closure_problems(locked, dict(locked)) == []


def test_closure_of_a_real_environment(torch_python, tmp_path):
    """The torch venv of this test run as the image: its own distributions are the lock."""
    exe = torch_python["exe"]
    listed = subprocess.run([exe, "-c", "import json, sys; sys.path.insert(0, %r); import parsers; "
                             "print(json.dumps(parsers.environment_distributions(sys.prefix)))" % str(SMOKE.parent)],
                            capture_output=True, text=True, check=True)
    dists = json.loads(listed.stdout)
    assert "torch" in dists and dists["torch"].startswith(torch_python["torch"])
    good = manifest(tmp_path, torch_python, lock={"state": "ok", "distributions": dists})
    code, report, err = run(exe, "--manifest", good, "--tiers", "versions")
    assert code == 0, err
    assert "%d distributions as locked, pip check clean" % len(dists) in tiers(report)["versions"]["summary"]
    wrong = dict(dists, torch="1.0.0", **{"einops": "0.8.0"})
    bad = manifest(tmp_path, torch_python, lock={"state": "ok", "distributions": wrong})
    code, report, _ = run(exe, "--manifest", bad, "--tiers", "versions")
    summary = tiers(report)["versions"]["summary"]
    assert code == 1 and "the environment differs from the lock" in summary
    assert "torch %s installed, 1.0.0 locked" % dists["torch"] in summary and "einops 0.8.0 locked, not installed" in summary


def test_the_versions_tier_checks_the_conda_packages_the_lock_pins(torch_python, tmp_path):
    """A conda cell's manifest carries its lock's conda part; this venv has no conda-meta, so the
    tier names the locked conda package missing (conda_packages over a real conda prefix:
    tests/images/test_conda_lock.py)."""
    exe = torch_python["exe"]
    listed = subprocess.run([exe, "-c", "import json, sys; sys.path.insert(0, %r); import parsers; "
                             "print(json.dumps(parsers.environment_distributions(sys.prefix)))" % str(SMOKE.parent)],
                            capture_output=True, text=True, check=True)
    lock = {"state": "ok", "distributions": json.loads(listed.stdout), "conda": {"python": "3.11.7 h955ad1f_0_cpython"}}
    code, report, _ = run(exe, "--manifest", manifest(tmp_path, torch_python, lock=lock), "--tiers", "versions")
    summary = tiers(report)["versions"]["summary"]
    assert code == 1 and "the conda environment differs from the lock: conda python 3.11.7 h955ad1f_0_cpython locked, " \
                         "not installed" in summary
    assert tiers(report)["versions"]["details"]["conda_packages"] == {}


def test_without_a_lock_the_closure_is_not_claimed(torch_python, tmp_path):
    path = manifest(tmp_path, torch_python, lock={"state": "missing", "distributions": {}})
    code, report, err = run(torch_python["exe"], "--manifest", path, "--tiers", "versions")
    assert code == 0, err
    assert "no lock (missing): the closure was resolved at build time" in tiers(report)["versions"]["summary"]


def test_debians_fake_pkg_resources_record_is_no_closure_difference(smoke):
    locked = {"pip": "24.0"}
    assert smoke.closure_problems(locked, {"pip": "24.0", "pkg-resources": "0.0.0"}) == []
    # at another version it is a real distribution, and it is reported
    assert smoke.closure_problems(locked, {"pip": "24.0", "pkg-resources": "1.0"}) == [
        "pkg-resources 1.0 installed, not in the lock"]


# --- the ENV against what CANN's own set_env.sh sets (run with real bash) -----------------------

SET_ENV = r"""
# shaped like CANN's bin/setenv.bash: some entries only when their folder exists
export ASCEND_TOOLKIT_HOME={home}
export LD_LIBRARY_PATH=${{ASCEND_TOOLKIT_HOME}}/lib64:${{LD_LIBRARY_PATH}}
aml=${{ASCEND_TOOLKIT_HOME}}/tools/aml/lib64
if [ -d "$aml" ]; then
    case ":$LD_LIBRARY_PATH:" in *":$aml:"*) ;; *) export LD_LIBRARY_PATH=$aml:$aml/plugin:$LD_LIBRARY_PATH ;; esac
fi
export ASCEND_OPP_PATH=${{ASCEND_TOOLKIT_HOME}}/opp
"""


def _toolkit(tmp_path, with_aml):
    home = tmp_path / "latest"
    (home / "lib64").mkdir(parents=True)
    if with_aml:
        (home / "tools/aml/lib64").mkdir(parents=True)
    (home / "set_env.sh").write_text(SET_ENV.format(home=home))
    return home


def test_set_env_sh_agrees_with_an_env_that_already_holds_it(smoke, tmp_path):
    home = _toolkit(tmp_path, with_aml=False)
    environ = {"ASCEND_TOOLKIT_HOME": str(home), "LD_LIBRARY_PATH": f"{home}/lib64:/usr/lib",
               "ASCEND_OPP_PATH": f"{home}/opp", "PATH": "/usr/bin:/bin"}
    assert smoke.set_env_script(environ) == str(home / "set_env.sh")
    assert smoke.set_env_differences(str(home / "set_env.sh"), environ) == {}


def test_set_env_sh_names_each_variable_the_env_lacks(smoke, tmp_path):
    home = _toolkit(tmp_path, with_aml=True)  # this toolkit has tools/aml: set_env.sh adds it
    environ = {"ASCEND_TOOLKIT_HOME": str(home), "LD_LIBRARY_PATH": f"{home}/lib64", "PATH": "/usr/bin:/bin"}
    assert smoke.set_env_differences(str(home / "set_env.sh"), environ) == {
        "LD_LIBRARY_PATH": f"lacks {home}/tools/aml/lib64:{home}/tools/aml/lib64/plugin (set_env.sh adds it)",
        "ASCEND_OPP_PATH": f"unset; set_env.sh sets {home}/opp",
    }
    environ["ASCEND_OPP_PATH"] = "/elsewhere"
    assert smoke.set_env_differences(str(home / "set_env.sh"), environ)["ASCEND_OPP_PATH"] == \
        f"is /elsewhere; set_env.sh sets {home}/opp"


# ---------------------------------------------------------------- deadlines: a tier that hangs for real
HANG_HOOK = "ASCEND_BUILD_SMOKE_TEST_HANG"  # smoke.HANG_HOOK: the test-only hook
ALL_TIERS = list(vocabulary.tier_names())
# What a hung tier may take past its deadline: faulthandler's dump (read once it stops
# growing) and SIGTERM to its process group; measured about 0.4 s here.
MARGIN = 8.0


def _running(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (dead, not yet reaped) does not."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _survivors(pids, wait=5.0):
    """The ``pids`` still running after up to ``wait`` s (their new parent reaps them)."""
    deadline = time.monotonic() + wait
    while any(_running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [p for p in pids if _running(p)]


@pytest.mark.parametrize("tier, where", [
    ("collective", "the main thread blocked in C holding the GIL, the workers waiting for their port"),
    ("train", "a training step that sleeps"),
])
def test_a_hung_tier_fails_at_its_deadline_naming_where_it_hung(tmp_path, torch_python, tier, where):
    """The tier really hangs (HANG_HOOK); its deadline (20 s here) fails it with the stack of the
    hung thread, the workers are stopped, and the report keeps every tier before it. The deadline
    counts the tier's imports too: with 5 s, a run at load 16 on 2 cores was stopped while still
    importing torch, before it reached the hang."""
    path = manifest(tmp_path, torch_python)
    deadline = 20
    start = time.monotonic()
    code, report, err = run(torch_python["exe"], "--manifest", path, "--device", "cpu", "--steps", "5",
                            "--tier-seconds", f"{tier}={deadline}", env={HANG_HOOK: tier}, timeout=240)
    wall = time.monotonic() - start
    assert code == 1 and report["passed"] is False, err
    assert [t["name"] for t in report["tiers"]] == ALL_TIERS
    t = tiers(report)
    before = ALL_TIERS[:ALL_TIERS.index(tier)]
    for name in before:  # the tiers before it are in the report, as they ran
        assert t[name]["status"] == "passed", t[name]
    hung = t[tier]
    print(f"{tier} ({where}): failed after {hung['seconds']} s, deadline {deadline} s, whole run {wall:.1f} s")
    assert hung["status"] == "failed"
    assert hung["summary"].startswith(f"{tier} did not finish within {deadline} s (its deadline): hung in "
                                      f"hang_for_tests (smoke.py line ")
    assert f"<- tier_{tier} (smoke.py line " in hung["summary"] and "\n" not in hung["summary"]
    assert deadline <= hung["seconds"] <= deadline + MARGIN
    assert wall <= sum(t[name]["seconds"] for name in before) + deadline + MARGIN + 15  # + interpreter start
    # the stack of the hung thread, from faulthandler
    details = hung["details"]
    assert details["deadline_seconds"] == deadline
    assert details["hung_in"][0].startswith("hang_for_tests ")
    assert any(frame.startswith(f"tier_{tier} ") for frame in details["hung_in"][1:3]), details["hung_in"]
    assert f"in tier_{tier}" in details["stacks"] and "in run_tier" in details["stacks"]
    assert details["tier_process"] in ("killed by signal 15 (SIGTERM)", "killed by signal 9 (SIGKILL)")
    for name in ALL_TIERS[ALL_TIERS.index(tier) + 1:]:
        assert t[name]["status"] == "skipped" and t[name]["summary"] == f"skipped: not run, the {tier} tier did not finish"
    # the two all-reduce workers were started, and none survives
    workers = details["workers"]
    assert len(workers["pids"]) == 2 and workers["still_running"] == []
    assert _survivors(workers["pids"]) == []
    assert "hanging on purpose" in err and f"in tier_{tier}" in err  # the stacks in the log too


def test_a_tier_process_that_crashes_fails_its_tier_with_the_crash_stack(tmp_path, torch_python):
    """A segmentation fault in the train tier (a real one: a read of address 0): the tier fails
    naming the signal and faulthandler's stack, the tiers before it stand, no worker survives."""
    path = manifest(tmp_path, torch_python)
    crash = tmp_path / "crashing_train.py"
    crash.write_text(
        "import ctypes, runpy, sys, torch\n"
        "torch.nn.functional.cross_entropy = lambda *a, **k: ctypes.string_at(0)\n"
        f"sys.argv = [{str(SMOKE)!r}] + sys.argv[1:]\n"
        f"runpy.run_path({str(SMOKE)!r}, run_name='__main__')\n")
    proc = subprocess.run([torch_python["exe"], str(crash), "--manifest", str(path), "--device", "cpu", "--steps", "5"],
                          capture_output=True, text=True, timeout=240, env=dict(os.environ, ASCEND_BUILD_SMOKE_TEST="1"))
    assert len(proc.stdout.splitlines()) == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and report["passed"] is False
    t = tiers(report)
    train_at = ALL_TIERS.index("train")
    assert [t[n]["status"] for n in ALL_TIERS] == ["passed"] * train_at + ["failed"] + ["skipped"] * (len(ALL_TIERS) - train_at - 1)
    train = t["train"]
    assert train["summary"].startswith("train ended with its tier process, killed by signal 11 (SIGSEGV): hung in ")
    assert "Segmentation fault" in train["details"]["stacks"] and "in train" in train["details"]["stacks"]
    assert _survivors(train["details"]["workers"]["pids"]) == []


def test_sigterm_stops_the_tier_process_and_still_prints_a_report(tmp_path, torch_python):
    """`docker stop` sends SIGTERM: the program stops its tier process and workers, and says so."""
    path = manifest(tmp_path, torch_python)
    proc = subprocess.Popen([torch_python["exe"], str(SMOKE), "--manifest", str(path), "--device", "cpu",
                             "--tiers", "versions,collective"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, ASCEND_BUILD_SMOKE_TEST="1", **{HANG_HOOK: "collective"}))
    assert proc.stderr is not None  # piped
    try:
        deadline = time.monotonic() + 120
        seen = ""
        while "hanging on purpose" not in seen:  # stderr line by line until the tier hangs
            assert time.monotonic() < deadline and proc.poll() is None, seen
            seen += proc.stderr.readline()
        proc.send_signal(15)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    report = json.loads(out)
    assert proc.returncode == 1 and report["error"] == "stopped by signal 15"
    assert tiers(report)["versions"]["status"] == "passed"
    [pids] = re.findall(r"the all-reduce workers wait for their port: pids (\d+) (\d+)", seen)
    assert _survivors([int(p) for p in pids]) == []


@pytest.mark.parametrize("args", [["--timeout-scale", "0"], ["--tier-seconds", "train"], ["--tier-seconds", "bogus=3"],
                                  ["--tier-seconds", "train=-1"]])
def test_bad_deadlines_exit_2(tmp_path, args):
    path = manifest(tmp_path, {"python": "3.11.7", "torch": "2.13.0"})
    code, report, err = run(sys.executable, "--manifest", path, *args)
    assert code == 2 and report["passed"] is False and report["error"]


def test_hung_frames_finds_the_thread_that_ran_the_tiers(smoke):
    dump = ('Thread 0x00007f01 (most recent call first):\n'
            '  File "/usr/lib/python3.11/threading.py", line 320 in wait\n'
            'Current thread 0x00007f02 (most recent call first):\n'
            '  File "/opt/ascend-build/smoke.py", line 12 in probe\n'
            '  File "/opt/ascend-build/smoke.py", line 34 in tier_import\n'
            '  File "/opt/ascend-build/smoke.py", line 56 in run_tier\n')
    assert smoke.hung_frames(dump) == ["probe (smoke.py line 12)", "tier_import (smoke.py line 34)",
                                       "run_tier (smoke.py line 56)"]
    assert smoke.hung_frames("Fatal Python error: Segmentation fault\n") == []
