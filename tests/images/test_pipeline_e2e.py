"""`ascend-build image` end to end: real builds, smoke runs, seal, tags, push and pull.

Driven through the command line, the way users run it, against the real Docker
Engine and a real registry on loopback (fixtures in conftest.py); the SDK
(`engine`) only looks at the result. Every cell here is a copy of the shipped
Debian 12 cell (Python 3.11 venv, torch 2.13.0 from the /opt/wheels wheelhouse,
torch_npu 2.13.0) tagged into a repository unique to this session, so no test
touches a real tag. BuildKit's cache makes every build after the first one fast;
the tests never prune it.

What they prove:
* the CPU twin passes every tier, is sealed with its report, tagged, pushed with
  credentials from the environment, and pulled back by digest with the same
  report and labels; no secret (CA bundle, build settings, registry password)
  reaches `docker history` or any layer;
* an NPU image on a base without CANN fails its static tiers, naming what is
  missing, and gets no tag at all;
* an image broken after install fails its smoke test and gets no tag;
* an unreachable engine, a refused push and Ctrl-C end with a clear message and
  leave nothing half done (no tag, no container, no temporary tag, no secret file).

Tests that fake NPU presence carry ``fake_npu`` in their name: no NPU exists here.
"""

from __future__ import annotations

import calendar
import json
import os
import platform
import re
import signal
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from builder.images.prepare import smoke_plan
from builder.images import image_run, matrix, pipeline, render, smoke_run, stage
from builder import vocabulary
from builder.errors import UserError
from tests.support.locks import entry, read as read_lock

TOKEN = uuid.uuid4().hex[:10]
REPO = f"ascend-build-test/pytorch-{TOKEN}"  # every tag this module makes lives under it
from tests.support.pipeline import (  # noqa: F401  (what the tests below use)
    CELL_ID, WHEELHOUSE, CA_BUNDLE, CLI, DOCKER, TEMP_TAG_REPO, CELL, _torch_wheel, REMOTE_SECRET, needs_build, write_matrix, image_args, cli_env, run_cli, outcomes_of, all_refs, temp_tags, smoke_containers, stream_find, pem_bodies, pem_lines, registry_tags, drop_images)
from builder import leftovers
from tests.support import listing


@pytest.fixture(scope="module")
def session_images(engine):
    """Removes every tag of this module's repositories when the module ends."""
    yield REPO
    drop_images(engine, REPO)


@dataclass
class TwinRun:
    result: subprocess.CompletedProcess
    outcome: Dict
    state: Path
    release: str
    pushed: str
    seconds: float


