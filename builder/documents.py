"""YAML and JSON read within bounds: too deep or a number too long is a clear error, never a
RecursionError or an int() error.

Why: Python's ``json`` raises RecursionError on a few thousand ``[``, PyYAML's pure-Python
loader on a few hundred, and every walk over what was loaded (the matrix's own, a
comparison of two documents) recurses too. Both convert integers with ``int()``, which
refuses 4300 digits and more with a ValueError that tells the user to change Python. No
file or answer ascend-build reads nests more than a handful of levels or holds a number
of more than a few digits, so beyond ``MAX_DEPTH`` levels or ``MAX_DIGITS`` digits it is
refused before anyone walks it: YAML on its composed nodes, before a single Python object
is built; JSON as it is parsed (integers) and on the loaded value (depth; ``json`` itself
stops at Python's stack, about 1000 levels).

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

MAX_DEPTH = 64    # a matrix is 5 levels deep, an OCI manifest 4, the knowledge base 6
MAX_DIGITS = 100  # sizes, counts and timestamps have under 20; int() refuses 4300 and more
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_CORE = "tag:yaml.org,2002:"  # YAML's own tags, written !!name
_INT_TAG = _CORE + "int"


class Refused(UserError, ValueError):
    """A document ascend-build will not read: ``what`` says why, of the file or answer ``name``.

    A ValueError too: a reader that takes any ValueError for a malformed answer (a registry,
    a package index) takes this one so too, and says it in its own words."""

    def __init__(self, name: str, what: str, where: Optional[Location] = None, exit_code: int = 2) -> None:
        super().__init__(f"{name} {what}", where=where, exit_code=exit_code,
                         fix="no file or answer ascend-build reads holds that: check what wrote it")


class TooDeep(Refused):
    """Nested deeper than MAX_DEPTH (or a YAML node that contains itself)."""

    def __init__(self, name: str, where: Optional[Location] = None, exit_code: int = 2) -> None:
        super().__init__(name, f"is nested deeper than {MAX_DEPTH} levels", where, exit_code)


class UnknownTag(Refused):
    """A YAML tag the safe schema does not define (``!foo``, ``!!python/name:os.system``): the safe
    loader would refuse it late or, on a mapping key, the reader would drop it without a word."""

    def __init__(self, name: str, where: Optional[Location] = None, exit_code: int = 2, tag: str = "") -> None:
        shown = "!!" + tag[len(_CORE):] if tag.startswith(_CORE) else tag
        super().__init__(name, f"uses the YAML tag {shown!r}, which no file ascend-build reads defines", where, exit_code)
        self.fix = "remove the tag (write the plain value)"


class NumberTooLong(Refused):
    """An integer of more than MAX_DIGITS digits."""

    def __init__(self, name: str, where: Optional[Location] = None, exit_code: int = 2) -> None:
        super().__init__(name, f"holds a number of more than {MAX_DIGITS} digits", where, exit_code)


def load_json(text: Union[str, bytes], name: str, exit_code: int = 2) -> Any:
    """``json.loads(text)``; Refused past the bounds, ValueError (json's) when it is no JSON."""
    def integer(digits: str) -> int:
        if len(digits) > MAX_DIGITS:
            raise NumberTooLong(name, exit_code=exit_code)
        return int(digits)

    try:
        value = json.loads(text, parse_int=integer)
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
    """The node tree of the one YAML document in ``text`` (None when empty); Refused past the
    bounds, yaml.YAMLError when it is no YAML."""
    reader = loader(text)
    try:
        return _composed(reader, name, exit_code)
    finally:
        reader.dispose()


def load_yaml(text: str, name: str, loader: Any = LOADER, exit_code: int = 2) -> Any:
    """``yaml.load(text, loader)``, its nodes checked by `compose_yaml`'s rules before any is built."""
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
        found = _out_of_bounds(node, _known_tags(reader))
        if found is not None:
            refusal, bad = found
            mark = bad.start_mark
            where = Location(name, mark.line + 1, mark.column + 1)
            if refusal is UnknownTag:
                raise UnknownTag(name, where, exit_code, tag=bad.tag)
            raise refusal(name, where, exit_code)
    return node


def _known_tags(reader: Any) -> Set[str]:
    """The tags the reader's loader constructs (the safe schema's: str, int, map, ...), and the merge
    key's, which the loader resolves without a constructor (the matrix refuses it in its own words)."""
    return {tag for tag in type(reader).yaml_constructors if isinstance(tag, str)} | {_CORE + "merge"}


def _children(node: yaml.Node) -> List[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _out_of_bounds(root: yaml.Node, known_tags: Set[str]) -> Optional[Tuple[type, yaml.Node]]:
    """(TooDeep, NumberTooLong or UnknownTag, the first node found past the bounds), else None; a
    node inside itself counts as too deep.

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
                return TooDeep, node
            continue
        if key in height:
            continue
        if key in open_nodes:
            return TooDeep, node  # an anchor inside itself: endless when walked
        if node.tag == _INT_TAG and len(node.value) > MAX_DIGITS:
            return NumberTooLong, node
        if node.tag not in known_tags:
            return UnknownTag, node
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((kid, False) for kid in _children(node) if id(kid) not in height)
    return None


__all__ = ["MAX_DEPTH", "MAX_DIGITS", "LOADER", "Refused", "TooDeep", "NumberTooLong", "UnknownTag", "load_json",
           "compose_yaml", "load_yaml"]
