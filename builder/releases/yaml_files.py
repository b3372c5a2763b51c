"""The YAML files the watcher edits: read them, find nodes in their parse trees, replace them atomically."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional, Sequence

import yaml

from builder import writes
from builder.errors import UserError


def node_at(node: Any, keys: Sequence[str]) -> Any:
    """The node under ``keys`` in a composed YAML tree (``documents.compose_yaml``), else None.

    Why nodes and not the loaded data: nodes carry line numbers, so new text can be
    inserted at the right place without re-dumping (and reformatting) the file.

    Example:
        >>> from builder.documents import compose_yaml
        >>> node_at(compose_yaml("a:\\n  b: [1, 2]\\n", "f.yaml"), ("a", "b")).start_mark.line
        1
    """
    for key in keys:
        if not isinstance(node, yaml.MappingNode):
            return None
        node = next((v for k, v in node.value if getattr(k, "value", None) == key), None)
    return node


def read_bytes(path: Path) -> bytes:
    """The file's bytes; UserError (exit 1) when it cannot be read."""
    try:
        return path.read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}", fix="check the path and its permissions", exit_code=1) from exc


def replace_file(path: Path, data: bytes, expect: Optional[bytes], check: bool = True) -> None:
    """Write ``data`` to a temp file beside ``path`` and rename it over.

    With ``check``, refuse when the file no longer holds ``expect`` (None: no file),
    so an edit made meanwhile by someone else is never lost.
    """
    current = read_bytes(path) if path.exists() else None
    if check and current != expect:
        raise UserError(f"{path} changed while releases were being added; nothing was written",
                        fix="run the command again", exit_code=1)
    try:
        tmp = writes.stage(path, data)  # created exclusively beside it, never through a link; flushed
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    except OSError as exc:
        writes.temporary_name(path).unlink(missing_ok=True)
        raise UserError(f"cannot write {path}: {exc.strerror}", fix="check the folder's permissions and free space",
                        exit_code=1) from exc
