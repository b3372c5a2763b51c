"""Which file each Python step installed (builder/images/installed.py), and the SBOM's hash of it.

No image is built here (the engine tests build the twin): the recording lines are taken from the
rendered Dockerfile and run under bash after a real uv (the pinned one, from this venv) installed
a real wheel, once from a loopback package index (uv's ``.http`` cache entry) and once from a
wheelhouse folder (``.rev``); pip's report is a real ``pip install --report`` output. The SBOM
that takes what they recorded is validated with cyclonedx-python-lib.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from builder.images import installed, lock, sbom
from builder.vocabulary import CPU, INSTALLED_DIR, NPU
from tests.support.images import ROOT, job_of

UV = Path(sys.executable).with_name("uv")
TWIN = ROOT / "dockerfiles" / "cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64"


def wheel(folder: Path, name: str = "tiny_pkg", version: str = "1.0") -> Path:
    """A minimal pure-Python wheel (PEP 427): a module, METADATA, WHEEL and RECORD."""
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {f"{name}.py": b"VALUE = 1\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n".encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b'=').decode()},{len(b)}\n"
                     for n, b in files.items()) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as archive:
        for n, b in {**files, f"{info}/RECORD": record.encode()}.items():
            archive.writestr(zipfile.ZipInfo(n, (2020, 1, 1, 0, 0, 0)), b)
    return path


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def recorder(dockerfile: str, step: str) -> str:
    """The rendered lines of ``step`` that record what uv installed: from the ``mkdir`` of the
    record folder to the removal of uv's cache."""
    text = dockerfile  # run as bash reads it, line continuations included
    start = text.rindex(f"mkdir -p {INSTALLED_DIR} && ", 0, text.index("for entry in /tmp/uv-cache/"))
    end = text.index("rm -rf /tmp/uv-cache", start) + len("rm -rf /tmp/uv-cache")
    found = text[start:end]
    assert f"> {INSTALLED_DIR}/{step}.txt" in found
    return found


