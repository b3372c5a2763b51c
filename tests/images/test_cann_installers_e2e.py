"""CANN installers as shipped, through the real engine, from synthetic installers of exactly
their shape.

No CANN installer can be downloaded here, so each test makes one: a tiny shell `.run` that
takes the real options (--quiet --install --install-for-all) and lays down a toolkit tree
with a real `<arch>-linux/ascend_toolkit_install.info` and a `set_env.sh` shaped like
CANN's (entries added only when their folder exists). The layouts:

- a plain `.run` (what the install guides fetch from the release folder);
- a signed bundle: `.zip` holding the payload `X.run`, `X.run.cms` and a `.crl`;
- a signed bundle whose payload is itself a zip holding `X.run`.

The rendered Dockerfile of a `cann_source: {local: DIR}` cell is built without its Python
steps (other tests' business): its CANN steps and ENV, with the smoke program copied in, so the versions tier's set_env.sh check runs against what the synthetic
toolkit really sets. A wrong sha256, a bundle without its payload and one without its
signature each fail the build before any installer runs, naming the file.
"""

from __future__ import annotations

import json
import re
import uuid
import zipfile
from dataclasses import replace
from hashlib import sha256
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from builder.images import lock, matrix, render, stage
from builder.engine import BuildFailed
from tests.support.cann import RAN, installers_91, synthetic_nnal, synthetic_run
from tests.support.matrix import write_cells

BASE = "local/debian:12"
CA = Path("/etc/ssl/certs/ca-certificates.crt")
TOOLKIT_91, OPS_91 = "Ascend-cann-toolkit_9.1.0_linux-x86_64.run", "Ascend-cann-910b-ops_9.1.0_linux-x86_64.run"
NNAL_91 = "Ascend-cann-nnal_9.1.0_linux-x86_64.run"
TOOLKIT_80, KERNELS_80 = "Ascend-cann-toolkit_8.0.RC3_linux-x86_64", "Ascend-cann-kernels-910b_8.0.RC3_linux-x86_64"


def bundle(path: Path, payload_name: str, payload: bytes, *, cms: bool = True, crl: bool = True,
           include_payload: bool = True) -> bytes:
    """A signed CANN bundle: payload + payload.cms + a .crl (the signature is not checkable here)."""
    with zipfile.ZipFile(path, "w") as z:
        if include_payload:
            z.writestr(payload_name, payload)
        if cms:
            z.writestr(payload_name + ".cms", b"synthetic CMS signature")
        if crl:
            z.writestr("ascendsign.crl", b"synthetic revocation list")
    return path.read_bytes()


def nested(run_name: str, run: bytes) -> bytes:
    """A zip holding one .run (the payload of a bundle whose payload is a zip)."""
    import io
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr(run_name, run)
    return buffer.getvalue()


# The numbered steps of the Dockerfile a CANN test builds without: the Python environment and
# everything after the chip's package (other tests' business).
PYTHON_STEPS = re.compile(r"# \d+\. (Python |The locked |NOT VERIFIED|torch_npu|Defaults |The smoke )")


def without_python(text: str) -> str:
    """The Dockerfile with its Python steps left out: OS, CANN's stages, toolkit, ENV, chip package."""
    steps = re.split(r"\n(?=# \d+\. )", text)
    return "\n".join(step for step in steps if not PYTHON_STEPS.match(step)).rstrip("\n") + "\n\n"


def build_cann_step(engine, tmp_path: Path, cell_keys: Dict, installers: Path, sha: Dict[str, str]) -> str:
    """Render the cell, build its Dockerfile's CANN steps and ENV (not its Python steps) plus the smoke files."""
    path, _ = write_cells(tmp_path, dict(cell_keys, cann_source={"local": str(installers)}, sha256=sha))
    cell = replace(matrix.load(path).cells[0], base_image=BASE)
    files = render.render_cell(cell)
    files["Dockerfile.cut"] = (without_python(files["Dockerfile"].decode()) + "COPY smoke.py parsers.py versions.py "
                               "vocabulary.py error_table.py errors.json /opt/ascend-build/\n").encode()
    context = stage.context(files, tmp_path / f"ctx-{uuid.uuid4().hex[:6]}", None, installers)
    with stage.secrets(cell, CA if CA.is_file() else None) as secrets:
        return engine.build(context, "Dockerfile.cut", secrets=secrets, log_path=tmp_path / "build.log")


