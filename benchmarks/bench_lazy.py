"""Benchmark (not a test): the eStargz variant. What its prefetch list costs, what the conversion adds,
and how many bytes a lazy start reads before `import torch` succeeds and before the first step.

The image (said in the figures), the first that can be had:

- the **CPU twin** of a shipped cell of this host's arch, when the Docker Engine holds it sealed: its
  file list recorded by this checkout's smoke program run inside it (mounted over the image's own,
  which may predate the recorder), tiers import, device and train; pushed by the engine;
- with ``ASCEND_BUILD_TORCH_PYTHON`` set (a Python with torch), a **torch image** made here through
  the registry API: one layer holding that Python's whole environment (``sys.prefix``: torch and its
  dependencies) and one holding the base Python's standard library and the system libraries the run
  maps; its list recorded by the smoke program run with that Python on this machine;
- else a **synthetic image** (random bytes in 200 files, a fixed 3% of them as the list): its figures
  show the mechanics only, the share is the construction's.

All three are CPU runs (no CANN, no torch_npu): an NPU image's list and share are not measured.

Steps, all on loopback against a docker-registry of the benchmark's own (no auth):

1. put the image (gzip layers, level 6 as Docker writes them);
2. `builder.images.lazy.convert` (ctr-remote under a containerd of its own, the list first);
3. figures: the list's share of the image's compressed bytes (the compressed chunks of its files in
   the variant over the validated image's compressed layers; goal <= 5%), the variant's size
   overhead (goal <= 1%), the bytes the eStargz reader (`builder.estargz`, by HTTP Range, every
   chunk checked) fetches before the import tier's files are all there and before the train tier's
   are, and the time to the first step: the reader's fetch of those files + the smoke run's own
   seconds for its import, device and train tiers (10 steps: more than to the first step), against a
   full pull (every layer fetched and unpacked) + the same seconds.

**The reader stands in for a lazy snapshotter** (containerd-stargz-grpc, not in Debian's package):
it fetches what the recorded run read, file by file, as a snapshotter's prefetch would, but nothing
runs on a lazily mounted file system here, and no file outside the list is fetched on demand.
No bandwidth limit is set: the times are loopback times (the fetch is bounded by this machine's
CPU, not by a network); the byte counts are what a network would carry.

Run: .venv/bin/python -m benchmarks.bench_lazy [--no-twin]   (needs containerd, ctr-remote, docker-registry)
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zlib
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from builder import estargz
from builder.engine import Engine
from builder.errors import UserError
from builder.images import lazy, matrix, smoke_run
from builder.images.prepare import host_arch
from builder.registry import OCI_MANIFEST, Registry
from builder.vocabulary import CPU, DEFAULT_IMAGE, SMOKE_PROGRAM, TOOL_DIR, Label, recorded_tiers, release_tag
from tests.support.lazy import CONFIG, LAYER_GZIP, own_registry, tools_here

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ROOT / "builder" / "smoke" / "smoke.py"
REPO = "bench/lazy"
TORCH_ENV = "ASCEND_BUILD_TORCH_PYTHON"
SYNTHETIC_FILES, SYNTHETIC_BYTES, SYNTHETIC_SHARE = 200, 64 << 20, 0.03


def _tar_folder_files(out: Path, files: Sequence[Tuple[str, Path]]) -> Path:
    """A gzip layer (level 6) at ``out`` of ``files`` ((name in the image, file here)), with their folders."""
    with open(out, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        done = set()
        for name, path in files:
            for parent in reversed(Path(name).parents):
                text = str(parent)
                if text != "." and text not in done:
                    done.add(text)
                    info = tarfile.TarInfo(text + "/")
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
            if name not in done:
                done.add(name)
                tar.add(str(path), arcname=name, recursive=False)
    return out


def smoke_files(python: str, work: Path) -> Tuple[Dict[str, List[str]], float]:
    """The smoke program's import/device/train tiers run with ``python``: the report's ``files_read``
    and the seconds of those three tiers."""
    manifest = work / "manifest.json"
    manifest.write_text(json.dumps({"schema": 1, "cell": "bench", "variant": "cpu", "env": {}}))
    done = subprocess.run([python, str(SMOKE), "--manifest", str(manifest), "--device", "cpu", "--steps", "10",
                           "--tiers", ",".join(recorded_tiers())], capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "ASCEND_BUILD_SMOKE_TEST": "1"})
    report = json.loads(done.stdout.splitlines()[-1])
    failed = [t["name"] for t in report["tiers"] if t["status"] != "passed"]
    if failed:
        raise SystemExit(f"the smoke tiers {failed} did not pass with {python}: {done.stderr[-2000:]}")
    return report["files_read"], sum(t["seconds"] for t in report["tiers"])


def torch_image(python: str, work: Path) -> Tuple[List[Path], Dict[str, List[str]], float, str]:
    """Layers, file lists, the run's seconds and what the image is, from the torch Python ``python``."""
    files_read, seconds = smoke_files(python, work)
    prefix = subprocess.run([python, "-c", "import sys; print(sys.prefix); print(sys.base_prefix)"],
                            capture_output=True, text=True, check=True).stdout.split()
    env, base = Path(prefix[0]).resolve(), Path(prefix[1]).resolve()

    def walk(root: Path) -> List[Tuple[str, Path]]:
        found = []
        for folder, _, names in os.walk(root):
            for name in sorted(names):
                path = Path(folder) / name
                if path.is_file() or path.is_symlink():
                    found.append((str(path).lstrip("/"), path))
        return sorted(found)

    venv = walk(env)
    inside = {name for name, _ in venv}
    stdlib = [(n, p) for n, p in walk(base / "lib") if "site-packages" not in n] + walk(base / "bin")
    system = [(p.lstrip("/"), Path(p)) for tier in files_read.values() for p in tier
              if p.lstrip("/") not in inside and not p.startswith(str(base)) and Path(p).is_file()]
    seen = set()
    first = [(n, p) for n, p in stdlib + system if not (n in seen or seen.add(n))]  # type: ignore[func-returns-value]
    layers = [_tar_folder_files(work / "base.tar.gz", first), _tar_folder_files(work / "env.tar.gz", venv)]
    what = (f"torch image: {env} ({len(venv)} files) + {base}'s standard library and the system libraries "
            f"the run mapped ({len(first)} files); list recorded by the smoke program's import/device/train tiers")
    return layers, files_read, seconds, what


