"""The command lines that fix lines suggest, carrying the flags the user gave.

A fix line such as "run `ascend-build lock`" is only useful if it works when pasted: a
user who ran ``validate --matrix team.yaml --out team/`` needs ``lock --matrix team.yaml
--out team/``, since the bare command targets the shipped matrix. The CLI records the
matrix and output folder of the run for the length of the command (`given`); every module that suggests a
command builds it here (`suggest`), deep in the build wing too (a broken lock file is
found while reading it), so no caller threads the flags through.

Example:
    >>> with given(matrix="team.yaml", out="team out"):
    ...     suggest("lock", cell="c1")
    "`ascend-build lock --matrix team.yaml --out 'team out' --cell c1`"
    >>> suggest("lock")
    '`ascend-build lock`'
"""

from __future__ import annotations

import contextlib
import contextvars
import shlex
from pathlib import Path
from typing import Iterator, NamedTuple, Optional, Union

# The commands that read --out (the others read the shipped dockerfiles/ or none).
_TAKE_OUT = ("validate", "render", "lock", "image")
# The commands that read --matrix.
_TAKE_MATRIX = _TAKE_OUT + ("list", "ci-matrix")


class Given(NamedTuple):
    """The matrix and output folder of this run, as the user wrote them (None: the default)."""

    matrix: Optional[str] = None
    out: Optional[str] = None


_GIVEN: contextvars.ContextVar[Optional[Given]] = contextvars.ContextVar("ascend_build_given", default=None)


@contextlib.contextmanager
def given(matrix: Union[Path, str, None] = None, out: Union[Path, str, None] = None) -> Iterator[None]:
    """Suggest commands with ``--matrix matrix`` / ``--out out`` within this block.

    Parameters
    ----------
    matrix, out: what the user passed (None when they left the option out).
    """
    token = _GIVEN.set(Given(str(matrix) if matrix is not None else None, str(out) if out is not None else None))
    try:
        yield
    finally:
        _GIVEN.reset(token)


def suggest(command: str, *args: str, cell: Optional[str] = None) -> str:
    """``ascend-build COMMAND ARGS`` in backquotes, with the run's --matrix/--out where the
    command reads them and ``--cell`` when given, every word shell-quoted.

    Parameters
    ----------
    command: the sub-command, e.g. ``lock`` or ``render``.
    args: further words, e.g. ``--check``.
    cell: the cell id to limit it to.

    Example:
        >>> suggest("render", "--check")
        '`ascend-build render --check`'
    """
    now = _GIVEN.get() or Given()
    words = ["ascend-build", command, *args]
    if now.matrix and command in _TAKE_MATRIX:
        words += ["--matrix", now.matrix]
    if now.out and command in _TAKE_OUT:
        words += ["--out", now.out]
    if cell:
        words += ["--cell", cell]
    return f"`{shlex.join(words)}`"
