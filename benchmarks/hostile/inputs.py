"""The hostile inputs, class by class.

Each ``Case`` has a ``setup`` that builds its input in its own folder (``ctx.dir``, the
CLI's working directory), starts any fake server, and returns the CLI's arguments; the
exit codes that count as clean; and checks of its own beyond the ones every output gets
(no traceback, no raw ESC/BEL, no line starting with '::', no timeout).

Labels follow the audit (/tmp/hostile/results.md, recheck.md); "(was FAIL)" marks the
inputs that once failed there.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from . import fakes, fixtures as fx
from .runner import MEMORY, REPO, Run

N = "9" * 5000


class Skip(Exception):
    """This machine cannot make the input (e.g. no chattr +i); the case is not counted."""


@dataclass
class Shared:
    """What many inputs use, built once: matrices, a rendered tree, a host root, the foreign hosts."""
    tmp: Path
    m0: Path
    m1: Path
    m2: Path
    rendered: Path          # `render --matrix m2.yaml`: the two cells CELL_A and CELL_X
    full: Path              # the shipped matrix rendered, with the repo's requirements.lock files copied in
    root_ok: Path
    foreign: fakes.ForeignHost      # 192.0.2.2 (or a second loopback port)
    foreign_lo: fakes.ForeignHost   # 127.0.0.1, another port: "localhost:PORT" redirects
    realm: fakes.ForeignHost        # a loopback token service a registry may legitimately name (not counted)


@dataclass
class Ctx:
    dir: Path
    shared: Shared
    stack: contextlib.ExitStack
    outside: List[Path] = field(default_factory=list)   # must not change: they are outside --out
    keep: List[Path] = field(default_factory=list)      # user data inside --out: must not change either
    watches: List[fakes.OpenWatch] = field(default_factory=list)
    command: Optional[List[str]] = None                 # instead of the installed CLI (the repo copy)
    env: Dict[str, str] = field(default_factory=dict)
    notes: Dict[str, str] = field(default_factory=dict)   # what a setup hands its own checks

    def serve(self, server):
        return self.stack.enter_context(server)

    def watch(self, *paths: Path) -> fakes.OpenWatch:
        w = self.stack.enter_context(fakes.OpenWatch(*map(str, paths)))
        self.watches.append(w)
        return w


Check = Callable[[Ctx, Run], Optional[str]]


@dataclass
class Case:
    cls: str
    label: str
    setup: Callable[[Ctx], List[str]]
    expect: Tuple[int, ...]
    checks: Tuple[Check, ...] = ()
    timeout: float = 60.0
    memory: int = MEMORY
    tty: bool = False


# --- checks ----------------------------------------------------------------------


def absent(*needles: str) -> Check:
    def check(ctx, run):
        hits = [n for n in needles if n in run.text]
        return f"output says {hits[0]!r}" if hits else None
    return check


def mentions(*words: str) -> Check:
    """The refusal names what was wrong (any of the words, case-insensitive)."""
    def check(ctx, run):
        low = run.text.lower()
        return None if any(w.lower() in low for w in words) else f"output names none of {words}: {run.text[-300:]!r}"
    return check


def faster_than(seconds: float) -> Check:
    return lambda ctx, run: None if run.seconds < seconds else f"took {run.seconds:.1f} s (> {seconds:.0f} s)"


def _nonascii_digits(text: str) -> List[str]:
    return sorted({c for c in text if not c.isascii() and unicodedata.category(c) == "Nd"})


def no_nonascii_digits(ctx, run):
    """Non-ASCII digits (Arabic-Indic, fullwidth) must not reach what the report records, escaped or not.

    The "skipped" list may quote a skipped file's name (that is evidence, not data)."""
    text = run.out
    try:
        report = json.loads(run.out)
        if isinstance(report, dict):
            report.pop("skipped", None)
        text = json.dumps(report, ensure_ascii=False)  # \\u0663 counts too
    except ValueError:
        pass
    bad = _nonascii_digits(text)
    return f"report carries non-ASCII digit(s) {bad}" if bad else None


# --- setup helpers -----------------------------------------------------------------


def _file(ctx: Ctx, name: str, text) -> str:
    fx.write(ctx.dir / name, text)
    return name


def validate(text: str, name: str = "m.yaml") -> Callable[[Ctx], List[str]]:
    return lambda ctx: ["validate", "--matrix", _file(ctx, name, text), "--out", "nolocks"]


def args(*argv: str) -> Callable[[Ctx], List[str]]:
    return lambda ctx: list(argv)


def with_root(command: str, **host) -> Callable[[Ctx], List[str]]:
    """host/doctor on a fresh fake root built with these host_root() options."""
    def setup(ctx):
        fx.host_root(ctx.dir / "root", **host)
        return [command, "--root", "root"]
    return setup


def pull(mode: str, target: Callable[[Ctx], str] = lambda ctx: "") -> Callable[[Ctx], List[str]]:
    """`pull` from a FakeRegistry in ``mode``; ``target``: its redirect target or token realm."""
    def setup(ctx):
        reg = ctx.serve(fakes.FakeRegistry(mode, target(ctx)))
        return ["pull", "--registry", reg.address, "--root", str(ctx.shared.root_ok)]
    return setup


def check_index(mode: str, *extra: str) -> Callable[[Ctx], List[str]]:
    def setup(ctx):
        idx = ctx.serve(fakes.FakeIndex(mode, local=str(ctx.dir / "local")))
        return ["releases", "check", "--index-url", idx.index_url, *extra]
    return setup


def rendered_copy(ctx: Ctx, name: str = "out") -> Path:
    return fx.copy_tree(ctx.shared.rendered, ctx.dir / name)


