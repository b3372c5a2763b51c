"""Where a command's files are: the team's project (the folder it runs in), and the checkout of
ascend-build this package runs from, if it runs from one.

A project is a folder with a ``matrix/`` (``ascend-build init`` makes one): the default matrix is
``./matrix/``, the rendered cells go to ``./dockerfiles/``, and the team's additions to the
knowledge base are in ``./ascend-build/knowledge.yaml`` (`builder.knowledge.additions`). Nothing
falls back to files beside the package: installed from a wheel, the package's folder is
site-packages, which is no one's project.

The package *comes from a checkout of ascend-build* when the git work tree holding its folder
has, at its top, a ``pyproject.toml`` naming the project ``ascend-build`` (`checkout`): a clone
installed editable, or installed from the clone into a venv inside it. Only then does the
provenance of an image name a commit of ascend-build: installed into a venv inside a team's own
repository, the package names no commit of that repository. The package *runs from* the checkout
when its folder is the checkout's ``builder/`` (`runs_from_checkout`); only then, with the command
run inside the checkout, do ``releases ... --write`` write the package's own ``builder/data/`` (a
maintainer's work). Anywhere else they write the project's files, and never an installed package.

Example:
    >>> checkout() == Path(__file__).resolve().parent.parent, runs_from_checkout()   # the test suite runs from one
    (True, True)
"""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path
from typing import Optional

from builder import bounded
from builder.errors import UserError
from builder.knowledge.files import ADDITIONS_FILE, DATA_DIR

PACKAGE = Path(__file__).resolve().parent
MATRIX = Path("matrix")
DOCKERFILES = Path("dockerfiles")
PYPROJECT_LIMIT = 1 << 20  # ascend-build's is under 5 KiB; its [project] table comes first
_PROJECT_NAME = re.compile(r'^\s*name\s*=\s*["\']ascend-build["\']\s*$', re.MULTILINE)


def default_matrix() -> Path:
    """``./matrix`` of the current folder; a UserError naming ``init`` when there is none."""
    if MATRIX.exists():
        return MATRIX
    raise UserError(f"no matrix/ in {_here()}: the default matrix is ./matrix/ of the folder a command runs in",
                    fix="run `ascend-build init .` to start a project here (a starter matrix, a .gitignore and a CI "
                        "workflow), or pass --matrix FILE", exit_code=2)


def _here() -> str:
    try:
        return str(Path.cwd())
    except OSError:  # the folder was removed under the process
        return "this folder"


@functools.lru_cache(maxsize=1)
def checkout() -> Optional[Path]:
    """The git checkout of ascend-build the package comes from, or None: the top of the git work
    tree holding the package's folder, when its pyproject.toml names the project ascend-build (the
    package run from a clone, or installed from it into a venv inside it). Installed elsewhere, or
    into a venv inside another project's repository, there is none."""
    top = _git_toplevel(PACKAGE)
    return top if top is not None and _names_ascend_build(top / "pyproject.toml") else None


def runs_from_checkout() -> bool:
    """Whether the package's files are the checkout's own (``builder/`` at its top: a clone installed
    editable), so that writing the package's ``builder/data/`` writes the checkout."""
    root = checkout()
    return root is not None and PACKAGE == root / "builder"


def _names_ascend_build(pyproject: Path) -> bool:
    """Whether ``pyproject`` is ascend-build's: its ``[project]`` table's name."""
    try:
        text = bounded.read_file(pyproject, PYPROJECT_LIMIT).decode("utf-8")
    except (OSError, UnicodeDecodeError):  # none there, a folder, a FIFO: not ascend-build's
        return False
    table = re.split(r"^\[project\]\s*$", text, maxsplit=1, flags=re.MULTILINE)
    if len(table) < 2:
        return False
    section = re.split(r"^\[", table[1], maxsplit=1, flags=re.MULTILINE)[0]
    return bool(_PROJECT_NAME.search(section))


def _git_toplevel(folder: Path) -> Optional[Path]:
    try:
        done = subprocess.run(["git", "-C", str(folder), "rev-parse", "--show-toplevel"], capture_output=True,
                              text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):  # no git here
        return None
    return Path(done.stdout.strip()).resolve() if done.returncode == 0 and done.stdout.strip() else None


def in_checkout() -> bool:
    """Whether the package runs from a checkout of ascend-build (`runs_from_checkout`) and the command
    runs inside it."""
    root = checkout()
    if root is None or not runs_from_checkout():
        return False
    try:
        here = Path.cwd().resolve()
    except OSError:
        return False
    return here == root or root in here.parents


def data_to_write(command: str) -> Path:
    """``builder/data`` when ``command`` may write it (run inside the checkout the package runs from);
    else a UserError saying where such facts go instead."""
    if in_checkout():
        return DATA_DIR
    why = (f"this folder is outside the checkout {checkout()} it runs from" if runs_from_checkout()
           else f"this ascend-build is an installed package ({PACKAGE}): an installed package's files are not edited")
    raise UserError(f"{command} writes builder/data/ of ascend-build itself, and {why}", exit_code=2,
                    fix=f"run it inside a clone of ascend-build (`make knowledge`); a release your project needs "
                        f"goes in its {ADDITIONS_FILE} (`ascend-build releases check --write`)")


def additions_to_write(command: str) -> Path:
    """Where ``command`` adds releases: ``builder/data/ascend-compat.yaml`` inside the checkout the
    package runs from, else the project's additions file (the current folder must be a project)."""
    if in_checkout():
        return DATA_DIR / "ascend-compat.yaml"
    if not MATRIX.exists():
        raise UserError(f"{command} adds to the project's {ADDITIONS_FILE}, and {_here()} is no project (no matrix/)",
                        fix="run it in your project's folder, or `ascend-build init .` to start one here",
                        exit_code=2)
    return ADDITIONS_FILE


def proposals_folder(command: str) -> Path:
    """The project's ``matrix/`` that ``command`` drafts cells into (``matrix/proposed/``)."""
    if MATRIX.is_dir():
        return MATRIX
    raise UserError(f"{command} drafts cells in ./matrix/proposed/, and {_here()} has no matrix/ folder",
                    fix="run it in your project's folder, or `ascend-build init .` to start one here", exit_code=2)

