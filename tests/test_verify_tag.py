"""A tag cannot lie to `verify`: one cell's signed image under another cell's tag is refused.

Against the loopback docker-registry (htpasswd auth; no Docker Engine: the image is a config and
one layer put by the registry API) with real P-256 signatures: the genuine image of the Debian 12
x86_64 twin, its validation statement signed with the team's key, is also tagged as the aarch64
twin and as the x86_64 NPU image. `verify` of those tags exits 1 naming the cell the statement is
about and the one the tag names (in `--json` too); the genuine tag, the digest and a tag naming
no cell still verify. `run --trust-key` of the lying tag is refused as well.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid

import pytest

from builder.images import attest
from builder.registry import OCI_MANIFEST, Registry
from builder.trust import signing
from builder.vocabulary import CPU, NPU, tier_names
from tests.support import trust as ht
from tests.support.trust import CELL_ID, CLI, TAG  # the fixtures (creds, keys) come from the plugin tests/conftest.py names

REPO = f"ascend-build-test/verify-tag-{uuid.uuid4().hex[:8]}"
ARM_CELL = CELL_ID[: -len("x86_64")] + "aarch64"
ARM_TAG = ARM_CELL + "-" + CPU        # another cell's twin
NPU_TAG = CELL_ID                     # the same cell's NPU image


@pytest.fixture(scope="module")
def genuine(registry, creds, keys):
    """The twin's image under its own tag, attested with the team's key, and also under two tags it is not."""
    reg = Registry(registry.host)
    digest = ht.put_tiny_image(reg, REPO, TAG)
    ht.attest_as(registry, REPO, TAG, digest, keys["team"][0])
    body = reg.manifest(REPO, digest).body
    for tag in (ARM_TAG, NPU_TAG, "latest"):
        assert reg.put_manifest(REPO, tag, body, OCI_MANIFEST) == digest
    return digest


def verify(registry, creds, keys, reference: str, *extra: str) -> subprocess.CompletedProcess:
    done = subprocess.run([CLI, "verify", f"{registry.host}/{REPO}{reference}", "--key", str(keys["team"][1]), *extra],
                          capture_output=True, text=True, timeout=120, env={**os.environ, **creds})
    assert "Traceback" not in done.stderr, done.stderr
    return done


def test_another_cells_tag_is_refused_naming_both_cells(genuine, registry, creds, keys):
    done = verify(registry, creds, keys, f":{ARM_TAG}")
    print(f"\n$ ascend-build verify {registry.host}/{REPO}:{ARM_TAG} --key team.pub\n{done.stdout}{done.stderr}")
    assert done.returncode == 1
    assert (f"NOT verified: the tag names cell {ARM_CELL} (cpu), but its validation statement is about "
            f"cell {CELL_ID} (cpu): another cell's image under this cell's tag\n") in done.stderr
    assert "verified: a validation statement" not in done.stdout
    as_json = verify(registry, creds, keys, f":{ARM_TAG}", "--json")
    result = json.loads(as_json.stdout)
    assert as_json.returncode == 1 and result["validated"] is False
    assert result["tag_names"] == {"cell": ARM_CELL, "variant": CPU}
    assert result["tag_mismatch"]["tagNames"] == {"cell": ARM_CELL, "variant": CPU}
    assert result["tag_mismatch"]["statementIsAbout"] == [{"cell": CELL_ID, "variant": CPU}]
    assert result["why_not"] == result["tag_mismatch"]["why"]


def test_the_npu_images_tag_is_refused_for_the_twins_statement(genuine, registry, creds, keys):
    done = verify(registry, creds, keys, f":{NPU_TAG}", "--json")
    result = json.loads(done.stdout)
    assert done.returncode == 1
    assert result["tag_mismatch"]["tagNames"] == {"cell": CELL_ID, "variant": NPU}
    assert result["tag_mismatch"]["statementIsAbout"] == [{"cell": CELL_ID, "variant": CPU}]


def test_the_genuine_tag_the_digest_and_a_tag_naming_no_cell_still_verify(genuine, registry, creds, keys):
    own = verify(registry, creds, keys, f":{TAG}", "--json")
    result = json.loads(own.stdout)
    assert own.returncode == 0 and result["validated"] and result["tag_mismatch"] is None, own.stdout + own.stderr
    assert result["tag_names"] == {"cell": CELL_ID, "variant": CPU}
    text = verify(registry, creds, keys, f":{TAG}")
    assert text.returncode == 0
    assert (f"verified: a validation statement about this digest, signed by this key, says passed, about cell "
            f"{CELL_ID} (cpu) as its tag names") in text.stdout
    for reference in (f"@{genuine}", ":latest"):  # a digest, or a tag that names no cell, claims no cell
        done = verify(registry, creds, keys, reference, "--json")
        result = json.loads(done.stdout)
        assert done.returncode == 0 and result["tag_names"] is None and result["tag_mismatch"] is None, done.stdout


def test_a_statement_about_the_tags_cell_beside_another_validates(genuine, registry, creds, keys):
    """Two statements on one digest, one about the cell its tag names and its labels say: that one decides.
    The same two on an image whose labels say the other cell: neither satisfies both the tag and the labels."""
    reg = Registry(registry.host)
    key = signing.load_private(keys["team"][0])
    for arch, verdict in (("aarch64", 0), ("x86_64", 1)):
        digest = ht.put_tiny_image(reg, REPO, "both-" + uuid.uuid4().hex[:6], ht.sealed_twin_labels(arch))
        for cell in (CELL_ID, ARM_CELL):
            attest.attest(f"{registry.host}/{REPO}:{ARM_TAG}", digest,
                          attest.statements_for(ht.report(), tier_names(), cell, CPU, ht.CONTENT_HASH, None), key)
        tag = f"{ARM_TAG}-on-os{len(arch)}"  # a stand-in twin's tag: it names the aarch64 twin too
        reg.put_manifest(REPO, tag, reg.manifest(REPO, digest).body, OCI_MANIFEST)
        done = verify(registry, creds, keys, f":{tag}", "--json")
        result = json.loads(done.stdout)
        assert done.returncode == verdict, done.stdout
        assert result["tag_names"] == {"cell": ARM_CELL, "variant": CPU}
        if verdict:
            assert "the image's labels say" in result["why_not"] and "the tag names cell" in result["why_not"]


def test_run_of_another_cells_tag_is_refused_too(genuine, registry, creds, keys, tmp_path):
    """`run --trust-key` of a tag checks the statement against the tag as well as the labels: here both
    agree (the genuine image's), the tag does not. Refused before anything starts (no engine needed)."""
    ref = f"{registry.host}/{REPO}:{ARM_TAG}"
    done = subprocess.run([CLI, "run", "--print", "--root", str(tmp_path), "--trust-key", str(keys["team"][1]), ref],
                          capture_output=True, text=True, timeout=120, env={**os.environ, **creds})
    assert done.returncode == 1 and done.stdout == "", done.stdout + done.stderr
    assert done.stderr.startswith(f"error: {ref}: signed validation refused: the tag names cell {ARM_CELL} (cpu), "
                                  f"but its validation statement is about cell {CELL_ID} (cpu): another cell's image "
                                  "under this cell's tag\n"), done.stderr