# --- security ----------------------------------------------------------------------


def security() -> List[Case]:
    S = "security"
    cases = [Case(S, f"validate: {label}", validate(text), (1, 2)) for label, text in fx.INJECTION_MATRICES.items()]

    def injected_names(kind):
        def setup(ctx):
            text = "cells: [\n" if kind == "a" else fx.INJECTION_MATRICES["key with newline+annotation"]
            fx.write(ctx.dir / "dir" / f"{kind}{fx.ANNOTATION}.yaml", text)
            return ["validate", "--matrix", "dir"]
        return setup

    def explain_span(ctx):
        return ["explain", "libascend_hal.so \x1b[2J\x1b]0;TITLE\x07 not found", "--root", str(ctx.shared.root_ok)]

    def runners(text):
        return lambda ctx: ["ci-matrix", "--matrix", str(ctx.shared.m2), "--runners", _file(ctx, "r.yaml", text)]

    cases += [
        Case(S, "validate on a TTY: duplicate key with ESC[2J (was FAIL)", validate(fx.DUPKEY_ESC), (2,), tty=True),
        Case(S, "validate on a TTY: value with CSI colours", validate(fx.INJECTION_MATRICES[
            "value with CSI colour escapes"]), (1,), tty=True),
        Case(S, "validate folder: file name 'a\\n::error...' with a syntax error (was FAIL)", injected_names("a"),
             (2,)),
        Case(S, "validate folder: file name 'b\\n::error...' with a finding (was FAIL)", injected_names("b"), (1,)),
        *[Case(S, f"ci-matrix --runners: {label} (was FAIL)" if i < 2 else f"ci-matrix --runners: {label}",
               runners(text), (2,)) for i, (label, text) in enumerate(fx.RUNNERS.items())],
        Case(S, "explain on a TTY: ESC[2J + OSC inside the matched span (was FAIL)", explain_span, (0, 1), tty=True),
        Case(S, "explain through a pipe: OSC inside the matched span", explain_span, (0, 1)),
        Case(S, "host: Driver_Install_Path_Param with OSC/CSI (was FAIL)",
             with_root("host", drv=None, install="Driver_Install_Path_Param=/opt/x" + fx.OSC + "\x1b[2J"), (0,)),
        Case(S, "doctor: npu-smi stderr with OSC/CSI (was FAIL)",
             with_root("doctor", smi="printf 'x\\n\\033]0;PWNED\\007\\033[2J dcmi module initialize failed' >&2; "
                                     "exit 1"), (1,)),
        Case(S, "host: npu-smi prints '::error' lines and fails",
             with_root("host", smi="printf 'line1\\n::error file=x::INJECTED\\n' >&2; exit 3"), (0,)),
        Case(S, "doctor: npu-smi prints '::error' lines and fails",
             with_root("doctor", smi="printf 'line1\\n::error file=x::INJECTED\\n' >&2; exit 3"), (1,)),
        Case(S, "record --set value with OSC + newline + '::error'",
             args("record", "rec", "--set", "k=" + fx.OSC + fx.ANNOTATION), (0,)),
        Case(S, "record --set key with newline + '::error'", args("record", "rec", "--set", "bad\n::error::X=1"),
             (2,)),
        Case(S, "pull: tags with newline+'::error' and OSC (was FAIL)", pull("tag_injection"), (1,)),
        Case(S, "pull: label chip='910b<OSC>\\n::error...' (was FAIL)", pull("label_injection"), (1,)),
    ]

    # credentials: the foreign hosts count every Authorization they see (bench_hostile sums them)
    def aim(name: str, url: Callable[[fakes.ForeignHost], str] = lambda host: host.url, challenge: bool = False):
        """A redirect target / realm on one of the shared hosts; notes its log length to check it was reached."""
        def target(ctx):
            host = getattr(ctx.shared, name)
            ctx.notes[name] = len(host.log)
            if challenge:
                host.challenge = True
                ctx.stack.callback(setattr, host, "challenge", False)
            return url(host)
        return target

    def reached(name: str) -> Check:
        def check(ctx, run):
            host = getattr(ctx.shared, name)
            return None if len(host.log) > ctx.notes[name] else f"the {name} host was never asked: input not exercised"
        return check

    foreign = aim("foreign")
    # a plain-HTTP registry's redirect to a host that is not loopback is refused before it is
    # followed: the foreign host is never asked, so no credential can reach it
    refused_redirect = (mentions("refusing a plain-http redirect"),)

    def realm_fifo(ctx):
        ctx.watch(ctx.dir / "token.json")  # a token the CLI must not read from the local disk
        return f"file://{ctx.dir}/token.json"

    fhost = lambda ctx: f"{ctx.shared.foreign.host}:{ctx.shared.foreign.port}"  # noqa: E731
    cases += [
        Case(S, "pull: 401 Basic, then 302 to a foreign host", pull("redirect_basic", foreign), (1,),
             refused_redirect),
        Case(S, "pull: 401 Basic, then 307 to a foreign host", pull("redirect_basic_307", foreign), (1,),
             refused_redirect),
        Case(S, "pull: 401 Basic, then 302 to localhost:<other port>",
             pull("redirect_basic", aim("foreign_lo", lambda host: f"http://localhost:{host.port}")), (1,),
             (reached("foreign_lo"),)),
        Case(S, "pull: 302 before any challenge to a foreign host", pull("redirect_first", foreign), (1,),
             refused_redirect),
        Case(S, "pull: 302 to a foreign host that challenges Basic",
             pull("redirect_first", aim("foreign", challenge=True)), (1,), refused_redirect),
        Case(S, "pull: Bearer realm=file://<local FIFO>", pull("bearer", realm_fifo), (1,)),
        Case(S, "pull: Bearer realm=http://127.0.0.1:80@<foreign>/token (was FAIL)",
             pull("bearer", lambda ctx: f"http://127.0.0.1:80@{fhost(ctx)}/token"), (1,)),
        Case(S, "pull: Bearer realm=ftp://127.0.0.1/token", pull("bearer", lambda ctx: "ftp://127.0.0.1/token"),
             (1,)),
        Case(S, "pull: Bearer realm=http://127.0.0.1.invalid/token (name starting '127.')",
             pull("bearer", lambda ctx: "http://127.0.0.1.invalid/token"), (1,)),
        Case(S, "pull: Bearer realm=http://localhost:<port>/token (loopback: allowed)",
             pull("bearer", aim("realm", lambda host: f"http://localhost:{host.port}/token")), (1,),
             (reached("realm"),)),
        Case(S, "pull --registry 127.0.0.1:80@<foreign> (userinfo trick) (was FAIL)",
             lambda ctx: ["pull", "--registry", f"127.0.0.1:80@{fhost(ctx)}", "--root", str(ctx.shared.root_ok)],
             (2,)),
        Case(S, "pull: manifest digest differs from the one announced", pull("digest_mismatch"), (1,),
             (mentions("digest", "sha256"),)),
        Case(S, "pull: config blob is not the one the manifest names", pull("config_forged"), (1,),
             (mentions("digest", "sha256"),)),
    ]
    # with no 192.0.2.2 on this machine, nothing listens there: the realm must still be refused
    cases.append(Case(S, "pull: Bearer realm=http://<non-loopback>/token (plain HTTP)",
                      pull("bearer", lambda ctx: f"http://192.0.2.2:{ctx.shared.foreign.port}/token"), (1,)))

    def file_urls(mode, *extra):
        def setup(ctx):
            local = ctx.dir / "local"
            local.mkdir()
            names = ["passwd"] if mode == "file_scheme_url" else [fakes.wheel_name()]
            ctx.watch(*[local / n for n in names], *[local / (n + ".metadata") for n in names])
            return check_index(mode, *extra)(ctx)
        return setup

    cases += [
        Case(S, "releases check: index names file://<local>/passwd (was FAIL)", file_urls("file_scheme_url"), (1,)),
        Case(S, "releases check --json: wheel URL file://<local> (was FAIL)", file_urls("file_scheme_wheel", "--json"),
             (1,)),
        Case(S, "releases check: wheel URL file://<local> with core-metadata (was FAIL)",
             file_urls("file_scheme_meta"), (1,)),
        Case(S, "releases check --json: file name with OSC + '::error'", check_index("filename_escape", "--json"),
             (0,)),
        Case(S, "releases check: METADATA with OSC / ESC[2J", check_index("metadata_escape"), (0,)),
        Case(S, "releases check --json: METADATA with OSC / ESC[2J", check_index("metadata_escape", "--json"), (0,)),
        Case(S, "releases check: URL with newline + '::error'", check_index("ctrl_url"), (0, 1)),
    ]
    return cases


