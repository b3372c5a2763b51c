"""The rule over a cell's ``pip:`` pins: none may contradict what its torch_npu wheel declares it needs.

Each torch_npu wheel states in its METADATA (Requires-Dist) the torch, and from some
releases on numpy and pyyaml, it needs. A cell pinning another version beside it is an
image pip refuses to build, or, when the pin is installed first, a torch_npu that imports
against the wrong torch. So a ``pip:`` pin outside the declared specifier is refused
(``torch-npu-requires``), naming both requirements and the wheel they were read from
(`builder.knowledge.wheel_requires`: every wheel of every release, per arch and Python).

Only ``pip:`` pins are compared: the cell's ``torch:`` against its torch_npu is the rule
``torch_matches_pin`` in checks.py, which is not reported twice. A cell's own wheel
(``torch_npu_wheel``) declares what it declares, and a release, arch or Python with no
known wheel gives no finding here (whether the wheel exists is other rules' question).

Local labels: the x86_64 wheels of older releases declare ``torch==X+cpu``, the CPU build
the tool installs from PyTorch's own index on x86_64. A cell pinning ``torch==X`` beside
it means that build, so an ``==`` with a local label is compared without the label on
both sides. Every other specifier (``torch==2.13.0.*``, ``numpy>=1.21``) is packaging's
SpecifierSet, pre-releases admitted: a cell names its own on purpose.

Example:
    >>> from builder.images.matrix import Cell
    >>> cell = Cell(id="c", image="i", os="ubuntu22.04", arch="x86_64", chip="910b", cann="8.5.0", driver="25.5.0",
    ...             firmware=None, python="3.11", torch="", torch_npu="2.9.0", env="venv", pip=("torch==2.9.1",))
    >>> [finding] = pins_match_torch_npu(cell, None)
    >>> print(finding.rule, finding.message, finding.fix, sep="\\n")
    torch-npu-requires
    pip: torch==2.9.1 contradicts torch_npu 2.9.0's Requires-Dist torch==2.9.0+cpu (its wheel torch_npu-2.9.0-cp311-cp311-manylinux_2_28_x86_64.whl, read from the wheel's METADATA by HTTP range requests)
    pin torch==2.9.0, or drop the pin: it follows from torch_npu
    >>> from dataclasses import replace
    >>> list(pins_match_torch_npu(replace(cell, pip=("torch==2.9.0", "numpy==1.26.4")), None))
    []
"""

from __future__ import annotations

from typing import Any, Iterator, List, Optional, Set, Tuple

from packaging.markers import InvalidMarker, UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import Specifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from builder.errors import Finding
from builder.images.matrix import Cell
from builder.knowledge import wheel_requires

Findings = Iterator[Finding]
RULE = "torch-npu-requires"


def _finding(cell: Cell, key: str, rule: str, message: str, fix: str, severity: str = "error") -> Finding:
    path, where = cell.locate(key)
    return Finding(rule, severity, message, fix, where, path)


def _pins(cell: Cell) -> List[Tuple[str, str, Version]]:
    """(pin as written, canonical name, version) of each ``name==version`` pin in ``pip:``; what
    is no such pin is the schema's to report."""
    out: List[Tuple[str, str, Version]] = []
    for text in cell.pip:
        try:
            requirement = Requirement(text)
            [spec] = requirement.specifier
            if spec.operator == "==" and not spec.version.endswith(".*"):
                out.append((text, canonicalize_name(requirement.name), Version(spec.version)))
        except (InvalidRequirement, InvalidVersion, ValueError):  # ValueError: not exactly one specifier
            continue
    return out


def allows(specifier: SpecifierSet, version: Version) -> bool:
    """Whether a declared specifier admits a pinned version; an ``==`` with a local label
    (``==2.9.0+cpu``) is compared without the label on both sides.

    Example:
        >>> allows(SpecifierSet("==2.9.0+cpu"), Version("2.9.0")), allows(SpecifierSet("==2.9.0+cpu"), Version("2.9.1"))
        (True, False)
        >>> allows(SpecifierSet("==2.13.0.*"), Version("2.13.0")), allows(SpecifierSet("==2.13.0.*"), Version("2.14.0"))
        (True, False)
    """
    for spec in specifier:
        if spec.operator == "==" and "+" in spec.version and not spec.version.endswith(".*"):
            if version.public != Version(spec.version).public:
                return False
        elif not spec.contains(version, prereleases=True):
            return False
    return True


def _applies(requirement: Requirement, cell: Cell) -> bool:
    """Whether a requirement's marker holds in a Linux image of the cell's arch and Python,
    torch_npu installed without extras; a marker that cannot be decided does not apply
    (unknown is never incompatible)."""
    if requirement.marker is None:
        return True
    parts = cell.python.split(".")
    environment = {"platform_machine": cell.arch, "python_version": ".".join(parts[:2]),
                   "python_full_version": ".".join((parts + ["0"])[:3]), "sys_platform": "linux",
                   "platform_system": "Linux", "os_name": "posix", "implementation_name": "cpython",
                   "platform_python_implementation": "CPython", "extra": ""}
    try:
        return requirement.marker.evaluate(environment)
    except (InvalidMarker, UndefinedComparison, UndefinedEnvironmentName):
        return False


def _fix(name: str, specifier: SpecifierSet) -> str:
    """Pin what the wheel declares (an exact one without its local label), or leave it to torch_npu.

    Example:
        >>> _fix("torch", SpecifierSet("==2.9.0+cpu")), _fix("torch", SpecifierSet("==2.13.0.*"))[:40]
        ('pin torch==2.9.0, or drop the pin: it follows from torch_npu', 'pin a torch release that meets ==2.13.0.')
    """
    exact: Optional[Specifier] = None
    specs = list(specifier)
    if len(specs) == 1 and specs[0].operator in ("==", "===") and not specs[0].version.endswith(".*"):
        exact = specs[0]
    if exact is not None:
        try:
            shown = Version(exact.version).public
        except InvalidVersion:
            shown = exact.version
        return f"pin {name}=={shown}, or drop the pin: it follows from torch_npu"
    return f"pin a {name} release that meets {specifier}, or drop the pin: it follows from torch_npu"


def pins_match_torch_npu(cell: Cell, kb: Any) -> Findings:
    """Each ``pip:`` pin of a package the cell's torch_npu wheel (its arch and Python) declares
    must meet that declaration (Requires-Dist). ``pip:`` pins only: ``torch:`` is
    ``torch_matches_pin``'s; a cell's own wheel and a wheel not known are not checked."""
    if cell.cann_only or cell.torch_npu_wheel:
        return
    pins = _pins(cell)
    if not pins:
        return
    reported: Set[Tuple[str, str]] = set()
    for wheel in wheel_requires.wheels(cell.torch_npu, cell.arch, cell.python):
        for line in wheel.requires_dist:
            requirement = Requirement(line)  # the data file holds only requirements packaging reads
            if not _applies(requirement, cell):
                continue
            name = canonicalize_name(requirement.name)
            for pin, pinned, version in pins:
                key = (pin, str(requirement))  # "torch ==2.9.0" and "torch==2.9.0" are one requirement
                if pinned != name or key in reported or allows(requirement.specifier, version):
                    continue
                reported.add(key)
                yield _finding(cell, "pip", "torch-npu-requires",
                               f"pip: {pin} contradicts torch_npu {cell.torch_npu}'s Requires-Dist {line} "
                               f"(its wheel {wheel.wheel}, {wheel.source})",
                               _fix(requirement.name, requirement.specifier))


__all__ = ["RULE", "allows", "pins_match_torch_npu"]
