"""The command lines that fix lines suggest, carrying the flags the user gave.

A fix line such as "run `ascend-build lock`" is only useful if it works when pasted: a
user who ran ``validate --matrix team.yaml --out team/`` needs ``lock --matrix team.yaml
--out team/``, since the bare command targets the default matrix (./matrix/). The CLI records the
matrix and output folder of the run for the length of the command (`given`); every module that suggests a
command builds it here (`suggest`), deep in the build wing too (a broken lock file is
found while reading it), so no caller threads the flags through. A command with flags of its
own that a retry needs (`pull`'s --registry, `k8s job`'s --registry/--npus/--nodes and the
command after ``--``) records them with ``carry``: each suggestion of that command repeats them.

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
from typing import Dict, Iterator, NamedTuple, Optional, Sequence, Tuple, Union

# The commands that read --out (the others read the default dockerfiles/ or none).
_TAKE_OUT = ("validate", "render", "lock", "image", "list")
# The commands that read --matrix.
_TAKE_MATRIX = _TAKE_OUT + ("list", "ci-matrix")


class Given(NamedTuple):
    """The matrix and output folder of this run, as the user wrote them (None: the default)."""

    matrix: Optional[str] = None
    out: Optional[str] = None
    carry: Tuple[Tuple[str, Tuple[str, ...], Tuple[str, ...]], ...] = ()  # (command, flags, words after them)


_GIVEN: contextvars.ContextVar[Optional[Given]] = contextvars.ContextVar("ascend_build_given", default=None)


@contextlib.contextmanager
def given(matrix: Union[Path, str, None] = None, out: Union[Path, str, None] = None,
          carry: Optional[Dict[str, Tuple[Sequence[Tuple[str, object]], Sequence[str]]]] = None) -> Iterator[None]:
    """Suggest commands with ``--matrix matrix`` / ``--out out`` within this block.

    Parameters
    ----------
    matrix, out: what the user passed (None when they left the option out).
    carry: per command, the (flag, value) pairs of this run to repeat (a None value is left out)
        and the words that end the line (e.g. ``--`` and the user's command).

    Example:
        >>> with given(carry={"k8s job": ((("--registry", "r:5000"), ("--nodes", None)), ("--", "python", "t.py"))}):
        ...     suggest("k8s job", "--cann", "8.0.RC3", quoted=False)
        'ascend-build k8s job --registry r:5000 --cann 8.0.RC3 -- python t.py'
    """
    kept = tuple((command, tuple(w for flag, value in flags if value is not None for w in (flag, str(value))), tuple(tail))
                 for command, (flags, tail) in (carry or {}).items())
    token = _GIVEN.set(Given(str(matrix) if matrix is not None else None, str(out) if out is not None else None, kept))
    try:
        yield
    finally:
        _GIVEN.reset(token)


def suggest(command: str, *args: str, cell: Optional[str] = None, quoted: bool = True) -> str:
    """``ascend-build COMMAND ARGS`` in backquotes, with the run's --matrix/--out where the
    command reads them, the flags `given` carries for it, and ``--cell`` when given, every
    word shell-quoted.

    Parameters
    ----------
    command: the sub-command, e.g. ``lock``, ``render`` or ``k8s job``.
    args: further words, e.g. ``--check``.
    cell: the cell id to limit it to.
    quoted: False: the line without backquotes (inside a parenthesis of a fix line).

    Example:
        >>> suggest("render", "--check")
        '`ascend-build render --check`'
    """
    now = _GIVEN.get() or Given()
    carried = [(flags, tail) for name, flags, tail in now.carry if name == command]
    words = ["ascend-build", *command.split(), *(w for flags, _ in carried for w in flags), *args]
    if now.matrix and command in _TAKE_MATRIX:
        words += ["--matrix", now.matrix]
    if now.out and command in _TAKE_OUT:
        words += ["--out", now.out]
    if cell:
        words += ["--cell", cell]
    words += [w for _, tail in carried for w in tail]
    line = shlex.join(words)
    return f"`{line}`" if quoted else line
