"""builder.engine against a real Docker Engine and a real registry on loopback.

What these prove that a mock could not: a BuildKit secret reaches the RUN but
no layer and no history entry; a failing build names its step; pushes return
the digest the engine records; wrong credentials fail clearly without touching
the local image; containers never outlive run().
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from builder.engine import BuildFailed, Engine, RunTimeout
from builder.errors import UserError

TOKEN = uuid.uuid4().hex
TEST_REPO = "ascend-build-test"


def _children() -> set:
    """PIDs of this process's direct children (to prove nothing was left running)."""
    pid = os.getpid()
    return set(Path(f"/proc/{pid}/task/{pid}/children").read_text().split())


def _stream_contains(chunks, needle: bytes) -> bool:
    """Search a byte stream without holding it in memory (docker save is ~200 MB)."""
    keep = b""
    for chunk in chunks:
        buf = keep + chunk
        if needle in buf:
            return True
        keep = buf[-(len(needle) - 1):]
    return False


def _gone(engine: Engine, name: str) -> bool:
    return engine.client.containers.list(all=True, filters={"name": name}, ignore_removed=True) == []


def _write(ctx: Path, dockerfile: str, **files: str) -> Path:
    ctx.mkdir(parents=True, exist_ok=True)
    (ctx / "Dockerfile").write_text(dockerfile)
    for name, text in files.items():
        (ctx / name).parent.mkdir(parents=True, exist_ok=True)
        (ctx / name).write_text(text)
    return ctx


@pytest.fixture
def tiny_image(engine, tmp_path):
    """A fresh FROM-scratch image of one file per test: pushes and pulls in
    milliseconds, and no test depends on what another did to it."""
    ctx = _write(tmp_path / "tiny", "FROM scratch\nCOPY hello.txt /hello.txt\n",
                 **{"hello.txt": f"tiny {uuid.uuid4().hex}\n"})
    iid = engine.build(ctx, log_path=tmp_path / "tiny.log")
    yield iid
    engine.remove(iid, force=True)


# --- connect ------------------------------------------------------------------------


