"""Benchmark (not a test): faults, not bad input. Runs the real CLI (and, for the registry,
the real client) through four classes of fault and counts what they leave behind.

- killed: SIGKILL to `render` while it stages its files and while it renames them, to
  `record` at timed points, and to `image` (the test suite's CPU twin, cached) at each
  phase: build, smoke, seal, tag, push, index; each then run again.
- concurrent: two `render`s into one tree at once; two `image` runs of one cell on one
  state folder; two `image --push --sign-key` runs of one cell with two state folders (a digest a
  run reports must be its own image: none attests the other's).
- disk full: `render`, a lock write and `record` onto a full tmpfs; `image` with its state
  folder on a 32 MiB tmpfs (its free space check must refuse it before the build).
- registry faults: a real docker-registry behind tests/support/faults.FaultProxy: 503, 429,
  resets and 502 on reads, resets mid-push, and 500 or resets that persist.
- stall: the same proxy takes the request and never answers: a registry read and the `verify`
  and `pull` CLIs under a 3 s deadline, and (with the engine) the engine's push under a 4 s
  one; each must end within its deadline plus a margin, saying so, with no tag pushed.
- keys, full disk: `keys generate` onto a full tmpfs (0, 100 and 300 bytes left): no file may
  be left behind; after room is made the same command must succeed.
- truncated lock: the demo cell's lock cut between two entries, after one entry, in the middle
  of a line and with its last line gone: `lock --check` must refuse each, naming the file.
- kill at random points: `image` of the CPU twin, its main process alone SIGKILLed at a random
  moment (seeded) of the build and of the seal, twice each; after the next run, no
  `ascend-build-secrets-*` folder may be left in the runs' TMPDIR and no `docker build` of the
  killed run may be alive.

Per class: faults injected, runs that recovered (the rerun completed; for the registry,
the retries completed the same run), runs that failed clearly (a refusal, a full disk, a
registry fault that never ends: the run that must fail, with its message), tags on
unvalidated images (must be 0), files corrupted (a file neither its old nor its new bytes,
a record that does not parse, a wrong or missing message, a key file left by a failed
generate, a damaged lock called whole; must be 0), secrets left (must be 0), orphaned
`docker build` processes (must be 0), and the worst time to a clear failure.

Run: .venv/bin/python -m benchmarks.bench_faults [--no-engine]   (about 10 minutes with the engine;
     needs root for tmpfs mounts, docker-registry and htpasswd, and the engine unless --no-engine)
"""

from __future__ import annotations

import contextlib
import json
import os
import random
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
CLASSES = ("killed", "concurrent", "disk full", "registry faults", "stall", "keys, full disk", "truncated lock",
           "kill at random points")
SEED = 34  # the random kill moments: the same on every run of the benchmark


@dataclass
class Row:
    faults: int = 0
    recovered: int = 0
    unvalidated_tags: int = 0
    corrupted: int = 0
    secrets_left: int = 0
    orphans: int = 0
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


@contextlib.contextmanager
def _behind_a_fault_proxy(tmp: Path, row: Row):
    """A registry with htpasswd auth behind a `FaultProxy`: (proxy, port, user, password), both
    stopped at the end; None (and a note in ``row``) without docker-registry or htpasswd."""
    from tests.support.loopback_registry import REGISTRY_BIN, stop

    if not Path(REGISTRY_BIN).exists() or not shutil.which("htpasswd"):
        row.notes.append("no docker-registry/htpasswd: not run")
        yield None
        return
    proc, port, user, password = _serve_htpasswd_registry(tmp)
    proxy = None
    try:
        proxy = hf.FaultProxy(f"127.0.0.1:{port}")
        yield proxy, port, user, password
    finally:
        if proxy is not None:
            proxy.stop()
        stop(proc)


def registry_faults(tmp: Path, row: Row) -> None:
    from builder import registry as reg_module
    from builder.registry import Registry

    with _behind_a_fault_proxy(tmp, row) as served:
        if served is None:
            return
        proxy, port, user, password = served
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


