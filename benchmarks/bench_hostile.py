"""Benchmark (not a test): does the real CLI stay clean on ~190 hostile inputs?

Each input (benchmarks/hostile/inputs.py) is built in a temporary folder: matrices with
escape sequences and GitHub annotations in keys, values and file names; render trees
with user data, symlinks out, FIFOs, /dev/zero, immutable folders; fake host roots with
FIFOs, huge or absurd version files and broken npu-smi programs; and loopback servers
(benchmarks/hostile/fakes.py) posing as a misbehaving OCI registry, a misbehaving package
index, and a foreign host that logs any credentials it is sent; and forged eStargz layers (odd
TOC fields, huge declared sizes, gzip bombs, many chunks, chunks that leave gaps), read by a
small program as `image --lazy`'s binding and a lazy reader do (benchmarks/hostile/estargz_reader.py:
the reader has no command of its own).

The real `ascend-build` runs once per input as a subprocess (stdin /dev/null, own
session, RLIMIT_AS 3 GiB, 60 s timeout unless the input says less). An input is clean
when its exit code is one it allows (0 where the input is legitimately fine, 1 or 2 for
a refusal), it finished in time, its output has no 'Traceback', no raw ESC/BEL, and no
line starting with '::' (a GitHub Actions workflow command), and its own checks pass
(e.g. no planted version read from outside --root, no non-ASCII digits recorded).

Counted across all inputs, and required to be zero: Authorization headers seen by the
foreign hosts, files changed outside the output folder (sha256 + mtime snapshots of
symlink targets and victim folders), user data changed inside it, local files opened
through file:// URLs, and any change to builder/data/ascend-compat.yaml of this
repository (`releases check --write` runs against a copy of builder/).

Left out on purpose: slow-trickle servers (the code's own deadlines are 120 s and 300 s
per answer), hosts that need DNS (no network beyond loopback), and anything needing a
Docker engine (DOCKER_HOST points at a missing socket).

Prints one row per class (inputs, clean, tracebacks, timeouts, foreign credentials,
files changed outside, worst time, peak memory), a totals line, then every input that
is not clean with the reason. Exit 0 only if everything is clean.

Run: .venv/bin/python -m benchmarks.bench_hostile [-v] [-k TEXT]   (about 2 minutes; no Docker, loopback only)
     -v: one line per input; -k TEXT: only the inputs whose label contains TEXT
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

sys.dont_write_bytecode = True  # leave no __pycache__ behind in the repository

from benchmarks.hostile import fakes, fixtures as fx, runner
from benchmarks.hostile.inputs import CLASSES, Case, Ctx, Shared, Skip, all_cases

REPO = runner.REPO
COMPAT = REPO / "builder/data/ascend-compat.yaml"


@dataclass
class Outcome:
    case: Case
    reasons: List[str] = field(default_factory=list)
    run: Optional[runner.Run] = None
    foreign_credentials: int = 0
    outside_changed: int = 0
    skipped: str = ""

    @property
    def clean(self) -> bool:
        return not self.reasons

    @property
    def finished(self) -> runner.Run:
        """The run, for an outcome whose input ran (``run`` is set)."""
        assert self.run is not None, self.case.label
        return self.run


# --- the environment every run gets ------------------------------------------------------


def child_env(tmp: Path) -> Dict[str, str]:
    """No proxies, no real Docker config or engine, a throwaway HOME, fake registry credentials."""
    drop = ("ASCEND_BUILD_", "DOCKER_")
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy") and not k.startswith(drop)}
    home = tmp / "home"
    (home / ".docker").mkdir(parents=True)
    loopback = "127.0.0.1,localhost,192.0.2.2"
    env.update(HOME=str(home), DOCKER_CONFIG=str(home / ".docker"), DOCKER_HOST=f"unix://{tmp}/no-docker.sock",
               XDG_CONFIG_HOME=str(home / ".config"), XDG_CACHE_HOME=str(home / ".cache"), PIP_CONFIG_FILE=os.devnull,
               no_proxy=loopback, NO_PROXY=loopback, SHELL="/bin/sh", PYTHONDONTWRITEBYTECODE="1",
               # never the public index, even if an input forgot --index-url
               ASCEND_BUILD_INDEX_URL="http://127.0.0.1:9/simple/",
               # fake credentials: the foreign hosts must never see them
               ASCEND_BUILD_REGISTRY_USER="alice", ASCEND_BUILD_REGISTRY_PASSWORD="s3cret")
    return env


def build_shared(tmp: Path, stack: contextlib.ExitStack, env: Dict[str, str]) -> Shared:
    """Matrices, a 2-cell render and the shipped matrix's render (both by the CLI), a healthy host root, servers."""
    folder = tmp / "shared"
    m0, m1, m2 = (fx.write(folder / name, text) for name, text in (("m0.yaml", fx.M0), ("m1.yaml", fx.M1),
                                                                   ("m2.yaml", fx.M2)))
    rendered, full = folder / "rendered", folder / "full"
    for matrix, out in ((m2, rendered), (REPO / "matrix/default.yaml", full)):
        done = runner.run(runner.cli() + ["render", "--matrix", str(matrix), "--out", str(out)], folder, env)
        if done.rc != 0:
            raise SystemExit(f"cannot build the fixtures: render of {matrix} exited {done.rc}:\n{done.text[-2000:]}")
    # the full tree's cells carry locks, as the repository's do: user data a subset render must keep
    for cell in full.iterdir():
        lock = REPO / "dockerfiles" / cell.name / "requirements.lock"
        fx.write(cell / "requirements.lock", lock.read_bytes() if lock.is_file() else b"# a lock\n")
    return Shared(tmp=tmp, m0=m0, m1=m1, m2=m2, rendered=rendered, full=full,
                  root_ok=fx.host_root(folder / "root_ok"),
                  foreign=stack.enter_context(fakes.bind_foreign()),
                  foreign_lo=stack.enter_context(fakes.ForeignHost("127.0.0.1")),
                  realm=stack.enter_context(fakes.ForeignHost("127.0.0.1")))


