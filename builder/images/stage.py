"""Lay out a build context and its build-time secrets on disk.

The rendered files of a cell (the same files as ``dockerfiles/<cell>/``) become a
folder under the state directory, plus, when given:

* ``wheelhouse/``  wheels for offline builds (hard links to the user's folder when
  possible, copies otherwise); the Dockerfile's ``wheelhouse`` stage copies it when
  present, so a context without it builds too;
* ``installers/``  the CANN installers of a ``cann_source: {local: DIR}`` cell.

Build-time settings travel as BuildKit secrets, never as build args or files in
the context: ``buildenv`` is a shell file of exports (mirrors, the CA bundle's
path) and ``ca`` the CA bundle itself. They are written with mode 0600 into a
private temporary folder that is removed right after the build.

Example:
    >>> with secrets(cell, ca_bundle=Path("/etc/ssl/certs/ca-certificates.crt")) as files:   # doctest: +SKIP
    ...     engine.build(context, secrets=files, ...)
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import shutil
import tempfile
from pathlib import Path
from typing import Dict, Iterator, Optional, Protocol, Sequence, Tuple

from builder import leftovers, writes
from builder.errors import UserError


class Settings(Protocol):
    """What the build-time settings come from: a cell, or its plan."""

    @property
    def mirrors(self) -> Tuple[Tuple[str, str], ...]: ...


# mirror key in the matrix -> variable the Dockerfile's steps read
MIRROR_VARIABLES = {
    "pip_index": "PIP_INDEX_URL",
    "apt": "APT_MIRROR",
    "conda_channel": "CONDA_CHANNEL",
    "torch_index": "TORCH_INDEX",
    "conda_installer": "CONDA_INSTALLER_URL",
}
CA_VARIABLES = ("PIP_CERT", "SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE")
CA_IN_BUILD = "/run/secrets/ca"
# Folders of a context besides the rendered files; the Dockerfile names them through its plan.
WHEELHOUSE = "wheelhouse"
INSTALLERS = "installers"
CONDA_INSTALLER = "conda-installer"  # may hold Miniforge's installer: the build takes it instead of downloading it


@contextlib.contextmanager
def claim(contexts: Path, arch: str, variant: str) -> Iterator[Path]:
    """The context folder of one arch and variant, held for one build (another ascend-build
    waits for it). One folder, not one per cell: BuildKit keys what it already holds of a
    context by the folder's path, so the next build (a torch_npu bump, another cell) sends
    only the files that changed instead of the whole wheelhouse again. ``contexts`` is the tool's
    own scratch space: a file where it should be is removed (a link to a folder is followed)."""
    if (contexts.exists() or contexts.is_symlink()) and not contexts.is_dir():
        contexts.unlink()  # a file (or dangling link) where the tool's own scratch folder goes: nobody's data
    contexts.mkdir(parents=True, exist_ok=True)
    folder = contexts / f"{variant}-{arch}"
    lock = contexts / f".{variant}-{arch}.lock"
    if lock.is_symlink():  # the tool's own scratch space: a link there is removed, never followed
        lock.unlink()
    # opened for its flock alone: created when missing, never truncated, never through a link
    held = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield folder
    finally:
        os.close(held)


def context(files: Dict[str, bytes], folder: Path, wheelhouse: Optional[Path] = None,
            installers: Optional[Path] = None, fetched_wheels: Optional[Path] = None,
            own_wheels: Sequence[Path] = (), conda_installer: Optional[Tuple[Path, str]] = None) -> Path:
    """Write a fresh build context into ``folder`` and return it. Whatever was at ``folder`` (an
    earlier context; a file, link or FIFO in the tool's scratch space) is removed first, links unfollowed.

    ``fetched_wheels`` (wheels downloaded for the target, see `wheels`) join the
    user's wheelhouse in the same folder; the user's copy of a file wins, and a wheel the
    cell brings (``own_wheels``, already checked: `own_wheel.verified`) wins over both.
    ``conda_installer`` (a file, the name the Dockerfile looks for) goes into ``conda-installer/``:
    the build takes it instead of downloading Miniforge's installer, and checks its sha256 alike.
    """
    if folder.is_dir() and not folder.is_symlink():
        shutil.rmtree(folder)
    elif folder.exists() or folder.is_symlink():  # a file, a link, a FIFO where the scratch folder goes
        folder.unlink()  # the tool's own scratch space: removed, never followed
    folder.mkdir(parents=True)
    for name, data in files.items():
        writes.stage_in(folder, name, data)  # created exclusively in the folder just made, never through a link
    for wheel in own_wheels:
        (folder / WHEELHOUSE).mkdir(exist_ok=True)
        _link(wheel, folder / WHEELHOUSE / wheel.name)
    for source in (wheelhouse, fetched_wheels):
        if source is not None:
            _link_tree(source, folder / WHEELHOUSE, "wheelhouse", "*.whl")
    if installers is not None:
        _link_tree(installers, folder / INSTALLERS, "CANN installer folder", "*")
    if conda_installer is not None:
        source, name = conda_installer
        if not source.is_file():
            raise UserError(f"conda installer {source} is not a file",
                            fix=f"pass --conda-installer with Miniforge's installer ({name})")
        (folder / CONDA_INSTALLER).mkdir()
        _link(source, folder / CONDA_INSTALLER / name)
    return folder


def _link_tree(source: Optional[Path], target: Path, what: str, pattern: str) -> None:
    target.mkdir(exist_ok=True)
    if source is None:
        return
    if not source.is_dir():
        raise UserError(f"{what} {source} is not a folder", fix="pass an existing folder")
    for item in sorted(source.glob(pattern)):
        if item.is_file() and not (target / item.name).exists():
            _link(item, target / item.name)


def _link(source: Path, target: Path) -> None:
    try:
        os.link(source, target)  # same file system: no copy of GBs
    except OSError:
        shutil.copy2(source, target)  # into the context folder this build just made: nothing else is in it


def buildenv(settings: Settings, with_ca: bool, offline_pip: bool = False) -> str:
    """The shell file the Dockerfile's network steps source: mirrors and CA settings, and
    ``PIP_NO_INDEX=1`` when the context's wheelhouse holds the whole lock (pip then installs
    from it alone, hashes still checked)."""
    lines = ["# ascend-build build-time settings (a BuildKit secret; never stored in the image)"]
    for key, value in settings.mirrors:
        lines.append(f"export {MIRROR_VARIABLES[key]}={shlex.quote(value)}")
    if with_ca:
        lines.append("export " + " ".join(f"{v}={CA_IN_BUILD}" for v in CA_VARIABLES))
    if offline_pip:
        lines.append("export PIP_NO_INDEX=1")
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def secrets(settings: Settings, ca_bundle: Optional[Path], offline_pip: bool = False) -> Iterator[Dict[str, Path]]:
    """Secret files for one build, removed afterwards whatever happens."""
    if ca_bundle is not None and not ca_bundle.is_file():
        raise UserError(f"CA bundle {ca_bundle} is not a file",
                        fix="pass --ca-bundle with a PEM file, e.g. /etc/ssl/certs/ca-certificates.crt")
    # named for this process: a run killed with SIGKILL leaves it, and the next run sweeps it
    with tempfile.TemporaryDirectory(prefix=leftovers.temp_prefix("secrets")) as tmp:
        env_file = Path(tmp) / "buildenv"
        # a private folder (0700) made for this build: no one else's name is in it (no writes.* needed)
        env_file.write_text(buildenv(settings, ca_bundle is not None, offline_pip))
        env_file.chmod(0o600)
        files = {"buildenv": env_file}
        if ca_bundle is not None:
            files["ca"] = ca_bundle
        yield files
