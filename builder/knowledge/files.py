"""Where the knowledge base's data files are (``builder/data``, and a project's additions), and how one is read."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

from builder import documents

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
# Generated from TorchNPU's release notes by `make knowledge` (builder/releases/published.py).
TABLES_FILE = "torchnpu-tables.yaml"
# Generated from MindCluster's release notes: the Ascend HDK of each CANN release, per product.
MINDCLUSTER_FILE = "mindcluster-tables.yaml"
# A team's additions (`additions`): relative, so read in the folder a command runs in (its project).
ADDITIONS_FILE = Path("ascend-build") / "knowledge.yaml"


def read_yaml(path: Path) -> Dict[str, Any]:
    """A YAML data file as a mapping ({} when empty)."""
    return documents.load_yaml(path.read_text(encoding="utf-8"), str(path)) or {}


def read_json(path: Path) -> Any:
    """A JSON data file."""
    return documents.load_json(path.read_text(encoding="utf-8"), str(path))