# --- one input ----------------------------------------------------------------------------


def run_case(case: Case, number: int, shared: Shared, env: Dict[str, str]) -> Outcome:
    folder = shared.tmp / "cases" / f"{number:03d}"
    folder.mkdir(parents=True)
    outcome = Outcome(case)
    foreign_hosts = (shared.foreign, shared.foreign_lo)
    with contextlib.ExitStack() as stack:  # servers, watches, chattr -i: undone before the next input
        ctx = Ctx(folder, shared, stack)
        try:
            argv = case.setup(ctx)
        except Skip as why:
            outcome.skipped = str(why)
            return outcome
        outside, keep = fx.snapshot(ctx.outside), fx.snapshot(ctx.keep)
        marks = [len(host.log) for host in foreign_hosts]
        run = runner.run((ctx.command or runner.cli()) + argv, folder, {**env, **ctx.env},
                         timeout=case.timeout, memory=case.memory, tty=case.tty)
        outcome.run = run
        outcome.reasons = runner.problems(run, case.expect)
        outcome.reasons += [why for why in (check(ctx, run) for check in case.checks) if why]
        outcome.foreign_credentials = sum(h.credentials_seen(m) for h, m in zip(foreign_hosts, marks))
        outside_changed = fx.changed(outside, fx.snapshot(ctx.outside))
        keep_changed = fx.changed(keep, fx.snapshot(ctx.keep))
    outcome.outside_changed = len(outside_changed)
    if outcome.foreign_credentials:
        outcome.reasons.append(f"a foreign host saw credentials {outcome.foreign_credentials} time(s)")
    if outside_changed:
        outcome.reasons.append(f"changed outside --out: {_short(outside_changed, folder)}")
    if keep_changed:
        outcome.reasons.append(f"user data in --out changed: {_short(keep_changed, folder)}")
    opened = [p for w in ctx.watches for p in w.opened]
    if opened:
        outcome.reasons.append(f"opened a local file named by a file:// URL: {_short(opened, folder)}")
    return outcome


def _short(paths, folder: Path) -> str:
    names = [os.path.relpath(p, folder) for p in paths]
    return ", ".join(names[:3]) + (f" (+{len(names) - 3})" if len(names) > 3 else "")


# --- report ---------------------------------------------------------------------------------