def test_connect_unreachable_names_url_and_fix(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:1")
    with pytest.raises(UserError) as e:
        Engine.connect()
    assert "cannot reach the Docker Engine at tcp://127.0.0.1:1" in e.value.message
    assert "DOCKER_HOST" in e.value.fix and "dockerd" in e.value.fix
    assert e.value.exit_code == 1


# --- build ----------------------------------------------------------------------------


@pytest.mark.engine
def test_build_secret_reaches_run_but_no_layer_nor_history(engine, base_image, tmp_path, monkeypatch):
    secret = f"secret-{TOKEN}"
    proxy = f"proxy-{TOKEN}.invalid"
    bind = f"bind-{TOKEN}"
    monkeypatch.setenv("NO_PROXY", proxy)  # forwarded as a predefined build arg
    ctx = _write(tmp_path / "ctx", f"""FROM {base_image}
RUN --mount=type=secret,id=ca,target=/run/secrets/ca \\
    --mount=type=bind,source=data,target=/mnt/data \\
    sha256sum < /run/secrets/ca | cut -d' ' -f1 > /secret.sha256 \\
 && cp /mnt/data/hello.txt /bind.txt \\
 && echo "$NO_PROXY" > /no_proxy.txt
""", **{"data/hello.txt": bind + "\n"})
    (tmp_path / "ca.pem").write_text(secret + "\n")
    tag = f"{TEST_REPO}/secret:{TOKEN[:12]}"
    lines: list = []
    iid = engine.build(ctx, tag=tag, secrets={"ca": tmp_path / "ca.pem"},
                       labels={"org.ascend-build.test": TOKEN}, log_path=tmp_path / "build.log",
                       on_line=lines.append)
    try:
        assert iid.startswith("sha256:") and engine.image_id(tag) == iid
        assert engine.labels(tag)["org.ascend-build.test"] == TOKEN
        assert any(line.startswith("#") and "RUN --mount=type=secret" in line for line in lines)
        log = (tmp_path / "build.log").read_text()
        assert log.splitlines()[1:] == lines  # line 0 is the command line
        assert secret not in log

        # The RUN saw the secret, the bind mount and the proxy variable ...
        out = engine.run(iid, ["cat", "/secret.sha256", "/bind.txt", "/no_proxy.txt"])
        assert out.exit_code == 0, out.stderr
        want = hashlib.sha256((secret + "\n").encode()).hexdigest()
        assert out.stdout.split() == [want, bind, proxy]

        # ... but neither history nor any byte of the image holds the secret or the proxy.
        history = subprocess.run(["/usr/bin/docker", "history", "--no-trunc", iid],
                                 capture_output=True, text=True, check=True).stdout
        assert "RUN" in history and secret not in history and proxy not in history
        image = engine.client.images.get(iid)
        assert _stream_contains(image.save(), bind.encode())  # the scan does see file bytes
        assert not _stream_contains(image.save(), secret.encode())
    finally:
        engine.remove(tag)


@pytest.mark.engine
def test_build_failure_names_step_and_log_tail(engine, base_image, tmp_path):
    ctx = _write(tmp_path / "ctx", f"FROM {base_image}\nRUN echo first-ok\n"
                                   f"RUN echo about-to-fail-{TOKEN} && false\n")
    log_path = tmp_path / "logs" / "fail.log"
    with pytest.raises(BuildFailed) as e:
        engine.build(ctx, log_path=log_path)
    err = e.value
    assert err.exit_code == 1 and isinstance(err, UserError)
    assert "[3/3] RUN echo about-to-fail" in err.step
    assert "[3/3] RUN echo about-to-fail" in err.message and "exit code: 1" in err.message
    assert str(log_path) in err.fix and f"about-to-fail-{TOKEN}" in err.fix
    assert 0 < len(err.tail) <= 15
    assert log_path.is_file() and "about-to-fail" in log_path.read_text()


@pytest.mark.engine
def test_build_interrupt_stops_the_cli(engine, base_image, tmp_path):
    ctx = _write(tmp_path / "ctx", f"FROM {base_image}\nRUN echo {TOKEN} && sleep 60\n")
    before = _children()

    def on_line(line: str) -> None:
        if "[2/2] RUN" in line:
            raise KeyboardInterrupt

    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        engine.build(ctx, log_path=tmp_path / "build.log", on_line=on_line)
    assert time.monotonic() - start < 30
    assert _children() <= before


# --- registry -------------------------------------------------------------------------


@pytest.mark.engine
def test_push_digest_matches_and_pull_by_digest(engine, registry, tiny_image):
    ref = f"{registry.host}/{TEST_REPO}/tiny:ok"
    engine.tag(tiny_image, ref)
    digest = engine.push(ref, username=registry.username, password=registry.password)
    assert digest.startswith("sha256:")
    by_digest = f"{registry.host}/{TEST_REPO}/tiny@{digest}"
    assert by_digest in engine.repo_digests(ref)
    if shutil.which("skopeo"):  # the registry itself, not the engine, says so too
        out = subprocess.run(["skopeo", "inspect", "--tls-verify=false", "--format", "{{.Digest}}",
                              "--creds", f"{registry.username}:{registry.password}",
                              f"docker://{ref}"], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == digest

    engine.remove(tiny_image, force=True)  # every name: the pull must really fetch it
    assert engine.image_id(by_digest) is None
    assert engine.pull(by_digest, username=registry.username,
                       password=registry.password) == tiny_image
    assert engine.image_id(by_digest) == tiny_image
    with pytest.raises(UserError, match="digest"):
        engine.pull(ref)


@pytest.mark.engine
def test_push_credentials_from_environment(engine, registry, tiny_image, monkeypatch):
    ref = f"{registry.host}/{TEST_REPO}/tiny:env"
    engine.tag(tiny_image, ref)
    monkeypatch.setenv("ASCEND_BUILD_REGISTRY_USER", registry.username)
    monkeypatch.setenv("ASCEND_BUILD_REGISTRY_PASSWORD", registry.password)
    assert engine.push(ref).startswith("sha256:")
    engine.untag(ref)


@pytest.mark.engine
@pytest.mark.parametrize("password", ["wrong-password", None])
def test_push_refused_auth_is_a_user_error(engine, registry, tiny_image, password, monkeypatch):
    monkeypatch.delenv("ASCEND_BUILD_REGISTRY_USER", raising=False)
    ref = f"{registry.host}/{TEST_REPO}/tiny:refused"
    engine.tag(tiny_image, ref)
    start = time.monotonic()
    with pytest.raises(UserError) as e:
        engine.push(ref, username=registry.username if password else None, password=password)
    assert time.monotonic() - start < 10  # not retried: retrying cannot fix credentials
    assert e.value.exit_code == 1
    assert "authentication" in e.value.message and registry.host in e.value.message
    assert f"docker login {registry.host}" in e.value.fix
    assert engine.image_id(ref) == tiny_image  # local image untouched
    engine.untag(ref)


@pytest.mark.engine
def test_remove_if_unnamed_keeps_a_named_image_and_removes_an_unnamed_one(engine, tiny_image, tmp_path):
    """What a sealed build's candidate gets: removed when nothing names it, kept otherwise
    (a promoted candidate has its -candidate tag, and a user may have tagged it)."""
    ref = f"ascend-build-test/unnamed:{TOKEN[:12]}"
    engine.tag(tiny_image, ref)
    assert engine.remove_if_unnamed(tiny_image) is False and engine.image_id(ref) == tiny_image
    engine.untag(ref)
    unnamed = engine.build(_write(tmp_path / "unnamed", "FROM scratch\nCOPY a.txt /a.txt\n",
                                  **{"a.txt": f"unnamed {uuid.uuid4().hex}\n"}), log_path=tmp_path / "unnamed.log")
    assert engine.client.images.get(unnamed).tags == []
    assert engine.remove_if_unnamed(unnamed) is True and engine.image_id(unnamed) is None
    assert engine.remove_if_unnamed(unnamed) is False  # already gone


# --- run ------------------------------------------------------------------------------


@pytest.mark.engine
def test_run_returns_output_and_removes_container(engine, base_image, tmp_path):
    (tmp_path / "in.txt").write_text("mounted\n")
    name = f"ascend-build-test-run-{TOKEN[:12]}"
    res = engine.run(base_image, ["sh", "-c", 'cat /in/in.txt; echo "$GREETING"; echo err >&2; '
                                              "touch /in/x 2>/dev/null || echo read-only; exit 3"],
                     mounts=[(str(tmp_path), "/in", True)], env={"GREETING": "hi"},
                     shm_size="64m", name=name)
    assert res.exit_code == 3
    assert res.stdout == "mounted\nhi\nread-only\n" and res.stderr == "err\n"
    assert 0 < res.seconds < 60
    assert _gone(engine, name)


@pytest.mark.engine
def test_run_timeout_kills_and_removes(engine, base_image):
    name = f"ascend-build-test-timeout-{TOKEN[:12]}"
    start = time.monotonic()
    with pytest.raises(RunTimeout) as e:
        engine.run(base_image, ["sh", "-c", "echo started; sleep 60"], timeout=2, name=name)
    assert time.monotonic() - start < 20
    assert e.value.result.exit_code == -1 and e.value.result.stdout == "started\n"
    assert _gone(engine, name)


def _interrupt_once_running(name: str, stop: threading.Event) -> None:
    """Ctrl-C this process once the container ``name`` runs (asked of the engine on a client of
    this thread's own), not after a fixed time: under load, creating it can take longer."""
    import docker

    client = docker.from_env()
    try:
        while not stop.is_set():
            if client.containers.list(filters={"name": name, "status": "running"}, ignore_removed=True):
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.1)
    finally:
        client.close()


@pytest.mark.engine
def test_run_ctrl_c_removes_container(engine, base_image):
    name = f"ascend-build-test-sigint-{TOKEN[:12]}"
    stop = threading.Event()
    watcher = threading.Thread(target=_interrupt_once_running, args=(name, stop), daemon=True)
    watcher.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            engine.run(base_image, ["sleep", "60"], name=name)
    finally:
        stop.set()
        watcher.join(10)
    assert _gone(engine, name)


@pytest.mark.engine
def test_run_interrupted_while_the_engine_creates_the_container_leaves_none(engine, base_image, monkeypatch):
    """Ctrl-C after the engine made the container and before its answer was read: `run` had no
    container to remove, and one stayed until the process was gone."""
    from docker.models.containers import ContainerCollection

    name = f"ascend-build-test-sigint-create-{TOKEN[:12]}"
    create = ContainerCollection.create

    def created_then_interrupted(self, *args, **kwargs):
        create(self, *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(ContainerCollection, "create", created_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        engine.run(base_image, ["sleep", "60"], name=name)
    monkeypatch.undo()
    assert _gone(engine, name)


@pytest.mark.engine
def test_run_missing_image_is_a_user_error(engine):
    with pytest.raises(UserError, match="not found"):
        engine.run(f"{TEST_REPO}/absent:{TOKEN[:12]}", ["true"])


# --- no engine: parsing and retry policy ----------------------------------------------

BUILDX_FAILURE = """\
#4 [internal] load build context
#4 DONE 0.0s
#5 [builder 2/3] RUN pip install torch==2.13.0
#5 0.512 ERROR: No matching distribution found for torch==2.13.0
#5 ERROR: process "/bin/sh -c pip install torch==2.13.0" did not complete successfully: exit code: 1
------
 > [builder 2/3] RUN pip install torch==2.13.0:
------
ERROR: failed to solve: process "/bin/sh -c pip install torch==2.13.0" did not complete successfully: exit code: 1
"""


def test_failed_step_parses_buildx_output():
    from builder.engine import failed_step

    step, error = failed_step(BUILDX_FAILURE.splitlines())
    assert step == "[builder 2/3] RUN pip install torch==2.13.0"
    assert error.startswith('process "/bin/sh -c pip install') and error.endswith("exit code: 1")


def test_failed_step_without_a_step():
    from builder.engine import failed_step

    lines = ["#1 [internal] load build definition from Dockerfile", "#1 DONE 0.0s",
             "failed to solve with frontend dockerfile.v0: dockerfile parse error line 2"]
    assert failed_step(lines) == ("", lines[-1])


class _FakeApi:
    def __init__(self, streams):
        self.streams, self.calls = list(streams), []

    def push(self, repo, tag, **kw):
        self.calls.append((repo, tag, kw["auth_config"]))
        return iter(self.streams.pop(0))


class _FakeClient:
    def __init__(self, streams):
        self.api = _FakeApi(streams)
        self.images = self

    def get(self, ref):
        return object()


def test_push_retries_transient_errors_then_returns_digest(monkeypatch):
    monkeypatch.setattr(time, "sleep", lambda s: None)
    client = _FakeClient([
        [{"error": "received unexpected HTTP status: 503 Service Unavailable"}],
        [{"status": "Pushing"}, {"error": "read tcp: connection reset by peer"}],
        [{"status": "Pushed"}, {"aux": {"Tag": "1", "Digest": "sha256:" + "a" * 64, "Size": 9}}],
    ])
    digest = Engine(client, "unix:///fake").push(  # type: ignore[arg-type]  # a fake docker client
        "reg.local:5000/a/b:1", username="u", password="p")
    assert digest == "sha256:" + "a" * 64
    assert client.api.calls == [("reg.local:5000/a/b", "1", {"username": "u", "password": "p"})] * 3


def test_push_gives_up_on_permanent_errors_without_retrying(monkeypatch):
    monkeypatch.setattr(time, "sleep", lambda s: None)
    client = _FakeClient([[{"error": "name invalid: invalid repository name"}]] * 4)
    with pytest.raises(UserError, match="name invalid") as e:
        Engine(client, "unix:///fake").push("reg.local:5000/a/b:1")  # type: ignore[arg-type]  # a fake docker client
    assert e.value.exit_code == 1 and len(client.api.calls) == 1


@pytest.mark.engine
def test_run_puts_an_init_at_pid_1(engine, base_image):
    """`docker run --init`: the command is not PID 1, so its crashed children are reaped and
    SIGTERM reaches it with its default action."""
    res = engine.run(base_image, ["sh", "-c", "cat /proc/1/comm; echo $$"])
    assert res.exit_code == 0, res.stderr
    comm, pid = res.stdout.split()
    assert comm == "docker-init" and pid != "1"
    bare = engine.run(base_image, ["sh", "-c", "echo $$"], init=False)
    assert bare.stdout.strip() == "1"


@pytest.mark.engine
def test_a_container_read_file_leaves_behind_is_swept_once_its_process_is_gone(engine, base_image, monkeypatch):
    """`read_file` creates a container (never started) and removes it; a kill between the two
    leaves it, and the next run's `remove_orphans` must find it by its owner label."""
    import socket

    import docker.models.containers

    from builder import engine as engine_module

    gone = subprocess.Popen(["true"])
    gone.wait()  # a PID whose process has ended, as a run killed with SIGKILL
    monkeypatch.setattr(engine_module, "_owner", lambda: f"{socket.gethostname()}:{gone.pid}")
    left: list = []
    monkeypatch.setattr(docker.models.containers.Container, "remove",  # the kill came before the removal
                        lambda self, **_: left.append(self.id))
    try:
        assert engine.read_file(base_image, "/usr/lib/os-release")
        monkeypatch.undo()
        assert len(left) == 1
        assert left[0] in engine.remove_orphans()
    finally:
        monkeypatch.undo()
        for ctr_id in left:
            try:
                engine.client.containers.get(ctr_id).remove(force=True)
            except docker.errors.NotFound:
                pass


@pytest.mark.engine
def test_read_file_holds_no_more_of_a_large_file_than_its_limit(engine, tmp_path):
    """A base image's os-release may be anything: reading 1 KiB of a 48 MiB file must not
    hold the 48 MiB (the archive stream is read only as far as the limit needs)."""
    import tracemalloc

    ctx = tmp_path / "big"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text("FROM scratch\nCOPY big.bin /big.bin\n")
    (ctx / "big.bin").write_bytes(b"x" * (48 << 20))
    iid = engine.build(ctx, log_path=tmp_path / "big.log")
    try:
        tracemalloc.start()
        try:
            found = engine.read_file(iid, "/big.bin", limit=1024)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert found == b"x" * 1024
        assert peak < 16 << 20, f"{peak >> 20} MiB held to read 1 KiB"
    finally:
        engine.remove(iid, force=True)