# --- data loss ------------------------------------------------------------------------


def _render(matrix: Callable[[Ctx], Path], check: bool = False, absolute: bool = False):
    def build(prepare: Callable[[Ctx, Path], None]):
        def setup(ctx):
            out = rendered_copy(ctx)
            prepare(ctx, out)
            target = str(out) if absolute else "out"
            return ["render", *(["--check"] if check else []), "--matrix", str(matrix(ctx)), "--out", target]
        return setup
    return build


m2 = lambda ctx: ctx.shared.m2  # noqa: E731
m1 = lambda ctx: ctx.shared.m1  # noqa: E731
m0 = lambda ctx: ctx.shared.m0  # noqa: E731


def _victim(ctx: Ctx) -> Path:
    """A folder outside --out with data a symlink inside --out points at."""
    v = ctx.dir / "victim"
    fx.write(v / "data", "victim data\n")
    fx.write(v / "Dockerfile", "FROM victim\n")
    ctx.outside.append(v)
    return v


def data_loss() -> List[Case]:
    D = "data-loss"

    def user_beside(ctx, out):
        fx.write(out / "mine" / "notes.txt", "mine\n")
        ctx.keep.append(out / "mine")

    def user_inside(ctx, out):
        fx.write(out / fx.CELL_A / "notes" / "n.txt", "my notes\n")
        fx.write(out / fx.CELL_A / "README.user", "user readme\n")
        ctx.keep += [out / fx.CELL_A / "notes", out / fx.CELL_A / "README.user"]

    def wheelhouse(ctx, out):
        fx.write(out / fx.CELL_X / "wheelhouse" / "mine-1.0-py3-none-any.whl", "wheel bytes\n")
        ctx.keep.append(out / fx.CELL_X / "wheelhouse")

    def keep_all(ctx, out):
        ctx.keep.append(out)

    def cell_is_link(ctx, out):
        shutil.rmtree(out / fx.CELL_A)
        (out / fx.CELL_A).symlink_to(_victim(ctx))

    def file_link(name):
        def prepare(ctx, out):
            (out / fx.CELL_A / name).unlink()
            (out / fx.CELL_A / name).symlink_to(_victim(ctx) / "Dockerfile")
        return prepare

    def planted_tmp(ctx, out):
        (out / fx.CELL_A / ".Dockerfile.cpu.ascend-build-tmp").symlink_to(_victim(ctx) / "Dockerfile")

    def dir_link(ctx, out):
        (out / fx.CELL_A / "notes").symlink_to(_victim(ctx))

    def cell_is_file(ctx, out):
        shutil.rmtree(out / fx.CELL_A)
        fx.write(out / fx.CELL_A, "a user's file where a cell folder would go\n")
        ctx.keep.append(out / fx.CELL_A)

    def user_folder(check):
        def setup(ctx):
            fx.write(ctx.dir / "out" / "docs" / "a.txt", "user doc\n")
            fx.write(ctx.dir / "out" / "b.bin", b"\x00\x01user")
            ctx.keep += [ctx.dir / "out" / "docs", ctx.dir / "out" / "b.bin"]
            return ["render", *(["--check"] if check else []), "--matrix", str(ctx.shared.m2), "--out", "out"]
        return setup

    def immutable(ctx):
        out = rendered_copy(ctx)
        for cell in (fx.CELL_A, fx.CELL_X):
            with open(out / cell / "Dockerfile.cpu", "a") as fh:
                fh.write("# stale\n")
        if not fx.chattr(out / fx.CELL_X, "+i"):
            raise Skip("chattr +i does not work here")
        ctx.stack.callback(fx.chattr, out / fx.CELL_X, "-i")  # before the TemporaryDirectory goes
        ctx.keep += [out / fx.CELL_A / "Dockerfile.cpu", out / fx.CELL_X / "Dockerfile.cpu"]
        return ["render", "--matrix", str(ctx.shared.m2), "--out", "out"]

    def subset_into_full(ctx):
        out = fx.copy_tree(ctx.shared.full, ctx.dir / "out")
        ctx.keep += sorted(out.glob("*/requirements.lock"))
        return ["render", "--matrix", str(ctx.shared.m1), "--out", "out"]

    return [
        Case(D, "render: user folder beside the cells", _render(m2)(user_beside), (0,)),
        Case(D, "render: user folder + file inside a cell folder (was FAIL)", _render(m2)(user_inside), (0,)),
        Case(D, "render into a folder of user files (no cells yet)", user_folder(False), (0,)),
        Case(D, "render --check on a folder of user files", user_folder(True), (1,)),
        Case(D, "render: cells: [] on a populated folder", _render(m0)(keep_all), (1, 2)),
        Case(D, "render --check: cells: [] on a populated folder", _render(m0, check=True)(keep_all), (1, 2)),
        Case(D, "render: dropped cell's folder holds a user wheelhouse (was FAIL)", _render(m1)(wheelhouse), (0,)),
        Case(D, "render: out/<cell> is a symlink to a folder outside", _render(m2)(cell_is_link), (1, 2)),
        Case(D, "render: out/<cell>/Dockerfile symlink to a file outside", _render(m2)(file_link("Dockerfile")),
             (0, 1)),
        Case(D, "render: out/<cell>/smoke.py symlink to a file outside", _render(m2)(file_link("smoke.py")), (0, 1)),
        Case(D, "render: planted .Dockerfile.cpu.ascend-build-tmp symlink", _render(m2)(planted_tmp), (0, 1)),
        Case(D, "render: folder symlink inside a cell -> outside, relative --out (was FAIL)",
             _render(m2)(dir_link), (0, 1)),
        Case(D, "render: folder symlink inside a cell -> outside, absolute --out",
             _render(m2, absolute=True)(dir_link), (0, 1)),
        Case(D, "render: Dockerfile symlink to a file outside, absolute --out",
             _render(m2, absolute=True)(file_link("Dockerfile")), (0, 1)),
        Case(D, "render: out/<cell> is a user's regular file", _render(m2)(cell_is_file), (1, 2)),
        Case(D, "render fails part way: 2nd cell folder immutable (chattr +i) (was FAIL)", immutable, (1,)),
        Case(D, "render a 1-cell matrix into the full 13-cell tree with locks (was FAIL)", subset_into_full, (0,)),
    ]


