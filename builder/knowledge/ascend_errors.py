"""The error table (``data/errors.yaml``): known Ascend error strings with cause, fix and source
(named apart from `builder.errors`, the tool's own errors)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Dict, Tuple

from builder.knowledge.files import DATA_DIR, read_yaml

ERRORS_FILE = DATA_DIR / "errors.yaml"


@lru_cache(maxsize=1)
def error_entries() -> Tuple[Dict[str, Any], ...]:
    """The error table (``errors.yaml``): known Ascend error strings with cause, fix and
    source, whitespace folded. `explain` matches with it on a node; render ships it into
    every image as ``errors.json`` for the smoke program.

    Example:
        >>> error_entries()[0]["id"], sorted(error_entries()[0])
        ('platform-mismatch', ['cause', 'fix', 'id', 'patterns', 'source'])
    """
    doc = read_yaml(ERRORS_FILE)
    return tuple({"id": str(e["id"]), "patterns": [str(p) for p in e["patterns"]],
                  "cause": " ".join(str(e["cause"]).split()), "fix": " ".join(str(e["fix"]).split()),
                  "source": str(e["source"])} for e in doc["errors"])
