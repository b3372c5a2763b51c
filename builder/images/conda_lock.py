"""The conda part of a conda cell's lock: Python X.Y, pip and every conda package beneath
them, each pinned to one file with its sha256.

Why: ``conda create python=3.9 pip`` takes whatever patch release, build, openssl, sqlite
or zlib the channel serves on the day of the build; two builds a month apart differ and
the smoke test validated neither. The lock pins the whole conda environment, the
Dockerfile installs exactly those files (each checked against its sha256 before conda
sees it, and by conda again), and the smoke test compares ``conda-meta`` with the lock.

py-rattler solves (``rattler.solve`` on the channel's repodata, for the cell's arch and
glibc); nothing here solves. The part lives in the cell's ``requirements.lock`` as
comment lines, which pip ignores::

    # conda-channel: https://conda.anaconda.org/conda-forge
    # conda: python 3.9.18 h0755675_1_cpython linux-64/python-3.9.18-h0755675_1_cpython.conda sha256:HEX
    # conda-incomplete: REASON          (only when the channel could not be reached)

The channel is written without credentials (`public`): a mirror URL with a token in
it reaches the build only as a BuildKit secret, and only curl sees it (`FETCH_SCRIPT`).

Example:
    >>> part = Part.parse(["https://conda.anaconda.org/conda-forge"], [SAMPLE_LINE], [])
    >>> part.packages[0].name, part.complete
    ('python', True)
    >>> public("https://user:secret@mirror.example/t/tk-123/conda-forge/")
    'https://mirror.example/conda-forge'
"""

from __future__ import annotations

import asyncio
import re
import tempfile
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import List, Sequence, Tuple

from builder import commands
from builder.errors import UserError

DEFAULT_CHANNEL = "https://conda.anaconda.org/conda-forge"
SUBDIRS = {"x86_64": "linux-64", "aarch64": "linux-aarch64"}
EXPLICIT_FILE = "conda.explicit.txt"  # the context file `conda create --file` takes (its channel's URLs)
FETCH_SCRIPT = "conda-fetch.sh"       # fetches and checks those files for the build (builder/templates/)
SECRETS_SCRIPT = "conda_secrets.py"   # refuses a conda layer holding the channel's credential (builder/templates/)
SOLVE_SECONDS = 600
_LINE = re.compile(r"^(\S+) (\S+) (\S+) ((?:noarch|linux-[a-z0-9_]+)/[A-Za-z0-9._+!-]+\.(?:conda|tar\.bz2)) "
                   r"sha256:([0-9a-f]{64})$")
_TOKEN = re.compile(r"/t/[^/\s]+(?=/|$|\s)")  # anaconda.org's /t/<token>/ form
_USERINFO = re.compile(r"://[^/@\s]+@")  # user:password@ in a URL


def public(url: str) -> str:
    """``url`` without what may be a credential (user:password@, an anaconda.org ``/t/TOKEN``,
    a query) and without a trailing slash: what a lock, a Dockerfile or a digest may hold."""
    parts = urllib.parse.urlsplit(url.strip())
    host = parts.hostname or ""
    try:
        port = parts.port
    except ValueError:  # "Port out of range", "could not be cast to integer": the matrix's own URL check lets it by
        raise UserError(f"the conda channel {public_text(url, '')} has no valid port",
                        fix="set mirrors.conda_channel to a URL whose port is a number from 1 to 65535, "
                            "or one without a port") from None
    netloc = host + (f":{port}" if port else "")
    return urllib.parse.urlunsplit((parts.scheme, netloc, _TOKEN.sub("", parts.path).rstrip("/"), "", ""))


def specs(python: str) -> Tuple[str, ...]:
    """What a conda cell asks of conda: its Python X.Y and pip (the rest comes from the pip lock)."""
    return (f"python {python}.*", "pip")


@dataclass(frozen=True)
class Package:
    """One conda package: its record's name, version and build, and the file it comes from
    (``subdir/file`` under the channel) with that file's sha256."""

    name: str
    version: str
    build: str
    path: str
    sha256: str

    def line(self) -> str:
        return f"{self.name} {self.version} {self.build} {self.path} sha256:{self.sha256}"

    @classmethod
    def parse(cls, text: str, where: str = "lock") -> "Package":
        match = _LINE.fullmatch(text.strip())
        if not match:
            raise UserError(f"{where}: not a conda line of an ascend-build lock: {text[:100]!r}",
                            fix=f"run {commands.suggest('lock')} to write it again")
        return cls(*match.groups())


@dataclass(frozen=True)
class Part:
    """A cell's conda environment: the channel (credentials left out), its packages in the
    order conda links them (dependencies first), or no packages and why (``note``)."""

    channel: str
    packages: Tuple[Package, ...] = ()
    note: str = ""

    @property
    def complete(self) -> bool:
        return bool(self.packages) and not self.note

    def lines(self) -> List[str]:
        """The lock's header lines of this part."""
        return ([f"# conda-channel: {self.channel}"] + [f"# conda: {p.line()}" for p in self.packages]
                + ([f"# conda-incomplete: {self.note}"] if self.note else []))

    @classmethod
    def parse(cls, channel: Sequence[str], packages: Sequence[str], notes: Sequence[str], where: str = "lock") -> "Part":
        return cls(channel[0] if channel else DEFAULT_CHANNEL, tuple(Package.parse(p, where) for p in packages),
                   notes[0] if notes else "")

    def explicit(self, subdir: str) -> str:
        """The part as ``conda create --file`` takes it: ``@EXPLICIT``, then one URL per package with
        ``#sha256:`` (conda checks that form from 24.9 on: conda/conda#14048; conda's misc.py
        ``url_pat`` accepts ``#<md5>``, ``#<sha256>`` and ``#sha256:<sha256>``)."""
        head = ["# The conda part of this cell's lock (requirements.lock): `conda create --file` takes it.",
                f"# platform: {subdir}", f"# channel: {self.channel}", "@EXPLICIT"]
        return "\n".join(head + [f"{self.channel}/{p.path}#sha256:{p.sha256}" for p in self.packages]) + "\n"