def set_env_check(engine, image: str, script: str = "", before: str = "") -> Dict:
    """[script, what sourcing it still changes]: the toolkit's set_env.sh unless ``script``;
    ``before`` runs in the container's shell first."""
    program = ("import json, os, sys; sys.path.insert(0, '/opt/ascend-build'); import smoke; "
               f"s = {script!r} or smoke.set_env_script(os.environ); "
               "print(json.dumps([s, smoke.set_env_differences(s, dict(os.environ))]))")
    command = f'{before} python3 -c "$0"' if before else 'python3 -c "$0"'
    return json.loads(engine.run(image, ["bash", "-c", command, program], timeout=120).stdout)


CELL_91 = {"name": "synthetic-91", "os": "debian12", "env": "venv", "arch": "x86_64", "chip": "910b",
           "cann": "9.1.0", "python": "3.11", "torch_npu": "2.13.0"}
CELL_80 = {"name": "synthetic-80", "os": "debian12", "env": "venv", "arch": "x86_64", "chip": "910b",
           "cann": "8.0.RC3", "python": "3.11", "torch_npu": "2.4.0"}


@pytest.fixture
def built(engine, base_image):
    images: List[str] = []
    yield images
    for image in images:
        engine.remove(image, force=True)


@pytest.mark.engine
def test_plain_run_files_install_and_the_env_matches_set_env_sh(engine, built, tmp_path):
    home, folder = "/usr/local/Ascend/cann-9.1.0", tmp_path / "installers"
    image = build_cann_step(engine, tmp_path, CELL_91, folder, installers_91(folder, OPS_91, fresh=True))
    built.append(image)
    log = (tmp_path / "build.log").read_text()
    assert f"{RAN} {TOOLKIT_91}" in log and f"{RAN} {OPS_91}" in log
    info = engine.run(image, ["cat", f"{home}/x86_64-linux/ascend_toolkit_install.info"], timeout=60).stdout
    assert "version=9.1.0" in info
    assert set_env_check(engine, image) == [f"{home}/set_env.sh", {}]  # the ENV holds all set_env.sh sets


@pytest.mark.engine
def test_a_variable_set_env_sh_sets_and_the_env_lacks_is_named(engine, built, tmp_path):
    """CANN 9.0+ set_env.sh also sets CMAKE_PREFIX_PATH (the real-hosts issue): an ENV without
    it is caught by the versions tier's check, naming the variable and the value."""
    home = "/usr/local/Ascend/cann-9.1.0"
    folder = tmp_path / "installers"
    folder.mkdir()
    extra = "export CMAKE_PREFIX_PATH=${ASCEND_TOOLKIT_HOME}/lib64/cmake"
    runs = {TOOLKIT_91: synthetic_run(TOOLKIT_91, home, "9.1.0", extra), OPS_91: synthetic_run(OPS_91, home, "9.1.0")}
    for name, data in runs.items():
        (folder / name).write_bytes(data)
    image = build_cann_step(engine, tmp_path, CELL_91, folder, {n: sha256(d).hexdigest() for n, d in runs.items()})
    built.append(image)
    assert set_env_check(engine, image)[1] == {"CMAKE_PREFIX_PATH": f"unset; set_env.sh sets {home}/lib64/cmake"}


def _bundles(folder: Path, home: str, *, kernels: Optional[Dict] = None) -> Dict[str, str]:
    """The 8.0.RC3 toolkit as a bundle with a .run payload, the kernels as a bundle whose
    payload is a zip holding the .run (``kernels`` overrides that bundle's shape)."""
    toolkit_run = synthetic_run(TOOLKIT_80 + ".run", home, "8.0.RC3")
    kernels_run = synthetic_run(KERNELS_80 + ".run", home, "8.0.RC3")
    made = {
        TOOLKIT_80 + ".zip": bundle(folder / (TOOLKIT_80 + ".zip"), TOOLKIT_80 + ".run", toolkit_run),
        KERNELS_80 + ".zip": bundle(folder / (KERNELS_80 + ".zip"), KERNELS_80 + ".payload.zip",
                                    nested(KERNELS_80 + ".run", kernels_run), **(kernels or {})),
    }
    return {name: sha256(data).hexdigest() for name, data in made.items()}


@pytest.mark.engine
def test_signed_bundles_with_run_and_zip_payloads_install(engine, built, tmp_path):
    home = "/usr/local/Ascend/ascend-toolkit/latest"
    folder = tmp_path / "installers"
    folder.mkdir()
    image = build_cann_step(engine, tmp_path, CELL_80, folder, _bundles(folder, home))
    built.append(image)
    log = (tmp_path / "build.log").read_text()
    assert f"{RAN} {TOOLKIT_80}.run" in log and f"{RAN} {KERNELS_80}.run" in log
    assert "version=8.0.RC3" in engine.run(image, ["cat", f"{home}/x86_64-linux/ascend_toolkit_install.info"],
                                           timeout=60).stdout
    # set_env.sh of an 8.x toolkit lives in latest/ here; the ENV holds all of it
    assert set_env_check(engine, image) == [f"{home}/set_env.sh", {}]


