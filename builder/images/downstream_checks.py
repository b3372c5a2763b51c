"""The rule over downstream releases a cell pins: their published torch-npu / torch must be the cell's.

A cell may pin a downstream release in ``pip:`` (``vllm-ascend==0.13.0``). That release
states, in its own requirement files, the torch-npu and torch it needs; pip would refuse
the pair, or, with the release built against another torch-npu, the image would import
broken. So a cell whose torch_npu or torch is outside what the release requires is refused
(``downstream-pin``), naming both requirements and the file they were read from; a release
the knowledge base does not know is a warning (``downstream-release-unknown``): unknown is
never incompatible.

The cell's torch is, in this order: a ``torch==X`` pin in ``pip:``, the cell's ``torch``,
the release part of its torch_npu (2.9.0.post2 -> 2.9.0), which is the torch torch_npu
is made for. Local labels (``+cpu``) are left out of every comparison.

Example:
    >>> from builder.images.matrix import Cell
    >>> cell = Cell(id="c", image="i", os="ubuntu22.04", arch="x86_64", chip="910b", cann="8.5.0", driver="25.5.0",
    ...             firmware=None, python="3.11", torch="2.9.0", torch_npu="2.9.0", env="venv", pip=("vllm-ascend==0.13.0",))
    >>> [(f.rule, f.message) for f in downstream_pins_fit(cell, None)]   # doctest: +NORMALIZE_WHITESPACE
    [('downstream-pin', 'vllm-ascend 0.13.0 requires torch-npu==2.8.0.post2 and torch==2.8.0
      (vllm-project/vllm-ascend@v0.13.0: pyproject.toml, requirements.txt); the cell has torch_npu 2.9.0 and torch 2.9.0')]
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Tuple

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from builder.errors import Finding
from builder.images.matrix import Cell
from builder.knowledge.downstream_pins import DownstreamPins, DownstreamRelease, Requires, load_pins

Findings = Iterator[Finding]

# The packages of a cell compared with a release's requirements.
_COMPARED = ("torch-npu", "torch", "torchvision")


def _finding(cell: Cell, key: str, rule: str, message: str, fix: str, severity: str = "error") -> Finding:
    path, where = cell.locate(key)
    return Finding(rule, severity, message, fix, where, path)


def _pins_of(cell: Cell) -> List[Tuple[str, str]]:
    """(canonical name, version) of each exact ``name==version`` pin in ``pip:``; what is no
    such pin is the schema's to report.

    Example:
        >>> from types import SimpleNamespace
        >>> _pins_of(SimpleNamespace(pip=("vllm_ascend==0.13.0", "numpy<2", "torch==2.8.0+cpu")))
        [('vllm-ascend', '0.13.0'), ('torch', '2.8.0+cpu')]
    """
    out: List[Tuple[str, str]] = []
    for text in cell.pip:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        [*specs] = requirement.specifier
        if len(specs) == 1 and specs[0].operator == "==" and not specs[0].version.endswith(".*"):
            out.append((canonicalize_name(requirement.name), specs[0].version))
    return out


def _release_part(version: str) -> str:
    """The release part of a version, which is the torch a torch_npu is made for; "" when it is none.

    Example:
        >>> _release_part("2.9.0.post2"), _release_part("2.5.1.dev20250320"), _release_part("x")
        ('2.9.0', '2.5.1', '')
    """
    try:
        return ".".join(str(part) for part in Version(version).release)
    except InvalidVersion:
        return ""


def cell_packages(cell: Cell) -> Dict[str, str]:
    """The cell's torch_npu, torch and (when pinned) torchvision, by canonical name, as the
    image installs them: a pin in ``pip:`` wins over the cell's own field."""
    pinned = dict(_pins_of(cell))
    have = {"torch-npu": cell.torch_npu,
            "torch": pinned.get("torch") or cell.torch or _release_part(cell.torch_npu)}
    if "torchvision" in pinned:
        have["torchvision"] = pinned["torchvision"]
    return have