def stalls(tmp: Path, row: Row) -> None:
    """A registry that takes each request and never answers: every read ends at its command's deadline."""
    from builder import bounded
    from builder.registry import Registry
    from builder.trust import signing

    with _behind_a_fault_proxy(tmp, row) as served:
        if served is None:
            return
        proxy, port, user, password = served
        through = Registry(proxy.host, user, password)
        repository = f"faults/stall-{uuid.uuid4().hex[:8]}"
        hf.push_tiny_image(through, repository, "v1")
        _, public = signing.generate(tmp / "keys")
        env = dict(os.environ, ASCEND_BUILD_REGISTRY_USER=user, ASCEND_BUILD_REGISTRY_PASSWORD=password)
        proxy.plan("GET", r"/manifests/", always="stall")
        proxy.plan("GET", r"/tags/list$", always="stall")
        started = time.monotonic()
        row.faults += 1
        try:
            with bounded.command_deadline(3):
                through.manifest(repository, "v1")
            row.corrupted += 1  # an answer out of a stall
        except UserError as exc:
            row.fail_in(time.monotonic() - started)
            row.corrupted += "deadline of 3 s passed" not in exc.message or time.monotonic() - started > 10
        for argv in (["verify", f"{proxy.host}/{repository}:v1", "--key", str(public), "--deadline", "3"],
                     ["pull", "--registry", f"{proxy.host}/{repository}", "--deadline", "3", "--root", str(tmp)]):
            run = hf.Killable(argv, tmp, env)
            done = run.finish(300)
            row.faults += 1
            row.fail_in(run.seconds)
            row.corrupted += done.returncode != 1 or not _clean(done, "the command's deadline of 3 s passed") \
                or run.seconds > 15
        proxy.plans.clear()
        row.recovered += bool(Registry(proxy.host, user, password).tags(repository))  # the registry itself is fine
    row.notes.append("stall: a read, verify and pull under a 3 s deadline")


def keys_on_a_full_disk(tmp: Path, row: Row) -> None:
    try:
        with hf.small_fs("64k") as small:
            for keep in (0, 100, 300):
                folder = small / f"keys-{keep}"
                folder.mkdir()
                filler = hf.fill(small, keep=keep)
                run = hf.Killable(["keys", "generate", folder], tmp)
                done = run.finish(60)
                row.faults += 1
                left = sorted(p.name for p in folder.iterdir())
                if done.returncode != 0:
                    row.fail_in(run.seconds)
                    row.corrupted += bool(left) or not _clean(done, "no space left on the file system of")
                else:  # it fit after all: a whole pair, or it is corrupted
                    row.corrupted += len(left) != 2 or any((folder / n).stat().st_size == 0 for n in left)
                filler.unlink()
                for name in left:
                    (folder / name).unlink()
                again = cli(["keys", "generate", folder], tmp, timeout=60)
                row.recovered += again.returncode == 0 and len(list(folder.iterdir())) == 2
    except hf.CannotMount as why:
        row.notes.append(f"no tmpfs here ({why}): keys not run")