@pytest.fixture(scope="module")
def twin(engine, base_image, registry, session_images, tmp_path_factory) -> TwinRun:
    """One CLI run shared by the twin tests: build, smoke, seal, tag, push with credentials
    from the environment."""
    if platform.machine() != "x86_64" or _torch_wheel() is None or not CLI.exists():
        pytest.skip("needs an x86_64 host, the torch 2.13.0 cp311 wheel in /opt/wheels and the ascend-build script")
    work = tmp_path_factory.mktemp("twin")
    state = work / "state"
    # both arches declared: this run pushes the x86_64 twin alone, so its cell waits for an index
    matrix_file = write_matrix(work, REPO, arch="[x86_64, aarch64]")
    # the team's checkout: its remote URL carries a credential that must never reach the image
    for args in (["init", "-q"], ["remote", "add", "origin", f"https://ci:{REMOTE_SECRET}@example.invalid/team/images.git"],
                 ["add", matrix_file.name], ["-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "m"]):
        subprocess.run(["git", "-C", str(work), *args], check=True, capture_output=True)
    start = time.monotonic()
    result = run_cli(image_args(matrix_file, state, base_image, "--variant", "cpu",
                                "--push", registry.host), cwd=work,
                     ASCEND_BUILD_REGISTRY_USER=registry.username,
                     ASCEND_BUILD_REGISTRY_PASSWORD=registry.password)
    seconds = time.monotonic() - start
    [outcome] = outcomes_of(result)
    release = f"{REPO}:{CELL_ID}-cpu"
    return TwinRun(result, outcome, state, release, f"{registry.host}/{release}", seconds)


# --- 1. the CPU twin, end to end ------------------------------------------------------


@pytest.mark.engine
def test_doctor_checks_inside_the_twin(engine, twin):
    """`doctor --image` runs its probe inside a real image ascend-build made."""
    from builder.node import doctor
    from builder.node.host import HostInfo

    labels = engine.labels(twin.release)
    host = HostInfo(arch=labels["io.ascend-build.arch"], driver="26.1.0", firmware="9.0.0.105.229")
    seen = doctor.look_up(engine, twin.release, host.arch)  # the launch checks `run` shares: exists, arch
    names = {c.name: c for c in doctor.launch_checks(host, seen) + doctor.doctor_image(engine, twin.release, host)}
    assert "image: probe" not in names
    assert names["image: built by ascend-build"].status == doctor.OK
    assert names["image: arch"].status == doctor.OK
    assert names["image: Python env isolation"].status == doctor.OK  # /opt/venv
    assert names["image: HCCL_CONNECT_TIMEOUT"].status == doctor.OK  # the ENV defaults render.py sets
    assert names["image: PYTORCH_NPU_ALLOC_CONF"].detail == "expandable_segments:True"
    assert names["image: torch_npu vs CANN"].detail == "the CPU twin: no torch_npu by design"


@pytest.mark.engine
def test_cpu_twin_passes_is_sealed_tagged_pushed_and_pulled_by_digest(engine, registry, twin, monkeypatch):
    res, out = twin.result, twin.outcome
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    assert (out["cell"], out["variant"], out["status"]) == (CELL_ID, "cpu", "passed"), out["message"]
    tiers = {t["name"]: t["status"] for t in out["tiers"]}
    assert tiers == {name: "passed" for name in vocabulary.tier_names()}, out["tiers"]
    train = next(t for t in out["tiers"] if t["name"] == "train")
    assert train["details"]["device"] == "cpu" and train["details"]["losses"][-1] < train["details"]["losses"][0]

    # Sealed and tagged: the release tag and the registry name point at the sealed image.
    assert out["tags"] == [twin.release, twin.pushed]
    sealed = out["image_id"]
    assert engine.image_id(twin.release) == sealed and engine.image_id(twin.pushed) == sealed
    report_path = Path(out["report"])
    assert report_path.parent == twin.state / "reports"
    report_bytes = report_path.read_bytes()
    report = json.loads(report_bytes)
    assert report["passed"] is True and report["exit_code"] == 0 and report["cell"] == CELL_ID
    assert report["candidate"] != sealed  # the seal is a new image on top of the candidate
    assert engine.image_id(report["candidate"]) is None  # and the unnamed candidate is gone, not left dangling
    assert not temp_tags(engine) & {f"{TEMP_TAG_REPO}:{report['candidate'].split(':')[-1][:20]}"}

    # Pushed: the digest the run reports is the one the engine recorded for the registry name.
    digest = out["digests"][twin.pushed]
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest)
    repo_in_registry = twin.pushed.rsplit(":", 1)[0]
    by_digest = f"{repo_in_registry}@{digest}"
    assert by_digest in engine.repo_digests(twin.pushed)

    # Pulled back by digest once every local name in the registry's namespace is gone.
    for ref in [twin.pushed] + engine.repo_digests(twin.pushed):
        if ref.startswith(registry.host + "/"):
            engine.untag(ref)
    assert engine.image_id(twin.pushed) is None and engine.image_id(by_digest) is None
    monkeypatch.delenv("ASCEND_BUILD_REGISTRY_USER", raising=False)
    monkeypatch.delenv("ASCEND_BUILD_REGISTRY_PASSWORD", raising=False)
    with pytest.raises(UserError, match="authentication"):  # the registry really wants credentials
        engine.pull(by_digest)
    assert engine.pull(by_digest, username=registry.username, password=registry.password) == sealed

    # The pulled image carries the very report of the run, and the labels of a validated image.
    shown = engine.run(by_digest, ["cat", vocabulary.VALIDATION_REPORT])
    assert shown.exit_code == 0, shown.stderr
    assert shown.stdout.encode() == report_bytes
    assert json.loads(shown.stdout) == report
    labels = engine.labels(by_digest)
    assert labels["io.ascend-build.validated"] == "true"
    assert labels["io.ascend-build.cell"] == CELL_ID
    assert labels["io.ascend-build.variant"] == "cpu"
    assert labels["io.ascend-build.validated-tiers"] == ",".join(vocabulary.tier_names())
    assert labels["io.ascend-build.validated-device"] == "cpu"
    assert labels["io.ascend-build.content-hash"] == report["content_hash"]


@pytest.mark.engine
def test_cpu_twin_carries_the_oci_build_labels(engine, twin):
    """created, source, revision and base.name come in at build time (the rendered Dockerfile
    stays the same bytes) and the seal keeps them; the remote's credential is not among them."""
    labels = engine.labels(twin.release)
    commit = subprocess.run(["git", "-C", str(twin.state.parent), "rev-parse", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    assert labels["org.opencontainers.image.source"] == "https://example.invalid/team/images"
    assert labels["org.opencontainers.image.revision"] == commit
    assert labels["org.opencontainers.image.base.name"] == "docker.io/local/debian:12"  # as Docker qualifies it
    assert "org.opencontainers.image.base.digest" not in labels  # made locally (docker import): no registry digest
    built = calendar.timegm(time.strptime(labels["org.opencontainers.image.created"], "%Y-%m-%dT%H:%M:%SZ"))
    assert 0 <= time.time() - built < twin.seconds + 3600
    assert labels["org.opencontainers.image.version"] == f"{CELL_ID}-cpu"
    assert REMOTE_SECRET not in json.dumps(engine.client.images.get(twin.release).attrs)


@pytest.mark.engine
def test_the_catalogue_lists_the_signed_twin_with_the_tiers_and_times_of_its_smoke_run(registry, twin, tmp_path,
                                                                                     monkeypatch):
    """The twin this module built and pushed, attested by the pipeline's own step from its own smoke
    report: `ascend-build catalogue` lists it as validated, each tier with the seconds that run took,
    its size the registry's, and its NPU image and aarch64 cell (never pushed here) as missing."""
    from builder.registry import Registry
    from builder.trust import signing

    assert twin.outcome["status"] == "passed", twin.outcome["message"]
    monkeypatch.delenv(signing.PASSPHRASE_ENV, raising=False)
    key, pub = signing.generate(tmp_path / "keys", "team")
    creds = {"ASCEND_BUILD_REGISTRY_USER": registry.username, "ASCEND_BUILD_REGISTRY_PASSWORD": registry.password}
    for name, value in creds.items():
        monkeypatch.setenv(name, value)
    digest = twin.outcome["digests"][twin.pushed]
    report = json.loads(Path(twin.outcome["report"]).read_text())
    out = image_run.Outcome(CELL_ID, "cpu", status="passed", digests={twin.pushed: digest})
    options = image_run.Options(push=registry.host, sign_key=signing.load_private(key))
    run = image_run.ImageRun(f"{CELL_ID}-cpu", twin.pushed.split("/", 1)[1], out, options, None, lambda line: None,  # type: ignore[arg-type]  # attaching asks no engine
                             content_hash=report["content_hash"], tiers=vocabulary.tier_names(), report=report)
    assert image_run.attest_pushed(run).status == "passed"
    site = tmp_path / "site"
    done = run_cli(["catalogue", "--registry", registry.host, "--trust-key", str(pub), "--out", str(site),
                    "--matrix", str(twin.state.parent / "matrix.yaml")], cwd=tmp_path, timeout=300, **creds)
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((site / "catalogue.json").read_text())
    [entry] = data["validated"]
    assert (entry["digest"], entry["cell"], entry["variant"], entry["ran_on"]) == (digest, CELL_ID, "cpu", "cpu-twin")
    assert (entry["cann"], entry["chip"], entry["min_driver"]) == ("9.1.0", "910b", "25.2.RC1")  # its guard's ENV
    assert [(t["name"], t["status"], t["seconds"]) for t in entry["tiers"]] == [
        (t["name"], t["status"], t["seconds"]) for t in report["tiers"]]
    layers = Registry(registry.host, registry.username, registry.password).manifest(REPO, digest).data["layers"]
    assert entry["compressed_bytes"] == sum(x["size"] for x in layers) > 10_000_000
    missing = {m["cell"]: m["missing"] for m in data["missing"]}
    assert missing == {CELL_ID: ["npu"], CELL_ID[: -len("x86_64")] + "aarch64": ["npu", "cpu"]}  # the matrix's two arches
    page = (site / "index.html").read_text()
    assert f"{CELL_ID} <span class=\"badge\">CPU twin</span>" in page


@pytest.mark.engine
def test_cpu_twin_keeps_secrets_out_of_history_and_layers(engine, registry, twin):
    assert twin.outcome["status"] == "passed", twin.outcome["message"]
    sealed = twin.outcome["image_id"]
    history = subprocess.run([DOCKER, "history", "--no-trunc", sealed], capture_output=True, text=True,
                             check=True, env={**os.environ, "DOCKER_HOST": engine.url}).stdout
    assert ". /run/secrets/buildenv" in history  # the steps that read the secrets are listed ...
    cell = matrix.load(write_matrix(twin.state.parent / "again", REPO)).cells[0]
    buildenv = [ln for ln in stage.buildenv(cell, with_ca=True).splitlines() if ln.strip()]
    assert any("/run/secrets/ca" in ln for ln in buildenv)
    secrets_text = [registry.password, *buildenv]
    if CA_BUNDLE.is_file():
        bundle = CA_BUNDLE.read_text()
        first = pem_lines(bundle)[0]
        secrets_text += [first[0], first[len(first) // 2]]
    for text in secrets_text:  # ... but not one byte of what they were given
        assert text not in history, f"{text[:40]}... is in docker history"
    for text in (registry.password, *buildenv):
        assert text not in twin.result.stdout + twin.result.stderr

    # No layer holds the build settings, the password, or a certificate of the host's CA
    # bundle that the image's own ca-certificates package does not ship (the proxy's CA).
    needles = {registry.password.encode(), *(ln.encode() for ln in buildenv)}
    host_only: List[List[str]] = []
    if CA_BUNDLE.is_file():
        shipped = engine.run(sealed, ["sh", "-c", "cat /usr/share/ca-certificates/*/*.crt"])
        assert shipped.exit_code == 0, shipped.stderr
        known = set(pem_bodies(shipped.stdout))
        assert len(known) > 50  # Debian's Mozilla set, read from the image
        host_only = [lines for lines in pem_lines(CA_BUNDLE.read_text()) if "".join(lines) not in known]
        needles |= {lines[len(lines) // 2].encode() for lines in host_only}
    control = b"ascend-build smoke test: runs INSIDE an image"  # smoke.py, COPYed into a layer
    # the whole image (about 1.5 GB) as `docker save` streams it: a client of its own with a long
    # read timeout, since an engine busy with other builds took longer than the default 300 s to answer
    import docker

    patient = docker.from_env(timeout=1800)
    try:
        found = stream_find(patient.images.get(sealed).save(), needles | {control})
    finally:
        patient.close()
    assert control in found, "the layer scan does not see file contents"
    assert found == {control}, f"secret bytes in a layer: {sorted(n[:40] for n in found - {control})}"


# --- 2. an NPU image whose "CANN base image" has no CANN ---------------------------------


@pytest.mark.engine
@needs_build
def test_npu_image_on_a_base_without_cann_fails_static_tiers_and_gets_no_tag(engine, base_image, session_images,
                                                                           tmp_path):
    repo = f"{REPO}-npu"
    state = tmp_path / "state"
    matrix_file = write_matrix(tmp_path, repo, cann_source=f"{{image: {base_image}}}")
    before = temp_tags(engine)
    res = run_cli(image_args(matrix_file, state, base_image, "--variant", "npu"), cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr
    [out] = outcomes_of(res)
    assert (out["variant"], out["status"], out["tags"], out["digests"]) == ("npu", "failed", [], {})
    assert "smoke test on npu: versions, libraries" in res.stderr  # no NPU here: static tiers only

    report = json.loads(Path(out["report"]).read_text())
    assert report["required_tiers"] == list(vocabulary.static_tiers()) and report["passed"] is False
    tiers = {t["name"]: t for t in report["tiers"]}
    assert [t["name"] for t in report["tiers"]] == list(vocabulary.static_tiers())
    assert tiers["versions"]["status"] == "failed" and tiers["libraries"]["status"] == "failed"
    print("versions:", tiers["versions"]["summary"])
    print("libraries:", tiers["libraries"]["summary"])

    # versions: CANN 9.1.0 is declared, and the report names the files it looked for.
    versions = tiers["versions"]
    assert "CANN 9.1.0 declared but no CANN version file found" in versions["summary"]
    looked = versions["details"]["cann_paths_looked_at"]
    assert any(p.endswith("/version.cfg") for p in looked)
    assert any(p.endswith("/x86_64-linux/ascend_toolkit_install.info") for p in looked)
    assert all(p in versions["summary"] for p in looked) and versions["details"]["cann_files"] == []
    assert versions["details"]["torch_npu"] == "2.13.0"  # torch_npu itself is installed

    # libraries: torch_npu's link closure misses CANN's libraries, named with who needs them.
    libraries = tiers["libraries"]
    missing = libraries["details"]["missing"]
    assert libraries["details"]["package"] == "torch_npu"
    for lib in ("libascendcl.so", "libhccl.so"):
        assert lib in missing and "libtorch_npu.so" in missing[lib], missing
        assert lib in libraries["summary"]
    assert "CANN missing or its lib64 not on LD_LIBRARY_PATH" in libraries["summary"]

    # The outcome's message says it too, and no tag of any kind exists for the cell.
    assert "libascendcl.so" in out["message"] and "version.cfg" in out["message"]
    for ref in all_refs(repo):
        assert engine.image_id(ref) is None, f"{ref} was tagged"
    assert engine.client.images.get(out["image_id"]).tags == []  # the candidate stays nameless
    assert temp_tags(engine) <= before


# --- 3. a deliberately broken image -----------------------------------------------------


@pytest.mark.engine
@needs_build
def test_image_broken_after_install_fails_smoke_and_gets_no_tag(engine, base_image, session_images, tmp_path,
                                                                 monkeypatch):
    """The template is right, the image is not: a pinned package is removed after install
    (the render step is patched to append one RUN). Only the smoke test can catch it."""
    repo = f"{REPO}-broken"
    [cell] = matrix.load(write_matrix(tmp_path, repo)).cells
    real_render = render.files

    def broken(*args, **kwargs):
        files = dict(real_render(*args, **kwargs))
        files["Dockerfile.cpu"] += b"\n# test only: a pinned package removed after install\nRUN pip uninstall -y torch\n"
        return files

    monkeypatch.setattr(render, "files", broken)
    said: List[str] = []
    before = temp_tags(engine)
    options = pipeline.Options(variants=("cpu",), state_dir=tmp_path / "state", base_image=base_image,
                               wheelhouse=WHEELHOUSE, ca_bundle=CA_BUNDLE if CA_BUNDLE.is_file() else None,
                               quiet=True)
    [out] = pipeline.run([cell], options, engine, said.append)

    assert out.status == "failed" and not out.ok, out.message
    assert out.tags == [] and out.digests == {}
    assert "RUN pip uninstall -y torch" in Path(out.log).read_text()  # the broken step really ran
    tiers = {t["name"]: t for t in out.tiers}
    assert "torch not installed" in tiers["versions"]["summary"] and tiers["versions"]["status"] == "failed"
    assert tiers["libraries"]["status"] == "failed" and "torch is not installed" in tiers["libraries"]["summary"]
    assert tiers["import"]["status"] == "failed" and "No module named 'torch'" in tiers["import"]["summary"]
    for name in ("device", "train", "collective"):
        assert tiers[name]["status"] == "skipped" and "import failed" in tiers[name]["summary"]
    assert "versions:" in out.message and "import:" in out.message
    report = json.loads(Path(out.report).read_text())
    assert report["passed"] is False and report["exit_code"] == 1

    for ref in all_refs(repo):
        assert engine.image_id(ref) is None, f"{ref} was tagged"
    assert engine.client.images.get(out.image_id).tags == []
    assert temp_tags(engine) <= before
    assert not (tmp_path / "state" / "seal").exists()  # never got as far as sealing


# --- 3b. the lock: what was tested is what ships ----------------------------------------


def _run_twin(engine, cell, tmp_path, base_image, locks_dir=Path("dockerfiles"), **options):
    opts = pipeline.Options(variants=("cpu",), state_dir=tmp_path / "state", base_image=base_image,
                            wheelhouse=WHEELHOUSE, ca_bundle=CA_BUNDLE if CA_BUNDLE.is_file() else None,
                            quiet=True, locks_dir=locks_dir, **options)
    [out] = pipeline.run([cell], opts, engine, lambda line: None)
    return out


@pytest.mark.engine
@needs_build
def test_a_different_numpy_in_the_twin_fails_the_smoke_naming_numpy_and_gets_no_tag(engine, base_image, session_images,
                                                                                    tmp_path, monkeypatch):
    """The lock says numpy X; a step after the locked install puts another numpy in (as a
    floating dependency would). The versions tier compares every distribution with the lock."""
    repo = f"{REPO}-numpy"
    [cell] = matrix.load(write_matrix(tmp_path, repo)).cells
    locked = entry(read_lock(Path("dockerfiles") / cell.id), "numpy").version
    other = "2.3.5" if locked != "2.3.5" else "2.3.4"
    real_render = render.files

    def swapped(*args, **kwargs):
        files = dict(real_render(*args, **kwargs))
        files["Dockerfile.cpu"] += (
            "\n# test only: another numpy than the lock's\n"
            "RUN --mount=type=secret,id=buildenv --mount=type=secret,id=ca "
            "if [ -s /run/secrets/buildenv ]; then . /run/secrets/buildenv; fi && "
            f"pip install --no-deps numpy=={other}\n").encode()
        return files

    monkeypatch.setattr(render, "files", swapped)
    out = _run_twin(engine, cell, tmp_path, base_image)
    assert out.status == "failed" and out.tags == [], out.message
    versions_tier = next(t for t in out.tiers if t["name"] == "versions")
    assert versions_tier["status"] == "failed"
    assert f"numpy {other} installed, {locked} locked" in versions_tier["summary"]
    for ref in all_refs(repo):
        assert engine.image_id(ref) is None, f"{ref} was tagged"


@pytest.mark.engine
@needs_build
def test_a_tampered_hash_in_the_lock_fails_the_build_before_anything_installs(engine, base_image, session_images,
                                                                             tmp_path):
    repo = f"{REPO}-tampered"
    [cell] = matrix.load(write_matrix(tmp_path, repo)).cells
    made = read_lock(Path("dockerfiles") / cell.id)
    bad = replace(made, entries=tuple(replace(e, hashes=("0" * 64,)) if e.name == "numpy" else e for e in made.entries))
    locks = tmp_path / "locks"
    (locks / cell.id).mkdir(parents=True)
    (locks / cell.id / "requirements.lock").write_text(bad.text())
    out = _run_twin(engine, cell, tmp_path, base_image, locks_dir=locks)
    assert out.status == "failed" and out.tags == [] and out.tiers == [], out.message
    log = Path(out.log).read_text()
    assert "Hash mismatch for `numpy==" in log
    closure_step = log[log.index("lock.closure.txt"):]
    assert "Installed " not in closure_step  # uv checks every file before it installs one
    for ref in all_refs(repo):
        assert engine.image_id(ref) is None


@pytest.mark.engine
@needs_build
def test_an_incomplete_lock_builds_only_when_asked_and_the_image_says_so(engine, base_image, session_images, tmp_path):
    repo = f"{REPO}-incomplete"
    [cell] = matrix.load(write_matrix(tmp_path, repo)).cells
    made = read_lock(Path("dockerfiles") / cell.id)
    partial = replace(made, entries=tuple(replace(e, hashes=(), note="test: no sha256") if e.name == "torch" else e
                                          for e in made.entries))
    locks = tmp_path / "locks"
    (locks / cell.id).mkdir(parents=True)
    (locks / cell.id / "requirements.lock").write_text(partial.text())

    refused = _run_twin(engine, cell, tmp_path, base_image, locks_dir=locks)
    assert refused.status == "error" and refused.image_id == "" and "torch==2.13.0+cpu" in refused.message
    assert "--allow-incomplete-lock" in refused.message

    out = _run_twin(engine, cell, tmp_path, base_image, locks_dir=locks, allow_incomplete_lock=True)
    assert out.status == "passed", out.message
    labels = engine.labels(out.tags[0])
    assert labels[vocabulary.Label.LOCK] == "incomplete"
    report = json.loads(Path(out.report).read_text())
    assert report["lock"] == "incomplete" and report["base_image"]["id"] == engine.image_id(base_image)


# --- 4. failures around the pipeline: engine, registry, Ctrl-C --------------------------


def test_unreachable_engine_is_a_clear_error_without_traceback(tmp_path):
    if not CLI.exists():
        pytest.skip("the ascend-build script is not installed next to this Python")
    res = run_cli(image_args(write_matrix(tmp_path, REPO), tmp_path / "state", "local/debian:12",
                             "--variant", "cpu"), cwd=tmp_path, timeout=120, DOCKER_HOST="tcp://127.0.0.1:1")
    assert res.returncode == 1
    assert "error: cannot reach the Docker Engine at tcp://127.0.0.1:1" in res.stderr
    assert "fix:" in res.stderr and "DOCKER_HOST" in res.stderr and "dockerd" in res.stderr
    assert "Traceback" not in res.stderr
    # --json: the error is JSON on stdout too
    assert json.loads(res.stdout)["error"].startswith("cannot reach the Docker Engine at tcp://127.0.0.1:1")
    assert not (tmp_path / "state" / "reports").exists()


@pytest.mark.engine
@needs_build
def test_refused_push_fails_clearly_and_keeps_the_sealed_local_image(engine, base_image, registry, session_images,
                                                                     tmp_path):
    """Run as a person would (no --json): the message must stand on its own."""
    repo = f"{REPO}-auth"
    release, pushed = f"{repo}:{CELL_ID}-cpu", f"{registry.host}/{repo}:{CELL_ID}-cpu"
    wrong = f"wrong-{TOKEN}"
    state = tmp_path / "state"
    res = run_cli(image_args(write_matrix(tmp_path, repo), state, base_image, "--variant", "cpu",
                             "--push", registry.host, as_json=False), cwd=tmp_path,
                  ASCEND_BUILD_REGISTRY_USER=registry.username, ASCEND_BUILD_REGISTRY_PASSWORD=wrong)
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr and wrong not in res.stdout + res.stderr
    assert f"{CELL_ID} (cpu): error: cannot push {pushed}: registry {registry.host} refused authentication" \
        in res.stderr
    assert f"docker login {registry.host}" in res.stderr and "ASCEND_BUILD_REGISTRY_PASSWORD" in res.stderr
    assert "error" in res.stdout  # the summary table

    # Decided: a refused push loses nothing already done. The sealed image keeps its release
    # tag and its registry name, so `docker login` + `docker push` (or a rerun) finishes the job.
    sealed = engine.image_id(release)
    assert sealed is not None and engine.image_id(pushed) == sealed
    assert f"kept locally as {release}, {pushed}" in res.stderr
    labels = engine.labels(release)
    assert labels["io.ascend-build.validated"] == "true" and labels["io.ascend-build.cell"] == CELL_ID
    report = state / "reports" / f"{CELL_ID}-cpu.json"
    assert json.loads(report.read_text())["passed"] is True
    shown = engine.run(release, ["cat", vocabulary.VALIDATION_REPORT])
    assert shown.stdout.encode() == report.read_bytes()
    assert registry_tags(registry, repo) == 404  # and nothing reached the registry


def _interrupt(cmd: List[str], cwd: Path, env: Dict[str, str], ready: "re.Pattern[str]",
               while_running=None, under_way=None) -> Tuple[subprocess.CompletedProcess, int]:
    """Start ``cmd`` in its own process group, wait for a stderr line matching ``ready`` and,
    when given, for ``under_way()`` to be true (the phase itself, asked of the engine: never a
    fixed time, which a loaded machine outlasts), then Ctrl-C the group as a terminal would."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    stdout, stderr = proc.stdout, proc.stderr
    assert stdout is not None and stderr is not None  # both piped
    lines: List[str] = []
    out: List[str] = []
    def read_stderr():
        for line in stderr:
            lines.append(line)

    readers = [threading.Thread(target=read_stderr, daemon=True),
               threading.Thread(target=lambda: out.append(stdout.read()), daemon=True)]
    for t in readers:
        t.start()
    try:
        deadline = time.monotonic() + 1200
        while not any(ready.search(ln) for ln in list(lines)):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"never saw {ready.pattern!r} (exit {proc.poll()}):\n{''.join(lines)}")
            time.sleep(0.2)
        while under_way is not None and not under_way():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the phase never came (exit {proc.poll()}):\n{''.join(lines)}")
            time.sleep(0.2)
        assert proc.poll() is None, "finished before it could be interrupted:\n" + "".join(lines)
        if while_running:
            while_running()
        os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    for t in readers:
        t.join(timeout=10)
    for _ in range(50):  # the docker CLI the build ran is part of the group: it must be gone too
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        pytest.fail("a process of the interrupted run is still alive")
    # and its pid: what the run's scratch names end in (`builder.leftovers.owner_mark`)
    return subprocess.CompletedProcess(cmd, code, "".join(out), "".join(lines)), proc.pid


@pytest.mark.engine
@needs_build
@pytest.mark.parametrize("phase", ["build", "smoke"])
def test_ctrl_c_leaves_no_tag_no_container_no_temp_tag_no_secret_file(engine, base_image, session_images,
                                                                       tmp_path, phase):
    repo = f"{REPO}-sigint-{phase}"
    release = f"{repo}:{CELL_ID}-cpu"
    wheelhouse = WHEELHOUSE
    if phase == "build":
        # A wheelhouse of this test alone: the torch step mounts it, so BuildKit cannot take
        # that step from its cache and it runs (about 30 s) when Ctrl-C comes.
        wheelhouse = tmp_path / "wheels"
        wheelhouse.mkdir()
        wheel = _torch_wheel()
        assert wheel is not None, "no torch wheel in the wheelhouse"
        try:
            os.link(wheel, wheelhouse / wheel.name)
        except OSError:
            import shutil

            shutil.copy2(wheel, wheelhouse / wheel.name)
        (wheelhouse / f"ascend_build_test_{TOKEN}_{uuid.uuid4().hex[:8]}-0-py3-none-any.whl").write_bytes(b"")
        ready = re.compile(r"step \d+/\d+ RUN .*from=wheelhouse")
    else:
        ready = re.compile(r"smoke test on cpu")
    private_tmp = tmp_path / "tmp"  # the run's TMPDIR: secrets and iid files live there
    private_tmp.mkdir()
    state = tmp_path / "state"
    before = temp_tags(engine)
    seen_containers: List[int] = []

    def smoke_is_running():
        seen_containers.append(len(smoke_containers(engine, release)))

    def smoke_container_runs() -> bool:
        return any(c.status == "running" for c in smoke_containers(engine, release))

    res, pid = _interrupt([str(CLI), *image_args(write_matrix(tmp_path, repo), state, base_image, "--variant", "cpu",
                                                 wheelhouse=wheelhouse)],
                          cwd=tmp_path, env=cli_env(TMPDIR=str(private_tmp)), ready=ready,
                          while_running=smoke_is_running if phase == "smoke" else None,
                          under_way=smoke_container_runs if phase == "smoke" else None)

    assert res.returncode == 130, res.stderr
    last = res.stderr.rstrip().splitlines()[-1]
    assert last.startswith("interrupted by SIGINT: published nothing;") and "Traceback" not in res.stderr
    assert f"not finished: {CELL_ID} (cpu), no tag" in last
    said = json.loads(res.stdout)  # --json: no summary claims anything, the interruption is the error
    assert said == {"error": last, "where": None, "fix": None, "exit_code": 130}
    log = (state / "logs" / f"{CELL_ID}-cpu.build.log").read_text()
    if phase == "build":
        assert "exporting to image" not in log, "the build finished before Ctrl-C"
    else:
        assert seen_containers == [1], "the smoke container was not running when Ctrl-C came"
    for ref in all_refs(repo):
        assert engine.image_id(ref) is None, f"{ref} was tagged"
    assert smoke_containers(engine, release) == []
    # the run's own seal tags only: another process on the engine (a benchmark, another suite)
    # may be sealing meanwhile, and its temporary tag is none of this run's
    own = f"-{leftovers.host_mark()}-{pid}"
    assert not {t for t in temp_tags(engine) - before if t.endswith(own)}
    assert not (state / "reports").exists() or not any((state / "reports").iterdir())
    assert list(private_tmp.iterdir()) == []  # the buildenv/CA secret folder was removed


# --- 5. planning the smoke run (no engine) -----------------------------------------------


def _fake_npu_root(root: Path, davinci=(0,)) -> Path:
    """A file tree standing in for an NPU host's /: plain files, no real devices."""
    (root / "dev").mkdir(parents=True)
    for n in davinci:
        (root / "dev" / f"davinci{n}").touch()
    (root / "dev" / "davinci_manager").touch()
    (root / "usr/local/Ascend/driver/lib64").mkdir(parents=True)
    return root


def test_plan_fake_npu_host_runs_every_tier_with_devices_and_mounts(tmp_path):
    root = _fake_npu_root(tmp_path)
    device, tiers, devs, mounts, final = smoke_plan("npu", pipeline.Options(root=root))
    assert (device, tiers, final) == ("npu", vocabulary.tier_names(), True)
    assert devs == ["/dev/davinci0", "/dev/davinci_manager"]  # only control devices that exist
    assert mounts == [("/usr/local/Ascend/driver/lib64", "/usr/local/Ascend/driver/lib64", True)]


def test_plan_fake_npu_host_devices_option_picks_and_refuses(tmp_path):
    root = _fake_npu_root(tmp_path, davinci=(0, 1, 3))
    _, _, devs, _, final = smoke_plan("npu", pipeline.Options(root=root, devices="3,1"))
    assert devs == ["/dev/davinci3", "/dev/davinci1", "/dev/davinci_manager"] and final
    with pytest.raises(UserError, match=r"\[2\] not present"):
        smoke_plan("npu", pipeline.Options(root=root, devices="2"))


def test_plan_fake_npu_host_with_no_device_runs_static_tiers_only(tmp_path):
    root = _fake_npu_root(tmp_path)
    device, tiers, devs, mounts, final = smoke_plan("npu", pipeline.Options(root=root, no_device=True))
    assert (device, tiers, devs, final) == ("npu", vocabulary.static_tiers(), [], False)
    assert mounts == [("/usr/local/Ascend/driver/lib64", "/usr/local/Ascend/driver/lib64", True)]


def test_plan_without_npu_runs_static_tiers_and_is_not_final(tmp_path):
    device, tiers, devs, mounts, final = smoke_plan("npu", pipeline.Options(root=tmp_path))
    assert (device, tiers, devs, mounts, final) == ("npu", vocabulary.static_tiers(), [], [], False)


def test_plan_cpu_twin_runs_every_tier_on_cpu_also_on_a_fake_npu_host(tmp_path):
    root = _fake_npu_root(tmp_path / "fake_npu")
    for options in (pipeline.Options(root=tmp_path), pipeline.Options(root=root)):
        assert smoke_plan("cpu", options) == ("cpu", vocabulary.tier_names(), [], [], True)


def test_plan_cann_only_has_no_torch_tiers_on_any_host(tmp_path):
    root = _fake_npu_root(tmp_path / "fake_npu")
    assert smoke_plan("cpu", pipeline.Options(root=tmp_path), cann_only=True) == ("cpu", ("versions",), [], [], True)
    assert smoke_plan("npu", pipeline.Options(root=tmp_path), cann_only=True)[1:] == (vocabulary.static_tiers(), [], [],
                                                                                          False)
    device, tiers, devs, _, final = smoke_plan("npu", pipeline.Options(root=root), cann_only=True)
    assert (device, tiers, final) == ("npu", vocabulary.static_tiers(), True) and devs


# --- 6. a smoke test that hangs -----------------------------------------------------------


class _HangingSmoke:
    """The real engine, except that smoke containers run with the smoke program's test-only hang
    hook set (``ASCEND_BUILD_SMOKE_TEST_HANG``: the named tier really hangs inside the container),
    ``extra`` arguments added and, with ``limit``, that engine limit instead of the pipeline's."""

    def __init__(self, engine, tier: str, extra=(), limit: Optional[float] = None):
        self._engine, self.tier, self.extra, self.limit = engine, tier, list(extra), limit
        self.limits: List[float] = []

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def run(self, image, command, **kwargs):
        if vocabulary.SMOKE_PROGRAM in command:
            kwargs["env"] = {**kwargs.get("env", {}), "ASCEND_BUILD_SMOKE_TEST_HANG": self.tier}
            command = list(command) + self.extra
            kwargs["timeout"] = self.limit or kwargs["timeout"]
            self.limits.append(kwargs["timeout"])
        return self._engine.run(image, command, **kwargs)


@pytest.mark.engine
@needs_build
@pytest.mark.parametrize("ended_by", ["its tier's deadline", "the engine's limit"])
def test_a_hung_smoke_fails_the_image_keeping_seconds_and_report_and_tags_nothing(engine, base_image, session_images,
                                                                                 tmp_path, ended_by):
    """The twin's collective tier hangs for real inside its container (the main thread blocked in C
    holding the GIL, the workers waiting for their port). Its own deadline (10 s here) fails it
    with the stacks; or, with a deadline beyond the engine's limit (25 s here), the engine kills
    the container. Either way: failed, build and smoke seconds kept, the report kept, no tag."""
    repo = f"{REPO}-hung"
    release = f"{repo}:{CELL_ID}-cpu"
    [cell] = matrix.load(write_matrix(tmp_path, repo)).cells
    by_deadline = ended_by == "its tier's deadline"
    hanging = _HangingSmoke(engine, "collective", extra=("--tier-seconds", "collective=10") if by_deadline else (),
                            limit=None if by_deadline else 25)
    opts = pipeline.Options(variants=("cpu",), state_dir=tmp_path / "state", base_image=base_image,
                            wheelhouse=WHEELHOUSE, ca_bundle=CA_BUNDLE if CA_BUNDLE.is_file() else None, quiet=True)
    [out] = pipeline.run([cell], opts, hanging, lambda line: None)  # type: ignore[arg-type]  # an Engine stand-in whose smoke hangs
    print(f"{ended_by}: build {out.build_seconds:.1f} s, smoke {out.smoke_seconds:.1f} s; {out.message}")

    assert out.status == "failed" and out.tags == [] and out.digests == {}, out.message
    assert out.build_seconds > 0 and out.smoke_seconds > 0 and out.image_id.startswith("sha256:")
    report = json.loads(Path(out.report).read_text())  # kept, whatever ended it
    assert report["passed"] is False and report["candidate"] == out.image_id
    tiers = {t["name"]: t for t in report["tiers"]}
    if by_deadline:
        assert hanging.limits == [smoke_run.engine_timeout(vocabulary.tier_names(), 1.0)]
        assert 10 <= out.smoke_seconds < hanging.limits[0]
        assert [tiers[n]["status"] for n in vocabulary.tier_names()] == ["passed"] * 5 + ["failed"]
        hung = tiers["collective"]
        assert hung["summary"].startswith("collective did not finish within 10 s (its deadline): hung in hang_for_tests")
        assert 10 <= hung["seconds"] <= 18 and "in tier_collective" in hung["details"]["stacks"]
        assert hung["details"]["workers"]["still_running"] == [] and report["exit_code"] == 1
        assert "collective did not finish within 10 s" in out.message
    else:
        assert 25 <= out.smoke_seconds < 60
        # the tiers that ended before, from the program's log; then the failure
        assert [t["name"] for t in report["tiers"]] == list(vocabulary.tier_names()[:5]) + ["smoke"]
        assert all(tiers[n]["status"] == "passed" for n in vocabulary.tier_names()[:5])
        smoke_tier = tiers["smoke"]
        assert smoke_tier["status"] == "failed" and report["exit_code"] == -1
        assert smoke_tier["summary"].startswith("the smoke program did not finish within 25 s, the engine's limit")
        assert "ASCEND_BUILD_SMOKE_TIMEOUT_SCALE=2" in smoke_tier["summary"]
        assert "collective: hanging on purpose" in smoke_tier["details"]["stderr_tail"]
        assert "train passed" in smoke_tier["details"]["stderr_tail"]  # the tiers before it, in the log
        assert "did not finish within 25 s" in out.message and "collective: not run" in out.message
    for ref in all_refs(repo):
        assert engine.image_id(ref) is None, f"{ref} was tagged"
    assert smoke_containers(engine, release) == []
    # As after any failed smoke test, the candidate is kept, nameless, for a look; named by the
    # outcome and the report, it is the only nameless image of the run.
    titled = listing.images(engine, filters={"dangling": True, "label": f"org.opencontainers.image.title={release}"})
    assert [img.id for img in titled] == [out.image_id]
    assert engine.remove_if_unnamed(out.image_id)
