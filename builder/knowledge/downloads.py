"""Where CANN's installers and the build's own tools come from: the download server's
release folders (``cann-downloads.yaml``), NNAL's rules, Miniforge (``conda.yaml``), uv
(``uv.yaml``).

`Installer` (a file to download, check and run) is defined here, with the data, so that
`builder.installers` (which names the files a cell needs) imports the knowledge base and
never the other way round.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from builder import versions
from builder.knowledge.environment import Environment
from builder.knowledge.pairings import CannListing, Releases, listed
from builder.vocabulary import ARCHS, normalize_arch

# A pre-release's name: 8.1.RC1.alpha001, 9.0.0-beta.1 (versions.cann; "beta1" of the old scheme is a final release).
_PRERELEASE = re.compile(r"alpha\d|-beta\.\d", re.IGNORECASE)


@dataclass(frozen=True)
class Installer:
    """A file to download, check and run: a CANN package or the conda bootstrap.

    ``filename`` is the published file (``.zip`` for CANN packages), ``run`` the installer
    to execute (the ``.run`` of the same stem inside the zip; the ``.sh`` itself for conda),
    ``sha256`` the checksum of ``filename`` (``None`` only when it could not be verified).

    Example:
        >>> from builder.knowledge import load
        >>> from builder.installers import cann_installers
        >>> cann_installers(load(), "8.5.0", "910b", "aarch64")[0].run
        'Ascend-cann-toolkit_8.5.0_linux-aarch64.run'
    """

    kind: str  # "toolkit" | "ops" | "nnal" | "conda"
    filename: str
    url: str
    sha256: Optional[str]
    run: str
    source: str
    version: str = ""
    arch: str = ""


def read_conda(conda_doc: Mapping[str, Any]) -> Dict[str, Installer]:
    """The Miniforge3 installer per arch from ``data/conda.yaml`` (the knowledge base reads it once).

    Example:
        >>> doc = {"version": "1.0-0", "installers": {"x86_64": {"filename": "M.sh", "url": "https://x/M.sh",
        ...        "sha256": None, "source": ["upstream"]}}}
        >>> read_conda(doc)["x86_64"].sha256 is None, read_conda(doc)["x86_64"].source
        (True, 'upstream')
    """
    found: Dict[str, Installer] = {}
    for arch, e in (conda_doc.get("installers") or {}).items():
        found[str(arch)] = Installer(
            kind="conda", filename=str(e["filename"]), url=str(e["url"]),
            sha256=(str(e["sha256"]) if e.get("sha256") else None), run=str(e["filename"]),
            source="; ".join(listed(e.get("source"))), version=str(conda_doc.get("version", "")), arch=str(arch),
        )
    return found


@dataclass(frozen=True)
class CannRelease:
    """What the knowledge base knows of one CANN release's installers, in one answer: what
    `builder.installers` names the release's files from.

    Example:
        >>> from builder.knowledge import load
        >>> release = load().downloads.cann_release("8.3.rc1")
        >>> release.name, release.listed is not None, release.folder is not None, release.nnal_since
        ('8.3.RC1', True, True, '8.0.RC3')
        >>> release.key == load().releases.listing("8.3.RC1").key, release.source
        (True, 'cann-packages.json (ascend-deployer 26.0.0, 7.3.0)')
    """

    asked: str                                       # the release as asked (``8.3.rc1``)
    name: str                                        # its own spelling (``8.3.RC1``), as file names use it
    listed: Optional[Tuple[str, Mapping[str, Any]]]  # its cann-packages.json entry (spelling, entry), read-only
    folder: Optional[str]                            # the folder its installers are published in (None: unknown)
    nnal_since: str                                  # the first CANN release with an NNAL package the data knows
    key: Optional[Tuple[int, ...]] = None            # its sort key (versions.cann), None: no CANN version
    nnal_since_key: Optional[Tuple[int, ...]] = None  # ``nnal_since``'s sort key
    source: str = ""                                 # where its listed files are stated ("" when none are)

    @property
    def files(self) -> Mapping[str, Any]:
        """The files cann-packages.json lists for it ({} when it lists none)."""
        return self.listed[1].get("files", {}) if self.listed else {}


class Downloads:
    """Where installers are published and which build tools are pinned."""

    def __init__(self, releases: Releases, environment: Environment, conda_doc: Mapping[str, Any],
                 downloads_doc: Optional[Mapping[str, Any]] = None, uv_doc: Optional[Mapping[str, Any]] = None) -> None:
        self._releases = releases
        self._environment = environment
        # conda bootstrap
        self._conda: Dict[str, Installer] = read_conda(conda_doc)
        # where CANN's installers are published (cann-downloads.yaml)
        self._downloads: Dict[str, Any] = dict(downloads_doc or {})
        self._prerelease_folders = {str(k).lower(): v for k, v in (self._downloads.get("prerelease_folders") or {}).items()}
        # the installer of the locked steps (uv.yaml)
        self._uv: Dict[str, Any] = dict(uv_doc or {})
        # cann_release's answers, by the string asked (the data is read once per process, so they never change)
        self._release_of: Dict[str, CannRelease] = {}

    def nnal_since(self) -> str:
        """The first CANN release the knowledge base knows an NNAL package for (``cann-downloads.yaml``).

        Example:
            >>> from builder.knowledge import load
            >>> load().downloads.nnal_since()
            '8.0.RC3'
        """
        return str((self._downloads.get("nnal") or {}).get("since") or "")

    def torch_atb_glibc(self, cann: str, os_id: str) -> Optional[Tuple[str, str, str]]:
        """When NNAL's torch_atb of ``cann`` needs a newer glibc than ``os_id`` has: (the glibc
        it needs, the source, the official image that installs NNAL on that OS all the same, or
        ""); None when it fits, or when the CANN, the OS or its glibc is unknown.

        Example:
            >>> from builder.knowledge import load
            >>> load().downloads.torch_atb_glibc("9.1.0", "ubuntu22.04")[0], load().downloads.torch_atb_glibc("9.1.0", "ubuntu24.04")
            ('2.38', None)
            >>> load().downloads.torch_atb_glibc("9.0.0", "ubuntu22.04") is None
            True
        """
        rule = (self._downloads.get("nnal") or {}).get("torch_atb_glibc") or {}
        wanted, since = versions.lenient("cann", cann), rule.get("since")
        info = self._environment.os_info(os_id)
        if not rule or wanted is None or info is None or wanted < versions.cann(str(since)):
            return None
        needs = str(rule["glibc"])
        if info.glibc >= tuple(int(p) for p in needs.split(".")):
            return None
        shipped = ((rule.get("shipped") or {}).get(os_id) or {})
        image = next((str(where) for release, where in shipped.items()
                      if versions.lenient("cann", str(release)) == wanted), "")
        return needs, " ".join(str(rule["source"]).split()), image

    def cann_release(self, cann: str) -> CannRelease:
        """Everything `builder.installers` names ``cann``'s files from (see `CannRelease`): the
        release looked up once (`Releases.listing`), its folder and NNAL's first release with it."""
        text = str(cann)
        found = self._release_of.get(text)
        if found is None:
            listing = self._releases.listing(text)
            since = self.nnal_since()
            source = ("cann-packages.json (ascend-deployer " + ", ".join(listed(listing.package[1].get("seen_in"))) + ")"
                      if listing.package else "")
            found = self._release_of[text] = CannRelease(
                text, listing.name, listing.package, self._folder(listing), since, key=listing.key,
                nnal_since_key=self._releases.listing(since).key if since else None, source=source)
        return found

    def cann_release_folder(self, cann: str) -> Optional[str]:
        """The folder a known CANN release's installers are published in; None for an unknown
        release, and for a pre-release (alpha, beta) whose folder is not recorded.

        A release's own folder is ``CANN <version>/``; alpha and beta releases are fetched
        by the official images from folders named by internal codes
        (``cann-downloads.yaml``, ``prerelease_folders``).

        Example:
            >>> from builder.knowledge import load
            >>> load().downloads.cann_release_folder("9.1.0")
            'https://ascend-repo.obs.cn-east-2.myhuaweicloud.com/CANN/CANN%209.1.0/'
            >>> load().downloads.cann_release_folder("9.0.0-beta.1")
            'https://ascend-repo.obs.cn-east-2.myhuaweicloud.com/CANN/CANN%209.0.T2/'
            >>> load().downloads.cann_release_folder("6.4.0") is None, load().downloads.cann_release_folder("8.0.RC2.alpha002") is None
            (True, True)
        """
        return self._folder(self._releases.listing(cann))

    def _folder(self, listing: CannListing) -> Optional[str]:
        """`cann_release_folder` of the release the listing is of."""
        template = self._downloads.get("release_folder")
        if not template or not listing.known:
            return None
        name = listing.name
        if _PRERELEASE.search(name):
            entry = self._prerelease_folders.get(name.lower())
            return str(entry["folder"]) if entry else None
        return str(template).format(version=name)

    def cann_release_folder_source(self, cann: str) -> str:
        """Where the folder of :meth:`cann_release_folder` is stated: a pre-release's official
        image Dockerfile, else the release-folder rule of ``cann-downloads.yaml``; "" when none is known.

        Example:
            >>> from builder.knowledge import load
            >>> load().downloads.cann_release_folder_source("9.1.0-beta.3")[:46]
            'Ascend/cann-container-image@fe522a3511b10ddd28'
        """
        if self.cann_release_folder(cann) is None:
            return ""
        entry = self._prerelease_folders.get(self._releases.canonical_cann(cann).lower())
        return str(entry["source"]) if entry else "cann-downloads.yaml release_folder"

    def uv_requirement(self, arch: str) -> str:
        """uv pinned for that arch, hash-checked, as a requirements line (``uv.yaml``); "" when unknown.

        Example:
            >>> from builder.knowledge import load
            >>> load().downloads.uv_requirement("arm64")[:40]
            'uv==0.13.9 --hash=sha256:5435c5ce14a5643'
        """
        sha = (self._uv.get("sha256") or {}).get(arch if arch in ARCHS else normalize_arch(arch) or "")
        return f"uv=={self._uv['version']} --hash=sha256:{sha}" if sha and self._uv.get("version") else ""

    def download_referer(self) -> str:
        """The Referer every CANN download sends (``cann-downloads.yaml``)."""
        return str(self._downloads.get("referer") or "")

    def conda_installer(self, arch: str) -> Optional[Installer]:
        """The Miniforge3 installer for that arch (``data/conda.yaml``); None when unknown.

        Example:
            >>> from builder.knowledge import load
            >>> load().downloads.conda_installer("arm64").filename, load().downloads.conda_installer("ppc64le")
            ('Miniforge3-26.3.2-3-Linux-aarch64.sh', None)
        """
        return self._conda.get(normalize_arch(arch) or "")

    def conda_installers(self) -> Dict[str, Installer]:
        """The Miniforge3 installer per arch (``data/conda.yaml``).

        Example:
            >>> from builder.knowledge import load
            >>> sorted(load().downloads.conda_installers())
            ['aarch64', 'x86_64']
        """
        return dict(self._conda)
