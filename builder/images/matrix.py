"""Read version-matrix YAML into typed, validated cells.

A matrix file says, once, what every cell shares (``defaults``) and then lists the
cells, each a handful of keys::

    image: ascend-build/pytorch          # repository every cell is tagged into
    defaults:
      os: ubuntu22.04
      arch: [aarch64, x86_64]            # a list expands into one cell per value
    cells:
      - cann: 8.0.RC3
        chip: 910b
        python: "3.10"
        torch_npu: 2.4.0.post2           # torch, driver, firmware follow from the knowledge base

Why a hand-written walk over the YAML node tree instead of ``yaml.safe_load``:

* every value keeps its ``file:line:column`` so a finding points at the exact key;
* scalars stay the strings the user typed (``python: 3.10`` is ``"3.10"``, not 3.1);
* anchors and aliases are refused outright, which also makes alias bombs impossible.

Every string that may reach a Dockerfile is checked here against a strict
whitelist pattern, so no value can change a Dockerfile's structure.
"""

from __future__ import annotations

import difflib
import itertools
import re
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

import yaml

from builder import commands, documents
from builder.images import own_wheel
from builder.errors import Finding, Location, UserError
from builder.vocabulary import ARCHS, CHIPS, DEFAULT_IMAGE

MAX_BYTES = 1 << 20  # a matrix of a few thousand cells fits in well under 1 MiB

OS_IDS = ("ubuntu18.04", "ubuntu20.04", "ubuntu22.04", "ubuntu24.04",
          "openeuler20.03", "openeuler22.03", "openeuler24.03", "debian11", "debian12")
ENV_MANAGERS = ("conda", "venv")
CANN_SOURCES = ("installer", "image", "local")
MIRROR_KEYS = ("pip_index", "apt", "conda_channel", "torch_index", "conda_installer")

# Whitelists: anything outside them is refused before it can reach a template.
_VERSION = re.compile(r"^[0-9][0-9A-Za-z.+-]{0,39}$")
_PYTHON = re.compile(r"^3\.[0-9]{1,2}(\.[0-9]{1,2})?$")
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}$")
_IMAGE_REF = re.compile(
    r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]{1,5})?"
    r"(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$")
_REPOSITORY = re.compile(
    r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]{1,5})?(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*$")
_PIP_PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}(?:\[[A-Za-z0-9,._-]+\])?==[A-Za-z0-9.+!_-]{1,40}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")
_ENV_VALUE = re.compile(r"^[A-Za-z0-9_./:,=+@%-]{0,300}$")
_URL = re.compile(r"^https?://[A-Za-z0-9._~:/?#@!&+,=%-]{1,500}$")
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/?#\s]*@")  # scheme://user:password@
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,199}$")
_PATH = re.compile(r"^[A-Za-z0-9._/+-]{1,500}$")

