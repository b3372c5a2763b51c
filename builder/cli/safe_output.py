"""Everything `ascend-build` prints passes through here: what it echoes back (matrix keys,
file names, registry labels, a host's files, npu-smi's output) cannot drive the terminal
or forge a CI annotation.

- Control characters are shown as escapes (``\\x1b``), except newline, tab and the
  colour sequences (``ESC[...m``) a table may carry: a title-setting OSC or a
  screen-clearing CSI from a file never reaches the terminal.
- A line that would start with ``::`` (a GitHub Actions workflow command such as
  ``::error file=x::``) gets its second colon escaped: ascend-build prints no such line
  of its own, so one can only come from a value with a newline in it. `SafeStream`
  remembers how the current line began, so a line cut across writes (``print`` writes
  its arguments one by one) is caught too.

Example:
    >>> safe("ok\\n::error::forged\\x1b]0;title\\x07 \\x1b[31mred\\x1b[0m", at_line_start=True)
    'ok\\n:\\\\x3aerror::forged\\\\x1b]0;title\\\\x07 \\x1b[31mred\\x1b[0m'
"""

from __future__ import annotations

import re
import sys
from typing import Optional, TextIO

# a colour sequence is kept; any other control character is escaped
_UNSAFE = re.compile(r"\x1b\[[0-9;]*m|[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_COMMAND = re.compile(r"(\n[ \t]*:):")  # a line starting with "::"
_OPEN_HEAD = re.compile(r"[ \t]*:?")  # how a line may begin and still become one


def _escape(match: "re.Match[str]") -> str:
    text = match.group(0)
    return text if text.startswith("\x1b[") else repr(text)[1:-1]


def safe(text: str, at_line_start: bool) -> str:
    """``text`` as it may be printed; ``at_line_start``: the output is at the start of a line."""
    text = ("\n" if at_line_start else "") + _UNSAFE.sub(_escape, text)
    text = _COMMAND.sub(lambda m: m.group(1) + "\\x3a", text)
    return text[1:] if at_line_start else text


class SafeStream:
    """A text stream that writes ``safe`` text to the one it wraps.

    ``_head`` is the current line so far while it could still become a command (blanks and
    at most one colon), else None: that colon was written already, so the next one is
    the one escaped.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._head: Optional[str] = ""

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            return self._stream.write(text)
        head = self._head
        if head is None:
            cleaned = safe(text, at_line_start=False)
        else:  # the head holds only blanks and a colon, which neither rule changes
            cleaned = safe(head + text, at_line_start=True)[len(head):]
        line = text.rsplit("\n", 1)[-1] if "\n" in text else (None if head is None else head + text)
        self._head = line if line is not None and _OPEN_HEAD.fullmatch(line) else None
        self._stream.write(cleaned)
        return len(text)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def install() -> None:
    """Wrap this process's stdout and stderr (the entry point does, once)."""
    if not isinstance(sys.stdout, SafeStream):
        sys.stdout = SafeStream(sys.stdout)
    if not isinstance(sys.stderr, SafeStream):
        sys.stderr = SafeStream(sys.stderr)
