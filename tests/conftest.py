"""Shared pytest fixtures, and how `make test` spreads the suite over processes.

Engine part (fixtures `engine`, `registry`, `base_image`): tests marked
`pytest.mark.engine` use a real Docker Engine and a real registry on loopback,
because mocks of Docker hide exactly the failures (secrets, auth, digests)
these tests exist for. `.ci/run` starts the engine via scripts/setup-engine.sh.

Scheduling part (only under pytest-xdist, which `make test` runs with three workers; a
plain ``pytest`` run is serial and unchanged): see "scheduling under pytest-xdist" below.
"""

from __future__ import annotations

import contextlib
import fcntl
import inspect
import os
import re
import shutil
import signal
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Dict

import pytest

from builder.errors import UserError
from tests.support.loopback_registry import REGISTRY_BIN, Registry, free_port, serve_registry, stop, wait_up

# Fixtures defined in helper modules, offered to every test by pytest: imported into a test module,
# a fixture is a name that the test functions' arguments redefine (pyflakes' F811).
pytest_plugins = ("tests.support.trust", "tests.support.podman")

# --- scheduling under pytest-xdist --------------------------------------------------------
#
# Most of the suite's time is the engine's, and most of that is two arm64 builds under qemu
# (20 of the 31 minutes of a serial run, cold). So `make test` runs three workers, each given
# whole groups (--dist loadgroup, which `-n N` alone also gets here) in the order of GROUPS:
# the first three start at once, each next one goes to the first worker that is free, and
# the tests that need no engine come last, a module at a time (`file:<path>`), to whichever
# worker is free; those of a module that also has engine tests go with them. A module at a
# time, because a module whose tests a worker ran in two stretches made its module-scoped
# fixtures twice: test_mirror's second `keys` and `source` attested its registry repository
# again with another key, and a check of every bundle there against the key of the moment failed.
#
#   engine-seal    the arm64 CPU twin (the longest test), then the tests that check that no
#                  temporary seal tag is left at all (SEAL_CHECK below);
#   engine-arm64   the arm64 NPU image (it fails its tiers by design: it never seals);
#   engine:<file>  the other engine tests of a module in OWN_IMAGES, in file order;
#   engine         every other engine test, in file order, one after the other.
#
# Engine tests of different groups run at the same time. That is safe because:
# * a module in OWN_IMAGES builds, tags, runs and removes only images and containers no other
#   module makes (its own cells, or names with a uuid); the modules left in `engine` do not
#   all (test_index_e2e, test_node_cli and test_registry build FROM local/debian:12 with the
#   very same labels, so the very same image ID, and node_cli force-removes it by that ID),
#   so they stay one after the other;
# * smoke_run.seal tags its candidate `ascend-build-candidate:<id>` for the seconds its seal
#   build takes, and a test asserting `temp_tags(engine) <= before` would see another
#   worker's seal as a leftover: such a test holds the engine lock exclusively, every other
#   engine test holds it shared (`_engine_lock`), so a check never overlaps a test that may
#   seal, on any worker.
# A new engine module lands in `engine` until it is shown to fit OWN_IMAGES.

SEAL_CHECK = re.compile(r"temp_tags\(engine\)\s*<=")  # "no temporary tag was left", in a test's source
ARM64_TWIN = "tests/images/test_arm64_e2e.py::test_the_mission_closure_as_an_arm64_twin_under_qemu"
ARM64_NPU = "tests/images/test_arm64_e2e.py::test_an_arm64_npu_image_without_cann_fails_its_libraries_tier_and_gets_no_tag"
OWN_IMAGES = (  # longest first (cold)
    "tests/images/test_pipeline_e2e.py",
    "tests/images/test_own_wheel.py",
    "tests/images/test_cann_installers_e2e.py",
    "tests/images/test_cann_only_e2e.py",
    "tests/images/test_faults_e2e.py",
)
GROUPS = ("engine-seal", "engine-arm64", *(f"engine:{path}" for path in OWN_IMAGES), "engine")

# Every test ends within a bound (pytest-timeout): a hang, or a wait a broken retry rule makes
# (a Retry-After obeyed for an hour), fails its test instead of holding the suite. An engine
# test's bound covers its module's image builds (the arm64 twin under qemu, at load); a test
# that needs no engine has minutes. A test may set its own with @pytest.mark.timeout(SECONDS).
TIMEOUT_ENGINE, TIMEOUT_OTHER = 1800, 600


def pytest_itemcollected(item):
    if item.get_closest_marker("timeout") is None:
        engine = item.get_closest_marker("engine") is not None
        item.add_marker(pytest.mark.timeout(TIMEOUT_ENGINE if engine else TIMEOUT_OTHER))