# key -> (kind, one-line help used in did-you-mean and error fixes)
CELL_KEYS: Dict[str, str] = {
    "name": "cell id and tag suffix, e.g. my-cell (default: derived from the versions)",
    "os": "base OS: " + ", ".join(OS_IDS),
    "arch": "CPU architecture or a list of them: " + ", ".join(ARCHS),
    "chip": "NPU chip or a list of them: " + ", ".join(CHIPS),
    "cann": "CANN version, e.g. 8.0.RC3",
    "product": "the product a cell targets where a CANN release numbers its HDK per product, e.g. atlas-950-superpod "
               "(`ascend-build kb` lists them): its minimum driver is then that product's (default: none, the CANN's own)",
    "min_driver": "the oldest NPU driver (Ascend HDK) the image declares it runs on, e.g. 24.1.RC3: its min-driver "
                  "label, which pull/run/doctor compare with a node's driver; not the driver of your nodes "
                  "(default: the CANN release's minimum)",
    "firmware": "minimum NPU firmware, five numbers, e.g. 7.5.0.1.129",
    "python": "Python version, e.g. \"3.10\" (quote it)",
    "torch": "PyTorch version, e.g. 2.4.0 (default: the one torch_npu pins)",
    "torch_npu": "torch_npu version as on PyPI, e.g. 2.4.0.post2 (leave it out for a CANN-only image: CANN and "
                 "Python, no PyTorch, as the official CANN images are)",
    "torch_npu_wheel": "a torch_npu wheel of your own instead of PyPI's: {path: FILE.whl, sha256: HEX} or {url: URL, sha256: HEX} "
                       "(its version is torch_npu's; give torch: when the knowledge base does not know that version)",
    "cann_source": "installer | {image: REF@sha256:...} | {local: DIR}",
    "env": "environment manager: conda (default) or venv",
    "pip": "extra pinned pip packages, a list of name==version",
    "env_vars": "extra ENV for the image, a mapping NAME: value",
    "mirrors": "build-time mirrors: {pip_index: URL, apt: URL, conda_channel: URL, torch_index: URL, conda_installer: URL of a folder serving Miniforge's installer}",
    "sha256": "checksums for installer files the knowledge base lacks: {FILE: HEX}",
    "base_image": "override the OS base image, e.g. local/debian:12",
    "nnal": "true to install NNAL (the ATB library) after the chip's package, from CANN 8.0.RC3 on "
            "(with cann_source: {image: ...}: the base image ships it; the smoke test checks libatb.so)",
    "unlisted": "true for a CANN release (or driver) the knowledge base does not list yet (then give its installers' "
                "sha256 with cann_source: {local: DIR}, or cann_source: {image: REF@sha256:...})",
}
TOP_KEYS = ("image", "defaults", "cells")
DEPRECATED_DRIVER_KEY = "driver"  # min_driver's first name


# The Cell's fields derived from the others (set in its __post_init__): not inputs of anything.
DERIVED = ("tag", "cann_only", "ref")


@dataclass(frozen=True)
class Cell:
    """One image to build: a complete, validated combination of versions.

    ``fields`` maps each key to where it was written (the cell or ``defaults``),
    so a finding about ``torch_npu`` can point at the very line.
    """

    id: str
    image: str
    os: str
    arch: str
    chip: str
    cann: str
    driver: str
    firmware: Optional[str]
    python: str
    torch: str
    torch_npu: str
    product: str = ""                      # the product of the chip whose HDK numbering applies ("" for none)
    cann_source: str = "installer"
    cann_image: Optional[str] = None
    cann_local: Optional[str] = None
    env: str = "conda"
    pip: Tuple[str, ...] = ()
    env_vars: Tuple[Tuple[str, str], ...] = ()
    mirrors: Tuple[Tuple[str, str], ...] = ()
    sha256: Tuple[Tuple[str, str], ...] = ()
    base_image: Optional[str] = None
    unlisted: bool = False                 # a CANN release the knowledge base does not list, on purpose
    nnal: bool = False                     # NNAL (ATB) installed after the chip's package
    torch_npu_wheel: Optional[Tuple[str, str]] = None  # (path, sha256) of a wheel of the cell's own
    where: Optional[Location] = None
    path: str = field(default="", compare=False)  # where in the matrix (cells[3]): not part of what it is
    fields: Mapping[str, Tuple[str, Location]] = field(default_factory=dict, compare=False, hash=False)
    # derived once, when the cell is made (`DERIVED`: not part of what it is)
    tag: str = field(init=False, repr=False, compare=False)
    cann_only: bool = field(init=False, repr=False, compare=False)  # CANN and Python, no PyTorch: no torch_npu
    ref: str = field(init=False, repr=False, compare=False)         # release reference, ``image:tag``

    def __post_init__(self) -> None:
        object.__setattr__(self, "tag", self.id)
        object.__setattr__(self, "cann_only", not self.torch_npu)
        object.__setattr__(self, "ref", f"{self.image}:{self.id}")

    def locate(self, key: str) -> Tuple[str, Optional[Location]]:
        """Field path and location of ``key``; a key the cell did not write is located
        at the cell itself (``cells[3].driver`` at the cell's first line)."""
        written = "min_driver" if key == "driver" else key  # the Cell's driver is the matrix's min_driver
        return self.fields.get(key, (f"{self.path or self.id}.{written}", self.where))


