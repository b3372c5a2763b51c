"""A team's additions to the knowledge base: ``ascend-build/knowledge.yaml`` in the folder a command runs in.

A torch_npu or CANN release the installed package does not know yet goes there, by hand or by
``ascend-build releases check --write``, in the shape of the packaged ``ascend-compat.yaml``:
a ``torch_npu_releases.items`` list and a ``cann_hdk.releases`` list, each entry written as that
file writes one. `merge` lays them on top of the packaged data before the knowledge base is built.
An entry for a release the package knows is left out: the package's entry, with its published
sources, wins, and the entry is named as superseded (``ascend-build kb`` lists them, to delete).

Example:
    >>> packaged = {"torch_npu_releases": {"items": [{"version": "2.4.0", "torch": "2.4.0"}]},
    ...             "cann_hdk": {"releases": [{"version": "8.0.RC3"}]}}
    >>> team = {"torch_npu_releases": {"items": [{"version": "2.4.0", "torch": "2.4.0"},
    ...                                          {"version": "2.99.0", "torch": "2.99.0"}]}}
    >>> compat, added = merge(packaged, team, "ascend-build/knowledge.yaml")
    >>> [i["version"] for i in compat["torch_npu_releases"]["items"]], added.torch_npu, added.superseded
    (['2.4.0', '2.99.0'], ('2.99.0',), ('torch_npu 2.4.0',))
    >>> [i["version"] for i in packaged["torch_npu_releases"]["items"]]    # the packaged data is not changed
    ['2.4.0']
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

import yaml

from builder import bounded, documents, versions
from builder.errors import UserError
from builder.knowledge.files import ADDITIONS_FILE

# What `ascend-build init` writes as the file (builder/scaffold.py), and a first `--write` starts from.
STARTER = Path(__file__).resolve().parent.parent / "templates" / "project" / "knowledge.yaml"
FILE_LIMIT = 4 << 20  # the packaged ascend-compat.yaml, every release of it, is under 200 KiB
# (top-level key, its list, the version kind of an entry, what an entry must name besides its version)
LISTS: Tuple[Tuple[str, str, str, Tuple[str, ...]], ...] = (
    ("torch_npu_releases", "items", "python_package", ("torch",)),
    ("cann_hdk", "releases", "cann", ()),
)
_WHAT = {"torch_npu_releases": "torch_npu", "cann_hdk": "CANN"}


@dataclass(frozen=True)
class Additions:
    """What a project's additions file brought: the releases it added, and those the package knows too."""

    path: str
    torch_npu: Tuple[str, ...]
    cann: Tuple[str, ...]
    superseded: Tuple[str, ...]  # "torch_npu 2.4.0", "CANN 8.0.RC3": entries the packaged data has too


def stamp(path: Path = ADDITIONS_FILE) -> Optional[Tuple[str, int, int]]:
    """(resolved path, mtime, size) of the additions file, None when there is none: what the
    knowledge base is cached under, so a file written during a run is read again."""
    try:
        found = path.stat()
        return str(path.resolve()), found.st_mtime_ns, found.st_size
    except OSError:
        return None


def read(path: Path = ADDITIONS_FILE) -> Dict[str, Any]:
    """The additions file as a mapping, checked: only the two lists, each entry with a version that
    parses and what the knowledge base needs of it. A UserError names the file and the entry."""
    try:
        data = bounded.read_file(path, FILE_LIMIT + 1)
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}", exit_code=2,
                        fix="make it a readable YAML file, or remove it") from None
    if len(data) > FILE_LIMIT:
        raise UserError(f"{path} is larger than {FILE_LIMIT} bytes", exit_code=2,
                        fix="keep only your additions in it: the packaged knowledge base is read as well")
    try:
        doc = documents.load_yaml(data.decode("utf-8"), str(path))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise UserError(f"{path} is not valid YAML: {exc}", exit_code=2, fix="repair the file, or remove it") from None
    return check(doc if doc is not None else {}, path)


def check(doc: Any, path: Path) -> Dict[str, Any]:
    """``doc``, the additions file ``path`` holds, when it is one (see `read`); else a UserError."""
    if not isinstance(doc, dict):
        raise UserError(f"{path} is not a mapping", exit_code=2,
                        fix="write torch_npu_releases: {items: [...]} and/or cann_hdk: {releases: [...]}")
    known = {key for key, *_ in LISTS}
    unknown = sorted(str(k) for k in doc if k not in known)
    if unknown:
        raise UserError(f"{path}: {', '.join(unknown)} is no key an additions file holds", exit_code=2,
                        fix="keep torch_npu_releases (items) and cann_hdk (releases): the other facts come with the package")
    for key, name, kind, needs in LISTS:
        _check_list(doc, key, name, kind, needs, path)
    return doc


def _check_list(doc: Mapping[str, Any], key: str, name: str, kind: str, needs: Tuple[str, ...], path: Path) -> None:
    if key not in doc:
        return
    block = doc[key]
    entries = block.get(name) if isinstance(block, dict) else None
    if not isinstance(block, dict) or set(block) - {name, "note"} or not isinstance(entries, list):
        raise UserError(f"{path}: {key} is not a mapping with one list, {name}", exit_code=2,
                        fix=f"write `{key}:` holding a `{name}:` list of `- version: ...` entries")
    for i, entry in enumerate(entries):
        where = f"{path}: {key}.{name}[{i}]"
        if not isinstance(entry, dict):
            raise UserError(f"{where} is not a mapping", exit_code=2, fix="write each entry as `- version: ...` and its keys")
        if versions.lenient(kind, entry.get("version")) is None:
            raise UserError(f"{where}.version {str(entry.get('version'))[:40]!r} is no {_WHAT[key]} version", exit_code=2,
                            fix="correct the entry's version")
        missing = [k for k in needs if not entry.get(k)]
        if missing:
            raise UserError(f"{where} ({entry['version']}) lacks {', '.join(missing)}", exit_code=2,
                            fix="write the entry as `ascend-build releases check --write` does, or let it write it")


def merge(packaged: Mapping[str, Any], team: Mapping[str, Any], path: str) -> Tuple[Dict[str, Any], Additions]:
    """The packaged ``ascend-compat.yaml`` document with ``team``'s entries added (a new document;
    neither input is changed), and what was added."""
    compat = dict(packaged)
    added: Dict[str, List[str]] = {}
    superseded: List[str] = []
    for key, name, kind, _needs in LISTS:
        entries = (team.get(key) or {}).get(name) or []
        if not entries:
            continue
        block = dict(compat.get(key) or {})
        have = {versions.lenient(kind, e.get("version")) for e in block.get(name) or ()}
        fresh = []
        for entry in entries:
            version = versions.lenient(kind, entry.get("version"))
            if version in have:
                superseded.append(f"{_WHAT[key]} {entry['version']}")
            else:
                have.add(version)
                fresh.append(entry)
        block[name] = [*(block.get(name) or ()), *fresh]
        compat[key] = block
        added[key] = [str(e["version"]) for e in fresh]
    return compat, Additions(path, tuple(added.get("torch_npu_releases", ())), tuple(added.get("cann_hdk", ())),
                             tuple(superseded))