def truncated_locks(tmp: Path, row: Row) -> None:
    shipped = (SHIPPED_DOCKERFILES / DEMO / lock.LOCK_FILE).read_text()
    lines = shipped.splitlines(keepends=True)
    entries = [n for n, line in enumerate(lines) if not line.startswith((" ", "#"))]
    cuts = {"between two entries": "".join(lines[:entries[-1]]), "after one entry": "".join(lines[:entries[1]]),
            "mid-line": shipped[: len(shipped) // 2], "last line gone": "".join(lines[:-1])}
    for name, text in cuts.items():
        out = tmp / name.replace(" ", "-") / "dockerfiles"
        shutil.copytree(SHIPPED_DOCKERFILES / DEMO, out / DEMO)
        (out / DEMO / lock.LOCK_FILE).write_text(text)
        run = hf.Killable(["lock", "--check", "--cell", DEMO, "--matrix", SHIPPED_MATRIX, "--out", out], ROOT)
        done = run.finish(120)
        row.faults += 1
        said = done.stdout + done.stderr  # cut on a boundary: "damaged"; mid-line: the line that does not parse
        if done.returncode != 0 and str(out / DEMO / lock.LOCK_FILE) in said and "Traceback" not in said:
            row.fail_in(run.seconds)
        else:
            row.corrupted += 1  # a lock cut short called whole
            row.notes.append(f"lock {name}: exit {done.returncode}: {(done.stdout + done.stderr)[-200:]}")
        (out / DEMO / lock.LOCK_FILE).write_text(shipped)
        row.recovered += cli(["lock", "--check", "--cell", DEMO, "--matrix", SHIPPED_MATRIX, "--out", out],
                             ROOT, timeout=120).returncode == 0


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

    _two_state_folders(tmp, both, client, host, repo, start)
    _stalled_push(tmp, rows["stall"], engine, host, creds, e2e)
    _random_kills(tmp, rows["kill at random points"], engine, client, host, creds, repo, matrix_file, e2e)

    full = rows["disk full"]
    try:
        with hf.small_fs("32m") as small:
            e2e.drop_images(engine, repo)  # built afresh: the build context must not fit
            run = start(state_dir=small / "state")
            done = run.finish()
            full.faults += 1
            full.fail_in(run.seconds)
            message = json.loads(done.stdout or "[{}]")[0].get("message", "")
            full.corrupted += "not enough free space for this build" not in message  # refused before the build
            full.unvalidated_tags += len(hf.unvalidated_tags(engine, client, repo))
        full.recovered += start(state_dir=tmp / "state-roomy").finish().returncode == 0
    except hf.CannotMount as why:
        full.notes.append(f"no tmpfs ({why})")


def _two_state_folders(tmp: Path, row: Row, client, host: str, repo: str, start) -> None:
    """Two `image --push --sign-key` runs of one cell at once, each with its own state folder (the
    claims do not meet): both push one name. A digest a run reports must be its own image (the
    manifest's config is the run's image ID), so no run attests the other's image."""
    from builder.trust import signing

    saved = os.environ.pop(signing.PASSPHRASE_ENV, None)
    (tmp / "keys").mkdir(exist_ok=True)
    try:
        key = signing.generate(tmp / "keys", "team")[0]
    finally:
        if saved is not None:
            os.environ[signing.PASSPHRASE_ENV] = saved
    runs = [start("--push", host, "--sign-key", str(key), state_dir=tmp / f"state-{side}") for side in "ab"]
    done = [run.finish() for run in runs]
    row.faults += 1
    reported = 0
    for finished in done:
        for outcome in json.loads(finished.stdout or "[]"):
            for digest in (outcome.get("digests") or {}).values():
                reported += 1
                config = client.manifest(repo, digest).data.get("config") or {}
                row.corrupted += config.get("digest") != outcome.get("image_id")  # another run's image
    row.recovered += reported > 0
    row.notes.append(f"image: two runs, two state folders, one pushed name: {reported} digest(s) reported, "
                     "each checked to be its own run's image")


def _stalled_push(tmp: Path, row: Row, engine, host: str, creds: Dict[str, str], e2e) -> None:
    """The engine's push through a proxy that stalls every blob upload, within a 4 s deadline."""
    from builder import bounded
    from builder.registry import Registry

    context = tmp / "stall-ctx"
    context.mkdir()
    (context / "Dockerfile").write_text("FROM scratch\nCOPY a.txt /a.txt\n")
    (context / "a.txt").write_text(f"stall {uuid.uuid4().hex}\n")
    image = engine.build(context, log_path=tmp / "stall-build.log")
    proxy = hf.FaultProxy(host)
    repository = f"ascend-build-bench/stall-{uuid.uuid4().hex[:8]}"
    ref = f"{proxy.host}/{repository}:cell-cpu"
    try:
        engine.tag(image, ref)
        proxy.plan("PUT", r"/blobs/uploads/", always="stall")
        proxy.plan("PATCH", r"/blobs/uploads/", always="stall")
        started = time.monotonic()
        row.faults += 1
        try:
            with bounded.command_deadline(4):
                engine.push(ref, username=creds["ASCEND_BUILD_REGISTRY_USER"],
                            password=creds["ASCEND_BUILD_REGISTRY_PASSWORD"])
            row.corrupted += 1  # a digest out of a stall
        except UserError as exc:
            row.fail_in(time.monotonic() - started)
            row.corrupted += "deadline of 4 s passed" not in exc.message or time.monotonic() - started > 15
        direct = Registry(host, creds["ASCEND_BUILD_REGISTRY_USER"], creds["ASCEND_BUILD_REGISTRY_PASSWORD"])
        row.unvalidated_tags += len(direct.tags(repository))
    finally:
        proxy.stop()
        engine.untag(ref)
        engine.remove_if_unnamed(image)
    row.notes.append("stall: the engine's push under a 4 s deadline")


def _orphans(marker: str) -> int:
    """Live processes whose command line names ``marker`` (the killed run's state folder)."""
    count = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            count += marker in argv and "build" in argv
    return count


def _random_kills(tmp: Path, row: Row, engine, client, host: str, creds: Dict[str, str], repo: str,
                  matrix_file: Path, e2e) -> None:
    """The run's own process (not its group: the docker CLI must die with it by itself) SIGKILLed
    at a random moment of the build and of the seal; then the next run, and what is left."""
    chance = random.Random(SEED)
    private = tmp / "tmpdir"
    private.mkdir()
    env = e2e.cli_env(TMPDIR=str(private), **creds)
    for n, (phase, line) in enumerate([("build", r"\] step \d+/\d+ "), ("seal", r"\] sealing")] * 2):
        state = tmp / f"random-{n}"
        args = e2e.image_args(matrix_file, state, "local/debian:12", "--variant", "cpu", "--push", host)
        e2e.drop_images(engine, repo)  # built and tested again: the phase comes
        run = hf.Killable(args, tmp, env)
        if not run.wait_for(line):
            row.notes.append(f"random: never reached {phase}")
            run.finish()
            continue
        delay = chance.uniform(0, 2.0 if phase == "build" else 0.5)
        time.sleep(delay)
        with contextlib.suppress(ProcessLookupError):
            os.kill(run.proc.pid, signal.SIGKILL)  # the run alone, as the OOM killer would
        run.finish(120)
        row.faults += 1
        row.unvalidated_tags += len(hf.unvalidated_tags(engine, client, repo))
        row.corrupted += len(list(state.rglob("*" + writes.TMP_SUFFIX)))
        done = hf.Killable(args, tmp, env).finish()  # the next run sweeps what the killed one left
        row.recovered += done.returncode == 0
        time.sleep(1)
        row.orphans += _orphans(str(state))
        row.secrets_left += len(list(private.glob("ascend-build-secrets-*")))
        row.notes.append(f"random: {phase} killed {delay:.2f} s after its line; next run exit {done.returncode}")
    row.unvalidated_tags += len(hf.unvalidated_tags(engine, client, repo))


# --- report -------------------------------------------------------------------------------------


def print_table(rows: Dict[str, Row]) -> None:
    head = ["class", "faults", "recovered on rerun", "failed clearly", "tags on unvalidated", "files corrupted",
            "secrets left", "orphans", "worst s to clear failure"]
    lines = [[name, str(r.faults), str(r.recovered), str(len(r.failures)), str(r.unvalidated_tags), str(r.corrupted),
              str(r.secrets_left), str(r.orphans), f"{max(r.failures):.1f}" if r.failures else "-"]
             for name, r in rows.items()]
    total = [sum(int(line[i]) for line in lines) for i in range(1, 8)]
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
                           ("disk full", disk_full), ("registry faults", registry_faults), ("stall", stalls),
                           ("keys, full disk", keys_on_a_full_disk), ("truncated lock", truncated_locks)):
            part = tmp / name.replace(" ", "-").replace(",", "")
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
    bad = sum(r.unvalidated_tags + r.corrupted + r.secrets_left + r.orphans for r in rows.values())
    return {
        "faults injected / recovered": f"{sum(r.faults for r in rows.values())} / {sum(r.recovered for r in rows.values())}",
        "tags on unvalidated images / files corrupted": f"{sum(r.unvalidated_tags for r in rows.values())} / "
                                                         f"{sum(r.corrupted for r in rows.values())}",
        "secrets left / orphaned builds": f"{sum(r.secrets_left for r in rows.values())} / "
                                          f"{sum(r.orphans for r in rows.values())}",
        "worst time to a clear failure": f"{max((max(r.failures) for r in rows.values() if r.failures), default=0):.1f} s",
        "fault verdict": "clean" if bad == 0 else "NOT clean",
        "fault suite time": f"{elapsed:.0f} s",
    }


if __name__ == "__main__":
    figures = main(engine="--no-engine" not in sys.argv[1:])
    sys.exit(0 if figures["fault verdict"] == "clean" else 1)