@dataclass
class Matrix:
    """The cells of one or more matrix files, plus the schema findings met on the way."""

    cells: List[Cell]
    findings: List[Finding]
    files: List[str]
    refused: List[Cell] = field(default_factory=list)  # cells a rule refuses, left out of a run on other cells


# --- YAML with positions ------------------------------------------------------


@dataclass
class _Val:
    """A YAML value with the place it was written."""

    value: object  # str | list[_Val] | dict[str, _Val]
    where: Location
    key_where: Optional[Location] = None  # where its key was written, for values in a mapping


def _read(path: Path) -> str:
    try:
        info = path.stat()
        size = info.st_size
    except FileNotFoundError:
        raise UserError(f"matrix file not found: {path}",
                        fix="pass an existing file or folder with --matrix PATH") from None
    except OSError as exc:
        raise UserError(f"cannot read matrix file {path}: {exc.strerror}",
                        fix="check the path and its permissions") from exc
    if not stat.S_ISREG(info.st_mode):  # a FIFO would block forever, /dev/zero never end
        raise UserError(f"matrix file {path} is not a regular file", fix="pass a .yaml file or a folder of them")
    if size > MAX_BYTES:
        raise UserError(f"matrix file {path} is {size} bytes, over the {MAX_BYTES}-byte limit",
                        fix="split the matrix into several files in one folder")
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)  # the file may grow after the stat
        if len(data) > MAX_BYTES:
            raise UserError(f"matrix file {path} is over the {MAX_BYTES}-byte limit",
                            fix="split the matrix into several files in one folder")
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"matrix file {path} is not UTF-8 text", fix="save it as UTF-8") from None
    except OSError as exc:
        raise UserError(f"cannot read matrix file {path}: {exc.strerror}",
                        fix="check the path and its permissions") from exc


def _compose(text: str, name: str) -> Optional[_Val]:
    try:
        node = documents.compose_yaml(text, name)  # depth checked: `_convert` recurses once per level
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = Location(name, mark.line + 1, mark.column + 1) if mark else None
        raise UserError(f"YAML syntax error: {exc.problem or exc.context}", where=where,
                        fix="fix the YAML at that position (indentation, a missing ':' or quote)") from exc
    except yaml.YAMLError as exc:
        raise UserError(f"cannot parse {name}: {exc}", fix="fix the YAML syntax") from exc
    if node is None:
        return None
    return _convert(node, name, set())


def _convert(node: yaml.Node, name: str, seen: set) -> _Val:
    where = Location(name, node.start_mark.line + 1, node.start_mark.column + 1)
    if id(node) in seen:  # the same node twice means an alias: refuse before expanding
        raise UserError("YAML anchors and aliases are not supported in a matrix", where=where,
                        fix="write the value out, or put shared keys under 'defaults'")
    seen.add(id(node))
    if isinstance(node, yaml.ScalarNode):
        return _Val(node.value, where)
    if isinstance(node, yaml.SequenceNode):
        return _Val([_convert(n, name, seen) for n in node.value], where)
    out: Dict[str, _Val] = {}
    for key_node, value_node in node.value:
        if not isinstance(key_node, yaml.ScalarNode):
            raise UserError("mapping keys must be plain names", where=where)
        if key_node.tag == "tag:yaml.org,2002:merge":
            raise UserError("YAML merge keys (<<) are not supported in a matrix",
                            where=Location(name, key_node.start_mark.line + 1, key_node.start_mark.column + 1),
                            fix="put shared keys under 'defaults'")
        key = key_node.value
        if key in out:
            raise UserError(f"key '{key}' appears twice in one mapping",
                            where=Location(name, key_node.start_mark.line + 1, key_node.start_mark.column + 1),
                            fix="keep one of them")
        out[key] = _convert(value_node, name, seen)
        out[key].key_where = Location(name, key_node.start_mark.line + 1, key_node.start_mark.column + 1)
    return _Val(out, where)


# --- schema ---------------------------------------------------------------------

class _Collector:
    """Collects schema findings so a user sees every problem of a file at once."""

    def __init__(self) -> None:
        self.findings: List[Finding] = []

    def error(self, rule: str, message: str, fix: str, where: Location, path: str) -> None:
        self.findings.append(Finding(rule, "error", message, fix, where, path))

    def warning(self, rule: str, message: str, fix: str, where: Location, path: str) -> None:
        self.findings.append(Finding(rule, "warning", message, fix, where, path))

    def errors(self) -> int:
        return sum(f.severity == "error" for f in self.findings)


