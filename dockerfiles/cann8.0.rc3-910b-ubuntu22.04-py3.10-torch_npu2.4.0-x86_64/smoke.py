#!/usr/bin/env python3
"""ascend-build smoke test: runs INSIDE an image before the image may be tagged.

Installed in ``vocabulary.TOOL_DIR`` with the files of ``vocabulary.SHIPPED_FILES``
beside it (parsers, the error table, versions, vocabulary). Standalone: Python 3.8+,
stdlib + torch (+ torch_npu when present), no other deps.

    python smoke.py [--device auto|npu|cpu] [--tiers NAME,...] [--manifest PATH]
        [--steps 30] [--lr 3e-3] [--timeout-scale 1] [--tier-seconds NAME=SECONDS,...]

Tiers are the entries of ``vocabulary.SMOKE_TIERS``, all by default, each run by the
function its entry names; the manifest defaults to ``vocabulary.MANIFEST``. stdout carries exactly one line: the JSON report (library
noise is sent to stderr). Progress goes to stderr. Exit 0: every selected tier passed
or was skipped with a reason; 1: a tier failed; 2: bad usage or unreadable manifest.

No tier can hang the verdict: the tiers run in a forked tier process, and this process
(stdlib only, no threads) holds each tier to its deadline (its entry's ``seconds``
times ``--timeout-scale``, or ``--tier-seconds``). When one passes, the tier process writes
the Python stack of every thread (faulthandler, on SIGUSR1: it needs no GIL, so a thread
stuck in C code holding it is dumped too), its process group (the all-reduce workers
included) gets SIGTERM, then SIGKILL, and the report holds the tiers before it, that tier
failed with the stacks, and the rest skipped. A tier process that dies (a crash) fails its
tier the same way, with faulthandler's dump of the crash.

The same code runs on `npu` and on `cpu` (the CPU twin image has no CANN and no
torch_npu), so nearly every line an NPU run executes is exercised on any machine.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import faulthandler
import glob
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

try:  # run from the repository (tests): the package's modules
    from builder import vocabulary
    from builder.smoke import error_table, parsers
except ImportError:  # in an image: the files shipped beside this one
    # (loaded from a checkout without the package installed: vocabulary.py is one folder up)
    _HERE = os.path.dirname(os.path.abspath(__file__))
    sys.path.extend([_HERE, os.path.dirname(_HERE)])
    import error_table  # type: ignore[import-not-found,no-redef]  # found on sys.path only in an image
    import parsers  # type: ignore[import-not-found,no-redef]
    import vocabulary  # type: ignore[import-not-found,no-redef]

SCHEMA = 1
DRIVER_LIBS = ("libascend_hal.so", "libdrvdsmi_host.so", "libdcmi.so")
COLLECTIVE_TIMEOUT = 60.0
WORKER_FLAG = "--collective-worker"
DUMP_SECONDS = 5.0   # for a hung tier process to write its stacks (scaled)
STOP_SECONDS = 5.0   # from SIGTERM to SIGKILL of the tier process and its workers (scaled)


def longest_run(tiers, scale=1.0):
    """The longest `supervise` lets a run of ``tiers`` last with every wait spent to its end, in
    seconds: ``vocabulary.SMOKE_STARTUP_SECONDS`` before the first tier and again after each tier
    (to the next one's start, or to the end), each tier's deadline (its entry's ``seconds``), then the stack
    dump of a hung tier (``DUMP_SECONDS``) and at most two `stop_group` calls of two ``STOP_SECONDS``
    each (SIGTERM, then SIGKILL); all scaled. The engine's limit on the container is this plus a margin
    (`builder.images.smoke_run.engine_timeout`), so a deadline changed here moves it too.

    Example:
        >>> longest_run(("versions",)) == 2 * vocabulary.SMOKE_STARTUP_SECONDS + vocabulary.tier("versions").seconds + 25
        True
    """
    waits = (len(tiers) + 1) * vocabulary.SMOKE_STARTUP_SECONDS
    ending = DUMP_SECONDS + 4 * STOP_SECONDS
    return (waits + sum(vocabulary.tier(t).seconds for t in tiers) + ending) * scale
# Test only (tests/test_smoke.py): the tier this names hangs for real (see hang_for_tests).
# Nothing sets it in an image.
HANG_HOOK = "ASCEND_BUILD_SMOKE_TEST_HANG"
RESULT_MARK = "SMOKE_COLLECTIVE_RESULT "

# Known error strings -> cause and fix: the table of `ascend-build explain`, shipped
# into the image as errors.json beside this file (the repository's copy in tests).
_TABLE: list = []  # cache: [table]


def known_errors():
    """The error table: errors.json beside this file (an image), else the repository's."""
    if not _TABLE:
        table = error_table.load_shipped(os.path.dirname(os.path.abspath(__file__)))
        if not table:
            try:  # repository layout: the knowledge base reads builder/data/errors.yaml
                from builder import knowledge
                table = error_table.compile_table(knowledge.error_entries())
            except Exception:  # no table: failures are still reported, only without a hint
                table = ()
        _TABLE.append(table)
    return _TABLE[0]


def diagnose(text, manifest=None):
    """Cause and fix of the first known Ascend error in ``text`` (None when none is known).

    Placeholders of the fix are filled from the manifest where it knows them.
    """
    m = manifest or {}
    values = {"image_min_driver": m.get("min_driver"), "image_min_firmware": m.get("min_firmware"),
              "image_cann": m.get("cann_version"), "image_torch_npu": m.get("torch_npu_version"),
              "image_arch": m.get("arch"), "image_chip": m.get("chip")}
    for entry, _, _, _ in error_table.find(known_errors(), text)[:1]:
        return "%s: %s Fix: %s" % (entry.id, entry.cause, error_table.fill(entry.fix, values, "unknown"))
    return None


def log(msg):
    sys.stderr.write("[smoke] %s\n" % msg)
    sys.stderr.flush()


# ---------------------------------------------------------------- versions.py
_VERSIONS: list = []  # cache: [(module or None, note)]


def versions_module():
    """versions.py (shipped next to this file) orders CANN/HDK/firmware strings;
    plain string comparison is the stated fallback when it cannot be imported."""
    if _VERSIONS:
        return _VERSIONS[0]
    here = os.path.dirname(os.path.abspath(__file__))
    errors = []
    for path in (os.path.join(here, "versions.py"), os.path.join(os.path.dirname(here), "versions.py")):
        if not os.path.isfile(path):
            continue
        try:
            spec = importlib.util.spec_from_file_location("versions", path)
            assert spec is not None and spec.loader is not None, "a .py file has a loader"
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            if all(hasattr(mod, k) for k in ("cann", "hdk", "firmware", "meets_minimum")):
                _VERSIONS.append((mod, "versions.py from %s" % path))
                return _VERSIONS[0]
            errors.append("%s lacks cann/hdk/firmware/meets_minimum" % path)
        except Exception as exc:  # e.g. a missing dependency inside the image
            errors.append("%s: %s: %s" % (path, type(exc).__name__, exc))
    _VERSIONS.append((None, "versions.py unavailable (%s): plain string comparison"
                      % ("; ".join(errors) or "not found next to smoke.py")))
    return _VERSIONS[0]


def same_version(kind, a, b):
    """Equality under Ascend rules (8.0.RC2.beta1 == 8.0.RC2) when versions.py loads."""
    mod, _ = versions_module()
    if mod is not None:
        try:
            parse = getattr(mod, kind)
            return parse(a) == parse(b)
        except Exception:
            pass
    return str(a).strip() == str(b).strip()


def at_least(kind, actual, minimum):
    """True/False when `actual >= minimum` can be decided, None when it cannot: the
    node's rule (versions.meets_minimum) when versions.py loads."""
    mod, _ = versions_module()
    if mod is not None:
        decided = mod.meets_minimum(kind, actual, minimum)
        if decided is not None:
            return decided
    if actual.strip() == minimum.strip():
        return True
    if re.match(r"^\d+(\.\d+)*$", actual) and re.match(r"^\d+(\.\d+)*$", minimum):
        return tuple(int(x) for x in actual.split(".")) >= tuple(int(x) for x in minimum.split("."))
    return None


# ---------------------------------------------------------------- pure parsers
def is_driver_lib(name):
    base = name.split(".so")[0] + ".so"
    return base in DRIVER_LIBS or base.startswith("libdrv") or name.startswith(parsers.DRIVER_DIR + "/")


def is_plugin(obj):
    """torch_npu's operator plugins (libop_plugin_atb.so) are loaded when their ops are
    first used, not at import: what only they need is optional for importing."""
    return re.match(r"^libop_plugin_[\w.-]*\.so", obj) is not None


def classify_missing(needed_by, driver_mount, required=()):
    """{lib: [needing .so]} -> (fatal, from_host, optional).

    Driver libraries come from the host mount, so without the mount they are
    expected-missing, not a failure. A library only plugins need (libatb.so from
    NNAL for libop_plugin_atb.so) is optional: import works, those ops do not;
    unless it is ``required`` (the image declares NNAL: then it must resolve).
    """
    fatal, from_host, optional = {}, {}, {}
    for lib, users in sorted(needed_by.items()):
        if is_driver_lib(lib) and not driver_mount:
            from_host[lib] = users
        elif all(is_plugin(user) for user in users) and lib not in required:
            optional[lib] = users
        else:
            fatal[lib] = users
    return fatal, from_host, optional


def python_matches(expected, actual):
    """Manifest python_version may be "3.11" or "3.11.7": compare as a prefix."""
    return actual == expected or actual.startswith(expected + ".")


def dist_matches(expected, actual):
    """torch "2.13.0+cpu" satisfies a declared "2.13.0" (local label ignored)."""
    return actual == expected or ("+" not in expected and actual.split("+")[0] == expected)


def _normal_version(v):
    """Spellings of one version agree: 2.1.0.rc1 and 2.1.0rc1, 1.0-post1 and 1.0.post1."""
    v = v.strip().lower().replace("-", ".").replace("_", ".")
    return re.sub(r"\.(?=(?:a|b|c|rc|alpha|beta|dev)\d)", "", v)


# Distributions an environment's bootstrap leaves that are no package: Debian's python3-venv
# before bookworm adds a fake "pkg-resources 0.0.0" record to every venv it makes.
BOOTSTRAP_ARTIFACTS = {"pkg-resources": "0.0.0"}


def closure_problems(locked, installed):
    """Every difference between the lock ({name: version}) and the environment: a locked
    distribution missing or at another version, and one installed that the lock lacks
    (the bootstrap's artifacts aside, at exactly their known version)."""
    installed = {k: v for k, v in installed.items() if BOOTSTRAP_ARTIFACTS.get(k) != v or k in locked}
    problems = []
    for name, version in sorted(locked.items()):
        have = installed.get(name)
        if have is None:
            problems.append("%s %s locked, not installed" % (name, version))
        elif _normal_version(have) != _normal_version(version):
            problems.append("%s %s installed, %s locked" % (name, have, version))
    for name in sorted(set(installed) - set(locked)):
        problems.append("%s %s installed, not in the lock" % (name, installed[name]))
    return problems


def conda_packages(prefix):
    """The conda packages installed in ``prefix``, as conda recorded them: {name: "version build"}."""
    found = {}
    for path in sorted(glob.glob(os.path.join(prefix, "conda-meta", "*.json"))):
        try:
            with open(path, encoding="utf-8") as f:
                record = json.load(f)
            found[record["name"]] = "%s %s" % (record["version"], record["build"])
        except (OSError, ValueError, KeyError, TypeError):
            found[os.path.basename(path)] = "unreadable"
    return found


def conda_problems(locked, installed):
    """Every difference between the lock's conda part ({name: "version build"}) and the
    conda packages installed: one missing, at another version or build, or not locked."""
    problems = []
    for name, want in sorted(locked.items()):
        have = installed.get(name)
        if have is None:
            problems.append("conda %s %s locked, not installed" % (name, want))
        elif have != want:
            problems.append("conda %s %s installed, %s locked" % (name, have, want))
    for name in sorted(set(installed) - set(locked)):
        problems.append("conda %s %s installed, not in the lock" % (name, installed[name]))
    return problems


def pip_check():
    """`pip check` of the environment: None when clean, else its complaint."""
    try:
        out = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return "pip check could not run: %s" % exc
    return None if out.returncode == 0 else (out.stdout + out.stderr).strip()[:1000]


def env_differences(expected, environ):
    return {k: {"expected": v, "actual": environ.get(k)}
            for k, v in sorted((expected or {}).items()) if environ.get(k) != v}


SET_ENV_IGNORED = ("_", "SHLVL", "PWD", "OLDPWD")
# NNAL's set_env.sh: it picks ATB_HOME_PATH by the ABI installed torch reports, so running
# it against the image's ENV checks the ABI the ENV chose.
NNAL_SET_ENV = "/usr/local/Ascend/nnal/atb/set_env.sh"


def set_env_script(environ):
    """CANN's set_env.sh for the toolkit the ENV points at; None when there is none."""
    home = (environ.get("ASCEND_TOOLKIT_HOME") or environ.get("ASCEND_HOME_PATH") or "").rstrip("/")
    candidates = [os.path.join(home, "set_env.sh"), os.path.join(os.path.dirname(home), "set_env.sh")] if home else []
    candidates.append("/usr/local/Ascend/ascend-toolkit/set_env.sh")
    return next((c for c in candidates if os.path.isfile(c)), None)


def set_env_differences(script, environ):
    """What sourcing CANN's ``script`` would still change in ``environ``, per variable ({} when
    the image's ENV already holds it all). set_env.sh adds some entries only when their folder
    exists (tools/aml/lib64 ...), so it is run, not read: what it sets here is what counts."""
    try:
        out = subprocess.run(["bash", "-c", '. "$1" >/dev/null 2>&1; env -0', "set_env.sh", script],
                             env=dict(environ), capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"(set_env.sh)": "could not be run: %s" % exc}
    after = dict(item.split("=", 1) for item in out.stdout.decode("utf-8", "replace").split("\0") if "=" in item)
    diff = {}
    for name, value in sorted(after.items()):
        before = environ.get(name)
        if name in SET_ENV_IGNORED or before == value:
            continue
        if before is None:
            diff[name] = "unset; set_env.sh sets %s" % value
        elif ":" in value or ":" in before:  # a list of paths: only what it adds matters
            have = set(p.rstrip("/") for p in before.split(":") if p)
            added = [p for p in value.split(":") if p and p.rstrip("/") not in have]
            if added:
                diff[name] = "lacks %s (set_env.sh adds it)" % ":".join(added)
        else:
            diff[name] = "is %s; set_env.sh sets %s" % (before, value)
    return diff


def check_host(driver, firmware, manifest, device):
    """Driver/firmware are host requirements: each must be >= the manifest minimum.
    -> (problems, notes)."""
    problems, notes = [], []
    for what, have, need, kind in (("driver", driver, manifest.get("min_driver"), "hdk"),
                                   ("firmware", firmware, manifest.get("min_firmware"), "firmware")):
        if have is None:
            if what == "driver" and device == "npu":
                problems.append("host driver version unknown: mount -v %s:%s" % (parsers.DRIVER_INFO, parsers.DRIVER_INFO))
            else:
                notes.append("%s version unknown (no version.info mounted)" % what)
            continue
        if not need:
            continue
        ok = at_least(kind, have, need)
        if ok is False:
            problems.append("host %s %s is older than the %s this image needs: upgrade the %s"
                            % (what, have, need, what))
        elif ok is None:
            notes.append("cannot order %s %s against %s without versions.py" % (what, have, need))
    return problems, notes


# ---------------------------------------------------------------- tier plumbing
class Result(object):
    def __init__(self, status, summary, details=None):
        self.status, self.summary, self.details = status, summary, details or {}


def passed(summary, **details):
    return Result("passed", summary, details)


def failed(summary, **details):
    return Result("failed", summary, details)


def skipped(summary, **details):
    return Result("skipped", summary, details)


class Ctx(object):
    def __init__(self, args, manifest, device):
        self.args, self.manifest, self.device = args, manifest, device
        self.variant = manifest.get("variant", "cpu")
        self.wants_npu = device == "npu" or self.variant == "npu"
        self.import_failed = None
        self.torch = None
        self.workers = None  # the collective tier's processes, started early (start_workers)
        self.collective_timeout = COLLECTIVE_TIMEOUT * (args.timeout_scale if args else 1.0)


def import_stack(ctx):
    """Import torch (+ torch_npu when the image or device is npu) once."""
    if ctx.torch is None:
        import torch
        if ctx.wants_npu:
            import torch_npu  # noqa: F401  (registers the npu device)
        ctx.torch = torch
    return ctx.torch


def needs_import(ctx):
    if ctx.import_failed:
        return skipped("skipped: import failed (%s)" % ctx.import_failed)
    import_stack(ctx)
    return None


def device_name(ctx, index=0):
    return "npu:%d" % index if ctx.device == "npu" else "cpu"


def sync(ctx):
    if ctx.device == "npu":
        ctx.torch.npu.synchronize()


# ---------------------------------------------------------------- tiers
def tier_versions(ctx):
    """Users lose days to a torch/torch_npu/CANN/Python that differs from what the
    image claims; compare what is installed (metadata only, nothing imported) with
    the manifest, and check the ENV the Dockerfile set (non-interactive shells never
    source set_env.sh)."""
    m, problems = ctx.manifest, []
    vmod, vnote = versions_module()
    d = {"versions_module": vnote, "python": platform.python_version()}
    if m.get("python_version") and not python_matches(m["python_version"], d["python"]):
        problems.append("python %s running, manifest declares %s" % (d["python"], m["python_version"]))
    d["torch"] = parsers.dist_version("torch")
    if cann_only(m):
        if d["torch"] is not None:
            problems.append("torch %s installed in a CANN-only image: the manifest declares none" % d["torch"])
    elif d["torch"] is None:
        problems.append("torch not installed, manifest declares %s" % m.get("torch_version"))
    elif m.get("torch_version") and not dist_matches(m["torch_version"], d["torch"]):
        problems.append("torch %s installed, manifest declares %s" % (d["torch"], m["torch_version"]))
    d["torch_npu"] = parsers.dist_version("torch_npu", "torch-npu")
    found, looked = parsers.find_cann(os.environ, m, platform.machine())
    d["cann_files"], d["cann_paths_looked_at"] = found, looked
    if ctx.variant == "npu":
        want = m.get("torch_npu_version")
        if cann_only(m):
            if d["torch_npu"] is not None:
                problems.append("torch_npu %s installed in a CANN-only image" % d["torch_npu"])
        elif d["torch_npu"] is None:
            problems.append("torch_npu missing, manifest declares %s" % want)
        elif want and not dist_matches(want, d["torch_npu"]):
            problems.append("torch_npu %s installed, manifest declares %s" % (d["torch_npu"], want))
        cann = m.get("cann_version")
        if cann and not found:
            problems.append("CANN %s declared but no CANN version file found: looked at %s"
                            % (cann, ", ".join(looked)))
        for f in found if cann else ():
            if not f["version"]:
                problems.append("no CANN version in %s" % f["path"])
            elif not same_version("cann", f["version"], cann):
                problems.append("CANN %s in %s, manifest declares %s" % (f["version"], f["path"], cann))
        d["set_env"] = set_env_script(os.environ) if found else None
        scripts = [d["set_env"]] if d["set_env"] else []
        if m.get("nnal"):
            if os.path.isfile(NNAL_SET_ENV):
                scripts.append(NNAL_SET_ENV)
            else:
                problems.append("NNAL declared but %s is missing: NNAL is not installed" % NNAL_SET_ENV)
        d["set_env_differs"] = {}
        for script in scripts:
            differs = set_env_differences(script, os.environ)
            d["set_env_differs"].update(differs)
            if differs:
                problems.append("the ENV lacks what CANN's %s sets: %s" % (script, "; ".join(
                    "%s %s" % (k, v) for k, v in sorted(differs.items()))))
    else:
        if d["torch_npu"] is not None:
            problems.append("cpu twin contains torch_npu %s: it must not" % d["torch_npu"])
        if found:
            problems.append("cpu twin contains CANN (%s): it must not" % ", ".join(f["path"] for f in found))
    lock = m.get("lock") or {}
    installed = parsers.environment_distributions(sys.prefix)
    d["distributions"], d["lock"] = installed, lock.get("state")
    if lock.get("state") in ("ok", "incomplete"):
        closure = closure_problems(lock.get("distributions") or {}, installed)
        if closure:
            problems.append("the environment differs from the lock: %s" % "; ".join(closure))
        if lock.get("conda"):  # a conda cell whose lock pins its conda packages
            d["conda_packages"] = conda_packages(sys.prefix)
            differs = conda_problems(lock["conda"], d["conda_packages"])
            if differs:
                problems.append("the conda environment differs from the lock: %s" % "; ".join(differs))
        complaint = pip_check()
        if complaint:
            problems.append("pip check: %s" % complaint)
    diff = env_differences(m.get("env"), os.environ)
    d["env_checked"], d["env_differs"] = sorted((m.get("env") or {})), diff
    if diff:
        problems.append("ENV differs from the manifest: %s" % ", ".join(
            "%s=%r (expected %r)" % (k, v["actual"], v["expected"]) for k, v in diff.items()))
    if problems:
        return failed("; ".join(problems), **d)
    return passed("python %s, %s, %s, %s, %d ENV values as declared" % (
        d["python"], "no torch (CANN-only)" if cann_only(m) else "torch %s" % d["torch"],
        "%d distributions%s as locked, pip check clean" % (len(installed), " and %d conda packages" % len(
            lock["conda"]) if lock.get("conda") else "") if lock.get("state") in ("ok", "incomplete")
        else "no lock (%s): the closure was resolved at build time" % (lock.get("state") or "none"),
        ("CANN %s" if cann_only(m) else "torch_npu %s, CANN %%s" % d["torch_npu"])
        % ", ".join(str(f["version"]) for f in found)
        if ctx.variant == "npu" else "no torch_npu/CANN (cpu twin)", len(d["env_checked"])), **d)


def package_objects(package, patterns):
    """Shared objects of an installed package, located WITHOUT importing it."""
    files = []
    for root in _package_roots(package):
        for pat in patterns:
            files.extend(sorted(glob.glob(os.path.join(root, pat))))
    if not files:
        try:
            dist = importlib.metadata.distribution(package)
            for p in dist.files or ():
                s = str(p).replace("\\", "/")
                if any(re.match("^" + re.escape(package + "/" + pat).replace(r"\*", "[^/]*") + "$", s)
                       for pat in patterns):
                    files.append(str(dist.locate_file(p)))
        except importlib.metadata.PackageNotFoundError:
            pass
    return sorted(set(files))


def _package_roots(package):
    """Folders of an installed package, found without importing it."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return []
    return list(spec.submodule_search_locations or []) if spec else []


def cann_only(manifest):
    """A CANN-only image (no PyTorch): its manifest names no framework."""
    return manifest.get("framework", "pytorch") is None


# What a CANN-only image's libraries tier link-checks: the runtime every framework loads.
CANN_RUNTIME = ("libascendcl.so", "libhccl.so")


def cann_runtime_objects(environ):
    """CANN_RUNTIME as found on LD_LIBRARY_PATH (the first folder holding each)."""
    found = []
    for name in CANN_RUNTIME:
        for folder in environ.get("LD_LIBRARY_PATH", "").split(":"):
            if folder and os.path.isfile(os.path.join(folder, name)):
                found.append(os.path.join(folder, name))
                break
    return found


def tier_libraries(ctx):
    """A static link check tells, with no NPU present, whether an image can ever
    import torch_npu: every DT_NEEDED library of its .so files must resolve with the
    image's LD_LIBRARY_PATH. The cpu twin checks torch's own libraries instead; a
    CANN-only image, CANN's runtime (CANN_RUNTIME), which must be there."""
    if cann_only(ctx.manifest):
        pkg = "CANN runtime"
        objs = cann_runtime_objects(os.environ)
        absent = [n for n in CANN_RUNTIME if not any(o.endswith("/" + n) for o in objs)]
        if absent:
            return failed("%s not found on LD_LIBRARY_PATH (%s): CANN is missing or its lib64 is not on it"
                          % (", ".join(absent), os.environ.get("LD_LIBRARY_PATH", "")), package=pkg, missing=absent)
    else:
        pkg = "torch_npu" if ctx.variant == "npu" else "torch"
        objs = package_objects(pkg, ("lib/*.so*", "_C*.so"))
    driver_mount = os.path.isdir(parsers.DRIVER_LIB64) and bool(os.listdir(parsers.DRIVER_LIB64))
    d: dict = {"package": pkg, "objects": len(objs), "driver_mount": driver_mount,
         "ld_library_path": os.environ.get("LD_LIBRARY_PATH", "")}
    if not objs:
        return failed("%s is not installed (no shared objects found): nothing to link-check" % pkg, **d)
    if not shutil.which("ldd"):
        return failed("ldd not found in the image: install glibc's tools (libc-bin / glibc-common)", **d)
    # At run time `import torch` has loaded torch's own libraries (libc10.so,
    # libtorch*.so) before torch_npu asks for them, and torch_npu's RPATH does not
    # name torch/lib: give ldd the same view by putting both lib folders first.
    preloaded = [] if cann_only(ctx.manifest) else [
        os.path.join(root, "lib") for name in ("torch", pkg) for root in _package_roots(name)]
    env = dict(os.environ, LD_LIBRARY_PATH=":".join(preloaded + [os.environ.get("LD_LIBRARY_PATH", "")]).strip(":"))
    d["preloaded_dirs"] = preloaded
    needed_by, from_driver = {}, set()  # type: dict[str, list[str]], set[str]
    for obj in objs:
        proc = subprocess.run(["ldd", obj], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, timeout=60, env=env)
        missing, resolved = parsers.parse_ldd(proc.stdout)
        for lib in missing:
            needed_by.setdefault(lib, []).append(os.path.basename(obj))
        from_driver.update(k for k, v in resolved.items() if v.startswith(parsers.DRIVER_DIR + "/"))
    nnal = ctx.variant == "npu" and bool(ctx.manifest.get("nnal"))
    fatal, from_host, optional = classify_missing(needed_by, driver_mount, ("libatb.so",) if nnal else ())
    d.update(missing=fatal, expected_from_host_driver_mount=from_host, optional_missing=optional,
             resolved_from_driver_mount=sorted(from_driver))
    if nnal:  # whether or not this torch_npu links it: NNAL's library is what the image promises
        d["atb"] = os.path.join(os.environ.get("ATB_HOME_PATH", ""), "lib", "libatb.so")
        if not os.environ.get("ATB_HOME_PATH") or not os.path.isfile(d["atb"]):
            fatal["libatb.so"] = fatal.get("libatb.so", []) + ["the NNAL this image declares (ATB_HOME_PATH=%s)"
                                                                % os.environ.get("ATB_HOME_PATH", "")]
    if fatal:
        hints = sorted(set(
            ("host driver mount lacks it" if is_driver_lib(lib) else
             "CANN missing or its lib64 not on LD_LIBRARY_PATH") for lib in fatal))
        table_hint = diagnose(" ".join("%s: cannot open shared object file" % lib for lib in fatal), ctx.manifest)
        if table_hint:
            hints.append(table_hint)
        return failed("%d libraries missing: %s (%s)" % (len(fatal), ", ".join(
            "%s (needed by %s)" % (lib, ", ".join(users)) for lib, users in fatal.items()),
            "; ".join(hints)), **d)
    note = " (%s expected from the host driver mount)" % ", ".join(from_host) if from_host else ""
    if nnal:
        note += "; NNAL's %s present" % d["atb"]
    if optional:
        hint = diagnose(" ".join("%s: cannot open shared object file" % lib for lib in optional), ctx.manifest)
        note += "; optional, only for plugins: %s%s" % (", ".join(
            "%s (needed by %s)" % (lib, ", ".join(users)) for lib, users in optional.items()),
            " -> " + hint if hint else "")
    return passed("all libraries of %d %s objects resolve%s" % (len(objs), pkg, note), **d)


def tier_import(ctx):
    """A published image that cannot even `import torch_npu` is the most common
    failure; import it the way a user's script would, and explain known errors."""
    t0 = time.time()
    try:
        torch = import_stack(ctx)
    except BaseException as exc:
        text = "%s: %s" % (type(exc).__name__, exc)
        ctx.import_failed = text.splitlines()[0][:200]
        hint = diagnose(text + traceback.format_exc(), ctx.manifest)
        return failed("import failed: %s%s" % (ctx.import_failed, " -> " + hint if hint else ""),
                      error=text, hint=hint)
    d = {"seconds_import": round(time.time() - t0, 3), "torch": torch.__version__,
         "torch_file": torch.__file__}
    if ctx.wants_npu:
        d["torch_npu"] = getattr(sys.modules.get("torch_npu"), "__version__", None)
    works, d["numpy"] = numpy_interop(torch)
    if not works:
        hint = diagnose(d["numpy"], ctx.manifest)
        return failed("numpy and torch do not work together: %s%s" % (d["numpy"], " -> " + hint if hint else ""), **d)
    return passed("imported torch %s%s in %.1f s; %s" % (
        torch.__version__, ", torch_npu %s" % d["torch_npu"] if ctx.wants_npu else "",
        d["seconds_import"], d["numpy"] or "no numpy in the environment"), **d)


def numpy_interop(torch):
    """torch built against numpy 1.x fails with numpy 2 ("Numpy is not available"): both
    directions must give the same numbers. -> (works, what was seen); no numpy works."""
    try:
        import numpy
    except ImportError:
        return True, None
    try:
        a = numpy.arange(6, dtype=numpy.float32).reshape(2, 3)
        t = torch.from_numpy(a) * 2
        back = t.numpy()
        if back.tolist() != (a * 2).tolist() or str(t.dtype) != "torch.float32":
            return False, "torch.from_numpy/tensor.numpy gave %r, expected %r" % (back.tolist(), (a * 2).tolist())
    except Exception as exc:
        return False, "numpy %s: %s: %s" % (numpy.__version__, type(exc).__name__,
                                            str(exc).splitlines()[0][:200] if str(exc) else "")
    return True, "numpy %s: torch.from_numpy and tensor.numpy agree" % numpy.__version__


def tier_device(ctx):
    """`torch.npu.is_available()` alone can lie about usability: run a matmul on the
    device and compare it with the CPU, and check the host driver/firmware against
    the minimums the image was validated for."""
    skip = needs_import(ctx)
    if skip:
        return skip
    torch, problems = ctx.torch, []
    d = {"device": ctx.device}
    if ctx.device == "npu":
        d["available"] = bool(torch.npu.is_available())
        d["device_count"] = int(torch.npu.device_count()) if d["available"] else 0
        if not d["available"] or d["device_count"] < 1:
            problems.append("torch.npu.is_available() is False or no device: pass --device "
                            "/dev/davinciN /dev/davinci_manager /dev/devmm_svm /dev/hisi_hdc "
                            "and mount the driver lib64")
        else:
            torch.npu.set_device(0)
            d["device_name"] = str(torch.npu.get_device_name(0))
    if not problems:
        gen = torch.Generator().manual_seed(1234)
        a = torch.randn(256, 256, generator=gen)
        b = torch.randn(256, 256, generator=gen)
        want = a @ b
        got = (a.to(device_name(ctx)) @ b.to(device_name(ctx))).cpu()
        d["matmul_max_abs_diff"] = float((got - want).abs().max())
        if not torch.allclose(got, want, rtol=1e-3, atol=1e-3):
            problems.append("256x256 fp32 matmul on %s differs from CPU (max abs diff %.3g)"
                            % (ctx.device, d["matmul_max_abs_diff"]))
    drv, fw = parsers.read_version_info(parsers.DRIVER_INFO), parsers.read_version_info(parsers.FIRMWARE_INFO)
    d["driver"], d["firmware"] = drv or "unknown", fw or "unknown"
    hp, notes = check_host(drv, fw, ctx.manifest, ctx.device)
    problems.extend(hp)
    d["notes"] = notes
    if problems:
        return failed("; ".join(problems), **d)
    return passed("%s works: matmul matches CPU (max diff %.2g); driver %s, firmware %s" % (
        d.get("device_name", ctx.device), d["matmul_max_abs_diff"], d["driver"], d["firmware"]), **d)


def make_model(torch, vocab, d_model=128, seq_len=32):
    """The field guide's minimal reproduction: 2 layers, hidden 128, ff 512, 8 heads."""
    nn = torch.nn

    class Tiny(nn.Module):  # type: ignore[name-defined]  # torch is the module passed in
        def __init__(self):
            super(Tiny, self).__init__()
            self.emb = nn.Embedding(vocab, d_model)
            self.pos = nn.Parameter(torch.zeros(1, seq_len, d_model))
            layer = nn.TransformerEncoderLayer(d_model, 8, dim_feedforward=512, dropout=0.0,
                                               batch_first=True)
            self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = nn.Linear(d_model, vocab)

        def forward(self, x):
            return self.head(self.enc(self.emb(x) + self.pos))

    return Tiny()


def autocast_and_scaler(ctx):
    """bf16 autocast + GradScaler, with the fallbacks older torch/torch_npu need."""
    torch, dev = ctx.torch, ctx.device
    try:
        with torch.autocast(device_type=dev, dtype=torch.bfloat16):
            pass
        autocast, ac_name = (lambda: torch.autocast(device_type=dev, dtype=torch.bfloat16)), "torch.autocast"
    except Exception:  # torch 2.1 + torch_npu: the npu autocast lives under torch.npu.amp
        autocast, ac_name = (lambda: torch.npu.amp.autocast(dtype=torch.bfloat16)), "torch.npu.amp.autocast"
    try:
        scaler, sc_name = torch.amp.GradScaler(dev), "torch.amp.GradScaler(%r)" % dev
    except Exception:
        if dev == "npu":
            scaler, sc_name = torch.npu.amp.GradScaler(), "torch.npu.amp.GradScaler()"
        else:
            scaler, sc_name = torch.cuda.amp.GradScaler(enabled=False), "torch.cuda.amp.GradScaler(enabled=False)"
    return autocast, ac_name, scaler, sc_name


def bf16_probe(torch, autocast, model, x):
    """None when ``model`` runs forward under ``autocast`` on the CPU, else why not. Some
    CPU builds refuse bf16 matmuls where the CPU lacks bf16 (torch 2.1 on aarch64 without
    it, or under qemu: "could not create a primitive descriptor for a matmul primitive")."""
    try:
        with torch.no_grad(), autocast():
            model(x)
    except RuntimeError as exc:
        return str(exc).splitlines()[0][:200]
    return None


def cpu_has_native_bf16():
    try:
        with open("/proc/cpuinfo") as fh:
            flags = set(re.findall(r"\S+", fh.read()))
    except OSError:
        return None
    return bool(flags & {"avx512_bf16", "amx_bf16"})


# Intra-op threads of the train tier on the CPU. On the 2-core build machine (AMD EPYC,
# loadavg 3 to 7 from other jobs) this tier took 2.0 to 3.7 s with one thread against 7.1 to
# 27 s with torch's default of two (medians of 3 to 5 runs per setting, side by side), with
# the same losses; two threads used 4 to 5 times the CPU time of one, and 2.3 s with
# OMP_WAIT_POLICY=passive: the time went to OpenMP threads spinning while waiting. In the
# quieter runs (loadavg 3.5 to 4.1) two threads took 1.5 to 1.6 s, one thread 1.9 to 2.0 s.
TRAIN_CPU_THREADS = 1


def cpu_quota(root="/sys/fs/cgroup"):
    """CPUs the cgroup's CFS quota allows (v2 cpu.max, v1 cpu.cfs_quota_us), None when none is set."""
    for names in (("cpu.max",), ("cpu/cpu.cfs_quota_us", "cpu/cpu.cfs_period_us")):
        fields = []
        try:
            for name in names:
                with open(os.path.join(root, name)) as fh:
                    fields += fh.read().split()
            quota, period = fields[0], float(fields[1])
        except (OSError, IndexError, ValueError):
            continue
        return None if quota in ("max", "-1") else round(int(quota) / period, 2)
    return None


def cpu_seen(torch):
    """What the CPU twin's torch sees of the CPU: usable CPUs, quota, threads, kernels."""
    d = {"cpu_count": os.cpu_count(), "cpu_quota": cpu_quota(), "cpu_threads_default": torch.get_num_threads()}
    if hasattr(os, "sched_getaffinity"):
        d["cpus_usable"] = len(os.sched_getaffinity(0))
    capability = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)
    d["cpu_capability"] = capability() if capability else None
    try:  # whether bf16 matmuls go to oneDNN (else to a fallback: 10x slower per matmul here)
        d["cpu_bf16_onednn"] = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except Exception:
        d["cpu_bf16_onednn"] = None
    return d


def tier_train(ctx):
    """A tiny transformer must learn a synthetic task (next token = token + 1 mod
    vocab) under bf16 autocast with the GradScaler in the right order; NaN or a flat
    loss means broken operators, precision setup or optimizer, not the model. On the
    CPU it runs with TRAIN_CPU_THREADS intra-op threads, torch's count restored after."""
    skip = needs_import(ctx)
    if skip:
        return skip
    if ctx.device != "cpu":
        return train(ctx, {})
    seen = cpu_seen(ctx.torch)
    ctx.torch.set_num_threads(TRAIN_CPU_THREADS)
    try:
        return train(ctx, dict(seen, cpu_threads=ctx.torch.get_num_threads()))
    finally:
        ctx.torch.set_num_threads(seen["cpu_threads_default"])


def train(ctx, cpu):
    """The train tier's steps and checks; ``cpu``: what cpu_seen saw, for the details."""
    torch, steps, vocab, batch, seq = ctx.torch, ctx.args.steps, 64, 16, 32
    dev = device_name(ctx)
    if ctx.device == "npu":
        torch.npu.set_device(0)
    torch.manual_seed(0)
    model = make_model(torch, vocab, seq_len=seq).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=ctx.args.lr)
    autocast, ac_name, scaler, sc_name = autocast_and_scaler(ctx)
    no_bf16 = bf16_probe(torch, autocast, model, torch.zeros((2, seq), dtype=torch.long)) if ctx.device == "cpu" else None
    if no_bf16:  # the CPU twin then trains in float32; an NPU run never falls back
        autocast, ac_name = (lambda: contextlib.nullcontext()), "none: float32 (this CPU refuses bf16 matmul: %s)" % no_bf16
    gen = torch.Generator().manual_seed(0)
    losses, times, logits_dtype = [], [], None
    for _ in range(steps):
        hang_for_tests(tier_train)  # test only: a training step that never ends
        x = torch.randint(0, vocab, (batch, seq), generator=gen)
        y = ((x + 1) % vocab).to(dev)
        x = x.to(dev)
        t0 = time.time()
        opt.zero_grad(set_to_none=True)
        with autocast():
            logits = model(x)
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, vocab), y.reshape(-1))
        logits_dtype = str(logits.dtype)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        losses.append(float(loss.item()))
        sync(ctx)
        times.append(time.time() - t0)
    d = {"device": dev, "steps": steps, "lr": ctx.args.lr, "autocast": ac_name,
         "logits_dtype": logits_dtype, "grad_scaler": sc_name,
         "param_dtype": str(next(model.parameters()).dtype),
         "losses": [round(v, 4) for v in losses],
         "mean_step_ms": round(1000.0 * sum(times) / max(len(times), 1), 2)}
    if ctx.device == "cpu":  # without these, bf16 matmuls are emulated: slow, still correct
        d["cpu_native_bf16"] = cpu_has_native_bf16()
    d.update(cpu)
    if not all(math.isfinite(v) for v in losses):
        return failed("non-finite loss during training (check GradScaler order / bf16 ops)", **d)
    if losses[-1] > 0.7 * losses[0]:
        return failed("loss did not decrease: %.3f -> %.3f after %d steps (needs <= 70%% of the first)"
                      % (losses[0], losses[-1], steps), **d)
    return passed("loss %.3f -> %.3f in %d steps (%s, %.1f ms/step)" % (
        losses[0], losses[-1], steps, logits_dtype, d["mean_step_ms"]), **d)