def pytest_configure(config):
    """`pytest -n N` alone means --dist load, which would spread the engine tests anywhere:
    this suite's groups need loadgroup, in the order of GROUPS.

    SIGINT raises KeyboardInterrupt here, and so reaches the CLI runs the tests interrupt, also
    when the suite was started with it ignored (`make test &` in a script: a background job of a
    non-interactive shell ignores SIGINT, and an ignored signal stays ignored across exec): the
    tests that Ctrl-C a run would otherwise see nothing interrupted."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if getattr(config.option, "numprocesses", None) and getattr(config.option, "dist", "no") == "load":
        config.option.dist = "loadgroup"
    if getattr(config.option, "dist", "no") == "loadgroup":
        config.option.loadscopereorder = False
    if getattr(config, "workerinput", {}).get("ascend_build_loadgroup"):
        config.option.loadgroup = True  # a worker parses the command line again: -n alone says load


def _loadgroup(config) -> bool:
    """True in the workers of an xdist run with --dist loadgroup."""
    return bool(getattr(config.option, "loadgroup", False))


def _checks_seal_tags(item) -> bool:
    try:
        return bool(SEAL_CHECK.search(inspect.getsource(item.function)))
    except (AttributeError, OSError, TypeError):
        return False


def _group(item) -> str:
    if item.get_closest_marker("engine") is None:
        return "file:" + item.nodeid.split("::")[0]
    if item.nodeid == ARM64_TWIN or _checks_seal_tags(item):
        return "engine-seal"
    if item.nodeid == ARM64_NPU:
        return "engine-arm64"
    path = item.nodeid.split("::")[0]
    return f"engine:{path}" if path in OWN_IMAGES else "engine"


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    """Under xdist's loadgroup: give every engine test its group, and put the groups first."""
    if not _loadgroup(config):
        return (yield)
    groups, rank = {}, {}
    for item in items:
        groups[id(item)] = _group(item)
    # a module's tests that need no engine go with its engine tests (their commonest group): one
    # stretch on one worker, so its module-scoped fixtures are made once there
    by_module: Dict[str, Counter] = {}
    for item in items:
        if groups[id(item)] in GROUPS:
            by_module.setdefault(item.nodeid.split("::")[0], Counter())[groups[id(item)]] += 1
    for item in items:
        group = groups[id(item)]
        if group not in GROUPS and item.nodeid.split("::")[0] in by_module:
            group = groups[id(item)] = by_module[item.nodeid.split("::")[0]].most_common(1)[0][0]
        item.add_marker(pytest.mark.xdist_group(group))
        rank[id(item)] = GROUPS.index(group) if group in GROUPS else len(GROUPS)
    items.sort(key=lambda item: rank[id(item)])  # stable: file order within each group
    result = yield  # xdist's own hook, deselection
    for item in items:
        group = groups.get(id(item), "")
        if group and not item.nodeid.endswith("@" + group):
            # xdist 3.8 sets item._nodeid = "<id>@<group>" (what its scheduler groups by), which
            # pytest 9.2 no longer reads: its node ids live in item._id.
            try:
                item._id = type(item._id).parse(f"{item.nodeid}@{group}")
            except (AttributeError, TypeError):
                pass
            if not item.nodeid.endswith("@" + group):
                raise pytest.UsageError(f"cannot put {item.nodeid} in xdist group {group} with this pytest and "
                                        "pytest-xdist: run the suite in one process (make test TEST_WORKERS=0)")
    return result


def pytest_deselected(items):
    """In a worker: count what -m deselected, for the controller's summary line (below)."""
    config = items[0].config if items else None
    if config is not None and hasattr(config, "workeroutput"):
        config.workeroutput["ascend_build_deselected"] = (
            config.workeroutput.get("ascend_build_deselected", 0) + len(items))


class _Deselected:
    """Stands for a test that the workers deselected, in the controller's terminal stats."""


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """xdist controller: say "N deselected" as a serial run does (every worker deselects the same)."""
    count = getattr(node, "workeroutput", {}).get("ascend_build_deselected", 0)
    reporter = node.config.pluginmanager.get_plugin("terminalreporter")
    if count and reporter is not None and not getattr(node.config, "_ascend_build_deselected_told", False):
        node.config._ascend_build_deselected_told = True
        reporter.stats.setdefault("deselected", []).extend(_Deselected() for _ in range(count))


