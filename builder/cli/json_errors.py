"""With ``--json``, standard output holds JSON on every path, failures included.

A command given ``--json`` prints its result as JSON. When it ends with an exit code other
than 0 and printed nothing on standard output (a UserError, a refusal said on stderr, a usage
error of the command line), the entry point prints one object instead::

    {"error": "what went wrong", "where": "file:line:column or null", "fix": "what to do, or null", "exit_code": 2}

``error`` is the UserError's message, or else what the run said last on standard error (`last_word`:
its progress lines left out). Standard error
says it all as it does without ``--json``. The command line asks for JSON when ``--json`` stands
before any ``--`` (what follows ``--`` is another program's).

Example:
    >>> wanted(["list", "--json"]), wanted(["run", "IMAGE", "--", "tool", "--json"]), wanted(["list"])
    (True, False, False)
    >>> failure(2, said="Usage: ascend-build list [OPTIONS]\\n\\nError: No such option: --jsn\\n")
    {'error': 'Error: No such option: --jsn', 'where': None, 'fix': None, 'exit_code': 2}
"""

from __future__ import annotations

import json
import sys
from typing import Any, Dict, List, Optional, TextIO

from builder.errors import UserError

SAID_LIMIT = 16 << 10  # what stderr said, kept for the error object: its last 16 KiB


def wanted(argv: List[str]) -> bool:
    """Whether the command line asks for JSON: ``--json`` before any ``--``."""
    words = argv[:argv.index("--")] if "--" in argv else argv
    return "--json" in words


def failure(exit_code: int, error: Optional[UserError] = None, said: str = "") -> Dict[str, Any]:
    """The object printed for a run that failed without printing its JSON."""
    if error is not None:
        return {"error": error.message, "where": str(error.where) if error.where else None, "fix": error.fix or None,
                "exit_code": exit_code}
    return {"error": last_word(said) or f"exit code {exit_code}", "where": None, "fix": None, "exit_code": exit_code}


_LAST_WORD = ("error:", "Error:", "interrupted", "Usage:")  # how a run's own last word starts on stderr


def last_word(said: str) -> str:
    """What a run said last on stderr, its progress lines left out: from the last line that starts
    an error, an interruption or a usage message, to the end (the last line when none does).

    Example:
        >>> last_word("[c] step 2/9 RUN x\\ninterrupted by SIGINT: published nothing\\n")
        'interrupted by SIGINT: published nothing'
    """
    lines = said.strip().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(_LAST_WORD)]
    return "\n".join(lines[starts[-1] if starts else -1:]) if lines else ""


class _Watched:
    """A text stream that passes every write on, noting whether any text went out and keeping the tail of it."""

    def __init__(self, stream: TextIO, keep: int = 0) -> None:
        self._stream = stream
        self._keep = keep
        self.wrote = False
        self.tail = ""

    def write(self, text: Any) -> int:
        if text:
            self.wrote = True
            if self._keep and isinstance(text, str):
                self.tail = (self.tail + text)[-self._keep:]
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class Run:
    """One run of the entry point: with ``--json``, stdout and stderr watched (`watch`)."""

    def __init__(self, argv: List[str]) -> None:
        self.json = wanted(argv)
        self._out: Optional[_Watched] = None
        self._err: Optional[_Watched] = None
        if self.json:
            self._out = _Watched(sys.stdout)
            self._err = _Watched(sys.stderr, keep=SAID_LIMIT)
            sys.stdout, sys.stderr = self._out, self._err

    def ended(self, exit_code: Any, error: Optional[UserError] = None) -> None:
        """The run ends with ``exit_code`` (a SystemExit's code): print the error object when it is due."""
        code = exit_code if isinstance(exit_code, int) else (0 if exit_code is None else 1)
        if not self.json or code == 0 or self._out is None or self._out.wrote:
            return
        said = self._err.tail if self._err is not None else ""
        self._out.write(json.dumps(failure(code, error, said), indent=2) + "\n")
        self._out.flush()