def _did_you_mean(key: str, choices) -> str:
    """The nearest choice, case aside first (``910B`` is ``910b``, not ``910``).

    Example:
        >>> _did_you_mean("910B", ("910", "910b", "a3"))
        "did you mean '910b'? "
        >>> _did_you_mean("Ubuntu22.4", ("ubuntu22.04", "debian12"))
        "did you mean 'ubuntu22.04'? "
    """
    folded = {c.casefold(): c for c in choices}
    close = difflib.get_close_matches(key.casefold(), list(folded), n=1, cutoff=0.6)
    return f"did you mean '{folded[close[0]]}'? " if close else ""


def _scalar(val: _Val, path: str, out: _Collector) -> Optional[str]:
    if isinstance(val.value, str):
        return val.value
    out.error("schema-type", f"{path} must be a single value, not a {'list' if isinstance(val.value, list) else 'mapping'}",
              f"write {path}: VALUE", val.where, path)
    return None


def _check(val: _Val, path: str, pattern: "re.Pattern[str]", what: str, out: _Collector) -> Optional[str]:
    text = _scalar(val, path, out)
    if text is None:
        return None
    if not pattern.fullmatch(text):
        shown = _USERINFO.sub(r"\1***@", text)  # a URL's user:password is never echoed, not even a refused one
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        out.error("schema-value", f"{path} = {shown!r} is not a valid {what}",
                  f"use only the characters of a {what}; quotes, spaces, newlines, '$' and backslashes are never allowed",
                  val.where, path)
        return None
    return text


def _choice(val: _Val, path: str, choices, out: _Collector) -> Optional[str]:
    text = _scalar(val, path, out)
    if text is None:
        return None
    if text not in choices:
        out.error("schema-value", f"{path} = {text!r} is not one of: {', '.join(choices)}",
                  f"{_did_you_mean(text, choices)}use one of the listed values", val.where, path)
        return None
    return text


def _mapping(val: _Val, path: str, out: _Collector) -> Optional[Dict[str, _Val]]:
    if isinstance(val.value, dict):
        return val.value
    out.error("schema-type", f"{path} must be a mapping (KEY: value lines)", f"write {path}: followed by indented KEY: value lines",
              val.where, path)
    return None


def _string_list(val: _Val, path: str, pattern, what: str, out: _Collector) -> Optional[Tuple[str, ...]]:
    if not isinstance(val.value, list):
        out.error("schema-type", f"{path} must be a list", f"write {path}: [a, b]", val.where, path)
        return None
    items = [_check(v, f"{path}[{i}]", pattern, what, out) for i, v in enumerate(val.value)]
    return None if None in items else tuple(items)  # type: ignore[arg-type]


def _pins_pip_reads(val: _Val, path: str, pins: Optional[Tuple[str, ...]], out: _Collector) -> Optional[Tuple[str, ...]]:
    """A pin the pattern lets through must also be one pip reads: a PEP 508 name and a
    PEP 440 version (``six==latest`` or ``a-==1.0`` are not)."""
    if pins is None:
        return None
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion, Version

    for i, pin in enumerate(pins):
        try:
            Requirement(pin)
            Version(pin.split("==", 1)[1])
        except (InvalidRequirement, InvalidVersion) as exc:
            where = val.value[i].where if isinstance(val.value, list) else val.where
            out.error("schema-value", f"{path}[{i}]: {pin!r} is not a pin pip can read ({str(exc).splitlines()[0]})",
                      "write name==version with a PEP 440 version, e.g. einops==0.8.0", where, f"{path}[{i}]")
            return None
    return pins


