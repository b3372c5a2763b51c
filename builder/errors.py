"""The one error type users see: what went wrong, where, and how to fix it.

Every module raises `UserError` (never a bare exception) for anything a user can
cause: a bad matrix, an unreachable engine, a refused push. `cli.py` prints it
as `file:line:col: message` plus the fix, and exits with its `exit_code`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

# C0/C1 controls, DEL and the bidi overrides: what could forge a line (a CI annotation such
# as "::error") or drive the terminal, when a matrix key or value is printed back
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    r"""``text`` with control characters shown as escapes, so what a user wrote can be printed
    back without forging output lines or terminal sequences.

    Example:
        >>> printable("key\n::error::x\x1b[31m")
        'key\\n::error::x\\x1b[31m'
    """
    return _CONTROL.sub(lambda m: repr(m.group(0))[1:-1], str(text))


@dataclass(frozen=True)
class Location:
    """A place in a matrix file: 1-based line and column."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


class UserError(Exception):
    """An error caused by input or environment, reported without a traceback.

    Parameters
    ----------
    message: what is wrong, naming the values involved.
    fix: one sentence saying what to do about it.
    where: the matrix location, when the error comes from a file.
    field: the field path inside the matrix (``cells[2].torch_npu``).
    exit_code: 1 for findings and failed work, 2 for usage errors.
    """

    def __init__(
        self,
        message: str,
        fix: str = "",
        where: Optional[Location] = None,
        field: str = "",
        exit_code: int = 2,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix
        self.where = where
        self.field = field
        self.exit_code = exit_code

    def __str__(self) -> str:
        head = f"{self.where}: " if self.where else ""
        field = f"{self.field}: " if self.field else ""
        tail = f"\n  fix: {self.fix}" if self.fix else ""
        return f"{head}{field}{self.message}{tail}"


@dataclass(frozen=True)
class Finding:
    """One problem found in a matrix: a schema error or a broken compatibility rule.

    ``rule`` is a stable kebab-case id (``torch-npu-unpublished``) users can grep
    for and tests assert on; ``severity`` is ``error`` (stops render and build) or
    ``warning`` (printed; an error under ``--strict``).
    """

    rule: str
    severity: str
    message: str
    fix: str = ""
    where: Optional[Location] = None
    field: str = ""

    def __str__(self) -> str:
        head = f"{printable(str(self.where))}: " if self.where else ""
        field = f" [{printable(self.field)}]" if self.field else ""
        tail = f"\n  fix: {printable(self.fix)}" if self.fix else ""
        return f"{head}{self.severity}: {self.rule}{field}: {printable(self.message)}{tail}"
