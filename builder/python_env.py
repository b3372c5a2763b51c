"""What CANN and torch_npu ask of the Python environment, from ``builder/data/python-env.yaml``.

Two kinds of facts, each with its source: the Python packages CANN's own tools import
and the versions each CANN release accepts (numpy < 2 before 9.0.0-beta.2, protobuf
3.20.x up to 9.0.x, ...), and the keys of ``PYTORCH_NPU_ALLOC_CONF`` each torch_npu
release accepts (2.1.0rc1 refuses ``expandable_segments`` on the first allocation).
`ascend-build lock` resolves within the first; `validate` refuses a matrix that
contradicts either; the plan sets an allocator default only where it is accepted.

Example:
    >>> [c.requirement for c in constraints("7.0.RC1")]
    ['numpy<2', 'protobuf>=3.20,<3.21', 'setuptools<82']
    >>> accepts("PYTORCH_NPU_ALLOC_CONF", "expandable_segments", "2.1.0rc1")
    False
    >>> default_env("2.1.0rc1"), default_env("2.4.0")
    ((), (('PYTORCH_NPU_ALLOC_CONF', 'expandable_segments:True'),))
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Any, Dict, Mapping, Optional, Tuple

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from builder import documents, knowledge, versions

DATA = knowledge.DATA_DIR / "python-env.yaml"


@lru_cache(maxsize=4096)
def requirement(text: str) -> Requirement:
    """``text`` parsed as a PEP 508 requirement, once per text (rendering 1,000 cells parses the
    same few dozen requirements tens of thousands of times). Treat the result as read-only.

    Example:
        >>> requirement("numpy<2").name, str(requirement("numpy<2").specifier)
        ('numpy', '<2')
    """
    return Requirement(text)


@dataclass(frozen=True)
class Constraint:
    """One version limit on one package, with where it comes from."""

    requirement: str        # e.g. "numpy<2"
    source: str
    inferred: bool = False  # reasoned from other facts, not read in one place
    python: str = ""        # the Pythons it is stated for ("Python < 3.13"); "" for every Python

    @property
    def name(self) -> str:
        return canonicalize_name(requirement(self.requirement).name)

    def allows(self, version: str) -> bool:
        return requirement(self.requirement).specifier.contains(version, prereleases=True)


@lru_cache(maxsize=1)
def _doc() -> Dict[str, Any]:
    return documents.load_yaml(DATA.read_text(encoding="utf-8"), str(DATA))


def cann_packages() -> Tuple[str, ...]:
    """The packages CANN's tools import: every image installs them (in its lock)."""
    return tuple(_doc()["cann_python"]["packages"])


def _minor(python: str) -> Optional[Tuple[int, ...]]:
    """``"3.11"`` or ``"3.11.4"`` -> (3, 11); None for what is no Python version."""
    parts = str(python).split(".")[:2]
    return tuple(int(p) for p in parts) if len(parts) == 2 and all(p.isdigit() for p in parts) else None


def _python_applies(item: Mapping[str, Any], python: str) -> bool:
    """Whether a constraint stated for a Python range (``python_from``/``python_below``) holds
    for ``python``; one stated for every Python always does. Without a Python, only those."""
    low, high = item.get("python_from"), item.get("python_below")
    if low is None and high is None:
        return True
    minor = _minor(python)
    if minor is None:
        return False
    return (low is None or minor >= _minor(str(low))) and (high is None or minor < _minor(str(high)))  # type: ignore[operator]


def _python_text(item: Mapping[str, Any]) -> str:
    low, high = item.get("python_from"), item.get("python_below")
    return " and ".join(([f"Python >= {low}"] if low else []) + ([f"Python < {high}"] if high else []))


@lru_cache(maxsize=1024)
def constraints(cann: str, python: str = "") -> Tuple[Constraint, ...]:
    """The limits that hold for ``cann`` on ``python`` (a release outside every range has only
    the general ones). Some limits depend on the Python too: CANN 8.5.0's guide asks for
    numpy < 2 below Python 3.13 and numpy > 2.1 from 3.13 (no numpy < 2 has a cp313 wheel).

    Example:
        >>> [c.requirement for c in constraints("8.5.0", "3.11") if c.name == "numpy"]
        ['numpy>=1.19.2,<2']
        >>> [c.requirement for c in constraints("8.5.0", "3.13") if c.name == "numpy"]
        ['numpy>2.1']
    """
    doc = _doc()["cann_python"]
    version = versions.lenient("cann", cann)
    found = []
    for item in doc["constraints"]:
        low, high = versions.lenient("cann", item["cann_from"]), versions.lenient("cann", item.get("below"))
        if version is not None and low <= version and (high is None or version < high) and _python_applies(item, python):
            found += [Constraint(r, item["source"], bool(item.get("inferred")), _python_text(item))
                      for r in item["requirements"]]
    for item in doc.get("always", []):
        found += [Constraint(r, item["source"], bool(item.get("inferred"))) for r in item["requirements"]]
    return tuple(found)


