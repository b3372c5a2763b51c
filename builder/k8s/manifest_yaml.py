r"""Manifests as YAML: the same manifest prints the same bytes.

Keys keep the order they were built in (``apiVersion``, ``kind``, ``metadata``, ``spec`` first,
as Kubernetes' own examples); a comment header says what was chosen and why. The header's text
comes partly from input (node names, key paths): every character that could end a comment line
or is no printable text is written as its ``\uXXXX`` escape, so no input adds a line, let alone a
document, to what a user pipes into ``kubectl apply``.

Example:
    >>> print(render({"apiVersion": "batch/v1", "kind": "Job"}, ["chosen: t", "node a\n---\nkind: ConfigMap"]), end="")
    # chosen: t
    # node a\u000a---\u000akind: ConfigMap
    apiVersion: batch/v1
    kind: Job
"""

from __future__ import annotations

import unicodedata
from typing import Any, Dict, Sequence

import yaml

# Line and paragraph separators, controls (newline, carriage return, NEL), format characters, lone surrogates.
_UNSAFE = ("Cc", "Cf", "Zl", "Zp", "Cs")


def comment_text(line: str) -> str:
    r"""``line`` safe inside one ``#`` comment line: each unsafe character as ``\uXXXX``.

    Example:
        >>> print(comment_text("pool\r\u2028x"), comment_text("plain 910B3"))
        pool\u000d\u2028x plain 910B3
    """
    return "".join(f"\\u{ord(c):04x}" if unicodedata.category(c) in _UNSAFE else c for c in str(line))


class _Plain(yaml.SafeDumper):
    """Every value written out where it stands: the manifests share the same arch expression
    between affinity terms, which PyYAML would otherwise print once as ``&id001`` and then as
    ``*id001``, valid YAML that people and some tools read badly."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render(manifest: Dict[str, Any], header: Sequence[str] = ()) -> str:
    """``manifest`` as block-style YAML after ``header`` as ``#`` comment lines."""
    comments = "".join(f"# {comment_text(line)}\n" for line in header)
    return comments + yaml.dump(manifest, Dumper=_Plain, sort_keys=False, default_flow_style=False, width=4096)