@pytest.mark.engine
@pytest.mark.parametrize("case, shape, message", [
    ("wrong sha256", None, f"/cann/{KERNELS_80}.zip: FAILED"),
    ("no payload", {"include_payload": False},
     f"{KERNELS_80}.zip: its payload {KERNELS_80}.payload.zip (named by {KERNELS_80}.payload.zip.cms) is missing"),
    ("no signature", {"cms": False}, f"{KERNELS_80}.zip: no .cms signature beside the payload: not a signed CANN bundle"),
    ("no revocation list", {"crl": False}, f"{KERNELS_80}.zip: no .crl revocation list beside the payload"),
])
def test_a_bad_installer_fails_before_any_installer_runs(engine, tmp_path, case, shape, message):
    home = "/usr/local/Ascend/ascend-toolkit/latest"
    folder = tmp_path / "installers"
    folder.mkdir()
    sha = _bundles(folder, home, kernels=shape)
    if case == "wrong sha256":
        sha[KERNELS_80 + ".zip"] = "0" * 64
    with pytest.raises(BuildFailed):
        build_cann_step(engine, tmp_path, CELL_80, folder, sha)
    log = (tmp_path / "build.log").read_text()
    assert message in log, log[-3000:]
    assert RAN not in log  # the toolkit was fine, and still nothing ran


@pytest.mark.engine
def test_two_chips_of_one_cann_differ_only_in_the_chip_layer(engine, built, tmp_path):
    """The toolkit installs in a layer of its own from its own file: the 910b and A3 images of
    one cell share it (and everything below), and differ only where the chip's package installs."""
    home = "/usr/local/Ascend/cann-9.1.0"
    layers = {}
    for chip, ops in (("910b", OPS_91), ("a3", "Ascend-cann-A3-ops_9.1.0_linux-x86_64.run")):
        work = tmp_path / chip
        folder = work / "installers"
        folder.mkdir(parents=True)
        runs = {TOOLKIT_91: synthetic_run(TOOLKIT_91, home, "9.1.0"), ops: synthetic_run(ops, home, "9.1.0")}
        for name, data in runs.items():
            (folder / name).write_bytes(data)
        image = build_cann_step(engine, work, dict(CELL_91, chip=chip, name=f"synthetic-91-{chip}"), folder,
                                {n: sha256(d).hexdigest() for n, d in runs.items()})
        built.append(image)
        layers[chip] = engine.client.images.get(image).attrs["RootFS"]["Layers"]
    a, b = layers["910b"], layers["a3"]
    # base, OS packages, toolkit, chip package, then this test's COPY of the smoke files (whose
    # folder COPY makes with the time of the build: it differs, unless both builds ran it within
    # one second, and then the cache keeps the two equal): shared up to the chip layer
    assert len(a) == len(b) == 5, (a, b)
    differ = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    assert differ[:1] == [3] and set(differ) <= {3, 4}, (a, b)


@pytest.mark.engine
def test_nnal_installs_last_in_its_own_layer_and_its_env_is_checked(engine, built, tmp_path):
    """NNAL runs after the chip's package with the toolkit's set_env.sh sourced (the synthetic
    installer refuses otherwise), in a layer of its own; the ENV holds what NNAL's set_env.sh
    sets, and a torch of the other C++ ABI makes that check name ATB_HOME_PATH."""
    home = "/usr/local/Ascend/cann-9.1.0"
    folder = tmp_path / "installers"
    folder.mkdir()
    runs = {TOOLKIT_91: synthetic_run(TOOLKIT_91, home, "9.1.0"), OPS_91: synthetic_run(OPS_91, home, "9.1.0"),
            NNAL_91: synthetic_nnal(NNAL_91, "9.1.0")}
    for name, data in runs.items():
        (folder / name).write_bytes(data)
    image = build_cann_step(engine, tmp_path, dict(CELL_91, nnal="true"), folder,
                            {n: sha256(d).hexdigest() for n, d in runs.items()})
    built.append(image)
    assert f"{RAN} {NNAL_91}" in (tmp_path / "build.log").read_text()  # (the other two may come from the cache)
    steps = [h["CreatedBy"] for h in reversed(engine.client.images.get(image).history())]
    ran = [next(i for i, step in enumerate(steps) if f"bash '/tmp/cann/{name}'" in step)
           for name in (TOOLKIT_91, OPS_91, NNAL_91)]
    assert ran == sorted(ran), "toolkit, then the chip's package, then NNAL"
    atb = "/usr/local/Ascend/nnal/atb/latest/atb/cxx_abi_1"  # torch 2.13: the C++11 ABI
    assert engine.run(image, ["bash", "-c", 'ls "$ATB_HOME_PATH/lib/libatb.so"'], timeout=60).stdout.strip() \
        == f"{atb}/lib/libatb.so"
    nnal_env = "/usr/local/Ascend/nnal/atb/set_env.sh"
    assert set_env_check(engine, image, nnal_env) == [nnal_env, {}]  # no torch here: NNAL's default, 1
    old_abi = ("mkdir -p /tmp/fake/torch && echo 'def compiled_with_cxx11_abi(): return False' "
               "> /tmp/fake/torch/__init__.py && export PYTHONPATH=/tmp/fake:$PYTHONPATH &&")
    assert set_env_check(engine, image, nnal_env, before=old_abi)[1]["ATB_HOME_PATH"] == \
        f"is {atb}; set_env.sh sets {atb[:-1]}0"
    assert len(engine.client.images.get(image).attrs["RootFS"]["Layers"]) == 6  # base, OS, 3 packages, files


