"""A knowledge base with one part's answers replaced, for tests that ask "what if the data said X".

`with_part(kb, "environment", os_info=...)` is a copy of ``kb`` whose ``environment`` part answers
``os_info`` with the given function and everything else as ``kb``'s own part does. The copy is a
real `KnowledgeBase` (the other parts are ``kb``'s, shared), so callers take it as they take
``knowledge.load()``. As with the shipped data, the parts keep asking each other, not the
facade: a replaced ``environment.os_info`` changes what callers of ``kb.environment`` see, not
what the ``downloads`` part reads through its own reference.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

from builder.knowledge import KnowledgeBase

PARTS = ("releases", "environment", "drivers", "downloads")


class _Part:
    """``part``, except for the methods in ``replaced``."""

    def __init__(self, part: Any, replaced: dict) -> None:
        self._part = part
        self.__dict__.update(replaced)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._part, name)


def with_part(kb: KnowledgeBase, part: str, **replaced: Callable[..., Any]) -> KnowledgeBase:
    """A copy of ``kb`` whose part ``part`` answers ``replaced``'s methods itself."""
    assert part in PARTS, part
    real = getattr(kb, part)
    for name in replaced:
        assert callable(getattr(real, name, None)), f"{part} has no method {name}"  # a typo would replace nothing
    stand_in = copy.copy(kb)
    setattr(stand_in, part, _Part(real, replaced))
    return stand_in