def _pins_data(kb: Any) -> DownstreamPins:
    """A test's own downstream pins (``kb.downstream_pins``), else the shipped ones, read on first use
    (only a cell that pins a downstream release needs them)."""
    pins = getattr(kb, "downstream_pins", None)
    return pins if isinstance(pins, DownstreamPins) else load_pins()


def downstream_pins_fit(cell: Cell, kb: Any) -> Findings:
    """Each downstream release pinned in ``pip:`` must admit the cell's torch_npu and torch
    (and torchvision, when pinned), as the release's own requirement files state them."""
    if cell.cann_only:
        return
    pins = _pins_data(kb)
    projects = set(pins.projects())
    have = cell_packages(cell)
    for project, version in _pins_of(cell):
        if project not in projects:
            continue
        release = pins.release(project, version, cell.arch, cell.python)
        if release is None:
            yield _unknown(cell, pins, project, version)
            continue
        wrong = [name for name in _COMPARED
                 if name in release.requires and name in have and release.requires[name].allows(have[name]) is False]
        if wrong:
            yield _finding(cell, "pip", "downstream-pin", _message(release, have),
                           _fix(cell, pins, release, have, wrong))


def _unknown(cell: Cell, pins: DownstreamPins, project: str, version: str) -> Finding:
    known = pins.versions(project)
    return _finding(cell, "pip", "downstream-release-unknown",
                    f"{project} {version} is not a release the knowledge base knows ({project} "
                    f"{known[0]} to {known[-1]}, read from its requirement files at each release tag): "
                    f"its torch-npu and torch requirements are not checked",
                    f"pin a known {project} release (the newest: {', '.join(reversed(known[-3:]))}), or, for a newer "
                    f"one, update ascend-build: its knowledge base reads the release's files when it is added",
                    severity="warning")


def _message(release: DownstreamRelease, have: Dict[str, str]) -> str:
    """'P V requires A and B (repo@tag: files); the cell has ...', naming every requirement compared."""
    compared = [name for name in _COMPARED if name in have and release.specifier(name)]
    paths = sorted({path for name in compared for _, path, _ in release.requires[name].stated})
    stated = _and([f"{name}{release.specifier(name)}" for name in compared])
    cell_has = _and([f"{name.replace('-', '_')} {have[name]}" for name in compared])
    return (f"{release.project} {release.version} requires {stated} ({release.source}: {', '.join(paths)}); "
            f"the cell has {cell_has}")


def _fix(cell: Cell, pins: DownstreamPins, release: DownstreamRelease, have: Dict[str, str], wrong: List[str]) -> str:
    """Set what the release requires (torch with torch_npu: they go in pairs), or pin a
    release of the project that admits what the cell has."""
    in_pip = {name for name, _ in _pins_of(cell)}
    settings = [_setting(name, release.requires[name], name in in_pip or name == "torchvision")
                for name in _COMPARED if release.specifier(name)
                and (name in wrong or (name == "torch" and "torch-npu" in wrong))]
    text = f"set {_and(settings)} (what {release.project} {release.version} requires)"
    others = pins.fitting(release.project, have)
    if others:
        text += f", or pin a {release.project} release that admits the cell's: {', '.join(others[:3])}"
    return text


def _setting(name: str, requires: Requires, in_pip: bool) -> str:
    """How a matrix sets ``name`` to what ``requires`` admits: its own key, or a pin in ``pip:``.

    Example:
        >>> _setting("torch-npu", Requires("torch-npu", "==2.8.0.post2", ()), False)
        'torch_npu: 2.8.0.post2'
        >>> _setting("torchvision", Requires("torchvision", "<0.21.0", ()), True)
        'torchvision in pip: to a version that meets <0.21.0'
    """
    if in_pip:
        return f"{name}=={requires.exact} in pip" if requires.exact else f"{name} in pip: to a version that meets {requires.specifier}"
    key = name.replace("-", "_")
    return f"{key}: {requires.exact}" if requires.exact else f"{key} to a version that meets {requires.specifier}"


def _and(items: List[str]) -> str:
    """Items as a sentence lists them.

    Example:
        >>> _and(["a"]), _and(["a", "b", "c"])
        ('a', 'a, b and c')
    """
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


__all__ = ["downstream_pins_fit", "cell_packages"]
