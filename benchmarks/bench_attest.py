"""Benchmark (not a test): what signing costs per image, attach and verify, median of 10.

Starts Debian's docker-registry on loopback (no auth), writes a small image into it through
the distribution API (a config and one layer: what `attest` reads of an image is its
manifest), then for each run: a new image digest, `attest.attest` (sign the validation
statement and the SLSA provenance, attach both in cosign's .att layout) and
`attached.verify` (read them back, check both), timed apart, in-process (the CLI adds
Python's start-up, about 0.3 s). Real signatures, real HTTP.

Run: .venv/bin/python -m benchmarks.bench_attest   (needs /usr/bin/docker-registry)
"""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Dict, Tuple

from builder.trust import attached, policy, signing, statements
from builder.images import attest
from builder.registry import OCI_MANIFEST, Registry
from builder.vocabulary import Label, tier_names

ROOT = Path(__file__).resolve().parent.parent

RUNS = 10
GOAL = 1.0
REPO = "bench/attest"
REPORT = {"passed": True, "exit_code": 0, "device": "cpu", "host": {}, "started": "2026-12-01T10:00:00+00:00",
          "tiers": [{"name": t, "status": "passed", "summary": f"{t} ok"} for t in tier_names()],
          "base_image": {"ref": "local/debian:12", "id": "sha256:" + "11" * 32, "digests": []}}
PROOF = attest.Evidence("cell", "cpu", "x86_64", "matrix/default.yaml", "22" * 32, "33" * 32, "ok", (), "local/debian:12")


def _registry(folder: Path) -> Tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (folder / "config.yml").write_text(
        "version: 0.1\nlog: {level: warn}\n"
        f"storage: {{filesystem: {{rootdirectory: {folder / 'data'}}}}}\n"
        f"http: {{addr: '127.0.0.1:{port}', secret: bench-only}}\n")
    proc = subprocess.Popen(["/usr/bin/docker-registry", "serve", str(folder / "config.yml")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for _ in range(200):
        try:
            opener.open(f"http://127.0.0.1:{port}/v2/", timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    return proc, f"127.0.0.1:{port}"


def _image(registry: Registry, n: int) -> str:
    """A small image of its own (its layer differs per run); its manifest digest."""
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Labels": {"n": str(n)}},
                         "rootfs": {"type": "layers", "diff_ids": []}}).encode()
    layer = f"layer {n}".encode()
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "size": len(config),
                           "digest": registry.put_blob(REPO, config)},
                "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "size": len(layer),
                            "digest": registry.put_blob(REPO, layer)}]}
    return registry.put_manifest(REPO, f"run-{n}", json.dumps(manifest).encode(), OCI_MANIFEST)


def main() -> Dict[str, str]:
    with tempfile.TemporaryDirectory(prefix="ascend-bench-attest-") as tmp:
        folder = Path(tmp)
        if signing.encrypting():
            raise SystemExit(f"unset {signing.PASSPHRASE_ENV}: the benchmark makes a plain key")
        key = signing.load_private(signing.generate(folder / "keys", "bench")[0])
        proc, host = _registry(folder)
        try:
            registry, attach_s, verify_s = Registry(host), [], []
            predicates = attest.statements_for(REPORT, tier_names(), "cell", "cpu", "h", PROOF)
            for n in range(RUNS):
                digest = _image(registry, n)
                start = time.monotonic()
                attest.attest(f"{host}/{REPO}:run-{n}", digest, predicates, key)
                attach_s.append(time.monotonic() - start)
                start = time.monotonic()
                result = attached.verify(Registry(host), REPO, digest, key.public_key())
                verify_s.append(time.monotonic() - start)
                why = policy.judge(result, {Label.CELL: "cell", Label.VARIANT: "cpu"})
                if why or len(result.verified(statements.SLSA_PROVENANCE_V1)) != 1:
                    raise SystemExit(f"run {n} did not verify: {why}")
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    a, v = statistics.median(attach_s), statistics.median(verify_s)
    print(f"attach (sign 2 statements, upload, .att manifest): median {a:.3f} s, max {max(attach_s):.3f} s")
    print(f"verify (read .att, 2 envelopes, check both):       median {v:.3f} s, max {max(verify_s):.3f} s")
    print(f"per image {a + v:.3f} s; goal < {GOAL:.0f} s: {'met' if a + v < GOAL else 'NOT met'}")
    return {f"attach + verify per image, median of {RUNS}": f"{a:.3f} s + {v:.3f} s (goal < {GOAL:.0f} s)"}


if __name__ == "__main__":
    main()