@contextlib.contextmanager
def _engine_lock(path: str, exclusive: bool):
    """A readers-writer lock across processes: shared for tests that may seal, exclusive for the
    seal-tag checks. The turnstile keeps a waiting check from being starved by shared holders."""
    with open(path + ".turnstile", "a") as turnstile, open(path, "a") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            if not exclusive:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            if exclusive:
                fcntl.flock(turnstile, fcntl.LOCK_UN)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Under xdist, an engine test holds the engine lock from its setup (module fixtures that
    seal run there) to its teardown."""
    path = getattr(item.config, "workerinput", {}).get("ascend_build_engine_lock")
    if not path or item.get_closest_marker("engine") is None:
        yield
        return
    with _engine_lock(path, exclusive=_checks_seal_tags(item)):
        yield


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """xdist controller: one lock file for all workers of this session."""
    config = node.config
    if not hasattr(config, "_ascend_build_engine_lock"):
        import tempfile

        fd, config._ascend_build_engine_lock = tempfile.mkstemp(prefix="ascend-build-engine-lock-")
        os.close(fd)
    node.workerinput["ascend_build_engine_lock"] = config._ascend_build_engine_lock
    node.workerinput["ascend_build_loadgroup"] = config.getvalue("dist") == "loadgroup"


def pytest_unconfigure(config):
    path = getattr(config, "_ascend_build_engine_lock", None)
    for leftover in (path, path and path + ".turnstile"):
        if leftover and os.path.exists(leftover):
            os.remove(leftover)


# --- engine fixtures ------------------------------------------------------------

BASE_IMAGE = "local/debian:12"


@pytest.fixture(scope="session")
def engine():
    """A connected Engine; the session skips engine tests when none answers."""
    from builder.engine import Engine

    try:
        return Engine.connect()
    except UserError as e:
        pytest.skip(f"{e.message} (fix: {e.fix}; or run scripts/setup-engine.sh as root)")


@pytest.fixture(scope="session")
def base_image(engine) -> str:
    """The locally made base image (no image can be pulled on the build machine)."""
    if engine.image_id(BASE_IMAGE) is None:
        pytest.skip(f"base image {BASE_IMAGE} missing: run scripts/setup-engine.sh as root")
    return BASE_IMAGE


@pytest.fixture(scope="session")
def registry(tmp_path_factory):
    """A real registry (Debian's docker-registry) with htpasswd auth on loopback."""
    if not Path(REGISTRY_BIN).exists() or not shutil.which("htpasswd"):
        pytest.skip("docker-registry or htpasswd missing: run scripts/setup-engine.sh as root")
    root = tmp_path_factory.mktemp("registry")
    user, password = "ascend", "pw-" + root.name
    htpasswd = subprocess.run(["htpasswd", "-Bbn", user, password], check=True,
                              capture_output=True, text=True).stdout
    (root / "htpasswd").write_text(htpasswd)
    port = free_port()
    proc = serve_registry(root, (
        "version: 0.1\n"
        "log: {level: warn}\n"
        f"storage: {{filesystem: {{rootdirectory: {root / 'data'}}}, delete: {{enabled: true}}}}\n"
        f"http: {{addr: '127.0.0.1:{port}', secret: test-only}}\n"
        f"auth: {{htpasswd: {{realm: ascend-build-test, path: {root / 'htpasswd'}}}}}\n"))
    try:
        wait_up(proc, port, root)
        yield Registry(f"127.0.0.1:{port}", user, password)
    finally:
        stop(proc)


@dataclass(frozen=True)
class TokenRegistry:
    host: str
    username: str
    password: str
    root: Path          # the registry's storage (tests corrupt blobs there)
    tokens: object      # helpers_registry.TokenService: every token request it answered


@pytest.fixture(scope="session")
def token_registry(tmp_path_factory):
    """A real registry with token auth, as public registries run: anonymous pull on
    public/*, everything for the test user, nothing else (see helpers_registry)."""
    from tests.support import registry as hr

    if not Path(REGISTRY_BIN).exists() or not shutil.which("openssl"):
        pytest.skip("docker-registry or openssl missing: run scripts/setup-engine.sh as root")
    root = tmp_path_factory.mktemp("token-registry")
    key, cert, der = hr.make_key(root)
    tokens = hr.TokenService(key, der)
    server, token_port = hr.serve(tokens.handler())
    port = free_port()
    proc = serve_registry(root, hr.registry_config(root, port, f"http://127.0.0.1:{token_port}/token", cert))
    try:
        wait_up(proc, port, root)
        yield TokenRegistry(f"127.0.0.1:{port}", hr.USER, hr.PASSWORD, root, tokens)
    finally:
        stop(proc)
        server.shutdown()


@pytest.fixture
def serve_folder():
    """serve_folder(folder) -> "http://127.0.0.1:PORT": a loopback web server of that folder
    (a release folder, a wheel server, a published file), stopped at the test's end."""
    import functools
    import http.server
    import threading

    servers = []

    def start(folder: Path) -> str:
        handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}"

    yield start
    for server in servers:
        server.shutdown()
