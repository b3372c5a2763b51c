"""`ascend-build init`: a team's project folder, made from the files under ``templates/project/``.

What it writes (`FILES`): ``matrix/default.yaml``, a starter matrix whose cells are cells of
ascend-build's own matrix, with comments on every key; ``ascend-build/knowledge.yaml``, the
project's additions to the knowledge base (`builder.knowledge.additions`), empty but for how to
fill it; ``.gitignore`` (private keys, the state folder, downloads staged into build contexts);
and ``.github/workflows/ascend-build.yml``, the project's CI (validate, lock --check,
render --check; the CPU twins built on a push to main), installing the ascend-build release
that made it. An existing file is never overwritten: when any is there, nothing is written
and each is named.

Example:
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> [str(p.relative_to(folder)) for p in init(folder)]
    ['matrix/default.yaml', 'ascend-build/knowledge.yaml', '.gitignore', '.github/workflows/ascend-build.yml']
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Tuple

from packaging.version import InvalidVersion, Version

from builder import __version__, writes
from builder.errors import UserError
from builder.knowledge import additions
from builder.knowledge.files import ADDITIONS_FILE

TEMPLATES = Path(__file__).resolve().parent / "templates" / "project"
# (template under templates/project/, where it goes in the project)
FILES: Tuple[Tuple[str, str], ...] = (
    ("matrix.yaml", "matrix/default.yaml"),
    (additions.STARTER.name, ADDITIONS_FILE.as_posix()),
    ("gitignore", ".gitignore"),
    ("workflow.yml", ".github/workflows/ascend-build.yml"),
)
_VERSION_MARK = "@VERSION@"


def pinned_version() -> str:
    """This package's version as the workflow pins it: a PEP 440 version, else no pin at all."""
    try:
        return str(Version(__version__))
    except InvalidVersion:
        return ""


def _text(template: str) -> bytes:
    text = (TEMPLATES / template).read_text(encoding="utf-8")
    if _VERSION_MARK in text:
        version = pinned_version()
        text = text.replace("==" + _VERSION_MARK, f"=={version}" if version else "")
    return text.encode("utf-8")


def init(folder: Path) -> List[Path]:
    """Write the project's files into ``folder`` (made when missing, its parent must exist); the
    files written. A UserError, and nothing written, when any of them exists."""
    targets = [(template, folder / name) for template, name in FILES]
    there = [str(path) for _, path in targets if path.exists() or path.is_symlink()]
    if there:
        raise UserError(f"{', '.join(there)} already there: init never overwrites a file, and wrote none",
                        fix="init into a new or empty folder, or move those files away first (a .gitignore of your "
                            "own: run init in an empty folder and copy its lines over)", exit_code=2)
    if not folder.parent.is_dir():
        raise UserError(f"{folder.parent} is no folder: init makes {folder.name}/ only inside an existing folder",
                        fix="create the parent folder first, or choose another", exit_code=2)
    contents = [(path, _text(template)) for template, path in targets]  # read whole before the first write
    written: List[Path] = []
    for path, data in contents:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise writes.write_error(exc, path.parent, f"written before it: {', '.join(map(str, written)) or 'none'}") from None
        if not writes.create_file(path, data):
            raise UserError(f"{path} appeared while init was writing: it was left as it is", exit_code=1,
                            fix=f"check what made it; init wrote {', '.join(map(str, written)) or 'nothing'} before it")
        written.append(path)
    return written
