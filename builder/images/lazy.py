"""An eStargz variant of a pushed image, made by `ctr-remote` under a containerd of this tool's own.

`image --push --lazy estargz` calls `convert` after the validated image is pushed: Debian's
``stargz-snapshotter`` package ships ``ctr-remote``, which converts an image held by a containerd.
That containerd is never the system's: `Containerd` writes a config of its own (root, state and
socket under ``STATE/lazy/<image>/containerd``, the socket in a short temporary folder when that
path is too long for a unix socket; the CRI plugin off), starts ``containerd`` with it, and
stops it (SIGTERM, then SIGKILL) when the conversion is done or failed. The steps, each a
``ctr-remote`` run against that socket, in the namespace ``ascend-build``:

1. ``images pull`` the pushed image by digest (one platform; containerd unpacks it too);
2. ``images convert --estargz --oci --estargz-record-in FILE``: every layer re-written as eStargz,
   the files of ``FILE`` (the smoke test's ``files_read``, `record_file`) first in each layer,
   before its prefetch landmark;
3. ``images push`` of the converted image under the variant's tag (``<tag>-estargz``).

Then the containerd is stopped and its root and state, the pulled and converted content, removed:
pushed or failed, nothing of the conversion's gigabytes stays in the state folder.

The variant is another digest (the layers are other bytes); Docker pulls and runs it as an ordinary
gzip image. What binds it to the validated image is a signed statement (`builder.trust.variant`).

Example:
    >>> variant_tag("cann8.0.rc3-910b-ubuntu22.04-py3.10-torch_npu2.4.0-x86_64-cpu")
    'cann8.0.rc3-910b-ubuntu22.04-py3.10-torch_npu2.4.0-x86_64-cpu-estargz'
    >>> record_file(["/usr/lib/libc.so.6", "usr/bin/python3"]).decode().splitlines()
    ['{"path": "usr/lib/libc.so.6"}', '{"path": "usr/bin/python3"}']
"""

from __future__ import annotations

import hashlib
import json
import os
import pty
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from builder import writes
from builder.errors import UserError
from builder.registry import Manifest, Registry, credentials, is_loopback, split_reference
from builder.trust.signing import PrivateKey
from builder.vocabulary import LAZY_FORMATS, platform_of, recorded_tiers

ESTARGZ = LAZY_FORMATS[0]
FORMATS = LAZY_FORMATS
CONTAINERD = "containerd"
CTR_REMOTE = "ctr-remote"
NAMESPACE = "ascend-build"
CRI_PLUGIN = "io.containerd.grpc.v1.cri"
SOCKET_MAX = 100       # a unix socket's path must fit sun_path (108 bytes, with room to spare)
START_SECONDS = 30.0   # for containerd to answer on its socket
STEP_SECONDS = 3600.0  # one ctr-remote step (a conversion of GBs on a loaded machine takes long)


def variant_tag(tag: str, fmt: str = ESTARGZ) -> str:
    """The tag the ``fmt`` variant of the image under ``tag`` is pushed under."""
    return f"{tag}-{fmt}"


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise UserError(f"--lazy {fmt!r} is not a lazy format this tool makes", exit_code=2,
                        fix=f"use --lazy {ESTARGZ} (zstd:chunked is not made: see docs/limits.md)")
    return fmt


def record_file(paths: Iterable[str]) -> bytes:
    """The prioritized files as ``ctr-remote``'s record format (`--estargz-record-in`): a stream of
    JSON objects ``{"path": ...}``, one a line, paths relative to the image's root, each once."""
    seen: List[str] = []
    for path in paths:
        relative = path.lstrip("/")
        if relative and relative not in seen:
            seen.append(relative)
    return b"".join(json.dumps({"path": p}).encode() + b"\n" for p in seen)


def tools_missing() -> List[str]:
    """The programs `convert` needs that are not on PATH."""
    return [tool for tool in (CONTAINERD, CTR_REMOTE) if shutil.which(tool) is None]


@dataclass(frozen=True)
class Step:
    argv: Sequence[str]
    what: str
    password: Optional[str] = None  # typed at ctr-remote's prompt, never on its command line (`_prompted`)