def _pairs(val: _Val, path: str, key_pattern, value_pattern, what: str, out: _Collector,
           keys: Optional[Tuple[str, ...]] = None) -> Optional[Tuple[Tuple[str, str], ...]]:
    mapping = _mapping(val, path, out)
    if mapping is None:
        return None
    pairs = []
    for key, item in mapping.items():
        sub = f"{path}.{key}"
        if keys is not None and key not in keys:
            out.error("schema-unknown-key", f"unknown key {sub}", f"{_did_you_mean(key, keys)}allowed: {', '.join(keys)}",
                      item.key_where or item.where, sub)
            continue
        if not key_pattern.fullmatch(key):
            out.error("schema-value", f"{sub}: {key!r} is not a valid name", "use letters, digits and '_'", item.key_where or item.where, sub)
            continue
        text = _check(item, sub, value_pattern, what, out)
        if text is not None:
            pairs.append((key, text))
    return tuple(sorted(pairs))


def _cann_source(val: _Val, path: str, out: _Collector) -> Optional[Tuple[str, Optional[str], Optional[str]]]:
    if isinstance(val.value, str):
        if val.value == "installer":
            return ("installer", None, None)
        out.error("schema-value", f"{path} = {val.value!r} is not a CANN source",
                  "write 'installer', '{image: REF@sha256:DIGEST}' or '{local: DIR}'", val.where, path)
        return None
    mapping = _mapping(val, path, out)
    if mapping is None:
        return None
    if len(mapping) != 1 or next(iter(mapping)) not in ("image", "local"):
        out.error("schema-value", f"{path} must have exactly one key, image or local",
                  "write '{image: REF@sha256:DIGEST}' or '{local: DIR}'", val.where, path)
        return None
    kind, item = next(iter(mapping.items()))
    if kind == "image":
        ref = _check(item, f"{path}.image", _IMAGE_REF, "image reference", out)
        return None if ref is None else ("image", ref, None)
    local = _check(item, f"{path}.local", _PATH, "folder path", out)
    return None if local is None else ("local", None, local)


def _own_wheel(val: _Val, path: str, out: _Collector) -> Optional[Tuple[str, str]]:
    pairs = _mapping(val, path, out)
    if pairs is None:
        return None
    if sorted(pairs) not in (["path", "sha256"], ["sha256", "url"]):
        out.error("schema-value", f"{path} must have the keys path (or url) and sha256",
                  "write {path: FILE.whl, sha256: HEX} or {url: https://.../FILE.whl, sha256: HEX}", val.where, path)
        return None
    key = "url" if "url" in pairs else "path"
    file = _check(pairs[key], f"{path}.{key}", _URL if key == "url" else _PATH,
                  "http(s) URL" if key == "url" else "file path", out)
    sha256 = _check(pairs["sha256"], f"{path}.sha256", _SHA256, "sha256 (64 lower-case hex digits)", out)
    if file is not None and not own_wheel.file_name(file).endswith(".whl"):
        out.error("schema-value", f"{path}.{key} = {file!r} is not a wheel", "name a .whl file",
                  pairs[key].where, f"{path}.{key}")
        return None
    return None if file is None or sha256 is None else (file, sha256)


