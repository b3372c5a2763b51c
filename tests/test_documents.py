"""builder.documents: YAML and JSON of any nesting depth are read or refused clearly, never a RecursionError."""

from __future__ import annotations

import doctest
import time

import pytest
import yaml

from builder import documents
from builder.documents import MAX_DEPTH, MAX_DIGITS, TooDeep
from builder.errors import UserError


def test_module_examples_hold():
    assert doctest.testmod(documents).failed == 0


@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 900, 5000, 200000])
def test_json_past_the_limit_is_too_deep_whatever_the_depth(levels):
    for text in ("[" * levels + "]" * levels, '{"a":' * levels + "1" + "}" * levels):
        with pytest.raises(TooDeep) as deep:
            documents.load_json(text, "answer.json")
        assert deep.value.message == "answer.json is nested deeper than 64 levels" and deep.value.fix
        assert isinstance(deep.value, UserError) and isinstance(deep.value, ValueError)


def test_json_at_the_limit_is_read():
    assert documents.load_json("[" * MAX_DEPTH + "]" * MAX_DEPTH, "a.json") is not None
    assert documents.load_json(b'{"a": "[[[[[["}', "a.json") == {"a": "[[[[[["}  # brackets in strings are text


@pytest.mark.parametrize("loader", [documents.LOADER, yaml.SafeLoader], ids=["libyaml", "python"])
@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 400, 990])
def test_yaml_past_the_limit_is_too_deep_with_its_place(loader, levels):
    text = "top:\n" + "".join("  " * (i + 1) + "- \n" for i in range(levels))
    for read in (documents.compose_yaml, documents.load_yaml):
        with pytest.raises(TooDeep) as deep:
            read(text, "f.yaml", loader=loader)
        assert deep.value.message == "f.yaml is nested deeper than 64 levels"


def test_yaml_at_the_limit_is_read_and_a_scalar_is_no_level():
    text = "[" * MAX_DEPTH + "x" + "]" * MAX_DEPTH
    value = documents.load_yaml(text, "f.yaml")
    for _ in range(MAX_DEPTH - 1):
        value = value[0]
    assert value == ["x"]


def test_an_alias_bomb_is_measured_in_nodes_not_in_its_expansion():
    """9 levels of 9 aliases: 9**9 strings when expanded, 10 nodes to measure."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{n}: &a{n} [" + ",".join([f"*a{n - 1}"] * 9) + "]" for n in range(1, 10)]
    started = time.monotonic()
    node = documents.compose_yaml("\n".join(lines) + "\n", "bomb.yaml")
    assert node is not None and time.monotonic() - started < 5


def test_aliases_deepening_past_the_limit_are_too_deep():
    """Each level only a few characters, but 70 levels once the aliases are followed."""
    lines = ["l0: &l0 [x]"] + [f"l{n}: &l{n} [*l{n - 1}]" for n in range(1, 70)]
    with pytest.raises(TooDeep):
        documents.compose_yaml("\n".join(lines) + "\n", "f.yaml")


def test_an_anchor_inside_itself_is_too_deep():
    with pytest.raises(TooDeep) as deep:
        documents.load_yaml("a: &a [1, *a]\n", "loop.yaml")
    assert deep.value.where is not None and deep.value.where.file == "loop.yaml"


def test_syntax_errors_stay_yaml_and_json_errors():
    with pytest.raises(yaml.YAMLError):
        documents.load_yaml("a: [1,\n", "f.yaml")
    with pytest.raises(ValueError) as bad:
        documents.load_json("{", "f.json")
    assert not isinstance(bad.value, TooDeep)
    assert documents.compose_yaml("", "empty.yaml") is None and documents.load_yaml("", "empty.yaml") is None


@pytest.mark.parametrize("text", ["9" * (MAX_DIGITS + 1), "-" + "9" * 5000, '{"size": ' + "1" * 100000 + "}"])
def test_a_json_number_of_any_length_is_refused_not_converted(text):
    with pytest.raises(documents.NumberTooLong) as refused:
        documents.load_json(text, "answer.json")
    assert refused.value.message == "answer.json holds a number of more than 100 digits"
    assert documents.load_json("1" * MAX_DIGITS, "a.json") == int("1" * MAX_DIGITS)
    assert documents.load_json('"' + "1" * 5000 + '"', "a.json") == "1" * 5000  # text stays text


@pytest.mark.parametrize("loader", [documents.LOADER, yaml.SafeLoader], ids=["libyaml", "python"])
def test_a_yaml_integer_of_any_length_is_refused_with_its_place(loader):
    text = "a:\n  b: " + "1" * 5000 + "\n"
    for read in (documents.compose_yaml, documents.load_yaml):
        with pytest.raises(documents.NumberTooLong) as refused:
            read(text, "f.yaml", loader=loader)
        assert refused.value.where is not None and (refused.value.where.line, refused.value.where.column) == (2, 6)
    assert documents.load_yaml("a: '" + "1" * 5000 + "'\n", "f.yaml") == {"a": "1" * 5000}
    assert documents.load_yaml("a: 1" + "0" * 5000 + ".5\n", "f.yaml") == {"a": float("inf")}  # a float is bounded


@pytest.mark.parametrize("loader", [documents.LOADER, yaml.SafeLoader], ids=["libyaml", "python"])
@pytest.mark.parametrize("text, where, shown", [
    ("cells:\n  - {cann: '9.1.0', chip: !foo 910b}\n", (2, 27), "!foo"),          # a local tag on a value
    ("!!python/name:os.system cells:\n  - {cann: '9.1.0'}\n", (1, 1), "!!python/name:os.system"),  # on a key
    ("cells:\n  - !!python/object:os.system {}\n", (2, 5), "!!python/object:os.system"),
    ("a: !!binary aGk=\nb: !<tag:example.com,2026:x> 1\n", (2, 4), "tag:example.com,2026:x"),
])
def test_a_yaml_tag_outside_the_safe_schema_is_refused_with_its_place(loader, text, where, shown):
    """A tag the safe loader does not construct is refused before any value is built, on a key
    too (where a reader walking the composed nodes would drop it without a word)."""
    for read in (documents.compose_yaml, documents.load_yaml):
        with pytest.raises(documents.UnknownTag) as refused:
            read(text, "m.yaml", loader=loader)
        assert refused.value.where is not None and (refused.value.where.line, refused.value.where.column) == where
        assert f"uses the YAML tag {shown!r}" in refused.value.message and refused.value.fix


def test_the_safe_schemas_own_tags_still_read():
    text = "a: !!str 1\nb: !!int '2'\nc: !!float 3\nd: !!bool true\ne: !!null ''\nf: !!seq [1]\ng: !!map {h: 1}\n"
    assert documents.load_yaml(text, "f.yaml") == {"a": "1", "b": 2, "c": 3.0, "d": True, "e": None, "f": [1], "g": {"h": 1}}
