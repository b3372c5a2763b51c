"""Benchmark (not a test): faults, not bad input. Runs the real CLI (and, for the registry,
the real client) through four classes of fault and counts what they leave behind.

- killed: SIGKILL to `render` while it stages its files and while it renames them, to
  `record` at timed points, and to `image` (the test suite's CPU twin, cached) at each
  phase: build, smoke, seal, tag, push, index; each then run again.
- concurrent: two `render`s into one tree at once; two `image` runs of one cell on one
  state folder.
- disk full: `render`, a lock write and `record` onto a full tmpfs; `image` with its state
  folder on a 32 MiB tmpfs.
- registry faults: a real docker-registry behind tests/helpers_faults.FaultProxy: 503, 429,
  resets and 502 on reads, resets mid-push, and 500 or resets that persist.

Per class: faults injected, runs that recovered (the rerun completed; for the registry,
the retries completed the same run), runs that failed clearly (a refusal, a full disk, a
registry fault that never ends: the run that must fail, with its message), tags on
unvalidated images (must be 0), files corrupted (a file neither its old nor its new bytes,
a record that does not parse, a wrong or missing message; must be 0), and the worst time
to a clear failure.

Run: .venv/bin/python -m benchmarks.bench_faults [--no-engine]   (about 5 minutes with the engine;
     needs root for tmpfs mounts, docker-registry and htpasswd, and the engine unless --no-engine)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

sys.dont_write_bytecode = True

from tests.support import faults as hf
from builder import knowledge, writes
from builder.images import lock, matrix, relock
from builder.errors import UserError

ROOT = Path(__file__).resolve().parent.parent

SHIPPED_MATRIX = ROOT / "matrix" / "default.yaml"
SHIPPED_DOCKERFILES = ROOT / "dockerfiles"
DEMO = "cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64"
CLASSES = ("killed", "concurrent", "disk full", "registry faults")


@dataclass
class Row:
    faults: int = 0
    recovered: int = 0
    unvalidated_tags: int = 0
    corrupted: int = 0
    failures: List[float] = field(default_factory=list)  # seconds to each clear failure
    notes: List[str] = field(default_factory=list)

    def fail_in(self, seconds: float) -> None:
        self.failures.append(seconds)


def cli(argv, cwd: Path, env: Optional[Dict[str, str]] = None, timeout: float = 900) -> subprocess.CompletedProcess:
    return hf.Killable(argv, cwd, env).finish(timeout)


def _clean(done: subprocess.CompletedProcess, *must: str) -> bool:
    return "Traceback" not in done.stderr and all(m in done.stderr for m in must)


# --- without the engine ---------------------------------------------------------------------


def _matrices(folder: Path, cells: int = 120) -> List[Path]:
    from tests.support import generated_matrix as generated

    combos = generated.combinations()
    text = generated._yaml([generated._cell(i, k) for i, k in enumerate((combos * (cells // len(combos) + 1))[:cells])])
    out = []
    for name in ("a", "b"):
        (folder / f"{name}.yaml").write_text(f"image: fault-{name}/pytorch\n" + text)
        out.append(folder / f"{name}.yaml")
    return out


def killed_render_and_record(tmp: Path, row: Row) -> None:
    a, b = _matrices(tmp)
    ref = tmp / "ref"
    cli(["render", "--matrix", a, "--out", ref], tmp)
    tree_a = hf.tree(ref)
    cli(["render", "--matrix", b, "--out", ref], tmp)
    tree_b = hf.tree(ref)
    differ = [p for p in tree_a if tree_a[p] != tree_b.get(p)]
    for n, at in enumerate(("staging", "renaming", "staging", "renaming")):
        out = tmp / f"kill{n}"
        cli(["render", "--matrix", a, "--out", out], tmp)
        inodes = {p: os.stat(out / p).st_ino for p in differ}
        run = hf.Killable(["render", "--matrix", b, "--out", out], tmp)
        while run.proc.poll() is None:
            if at == "staging" and any(os.path.lexists(writes.temporary_name(out / p)) for p in differ):
                break
            if at == "renaming" and any(os.stat(out / p).st_ino != i for p, i in inodes.items()):
                break
        run.signal(signal.SIGKILL)
        run.finish(60)
        row.faults += 1
        now = hf.tree(out)
        row.corrupted += sum(d not in (tree_a.get(p), tree_b.get(p)) for p, d in now.items()
                             if not p.endswith(writes.TMP_SUFFIX))
        again = cli(["render", "--matrix", b, "--out", out], tmp)
        row.recovered += again.returncode == 0 and hf.tree(out) == tree_b
    folder = tmp / "ckpt"
    for delay in (0.2, 0.4, 0.6, 0.8):
        run = hf.Killable(["record", folder], tmp)
        time.sleep(delay)
        run.signal(signal.SIGKILL)
        run.finish(60)
        row.faults += 1
        for record in folder.glob("ascend-build-record*.json") if folder.exists() else ():
            try:
                json.loads(record.read_text())
            except ValueError:
                row.corrupted += 1
        before = len(list(folder.glob("ascend-build-record*.json"))) if folder.exists() else 0
        row.recovered += cli(["record", folder], tmp).returncode == 0 and \
            len(list(folder.glob("ascend-build-record*.json"))) == before + 1


def concurrent_renders(tmp: Path, row: Row) -> None:
    a, b = _matrices(tmp)
    for n in range(3):
        out = tmp / f"both{n}"
        cli(["render", "--matrix", a, "--out", out], tmp)
        runs = [hf.Killable(["render", "--matrix", b, "--out", out], tmp) for _ in range(2)]
        done = [r.finish(300) for r in runs]
        row.faults += 1
        refused = [d for d in done if d.returncode == 1]
        for d, r in zip(done, runs):
            if d.returncode == 1:
                row.fail_in(r.seconds)
        ok = len(refused) <= 1 and all(_clean(d, "another ascend-build run is writing into") for d in refused)
        row.corrupted += not ok
        expected = hf.tree(out)
        again = cli(["render", "--matrix", b, "--out", out], tmp)
        row.recovered += again.returncode == 0 and "(0 path(s) changed)" in again.stdout and hf.tree(out) == expected
    row.notes.append("renders: the second is refused at once, naming the first's PID")


def disk_full(tmp: Path, row: Row) -> None:
    try:
        with hf.small_fs("8m") as small:
            out = small / "out"
            cli(["render", "--out", out], tmp)
            before = hf.tree(out)
            filler = hf.fill(small)
            changed = tmp / "changed.yaml"
            changed.write_text(SHIPPED_MATRIX.read_text().replace("image: ", "image: full-disk-", 1))
            run = hf.Killable(["render", "--matrix", changed, "--out", out], tmp)
            done = run.finish(120)
            row.faults += 1
            row.fail_in(run.seconds)
            row.corrupted += hf.tree(out) != before or not _clean(done, "no space left on the file system of")
            folder = small / "ckpt"
            filler.unlink()
            folder.mkdir()
            filler = hf.fill(small)
            run = hf.Killable(["record", folder], tmp)
            done = run.finish(60)
            row.faults += 1
            row.fail_in(run.seconds)
            row.corrupted += bool(list(folder.iterdir())) or not _clean(done, "no space left on the file system of")
            filler.unlink()
            row.recovered += cli(["render", "--matrix", changed, "--out", out], tmp).returncode == 0
            row.recovered += cli(["record", folder], tmp).returncode == 0
            # a lock write (uv's resolution stood in by the shipped lock: no network needed)
            locks = small / "locks"
            (locks / DEMO).mkdir(parents=True)
            old = (SHIPPED_DOCKERFILES / DEMO / lock.LOCK_FILE).read_bytes()
            (locks / DEMO / lock.LOCK_FILE).write_bytes(old.replace(b"inputs:", b"inputs: stale", 1))
            before = hf.tree(locks)
            filler = hf.fill(small)
            demo = next(c for c in matrix.load(SHIPPED_MATRIX).cells if c.id == DEMO)
            shipped = lock.read(SHIPPED_DOCKERFILES / DEMO)
            started = time.monotonic()
            row.faults += 1
            try:
                relock.run([demo], knowledge.load(), locks, resolve=lambda inputs, **_: shipped)
                row.corrupted += 1  # it claimed success on a full disk
            except UserError as exc:
                row.fail_in(time.monotonic() - started)
                row.corrupted += hf.tree(locks) != before or "no space left" not in exc.message
            filler.unlink()
            relock.run([demo], knowledge.load(), locks, resolve=lambda inputs, **_: shipped)
            row.recovered += (locks / DEMO / lock.LOCK_FILE).read_bytes() == shipped_text(shipped)
    except hf.CannotMount as why:
        row.notes.append(f"no tmpfs here ({why}): render/record/lock not run")


def shipped_text(made) -> bytes:
    return made.text().encode()


def _serve_htpasswd_registry(root: Path) -> Tuple[Any, int, str, str]:
    """A real docker-registry on loopback with htpasswd auth, its data under ``root``, up and
    answering: (its process, port, user, password). Stop it with ``stop``."""
    from tests.support.loopback_registry import free_port, serve_registry, stop, wait_up

    user, password = "ascend", "pw-" + uuid.uuid4().hex[:8]
    (root / "htpasswd").write_text(subprocess.run(["htpasswd", "-Bbn", user, password], check=True,
                                                  capture_output=True, text=True).stdout)
    port = free_port()
    proc = serve_registry(root, "version: 0.1\nlog: {level: warn}\n"
                                 f"storage: {{filesystem: {{rootdirectory: {root / 'data'}}}}}\n"
                                 f"http: {{addr: '127.0.0.1:{port}', secret: bench}}\n"
                                 f"auth: {{htpasswd: {{realm: bench, path: {root / 'htpasswd'}}}}}\n")
    try:
        wait_up(proc, port, root)
    except BaseException:  # not up: never leave it running
        stop(proc)
        raise
    return proc, port, user, password


def registry_faults(tmp: Path, row: Row) -> None:
    from tests.support.loopback_registry import REGISTRY_BIN, stop

    from builder import registry as reg_module
    from builder.registry import Registry

    if not Path(REGISTRY_BIN).exists() or not shutil.which("htpasswd"):
        row.notes.append("no docker-registry/htpasswd: not run")
        return
    proc, port, user, password = _serve_htpasswd_registry(tmp)
    proxy = None
    try:
        proxy = hf.FaultProxy(f"127.0.0.1:{port}")
        direct = Registry(f"127.0.0.1:{port}", user, password)
        through = Registry(proxy.host, user, password)
        repository = f"faults/bench-{uuid.uuid4().hex[:8]}"
        hf.push_tiny_image(through, repository, "warm")

        for method, pattern, faults, action in (
                ("GET", r"/tags/list$", ["503", "429", "reset", "502"], lambda: through.tags(repository)),
                ("GET", r"/manifests/warm$", ["cut", "429:1"], lambda: through.manifest(repository, "warm")),
                ("PUT", r"/manifests/v1$", ["500", "reset"], lambda: hf.push_tiny_image(through, repository, "v1"))):
            proxy.plan(method, pattern, faults)
            row.faults += len(faults)
            try:
                action()  # the retries carry the same run through every fault
                row.recovered += len(faults)
            except UserError as exc:
                row.notes.append(f"{method} {pattern} did not recover: {exc.message}")
            proxy.plans.clear()
        for method, pattern, fault in (("GET", r"/tags/list$", "500"), ("PUT", r"/manifests/v2$", "reset")):
            proxy.plan(method, pattern, always=fault)
            row.faults += 1
            started = time.monotonic()
            try:
                if method == "GET":
                    through.tags(repository)
                else:
                    hf.push_tiny_image(through, repository, "v2")
                row.corrupted += 1  # it claimed success through a fault that never ended
            except UserError:
                row.fail_in(time.monotonic() - started)
            proxy.plans.clear()
        row.unvalidated_tags += "v2" in direct.tags(repository)  # a push that failed left a tag
        row.notes.append(f"registry: real backoff {reg_module.BACKOFF} s doubling, 5 tries")
    finally:
        if proxy is not None:
            proxy.stop()
        stop(proc)


# --- with the engine ------------------------------------------------------------------------


@contextlib.contextmanager
def engine_parts(tmp: Path):
    """(engine, registry client, host, credentials env) for the image runs, or None without an engine."""
    from tests.support.loopback_registry import REGISTRY_BIN, stop

    from builder.engine import Engine
    from builder.registry import Registry

    try:
        engine = Engine.connect()
    except UserError:
        yield None
        return
    root = tmp / "engine-registry"
    root.mkdir()
    proc, port, user, password = _serve_htpasswd_registry(root)
    try:
        assert REGISTRY_BIN
        yield engine, Registry(f"127.0.0.1:{port}", user, password), f"127.0.0.1:{port}", \
            {"ASCEND_BUILD_REGISTRY_USER": user, "ASCEND_BUILD_REGISTRY_PASSWORD": password}
    finally:
        stop(proc)


def image_faults(tmp: Path, rows: Dict[str, Row]) -> None:
    from tests.support import pipeline as e2e

    with engine_parts(tmp) as parts:
        if parts is None:
            for name in ("killed", "concurrent", "disk full"):
                rows[name].notes.append("no engine: image runs not done")
            return
        engine, client, host, creds = parts
        repo = f"ascend-build-bench/faults-{uuid.uuid4().hex[:8]}"
        family = e2e.CELL_ID[: -len("-x86_64")]
        try:
            _image_runs(tmp, rows, engine, client, host, creds, repo, family, e2e)
        finally:
            e2e.drop_images(engine, repo)


def _image_runs(tmp, rows, engine, client, host, creds, repo, family, e2e) -> None:
    env = e2e.cli_env(**creds)
    state = tmp / "state"
    matrix_file = e2e.write_matrix(tmp / "image", repo)

    def start(*extra: str, state_dir: Path = state) -> hf.Killable:
        return hf.Killable(e2e.image_args(matrix_file, state_dir, "local/debian:12", "--variant", "cpu", *extra),
                           tmp, env)

    killed = rows["killed"]
    phases = [("build", r"\] step \d+/\d+ "), ("smoke", r"\] smoke test on cpu"), ("seal", r"\] sealing"),
              ("tag", r"\] tagging "), ("push", r"\] pushing "), ("index", r"\] publishing the index ")]
    for phase, line in phases:
        if phase == "index":
            done = start("--push", host).finish()
            if done.returncode != 0:
                killed.notes.append(f"image run before the index phase failed: {done.stderr[-300:]}")
                return
            hf.put_stand_in_arm64(client, repo, family)
        if phase in ("build", "smoke", "seal"):  # an image sealed already is reused, never built or tested again
            e2e.drop_images(engine, repo)
        run = start("--push", host)
        if not run.wait_for(line):
            killed.notes.append(f"image never reached {phase}")
            run.finish()
            continue
        run.signal(signal.SIGKILL)
        run.finish(120)
        killed.faults += 1
        killed.unvalidated_tags += len(hf.unvalidated_tags(engine, client, repo))
        killed.corrupted += len(list(state.rglob("*" + writes.TMP_SUFFIX)))
        again = start("--push", host)  # the rerun must get past the phase its predecessor died in
        done = again.finish()
        killed.recovered += done.returncode == 0
    killed.unvalidated_tags += len(hf.unvalidated_tags(engine, client, repo))
    killed.notes.append("image: SIGKILL to the process group at build, smoke, seal, tag, push and index")

    both = rows["concurrent"]
    first = start()
    if first.wait_for(r"building cpu image"):
        second = start()
        refused = second.finish()
        first_done = first.finish()
        both.faults += 1
        outcome = json.loads(refused.stdout or "[{}]")[0]
        if str(outcome.get("message", "")).startswith("another ascend-build run is building"):
            both.fail_in(second.seconds)
        else:
            both.corrupted += 1  # not refused: two runs wrote one image's state at once
        both.recovered += first_done.returncode == 0 and start().finish().returncode == 0
        both.unvalidated_tags += len(hf.unvalidated_tags(engine, client, repo))

    full = rows["disk full"]
    try:
        with hf.small_fs("32m") as small:
            e2e.drop_images(engine, repo)  # built afresh: the build context must not fit
            run = start(state_dir=small / "state")
            done = run.finish()
            full.faults += 1
            full.fail_in(run.seconds)
            message = json.loads(done.stdout or "[{}]")[0].get("message", "")
            full.corrupted += not message.startswith("no space left on the file system of")
            full.unvalidated_tags += len(hf.unvalidated_tags(engine, client, repo))
        full.recovered += start(state_dir=tmp / "state-roomy").finish().returncode == 0
    except hf.CannotMount as why:
        full.notes.append(f"no tmpfs ({why})")


# --- report -------------------------------------------------------------------------------------


def print_table(rows: Dict[str, Row]) -> None:
    head = ["class", "faults", "recovered on rerun", "failed clearly", "tags on unvalidated", "files corrupted",
            "worst s to clear failure"]
    lines = [[name, str(r.faults), str(r.recovered), str(len(r.failures)), str(r.unvalidated_tags), str(r.corrupted),
              f"{max(r.failures):.1f}" if r.failures else "-"] for name, r in rows.items()]
    total = [sum(int(line[i]) for line in lines) for i in range(1, 6)]
    worst = max((max(r.failures) for r in rows.values() if r.failures), default=0.0)
    lines.append(["total", *map(str, total), f"{worst:.1f}"])
    widths = [max(len(x[i]) for x in lines + [head]) for i in range(len(head))]
    fmt = lambda x: "  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(x, widths)))  # noqa
    print(fmt(head))
    for line in lines[:-1]:
        print(fmt(line))
    print("  ".join("-" * w for w in widths))
    print(fmt(lines[-1]))
    for name, r in rows.items():
        for note in r.notes:
            print(f"  {name}: {note}")


def main(engine: bool = True) -> Dict[str, str]:
    started = time.monotonic()
    rows = {name: Row() for name in CLASSES}
    with tempfile.TemporaryDirectory(prefix="ascend-bench-faults-") as folder:
        tmp = Path(folder)
        for name, step in (("killed", killed_render_and_record), ("concurrent", concurrent_renders),
                           ("disk full", disk_full), ("registry faults", registry_faults)):
            part = tmp / name.replace(" ", "-")
            part.mkdir()
            print(f"{name} ...", flush=True)
            step(part, rows[name])
        if engine:
            print("image runs ...", flush=True)
            (tmp / "image").mkdir()
            image_faults(tmp, rows)
    print()
    print_table(rows)
    elapsed = time.monotonic() - started
    print(f"total time {elapsed:.0f} s")
    bad = sum(r.unvalidated_tags + r.corrupted for r in rows.values())
    return {
        "faults injected / recovered": f"{sum(r.faults for r in rows.values())} / {sum(r.recovered for r in rows.values())}",
        "tags on unvalidated images / files corrupted": f"{sum(r.unvalidated_tags for r in rows.values())} / "
                                                         f"{sum(r.corrupted for r in rows.values())}",
        "worst time to a clear failure": f"{max((max(r.failures) for r in rows.values() if r.failures), default=0):.1f} s",
        "fault verdict": "clean" if bad == 0 else "NOT clean",
        "fault suite time": f"{elapsed:.0f} s",
    }


if __name__ == "__main__":
    figures = main(engine="--no-engine" not in sys.argv[1:])
    sys.exit(0 if figures["fault verdict"] == "clean" else 1)