def _virtual_packages(glibc: Tuple[int, int]) -> list:
    """What the image's OS offers conda's solver: its glibc, and that it is Linux and Unix."""
    import rattler

    made = [(name, version) for name, version in (("__glibc", f"{glibc[0]}.{glibc[1]}"), ("__unix", "0"), ("__linux", "0"))]
    return [rattler.GenericVirtualPackage(rattler.PackageName(n), rattler.Version(v), rattler.BuildString("0"))
            for n, v in made]


def resolve(channel: str, python: str, arch: str, glibc: Tuple[int, int], *, seconds: float = SOLVE_SECONDS) -> Part:
    """Solve Python ``python`` (X.Y) and pip for ``arch`` against ``channel`` with py-rattler.

    A channel that does not answer gives an incomplete part naming the reason (the image
    then refuses to build from it unless asked); one that answers but holds no solution
    is an error naming what the solver said.

    Example:
        >>> resolve("http://127.0.0.1:8000", "3.9", "x86_64", (2, 35)).packages[0].name   # doctest: +SKIP
        'libzz'
    """
    try:
        import rattler
        from rattler import exceptions
    except ImportError:
        raise UserError("py-rattler is not installed: `ascend-build lock` solves a conda cell's environment with it",
                        fix="pip install py-rattler (Python 3.10 or newer; it comes with ascend-build's dependencies there)") from None

    shown, subdir = public(channel), SUBDIRS[arch]
    with tempfile.TemporaryDirectory(prefix="ascend-build-conda-") as cache:
        gateway = rattler.Gateway(cache_dir=Path(cache))  # a fresh cache: what the channel serves now
        try:
            records = asyncio.run(asyncio.wait_for(rattler.solve(
                [channel.rstrip("/")], list(specs(python)), gateway=gateway, platforms=[rattler.platform.Subdir(subdir), "noarch"],
                virtual_packages=_virtual_packages(glibc)), seconds))
        except (exceptions.GatewayError, exceptions.FetchRepoDataError, asyncio.TimeoutError) as exc:
            why = (str(exc).strip().splitlines() or ["no answer within %d s" % seconds])[0]
            return Part(shown, (), f"the conda channel {shown} could not be reached where the lock was made "
                                   f"({public_text(why, channel)}); Python {python}'s build and the conda packages "
                                   f"beneath it are not pinned until `ascend-build lock` runs where it answers")
        except exceptions.SolverError as exc:
            tail = "\n  ".join(public_text(str(exc), channel).strip().splitlines()[-8:])
            raise UserError(f"py-rattler found no conda environment of Python {python} and pip in {shown} for {subdir}:\n  {tail}",
                            exit_code=1, fix="check mirrors.conda_channel: it must serve Python X.Y for the cell's arch") from None
    by_name = {r.name.normalized: r for r in records}  # the sort returns bare package records: take the file from these
    bare: List[rattler.PackageRecord] = list(records)
    ordered = [by_name[r.name.normalized] for r in rattler.PackageRecord.sort_topologically(bare)]
    unhashed = [f"{r.subdir}/{r.file_name}" for r in ordered if not r.sha256]
    # a channel index without sha256 (old indexers write md5 only): nothing to check the files by. The
    # reason is written into the lock, so it names no run's flags (as plan.py's rendered comment)
    if unhashed:
        return Part(shown, (), f"the conda channel {shown} gives no sha256 for {', '.join(unhashed[:3])}: index it "
                               "again with a current indexer (conda-index, rattler-index), then run `ascend-build lock`")
    return Part(shown, tuple(Package(r.name.normalized, str(r.version), str(r.build), f"{r.subdir}/{r.file_name}",
                                     r.sha256.hex() if r.sha256 else "") for r in ordered))


def public_text(text: str, channel: str) -> str:
    """``text`` (a solver's message) with the channel's URL in its public form, and any other
    ``user:password@`` or ``/t/TOKEN`` left out: what a lock or a terminal may show.

    Example:
        >>> public_text("no answer from https://ci:pw@m.example/t/tk/forge/noarch/x", "https://ci:pw@m.example/t/tk/forge")
        'no answer from https://m.example/forge/noarch/x'
    """
    stripped = channel.rstrip("/")
    text = text.replace(stripped, public(channel)) if stripped else text
    return _TOKEN.sub("", _USERINFO.sub("://", text))


SAMPLE_LINE = ("python 3.9.18 h0755675_1_cpython linux-64/python-3.9.18-h0755675_1_cpython.conda "
               "sha256:" + "0" * 64)
