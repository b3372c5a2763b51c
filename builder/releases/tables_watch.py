"""What a change of the published tables enables: torch_npu/CANN pairs a table now lists, drafted as cells.

The release watcher keeps the newest documents (`keep_documents`), generates the data files
again (`published.write`) and asks `enabled` which pairs moved to "listed by a published
table" (``cann-window``) from anything else; `proposal` drafts one matrix cell per new pair
for a maintainer to move into the matrix. The cells are emitted as YAML by the emitter, so
no document text reaches the file unescaped.

Example:
    >>> from builder import knowledge
    >>> kb = knowledge.load()
    >>> enabled(kb, kb)
    []
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple

import yaml

from builder import python_env, versions

PROPOSAL_NAME = "proposed/tables.yaml"
_HEAD = ("# Draft cells for torch_npu/CANN pairs a published table now lists (ascend-build releases tables\n"
         "# --write --propose). Each pair validates with a cann-window warning naming its table; move the\n"
         "# cells you want into the matrix, and build them on an NPU host before relying on them.\n")


@dataclass(frozen=True)
class Enabled:
    """A pair the new tables list that the old ones did not, and where it is listed."""

    torch_npu: str
    cann: str
    was: str                    # the verdict before: mismatch, uncovered, adjacent, downstream
    where: Tuple[str, ...]


def _pairs(kb: Any) -> Dict[Tuple[str, str], Any]:
    """Every final torch_npu on PyPI with every final CANN release whose installers are known: its fit."""
    finals = [c for c in kb.releases.cann_releases() if versions.cann(c).key[4] == 2 and kb.releases.cann_package(c) is not None]
    out = {}
    for npu in kb.releases.torch_npu_versions():
        release = kb.releases.torch_npu(npu)
        if release.prerelease:
            continue
        for cann in finals:
            fit = kb.releases.cann_fit(npu, cann)
            if fit is not None:
                out[(npu, cann)] = fit
    return out


def enabled(old_kb: Any, new_kb: Any) -> List[Enabled]:
    """The pairs whose fit is ``window`` with the new knowledge base and was not with the old."""
    before, after = _pairs(old_kb), _pairs(new_kb)
    return [Enabled(npu, cann, before[(npu, cann)].kind if (npu, cann) in before else "unknown", fit.where)
            for (npu, cann), fit in after.items()
            if fit.kind == "window" and (before.get((npu, cann)) is None or before[(npu, cann)].kind != "window")]


def proposal(pairs: Sequence[Enabled], kb: Any) -> str:
    """A complete matrix of one draft cell per pair (x86_64, 910b, the newest Python both allow); "" for none."""
    cells = []
    for pair in pairs:
        release = kb.releases.torch_npu(pair.torch_npu)
        stated = python_env.python_range(pair.cann)
        pythons = [p for p in release.python.get("x86_64", ()) if stated is None or stated.allows(p)]
        if not pythons:
            continue
        cells.append({"cann": pair.cann, "torch_npu": release.version, "python": pythons[-1],
                      "chip": "910b", "arch": "x86_64", "os": "ubuntu22.04", "env": "conda"})
    if not cells:
        return ""
    return _HEAD + yaml.safe_dump({"image": "ascend-build/pytorch", "cells": cells}, sort_keys=False,
                                  default_flow_style=False, width=4096)
