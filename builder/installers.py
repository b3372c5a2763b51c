"""Which official installer files a cell needs: names per chip/arch/release, URL, sha256.

A CANN image installs two packages, the toolkit and the chip's ops (kernels) package, and
a third when the cell asks for it, NNAL (the ATB library); an image with ``env: conda``
first runs the Miniforge3 bootstrap. The functions here
name those files and, where the data lists them, give their URL and checksum. They
take the knowledge base (:class:`builder.knowledge.KnowledgeBase`) and read it only
through its ``downloads`` part: one question per release, ``cann_release`` (a `CannRelease`: the
release's own spelling and sort key, its cann-packages.json entry, its folder, NNAL's first
release), and ``conda_installers``; `installers_of` and `package_of` take that answer itself (a cell's
facts ask for it once). A chip's first CANN (``knowledge.chip_min_cann``) and the releases
the naming rules change at are parsed once, at import: a release is placed among them by
comparing plain sort keys. This module imports the knowledge base (its `Installer` record
and ``known_arch`` are the knowledge base's); the knowledge base never imports this one.

Names follow the file listed in cann-packages.json when there is one, else the naming
rule of the CANN era (see :func:`ops_package`). Only listed files come with a sha256.

Example:
    >>> from builder.knowledge import load
    >>> kb = load()
    >>> ops_package(kb, "910b", "7.0.RC1", "aarch64")
    'Ascend-cann-kernels-910b_7.0.RC1_linux.run'
    >>> [(i.kind, i.run) for i in cann_installers(kb, "8.5.0", "a3", "x86_64")]
    [('toolkit', 'Ascend-cann-toolkit_8.5.0_linux-x86_64.run'), ('ops', 'Ascend-cann-A3-ops_8.5.0_linux-x86_64.run')]
    >>> conda_installer(kb, "arm64").filename
    'Miniforge3-26.3.2-3-Linux-aarch64.sh'
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

from builder import versions
from builder.errors import UserError
from builder.knowledge import CannRelease, Installer, KnowledgeBase, chip_min_cann, known_arch
from builder.vocabulary import ARCHS, CHIPS, normalize_arch

# Name of the chip inside ops package file names (case matters: ``A3``).
_CHIP_FILE_NAME = {"910": "910", "910b": "910b", "a3": "A3", "310p": "310p", "950": "950"}

# The sort keys the naming rules are decided by, parsed once: a chip's first CANN, and the
# releases from which the ops package's name changes (see `ops_package`).
_CHIP_FLOOR = {chip: versions.cann(floor).key for chip in CHIPS if (floor := chip_min_cann(chip))}
_OPS_NAMED = versions.cann("8.5.0").key       # Ascend-cann-<chip>-ops_
_KERNELS_BY_ARCH = versions.cann("8.0.RC3").key  # Ascend-cann-kernels-<chip>_<ver>_linux-<arch>


def _key(release: CannRelease) -> Tuple[int, ...]:
    """The release's sort key; VersionError when what was asked is no CANN version."""
    if release.key is None:
        raise versions.VersionError(f"{release.asked!r} is not a CANN version", fix="write it like 8.0.RC3 or 8.5.0")
    return release.key


def _ops_zip(release: CannRelease, chip: str, arch: str) -> Optional[Tuple[str, Mapping[str, Any]]]:
    """(filename, entry) of the chip's ops/kernels zip in cann-packages.json."""
    if not release.listed:
        return None
    ver, files = release.listed[0], release.files
    name = _CHIP_FILE_NAME.get(chip, chip)
    candidates = [
        f"Ascend-cann-{name}-ops_{ver}_linux-{arch}.zip",
        f"Atlas-{name}-cann-kernels_{ver}_linux-{arch}.zip",
        f"Ascend-cann-kernels-{name}_{ver}_linux-{arch}.zip",
        f"Ascend-cann-kernels-{name}_{ver}_linux.zip",
    ]
    for fname in candidates:
        if fname in files:
            return fname, files[fname]
    return None


def ops_package(kb: KnowledgeBase, chip: str, cann: str, arch: str) -> str:
    """The chip's ops/kernels installer (``.run``) for that CANN and arch.

    The exact name listed in cann-packages.json when there is one (same stem as the
    ``.zip``), else the naming rule of the CANN era:

    - CANN >= 8.5.0: ``Ascend-cann-<chip>-ops_<ver>_linux-<arch>.run`` (``A3`` upper-case)
    - a3, CANN 8.1.RC1 .. 8.5.0's alphas: ``Atlas-A3-cann-kernels_<ver>_linux-<arch>.run``
    - CANN 8.0.RC3 .. 8.5.0's alphas: ``Ascend-cann-kernels-<chip>_<ver>_linux-<arch>.run``
    - before 8.0.RC3: ``Ascend-cann-kernels-<chip>_<ver>_linux.run`` (no arch; the
      data lists arch-less names up to 8.0.RC2)

    Raises UserError for an unknown chip/arch, a CANN string that is no version, or a
    chip the CANN release predates (a3 before 8.1.RC1, 950 before 9.0.0).

    Example:
        >>> from builder.knowledge import load
        >>> ops_package(load(), "a3", "8.1.RC1", "x86_64")
        'Atlas-A3-cann-kernels_8.1.RC1_linux-x86_64.run'
    """
    return _ops(kb.downloads.cann_release(cann), chip, arch)