def free_port():
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
    finally:
        s.close()


def collective_worker(argv):
    """Child process: wait for the port on stdin (it starts before the parent has threads),
    init the process group, all-reduce rank+1, print the result. "stop" ends it unused."""
    rank, world, device = int(argv[0]), int(argv[1]), argv[2]
    timeout = float(argv[3]) if len(argv) > 3 else COLLECTIVE_TIMEOUT
    line = sys.stdin.readline().strip()
    if not line.isdigit():
        return 0
    port = int(line)
    import torch
    import torch.distributed as dist
    if device == "npu":
        import torch_npu  # noqa: F401
        torch.npu.set_device(rank)
    backend = "hccl" if device == "npu" else "gloo"
    dist.init_process_group(backend, init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=timeout))
    t = torch.full((4,), float(rank + 1), device="npu:%d" % rank if device == "npu" else "cpu")
    dist.all_reduce(t)
    values = t.cpu().tolist()
    dist.destroy_process_group()
    sys.stdout.write(RESULT_MARK + json.dumps({"rank": rank, "values": values}) + "\n")
    return 0


def start_workers(world, device, timeout=COLLECTIVE_TIMEOUT):
    """The all-reduce's worker processes, waiting for their port. They are started when the
    program starts, before torch brings threads into it: forking a process that has threads
    can hang the child before it runs anything (seen under qemu-user)."""
    env = dict(os.environ)
    if device == "cpu":
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    return [subprocess.Popen([sys.executable, os.path.abspath(__file__), WORKER_FLAG, str(rank), str(world), device,
                              "%g" % timeout],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             universal_newlines=True, env=env) for rank in range(world)]


