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
    >>> [c.requirement for c in constraints("8.0.RC3")]
    ['numpy>=1.19.2,<=1.24.0', 'protobuf>=3.20,<3.21', 'decorator>=4.4.0', 'sympy>=1.5.1', 'cffi>=1.12.3', 'setuptools<82']
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


@lru_cache(maxsize=4096)
def name_of(text: str) -> str:
    """The canonical name of the requirement ``text`` (``Torch_NPU==2.1`` -> ``torch-npu``),
    once per text, like `requirement`.

    Example:
        >>> name_of("Torch_NPU==2.1.0")
        'torch-npu'
    """
    return canonicalize_name(requirement(text).name)


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


def release_constraints(cann: str) -> Tuple[Constraint, ...]:
    """Every limit ``cann`` states, on any Python (each says which Pythons in ``python``); what
    `kb cann X` shows. :func:`constraints` gives those that hold on one Python.

    Example:
        >>> [c.requirement for c in release_constraints("8.0.RC3")][:5]
        ['numpy>=1.19.2,<=1.24.0', 'protobuf>=3.20,<3.21', 'decorator>=4.4.0', 'sympy>=1.5.1', 'cffi>=1.12.3']
    """
    version = versions.lenient("cann", cann)
    found = []
    for item in _doc()["cann_python"]["constraints"]:
        low, high = versions.lenient("cann", item["cann_from"]), versions.lenient("cann", item.get("below"))
        if version is not None and low <= version and (high is None or version < high):
            found += [Constraint(r, item["source"], bool(item.get("inferred")), _python_text(item))
                      for r in item["requirements"]]
    return tuple(found)


