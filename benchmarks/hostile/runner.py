"""One run of the real CLI on one hostile input, and the checks every output gets.

The CLI runs as a subprocess: stdin at /dev/null, in its own session (so a timeout
kills its whole process group, npu-smi children included), under RLIMIT_AS, with a
timeout. Output goes to files, not pipes, so a CLI that prints without end cannot
block on a full pipe and the harness keeps only what it needs.
"""

from __future__ import annotations

import os
import re
import resource
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

REPO = Path(__file__).resolve().parents[2]
EXE = REPO / ".venv/bin/ascend-build"
MEMORY = 3 << 30
TIMEOUT = 60.0
KEEP = 8 << 20  # bytes of each stream kept for the checks


def cli() -> List[str]:
    """The installed entry point, else the same main() through this interpreter."""
    if EXE.exists():
        return [str(EXE)]
    return [sys.executable, "-c", "import sys; sys.argv[0] = 'ascend-build'; from builder.cli import main; main()"]


@dataclass
class Run:
    argv: List[str]
    rc: Optional[int]          # None: killed at the timeout
    seconds: float
    rss_mb: float              # the child's peak resident set (its reaped children included)
    out: str = ""
    err: str = ""
    timed_out: bool = False

    @property
    def text(self) -> str:
        return self.out + self.err


def run(argv: Sequence[str], cwd: Path, env: Dict[str, str], timeout: float = TIMEOUT,
        memory: int = MEMORY, tty: bool = False) -> Run:
    """Run ``argv`` (already including the CLI); ``tty``: under `script` so stdout is a terminal."""
    cmd = list(argv)
    if tty:  # script -e returns the child's exit code; -q: no banner
        cmd = ["script", "-qec", shlex.join(cmd), "/dev/null"]
    out_path, err_path = cwd / ".hostile-stdout", cwd / ".hostile-stderr"

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    start = time.monotonic()
    with open(out_path, "wb") as out_fh, open(err_path, "wb") as err_fh:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out_fh, stderr=err_fh,
                                start_new_session=True, preexec_fn=limit)
        status, usage, timed_out = _wait(proc.pid, start + timeout)
        proc.returncode = status  # reaped here by wait4: Popen must not wait again
    seconds = time.monotonic() - start
    rc = None if timed_out else (os.waitstatus_to_exitcode(status) if status is not None else None)
    result = Run(argv=cmd, rc=rc, seconds=seconds, rss_mb=usage.ru_maxrss / 1024 if usage else 0.0,
                 out=_read(out_path), err=_read(err_path), timed_out=timed_out)
    out_path.unlink()
    err_path.unlink()
    return result


def _wait(pid: int, deadline: float):
    """wait4 until the child ends or the deadline passes (then its process group is killed)."""
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            return status, usage, False
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)  # the child's own session: only what it started
            except ProcessLookupError:
                pass
            _, status, usage = os.wait4(pid, 0)
            return status, usage, True
        time.sleep(0.01)


def _read(path: Path) -> str:
    size = path.stat().st_size
    with open(path, "rb") as fh:
        if size <= KEEP:
            data = fh.read()
        else:  # keep both ends: where a message starts and where it ends
            data = fh.read(KEEP // 2)
            fh.seek(size - KEEP // 2)
            data += b"\n...\n" + fh.read()
    return data.decode("utf-8", "replace")


# --- checks every output gets -------------------------------------------------------

RAW = re.compile("[\x1b\x07\x9b]")  # ESC, BEL, and the 8-bit CSI


def problems(run_: Run, expect: Sequence[int]) -> List[str]:
    """Why this run is not clean (empty if it is)."""
    why = []
    if run_.timed_out:
        why.append(f"still running at {run_.seconds:.0f} s (killed)")
    elif run_.rc not in expect:
        why.append(f"exit {run_.rc}, expected {'/'.join(map(str, expect))}")
    if "Traceback" in run_.text:
        why.append(f"traceback: {_last_line(run_.text)!r}")
    raw = sorted({repr(c) for c in RAW.findall(run_.text)})
    if raw:
        why.append("raw control character(s) in the output: " + ", ".join(raw))
    lines = [ln for ln in run_.text.replace("\r", "\n").split("\n") if ln.lstrip().startswith("::")]
    if lines:
        why.append(f"a line starts with '::' (workflow command): {lines[0][:80]!r}")
    return why


def _last_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1][:120] if lines else ""