def stop_workers(procs):
    """Workers the program started but no tier used (an earlier failure, or no collective tier)."""
    for p in procs or ():
        try:
            p.stdin.write("stop\n")
            p.stdin.close()
            p.wait(timeout=10)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            p.kill()


def tier_collective(ctx):
    """Multi-device training needs a working collective backend (hccl on NPU, gloo on
    cpu): two processes all-reduce a tensor and must both see the sum."""
    skip = needs_import(ctx)
    if skip:
        return skip
    world = 2
    if ctx.device == "npu":
        count = int(ctx.torch.npu.device_count())
        if count < 2:
            return skipped("skipped: %d NPU visible, hccl all-reduce needs >= 2" % count, device_count=count)
    procs, ctx.workers = ctx.workers or start_workers(world, ctx.device, ctx.collective_timeout), None
    hang_for_tests(tier_collective)  # test only: the workers then wait for their port forever
    port = free_port()
    for p in procs:  # communicate() below closes their stdin
        p.stdin.write("%d\n" % port)
        p.stdin.flush()
    deadline, outputs, timed_out = time.time() + ctx.collective_timeout, [], False
    for p in procs:
        try:
            outputs.append(p.communicate(timeout=max(1.0, deadline - time.time()))[0])
        except subprocess.TimeoutExpired:
            timed_out = True
            for q in procs:
                q.kill()
            outputs.append(p.communicate()[0])
    expected = float(world * (world + 1) // 2)
    d: dict = {"backend": "hccl" if ctx.device == "npu" else "gloo", "world_size": world,
         "expected": expected, "results": [], "returncodes": [p.returncode for p in procs]}
    for out in outputs:
        res = [json.loads(line[len(RESULT_MARK):]) for line in out.splitlines() if line.startswith(RESULT_MARK)]
        d["results"].extend(res)
        if not res:
            d.setdefault("output_tail", []).append(out[-2000:])
    if timed_out:
        return failed("all-reduce timed out after %d s (%s): check HCCL_CONNECT_TIMEOUT, devices, ports"
                      % (ctx.collective_timeout, d["backend"]), **d)
    ok = len(d["results"]) == world and all(all(v == expected for v in r["values"]) for r in d["results"])
    if not ok or any(d["returncodes"]):
        tail = " ".join(d.get("output_tail", [""])).strip().splitlines()
        hint = diagnose(" ".join(d.get("output_tail", [])), ctx.manifest)
        return failed("%s all-reduce over %d processes did not give %s: %s%s" % (
            d["backend"], world, expected, tail[-1] if tail else d["results"],
            " -> " + hint if hint else ""), **d)
    return passed("%s all-reduce over %d processes gave %s" % (d["backend"], world, expected), **d)


def tier_functions(names):
    """{name: the function its entry of ``vocabulary.SMOKE_TIERS`` names} for ``names``, looked up
    here when the program starts: an entry naming no function of this file is bad usage (exit 2),
    said before any tier runs."""
    found = {}
    for name in names:
        function = globals().get(vocabulary.tier(name).function)
        if not callable(function):
            raise UsageError("tier %s: its entry in vocabulary.SMOKE_TIERS names the function %s, which smoke.py "
                             "does not define" % (name, vocabulary.tier(name).function))
        found[name] = function
    return found


# ---------------------------------------------------------------- main
class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def parse_args(argv):
    names = vocabulary.tier_names()
    p = Parser(prog="smoke.py", description="ascend-build in-image smoke test",
               formatter_class=argparse.RawDescriptionHelpFormatter,
               epilog="tiers, in the order they run (vocabulary.SMOKE_TIERS):\n" + "\n".join(
                   "  %-11s %s" % (t.name, t.proves) for t in vocabulary.SMOKE_TIERS))
    p.add_argument("--device", default="auto", choices=("auto", "npu", "cpu"))
    p.add_argument("--tiers", default=",".join(names))
    p.add_argument("--manifest", default=vocabulary.MANIFEST)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--lr", type=float, default=3e-3, help="AdamW learning rate (0 proves the check bites)")
    p.add_argument("--timeout-scale", type=float, default=1.0,
                   help="multiplies every default deadline (the pipeline passes 4 under qemu)")
    p.add_argument("--tier-seconds", default="", metavar="NAME=SECONDS,...",
                   help="a tier's deadline in seconds, not scaled (default: its entry's seconds)")
    args = p.parse_args(argv)
    if not (0 < args.timeout_scale < 1000):
        raise UsageError("--timeout-scale must be > 0 and < 1000")
    args.deadlines = {}
    for item in [i.strip() for i in args.tier_seconds.split(",") if i.strip()]:
        name, _, secs = item.partition("=")
        try:
            value = float(secs)
        except ValueError:
            value = -1.0
        if name.strip() not in names or not (0 < value < 1e6):
            raise UsageError("--tier-seconds %s: expected NAME=SECONDS with NAME one of %s" % (item, ",".join(names)))
        args.deadlines[name.strip()] = value
    chosen = [t.strip() for t in args.tiers.split(",") if t.strip()]
    unknown = [t for t in chosen if t not in names]
    if unknown or not chosen:
        raise UsageError("unknown tier(s) %s; choose from %s" % (",".join(unknown) or "(none)", ",".join(names)))
    if args.steps < 2:
        raise UsageError("--steps must be >= 2")
    args.tiers = [t for t in names if t in chosen]
    args.functions = tier_functions(args.tiers)
    return args


def load_manifest(path):
    try:
        with open(path) as fh:
            m = json.load(fh)
    except (OSError, ValueError) as exc:
        raise UsageError("cannot read manifest %s: %s" % (path, exc)) from exc
    if not isinstance(m, dict) or m.get("schema") != SCHEMA:
        raise UsageError("manifest %s: expected a JSON object with schema %d" % (path, SCHEMA))
    return m


def resolve_device(choice, manifest):
    if choice != "auto":
        return choice
    if manifest.get("variant") in ("npu", "cpu"):
        return manifest["variant"]
    return "npu" if parsers.dist_version("torch_npu", "torch-npu") else "cpu"


def hang_for_tests(tier):
    """Test only: with ASCEND_BUILD_SMOKE_TEST_HANG=<name> (``HANG_HOOK``) set, the tier of that
    name (``tier`` is its function) hangs for real, so the tests can prove its deadline holds.
    The collective tier then blocks in a C call that holds the GIL (libc's pause through
    ctypes.PyDLL), as a C call inside torch can, with its workers still waiting for their port;
    the train tier sleeps in a step. Without the variable (as in every image) this returns at once."""
    name = next(t.name for t in vocabulary.SMOKE_TIERS if t.function == tier.__name__)
    if os.environ.get(HANG_HOOK) != name:
        return
    log("%s: hanging on purpose (%s=%s, a test)" % (name, HANG_HOOK, name))
    if tier is tier_collective:
        import ctypes
        pause = ctypes.PyDLL(None).pause  # PyDLL: the GIL stays held during the call
        while True:
            pause()
    while True:
        time.sleep(1.0)


def run_tier(name, ctx):
    log("%s ..." % name)
    t0 = time.time()
    try:
        res = ctx.args.functions[name](ctx)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        text = "%s: %s" % (type(exc).__name__, exc)
        hint = diagnose(text, ctx.manifest)
        res = failed("%s%s" % (text.splitlines()[0][:300], " -> " + hint if hint else ""),
                     error=text, traceback=traceback.format_exc()[-4000:], hint=hint)
    entry = {"name": name, "status": res.status, "seconds": round(time.time() - t0, 3),
             "summary": res.summary, "details": res.details}
    log("%s %s (%.1f s): %s" % (name, res.status, entry["seconds"], res.summary))
    return entry


# ---------------------------------------------------------------- deadlines
def deadline_of(name, args):
    """Seconds the tier ``name`` may take: --tier-seconds, else its default times the scale."""
    if name in args.deadlines:
        return args.deadlines[name]
    return vocabulary.tier(name).seconds * args.timeout_scale


def _send(fd, event):
    data = (json.dumps(event) + "\n").encode("utf-8")
    while data:
        data = data[os.write(fd, data):]


# ---------------------------------------------------------------- files read
UNRECORDED = ("/proc/", "/sys/", "/dev/", "/tmp/", "/run/")
# ... except inside the Python environment that runs the tiers (a venv may live under /tmp, e.g. a
# test suite's in a fresh clone there): its files are the image's whatever the path
ENVIRONMENT = tuple(sorted(set(os.path.join(os.path.realpath(p), "") for p in
                               (sys.prefix, sys.exec_prefix, getattr(sys, "base_prefix", sys.prefix)))))


class FileRecorder(object):
    """Which files of the image the tiers of ``vocabulary.recorded_tiers()`` read, each tier's new ones in the
    order first seen (the report's ``files_read``: the prefetch list of the image's lazily pullable
    variant). Two sources, both stdlib: an audit hook (``sys.addaudithook``) sees every ``open``
    Python makes (modules, their bytecode, data files); ``/proc/self/maps`` lists every file mapped
    into the process, so shared libraries loaded by ``dlopen`` (extension modules and every library
    they pull in, which no audit event names) are there too. The first recorded tier also gets
    what was mapped and imported before the tier process started (the interpreter, its startup
    modules). Not seen: files only stat-ed or listed, and what child processes read."""

    def __init__(self):
        self.opened, self.active, self.seen, self.started = [], False, set(), False
        try:
            sys.addaudithook(self._hook)
        except AttributeError:  # Python < 3.8: /proc/self/maps only
            pass

    def _hook(self, event, args):
        if self.active and event == "open" and args:
            path = args[0]
            if isinstance(path, (str, bytes)) and path:
                self.opened.append(path)

    @staticmethod
    def mapped():
        out = []
        try:
            with open("/proc/self/maps") as fh:
                for line in fh:
                    fields = line.split(None, 5)
                    if len(fields) == 6 and fields[5].startswith("/"):
                        out.append(fields[5].rstrip("\n"))
        except OSError:
            pass
        return out

    def begin(self, tier):
        if tier not in vocabulary.recorded_tiers():
            return
        self.active = True
        if not self.started:
            self.started = True
            startup = [getattr(m, "__file__", None) for m in list(sys.modules.values())]
            self.opened.extend([sys.executable] + [f for f in startup if isinstance(f, str)] + self.mapped())

    def end(self, tier):
        """The files first read during ``tier`` (absolute, regular files; a symlink and what it names)."""
        if tier not in vocabulary.recorded_tiers():
            return None
        self.active = False
        found = []
        for raw in self.opened + self.mapped():
            path = os.fsdecode(raw)
            if path.endswith(" (deleted)"):
                continue
            absolute = os.path.abspath(path)
            for candidate in (absolute, os.path.realpath(absolute)):
                if candidate in self.seen or (candidate.startswith(UNRECORDED) and not candidate.startswith(ENVIRONMENT)):
                    continue
                self.seen.add(candidate)
                if os.path.isfile(candidate):
                    found.append(candidate)
        self.opened = []
        return found


def tier_process(ctx, events_fd, dump_fd):
    """The forked child that runs the tiers; tells the parent on ``events_fd`` (JSON lines)
    when each starts and what it gave. faulthandler writes every thread's stack to
    ``dump_fd`` on SIGUSR1 (a deadline passed) and on a fatal signal (a crash)."""
    faulthandler.enable(file=dump_fd, all_threads=True)
    faulthandler.register(signal.SIGUSR1, file=dump_fd, all_threads=True)
    if any(ctx.args.functions[n] is tier_collective for n in ctx.args.tiers):
        ctx.workers = start_workers(2, ctx.device, ctx.collective_timeout)
        _send(events_fd, {"event": "workers", "pids": [p.pid for p in ctx.workers]})
    recorder = FileRecorder()
    for name in ctx.args.tiers:
        _send(events_fd, {"event": "start", "tier": name})
        recorder.begin(name)
        entry = run_tier(name, ctx)
        files = recorder.end(name)
        if files is not None:
            _send(events_fd, {"event": "files", "tier": name, "paths": files})
        _send(events_fd, {"event": "done", "entry": entry})
    stop_workers(ctx.workers)
    _send(events_fd, {"event": "end"})
    return 0


class Events(object):
    """The tier process's JSON lines, each awaited until a deadline (select: no thread)."""

    def __init__(self, fd):
        self.fd, self.buf, self.eof = fd, b"", False

    def next(self, until):
        """("event", dict), ("eof", None) or ("timeout", None) once time.monotonic() >= until."""
        while True:
            if b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                try:
                    return "event", json.loads(line.decode("utf-8", "replace"))
                except ValueError:
                    continue
            if self.eof:
                return "eof", None
            left = until - time.monotonic()
            if left <= 0:
                return "timeout", None
            if select.select([self.fd], [], [], left)[0]:
                chunk = os.read(self.fd, 1 << 16)
                self.buf += chunk
                self.eof = not chunk


def running(pid):
    """True while ``pid`` runs (a zombie, waiting to be reaped, does not)."""
    try:
        with open("/proc/%d/stat" % pid) as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _reap(pid, until):
    """The tier process's wait status once it ended, None if it still runs at ``until``."""
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return 0
        if done:
            return status
        if time.monotonic() >= until:
            return None
        time.sleep(0.05)


def stop_group(pid, workers, grace):
    """SIGTERM the tier process's group (its workers are in it), SIGKILL what is left after
    ``grace`` s; -> (the tier process's wait status, worker pids still running)."""
    status = None
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for target in [pid] + list(workers):
            try:
                (os.killpg if target == pid else os.kill)(target, sig)
            except OSError:
                pass
            if target == pid:
                try:
                    os.kill(pid, sig)  # before its setsid() the group is not there yet
                except OSError:
                    pass
        until = time.monotonic() + grace
        if status is None:
            status = _reap(pid, until)
        while any(running(w) for w in workers) and time.monotonic() < until:
            time.sleep(0.05)
        if status is not None and not any(running(w) for w in workers):
            return status, []
    return status, [w for w in workers if running(w)]


def read_dump(fd, wait):
    """What faulthandler wrote to ``fd``, waiting up to ``wait`` s for it to stop growing."""
    until, size, since = time.monotonic() + wait, -1, time.monotonic()
    while time.monotonic() < until:
        now = os.fstat(fd).st_size
        if now != size:
            size, since = now, time.monotonic()
        elif size > 0 and time.monotonic() - since > 0.3:
            break
        time.sleep(0.05)
    return os.pread(fd, max(os.fstat(fd).st_size, 0), 0).decode("utf-8", "replace") if hasattr(os, "pread") else ""


FRAME = re.compile(r'^\s*File "([^"]*)", line (\d+) in (\S+)')


def hung_frames(stacks):
    """The frames (innermost first) of the thread that ran the tiers (``run_tier`` in its
    stack) in faulthandler's dump; [] when none has it."""
    for block in re.split(r"\n(?=(?:Current thread|Thread) 0x)", stacks):
        frames = [m.groups() for m in (FRAME.match(line) for line in block.splitlines()) if m]
        if any(f[2] == "run_tier" for f in frames):
            return ["%s (%s line %s)" % (f[2], os.path.basename(f[0]), f[1]) for f in frames]
    return []


def signal_name(status):
    if status is None:
        return "still running after SIGKILL"
    if os.WIFSIGNALED(status):
        num = os.WTERMSIG(status)
        try:
            return "killed by signal %d (%s)" % (num, signal.Signals(num).name)
        except ValueError:
            return "killed by signal %d" % num
    return "exit code %d" % os.WEXITSTATUS(status)


def supervise(ctx, report, keep_fds):
    """Run the tiers in a forked tier process, each within its deadline; fill report["tiers"].

    On a deadline, or when the tier process dies, the tier under way fails with the stacks
    of every thread, the tier process and its workers are stopped, and the tiers after it
    are skipped: the report of the tiers before it stands."""
    args = ctx.args
    scale = args.timeout_scale
    read_fd, write_fd = os.pipe()
    dump_fd, dump_path = tempfile.mkstemp(prefix="ascend-build-smoke-stacks-")
    os.unlink(dump_path)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the tier process: never returns into the caller
        code = 70
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.setsid()  # its own process group: the workers it starts are in it
            os.close(read_fd)
            for fd in keep_fds:
                os.close(fd)
            code = tier_process(ctx, write_fd, dump_fd)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    os.close(write_fd)
    events, workers, current, begun = Events(read_fd), [], None, time.monotonic()
    until = begun + vocabulary.SMOKE_STARTUP_SECONDS * scale
    done = False
    try:
        while True:
            kind, event = events.next(until)
            if kind == "event":
                now = time.monotonic()
                if event.get("event") == "workers":
                    workers = [int(w) for w in event.get("pids", [])]
                    log("the all-reduce workers wait for their port: pids %s" % " ".join(map(str, workers)))
                elif event.get("event") == "start":
                    current, begun = event.get("tier"), now
                    until = now + deadline_of(current, args)
                elif event.get("event") == "done":
                    report["tiers"].append(event["entry"])
                    current, until = None, now + vocabulary.SMOKE_STARTUP_SECONDS * scale
                elif event.get("event") == "files":
                    report.setdefault("files_read", {})[str(event.get("tier"))] = list(event.get("paths") or [])
                elif event.get("event") == "end":
                    done = True
                    break
                continue
            ran = [t["name"] for t in report["tiers"]]
            name = current or next((t for t in args.tiers if t not in ran), None)
            if kind == "timeout":
                limit = deadline_of(current, args) if current else vocabulary.SMOKE_STARTUP_SECONDS * scale
                try:
                    os.kill(pid, signal.SIGUSR1)  # faulthandler: every thread's stack into dump_fd
                except OSError:
                    pass
                stacks = read_dump(dump_fd, DUMP_SECONDS * scale)
            status, left = stop_group(pid, workers, STOP_SECONDS * scale)
            if kind == "eof":
                stacks = read_dump(dump_fd, 1.0)
            if name is None:  # every tier reported: only the clean-up hung or ended oddly
                log("the tier process was stopped after the last tier (%s)" % signal_name(status))
                done = True
                break
            seconds = round(time.monotonic() - begun, 3)
            frames = hung_frames(stacks)
            where = ("hung in %s" % " <- ".join(frames[:3])) if frames else (
                "its stacks: see details" if stacks.strip() else "no stack dump came")
            if kind == "timeout":
                what = "did not finish within %g s (its deadline%s)" % (
                    limit, "" if current else ": the tier process never started it")
            else:
                what = "ended with its tier process, %s" % signal_name(status)
            summary = "%s %s: %s; the tier process and its workers were stopped%s" % (
                name, what, where, "" if not left else ", except pids %s" % left)
            report["tiers"].append({"name": name, "status": "failed", "seconds": seconds, "summary": summary,
                                    "details": {"deadline_seconds": deadline_of(name, args), "hung_in": frames,
                                                "stacks": stacks[-16000:], "tier_process": signal_name(status),
                                                "workers": {"pids": workers, "still_running": left}}})
            log(summary)
            if stacks.strip():
                sys.stderr.write(stacks[-16000:])
            for rest in args.tiers[args.tiers.index(name) + 1:]:
                report["tiers"].append({"name": rest, "status": "skipped", "seconds": 0.0,
                                        "summary": "skipped: not run, the %s tier did not finish" % name,
                                        "details": {}})
            break
        if done:
            status = _reap(pid, time.monotonic() + STOP_SECONDS * scale)
            if status is None or any(running(w) for w in workers):
                stop_group(pid, workers, STOP_SECONDS * scale)
    finally:  # also on SIGTERM or Ctrl-C of this process: nothing of the tier process lives on
        if _reap(pid, time.monotonic()) is None:
            stop_group(pid, workers, STOP_SECONDS * scale)
        os.close(read_fd)
        os.close(dump_fd)


class Stopped(Exception):
    pass


def _stopped(signum, frame):
    raise Stopped("stopped by signal %d" % signum)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [WORKER_FLAG]:
        return collective_worker(argv[1:])
    sys.stdout.flush()
    real_stdout = os.dup(1)
    os.dup2(2, 1)  # everything printed by libraries (also from C) lands on stderr
    report: dict = {"schema": SCHEMA, "passed": False, "python": platform.python_version(),
              "started": datetime.datetime.now(datetime.timezone.utc).isoformat()}
    previous = signal.signal(signal.SIGTERM, _stopped)  # docker stop: the tier process is stopped too
    try:
        args = parse_args(argv)
        manifest = load_manifest(args.manifest)
        ctx = Ctx(args, manifest, resolve_device(args.device, manifest))
        report.update(cell=manifest.get("cell"), variant=ctx.variant, device=ctx.device, tiers=[],
                      host={"driver": parsers.read_version_info(parsers.DRIVER_INFO), "firmware": parsers.read_version_info(parsers.FIRMWARE_INFO)})
        supervise(ctx, report, (real_stdout,))
        report["passed"] = all(t["status"] != "failed" for t in report["tiers"])
        code = 0 if report["passed"] else 1
    except UsageError as exc:
        log("usage: %s" % exc)
        report["error"], code = str(exc), 2
    except Stopped as exc:
        log(str(exc))
        report["error"], code = str(exc), 1
    finally:
        signal.signal(signal.SIGTERM, previous)
    sys.stdout.flush()
    sys.stderr.flush()
    with os.fdopen(real_stdout, "w") as out:
        out.write(json.dumps(report, sort_keys=False) + "\n")
    log("%s" % ("PASSED" if report["passed"] else "FAILED (exit %d)" % code))
    return code


if __name__ == "__main__":
    sys.exit(main())