# --- hangs and memory ----------------------------------------------------------------


def hangs_memory() -> List[Case]:
    H = "hangs-memory"

    def errors_zero(ctx, out):
        (out / fx.CELL_A / "errors.json").unlink()
        (out / fx.CELL_A / "errors.json").symlink_to("/dev/zero")

    def smoke_fifo(ctx, out):
        (out / fx.CELL_A / "smoke.py").unlink()
        fx.fifo(out / fx.CELL_A / "smoke.py")

    def lock(kind):
        def setup(ctx):
            out = rendered_copy(ctx)
            path = out / fx.CELL_A / "requirements.lock"
            if kind == "sparse":
                fx.sparse(path, 4 << 30)
            else:
                fx.fifo(path)
            return ["validate", "--matrix", str(ctx.shared.m2), "--out", "out"]
        return setup

    def matrix_special(kind):
        def setup(ctx):
            if kind == "zero":
                os.symlink("/dev/zero", ctx.dir / "zero.yaml")
                return ["validate", "--matrix", "zero.yaml"]
            if kind == "fifo":
                fx.fifo(ctx.dir / "fifo.yaml")
                return ["validate", "--matrix", "fifo.yaml"]
            if kind == "sparse":
                fx.sparse(ctx.dir / "sparse.yaml", 3 << 30)
                return ["validate", "--matrix", "sparse.yaml"]
            fx.write(ctx.dir / "mdir" / "m2.yaml", fx.M2)  # a folder: one matrix and a FIFO .yaml
            fx.fifo(ctx.dir / "mdir" / "b.yaml")
            return ["validate", "--matrix", "mdir", "--out", "nolocks"]
        return setup

    def runners_special(kind):
        def setup(ctx):
            if kind == "fifo":
                path = fx.fifo(ctx.dir / "fifo.yaml").name
            else:
                path = _file(ctx, "bomb.yaml", fx.ALIAS_BOMB)
            return ["ci-matrix", "--matrix", str(ctx.shared.m2), "--runners", path]
        return setup

    def table_fifo(ctx):
        fx.fifo(ctx.dir / "table.md")
        return ["releases", "cann", "--table", "table.md"]

    def evil_images(ctx):
        _file(ctx, "table.md", "| 2.99.0 | Python3.10.x | 2.99.0 | CANN 99.0.0 | x |\n")
        _file(ctx, "images.json", json.dumps({"cann": [{"tags": ["1-" + "a-" * 3000 + "1"]}]}))
        return ["releases", "cann", "--table", "table.md", "--images", "images.json"]

    def root_with(path: str, make: Callable[[Path], object], command: str = "host", **host):
        def setup(ctx):
            root = fx.host_root(ctx.dir / "root", **host)
            target = root / path
            if target.exists():
                target.unlink()
            target.parent.mkdir(parents=True, exist_ok=True)
            make(target)
            return [command, "--root", "root"]
        return setup

    zero = lambda p: p.symlink_to("/dev/zero")  # noqa: E731
    toolkit = "usr/local/Ascend/ascend-toolkit/latest"
    brackets = {
        "driver compatible_version_fw = 200000 x '['": dict(drv="Version=24.1.rc3\ncompatible_version_fw="
                                                                 + "[" * 200_000 + "\n"),
        "driver Version = 200000 x '['": dict(drv="Version=" + "[" * 200_000 + "\n"),
        "compatible_version_fw = 50000 x '[a,b'": dict(drv="Version=24.1.rc3\ncompatible_version_fw="
                                                          + "[a,b" * 50_000 + "\n"),
    }
    explain_texts = {
        "127 KB line 'dcmi model initialized failed' x4400": "dcmi model initialized failed" * 4400,
        "30 lines x 4085 chars of 'cannot import name '": "\n".join(
            [("cannot import name " * 216)[:4085]] * 30),
        "120000 newlines": "\n" * 120_000,
    }

    def explain(text: str) -> Callable[[Ctx], List[str]]:
        return lambda ctx: ["explain", text, "--root", str(ctx.shared.root_ok)]

    two_gib = 2 << 30
    cases = [
        Case(H, "render --check: out/<cell>/errors.json -> /dev/zero (was FAIL)",
             _render(m2, check=True)(errors_zero), (1,), memory=two_gib),
        Case(H, "render: out/<cell>/errors.json -> /dev/zero (was FAIL)", _render(m2)(errors_zero), (1,),
             memory=two_gib),
        Case(H, "render --check: out/<cell>/smoke.py is a FIFO (was FAIL)", _render(m2, check=True)(smoke_fifo),
             (1,), timeout=20),
        Case(H, "render: out/<cell>/smoke.py is a FIFO", _render(m2)(smoke_fifo), (0, 1), timeout=20),
        Case(H, "validate: requirements.lock is a 4 GiB sparse file (was FAIL)", lock("sparse"), (1,),
             memory=two_gib),
        Case(H, "validate: requirements.lock is a FIFO", lock("fifo"), (0, 1), timeout=20),
        Case(H, "validate --matrix symlink to /dev/zero", matrix_special("zero"), (2,)),
        Case(H, "validate --matrix FIFO", matrix_special("fifo"), (2,), timeout=20),
        Case(H, "validate --matrix 3 GiB sparse file", matrix_special("sparse"), (2,)),
        Case(H, "validate --matrix folder holding a FIFO .yaml", matrix_special("dir"), (0, 1), timeout=20),
        Case(H, "ci-matrix --runners FIFO", runners_special("fifo"), (2,), timeout=20),
        Case(H, "ci-matrix --runners alias bomb (9**10)", runners_special("bomb"), (2,)),
        Case(H, "validate --matrix alias bomb (9**10)", validate(fx.ALIAS_BOMB), (2,)),
        Case(H, "releases cann --table FIFO (was FAIL)", table_fifo, (1,), timeout=20),
        Case(H, "releases cann --images: 6 KB tag '1-a-a-...-1' (lazy regex)", evil_images, (0,)),
        Case(H, "host: driver compatible_version_fw = 200000 x '['",
             with_root("host", **brackets["driver compatible_version_fw = 200000 x '['"]), (0,)),
        *[Case(H, f"doctor: {label}", with_root("doctor", **host), (0, 1)) for label, host in brackets.items()],
        Case(H, "host: /etc/ascend_install.info is a FIFO (was FAIL)",
             root_with("etc/ascend_install.info", fx.fifo), (0,), timeout=20),
        Case(H, "doctor: driver/version.info is a FIFO (was FAIL)",
             root_with(fx.DRIVER, fx.fifo, "doctor"), (1,), timeout=20),
        Case(H, "host: proc/sys/kernel/arch is a FIFO (was FAIL)", root_with("proc/sys/kernel/arch", fx.fifo), (0,),
             (absent("has no proc/sys/kernel/arch"),), timeout=20),
        Case(H, "host: CANN version.cfg is a FIFO", root_with(f"{toolkit}/version.cfg", fx.fifo), (0,), timeout=20),
        Case(H, "host: driver/version.info -> /dev/zero (out of --root)", root_with(fx.DRIVER, zero), (0,)),
        Case(H, "host: driver/version.info is a 2 GiB sparse file",
             root_with(fx.DRIVER, lambda p: fx.sparse(p, 2 << 30)), (0,), memory=two_gib),
        *[Case(H, f"explain {label}", explain(text), (0, 1))
          for label, text in explain_texts.items()],
        Case(H, "pull: manifest announced as 8 GiB", pull("huge_announced"), (1,)),
        Case(H, "pull: tag list body never ends", pull("endless_body"), (1,)),
        Case(H, "pull: endless Link: rel=next pages", pull("endless_pages"), (1,)),
        Case(H, "releases check: zip bomb METADATA (64 MiB of 'A', sizes declared)", check_index("zipbomb"), (1,)),
        Case(H, "releases check: zip bomb METADATA whose headers claim 1000 bytes", check_index("zipbomb_lying"),
             (1,)),
        Case(H, "releases check: end-of-central-directory with absurd sizes", check_index("zip64_odd"), (1,)),
        Case(H, "releases check: project page never ends (HTML, no Content-Length)", check_index("endless"), (1,)),
        Case(H, "k8s job --nodes FIFO", nodes_file("fifo"), (2,), (mentions("not a regular file"),), timeout=20),
        Case(H, "k8s job --nodes -> /dev/zero", nodes_file("zero"), (2,), (mentions("not a regular file"),),
             memory=two_gib),
        Case(H, "k8s job --nodes nested 200000 deep", nodes_file("deep"), (2,), (mentions("nested deeper"),)),
        Case(H, "k8s job --nodes of 20000 nodes, two chips (quadratic once)", nodes_file("pool"), (1,),
             (mentions("chips"),), timeout=30),
    ]
    return cases