WHEELHOUSE = Path("/opt/wheels")
DEMO = "cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64"


@pytest.mark.engine
@pytest.mark.skipif(not any(WHEELHOUSE.glob("torch-2.13.0*cp311*x86_64.whl")),
                    reason="needs the torch 2.13.0 cp311 wheel in /opt/wheels")
def test_the_whole_images_of_two_chips_share_everything_below_the_chip_layer(engine, built, tmp_path):
    """The demo cell's whole NPU image, from its lock, for 910b and A3 (CANN from synthetic
    installers): identical up to the chip's package, which sits on the Python closure; above it
    torch_npu's layer, the same bytes on both, then the files. What benchmarks/bench_chips.py
    weighs."""
    home = "/usr/local/Ascend/cann-9.1.0"
    folder = tmp_path / "installers"
    folder.mkdir()
    packages = {"910b": OPS_91, "a3": "Ascend-cann-A3-ops_9.1.0_linux-x86_64.run"}
    runs = {name: synthetic_run(name, home, "9.1.0") for name in (TOOLKIT_91, *packages.values())}
    for name, data in runs.items():
        (folder / name).write_bytes(data)
    demo = next(c for c in matrix.load(Path("matrix")).cells if c.id == DEMO)
    made = lock.read(Path("dockerfiles") / DEMO)
    steps, layers = {}, {}
    for chip in packages:
        cell = replace(demo, id=f"chips-{chip}", chip=chip, base_image=BASE, cann_source="local",
                       cann_local=str(folder), sha256=tuple((n, sha256(d).hexdigest()) for n, d in runs.items()))
        context = stage.context(render.render_cell(cell, lock=made), tmp_path / f"ctx-{chip}", WHEELHOUSE, folder)
        with stage.secrets(cell, CA if CA.is_file() else None) as secrets:
            image = engine.build(context, "Dockerfile", secrets=secrets, log_path=tmp_path / f"{chip}.log")
        built.append(image)
        steps[chip] = [(h["CreatedBy"], h["Size"]) for h in reversed(engine.client.images.get(image).history())]
        layers[chip] = engine.client.images.get(image).attrs["RootFS"]["Layers"]
        # uv installed the locked steps from its own stage, mounted while they ran: it does not ship
        # (what stays is the empty mount point /opt/uv)
        shipped = engine.run(image, ["sh", "-c", "ls -A /opt/uv; ls -d /uv 2>/dev/null; command -v uv; "
                                     "python -m pip show uv 2>/dev/null; echo end"], timeout=60).stdout
        assert shipped.split() == ["end"], shipped
    a, b = steps["910b"], steps["a3"]
    first = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    assert packages["910b"] in a[first][0] and packages["a3"] in b[first][0]  # the first difference: the chip's layer
    below = " ".join(created for created, _ in a[:first])
    assert "lock.closure.txt" in below and f"/tmp/cann/{TOOLKIT_91}" in below  # the environment and the toolkit: shared
    above = [created for created, size in a[first + 1:] if size]
    # then torch_npu, the COPYs of the smoke files, the driver guard, the manifest and the lock (the guard's
    # link is a layer too, of size 0: a symlink)
    assert len(above) == 5 and "lock.torch_npu.txt" in above[0], above
    # torch_npu's layer, though built on each chip's own, is the same bytes (fixed file times, no
    # mount point made in it); only the five layers of files above it differ (COPY gives their folders
    # the time of the build, and so does the RUN that links the guard)
    a, b = layers["910b"], layers["a3"]
    assert len(a) == len(b)
    differ = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    # the chip's, then (only) among the five of files: those two builds made within one second are equal
    assert set(differ[1:]) <= set(range(len(a) - 5, len(a))), differ
    assert a[differ[0] + 1] == b[differ[0] + 1]  # torch_npu's