def _arch(arch: str) -> str:
    """``arch`` as the matrix spells it (which it already is, from a cell); else `known_arch`'s answer."""
    return arch if arch in ARCHS else known_arch(arch)


def _ops(release: CannRelease, chip: str, arch: str) -> str:
    """`ops_package` of the release the knowledge base told of."""
    c = str(chip).lower()
    if c not in CHIPS:
        raise UserError(f"unknown chip {chip!r}", fix=f"use one of {', '.join(CHIPS)}")
    a = _arch(arch)
    cann = release.asked
    cv = _key(release)
    found = _ops_zip(release, c, a)
    if found:
        return found[0][: -len(".zip")] + ".run"
    if c in _CHIP_FLOOR and cv < _CHIP_FLOOR[c]:
        floor = chip_min_cann(c)
        raise UserError(
            f"CANN {cann} has no ops package for chip {c}: support starts at CANN {floor}",
            fix=f"use CANN >= {floor} for {c}",
        )
    ver = release.name
    name = _CHIP_FILE_NAME[c]
    if cv >= _OPS_NAMED:  # its alphas still ship kernels packages (the official images install them)
        return f"Ascend-cann-{name}-ops_{ver}_linux-{a}.run"
    if c == "a3":
        return f"Atlas-A3-cann-kernels_{ver}_linux-{a}.run"
    if cv >= _KERNELS_BY_ARCH:
        return f"Ascend-cann-kernels-{name}_{ver}_linux-{a}.run"
    return f"Ascend-cann-kernels-{name}_{ver}_linux.run"


def toolkit_package(kb: KnowledgeBase, cann: str, arch: str) -> str:
    """The CANN toolkit installer (``.run``) for that CANN and arch.

    The exact name listed in cann-packages.json when there is one (same stem as the
    ``.zip``), else ``Ascend-cann-toolkit_<ver>_linux-<arch>.run`` (every toolkit in the
    data carries the arch suffix, 6.0.RC1 to 9.0.0).

    Raises UserError for an unknown arch or a CANN string that is no version.

    Example:
        >>> from builder.knowledge import load
        >>> toolkit_package(load(), "8.3.rc1", "amd64")
        'Ascend-cann-toolkit_8.3.RC1_linux-x86_64.run'
    """
    return _toolkit(kb.downloads.cann_release(cann), arch)


def _toolkit(release: CannRelease, arch: str) -> str:
    """`toolkit_package` of the release the knowledge base told of."""
    a = _arch(arch)
    _key(release)
    if release.listed:
        name = f"Ascend-cann-toolkit_{release.listed[0]}_linux-{a}.zip"
        if name in release.files:
            return name[: -len(".zip")] + ".run"
    return f"Ascend-cann-toolkit_{release.name}_linux-{a}.run"


KINDS = ("toolkit", "ops", "nnal")  # the CANN packages, in the order they install


def kinds(nnal: bool) -> Tuple[str, ...]:
    """The CANN packages a cell installs: toolkit and the chip's ops package, then NNAL if asked.

    Example:
        >>> kinds(False), kinds(True)[-1]
        (('toolkit', 'ops'), 'nnal')
    """
    return KINDS if nnal else KINDS[:2]


def nnal_package(kb: KnowledgeBase, cann: str, arch: str) -> str:
    """The NNAL installer (``.run``) of that CANN release and arch, as the official images fetch it.

    Raises UserError for an unknown arch, a CANN string that is no version, or a release
    before the first the knowledge base knows an NNAL package for (``cann-downloads.yaml``).

    Example:
        >>> from builder.knowledge import load
        >>> nnal_package(load(), "9.1.0", "arm64")
        'Ascend-cann-nnal_9.1.0_linux-aarch64.run'
    """
    return _nnal(kb.downloads.cann_release(cann), arch)


def _nnal(release: CannRelease, arch: str) -> str:
    """`nnal_package` of the release the knowledge base told of."""
    a = _arch(arch)
    cann = release.asked
    cv = _key(release)
    since = release.nnal_since
    if not since or release.nnal_since_key is None or cv < release.nnal_since_key:
        raise UserError(f"CANN {cann} has no NNAL package the knowledge base knows: the first is CANN {since}",
                        fix=f"use CANN >= {since}, or drop nnal: true")
    return f"Ascend-cann-nnal_{release.name}_linux-{a}.run"