def synthetic_image(work: Path, seed: int = 36) -> Tuple[List[Path], Dict[str, List[str]], float, str]:
    rng = random.Random(seed)
    sizes = [max(1, int(rng.paretovariate(1.2) * 40_000)) for _ in range(SYNTHETIC_FILES)]
    scale = SYNTHETIC_BYTES / sum(sizes)
    folder = work / "synthetic"
    files = []
    for index, size in enumerate(sizes):
        path = folder / f"usr/lib/pkg{index % 7}/file{index}.so"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.randbytes(max(1, int(size * scale))))
        files.append((str(path.relative_to(folder)), path))
    chosen, total = [], 0
    for name, path in sorted(files, key=lambda f: f[1].stat().st_size):
        if total + path.stat().st_size > SYNTHETIC_SHARE * SYNTHETIC_BYTES:
            break
        chosen.append("/" + name)
        total += path.stat().st_size
    half = len(chosen) // 2
    return ([_tar_folder_files(work / "synthetic.tar.gz", files)], {"import": chosen[:half], "train": chosen[half:]},
            0.0, f"synthetic image: {len(files)} files of random bytes, {SYNTHETIC_BYTES >> 20} MiB; a list of "
                 f"{len(chosen)} files ({SYNTHETIC_SHARE:.0%} of the bytes, chosen by the benchmark)")


def put_layers(registry: Registry, layers: List[Path]) -> str:
    described, diff_ids = [], []
    for path in layers:
        digest, raw = hashlib.sha256(), hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        with gzip.open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                raw.update(block)
        name, size = "sha256:" + digest.hexdigest(), path.stat().st_size
        registry.put_blob_stream(REPO, name, size, lambda p=path: open(p, "rb"))  # type: ignore[misc]
        described.append({"mediaType": LAYER_GZIP, "size": size, "digest": name})
        diff_ids.append("sha256:" + raw.hexdigest())
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                         "rootfs": {"type": "layers", "diff_ids": diff_ids}}).encode()
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                "config": {"mediaType": CONFIG, "size": len(config), "digest": registry.put_blob(REPO, config)},
                "layers": described}
    return registry.put_manifest(REPO, "validated", json.dumps(manifest).encode(), OCI_MANIFEST)


def full_pull_seconds(registry: Registry, layers: List[Dict]) -> float:
    """Every layer fetched and unpacked (gunzip + tar read to the end), as a pull before a run does."""
    started = time.monotonic()
    for layer in layers:
        with registry.open_blob(REPO, layer["digest"], int(layer["size"])) as stream:
            inflater = zlib.decompressobj(31)
            while True:
                block = stream.read(1 << 20)
                if not block:
                    break
                inflater.decompress(block)
                while inflater.eof and inflater.unused_data:  # the next gzip member
                    rest = inflater.unused_data
                    inflater = zlib.decompressobj(31)
                    inflater.decompress(rest)
    return time.monotonic() - started


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def twin_ref(engine) -> Optional[str]:
    """The sealed CPU twin of a shipped cell of this host's arch on the engine, if one is there."""
    for cell in matrix.load(ROOT / "matrix").cells:
        ref = f"{DEFAULT_IMAGE}:{release_tag(cell.id, CPU)}"
        if cell.arch == host_arch() and engine.image_id(ref) and engine.labels(ref).get(Label.VALIDATED) == "true":
            return ref
    return None