def shipped(cann: str, name: str, version: str) -> str:
    """Where a major downstream ships ``name`` at ``version`` on ``cann`` although CANN's
    limits exclude it ("" when none does): ``cann_python.shipped``.

    Example:
        >>> shipped("8.3.RC2", "protobuf", "5.29.3")
        'vllm-project/vllm-ascend@v0.11.0:Dockerfile'
        >>> shipped("7.0.RC1", "protobuf", "5.29.3"), shipped("8.3.RC2", "protobuf", "3.19.6")
        ('', '')
    """
    wanted = versions.lenient("cann", cann)
    for item in _doc()["cann_python"].get("shipped", ()):
        req = requirement(str(item["requirement"]))
        if canonicalize_name(req.name) != canonicalize_name(name) or not req.specifier.contains(version, prereleases=True):
            continue
        for release, evidence in (item.get("evidence") or {}).items():
            if wanted is not None and versions.lenient("cann", str(release)) == wanted:
                return str(evidence)
    return ""


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
    nnal: Tuple[str, ...] = ()  # the Pythons NNAL's Python library (torch_atb) needs, where the guide says
    nnal_source: str = ""       # the guide's words on it, and the page

    def nnal_allows(self, python: str) -> Optional[bool]:
        """Whether NNAL's Python library supports ``python``; None when the guide does not say."""
        if not self.nnal:
            return None
        minor = _minor(python)
        return minor is not None and ".".join(map(str, minor)) in self.nnal

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
        >>> python_range("8.1.RC1") is None  # marked not checked: python_not_checked("8.1.RC1")
        True
    """
    wanted = versions.lenient("cann", cann)
    if wanted is None:
        return None
    for item in _doc()["cann_python"].get("python", ()):
        if versions.lenient("cann", str(item["cann"])) == wanted:
            low, high = (str(v) for v in item["python"])
            shipped = {str(d["python"]): str(d["evidence"]) for d in item.get("shipped") or ()}
            page = str(item["source"]).rsplit(" ", 1)[-1]
            nnal_source = f"CANN {item['cann']} installation guide: '{item['nnal_quote']}': {page}" if item.get("nnal") else ""
            return PythonRange(str(item["cann"]), low, high, str(item["source"]), MappingProxyType(shipped),
                               tuple(str(p) for p in item.get("nnal") or ()), nnal_source)
    return None


def python_not_checked(cann: str) -> str:
    """Why ``cann``'s Python range is not checked ("" when the knowledge base holds its range, or
    does not know the release): ``cann_python.python_not_checked``, the explicit marker.

    Example:
        >>> python_not_checked("8.1.RC1")[:26], python_not_checked("8.5.0")
        ('searched, not found: no in', '')
    """
    wanted = versions.lenient("cann", cann)
    if wanted is None or python_range(cann) is not None:
        return ""
    for item in _doc()["cann_python"].get("python_not_checked", ()):
        if versions.lenient("cann", str(item["cann"])) == wanted:
            return str(item["why"])
    return ""


def _releases(variable: str) -> Dict[Any, Mapping[str, Any]]:
    """The releases whose parser the data read, by PEP 440 version (versions from the shipped data)."""
    table = _doc()["torch_npu_env"].get(variable, {}).get("releases", {})
    return {versions.python_package(str(v)): entry for v, entry in table.items()}


def _tagged(variable: str, torch_npu: str) -> Optional[Mapping[str, Any]]:
    """The release entry of ``torch_npu`` itself; None when no release tag names it."""
    version = versions.lenient("python_package", torch_npu)
    return _releases(variable).get(version) if version is not None else None


def accepts(variable: str, key: str, torch_npu: str) -> Optional[bool]:
    """Whether ``torch_npu`` accepts ``key`` in ``variable``; None when the data does not say.

    Read from the parser at the release's own tag. A release no tag names takes the answer
    of the tagged releases of its line just below and above it where they agree.

    Example:
        >>> accepts("PYTORCH_NPU_ALLOC_CONF", "expandable_segments", "2.1.0"), accepts("PYTORCH_NPU_ALLOC_CONF", "expandable_segments", "2.1.0rc1")
        (True, False)
        >>> accepts("PYTORCH_NPU_ALLOC_CONF", "align_hugepages", "2.1.0.post6"), accepts("PYTORCH_NPU_ALLOC_CONF", "align_hugepages", "2.1.0.post8")
        (True, False)
        >>> accepts("PYTORCH_NPU_ALLOC_CONF", "nonsense", "2.4.0"), accepts("PYTORCH_NPU_ALLOC_CONF", "page_size", "2.99.0") is None
        (False, True)
    """
    version = versions.lenient("python_package", torch_npu)
    if version is None:
        return None
    releases = _releases(variable)
    if version in releases:
        return key in releases[version].get("keys", ())
    line = [v for v in sorted(releases) if v.release[:2] == version.release[:2]]
    below, above = [v for v in line if v < version][-1:], [v for v in line if v > version][:1]
    if not below or not above:
        return None
    answers = {key in releases[v].get("keys", ()) for v in below + above}
    return answers.pop() if len(answers) == 1 else None


def variables() -> Tuple[str, ...]:
    """The variables whose keys torch_npu checks itself."""
    return tuple(_doc()["torch_npu_env"])


def first_accepting(variable: str, key: str) -> Optional[str]:
    """The first torch_npu release the data knows to accept ``key`` (None when none is known).

    Example:
        >>> first_accepting("PYTORCH_NPU_ALLOC_CONF", "expandable_segments"), first_accepting("PYTORCH_NPU_ALLOC_CONF", "segment_size_mb")
        ('2.1.0', '2.1.0.post18')
    """
    found = accepting(variable, key)
    return found[0] if found else None


def accepting(variable: str, key: str) -> Tuple[str, ...]:
    """Every release whose parser the data read that accepts ``key``, oldest first.

    Example:
        >>> accepting("PYTORCH_NPU_ALLOC_CONF", "align_hugepages")
        ('2.1.0.post6', '2.1.0.post7', '2.2.0.post2', '2.2.0.post3', '2.3.1', '2.3.1.post1')
    """
    return tuple(str(v) for v, entry in sorted(_releases(variable).items()) if key in entry.get("keys", ()))


def newest(variable: str, line_of: str = "") -> str:
    """The newest release whose parser the data read, of ``line_of``'s line (X.Y) when given ("" when none).

    Example:
        >>> newest("PYTORCH_NPU_ALLOC_CONF", "2.4.0"), newest("PYTORCH_NPU_ALLOC_CONF")
        ('2.4.0.post5', '2.13.0')
    """
    line = versions.lenient("python_package", line_of) if line_of else None
    found = [v for v in sorted(_releases(variable)) if line is None or v.release[:2] == line.release[:2]]
    return str(found[-1]) if found else ""


def known_keys(variable: str, torch_npu: str = "") -> Tuple[str, ...]:
    """The keys ``torch_npu``'s parser accepts (every key any release accepts without one).

    Example:
        >>> known_keys("PYTORCH_NPU_ALLOC_CONF", "2.1.0rc1")
        ('garbage_collection_threshold', 'max_split_size_mb')
    """
    if torch_npu:
        entry = _tagged(variable, torch_npu)
        return tuple(entry.get("keys", ())) if entry else ()
    return tuple(sorted({k for entry in _releases(variable).values() for k in entry.get("keys", ())}))


def source(variable: str, torch_npu: str = "") -> str:
    """Where the data read what ``torch_npu`` accepts in ``variable``: the parser's file at its
    release tag (``repo@commit:path (tag)``), or the variable's first general source.

    Example:
        >>> source("PYTORCH_NPU_ALLOC_CONF", "2.1.0rc1")
        'Ascend/pytorch@579994f8317bef60d18ee528765dd397eb70ad62:torch_npu/csrc/core/npu/NPUCachingAllocator.cpp (tag v5.0.rc3-pytorch2.1.0)'
    """
    doc = _doc()["torch_npu_env"].get(variable, {})
    entry = _tagged(variable, torch_npu) if torch_npu else None
    if entry:
        files = ", ".join(f"torch_npu/csrc/core/npu/{f}" for f in entry.get("files", ()))
        return f"{doc.get('source_repo', 'Ascend/pytorch')}@{entry['commit']}:{files} (tag {entry['tag']})"
    return str(doc.get("source", "")).split(";")[0]


def refusal(variable: str, torch_npu: str) -> str:
    """The error ``torch_npu`` raises on a key it does not parse ("" when the data does not say).

    Example:
        >>> refusal("PYTORCH_NPU_ALLOC_CONF", "2.4.0"), refusal("PYTORCH_NPU_ALLOC_CONF", "2.13.0")
        ('Unrecognized CachingAllocator option', 'Unrecognized key')
    """
    entry = _tagged(variable, torch_npu)
    return str(entry.get("error", "")) if entry else ""


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


@dataclass(frozen=True)
class CannPython:
    """CANN's Python data for one cell, looked up together (`cann_python`)."""

    packages: Tuple[str, ...]                   # the packages CANN's tools import (`cann_packages`)
    constraints: Tuple[Constraint, ...]         # the limits that hold for the CANN on the Python (`constraints`)
    limits: Tuple[Tuple[str, str], ...]         # each of those as (canonical name, specifier)
    default_env: Tuple[Tuple[str, str], ...]    # the environment defaults its torch_npu takes (`default_env`)


@lru_cache(maxsize=1024)
def cann_python(cann: str, python: str, torch_npu: str) -> CannPython:
    """CANN's Python data for ``cann`` on ``python`` with ``torch_npu``, as one record.

    Example:
        >>> data = cann_python("8.5.0", "3.11", "2.8.0")
        >>> "numpy" in dict(data.limits), data.packages == cann_packages()
        (True, True)
    """
    found = constraints(cann, python)
    return CannPython(packages=cann_packages(), constraints=found,
                      limits=tuple((c.name, str(requirement(c.requirement).specifier)) for c in found),
                      default_env=default_env(torch_npu))
