"""``write``: insert new entries into ascend-compat.yaml as text, so every other byte of the file stays as it was.

Why text and not a YAML dump of the updated document: a dump would drop the file's
comments and hand-kept layout.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import yaml
from packaging.version import Version

from builder import documents, knowledge
from builder.errors import UserError
from builder.knowledge import additions as team_additions
from builder.knowledge.files import read_yaml
from builder.releases.release_check import ReleaseCheck
from builder.releases.wheel_names import normal_version, pep440
from builder.releases.yaml_files import node_at, read_bytes, replace_file


def write(result: ReleaseCheck, data_path: Optional[Path] = None, additions: bool = False) -> List[str]:
    """Insert the new entries into ``torch_npu_releases.items``, in version order; the versions written.

    The rest of the file keeps its bytes: the entries are dumped as YAML text and
    inserted before the first item with a higher version (after the last item
    otherwise). Before the file is replaced (atomically, temp file + os.replace), the
    new text must parse to the old document plus exactly those entries, and a
    knowledge base built from it must see each new version with ``cann`` None; after,
    the file is read back and checked again, and any failure restores the original
    bytes. Versions the file already lists are left alone.

    With ``additions``, ``data_path`` is a project's additions file (`builder.knowledge.additions`),
    laid over the packaged data: it is made when missing (as `ascend-build init` makes it), given a
    ``torch_npu_releases.items`` list at its end when it has none, and the knowledge base that must
    read the entries back is the packaged one with the file on top.

    Example:
        >>> write(check("http://127.0.0.1:8080/simple/"), Path("/tmp/ascend-compat.yaml"))   # doctest: +SKIP
        ['2.15.0']
    """
    path = Path(data_path) if data_path else knowledge.DATA_DIR / "ascend-compat.yaml"
    original = read_bytes(path) if path.exists() or not additions else None
    text = original.decode("utf-8") if original is not None else ""
    old_doc = _parse(text, path, additions)
    have = {normal_version(str(i.get("version"))) for i in old_doc["torch_npu_releases"]["items"]}
    entries = [copy.deepcopy(r.entry) for r in result.new if normal_version(r.version) not in have]
    if not entries:
        return []
    new_text = _first_entries(text, entries) if additions and not _lists_releases(text) else \
        insert_entries(text, entries, path)
    _verify(old_doc, new_text, entries, path, additions)
    if original is None:
        path.parent.mkdir(parents=True, exist_ok=True)
    replace_file(path, new_text.encode("utf-8"), expect=original)
    try:
        _verify(old_doc, read_bytes(path).decode("utf-8"), entries, path, additions)
    except Exception:
        if original is None:
            path.unlink(missing_ok=True)
        else:
            replace_file(path, original, expect=original, check=False)
        raise
    return [str(e["version"]) for e in entries]


def _lists_releases(text: str) -> bool:
    """Whether the file has a ``torch_npu_releases`` key (of any shape: `insert_entries` refuses a wrong one)."""
    return any(line.startswith("torch_npu_releases") for line in text.splitlines())


def _first_entries(text: str, entries: Sequence[Mapping[str, Any]]) -> str:
    """An additions file's ``text`` (what `ascend-build init` writes, when there is none), ending in a
    ``torch_npu_releases.items`` list that holds ``entries``."""
    head = text if text.strip() else team_additions.STARTER.read_text(encoding="utf-8")
    block = "".join(_dump_item(e, 2, "\n") for e in sorted(entries, key=lambda e: Version(str(e["version"]))))
    return head + ("" if head.endswith("\n") else "\n") + "torch_npu_releases:\n  items:\n" + block


def insert_entries(text: str, entries: Sequence[Mapping[str, Any]], path: Path) -> str:
    """``text`` with each entry dumped in place among ``torch_npu_releases.items`` (sorted by version)."""
    items, end_line = _items_layout(text, path)
    lines = text.splitlines(keepends=True)
    newline = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    dash = items[0][2] if items else 2
    inserts: Dict[int, List[Mapping[str, Any]]] = {}
    for entry in sorted(entries, key=lambda e: Version(str(e["version"]))):
        version = Version(str(entry["version"]))
        at = next((line for v, line, _ in items if v is not None and v > version), end_line)
        inserts.setdefault(at, []).append(entry)
    for at in sorted(inserts, reverse=True):
        block = "".join(_dump_item(e, dash, newline) for e in inserts[at])
        if at > 0 and at == len(lines) and not lines[-1].endswith("\n"):
            lines[-1] += newline
        lines[at:at] = [block]
    return "".join(lines)


def _items_layout(text: str, path: Path) -> Tuple[List[Tuple[Optional[Version], int, int]], int]:
    """Per existing item (version, line its ``- `` sits on, its column); and the line after the last item."""
    try:
        root = documents.compose_yaml(text, str(path), exit_code=1)
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML ({exc})", fix="repair the file before adding releases", exit_code=1) from exc
    seq = node_at(root, ("torch_npu_releases", "items"))
    if not isinstance(seq, yaml.SequenceNode) or seq.flow_style:
        raise UserError(f"{path}: torch_npu_releases.items is not a block list", exit_code=1,
                        fix="keep torch_npu_releases.items as a '- version: ...' list")
    lines = text.splitlines()
    items = []
    for node in seq.value:
        line = node.start_mark.line
        while line > 0 and not lines[line].lstrip().startswith("-"):
            line -= 1
        line = _above_comments(lines, line)
        items.append((_node_version(node), line, lines[line].index("-") if "-" in lines[line] else 2))
    if not items:
        return [], seq.end_mark.line + (1 if seq.end_mark.column else 0)
    end = seq.value[-1].end_mark.line + (1 if seq.value[-1].end_mark.column else 0)
    while end > 0 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
        end -= 1  # blank lines and comments above the next key belong to that key
    return items, end


def _above_comments(lines: List[str], line: int) -> int:
    """Move up over comment lines directly above an item: they describe it."""
    while line > 0 and lines[line - 1].lstrip().startswith("#"):
        line -= 1
    return line


def _node_version(node: Any) -> Optional[Version]:
    value = node_at(node, ("version",))
    return pep440(str(value.value)) if isinstance(value, yaml.ScalarNode) else None


def _dump_item(entry: Mapping[str, Any], dash: int, newline: str) -> str:
    text = yaml.safe_dump([dict(entry)], default_flow_style=False, sort_keys=False, allow_unicode=True, width=4096)
    return "".join(" " * dash + line + newline for line in text.splitlines())


def _verify(old_doc: Mapping[str, Any], new_text: str, entries: Sequence[Mapping[str, Any]], path: Path,
            additions: bool = False) -> None:
    """The new text is the old document plus exactly ``entries``, sorted, and the KB reads them with cann None."""
    new_doc = _parse(new_text, path, additions)
    items = new_doc["torch_npu_releases"]["items"]
    added = {normal_version(str(e["version"])) for e in entries}
    kept = [i for i in items if normal_version(str(i.get("version"))) not in added]
    rest_new = {k: v for k, v in new_doc.items() if k != "torch_npu_releases"}
    rest_old = {k: v for k, v in old_doc.items() if k != "torch_npu_releases"}
    problems = []
    if kept != old_doc["torch_npu_releases"]["items"] or rest_new != rest_old:
        problems.append("the existing data changed")
    if len(items) != len(kept) + len(entries):
        problems.append("the new entries did not land in torch_npu_releases.items")
    order = [Version(str(i["version"])) for i in items]
    if order != sorted(order):
        problems.append("the items are out of version order")
    kb = _kb_over(new_doc, path) if additions else _kb_from(new_doc, path.parent)
    for entry in entries:
        rel = kb.releases.torch_npu(str(entry["version"]))
        if rel is None or rel.cann is not None:
            problems.append(f"the knowledge base does not read {entry['version']} back with cann null")
    if problems:
        raise UserError(f"{path}: adding {', '.join(sorted(added))} went wrong: {'; '.join(problems)}",
                        fix="the file was left as it was; report this with the file attached", exit_code=1)


def _kb_from(compat: Mapping[str, Any], folder: Path) -> knowledge.KnowledgeBase:
    """A KnowledgeBase built like ``knowledge.load()``, from the sibling data files when present."""
    def doc(name: str) -> Dict[str, Any]:
        path = folder / name if (folder / name).exists() else knowledge.DATA_DIR / name
        read = documents.load_json if name.endswith(".json") else documents.load_yaml
        return read(path.read_text(encoding="utf-8"), str(path), exit_code=1) or {}
    return knowledge.KnowledgeBase(compat=compat, packages=doc("cann-packages.json"),
                                   os_doc=doc("os.yaml"), conda_doc=doc("conda.yaml"),
                                   downloads_doc=doc("cann-downloads.yaml"), tables_doc=doc(knowledge.TABLES_FILE),
                                   mindcluster_doc=doc("mindcluster-tables.yaml"))


def _kb_over(team: Mapping[str, Any], path: Path) -> knowledge.KnowledgeBase:
    """The knowledge base of the packaged data with the additions ``team`` on top."""
    compat, _ = team_additions.merge(read_yaml(knowledge.DATA_DIR / "ascend-compat.yaml"),
                                     team_additions.check(team, path), str(path))
    return _kb_from(compat, knowledge.DATA_DIR)


def _parse(text: str, path: Path, additions: bool = False) -> Dict[str, Any]:
    try:
        doc = documents.load_yaml(text, str(path), exit_code=1)
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML ({exc})", fix="repair the file before adding releases", exit_code=1) from exc
    if additions:  # a project's file: no torch_npu_releases yet is an empty list
        doc = doc if doc is not None else {}
        if isinstance(doc, dict) and doc.get("torch_npu_releases") is None:
            doc = {**doc, "torch_npu_releases": {"items": []}}
        elif isinstance(doc, dict) and isinstance(doc["torch_npu_releases"], dict) \
                and doc["torch_npu_releases"].get("items") is None:
            doc = {**doc, "torch_npu_releases": {**doc["torch_npu_releases"], "items": []}}
    if not isinstance(doc, dict) or not isinstance((doc.get("torch_npu_releases") or {}).get("items"), list):
        raise UserError(f"{path}: no torch_npu_releases.items list", exit_code=1,
                        fix="point at builder/data/ascend-compat.yaml or a copy of it")
    for i, item in enumerate(doc["torch_npu_releases"]["items"]):  # they are ordered and compared by version
        version = str(item.get("version") if isinstance(item, dict) else item)
        if pep440(version) is None:
            raise UserError(f"{path}: torch_npu_releases.items[{i}].version {version[:40]!r} is not a PEP 440 version",
                            exit_code=1, fix="correct that entry before adding releases")
    return doc
