"""The draft ``torch_npu_releases.items`` entry of a version found on the index, with ``cann: null``."""

from __future__ import annotations

from datetime import date
from typing import Any, Dict, List, Optional, Sequence

from packaging.version import Version

from builder import knowledge
from builder.releases.index import IndexFile
from builder.releases.metadata import MetadataRead
from builder.releases.wheel_names import WheelName, glibc_key, python_key, torch_of_pin
from builder.releases.wheel_names import parse_wheel_filename  # noqa: F401  (used by the examples)

CANN_NOTE = "pairing unknown until a human confirms it"
ENTRY_SOURCES = ("PYPI_SIMPLE_JSON", "PYPI_WHEEL_METADATA")


def build_entry(version: str, wheels: Sequence[WheelName], files: Sequence[IndexFile],
                reads: Sequence[MetadataRead], kb: knowledge.KnowledgeBase) -> Dict[str, Any]:
    """A ``torch_npu_releases.items`` entry for a version found on the index, ``cann: null``.

    Example:
        >>> w = parse_wheel_filename("torch_npu-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl")
        >>> m = MetadataRead(w.filename, "x86_64", "pep658", 900, ("torch==2.15.0.*", "numpy"), "torch==2.15.0.*", ">=3.10")
        >>> e = build_entry("2.15.0", [w], [IndexFile(w.filename, "u", upload_time="2026-12-01T08:00:00Z")], [m], knowledge.load())
        >>> e["torch"], e["requires_dist"], e["python"], e["manylinux"], e["cann"], e["first_upload"]
        ('2.15.0', {'x86_64': 'torch==2.15.0.*, numpy'}, {'x86_64': ['3.11']}, {'x86_64': 'manylinux_2_28'}, None, '2026-12-01')
    """
    arches = [a for a in knowledge.ARCHES if any(w.arch == a for w in wheels)]
    by_arch = {r.arch: r for r in reads}
    pins = [torch_of_pin(by_arch[a].torch_pin) for a in arches if a in by_arch and by_arch[a].torch_pin]
    pinned = next((p for p in pins if p), None)
    entry: Dict[str, Any] = {
        "version": version,
        "prerelease": Version(version).is_prerelease,
        "torch": pinned or Version(version).base_version,
        "torch_source": "wheel METADATA Requires-Dist" if pinned else "version prefix only (wheel declares no torch requirement)",
        "requires_dist": {a: ", ".join(by_arch[a].requires_dist) for a in arches if a in by_arch},
        "python": {a: _pythons(wheels, a) for a in arches},
        "manylinux": {a: f"manylinux_{_floor(wheels, a)}" for a in sorted(arches) if _floor(wheels, a)},
        "first_upload": _first_upload(files),
        "cann": None,
        "cann_source": [],
        "cann_note": CANN_NOTE,
        "branch": None,
        "note": _entry_note(version, files, kb),
        "source": list(ENTRY_SOURCES),
    }
    return entry


def _pythons(wheels: Sequence[WheelName], arch: str) -> List[str]:
    found = {p for w in wheels if w.arch == arch for p in w.pythons}
    return sorted(found, key=python_key)


def _floor(wheels: Sequence[WheelName], arch: str) -> Optional[str]:
    """The highest manylinux floor among the arch's wheels: one glibc that suits every Python's wheel."""
    floors = [w.manylinux for w in wheels if w.arch == arch and w.manylinux]
    return max(floors, key=glibc_key) if floors else None


def _first_upload(files: Sequence[IndexFile]) -> Optional[str]:
    dates = sorted(str(f.upload_time)[:10] for f in files if f.upload_time)
    return dates[0] if dates else None


def _entry_note(version: str, files: Sequence[IndexFile], kb: knowledge.KnowledgeBase) -> str:
    note = f"found on the package index by `ascend-build releases check` on {date.today().isoformat()}"
    if files and all(f.yanked is not None for f in files):
        note += "; every file is yanked"
    unpublished = kb.releases.unpublished(version)
    if unpublished is not None:
        note += "; listed under torch_npu_not_on_pypi before"
        if unpublished.get("cann"):
            note += f" (with CANN {unpublished['cann']} there)"
    return note