def nodes_file(kind: str) -> Callable[[Ctx], List[str]]:
    """``k8s job --nodes`` given a FIFO, /dev/zero, JSON nested past any Node's depth, or a pool of
    20,000 nodes of two chips (refused, naming each chip's nodes: once read in quadratic time)."""
    def setup(ctx):
        path = ctx.dir / "nodes.json"
        if kind == "fifo":
            fx.fifo(path)
        elif kind == "zero":
            path.symlink_to("/dev/zero")
        elif kind == "deep":
            path.write_text('{"kind": "List", "items": ' + "[" * 200_000 + "]" * 200_000 + "}")
        else:
            items = [{"kind": "Node", "metadata": {"name": f"n{i}", "labels": {
                "kubernetes.io/arch": "arm64", "node.kubernetes.io/npu.chip.name": "910B3" if i % 2 else "310P3",
                "huawei.com/driver.version": "24.1.RC3"}}} for i in range(20_000)]
            path.write_text(json.dumps({"kind": "List", "items": items}))
        return ["k8s", "job", "--registry", "127.0.0.1:9/r", "--npus", "8", "--nodes", "nodes.json", "--",
                "python", "train.py"]
    return setup


# --- tracebacks -------------------------------------------------------------------------


def tracebacks() -> List[Case]:
    T = "traceback"

    def render_out(out, check=False, prepare: Optional[Callable[[Ctx], object]] = None):
        def setup(ctx):
            if prepare:
                prepare(ctx)
            return ["render", *(["--check"] if check else []), "--matrix", str(ctx.shared.m2), "--out", out]
        return setup

    afile = lambda ctx: fx.write(ctx.dir / "afile", "x\n")  # noqa: E731

    def lock_not_utf8(ctx):
        out = rendered_copy(ctx)
        fx.write(out / fx.CELL_A / "requirements.lock", b"\xff\xfe\x00bad")
        return ["validate", "--matrix", str(ctx.shared.m2), "--out", "out"]

    def errors_is_dir(ctx, out):
        (out / fx.CELL_A / "errors.json").unlink()
        fx.write(out / fx.CELL_A / "errors.json" / "mine", "precious\n")
        ctx.keep.append(out / fx.CELL_A / "errors.json")

    def record_into(kind):
        def setup(ctx):
            if kind == "dangling":
                os.symlink("nowhere", ctx.dir / "rec")
            elif kind == "loop":
                os.symlink("rec2", ctx.dir / "rec")
                os.symlink("rec", ctx.dir / "rec2")
            else:
                fx.write(ctx.dir / "rec", "x\n")
            return ["record", "rec"]
        return setup

    def closed_port(ctx):
        import socket
        with socket.socket() as s:  # a port nobody listens on
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        return ["pull", "--cann", N + ".0.RC1", "--registry", f"127.0.0.1:{port}", "--root", str(ctx.shared.root_ok)]

    image = ["image", "--matrix", "m.yaml", "--out", "nolocks", "--cann"]

    def image_cann(version):
        return lambda ctx: [*image[:2], _file(ctx, "m.yaml", fx.M2), *image[3:], version]

    roots = {
        "driver Version = 5000-digit major": dict(drv=f"Version={N}.1.rc3\n"),
        "compatible_version_fw upper bound 5000 digits (was FAIL)": dict(
            drv=f"Version=24.1.rc3\ncompatible_version_fw=[7.0.0,{N}.5.99]\n"),
        "compatible_version_drv upper bound 5000 digits (was FAIL)": dict(
            fw=f"Version=7.5.0.1.129\ncompatible_version_drv=[24.1.rc3,{N}.1.rc1]\n"),
        "driver Version 24.1.rc² (superscript)": dict(drv="Version=24.1.rc²\ncompatible_version_fw=[7.0.0,7.5.99]"),
        "firmware Version 7.5.0.1.12٣ (Arabic-Indic digit)": dict(
            fw="Version=7.5.0.1.12٣\ncompatible_version_drv=[24.1,24.1.]"),
    }
    registry_modes = ["tags_deep", "man_manifests_int", "man_manifests_bad_entries", "man_deep",
                      "cfg_label_values_nested", "cfg_min_driver_5000", "cfg_torch_5000", "cfg_deep"]
    was_fail = {"tags_deep", "man_manifests_int", "man_deep", "cfg_min_driver_5000", "cfg_deep", "nonascii_path"}
    index_modes = ["filename_int", "hashes_values_obj", "deep", "deep_obj", "nonascii_path", "pytag_5000",
                   "version_5000"]
    tag = lambda mode: " (was FAIL)" if mode in was_fail else ""  # noqa: E731
    return [
        Case(T, "render --out a regular file", render_out("afile", prepare=afile), (2,)),
        Case(T, "render --out afile/sub (under a file)", render_out("afile/sub", prepare=afile), (1, 2)),
        Case(T, "render --out /proc/self/status", render_out("/proc/self/status"), (2,)),
        Case(T, "render --check --out /proc", render_out("/proc", check=True), (1,)),
        Case(T, "validate --out /proc/self/mem",
             lambda ctx: ["validate", "--matrix", str(ctx.shared.m2), "--out", "/proc/self/mem"], (0, 1)),
        Case(T, "validate: requirements.lock not UTF-8 (was FAIL)", lock_not_utf8, (1,)),
        Case(T, "render: a rendered file name (errors.json) is a folder of user data (was FAIL)",
             _render(m2)(errors_is_dir), (1,)),
        Case(T, "render --check: errors.json is a folder of user data (was FAIL)",
             _render(m2, check=True)(errors_is_dir), (1,)),
        Case(T, "host: driver Version = 5000-digit major",
             with_root("host", **roots["driver Version = 5000-digit major"]), (0,)),
        *[Case(T, f"doctor: {label}", with_root("doctor", **host), (0, 1)) for label, host in roots.items()],
        Case(T, "record --set n=<5000 digits>", args("record", "rec", "--set", f"n={N}"), (0,)),
        Case(T, "record --set n=1e<5000 digits>", args("record", "rec", "--set", f"n=1e{N}"), (0,)),
        Case(T, "record into a 300-char folder name", args("record", "d" * 300), (1, 2)),
        Case(T, "record into a dangling symlink", record_into("dangling"), (1, 2)),
        Case(T, "record into a symlink loop", record_into("loop"), (1, 2)),
        Case(T, "image --cann <5000 digits>.0.RC1 (was FAIL)", image_cann(N + ".0.RC1"), (2,)),
        Case(T, "image --cann 8.0.RC<5000 digits> (was FAIL)", image_cann("8.0.RC" + N), (2,)),
        Case(T, "image --cann 7.0.RC¹ (superscript)", image_cann("7.0.RC¹"), (2,)),
        Case(T, "image --cann 7.0.RC١ (Arabic-Indic 1)", image_cann("7.0.RC١"), (2,)),
        Case(T, "kb cann <5000 digits>.0.0", args("kb", "cann", N + ".0.0"), (1, 2)),
        Case(T, "pull --cann <5000 digits>.0.RC1 to a closed port", closed_port, (1, 2)),
        *[Case(T, f"pull: registry sends mistyped/deep JSON: {mode}{tag(mode)}", pull(mode), (1,))
          for mode in registry_modes],
        *[Case(T, f"releases check: index sends {mode}{tag(mode)}", check_index(mode), (0, 1)) for mode in index_modes],
        Case(T, "explain 'not support driver <5000 digits>.1.rc1'",
             lambda ctx: ["explain", f"RuntimeError: not support driver {N}.1.rc1", "--root", str(ctx.shared.root_ok)],
             (0, 1)),
        Case(T, "explain 'not support driver 24.1.rc3' with a 5000-digit compat range",
             lambda ctx: ["explain", "not support driver 24.1.rc3", "--root", str(fx.host_root(
                 ctx.dir / "root", drv=f"Version=24.1.rc3\ncompatible_version_fw=[7.0.0,{N}.5.99]\n"))], (0, 1)),
    ]


