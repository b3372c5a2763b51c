"""Manifests as YAML: the same manifest prints the same bytes.

Keys keep the order they were built in (``apiVersion``, ``kind``, ``metadata``, ``spec`` first,
as Kubernetes' own examples); a comment header says what was chosen and why.

Example:
    >>> print(render({"apiVersion": "batch/v1", "kind": "Job"}, ["chosen: t"]), end="")
    # chosen: t
    apiVersion: batch/v1
    kind: Job
"""

from __future__ import annotations

from typing import Any, Dict, Sequence

import yaml


def render(manifest: Dict[str, Any], header: Sequence[str] = ()) -> str:
    """``manifest`` as block-style YAML after ``header`` as ``#`` comment lines."""
    comments = "".join(f"# {line}\n" for line in header)
    return comments + yaml.safe_dump(manifest, sort_keys=False, default_flow_style=False, width=4096)