def _parse_fields(raw: Dict[str, _Val], path: str, out: _Collector) -> Dict[str, Tuple[object, str, Location]]:
    """Validate one mapping of cell keys; returns key -> (value, field path, location)."""
    parsed: Dict[str, Tuple[object, str, Location]] = {}
    if DEPRECATED_DRIVER_KEY in raw and "min_driver" in raw:
        val = raw[DEPRECATED_DRIVER_KEY]
        out.error("schema-value", f"{path} gives both min_driver and driver (its old name)",
                  "keep min_driver only", val.key_where or val.where, f"{path}.driver")
    for key, val in raw.items():
        sub = f"{path}.{key}"
        if key == DEPRECATED_DRIVER_KEY:  # the old name of min_driver: still read, with a warning
            out.warning("driver-key-renamed", f"{sub} is the old name of min_driver: the oldest driver the "
                        "image declares it runs on (its min-driver label), not the driver of your nodes",
                        "rename it to min_driver: (driver: is still read, for now)", val.key_where or val.where, sub)
            key = "min_driver"
        if key not in CELL_KEYS:
            out.error("schema-unknown-key", f"unknown key {sub}",
                      f"{_did_you_mean(key, CELL_KEYS)}known keys: {', '.join(CELL_KEYS)}", val.key_where or val.where, sub)
            continue
        value: object
        if key in ("arch", "chip"):
            choices = ARCHS if key == "arch" else CHIPS
            items = val.value if isinstance(val.value, list) else [val]
            if not items:
                out.error("schema-value", f"{sub} is an empty list", f"give at least one of: {', '.join(choices)}", val.where, sub)
                continue
            value = tuple(_choice(v, sub if v is val else f"{sub}[{i}]", choices, out) for i, v in enumerate(items))
            if None in value:
                continue
        elif key == "os":
            value = _choice(val, sub, OS_IDS, out)
        elif key == "product":
            from builder import knowledge

            value = _choice(val, sub, tuple(p.id for p in knowledge.load().drivers.products()), out)
        elif key == "env":
            value = _choice(val, sub, ENV_MANAGERS, out)
        elif key == "name":
            value = _check(val, sub, _NAME, "cell name (lower-case letters, digits, '.', '_', '-')", out)
        elif key == "python":
            value = _check(val, sub, _PYTHON, "Python version (3.X or 3.X.Y, quoted)", out)
        elif key in ("cann", "min_driver", "firmware", "torch", "torch_npu"):
            value = _check(val, sub, _VERSION, "version", out)
        elif key == "base_image":
            value = _check(val, sub, _IMAGE_REF, "image reference", out)
        elif key == "cann_source":
            value = _cann_source(val, sub, out)
        elif key == "torch_npu_wheel":
            value = _own_wheel(val, sub, out)
        elif key in ("unlisted", "nnal"):
            choice = _choice(val, sub, ("true", "false"), out)
            value = None if choice is None else choice == "true"
        elif key == "pip":
            value = _string_list(val, sub, _PIP_PIN, "exact pin name==version", out)
            value = _pins_pip_reads(val, sub, value, out)
        elif key == "env_vars":
            value = _pairs(val, sub, _ENV_NAME, _ENV_VALUE, "environment value", out)
        elif key == "mirrors":
            value = _pairs(val, sub, _ENV_NAME, _URL, "http(s) URL", out, keys=MIRROR_KEYS)
        else:  # sha256
            value = _pairs(val, sub, _FILE_NAME, _SHA256, "sha256 (64 lower-case hex digits)", out)
        if value is not None:  # min_driver is the Cell's driver (and where findings about it point)
            parsed["driver" if key == "min_driver" else key] = (value, sub, val.where)
    return parsed


_MERGED = ("env_vars", "mirrors", "sha256")  # mappings: cell keys override defaults key by key


def _merge(defaults: Dict, cell: Dict) -> Dict:
    merged = dict(defaults)
    for key, item in cell.items():
        if key in _MERGED and key in defaults:
            combined = dict(defaults[key][0])
            combined.update(dict(item[0]))
            merged[key] = (tuple(sorted(combined.items())), item[1], item[2])
        else:
            merged[key] = item
    return merged


def derive_id(cann: str, chip: str, os_id: str, python: str, torch_npu: str, arch: str, product: str = "") -> str:
    """The default cell id, which is also its image tag; a cell's product follows its chip.

    >>> derive_id("7.0.RC1", "910b", "ubuntu22.04", "3.9", "2.1.0rc1", "aarch64")
    'cann7.0.rc1-910b-ubuntu22.04-py3.9-torch_npu2.1.0rc1-aarch64'
    >>> derive_id("8.5.0", "a3", "ubuntu22.04", "3.11", "", "x86_64")   # CANN-only
    'cann8.5.0-a3-ubuntu22.04-py3.11-x86_64'
    >>> derive_id("9.1.0", "950", "ubuntu22.04", "3.11", "", "aarch64", "atlas-350")
    'cann9.1.0-950-atlas-350-ubuntu22.04-py3.11-aarch64'
    """
    framework = f"-torch_npu{torch_npu}" if torch_npu else ""
    target = f"{chip}-{product}" if product else chip
    return f"cann{cann}-{target}-{os_id}-py{python}{framework}-{arch}".lower().replace("+", "_")


