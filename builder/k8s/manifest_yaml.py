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


class _Plain(yaml.SafeDumper):
    """Every value written out where it stands: the manifests share the same arch expression
    between affinity terms, which PyYAML would otherwise print once as ``&id001`` and then as
    ``*id001``, valid YAML that people and some tools read badly."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render(manifest: Dict[str, Any], header: Sequence[str] = ()) -> str:
    """``manifest`` as block-style YAML after ``header`` as ``#`` comment lines."""
    comments = "".join(f"# {line}\n" for line in header)
    return comments + yaml.dump(manifest, Dumper=_Plain, sort_keys=False, default_flow_style=False, width=4096)