def cann_installers(kb: KnowledgeBase, cann: str, chip: str, arch: str, nnal: bool = False) -> List[Installer]:
    """Official CANN installers with URL: the toolkit first, then the chip's ops package, then
    NNAL when asked (``nnal``).

    The ``.zip`` listed in cann-packages.json, with its published sha256, when there is
    one; else, for a release the knowledge base knows, the ``.run`` of the install guides
    from the release's folder (``cann-downloads.yaml``) with ``sha256=None``: `ascend-build
    lock` records it on first fetch. ``[]`` for a release the data does not know.

    Example:
        >>> from builder.knowledge import load
        >>> [i.kind for i in cann_installers(load(), "8.0.RC3", "910b", "x86_64")]
        ['toolkit', 'ops']
        >>> [(i.filename, i.sha256) for i in cann_installers(load(), "9.1.0", "a3", "x86_64")]
        [('Ascend-cann-toolkit_9.1.0_linux-x86_64.run', None), ('Ascend-cann-A3-ops_9.1.0_linux-x86_64.run', None)]
        >>> [i.run for i in cann_installers(load(), "9.1.0", "910b", "x86_64", nnal=True)][2]
        'Ascend-cann-nnal_9.1.0_linux-x86_64.run'
        >>> cann_installers(load(), "6.4.0", "910b", "x86_64")
        []
    """
    return installers_of(kb.downloads.cann_release(cann), chip, arch, nnal)


def installers_of(release: CannRelease, chip: str, arch: str, nnal: bool = False) -> List[Installer]:
    """`cann_installers` of the release the knowledge base told of (``kb.downloads.cann_release``): the
    one answer everything here is named from.

    Example:
        >>> from builder.knowledge import load
        >>> [i.kind for i in installers_of(load().downloads.cann_release("8.0.RC3"), "910b", "x86_64")]
        ['toolkit', 'ops']
    """
    a = arch if arch in ARCHS else normalize_arch(arch)
    if a is None:
        return []
    found: Dict[str, Installer] = {}
    if release.listed:
        ver, source = release.listed[0], release.source
        files = release.files
        toolkit = f"Ascend-cann-toolkit_{ver}_linux-{a}.zip"
        if toolkit in files:
            f = files[toolkit]
            found["toolkit"] = Installer("toolkit", toolkit, f["url"], f["sha256"], toolkit[:-4] + ".run", source, ver, a)
        ops = _ops_zip(release, str(chip).lower(), a)
        if ops:
            fname, f = ops
            found["ops"] = Installer("ops", fname, f["url"], f["sha256"], fname[:-4] + ".run", source, ver, a)
    folder = release.folder
    wanted = kinds(nnal)
    for kind in wanted:
        if kind in found or folder is None:
            continue
        try:  # the .run the install guides fetch from the release's folder; its sha256 comes from the lock
            run = _package(release, kind, chip, a)
        except UserError:  # a chip or NNAL this release predates, or no version: other rules say so
            continue
        found[kind] = Installer(kind, run, folder + run, None, run, "release folder (cann-downloads.yaml)",
                                release.name, a)
    return [found[k] for k in wanted if k in found]


def package(kb: KnowledgeBase, kind: str, cann: str, chip: str, arch: str) -> str:
    """The ``.run`` of one kind of CANN package: ``toolkit``, ``ops`` (the chip's) or ``nnal``.

    Example:
        >>> from builder.knowledge import load
        >>> package(load(), "ops", "8.5.0", "a3", "x86_64")
        'Ascend-cann-A3-ops_8.5.0_linux-x86_64.run'
    """
    return package_of(kb.downloads.cann_release(cann), kind, chip, arch)


def package_of(release: CannRelease, kind: str, chip: str, arch: str) -> str:
    """`package` of the release the knowledge base told of (``kb.downloads.cann_release``).

    Example:
        >>> from builder.knowledge import load
        >>> package_of(load().downloads.cann_release("9.1.0"), "nnal", "910b", "x86_64")
        'Ascend-cann-nnal_9.1.0_linux-x86_64.run'
    """
    return _package(release, kind, chip, arch)


def _package(release: CannRelease, kind: str, chip: str, arch: str) -> str:
    if kind == "toolkit":
        return _toolkit(release, arch)
    if kind == "nnal":
        return _nnal(release, arch)
    return _ops(release, chip, arch)


def conda_installer(kb: KnowledgeBase, arch: str) -> Optional[Installer]:
    """The Miniforge3 installer for that arch (``data/conda.yaml``); None when unknown.

    Example:
        >>> from builder.knowledge import load
        >>> conda_installer(load(), "x86_64").filename, conda_installer(load(), "ppc64le")
        ('Miniforge3-26.3.2-3-Linux-x86_64.sh', None)
    """
    return kb.downloads.conda_installers().get(normalize_arch(arch) or "")


__all__ = ["KINDS", "Installer", "cann_installers", "conda_installer", "installers_of", "kinds", "known_arch", "nnal_package",
           "ops_package", "package", "package_of", "toolkit_package"]