class Containerd:
    """A containerd of this tool's own under ``folder``: started on entry, stopped on exit.

    Its config names its own root, state and socket (never ``/run/containerd``), turns the CRI
    plugin off (no Kubernetes runtime is started), and no other containerd is touched.

    On exit, once it has stopped, its working state is removed (`WORKING_STATE`): the root holds the
    content store (the pulled image's blobs and the converted ones) and the pulled image unpacked
    into snapshots, about 2.5 GB for a 0.5 GB twin; what was pushed is in the registry by then, and
    a failed conversion is made again from the registry. Its config and log stay (a few KB)."""

    WORKING_STATE = ("root", "state")

    def __init__(self, folder: Path):
        self.folder = folder.resolve()
        self.sockets: Optional[Path] = None  # a short private folder of its own when ``folder`` is too deep
        self.proc: Optional[subprocess.Popen] = None
        self.left: List[str] = []  # what of the working state could not be removed, and why

    @property
    def socket(self) -> Path:
        return (self.sockets or self.folder) / "containerd.sock"

    def place_sockets(self) -> None:
        """A unix socket's path must fit in sun_path: under a deep state folder (a cell's name is
        long) the sockets go to a private temporary folder instead (mode 0700, removed on exit)."""
        if len(str(self.folder / "containerd.sock.ttrpc")) > SOCKET_MAX:
            self.sockets = Path(tempfile.mkdtemp(prefix="ascend-build-ctd-"))

    def config(self) -> str:
        def q(path: Path) -> str:
            return json.dumps(str(path))  # a TOML basic string is a JSON string for these paths
        return "\n".join([
            "version = 2",
            f"root = {q(self.folder / 'root')}",
            f"state = {q(self.folder / 'state')}",
            f"disabled_plugins = [{json.dumps(CRI_PLUGIN)}]",
            "[grpc]",
            f"  address = {q(self.socket)}",
            "[ttrpc]",
            f"  address = {q(self.socket.with_name('containerd.sock.ttrpc'))}",
            "[debug]",
            '  address = ""',
            "[metrics]",
            '  address = ""',
            ""])

    def __enter__(self) -> "Containerd":
        missing = tools_missing()
        if missing:
            raise UserError(f"{' and '.join(missing)} not found: an eStargz variant is made with ctr-remote under a "
                            "containerd of this tool's own", exit_code=2,
                            fix="install Debian's stargz-snapshotter and containerd packages (apt-get install "
                                "stargz-snapshotter containerd), or drop --lazy")
        self.folder.mkdir(parents=True, exist_ok=True)
        self.place_sockets()
        self.socket.unlink(missing_ok=True)
        config = self.folder / "config.toml"
        writes.replace_file(config, self.config().encode())
        log = writes.stream_to(self.folder / "containerd.log")
        try:
            self.proc = subprocess.Popen([CONTAINERD, "--config", str(config)], stdout=log, stderr=log,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            log.close()
        until = time.monotonic() + START_SECONDS
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > until:
                tail = self.log_tail()
                self.__exit__(None, None, None)
                raise UserError(f"the tool's own containerd did not start (config {config}): {tail}", exit_code=1,
                                fix=f"read {self.folder / 'containerd.log'}")
            time.sleep(0.2)
        return self

    def _answers(self) -> bool:
        if not self.socket.exists():
            return False
        try:
            done = subprocess.run([CTR_REMOTE, "-a", str(self.socket), "version"], capture_output=True, timeout=20)
        except subprocess.TimeoutExpired:
            return False
        return done.returncode == 0

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = (self.folder / "containerd.log").read_text(errors="replace")
        except OSError:
            return "no log"
        return " | ".join(text.strip().splitlines()[-lines:]) or "an empty log"

    def __exit__(self, *exc) -> None:
        stopped = False
        try:
            stopped = self._stop()
        finally:
            if self.sockets is not None:
                shutil.rmtree(self.sockets, ignore_errors=True)
                self.sockets = None
            if stopped:
                self.remove_working_state()
            else:
                self.left.append(f"{self.folder}: its containerd did not stop, so its working state was left")

    def _stop(self) -> bool:
        """Stop the containerd started here; whether none runs any longer."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return True
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)  # its own session: the shims it may have started end with it
            except OSError:
                pass
            try:
                proc.wait(timeout=wait)
                return True
            except subprocess.TimeoutExpired:
                continue
        return False

    def remove_working_state(self) -> None:
        """Remove `WORKING_STATE` and the sockets under the folder (a stopped containerd's only); what cannot
        be removed (a mount point a killed unpack left, a link to elsewhere) is kept in ``left`` with the reason."""
        for socket in (self.folder / "containerd.sock", self.folder / "containerd.sock.ttrpc"):
            if socket.is_socket():
                socket.unlink(missing_ok=True)
        for name in self.WORKING_STATE:
            path = self.folder / name
            try:
                shutil.rmtree(path)
            except FileNotFoundError:
                continue
            except OSError as exc:
                self.left.append(f"{path}: {exc.strerror or exc}")

    def run(self, step: Step, timeout: float = STEP_SECONDS) -> str:
        argv = [CTR_REMOTE, "-a", str(self.socket), "-n", NAMESPACE, *step.argv]
        try:
            if step.password is None:
                done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
            else:
                done = _prompted(argv, step.password, timeout)
        except subprocess.TimeoutExpired:
            raise UserError(f"ctr-remote {step.what} did not finish within {timeout:g} s", exit_code=1,
                            fix="try again on a less loaded machine") from None
        if done.returncode != 0:
            error = (done.stderr or done.stdout).strip().splitlines()
            raise UserError(f"ctr-remote {step.what} failed: {' | '.join(error[-3:]) or f'exit code {done.returncode}'}",
                            exit_code=1, fix="read the message; the validated image is pushed and stays as it is")
        return done.stdout


def _prompted(argv: Sequence[str], password: str, timeout: float) -> subprocess.CompletedProcess:
    """Run ``argv`` with ``password`` typed at its prompt. ctr-remote (containerd's ctr) given
    ``--user NAME`` without ``:PASSWORD`` asks for the password on its terminal; a pseudo-terminal
    as its standard input is that terminal. A password on the command line could be read by every
    user of the machine in the process list while the step runs; typed here it is not."""
    if "\n" in password or "\r" in password:
        raise UserError("the registry password holds a line break, which ctr-remote's prompt cannot take", exit_code=2,
                        fix="use a password without line breaks for the registry, or drop --lazy")
    typing, terminal = pty.openpty()
    try:
        os.write(typing, password.encode() + b"\n")  # held by the terminal until ctr-remote reads its line
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=terminal)
    finally:
        os.close(terminal)
        os.close(typing)


def _http(host: str) -> List[str]:
    return ["--plain-http"] if is_loopback(host) else []


def _user(user: Optional[Tuple[str, str]]) -> List[str]:
    return ["--user", user[0]] if user else []


def convert(folder: Path, host: str, repository: str, digest: str, tag: str, prioritized: Sequence[str],
            platform: str = "linux/amd64", user: Optional[Tuple[str, str]] = None,
            say: Callable[[str], None] = lambda line: None) -> str:
    """Convert ``host/repository@digest`` to eStargz with ``prioritized`` first in each layer, push it
    as ``host/repository:tag``; the pushed reference. ``folder``: the tool's state for it (its
    containerd's root, state and socket, and the record file); the containerd's working state is
    removed when it ends, pushed or failed (`Containerd`), and ``say`` is told what could not be.
    ``user``: (name, password) for the registry, or None; the password is typed at ctr-remote's
    prompt (`_prompted`)."""
    password = user[1] if user else None
    source = f"{host}/{repository}@{digest}"
    target = f"{host}/{repository}:{tag}"
    folder.mkdir(parents=True, exist_ok=True)
    record = folder / "prefetch.record.json"
    writes.replace_file(record, record_file(prioritized))
    containerd = Containerd(folder / "containerd")
    try:
        with containerd:
            containerd.run(Step(["images", "pull", *_http(host), *_user(user), "--platform", platform, source],
                                f"images pull {source}", password))
            containerd.run(Step(["images", "convert", "--estargz", "--oci", "--platform", platform,
                                 "--estargz-record-in", str(record), source, target], f"images convert {source}"))
            containerd.run(Step(["images", "push", *_http(host), *_user(user), "--platform", platform, target,
                                 target], f"images push {target}", password))
    finally:
        for left in containerd.left:
            say(f"note: the conversion's working state was not removed: {left}; remove it by hand")
    return target


# --- the pipeline's step: after the validated image is pushed (and attested) -------------------

def prefetch_of(report: Dict[str, Any]) -> Tuple[List[str], Dict[str, Any]]:
    """The files the smoke report says its import, device and train tiers read (``files_read``, in
    the order first read), and what the statement records of them."""
    recorded = report.get("files_read") if isinstance(report.get("files_read"), dict) else {}
    prefetch = recorded_tiers()  # the tiers whose reads the variant puts first
    paths: List[str] = []
    for tier in prefetch:
        for path in (recorded.get(tier) or []) if isinstance(recorded, dict) else []:
            if isinstance(path, str) and path not in paths:
                paths.append(path)
    listing = json.dumps(paths, separators=(",", ":")).encode()
    return paths, {"tiers": [t for t in prefetch if isinstance(recorded, dict) and t in recorded],
                   "files": len(paths), "listingSha256": "sha256:" + hashlib.sha256(listing).hexdigest()}


def publish_variant(pushed: str, digest: str, report: Dict[str, Any], validation: Dict[str, Any], arch: str,
                    state: Path, name: str, key: Optional[PrivateKey], fmt: str = ESTARGZ,
                    say: Callable[[str], None] = lambda line: None) -> Tuple[str, str]:
    """Convert the pushed validated image ``pushed`` (``digest``) to its ``fmt`` variant with the report's
    prefetch list first, push it under `variant_tag`, and with ``key`` sign and attach the statement
    binding it to ``digest`` (`builder.trust.variant`); (the variant's reference, its digest).
    ``validation``: the validation predicate signed for ``digest``."""
    check_format(fmt)
    host, repository, tag = split_reference(pushed)
    paths, prefetch = prefetch_of(report)
    found = credentials(host)
    started = time.monotonic()
    target = convert(state / "lazy" / name, host, repository, digest, variant_tag(tag, fmt), paths,
                     platform_of(arch), found, say)
    registry = Registry(host)
    pushed_variant = registry.manifest(repository, variant_tag(tag, fmt))  # read once: its digest, then its subject
    lazy_digest = pushed_variant.digest
    say(f"[{name}] {fmt} variant pushed: {target}@{lazy_digest} ({len(paths)} prefetch files, "
        f"{time.monotonic() - started:.1f} s)")
    if key is not None:
        predicate = attest_variant(registry, repository, digest, pushed_variant, validation, prefetch, key)
        say(f"[{name}] attested {target}@{lazy_digest}: bound to {digest} "
            f"({sum(layer['regularFiles'] for layer in predicate['layers'])} files compared)")
    return target, lazy_digest


def attest_variant(registry: Registry, repository: str, validated: str, pushed_variant: Manifest,
                   validation: Dict[str, Any], prefetch: Dict[str, Any], key: PrivateKey) -> Dict[str, Any]:
    """Check that the variant ``pushed_variant`` holds the files of ``validated`` (`builder.trust.variant.bind`),
    then sign the lazy-variant statement saying so and attach it to the variant; its predicate."""
    from builder.trust import attached, statements, variant

    predicate = variant.bind(registry, repository, validated, pushed_variant.digest, validation, prefetch)
    envelope = statements.sign(statements.statement(f"{registry.name}/{repository}", pushed_variant.digest,
                                                    variant.LAZY_VARIANT_V1, predicate), key)
    attached.attach(registry, repository, pushed_variant, [(envelope, variant.LAZY_VARIANT_V1)], key.public_key())
    return predicate
