"""``propose``: draft matrix cells for new releases, each with a CANN guess marked TODO."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Optional, Sequence, Tuple

import yaml
from packaging.version import Version

from builder import documents, knowledge, project, versions
from builder.errors import UserError
from builder.releases.release_check import NewRelease, ReleaseCheck
from builder.releases.wheel_names import glibc_key, normal_version, python_key
from builder.releases.yaml_files import node_at, read_bytes, replace_file

# In a subfolder: matrix/*.yaml is the live matrix, and a draft cell with an
# unconfirmed CANN pairing must not be built until a human moves it there.
PROPOSAL_NAME = "proposed/torch_npu.yaml"
_OS_PREFERENCE = ("ubuntu22.04", "ubuntu24.04", "openeuler24.03", "debian12", "openeuler22.03", "ubuntu20.04")


def default_proposal_path() -> Path:
    """``./matrix/proposed/torch_npu.yaml`` of the project the command runs in (a UserError when
    the current folder has no matrix/: never beside the installed package)."""
    return project.proposals_folder("releases check --propose") / PROPOSAL_NAME


def propose(result: ReleaseCheck, matrix_path: Optional[Path] = None,
            kb: Optional[knowledge.KnowledgeBase] = None) -> str:
    """Append one draft matrix cell per new release to the proposal file; the text appended.

    Each cell carries a ``# TODO: confirm CANN pairing`` comment: its CANN is the newest
    one the knowledge base pairs with the same torch line (X.Y), else the newest it
    pairs with any torch_npu release. Python is the newest tag with a wheel on every
    arch, arch the arches with wheels, os the first preferred base OS whose glibc
    meets the wheels' manylinux floor, chip 910b. Existing cells are never touched: the
    text is appended, and a release the file already proposes is skipped. ``""`` when
    nothing was appended. The file is created as a complete matrix when missing.

    Example:
        >>> print(propose(check("http://127.0.0.1:8080/simple/"), Path("/tmp/proposed.yaml")))  # doctest: +SKIP
          # torch_npu 2.15.0 (torch 2.15.0) found on the package index ...
          # TODO: confirm CANN pairing: ...
          - cann: 9.1.0
          ...
    """
    kb = kb or result.kb or knowledge.load()
    path = Path(matrix_path) if matrix_path else default_proposal_path()
    original = read_bytes(path) if path.exists() else None
    text = original.decode("utf-8") if original is not None else ""
    already, dash = _proposal_layout(text, path)
    cells = [_cell_text(r, kb, dash) for r in result.new if normal_version(r.version) not in already]
    cells = [c for c in cells if c]
    if not cells:
        return ""
    block = "\n".join(cells)
    if not text.strip():
        new_text = _PROPOSAL_HEAD + block
    else:
        new_text = text + ("" if text.endswith("\n") else "\n") + "\n" + block
    _check_proposal(text, new_text, len(cells), path)
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_file(path, new_text.encode("utf-8"), expect=original)
    return block


_PROPOSAL_HEAD = """\
# Draft cells for torch_npu releases found by `ascend-build releases check --propose`.
# Every CANN value here is a guess until a human confirms the pairing (see each TODO);
# move a cell into the matrix only after that.
cells:
"""


def _proposal_layout(text: str, path: Path) -> Tuple[set, int]:
    """(torch_npu versions the file already proposes, column of its cells' ``-``).

    Appending is only safe when ``cells`` is a block list and the file's last key.
    """
    if not text.strip():
        return set(), 2
    try:
        root = documents.compose_yaml(text, str(path), exit_code=1)
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML ({exc})", fix="repair or move the proposal file", exit_code=1) from exc
    keys = [k.value for k, _ in root.value] if isinstance(root, yaml.MappingNode) else []
    cells = node_at(root, ("cells",))
    if not isinstance(cells, yaml.SequenceNode) or cells.flow_style or keys[-1:] != ["cells"]:
        raise UserError(f"{path}: 'cells' is not the last key, so new cells cannot be appended safely",
                        fix="make 'cells:' a '- ...' list at the end of the file, or pass another file", exit_code=1)
    lines = text.splitlines()
    dash = 2
    if cells.value:
        line = lines[cells.value[0].start_mark.line]
        dash = line.index("-") if line.lstrip().startswith("-") else cells.value[0].start_mark.column
    found = set()
    for node in cells.value:
        value = node_at(node, ("torch_npu",))
        if isinstance(value, yaml.ScalarNode):
            found.add(normal_version(value.value))
    return found, dash


def _check_proposal(old_text: str, new_text: str, added: int, path: Path) -> None:
    """The appended text must parse as exactly ``added`` more cells, or nothing is written."""
    def count(text: str) -> int:
        doc = documents.load_yaml(text, str(path), exit_code=1) if text.strip() else {}
        return len(doc.get("cells") or []) if isinstance(doc, dict) else -1
    try:
        ok = count(new_text) == count(old_text) + added
    except yaml.YAMLError:
        ok = False
    if not ok:
        raise UserError(f"{path}: appending the proposed cells would not yield {added} more cells; nothing was written",
                        fix="check the file's indentation of 'cells', or pass another file", exit_code=1)


def _cell_text(release: NewRelease, kb: knowledge.KnowledgeBase, dash: int = 2) -> str:
    entry = release.entry
    arches = [a for a in knowledge.ARCHES if entry["python"].get(a)]
    python = _common_python(entry["python"], arches)
    if python is None:
        return ""
    arches = [a for a in arches if python in entry["python"][a]]
    cann, why = suggest_cann(kb, entry["torch"])
    floor = max((entry["manylinux"].get(a, "manylinux_2_17")[len("manylinux_"):] for a in arches), key=glibc_key)
    os_id = _os_for(kb, floor)
    arch_text = arches[0] if len(arches) == 1 else "[" + ", ".join(sorted(arches)) + "]"
    lines = [
        f"# torch_npu {release.version} (torch {entry['torch']}) found on the package index; no CANN pairing is published.",
        f"# TODO: confirm CANN pairing: {cann} is {why}.",
        f"- cann: {cann}",
        "  chip: 910b",
        f"  arch: {arch_text}",
        f"  os: {os_id}",
        f'  python: "{python}"',
        f"  torch_npu: {release.version}",
    ]
    return "".join(" " * dash + line + "\n" for line in lines)


def _common_python(pythons: Mapping[str, Sequence[str]], arches: Sequence[str]) -> Optional[str]:
    """Newest Python with a wheel on every arch; else the newest on any (the arch list shrinks to fit)."""
    sets = [set(pythons[a]) for a in arches]
    common = set.intersection(*sets) if sets else set()
    pool = (common or set.union(*sets)) if sets else set()
    return max(pool, key=python_key) if pool else None


def suggest_cann(kb: knowledge.KnowledgeBase, torch: str) -> Tuple[str, str]:
    """(CANN, why) to draft a cell with: newest paired on the torch line, else newest paired at all.

    Example:
        >>> suggest_cann(knowledge.load(), "2.8.0")
        ('9.0.0', 'the newest CANN paired with a torch 2.8 torch_npu release')
    """
    line = ".".join(Version(torch).base_version.split(".")[:2])
    same, anywhere = [], []
    for version in kb.releases.torch_npu_versions():
        rel = kb.releases.torch_npu(version)
        if rel is None or not rel.cann:
            continue
        anywhere.append(rel.cann)
        if ".".join(Version(rel.torch).base_version.split(".")[:2]) == line:
            same.append(rel.cann)
    if same:
        return max(same, key=versions.cann), f"the newest CANN paired with a torch {line} torch_npu release"
    if anywhere:
        return max(anywhere, key=versions.cann), f"the newest CANN paired with any torch_npu release (none on torch {line})"
    return kb.releases.cann_releases()[-1], "the newest CANN the knowledge base knows (it pairs none)"


def _os_for(kb: knowledge.KnowledgeBase, floor: str) -> str:
    need = glibc_key(floor)
    for os_id in _OS_PREFERENCE:
        info = kb.environment.os_info(os_id)
        if info is not None and info.glibc >= need:
            return os_id
    return _OS_PREFERENCE[0]