def uv_install(tmp_path: Path, requirement: str, *source: str) -> tuple:
    """A real uv install into a new venv, with the rendered Dockerfile's options and cache; then
    its recording lines run under bash. (the record's text, the record folder)"""
    if not UV.exists():
        pytest.skip("uv missing from this venv")
    venv, cache, out = tmp_path / "venv", tmp_path / "uv-cache", tmp_path / "installed"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    (tmp_path / "req.txt").write_text(requirement)
    subprocess.run([str(UV), "pip", "install", "--python", str(venv / "bin" / "python"), "--require-hashes", "--no-deps",
                    "--compile-bytecode", "--cache-dir", str(cache), "--link-mode=copy", *source,
                    "-r", str(tmp_path / "req.txt")], check=True, capture_output=True, timeout=300)
    lines = recorder((TWIN / "Dockerfile.cpu").read_text(), "closure")
    script = lines.replace("/tmp/uv-cache", str(cache)).replace(INSTALLED_DIR, str(out))
    done = subprocess.run(["bash", "-o", "pipefail", "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert not cache.exists()  # the step removes uv's cache: nothing of it in the layer
    return (out / "closure.txt").read_text(), out


def test_the_rendered_steps_record_what_they_installed():
    cpu = (TWIN / "Dockerfile.cpu").read_text()
    npu = (TWIN / "Dockerfile").read_text()
    assert "--no-cache --link-mode" not in cpu and "--cache-dir /tmp/uv-cache --link-mode" in cpu
    recorder(cpu, "closure")
    recorder(npu, "closure")
    torch_npu = recorder(npu[npu.index("lock.torch_npu.txt"):], "torch_npu")
    assert torch_npu
    # the torch_npu layer is the same bytes on every chip: the record gets the fixed time too
    assert f"{INSTALLED_DIR} {INSTALLED_DIR}/torch_npu.txt" in npu.replace("\\\n        ", "")
    # pip's unverified step writes its report beside them
    unverified = [p for p in (ROOT / "dockerfiles").glob("*/Dockerfile*") if "-r /tmp/lock.unverified.txt" in p.read_text()]
    assert unverified
    for path in unverified:
        assert f"--report {INSTALLED_DIR}/unverified.json" in path.read_text(), path


def test_uv_from_a_package_index_records_the_wheel_and_its_sha256(tmp_path, serve_folder):
    site = tmp_path / "site"
    (site / "simple" / "tiny-pkg").mkdir(parents=True)
    made = wheel(site / "simple" / "tiny-pkg")
    digest = sha256_of(made)
    (site / "simple" / "tiny-pkg" / "index.html").write_text(
        f'<html><body><a href="{made.name}#sha256={digest}">{made.name}</a></body></html>')
    other = "0" * 64  # another file the lock allows (another platform's wheel)
    url = serve_folder(site)
    text, _ = uv_install(tmp_path, f"tiny-pkg==1.0 --hash=sha256:{other} --hash=sha256:{digest}\n",
                         "--index-url", f"{url}/simple")
    print(f"\n{INSTALLED_DIR}/closure.txt:\n{text}")
    assert re.match(r"wheels-v\d+/index/[0-9a-f]+/tiny-pkg/1\.0-py3-none-any\.http ", text)
    found = installed.matched([lock.Entry("tiny-pkg", "1.0", (other, digest))], installed.from_uv(text), {})
    assert found["tiny-pkg"] == installed.Installed("tiny_pkg-1.0-py3-none-any.whl", digest, "uv cache entry")


def test_uv_from_a_wheelhouse_records_the_wheel_and_its_sha256(tmp_path):
    house = tmp_path / "wheelhouse"
    house.mkdir()
    digest = sha256_of(wheel(house))
    text, _ = uv_install(tmp_path, f"tiny-pkg==1.0 --hash=sha256:{digest}\n", "--find-links", str(house), "--no-index")
    assert re.match(r"wheels-v\d+/index/[0-9a-f]+/tiny-pkg/1\.0-py3-none-any\.rev ", text)
    found = installed.matched([lock.Entry("tiny-pkg", "1.0", ("1" * 64, digest))], installed.from_uv(text), {})
    assert found["tiny-pkg"].sha256 == digest


def test_a_record_that_names_no_allowed_hash_or_two_is_not_taken():
    a, b = "a" * 64, "b" * 64
    record = f"wheels-v8/pypi/six/1.17.0-py3-none-any.http {a}\nwheels-v8/pypi/six/1.17.0-py2-none-any.http {b}\n"
    uv = installed.from_uv(record)
    assert installed.matched([lock.Entry("six", "1.17.0", ("c" * 64,))], uv, {}) == {}  # none the lock allows
    assert installed.matched([lock.Entry("six", "1.17.0", (a, b))], uv, {}) == {}  # two: which one is not known
    assert installed.matched([lock.Entry("six", "1.17.0", (a,))], uv, {})["six"].sha256 == a


def test_pips_report_names_the_file_and_its_sha256(tmp_path):
    house = tmp_path / "wheelhouse"
    house.mkdir()
    made = wheel(house)
    report = tmp_path / "unverified.json"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps",
                           "--no-index", "--find-links", str(house), "--report", str(report), "-q", "tiny-pkg==1.0"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    data = json.loads(report.read_text())
    found = installed.from_pip_report(data)
    assert found["tiny-pkg"] == installed.Installed(made.name, sha256_of(made), "pip report")
    # an unverified entry (no hash in the lock) takes pip's word; a verified one does not
    assert installed.matched([lock.Entry("tiny-pkg", "1.0")], {}, found)["tiny-pkg"].sha256 == sha256_of(made)
    assert installed.matched([lock.Entry("tiny-pkg", "1.0", ("2" * 64,))], {}, found) == {}


class Image:
    """An engine's read_file over a folder standing for the image's file system."""

    def __init__(self, root: Path):
        self.root = root

    def read_file(self, ref, *paths, limit=0):
        for path in paths:
            found = self.root / path.lstrip("/")
            if found.is_file():
                return found.read_bytes()
        return None


def test_the_sbom_lists_the_installed_files_hash_and_names_it(tmp_path):
    job = job_of(NPU)
    assert job.plan.lock is not None
    entries = {e.name: e for e in job.plan.lock.entries}
    chosen = {name: entries[name].hashes[-1] for name in ("torch", "numpy") if entries.get(name) and entries[name].hashes}
    assert chosen
    folder = tmp_path / INSTALLED_DIR.lstrip("/")
    folder.mkdir(parents=True)
    (folder / "closure.txt").write_text("".join(
        f"wheels-v8/pypi/{name}/{entries[name].version}-cp39-cp39-manylinux_2_17_aarch64.http {sha} {'f' * 64}\n"
        for name, sha in chosen.items()))
    steps = [(i.step, i.verified) for i in job.image.installs]
    recorded = installed.read(Image(tmp_path), job.ref, steps, job.plan.lock.entries)
    assert set(recorded) == set(chosen)
    bom = sbom.of(job, recorded)
    error = JsonStrictValidator(SchemaVersion.V1_5).validate_str(json.dumps(bom))
    assert error is None, error
    libraries = {c["name"]: c for c in bom["components"] if c["type"] == "library"}
    for name, sha in chosen.items():
        assert [h["content"] for h in libraries[name]["hashes"]] == [sha]  # the one installed, not every allowed
        assert {"name": "ascend-build:installed-file",
                "value": f"{name}-{entries[name].version}-cp39-cp39-manylinux_2_17_aarch64.whl"} in libraries[name]["properties"]
    others = [c for n, c in libraries.items() if n not in chosen and entries[n].hashes]
    assert others and all({"name": "ascend-build:installed-file", "value": sbom.NOT_RECORDED} in c["properties"]
                          and [h["content"] for h in c["hashes"]] == list(entries[c["name"]].hashes) for c in others)
    assert sbom.of(job, recorded) == bom  # the same record, the same document


def test_no_record_in_the_image_leaves_every_allowed_hash(tmp_path):
    job = job_of(CPU)
    assert job.plan.lock is not None
    assert installed.read(Image(tmp_path), job.ref, [("closure", True), ("unverified", False)],
                          job.plan.lock.entries) == {}