# --- wrong answers -------------------------------------------------------------------------


def wrong_answers() -> List[Case]:
    W = "wrong-answer"
    markers = absent("99.9.rc9", "9.9.9.9.999")  # the versions planted outside --root

    def outside_markers(ctx):
        fx.write(ctx.dir / "driver/version.info", "Version=99.9.rc9\n")
        fx.write(ctx.dir / "firmware/version.info", "Version=9.9.9.9.999\n")

    def traversal(kind, absolute=True):
        def setup(ctx):
            outside_markers(ctx)
            root = ctx.dir / "roots" / "r"
            if kind == "param":
                fx.host_root(root, drv=None, fw=None, install="Driver_Install_Path_Param=/../..\n"
                                                               "Firmware_Install_Path_Param=/../..")
            elif kind == "relparam":
                fx.host_root(root, drv=None, install="Driver_Install_Path_Param=" + "../" * 12
                                                     + str(ctx.dir).lstrip("/"))
            elif kind == "abslink":
                fx.host_root(root, drv=None)
                (root / fx.DRIVER).symlink_to(ctx.dir / "driver/version.info")
            else:  # the driver folder itself is a relative symlink climbing out
                fx.host_root(root, drv=None)
                (root / "usr/local/Ascend/driver").rmdir()
                (root / "usr/local/Ascend/driver").symlink_to("../../../../../driver")
            return ["host", "--root", str(root) if absolute else "roots/r"]
        return setup

    def smi_folder(ctx):
        root = fx.host_root(ctx.dir / "root")
        (root / fx.NPU_SMI).mkdir(parents=True)
        return ["doctor", "--root", "root"]

    def smi_file(body: bytes, mode: int):
        def setup(ctx):
            root = fx.host_root(ctx.dir / "root")
            fx.write(root / fx.NPU_SMI, body, mode=mode)
            return ["doctor", "--root", "root"]
        return setup

    def write_into_copy(ctx):
        # --write edits builder/data/ascend-compat.yaml of the checkout it runs from and in (only
        # a checkout of ascend-build's own: `project.in_checkout`), so the input's folder is made
        # one: a copy of builder/ and pyproject.toml in a git work tree of its own (never the
        # repository's own file)
        shutil.copytree(REPO / "builder", ctx.dir / "builder", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(REPO / "pyproject.toml", ctx.dir / "pyproject.toml")
        subprocess.run(["git", "init", "-q", str(ctx.dir)], check=True)
        ctx.env["PYTHONPATH"] = str(ctx.dir)
        ctx.command = [sys.executable, "-c",
                       "import sys; sys.path.insert(0, sys.argv.pop(1)); import builder; "
                       "assert builder.__file__.startswith(sys.path[0]), builder.__file__; "
                       "sys.argv[0] = 'ascend-build'; from builder.cli import main; main()", str(ctx.dir)]
        ctx.notes["written"] = ctx.dir / "builder/data/ascend-compat.yaml"
        ctx.notes["compat"] = ctx.notes["written"].read_text(encoding="utf-8")
        idx = ctx.serve(fakes.FakeIndex("nonascii_digits_mixed"))
        return ["releases", "check", "--index-url", idx.index_url, "--write"]

    def write_into_project(ctx):
        # in a project (a folder with matrix/), --write adds to its ascend-build/knowledge.yaml
        (ctx.dir / "matrix").mkdir()
        ctx.notes["written"], ctx.notes["compat"] = ctx.dir / "ascend-build/knowledge.yaml", ""
        idx = ctx.serve(fakes.FakeIndex("nonascii_digits_mixed"))
        return ["releases", "check", "--index-url", idx.index_url, "--write"]

    def compat_copy_clean(ctx, run):
        try:
            after = ctx.notes["written"].read_text(encoding="utf-8")
        except FileNotFoundError:
            after = ""
        if fakes.VERSION not in after:
            return f"--write added no {fakes.VERSION} entry: input not exercised: {run.text[-300:]!r}"
        added = _nonascii_digits(after)
        if len(added) > len(_nonascii_digits(ctx.notes["compat"])):
            return f"--write put non-ASCII digit(s) {added} into the knowledge base ({ctx.notes['written'].name})"
        return None

    smi_ok = "echo '| 0     910B3   | OK  | 95.0 |'; exit 0"
    return [
        Case(W, "host: Driver_Install_Path_Param=/../.. (absolute --root) (was FAIL)", traversal("param"), (0,),
             (markers,)),
        Case(W, "host: Driver_Install_Path_Param=/../.. (relative --root) (was FAIL)", traversal("param", False),
             (0,), (markers,)),
        Case(W, "host: Driver_Install_Path_Param=../../..<tmp> (was FAIL)", traversal("relparam"), (0,), (markers,)),
        Case(W, "host: driver/version.info absolute symlink out of --root (was FAIL)", traversal("abslink"), (0,),
             (markers,)),
        Case(W, "host: driver/ folder relative symlink out of --root (was FAIL)", traversal("rellink"), (0,),
             (markers,)),
        Case(W, "doctor: npu-smi is a folder (was FAIL)", smi_folder, (1,)),
        Case(W, "doctor: npu-smi not executable (mode 644) (was FAIL)", smi_file(b"#!/bin/sh\necho hi\n", 0o644), (1,),
             (absent("npu-smi not found"),)),
        Case(W, "doctor: npu-smi is not a program (garbage ELF) (was FAIL)", smi_file(b"\x7fELFgarbage", 0o755), (1,)),
        Case(W, "doctor: npu-smi fails with a dcmi error (control)",
             with_root("doctor", smi="echo 'dcmi module initialize failed. ret is -8005' >&2; exit 1"), (1,)),
        Case(W, "doctor: npu-smi answers normally (control)", with_root("doctor", smi=smi_ok), (0, 1)),
        Case(W, "doctor: npu-smi hangs (sleep 40; the code waits 15 s) (was FAIL)",
             with_root("doctor", smi="sleep 40"), (1,), (faster_than(25),), timeout=40),
        Case(W, "doctor: npu-smi prints forever (yes) (was FAIL)", with_root("doctor", smi="yes x"), (1,)),
        Case(W, "releases check --json: tags cp٣١١ / manylinux_٢_٢٨, URLs quoted (was FAIL)",
             check_index("nonascii_digits_quoted", "--json"), (0,), (no_nonascii_digits,)),
        Case(W, "releases check --json: same, URLs not quoted (was FAIL)", check_index("nonascii_digits", "--json"),
             (0, 1), (no_nonascii_digits,)),
        Case(W, "releases check --json: fullwidth cp３１２ (was FAIL)",
             check_index("nonascii_digits_fullwidth", "--json"), (0, 1), (no_nonascii_digits,)),
        Case(W, "releases check --json: a cp311 wheel beside cp٣١١ / manylinux_٢_٢٨ / cp３１２ ones",
             check_index("nonascii_digits_mixed", "--json"), (0,), (no_nonascii_digits,)),
        Case(W, "releases check --write (copy of builder/): same wheels (was FAIL)", write_into_copy, (0,),
             (compat_copy_clean,)),
        Case(W, "releases check --write (a project): same wheels", write_into_project, (0,), (compat_copy_clean,)),
    ]


CLASSES = ("security", "data-loss", "hangs-memory", "traceback", "wrong-answer")


def all_cases() -> List[Case]:
    from .estargz_reader import cases as estargz_cases  # it builds on this module's Case and checks

    return security() + data_loss() + hangs_memory() + tracebacks() + wrong_answers() + estargz_cases()