def twin_image(engine, ref: str) -> Tuple[Callable[[Registry], str], Dict[str, List[str]], float, str]:
    """The twin ``ref``: its file list from this checkout's smoke program run inside it (mounted over the
    image's own, which predates the recorder), and a function that pushes it to a registry."""
    mounts = [(str(SMOKE), SMOKE_PROGRAM, True), (str(SMOKE.parent.parent / "vocabulary.py"), f"{TOOL_DIR}/vocabulary.py", True)]
    report, _ = smoke_run.smoke(engine, ref, CPU, recorded_tiers(), [], mounts, ("--steps", "10"))
    failed = [t.get("name") for t in report.get("tiers", []) if t.get("status") != "passed"]
    if failed or "files_read" not in report:
        raise SystemExit(f"the smoke tiers {failed} did not pass in {ref}, or it recorded no files: {report}")
    image_id = engine.image_id(ref) or ref

    def push(registry: Registry) -> str:
        target = f"{registry.name}/{REPO}:validated"
        engine.tag(image_id, target)
        try:
            return engine.push(target)
        finally:
            engine.untag(target)

    seconds = sum(float(t.get("seconds") or 0) for t in report["tiers"])
    return push, report["files_read"], seconds, (f"the CPU twin {ref} ({image_id[:19]}), pushed by the engine; list "
                                                 "recorded by this checkout's smoke program inside it (import, device, "
                                                 "train tiers)")


def measure(work: Path, put: Callable[[Registry], str], files_read: Dict[str, List[str]], run_seconds: float,
            what: str) -> Dict[str, str]:
    with own_registry(work / "registry") as registry:
        validated = put(registry)
        wanted = [p for tier in recorded_tiers() for p in files_read.get(tier, [])]
        started = time.monotonic()
        lazy.convert(work / "lazy", registry.name, REPO, validated, "validated-estargz", wanted)
        convert_seconds = time.monotonic() - started
        original = registry.manifest(REPO, "validated").data["layers"]
        variant = registry.manifest(REPO, "validated-estargz").data["layers"]
        size, lazy_size = sum(int(x["size"]) for x in original), sum(int(x["size"]) for x in variant)
        readers = [estargz.from_registry(registry, REPO, descriptor) for descriptor in variant]
        toc_bytes = sum(r.counter.bytes for r in readers)
        listed = sum(r.bytes_of(wanted) for r in readers)
        started = time.monotonic()
        for reader in readers:
            reader.read_files(files_read.get("import", []))
        import_bytes = sum(r.counter.bytes for r in readers)  # the TOCs' included
        for reader in readers:
            reader.read_files(files_read.get("device", []) + files_read.get("train", []))
        lazy_fetch = time.monotonic() - started
        step_bytes = sum(r.counter.bytes for r in readers)
        requests = sum(r.counter.requests for r in readers)
        full = full_pull_seconds(registry, original)
    lazy_start, full_start = lazy_fetch + run_seconds, full + run_seconds
    print(f"image: {what}")
    print(f"  layers {len(original)}: {size} bytes compressed; variant {lazy_size} bytes; conversion {convert_seconds:.0f} s")
    print(f"  list: {len(wanted)} files, {listed} compressed bytes in the variant; TOCs {toc_bytes} bytes")
    print(f"  reader: {import_bytes} bytes before import, {step_bytes} before the first step, {requests} requests")
    print(f"  time to first step: reader {lazy_start:.1f} s (fetch {lazy_fetch:.1f} s + run {run_seconds:.1f} s); "
          f"full pull {full_start:.1f} s (fetch+unpack {full:.1f} s + run {run_seconds:.1f} s)")
    return {
        "image": what,
        "prefetch list / image compressed bytes": f"{listed / size:.1%} ({_mib(listed)} of {_mib(size)}; goal <= 5%)",
        "variant size overhead": f"{(lazy_size - size) / size:+.2%} ({lazy_size - size} bytes; goal <= 1%)",
        "bytes by Range before import succeeds": f"{_mib(import_bytes)} ({import_bytes / size:.1%} of the image; TOCs "
                                                 f"{toc_bytes} bytes)",
        "bytes by Range before the first training step": f"{_mib(step_bytes)} ({step_bytes / size:.1%} of the image, "
                                                         f"{requests} requests)",
        "time to first step: reader vs full pull + run (loopback)": (
            f"{lazy_start:.1f} s vs {full_start:.1f} s ({full_start / lazy_start:.1f}x; run {run_seconds:.1f} s in both; "
            "goal >= 5x)" if lazy_start > 0 else "n/a"),
        "eStargz conversion (ctr-remote, 2 cores)": f"{convert_seconds:.0f} s for {_mib(size)} compressed",
    }


def main(python: Optional[str] = None, use_twin: bool = True) -> Dict[str, str]:
    why = tools_here()
    if why:
        raise SystemExit(why)
    python = python if python is not None else os.environ.get(TORCH_ENV, "")
    work = Path(tempfile.mkdtemp(prefix="bench-lazy-"))
    try:
        engine, twin = _engine_twin() if use_twin else (None, None)
        if engine is not None and twin is not None:
            return measure(work, *twin_image(engine, twin))
        layers, files_read, seconds, what = torch_image(python, work) if python else synthetic_image(work)
        return measure(work, lambda registry: put_layers(registry, layers), files_read, seconds, what)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _engine_twin():
    try:
        engine = Engine.connect()
    except UserError:
        return None, None
    return engine, twin_ref(engine)


if __name__ == "__main__":
    main(use_twin="--no-twin" not in sys.argv[1:])