@dataclass(frozen=True)
class PythonRange:
    """The Python versions a CANN release's installation guide states (``low`` to ``high``,
    both included, as major.minor), where it says so, and the Pythons outside it that
    Ascend's own images or a major downstream ship that CANN with (Python -> evidence)."""

    cann: str
    low: str
    high: str
    source: str
    shipped: Mapping[str, str]

    def allows(self, python: str) -> bool:
        minor = _minor(python)
        return minor is not None and _minor(self.low) <= minor <= _minor(self.high)  # type: ignore[operator]

    @property
    def text(self) -> str:
        return f"{self.low} to {self.high}"


def python_range(cann: str) -> Optional[PythonRange]:
    """The Python range ``cann``'s installation guide states; None where the knowledge base
    holds no guide of that release (unknown, not incompatible). The range moves from
    release to release, and not only upwards (9.0.0's guide ends at 3.11, 8.5.0's at 3.13).

    Example:
        >>> r = python_range("8.0.RC2")
        >>> r.text, r.allows("3.10"), r.allows("3.11")
        ('3.7 to 3.10', True, False)
        >>> python_range("8.1.RC1") is None
        True
    """
    wanted = versions.lenient("cann", cann)
    if wanted is None:
        return None
    for item in _doc()["cann_python"].get("python", ()):
        if versions.lenient("cann", str(item["cann"])) == wanted:
            low, high = (str(v) for v in item["python"])
            shipped = {str(d["python"]): str(d["evidence"]) for d in item.get("shipped") or ()}
            return PythonRange(str(item["cann"]), low, high, str(item["source"]), MappingProxyType(shipped))
    return None


def _line_first(entry: Mapping[str, Any], torch_npu: str) -> Optional[bool]:
    version = versions.lenient("python_package", torch_npu)
    if version is None:
        return None
    # versions from the shipped data, all valid PEP 440
    lines = {versions.python_package(k): versions.python_package(str(v)) for k, v in entry.get("lines", {}).items()}
    base = versions.python_package(version.base_version)
    if base in lines:
        return version >= lines[base]
    return bool(entry.get("later")) and all(base > line for line in lines)


def accepts(variable: str, key: str, torch_npu: str) -> Optional[bool]:
    """Whether ``torch_npu`` accepts ``key`` in ``variable``; None when the data does not say.

    Example:
        >>> accepts("PYTORCH_NPU_ALLOC_CONF", "expandable_segments", "2.1.0"), accepts("PYTORCH_NPU_ALLOC_CONF", "nonsense", "2.4.0")
        (True, None)
    """
    keys = _doc()["torch_npu_env"].get(variable, {}).get("keys", {})
    return _line_first(keys[key], torch_npu) if key in keys else None


def variables() -> Tuple[str, ...]:
    """The variables whose keys torch_npu checks itself."""
    return tuple(_doc()["torch_npu_env"])


def first_accepting(variable: str, key: str) -> Optional[str]:
    """The first torch_npu release the data knows to accept ``key`` (None when none is known)."""
    keys = _doc()["torch_npu_env"].get(variable, {}).get("keys", {})
    firsts = [str(v) for v in keys.get(key, {}).get("lines", {}).values()]
    return min(firsts, key=versions.python_package) if firsts else None


def known_keys(variable: str) -> Tuple[str, ...]:
    return tuple(_doc()["torch_npu_env"].get(variable, {}).get("keys", {}))


def source(variable: str) -> str:
    """The first source of what the data says of ``variable`` (the rest are in python-env.yaml)."""
    return str(_doc()["torch_npu_env"].get(variable, {}).get("source", "")).split(";")[0]


def option_keys(value: str) -> Tuple[str, ...]:
    """``max_split_size_mb:128,expandable_segments:True`` -> its keys.

    Example:
        >>> option_keys("max_split_size_mb:128, expandable_segments:True")
        ('max_split_size_mb', 'expandable_segments')
    """
    return tuple(part.split(":", 1)[0].strip() for part in value.split(",") if part.strip())


def default_env(torch_npu: str) -> Tuple[Tuple[str, str], ...]:
    """The environment defaults a torch_npu release takes safely (none it would refuse)."""
    out = []
    for variable, entry in _doc()["torch_npu_env"].items():
        first = versions.lenient("python_package", str(entry.get("default_from", "")))
        version = versions.lenient("python_package", torch_npu)
        if entry.get("default") and first is not None and version is not None and version >= first:
            out.append((variable, str(entry["default"])))
    return tuple(out)