def _cells_of(doc: _Val, name: str, out: _Collector) -> Iterator[Cell]:
    top = _mapping(doc, "(top level)", out)
    if top is None:
        return
    for key, val in top.items():
        if key not in TOP_KEYS:
            out.error("schema-unknown-key", f"unknown top-level key '{key}'",
                      f"{_did_you_mean(key, TOP_KEYS)}allowed: {', '.join(TOP_KEYS)}", val.key_where or val.where, key)
    image = DEFAULT_IMAGE
    if "image" in top:
        image = _check(top["image"], "image", _REPOSITORY, "image repository (no tag)", out) or DEFAULT_IMAGE
    defaults: Dict = {}
    if "defaults" in top:
        raw = _mapping(top["defaults"], "defaults", out)
        if raw is not None:
            defaults = _parse_fields(raw, "defaults", out)
            if "name" in defaults:
                out.error("schema-value", "defaults.name would give every cell the same id",
                          "set name on single cells only", defaults["name"][2], "defaults.name")
                del defaults["name"]
    if "cells" not in top:
        out.error("schema-missing", "the matrix has no 'cells' list", "add 'cells:' with at least one cell",
                  doc.where, "cells")
        return
    cells_val = top["cells"]
    if not isinstance(cells_val.value, list):
        out.error("schema-type", "'cells' must be a list", "write each cell as a '- key: value' item",
                  cells_val.where, "cells")
        return
    if not cells_val.value:  # as an empty file is: a matrix that builds nothing is a mistake, not "0 cells valid"
        out.error("schema-value", "'cells' is an empty list", "add at least one cell", cells_val.where, "cells")
        return
    for index, item in enumerate(cells_val.value):
        path = f"cells[{index}]"
        raw = _mapping(item, path, out)
        if raw is None:
            continue
        before = out.errors()
        fields = _merge(defaults, _parse_fields(raw, path, out))
        if out.errors() > before:
            continue
        yield from _expand(fields, image, item.where, path, out)


REQUIRED = ("os", "arch", "chip", "cann", "python")
# What only a cell with torch_npu can have (a CANN-only cell has no PyTorch).
NEEDS_TORCH_NPU = ("torch", "torch_npu_wheel")


def _expand(fields: Dict, image: str, where: Location, path: str, out: _Collector) -> Iterator[Cell]:
    missing = [k for k in REQUIRED if k not in fields]
    if missing:
        out.error("schema-missing", f"{path} lacks {', '.join(missing)}",
                  "give them in the cell or under 'defaults' (" + "; ".join(f"{k}: {CELL_KEYS[k]}" for k in missing) + ")",
                  where, path)
        return
    orphans = [k for k in NEEDS_TORCH_NPU if k in fields and "torch_npu" not in fields]
    if orphans:
        key = orphans[0]
        out.error("schema-value", f"{fields[key][1]} is given but torch_npu is not: a CANN-only cell has no PyTorch",
                  f"add torch_npu: VERSION, or drop {', '.join(orphans)} for a CANN-only image", fields[key][2], fields[key][1])
        return
    arches, chips = fields["arch"][0], fields["chip"][0]
    source = fields.get("cann_source", (("installer", None, None),))[0]
    for arch, chip in itertools.product(arches, chips):
        name = fields.get("name", (None,))[0]
        if name and len(arches) * len(chips) > 1:
            name = f"{name}-{chip}-{arch}"
        value = {k: v[0] for k, v in fields.items()}
        cell_id = name or derive_id(value["cann"], chip, value["os"], value["python"], value.get("torch_npu", ""), arch,
                                    value.get("product", ""))
        yield Cell(
            id=cell_id, image=image, os=value["os"], arch=arch, chip=chip, cann=value["cann"],
            driver=value.get("driver", ""), firmware=value.get("firmware"), python=value["python"],
            torch=value.get("torch", ""), torch_npu=value.get("torch_npu", ""), product=value.get("product", ""),
            cann_source=source[0], cann_image=source[1], cann_local=source[2],
            env=value.get("env", "conda"), pip=value.get("pip", ()), env_vars=value.get("env_vars", ()),
            mirrors=value.get("mirrors", ()), sha256=value.get("sha256", ()), base_image=value.get("base_image"),
            unlisted=value.get("unlisted", False), nnal=value.get("nnal", False),
            torch_npu_wheel=value.get("torch_npu_wheel"), where=where, path=path,
            fields={k: (v[1], v[2]) for k, v in fields.items()},
        )


