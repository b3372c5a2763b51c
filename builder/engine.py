"""The only door to the Docker Engine: build, run, tag, push, pull.

Two channels, on purpose:

* The docker SDK (``docker.from_env()``, so ``DOCKER_HOST`` and friends are
  honoured) for everything except builds. It gives typed errors and the
  push stream's digest without parsing text.
* A docker CLI with BuildKit for builds. The SDK only speaks the legacy
  builder, which has no ``--secret``: the custom CA (and any future secret)
  would have to be COPYed into a layer. BuildKit mounts it for one RUN and
  keeps it out of the image and ``docker history``.

Everything raised for a user-caused condition is a ``UserError`` (exit 1) with
a fix; the pipeline never sees raw SDK exceptions for the cases handled here.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import socket
import subprocess
import tarfile
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import docker
import docker.errors
import requests
import urllib3.exceptions
from docker.auth import resolve_repository_name
from docker.types import Mount
from docker.utils import parse_repository_tag

from builder import bounded, leftovers, writes
from builder.errors import UserError

DEFAULT_HOST = "unix:///var/run/docker.sock"
# Docker treats these build args as predefined: usable in RUN without ARG and
# never recorded in `docker history`, so proxy URLs with passwords stay out.
PROXY_VARS = tuple(v for n in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY")
                   for v in (n, n.lower()))
AUTH_ERRORS = ("unauthorized", "authentication required", "no basic auth credentials",
               "requested access to the resource is denied")
TRANSIENT_ERRORS = ("connection reset", "timeout", "timed out", "eof", "connection refused",
                    " 500 ", " 502 ", " 503 ", " 504 ", "internal server error",
                    "bad gateway", "service unavailable", "gateway timeout")
TAIL_LINES = 15


class BuildFailed(UserError):
    """A build that ran and failed; ``step`` is the BuildKit step line, if known."""

    def __init__(self, message: str, fix: str, *, step: str, log_path: Path, tail: List[str]):
        super().__init__(message, fix=fix, exit_code=1)
        self.step, self.log_path, self.tail = step, log_path, tail


@dataclass(frozen=True)
class RunResult:
    exit_code: int
    stdout: str
    stderr: str
    seconds: float


class RunTimeout(UserError):
    """The container outlived ``timeout`` s; it was killed and removed. ``result``
    holds what it printed until then (exit_code -1)."""

    def __init__(self, message: str, result: RunResult, timeout: float = 0.0):
        super().__init__(message, fix="look at what the command printed until then (the run's result)", exit_code=1)
        self.result, self.timeout = result, timeout


@dataclass(frozen=True)
class BuildCli:
    """How to run a BuildKit build: argv prefix and extra environment."""

    argv: Tuple[str, ...]
    env: Dict[str, str]


def _reason(exc: BaseException) -> str:
    """The innermost OS-level reason ("Connection refused"), not three lines of
    urllib3 wrapping, so the one-line message stays readable."""
    seen, todo = set(), [exc]
    while todo:
        e = todo.pop(0)
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.strerror:
            return e.strerror
        todo += [a for a in getattr(e, "args", ()) if isinstance(a, BaseException)]
        todo += [c for c in (e.__cause__, e.__context__) if c is not None]
    return str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__


def find_build_cli() -> BuildCli:
    """Pick a docker CLI that can do BuildKit builds; probed once per Engine.

    Order: $ASCEND_BUILD_DOCKER_CLI, `docker` on PATH, /usr/bin/docker. A CLI
    with the buildx plugin builds with `buildx build --load`; a CLI older than
    23 has BuildKit built in (DOCKER_BUILDKIT=1). A newer CLI without buildx
    cannot build with BuildKit at all, so it is skipped.
    """
    override = os.environ.get("ASCEND_BUILD_DOCKER_CLI")
    names = [override] if override else ["docker", "/usr/bin/docker"]
    env = {"DOCKER_HOST": os.environ.get("DOCKER_HOST") or DEFAULT_HOST}
    tried: List[str] = []

    def probe(cli: str, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([cli, *args], capture_output=True, text=True,
                              timeout=20, env={**os.environ, **env})

    for path in (shutil.which(n) for n in names):
        if not path or path in tried:
            continue
        tried.append(path)
        try:
            if probe(path, "buildx", "version").returncode == 0:
                return BuildCli((path, "buildx", "build", "--load"), env)
            m = re.search(r"version ([0-9]{1,9})\.", probe(path, "--version").stdout)
        except (OSError, subprocess.SubprocessError):
            continue
        if m and int(m.group(1)) < 23:
            return BuildCli((path, "build"), {**env, "DOCKER_BUILDKIT": "1"})
    raise UserError(
        "no docker CLI that can build with BuildKit (tried: "
        f"{', '.join(tried) or ', '.join(names) + ' (not found)'})",
        fix="install the buildx plugin for your docker CLI, or Debian's docker.io (apt-get install "
            "docker.io), or point ASCEND_BUILD_DOCKER_CLI at a CLI that has one",
        exit_code=1)


def _drain(stream) -> Tuple[str, str]:
    """Read a push/pull JSON stream to its end: (last error, digest from aux)."""
    error = digest = ""
    for chunk in stream:
        if "error" in chunk or "errorDetail" in chunk:
            error = chunk.get("error") or chunk["errorDetail"].get("message", "")
        digest = (chunk.get("aux") or {}).get("Digest", digest)
    return error, digest


_DIE_WITH_US = ["setpriv", "--pdeathsig", "TERM", "--"] if shutil.which("setpriv") else []


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM first: the CLI then cancels the build in the daemon."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def failed_step(lines: Sequence[str]) -> Tuple[str, str]:
    """(step, error) from BuildKit plain progress: "#7 [3/3] RUN ..." names a
    step, "#7 ERROR: ..." marks it failed. Falls back to the " > [3/3] RUN ...:"
    summary and the last error line (e.g. Dockerfile parse errors have no step)."""
    names: Dict[str, str] = {}
    step = error = ""
    for line in lines:
        m = re.match(r"#(\d+) (\[.*)$", line)
        if m and m.group(1) not in names:
            names[m.group(1)] = m.group(2)
        m = re.match(r"#(\d+) ERROR:? (.*)$", line)
        if m:
            step, error = names.get(m.group(1), step), m.group(2)
        m = re.match(r"^ > (\[.*\] .*):$", line)
        if m and not step:
            step = m.group(1)
        if re.match(r"^(error|ERROR)\b|executor failed running|failed to solve", line) and not error:
            error = line
    return step, error


def _os_release_line(line: str) -> Tuple[str, str]:
    """``ID="ubuntu"`` -> ("ID", "ubuntu"): os-release values may be quoted."""
    key, _, value = line.partition("=")
    return key.strip(), value.strip().strip("'\"")


OWNER_LABEL = "ascend-build.owner"  # "<hostname>:<pid>" of the process that started a container (as "ascend-build.run")


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


# What an archive of one file holds before the file's bytes (its headers), at most: `read_file`
_TAR_HEADROOM = 1 << 16


def _container_labels() -> Dict[str, str]:
    """The labels of every container this module creates: `Engine.remove_orphans` finds one
    a killed run left (a smoke test's, or one `read_file` had not removed yet) by its owner."""
    return {"ascend-build.run": "1", OWNER_LABEL: _owner()}


class Engine:
    """A connected Docker Engine. Create with ``Engine.connect()``."""

    def __init__(self, client: docker.DockerClient, url: str):
        self.client, self.url = client, url
        self._cli: Optional[BuildCli] = None

    @classmethod
    def connect(cls) -> "Engine":
        """Connect and ping now, so an absent daemon fails before any work starts."""
        url = os.environ.get("DOCKER_HOST") or DEFAULT_HOST
        try:
            client = docker.from_env(timeout=300)
            client.ping()
        except (docker.errors.DockerException, requests.RequestException, OSError) as e:
            raise UserError(f"cannot reach the Docker Engine at {url}: {_reason(e)}",
                            fix="start it (`dockerd &` as root, or `sudo systemctl start docker`) "
                                "or set DOCKER_HOST", exit_code=1) from None
        return cls(client, url)

    @property
    def build_cli(self) -> BuildCli:
        if self._cli is None:
            self._cli = find_build_cli()
        return self._cli

    # --- build ---------------------------------------------------------------

    def build(self, context: Path, dockerfile: str = "Dockerfile", *, tag: Optional[str] = None,
              build_args: Mapping[str, str] = {}, secrets: Mapping[str, Path] = {},
              labels: Mapping[str, str] = {}, log_path: Path,
              on_line: Optional[Callable[[str], None]] = None,
              target: Optional[str] = None, platform: Optional[str] = None, no_cache: bool = False) -> str:
        """Build with BuildKit; return the image ID ("sha256:...").

        Every output line (newline stripped) goes to ``log_path`` and to
        ``on_line``. Proxy variables set in our environment are forwarded as
        build args *by name only*, so their values never appear in argv.
        On Ctrl-C (or anything ``on_line`` raises) the CLI is stopped, which
        cancels the build in the daemon, and the exception propagates.
        ``no_cache``: every step is run again (a cold build), the cache left as it is for others:
        emptying it instead (``docker builder prune``) while another build runs crashed dockerd
        20.10 here (a nil reference in BuildKit's GetByBlob).
        """
        context, log_path = Path(context), Path(log_path)
        if not (context / dockerfile).is_file():
            raise UserError(f"no {dockerfile} in build context {context}", exit_code=1)
        for sid, src in secrets.items():
            if not Path(src).is_file():
                raise UserError(f"build secret {sid!r}: {src} is not a file", exit_code=1,
                                fix="pass an existing file (e.g. /etc/ssl/certs/ca-certificates.crt)")
        cli = self.build_cli
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.remove_orphans()
        with tempfile.TemporaryDirectory(prefix=leftovers.temp_prefix("build")) as tmp:
            iidfile = Path(tmp) / "iid"
            # setpriv --pdeathsig: the CLI gets SIGTERM (and cancels the build) when this process
            # dies, SIGKILL included, instead of building on for nobody
            argv = [*_DIE_WITH_US, *cli.argv, "--progress=plain", "--iidfile", str(iidfile),
                    "-f", str(context / dockerfile)]
            argv += [a for v in PROXY_VARS if v in os.environ and v not in build_args
                     for a in ("--build-arg", v)]
            argv += [a for k, v in build_args.items() for a in ("--build-arg", f"{k}={v}")]
            argv += [a for k, v in secrets.items() for a in ("--secret", f"id={k},src={v}")]
            argv += [a for k, v in labels.items() for a in ("--label", f"{k}={v}")]
            argv += ["--tag", tag] if tag else []
            argv += ["--target", target] if target else []
            argv += ["--no-cache"] if no_cache else []
            # another arch (linux/arm64 on x86_64): BuildKit runs its steps under qemu, and takes
            # a local base image only when its Architecture is that platform's
            argv += ["--platform", platform] if platform else []
            argv.append(str(context))
            tail: deque = deque(maxlen=400)
            with writes.stream_to(log_path, encoding="utf-8") as log:  # a link planted at its name is not followed
                log.write("$ " + " ".join(argv) + "\n")
                proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env={**os.environ, **cli.env},
                                        text=True, errors="replace", bufsize=1)
                assert proc.stdout is not None, "started with stdout=PIPE"
                try:
                    for raw in proc.stdout:
                        line = raw.rstrip("\n")
                        log.write(line + "\n")
                        log.flush()
                        tail.append(line)
                        if on_line:
                            on_line(line)
                    code = proc.wait()
                except BaseException:
                    _stop(proc)
                    raise
            if code != 0 or not iidfile.is_file():
                step, error = failed_step(tail)
                # BuildKit 20.10 prints a "#N sha256:..." line per step: noise in a tail.
                last = [ln for ln in tail if ln.strip() and not re.match(r"#\d+ sha256:", ln)]
                last = last[-TAIL_LINES:]
                where = f" at step {step}" if step else ""
                raise BuildFailed(
                    f"build of {tag or context}{where} failed: {error or f'exit code {code}'}",
                    fix="read the build output and fix the step:\n    "
                        + "\n    ".join(last) + f"\n  full log: {log_path}",
                    step=step, log_path=log_path, tail=last)
            return iidfile.read_text().strip()

    # --- run -----------------------------------------------------------------

    def run(self, image: str, command: List[str], *, devices: Sequence[str] = (),
            mounts: Sequence[Tuple[str, str, bool]] = (), env: Mapping[str, str] = {},
            shm_size: Optional[str] = None, ipc_mode: Optional[str] = None,
            timeout: float = 900, name: Optional[str] = None, init: bool = True) -> RunResult:
        """Run ``command`` in a fresh container and return its result.

        ``devices`` are Docker device strings ("/dev/davinci0[:/dev/davinci0[:rwm]]"),
        ``mounts`` are bind mounts (host, container, read_only). The container is
        removed in every case: a smoke run must leave nothing behind, also on
        Ctrl-C or timeout (then it is killed first and RunTimeout is raised).

        With ``init`` (the default; ``docker run --init``) Docker's init is PID 1 and ``command``
        its child: a crashed process's children are reaped, and SIGTERM reaches ``command``
        with its default action (PID 1 ignores signals it has no handler for).
        """
        self.remove_orphans()
        try:
            ctr = self.client.containers.create(
                image, command, devices=list(devices), environment=dict(env), shm_size=shm_size,
                ipc_mode=ipc_mode, name=name, labels=_container_labels(), init=init,
                mounts=[Mount(c, h, type="bind", read_only=ro) for h, c, ro in mounts])
        except docker.errors.ImageNotFound:
            raise UserError(f"image {image} not found in the Docker Engine", exit_code=1) from None
        except docker.errors.APIError as e:
            raise UserError(f"cannot create a container from {image}: {e.explanation or e}",
                            exit_code=1) from None
        except BaseException:  # Ctrl-C while the engine creates it: made there, its answer never read
            self._remove_unstarted()
            raise
        start = time.monotonic()
        try:
            ctr.start()
            try:
                code = ctr.wait(timeout=timeout)["StatusCode"]
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
                if time.monotonic() - start < timeout:
                    raise
                try:
                    ctr.kill()
                except docker.errors.APIError:  # it exited just now
                    pass
                secs = time.monotonic() - start
                raise RunTimeout(f"{' '.join(command)} in {image} did not finish within {timeout:g} s",
                                 RunResult(-1, *self._output(ctr), secs), timeout) from None
            secs = time.monotonic() - start
            return RunResult(code, *self._output(ctr), secs)
        finally:
            try:
                ctr.remove(force=True)
            except docker.errors.NotFound:
                pass

    def remove_orphans(self) -> List[str]:
        """Remove the containers `run` and `read_file` made for an ascend-build process of this
        host that is gone (killed with SIGKILL, which no ``finally`` survives); their IDs. A
        running one (a smoke test nobody waits for) is killed first. Containers of live
        processes, of other hosts and of other tools are left alone. The seal's temporary tags
        and the temporary folders of such a process go too (`builder.leftovers`)."""
        leftovers.sweep_temp()
        # one request, no inspect per image: a candidate another run's sweep removed meanwhile is no error
        for image in self.client.api.images(name=leftovers.CANDIDATE_REPOSITORY):
            for ref in image.get("RepoTags") or []:
                if ref.startswith(leftovers.CANDIDATE_REPOSITORY + ":") and leftovers.orphaned(ref):
                    self.untag(ref)
        host, removed = socket.gethostname(), []
        try:  # the SDK inspects each container it lists: one another run's sweep removed meanwhile is gone
            found = self.client.containers.list(all=True, filters={"label": OWNER_LABEL}, ignore_removed=True)
        except docker.errors.NotFound:
            found = []
        for ctr in found:
            owner_host, _, pid = str((ctr.labels or {}).get(OWNER_LABEL, "")).rpartition(":")
            if owner_host != host or not pid.isdigit() or leftovers.alive(int(pid)):
                continue
            try:
                ctr.remove(force=True)
                removed.append(str(ctr.id))
            except docker.errors.APIError:  # removed meanwhile by another run's sweep
                pass
        return removed

    def _remove_unstarted(self) -> None:
        """Remove the containers this process created and never started (one whose creation an
        interruption cut short): nothing else of this process is in that state between calls."""
        mine: Dict[str, str | List[str] | bool] = {"label": f"{OWNER_LABEL}={_owner()}", "status": "created"}
        for ctr in self.client.containers.list(all=True, filters=mine, ignore_removed=True):
            try:
                ctr.remove(force=True)
            except docker.errors.APIError:  # removed meanwhile
                pass

    @staticmethod
    def _output(ctr) -> Tuple[str, str]:
        def text(out, err):
            return ctr.logs(stdout=out, stderr=err).decode("utf-8", errors="replace")
        return text(True, False), text(False, True)

    # --- images --------------------------------------------------------------

    def _get(self, ref: str):
        try:
            return self.client.images.get(ref)
        except docker.errors.ImageNotFound:
            return None

    def image_id(self, ref: str) -> Optional[str]:
        img = self._get(ref)
        return img.id if img else None

    def labels(self, ref: str) -> Dict[str, str]:
        img = self._get(ref)
        if img is None:
            raise UserError(f"image {ref} not found in the Docker Engine", exit_code=1)
        return dict(img.labels or {})

    def architecture(self, ref: str) -> Optional[str]:
        """The image config's architecture (``amd64``, ``arm64``), None when there is no such image."""
        img = self._get(ref)
        return img.attrs.get("Architecture") if img else None

    def read_file(self, ref: str, *paths: str, limit: int = 16 << 20) -> Optional[bytes]:
        """The bytes of the first of ``paths`` that is a regular file in image ``ref`` (at most
        ``limit``), read from a container that is created, never started (no emulation for
        another arch), then removed; None when none is, or there is no such image."""
        if self._get(ref) is None:
            return None
        ctr = self.client.containers.create(ref, ["true"], labels=_container_labels())
        try:
            for path in paths:
                try:
                    stream, _ = ctr.get_archive(path)
                except docker.errors.NotFound:
                    continue
                archive = bytearray()  # kept only as far as the limit needs: the file may be of any size
                for chunk in stream:  # read to its end all the same: the engine removes no container mid-copy
                    if len(archive) < limit + _TAR_HEADROOM:
                        archive += chunk
                try:
                    with tarfile.open(fileobj=io.BytesIO(bytes(archive)), mode="r:") as tar:
                        member = tar.next()
                        found = tar.extractfile(member) if member is not None and member.isfile() else None
                        if found is not None:
                            return found.read(limit)
                except tarfile.TarError:  # headers past the headroom: not a file read here
                    continue
            return None
        finally:
            ctr.remove(force=True)

    def base_unavailable(self, ref: str) -> str:
        """Why a build could not have ``ref`` as its base: "" when this engine has it, or when
        its registry describes it (the engine asks, with its own credentials and proxy; nothing
        is pulled); else the registry's or the network's error."""
        if self._get(ref) is not None:
            return ""
        try:
            self.client.api.inspect_distribution(ref)
        except (docker.errors.APIError, requests.RequestException) as e:
            return str(getattr(e, "explanation", None) or e).strip() or type(e).__name__
        return ""

    def data_root(self) -> Tuple[Optional[Path], str]:
        """The folder this engine keeps its images and build cache in (``docker info``'s
        DockerRootDir), when it is on this host: ``(folder, "")``; else ``(None, why not)``.

        On this host means: the engine is reached by a Unix socket or on loopback, calls itself by
        this host's name (a Docker Desktop VM or an engine in a container names itself otherwise,
        and its folder of that name is not the one on this host), and the folder exists here."""
        scheme, _, rest = self.url.partition("://")
        host = rest.rsplit(":", 1)[0].strip("[]") if scheme == "tcp" else ""
        if scheme != "unix" and not (scheme == "tcp" and host in ("127.0.0.1", "localhost", "::1")):
            return None, f"the engine at {self.url} is not on this host"
        try:
            info = self.client.info()
        except (docker.errors.APIError, requests.RequestException) as e:
            return None, f"the engine did not say where it keeps its data ({_reason(e)})"
        root, name = str(info.get("DockerRootDir") or ""), str(info.get("Name") or "")
        if name != socket.gethostname():
            return None, f"the engine at {self.url} runs on {name or 'an unnamed host'}, not on this host"
        if not root.startswith("/") or not os.path.isdir(root):
            return None, f"the engine's data root {root or '(not given)'} is not a folder on this host"
        return Path(root), ""

    def os_release(self, ref: str) -> Dict[str, str]:
        """The ``KEY=value`` pairs of an image's os-release file (``ID``, ``VERSION_ID``...);
        ``{}`` when it has none or is not in the engine (the build pulls it)."""
        found = self.read_file(ref, "/etc/os-release", "/usr/lib/os-release")  # the first is often a link
        text = (found or b"").decode("utf-8", errors="replace")
        return dict(_os_release_line(line) for line in text.splitlines() if "=" in line)

    def repo_digests(self, ref: str) -> List[str]:
        return self.identity(ref)["digests"]

    def identity(self, ref: str) -> Dict[str, Any]:
        """``{"id": ..., "digests": [...]}``: the image ID and the registry digests (RepoDigests)
        of ``ref`` from one inspect (None and [] when this engine has no such image)."""
        img = self._get(ref)
        return {"id": img.id if img else None, "digests": list(img.attrs.get("RepoDigests") or []) if img else []}

    def tag(self, image_id: str, ref: str) -> None:
        repo, tag = parse_repository_tag(ref)
        if tag and tag.startswith("sha256:"):
            raise UserError(f"cannot tag with a digest reference: {ref}")
        try:
            self.client.api.tag(image_id, repo, tag or "latest", force=True)
        except docker.errors.APIError as e:
            raise UserError(f"cannot tag {image_id} as {ref}: {e.explanation or e}",
                            exit_code=1) from None

    def untag(self, ref: str) -> bool:
        """Drop the name ``ref``; False if it did not exist. If it was the
        image's last name, Docker deletes the image too (it has no "untag only")."""
        try:
            self.client.images.remove(ref, noprune=True)
            return True
        except docker.errors.ImageNotFound:
            return False

    def remove_if_unnamed(self, image_id: str) -> bool:
        """Delete ``image_id`` if nothing names it (no tag, no digest) and nothing uses it: a
        sealed build's candidate, whose layers the sealed image holds; False if kept."""
        try:
            image = self.client.images.get(image_id)
            if image.tags or image.attrs.get("RepoDigests"):
                return False
            self.client.images.remove(image.id or image_id)  # get() gave it an id; the SDK types it Optional
            return True
        except docker.errors.ImageNotFound:
            return False
        except docker.errors.APIError:  # in use by a container, or an image built on it classically
            return False

    def remove(self, ref_or_id: str, force: bool = False) -> bool:
        """Delete an image (all its names with ``force``); False if absent."""
        try:
            self.client.images.remove(ref_or_id, force=force)
            return True
        except docker.errors.ImageNotFound:
            return False

    # --- registry ------------------------------------------------------------

    @contextlib.contextmanager
    def _streaming(self, waiting_on: str) -> Iterator[Optional[bounded.Watch]]:
        """Within this block, a push or pull stream of the engine ends by the command's deadline
        (`bounded.command_deadline`), however the engine sends it (silent, or a trickle of
        progress): every connection the SDK answers on is shut at that instant, which also
        cancels the transfer in the engine. Yields the watch (``fired``: the deadline cut it),
        None without a command deadline: then only the client's read limit (300 s) holds."""
        limit = bounded.command_limit()
        if limit is None:
            yield None
            return
        bounded.check_deadline(waiting_on)
        api, cap = self.client.api, self.client.api.timeout
        watch = bounded.Watch(limit[0])

        def hook(response, *args, **kwargs):
            raw = response.raw
            connection = getattr(raw, "_connection", None) or getattr(raw, "connection", None)
            sock = getattr(connection, "sock", None)
            if sock is not None:
                watch.add(sock)
            return response

        api.hooks["response"].append(hook)  # called once the answer's head is in, before its body is read
        api.timeout = max(0.001, min(cap, limit[0] - time.monotonic()))  # type: ignore[assignment]  # a head that never comes; the SDK takes a float
        try:
            yield watch
        finally:
            api.timeout = cap
            api.hooks["response"].remove(hook)
            watch.stop()

    @staticmethod
    def _cut_short(watch: Optional[bounded.Watch]) -> Optional[float]:
        """The command's deadline in seconds, when ``watch`` fired (or it has passed) and cut a stream."""
        limit = bounded.command_limit()
        if limit is None or watch is None or not (watch.fired or time.monotonic() >= limit[0]):
            return None
        return limit[1]

    @staticmethod
    def _auth(username: Optional[str], password: Optional[str]) -> Optional[dict]:
        """Args, else ASCEND_BUILD_REGISTRY_USER/_PASSWORD, else None, which
        lets the SDK use the docker config. Only ever sent in a request header."""
        user = username or os.environ.get("ASCEND_BUILD_REGISTRY_USER")
        pw = password if username else os.environ.get("ASCEND_BUILD_REGISTRY_PASSWORD")
        return {"username": user, "password": pw or ""} if user else None

    @staticmethod
    def _auth_error(registry: str, ref: str, action: str, msg: str) -> UserError:
        return UserError(f"{action} {ref}: registry {registry} refused authentication: {msg}",
                         fix=f"set ASCEND_BUILD_REGISTRY_USER and ASCEND_BUILD_REGISTRY_PASSWORD, "
                             f"or run `docker login {registry}`", exit_code=1)

    def push(self, ref: str, *, username: Optional[str] = None, password: Optional[str] = None,
             retries: int = 3) -> str:
        """Push ``ref`` and return the manifest digest the registry stored.

        Transient failures (resets, timeouts, 5xx) are retried with backoff;
        an auth refusal is not, because retrying cannot fix it.
        """
        repo, tag = parse_repository_tag(ref)
        registry = resolve_repository_name(repo)[0]
        if self._get(ref) is None:
            raise UserError(f"cannot push {ref}: no such image in the Docker Engine", exit_code=1)
        auth = self._auth(username, password)
        waiting_on = f"the push of {ref} to {registry}"
        for attempt in range(retries + 1):
            digest = ""
            with self._streaming(waiting_on) as watch:
                stalled = False
                try:
                    error, digest = _drain(self.client.api.push(
                        repo, tag or "latest", stream=True, decode=True, auth_config=auth))
                except (docker.errors.APIError, requests.RequestException) as e:
                    error = getattr(e, "explanation", None) or str(e)
                except urllib3.exceptions.HTTPError:  # the stream went silent (urllib3's, not requests'), or was shut
                    # dropping the stream closes the connection, and the engine cancels the push
                    stalled = True
                seconds = self._cut_short(watch)
            if seconds is not None:
                raise UserError(f"push of {ref} to {registry} stalled: the command's deadline of {seconds:g} s passed "
                                "before the engine finished the push; no digest was reported, so nothing counts as "
                                "published (the engine's push was cancelled)",
                                fix="check that the registry (and any proxy before it) answers, then push again, "
                                    "or allow more time with --push-deadline SECONDS", exit_code=1)
            if stalled:
                raise UserError(f"push of {ref} to {registry} stalled: the engine reported no progress for "
                                f"{self.client.api.timeout:g} s; no digest was reported, so nothing counts as published",
                                fix="check that the registry (and any proxy before it) answers, then push again",
                                exit_code=1)
            low = f" {error.lower()} "
            if not error and digest:
                return digest
            if any(s in low for s in AUTH_ERRORS):
                raise self._auth_error(registry, ref, "cannot push", error)
            if not any(s in low for s in TRANSIENT_ERRORS) or attempt == retries:
                break
            time.sleep(bounded.remaining(2 ** attempt, waiting_on))
        raise UserError(f"push of {ref} to {registry} failed: {error or 'no digest reported'}",
                        fix="check that the registry is reachable and has space, then push again",
                        exit_code=1)

    def pull(self, ref_with_digest: str, *, username: Optional[str] = None,
             password: Optional[str] = None) -> str:
        """Pull by digest only (a tag can move; a digest names what was validated)."""
        repo, digest = parse_repository_tag(ref_with_digest)
        if "@" not in ref_with_digest or not (digest or "").startswith("sha256:"):
            raise UserError(f"pull needs a digest reference (name@sha256:...), got {ref_with_digest}")
        registry = resolve_repository_name(repo)[0]
        with self._streaming(f"the pull of {ref_with_digest}") as watch:
            try:
                error, _ = _drain(self.client.api.pull(repo, tag=digest, stream=True, decode=True,
                                                       auth_config=self._auth(username, password)))
            except (docker.errors.APIError, requests.RequestException) as e:
                error = getattr(e, "explanation", None) or str(e)
            except urllib3.exceptions.HTTPError:  # the stream itself went silent, or was shut
                error = f"stalled: the engine reported no progress for {self.client.api.timeout:g} s"
            seconds = self._cut_short(watch)
        if seconds is not None:
            raise UserError(f"pull of {ref_with_digest} stalled: the command's deadline of {seconds:g} s passed before "
                            "the engine finished the pull (the engine's pull was cancelled)",
                            fix="check that the registry (and any proxy before it) answers, or allow more time with "
                                f"--deadline SECONDS (or {bounded.DEADLINE_ENV}=SECONDS)", exit_code=1)
        if any(s in error.lower() for s in AUTH_ERRORS):
            raise self._auth_error(registry, ref_with_digest, "cannot pull", error)
        img = self._get(ref_with_digest)
        if error or img is None:
            raise UserError(f"pull of {ref_with_digest} failed: {error or 'image not found after pull'}",
                            fix="check the reference and that the registry is reachable", exit_code=1)
        return img.id

    def exec_cli(self, argv: List[str]) -> None:
        """Replace this process with ``docker`` running ``argv[1:]`` against this engine.

        An interactive ``docker run`` needs the CLI's own TTY and signal handling,
        which the SDK does not offer; after this call nothing of ours runs.
        """
        docker_cli = shutil.which("docker") or "/usr/bin/docker"
        os.execve(docker_cli, [docker_cli, *argv[1:]], {**os.environ, "DOCKER_HOST": self.url})
