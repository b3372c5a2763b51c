"""YAML and JSON read within a nesting depth: too deep is a clear error, never a RecursionError.

Why: Python's ``json`` raises RecursionError on a few thousand ``[``, PyYAML's pure-Python
loader on a few hundred, and every walk over what was loaded (the matrix's own, a
comparison of two documents) recurses too. No file or answer ascend-build reads nests
more than a handful of levels, so anything deeper than ``MAX_DEPTH`` is refused before
anyone walks it: YAML on its composed nodes, before a single Python object is built;
JSON on the loaded value (``json`` itself stops at Python's stack, about 1000 levels).

Example:
    >>> load_json('{"a": [1, 2]}', "answer.json")
    {'a': [1, 2]}
    >>> try:
    ...     load_json("[" * 100 + "]" * 100, "answer.json")
    ... except TooDeep as deep:
    ...     print(deep.message)
    answer.json is nested deeper than 64 levels
    >>> load_yaml("a: [1, {b: c}]", "f.yaml")
    {'a': [1, {'b': 'c'}]}
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Set, Tuple, Union

import yaml

from builder.errors import Location, UserError

MAX_DEPTH = 64  # a matrix is 5 levels deep, an OCI manifest 4, the knowledge base 6
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class TooDeep(UserError, ValueError):
    """A document nested deeper than MAX_DEPTH (or a YAML node that contains itself).

    A ValueError too: a reader that takes any ValueError for a malformed answer (a registry,
    a package index) takes this one so too, and says it in its own words."""

    def __init__(self, name: str, where: Optional[Location] = None, exit_code: int = 2) -> None:
        super().__init__(f"{name} is nested deeper than {MAX_DEPTH} levels", where=where, exit_code=exit_code,
                         fix="no file or answer ascend-build reads nests that deep: check what wrote it")


def load_json(text: Union[str, bytes], name: str, exit_code: int = 2) -> Any:
    """``json.loads(text)``; TooDeep past MAX_DEPTH, ValueError (json's) when it is no JSON."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise TooDeep(name, exit_code=exit_code) from None
    stack: List[Tuple[Any, int]] = [(value, 1)]
    while stack:  # a loaded JSON value is a tree: no node is reached twice
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > MAX_DEPTH:
                raise TooDeep(name, exit_code=exit_code)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return value


def compose_yaml(text: str, name: str, loader: Any = LOADER, exit_code: int = 2) -> Optional[yaml.Node]:
    """The node tree of the one YAML document in ``text`` (None when empty); TooDeep past
    MAX_DEPTH, yaml.YAMLError when it is no YAML."""
    reader = loader(text)
    try:
        return _composed(reader, name, exit_code)
    finally:
        reader.dispose()


def load_yaml(text: str, name: str, loader: Any = LOADER, exit_code: int = 2) -> Any:
    """``yaml.load(text, loader)``, its nodes checked by `compose_yaml`'s rule before any is built."""
    reader = loader(text)
    try:
        node = _composed(reader, name, exit_code)
        return None if node is None else reader.construct_document(node)
    finally:
        reader.dispose()


def _composed(reader: Any, name: str, exit_code: int) -> Optional[yaml.Node]:
    try:
        node = reader.get_single_node()
    except RecursionError:  # the pure-Python composer recurses once per level
        raise TooDeep(name, exit_code=exit_code) from None
    if node is not None:
        deepest = _too_deep(node)
        if deepest is not None:
            mark = deepest.start_mark
            raise TooDeep(name, Location(name, mark.line + 1, mark.column + 1), exit_code)
    return node


def _children(node: yaml.Node) -> List[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _too_deep(root: yaml.Node) -> Optional[yaml.Node]:
    """The first node found past MAX_DEPTH, else None; a node inside itself counts as past it.

    Aliases make the tree a graph (the same node under many parents, or under itself), so
    each node's height is computed once (post-order, no recursion): an alias bomb costs
    its size in nodes, not its expansion."""
    height: Dict[int, int] = {}
    open_nodes: Set[int] = set()  # on the path from the root to the node being visited
    stack: List[Tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_nodes.discard(key)
            height[key] = 1 + max((height[id(kid)] for kid in _children(node)), default=0) \
                if isinstance(node, yaml.CollectionNode) else 0
            if height[key] > MAX_DEPTH:
                return node
            continue
        if key in height:
            continue
        if key in open_nodes:
            return node  # an anchor inside itself: endless when walked
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((kid, False) for kid in _children(node) if id(kid) not in height)
    return None


__all__ = ["MAX_DEPTH", "LOADER", "TooDeep", "load_json", "compose_yaml", "load_yaml"]