def _files(path: Path) -> List[Path]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
        if not files:
            raise UserError(f"no .yaml matrix files in folder {path}", fix="add a matrix file or point --matrix at one")
        return files
    return [path]


def load(path: Path) -> Matrix:
    """Read a matrix file (or every ``*.yaml`` in a folder) into cells.

    Schema problems come back as findings (all of them, each with file:line:col);
    unreadable files and YAML syntax errors raise `UserError`. Versions the user
    left out (torch, driver, firmware) are filled in by `complete`.

    Example:
        >>> m = load(Path("matrix"))               # doctest: +SKIP
        >>> [c.id for c in m.cells][:1]            # doctest: +SKIP
        ['cann7.0.rc1-910b-ubuntu22.04-py3.9-torch_npu2.1.0rc1-aarch64']
    """
    out = _Collector()
    cells: List[Cell] = []
    files = _files(path)
    for file in files:
        doc = _compose(_read(file), str(file))
        if doc is None:
            out.error("schema-missing", "the matrix file is empty", "add 'cells:' with at least one cell",
                      Location(str(file), 1, 1), "")
            continue
        cells.extend(_cells_of(doc, str(file), out))
    return Matrix([complete(c) for c in cells], out.findings, [str(f) for f in files])


def complete(cell: Cell) -> Cell:
    """Fill in what the knowledge base implies and the cell did not say.

    torch follows from torch_npu's pin, the minimum driver from the CANN release (on the
    cell's product, where the release numbers its HDK per product), the minimum firmware from the firmware shipped with that driver for the chip.
    Values the knowledge base does not know stay empty; `checks` reports them.
    """
    from builder import knowledge

    kb = knowledge.load()
    updates: Dict[str, Any] = {}  # Any: replace(**updates) cannot tell which field each key is
    if not cell.torch:
        release = kb.releases.torch_npu(cell.torch_npu)
        if release is not None:
            updates["torch"] = release.torch
    if not cell.driver:
        driver = kb.drivers.min_driver(cell.cann, cell.product)
        if driver:
            updates["driver"] = driver
    if cell.firmware is None:
        firmware = kb.drivers.paired_firmware(updates.get("driver", cell.driver), cell.chip)
        if firmware:
            updates["firmware"] = firmware
    return replace(cell, **updates) if updates else cell


def select(cells: List[Cell], cann: Optional[str] = None, chip: Optional[str] = None, arch: Optional[str] = None,
           cell_id: Optional[str] = None, arch_defaulted: bool = False) -> List[Cell]:
    """The cells matching every given filter (CANN compared as versions: 8.0.rc3 is 8.0.RC3).

    Example:
        >>> [c.id for c in select(load(Path("matrix")).cells, cann="7.0.rc1", arch="x86_64")]   # doctest: +SKIP
        ['cann7.0.rc1-910b-ubuntu22.04-py3.9-torch_npu2.1.0rc1-x86_64']
    """
    from builder import versions

    wanted = versions.cann(cann) if cann else None
    fitting = [c for c in cells
               if (wanted is None or versions.cann(c.cann) == wanted)
               and (not chip or c.chip == chip.lower()) and (not cell_id or c.id == cell_id)]
    chosen = [c for c in fitting if not arch or c.arch == arch]
    if not chosen:
        elsewhere = sorted({c.arch for c in fitting})
        if arch_defaulted and elsewhere:  # another arch builds here too: emulated by qemu
            raise UserError(f"no cell of the selection is for this host's arch {arch} (--arch defaults to it); "
                            f"the selection has {', '.join(elsewhere)}", exit_code=1,
                            fix=f"add --arch {elsewhere[0]}: another arch is built and smoke-tested under qemu "
                                "on this host (slower), or on a host of that arch")
        raise UserError("no cell of the matrix matches the selection",
                        fix=f"check --cann/--chip/--arch/--cell against {commands.suggest('list')}", exit_code=1)
    return chosen
