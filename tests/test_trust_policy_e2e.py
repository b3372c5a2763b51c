"""`pull`, `run` and `index` with --trust-key, end to end: the statement decides, not the labels.

Against the loopback docker-registry (htpasswd auth) with tiny images built through the real
engine (FROM local/debian:12, and local/debian:12-arm64 for the aarch64 arch, with the labels
the pipeline writes for a sealed twin) and real P-256 signatures (helpers in helpers_trust.py,
shared with test_trust_e2e.py):

- round trip: the genuine twins (x86_64 and aarch64) attested with the team's key; `pull
  --variant cpu --trust-key` chooses the x86_64 one (by option and by $ASCEND_BUILD_TRUST_KEY),
  `--require npu-host` refuses its cpu-twin verdict, another key refuses it; `run --trust-key
  --print` starts it by its verified digest; `index --trust-key` writes the index;
- forgeries, each pushed under the genuine tag with identical labels (unsigned, statements
  copied from the genuine digest, edited predicate, signed by another key): `pull --trust-key`
  names it refused with the reason (and without a key picks it, as labels allow), `run
  --trust-key` refuses it unless --insecure (which says so), `index --trust-key` writes nothing;
- a key naming no file (`--trust-key .`, $ASCEND_BUILD_TRUST_KEY set to nothing) before a
  stranger-signed image: `run --print` and `index` refuse (exit 2), never "no key".
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid

import pytest

from tests.support import trust as ht
from tests.support.pipeline import write_matrix
from builder.registry import Registry
from tests.support.trust import CELL_ID, CLI, REFUSED_FOR, TAG

REPO = f"ascend-build-test/trust-policy-{uuid.uuid4().hex[:8]}"
INDEX_REPO = REPO + "-index"  # apart: once written, the index tag would offer pull the genuine image again
FAMILY = CELL_ID[: -len("-x86_64")]
ARM_CELL = FAMILY + "-aarch64"
ARM_TAG = ARM_CELL + "-cpu"
INDEX_TAG = FAMILY + "-cpu"
ARM_BASE = ("local/debian:12-arm64", "linux/arm64")


def cli(creds, *args, env=None) -> subprocess.CompletedProcess:
    done = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **creds, **(env or {})})
    assert "Traceback" not in done.stderr, done.stderr
    return done


@pytest.fixture(scope="module")
def genuine(engine, registry, creds, keys, images):
    """The attested twins, {arch: digest} under <family>-<arch>-cpu, signed by the team's key, in both
    REPO (for pull and run) and INDEX_REPO (for index)."""
    if engine.architecture(ARM_BASE[0]) != "arm64":
        pytest.fail("no arm64 base image: run scripts/setup-engine.sh")
    digests = {}
    for repo in (REPO, INDEX_REPO):  # built for each: untagging after the push removes the image
        x86, arm = images("genuine"), images("genuine-arm", ht.sealed_twin_labels("aarch64"), *ARM_BASE)
        digests["x86_64"] = ht.push(engine, registry, x86, repo, TAG)
        ht.attest_as(registry, repo, TAG, digests["x86_64"], keys["team"][0])
        digests["aarch64"] = ht.push(engine, registry, arm, repo, ARM_TAG)
        ht.attest_as(registry, repo, ARM_TAG, digests["aarch64"], keys["team"][0], ARM_CELL)
    return digests


def pull(creds, registry, tmp_path, *extra, env=None) -> subprocess.CompletedProcess:
    root = tmp_path / "node"  # an empty root: no NPU, this machine's arch
    root.mkdir(exist_ok=True)
    return cli(creds, "pull", "--registry", f"{registry.host}/{REPO}", "--variant", "cpu", "--cann", "9.1.0",
               "--root", str(root), *extra, env=env)


def run_print(creds, ref: str, tmp_path, *extra) -> subprocess.CompletedProcess:
    return cli(creds, "run", "--print", "--root", str(tmp_path), *extra, ref, "--", "python", "train.py")


@pytest.mark.engine
def test_pull_trust_key_chooses_the_attested_twin(genuine, creds, keys, registry, tmp_path):
    done = pull(creds, registry, tmp_path, "--trust-key", str(keys["team"][1]), "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["digest"] == genuine["x86_64"] and result["tag"] == TAG and result["verified"] is True
    assert result["ref"] == f"{registry.host}/{REPO}@{genuine['x86_64']}"
    # the key from the environment, text output
    by_env = pull(creds, registry, tmp_path, env={"ASCEND_BUILD_TRUST_KEY": str(keys["team"][1])})
    print(f"\n$ ASCEND_BUILD_TRUST_KEY=team.pub ascend-build pull --registry {registry.host}/{REPO} --variant cpu "
          "--cann 9.1.0\n"
          + by_env.stdout + by_env.stderr)
    assert by_env.returncode == 0, by_env.stderr
    assert f"pulled {registry.host}/{REPO}@{genuine['x86_64']}" in by_env.stdout
    assert "its validation statement verifies with" in by_env.stdout


@pytest.mark.engine
def test_pull_require_npu_host_refuses_a_twins_verdict_and_another_key_refuses_all(genuine, creds, keys, registry,
                                                                                    tmp_path):
    strict = pull(creds, registry, tmp_path, "--trust-key", str(keys["team"][1]), "--require", "npu-host")
    assert strict.returncode == 1
    assert (f"  {TAG}: signed validation refused: its validation statement says it ran on cpu-twin; "
            "--require npu-host") in strict.stderr
    assert f"  {ARM_TAG}: wrong arch: aarch64, node is x86_64" in strict.stderr  # labels decide first
    other = pull(creds, registry, tmp_path, "--trust-key", str(keys["stranger"][1]))
    assert other.returncode == 1 and f"  {TAG}: signed validation refused: not signed by the trusted key" in other.stderr
    bad = pull(creds, registry, tmp_path, "--trust-key", str(keys["team"][1]), "--require", "npu")
    assert bad.returncode == 2 and "--require 'npu' is none of any, npu-host" in bad.stderr


@pytest.mark.engine
def test_run_trust_key_starts_the_verified_digest(genuine, creds, keys, registry, tmp_path):
    ref = f"{registry.host}/{REPO}:{TAG}"
    done = run_print(creds, ref, tmp_path, "--trust-key", str(keys["team"][1]))
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith(f"{registry.host}/{REPO}@{genuine['x86_64']} python train.py")
    assert f"verified: {registry.host}/{REPO}@{genuine['x86_64']}: its validation statement verifies" in done.stderr
    local = run_print(creds, "ascend-build/pytorch:" + TAG, tmp_path, "--trust-key", str(keys["team"][1]))
    assert local.returncode == 1 and "it names no registry" in local.stderr


@pytest.mark.engine
def test_index_trust_key_indexes_the_attested_arches(genuine, creds, keys, registry, tmp_path):
    # the shipped matrix declares this cell for x86_64 only: a matrix declaring both arches
    matrix_file = write_matrix(tmp_path, INDEX_REPO, arch="[x86_64, aarch64]")
    done = cli(creds, "index", f"{registry.host}/{INDEX_REPO}:{INDEX_TAG}", "--trust-key", str(keys["team"][1]),
               "--matrix", str(matrix_file), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    index = Registry(registry.host).manifest(INDEX_REPO, INDEX_TAG)
    assert sorted(m["digest"] for m in index.data["manifests"]) == sorted(genuine.values())


@pytest.mark.engine
def test_forgeries_with_identical_labels_are_refused_by_pull_run_and_index(genuine, creds, keys, registry, engine,
                                                                            images, tmp_path):
    reg = Registry(registry.host)
    pub = str(keys["team"][1])
    ref = f"{registry.host}/{REPO}:{TAG}"
    index_before = reg.manifest(INDEX_REPO, INDEX_TAG).digest
    shown = []
    for kind in ht.FORGERIES:
        forged = ht.forge(kind, engine, registry, images, REPO, genuine["x86_64"], keys)
        forged_there = ht.forge(kind, engine, registry, images, INDEX_REPO, genuine["x86_64"], keys)
        why = REFUSED_FOR[kind]
        if kind == "unsigned":  # labels alone would choose it
            naive = pull(creds, registry, tmp_path, "--json")
            assert naive.returncode == 0 and json.loads(naive.stdout)["digest"] == forged, naive.stderr
        refused = pull(creds, registry, tmp_path, "--trust-key", pub)
        assert refused.returncode == 1, refused.stdout
        assert f"  {TAG}: signed validation refused: " in refused.stderr and why in refused.stderr
        ran = run_print(creds, ref, tmp_path, "--trust-key", pub)
        assert ran.returncode == 1 and ran.stdout == ""
        assert f"error: {ref}: signed validation refused: " in ran.stderr and why in ran.stderr
        insecure = run_print(creds, ref, tmp_path, "--trust-key", pub, "--insecure")
        assert insecure.returncode == 0 and insecure.stdout.rstrip().endswith(f"{ref} python train.py")
        assert f"WARNING: --insecure: {ref} is NOT verified" in insecure.stderr and why in insecure.stderr
        index = cli(creds, "index", f"{registry.host}/{INDEX_REPO}:{INDEX_TAG}", "--trust-key", pub)
        assert index.returncode == 1
        assert f"{TAG} ({forged_there}): signed validation refused: " in index.stderr and why in index.stderr
        assert reg.manifest(INDEX_REPO, INDEX_TAG).digest == index_before  # nothing written
        shown.append(f"--- forgery: {kind}\n"
                     f"$ ascend-build pull --registry {registry.host}/{REPO} --variant cpu --cann 9.1.0 "
                     f"--trust-key team.pub\n{refused.stderr}"
                     f"$ ascend-build run --print --trust-key team.pub {ref} -- python train.py\n{ran.stderr}"
                     f"$ ascend-build run --print --trust-key team.pub --insecure {ref} -- python train.py\n"
                     f"{insecure.stderr}{insecure.stdout}"
                     f"$ ascend-build index {registry.host}/{INDEX_REPO}:{INDEX_TAG} --trust-key team.pub\n"
                     f"{index.stderr}")
    print("\n" + "\n".join(shown))


@pytest.mark.engine
def test_a_key_naming_no_file_is_refused_not_switched_off(genuine, creds, keys, registry, engine, images, tmp_path):
    """A stranger-signed image: `--trust-key .` and $ASCEND_BUILD_TRUST_KEY set to nothing used to mean
    "no key", and `run --print` printed its docker run (exit 0). Now each is refused, naming the option or
    variable; `run` and `index` print nothing and write nothing. With no key at all, labels decide, as before."""
    repo = REPO + "-keyless"
    forged = ht.push(engine, registry, images("forged-keyless"), repo, TAG)  # the genuine labels, a stranger's statement
    ht.attest_as(registry, repo, TAG, forged, keys["stranger"][0])
    ref = f"{registry.host}/{repo}:{TAG}"
    unset = {k: v for k, v in os.environ.items() if k != "ASCEND_BUILD_TRUST_KEY"}
    dot = run_print(creds, ref, tmp_path, "--trust-key", ".")
    empty = subprocess.run([CLI, "run", "--print", "--root", str(tmp_path), ref, "--", "python", "train.py"],
                           capture_output=True, text=True, timeout=300,
                           env={**unset, **creds, "ASCEND_BUILD_TRUST_KEY": ""})
    index = cli(creds, "index", f"{registry.host}/{repo}:{INDEX_TAG}", "--trust-key", ".")
    print(f"\n$ ascend-build run --print --trust-key . {ref} -- python train.py\n{dot.stderr}"
          f"$ ASCEND_BUILD_TRUST_KEY= ascend-build run --print {ref} -- python train.py\n{empty.stderr}"
          f"$ ascend-build index {registry.host}/{repo}:{INDEX_TAG} --trust-key .\n{index.stderr}")
    for done in (dot, empty, index):
        assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
    assert dot.stderr.startswith("error: --trust-key '.' is a folder, not the team's public key file\n")
    assert "or pass --insecure to start the image with no statement checked" in dot.stderr
    assert empty.stderr.startswith("error: ASCEND_BUILD_TRUST_KEY is set but empty: it names no public key file\n")
    assert index.stderr.startswith("error: --trust-key '.' is a folder, not the team's public key file\n")
    assert INDEX_TAG not in Registry(registry.host).tags(repo)
    # no option and the variable unset: no key, the labels decide (and the docker run names the image as given)
    keyless = subprocess.run([CLI, "run", "--print", "--root", str(tmp_path), ref, "--", "python", "train.py"],
                             capture_output=True, text=True, timeout=300, env={**unset, **creds})
    assert keyless.returncode == 0 and keyless.stdout.rstrip().endswith(f"{ref} python train.py"), keyless.stderr