def _row(name: str, outcomes: List[Outcome]) -> List[str]:
    ran = [o for o in outcomes if o.run]
    worst = max((o.finished.seconds for o in ran), default=0.0)
    peak = max((o.finished.rss_mb for o in ran), default=0.0)
    return [name, str(len(ran)), str(sum(o.clean for o in ran)),
            str(sum("Traceback" in o.finished.text for o in ran)), str(sum(o.finished.timed_out for o in ran)),
            str(sum(o.foreign_credentials for o in ran)), str(sum(o.outside_changed for o in ran)),
            f"{worst:.1f}", f"{peak:.0f}"]


def print_table(outcomes: List[Outcome]) -> None:
    head = ["class", "inputs", "clean", "tracebacks", "hangs", "foreign creds", "changed outside", "worst s",
            "peak MB"]
    rows = [_row(c, [o for o in outcomes if o.case.cls == c]) for c in CLASSES] + [_row("total", outcomes)]
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    line = lambda r: "  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths)))  # noqa
    print(line(head))
    for r in rows[:-1]:
        print(line(r))
    print("  ".join("-" * w for w in widths))
    print(line(rows[-1]))


def main(verbose: bool = False, only: str = "") -> Dict[str, str]:
    """Run the inputs (those whose label contains ``only``, if given); return the headline figures."""
    started = time.monotonic()
    compat_before = hashlib.sha256(COMPAT.read_bytes()).hexdigest()
    cases = [c for c in all_cases() if only.lower() in c.label.lower()]
    outcomes: List[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="ascend-bench-hostile-") as tmp, contextlib.ExitStack() as stack:
        env = child_env(Path(tmp))
        shared = build_shared(Path(tmp), stack, env)
        print(f"{len(cases)} hostile inputs; foreign host at {shared.foreign.url}", flush=True)
        for number, case in enumerate(cases):
            outcome = run_case(case, number, shared, env)
            outcomes.append(outcome)
            if verbose and outcome.run:
                print(f"  [{case.cls}] {case.label}: exit {outcome.run.rc}, {outcome.run.seconds:.2f} s"
                      + ("" if outcome.clean else "  NOT CLEAN: " + "; ".join(outcome.reasons)), flush=True)
            elif not verbose:
                print("s" if outcome.skipped else "." if outcome.clean else "x", end="", flush=True)
    compat_same = hashlib.sha256(COMPAT.read_bytes()).hexdigest() == compat_before
    elapsed = time.monotonic() - started
    print("\n")
    print_table(outcomes)
    ran = [o for o in outcomes if o.run]
    bad = [o for o in ran if not o.clean]
    skipped = [o for o in outcomes if o.skipped]
    print(f"\nbuilder/data/ascend-compat.yaml of the repository: {'unchanged' if compat_same else 'CHANGED'}")
    print(f"total time {elapsed:.0f} s")
    for o in skipped:
        print(f"skipped: [{o.case.cls}] {o.case.label}: {o.skipped}")
    if bad:
        print(f"\n{len(bad)} input(s) not clean:")
        for o in bad:
            print(f"  [{o.case.cls}] {o.case.label}: " + "; ".join(o.reasons))
    if not ran:
        raise SystemExit("no input ran" + (f" (none matches -k {only!r})" if only else ""))
    slowest = max(ran, key=lambda o: o.finished.seconds)
    biggest = max(ran, key=lambda o: o.finished.rss_mb)
    all_clean = not bad and compat_same
    return {
        "hostile inputs clean": f"{len(ran) - len(bad)} of {len(ran)}"
                                + (f" ({len(skipped)} skipped)" if skipped else ""),
        "tracebacks / timeouts": f"{sum('Traceback' in o.finished.text for o in ran)} / {sum(o.finished.timed_out for o in ran)}",
        "credentials seen by a foreign host": str(sum(o.foreign_credentials for o in ran)),
        "files changed outside --out": str(sum(o.outside_changed for o in ran)),
        "knowledge base (ascend-compat.yaml)": "unchanged" if compat_same else "CHANGED",
        "slowest input": f"{slowest.finished.seconds:.1f} s ({slowest.case.label})",
        "peak memory of one run": f"{biggest.finished.rss_mb:.0f} MB ({biggest.case.label})",
        "hostile verdict": "clean" if all_clean else "NOT clean",
        "hostile suite time": f"{elapsed:.0f} s",
    }


if __name__ == "__main__":
    argv = sys.argv[1:]
    figures = main(verbose="-v" in argv, only=argv[argv.index("-k") + 1] if "-k" in argv else "")
    sys.exit(0 if figures["hostile verdict"] == "clean" else 1)
