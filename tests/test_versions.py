"""Tests for builder/versions.py: the order of CANN, HDK and firmware version strings."""

from __future__ import annotations

import ast
import copy
import itertools
import json
import operator
import pickle
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.version import InvalidVersion, Version

import builder.versions as versions_module
from builder.errors import UserError
from builder.versions import (
    AscendVersion,
    VersionError,
    cann,
    firmware,
    hdk,
    hdk_line_floor,
    hdk_matches_line,
    parse,
    python_package,
)

DATA = Path(versions_module.__file__).parent / "data"
PARSERS = {"cann": cann, "hdk": hdk, "firmware": firmware}

# --- the orders, written as in docs/ascend-facts.md ------------------------------

CHAINS = {
    "cann": [
        "8.0.RC1 < 8.0.RC2.alpha002 < 8.0.RC2 == 8.0.RC2.beta1 < 8.0.RC3 < 8.0.0.alpha001"
        " < 8.0.0 < 8.1.RC1 < 8.2.RC1 < 8.3.RC1 < 8.5.0-beta.1 < 8.5.0 < 8.5.2"
        " < 9.0.0-beta.1 < 9.0.0 < 9.0.1 < 9.1.0",
        "6.3.RC3 < 6.3.RC3.1 < 7.0.RC1 < 7.0.0",
        "8.3.rc1 == 8.3.RC1",
        "8.0.0.beta1 == 8.0.0",
        "8.0.RC2.alpha002 < 8.0.RC2.alpha003",
        "8.5.0.alpha002 < 8.5.0",
        "8.5.0-beta.1 < 8.5.0-beta.2 < 8.5.0",
        "9.0.0-beta.1 < 9.0.0-beta.2 < 9.1.0-beta.3 < 9.1.0",
        # alpha < -beta.N < release, as torch_npu's VersionV2ToNum weights them
        "8.5.0.alpha002 < 8.5.0-beta.1",
        # internal test builds: after the previous line, before RC1 of their own line
        "7.0.0 < 8.0.T6 < 8.0.T63 < 8.0.RC1",
        # an RC patch stays below the next RC
        "6.3.RC2 < 6.3.RC2.1 < 6.3.RC2.9 < 6.3.RC3.alpha001 < 6.3.RC3",
        "8.0.RC10 > 8.0.RC9",
    ],
    "hdk": [
        "23.0.RC3 < 23.0.0 < 23.0.3 < 24.1.RC1 < 24.1.rc2 < 24.1.rc2.2 < 24.1.RC3 < 24.1.0"
        " < 24.1.0.1 < 25.0.RC1 < 25.0.rc1.1 < 26.1.0 < 26.1.0.b083",
        "6.0.RC1 < 6.0.0 < 23.0.RC1",
        "23.0.2.1 > 23.0.2",
        "24.1.rc3 == 24.1.RC3",
        "26.1.0 < 26.1.0.b001 < 26.1.0.b083 < 26.1.0.1 < 26.1.1",
        "24.1.RC1 < 24.1.RC1.B10 < 24.1.rc1.1 < 24.1.RC2",
        "24.0.0 < 24.1.T1 < 24.1.RC1",
    ],
    "firmware": [
        "6.4.0.4.220 < 7.1.0.6.220 < 7.3.0.1.231 < 7.5.0.1.129 < 9.0.0.105.229",
        "7.1.0.4.220 < 7.1.0.5.220 < 7.1.0.6.220",
        "7.7.0.1.231 < 7.7.0.6.236 < 7.8.0.6.201 < 7.8.0.7.220",
    ],
}


def _chain(text: str):
    """'a < b == c > d' -> [a, '<', b, '==', c, '>', d] as raw strings."""
    return text.split()


def _chain_cases():
    for kind, chains in CHAINS.items():
        for chain in chains:
            yield pytest.param(kind, chain, id=f"{kind}: {chain[:60]}")


@pytest.mark.parametrize("kind,chain", list(_chain_cases()))
def test_chain_adjacent_pairs(kind, chain):
    parse_ = PARSERS[kind]
    tokens = _chain(chain)
    for left, op, right in zip(tokens[0::2], tokens[1::2], tokens[2::2]):
        a, b = parse_(left), parse_(right)
        if op == "<":
            assert a < b and b > a and a <= b and a != b, f"{left} < {right}"
            assert not (a > b) and not (a >= b) and not (a == b)
        elif op == ">":
            assert a > b and b < a and a >= b and a != b, f"{left} > {right}"
        else:
            assert op == "=="
            assert a == b and not (a < b) and not (a > b) and a <= b and a >= b, f"{left} == {right}"
            assert hash(a) == hash(b)


@pytest.mark.parametrize("kind,chain", list(_chain_cases()))
def test_chain_sorts_back(kind, chain):
    parse_ = PARSERS[kind]
    tokens = _chain(chain)
    ops = set(tokens[1::2])
    values = [parse_(t) for t in tokens[0::2]]
    expected = values if ">" not in ops else list(reversed(values))
    assert ops <= {"<", "=="} or ops <= {">", "=="}
    rng = random.Random(chain)
    for _ in range(5):
        shuffled = values[:]
        rng.shuffle(shuffled)
        got = sorted(shuffled)
        # equal versions may swap places: compare the keys, which ignore spelling
        assert [v.key for v in got] == [v.key for v in expected]
    assert min(values) == expected[0] and max(values) == expected[-1]


# --- attributes --------------------------------------------------------------------


def test_attributes():
    v = cann("8.0.RC2.beta1")
    assert isinstance(v, AscendVersion)
    assert v.text == str(v) == "8.0.RC2.beta1"
    assert v.kind == "cann"
    assert v.release == (8, 0)
    assert repr(v) == "cann('8.0.RC2.beta1')"
    assert hdk("24.1.rc2.2").release == (24, 1) and hdk("24.1.rc2.2").kind == "hdk"
    assert firmware("7.5.0.1.129").release == (7, 5) and firmware("7.5.0.1.129").kind == "firmware"
    assert cann("9.0.0-beta.1").release == (9, 0)


def test_equal_versions_keep_their_own_text_and_collapse_in_sets():
    a, b = cann("8.0.RC2"), cann("8.0.RC2.beta1")
    assert a == b and str(a) != str(b)
    assert len({a, b, cann("8.0.rc2")}) == 1
    assert {a: 1}[b] == 1


def test_immutable_and_picklable():
    v = hdk("26.1.0.b083")
    with pytest.raises(AttributeError):
        v.text = "x"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        v.other = 1
    for clone in (pickle.loads(pickle.dumps(v)), copy.copy(v), copy.deepcopy(v)):
        assert clone == v and clone.text == v.text and clone.kind == v.kind


def test_parse_dispatches_on_kind():
    assert parse("8.0.RC1", "cann") == cann("8.0.RC1")
    assert parse("24.1.0", "hdk") == hdk("24.1.0")
    with pytest.raises(ValueError, match="unknown version kind"):
        parse("8.0.RC1", "torch")


# --- different kinds do not compare -------------------------------------------------


@pytest.mark.parametrize("op", [operator.lt, operator.le, operator.gt, operator.ge], ids=["<", "<=", ">", ">="])
def test_ordering_across_kinds_raises_type_error(op):
    with pytest.raises(TypeError, match="cann.*hdk"):
        op(cann("8.0.RC1"), hdk("8.0.RC1"))
    with pytest.raises(TypeError):
        op(firmware("7.5.0.1.129"), hdk("24.1.0"))


def test_sorting_a_mixed_list_raises_type_error():
    with pytest.raises(TypeError):
        sorted([cann("8.0.RC1"), hdk("24.1.RC1"), cann("8.0.0")])


def test_equality_across_kinds_is_false_not_an_error():
    # Python's rule: == never raises (so `in` and dict lookups stay safe).
    assert cann("8.0.RC1") != hdk("8.0.RC1")
    assert cann("8.0.RC1") not in [hdk("8.0.RC1")]


def test_no_comparison_with_plain_strings():
    assert cann("8.0.RC1") != "8.0.RC1"
    with pytest.raises(TypeError):
        cann("8.0.RC1") < "8.0.RC2"  # noqa: B015


# --- errors ----------------------------------------------------------------------------

BAD = {
    "cann": [
        "8.0", "abc", "8.0.RC", "", "8", "8.0.RC1.", ".8.0.RC1", "8..0", "8.0.T", "8.0.0.alpha",
        "8.0.0.beta", "8.0.0-beta", "8.0.0-beta.", "8.0.RC1-beta.1", "8.0.0.1", "8.0.RC2.alpha1.1",
        "8.0.RC1 ", " 8.0.RC1", "8.0.RC1\n", "8.0 .RC1", "8.0.R C1", "v8.0.RC1", "8.0.RC1.b083",
        "\u0668.0.RC1", "\uff18.0.RC1", "8.0.RC-1", "8.0.+1", "26.1.0.b083",
    ],
    "hdk": [
        "24.1", "abc", "24.1.RC", "", "24.1.rc2.2.1", "24.1.0.b", "24.1.0.b083.1", "24.1.rc2 ",
        "24.1.rc2\n", "24.1.0-beta.1", "24.1.0.alpha001", "24.1.X", "24.1.RC1.1.b2", "\uff12\uff14.1.0",
    ],
    "firmware": ["7.5.0.1", "7.5.0.1.129.1", "7.5.0.1.x", "", "abc", "7.5.0.1.129 ", "7.5.0.1.129\n", "7.5.0..129"],
}


def _bad_cases():
    for kind, strings in BAD.items():
        for s in strings:
            yield pytest.param(kind, s, id=f"{kind}:{s!r}")


@pytest.mark.parametrize("kind,text", list(_bad_cases()))
def test_unknown_forms_raise_version_error_naming_the_string(kind, text):
    with pytest.raises(VersionError) as info:
        PARSERS[kind](text)
    err = info.value
    assert isinstance(err, UserError)
    assert repr(text) in err.message
    assert {"cann": "CANN", "hdk": "HDK", "firmware": "firmware"}[kind] in err.message
    assert err.text == text and err.kind == kind
    assert err.fix and err.exit_code == 2


def test_version_error_is_a_user_error_with_forms_and_examples_in_the_fix():
    assert issubclass(VersionError, UserError)
    with pytest.raises(UserError) as info:
        cann("8.0")
    fix = info.value.fix
    for form, example in [
        ("X.Y.RCn", "8.0.RC1"),
        ("X.Y.Z", "8.0.0"),
        ("alphaNNN", "8.0.RC2.alpha003"),
        ("betaN", "8.0.RC2.beta1"),
        ("X.Y.Z-beta.N", "8.5.0-beta.1"),
        ("X.Y.RCn.m", "6.3.RC3.1"),
        ("X.Y.Tn", "8.0.T63"),
    ]:
        assert form in fix and example in fix
        cann(example)  # every example in the fix is itself accepted
    hdk_fix = pytest.raises(VersionError, hdk, "24.1").value.fix
    for example in ["24.1.RC3", "24.1.0", "24.1.rc2.2", "23.0.2.1", "26.1.0.b083", "24.1.T1"]:
        assert example in hdk_fix
        hdk(example)
    assert "7.5.0.1.129" in pytest.raises(VersionError, firmware, "1").value.fix
    assert "fix:" in str(pytest.raises(VersionError, firmware, "1").value)


@pytest.mark.parametrize("value", [8.0, 8, None, b"8.0.RC1", ["8.0.RC1"]])
def test_non_strings_raise_version_error(value):
    with pytest.raises(VersionError, match="quote them in YAML"):
        cann(value)
    with pytest.raises(VersionError):
        hdk(value)


# --- HDK line names -----------------------------------------------------------------


def test_hdk_line_floor():
    assert hdk_line_floor("25.0.X") == hdk("25.0.RC1")
    assert hdk_line_floor("25.0.X").text == "25.0.RC1"
    assert hdk_line_floor("25.0.x") == hdk("25.0.RC1")
    assert hdk_line_floor("26.0.RC1/25.7.RC1") == hdk("25.7.RC1")
    assert hdk_line_floor("25.7.RC1/26.0.RC1") == hdk("25.7.RC1")
    assert hdk_line_floor("26.1.1") == hdk("26.1.1")
    assert hdk_line_floor("24.1.X/25.0.X") == hdk("24.1.RC1")
    # the floor is below every released version of the line
    for v in ["25.0.RC1", "25.0.rc1.1", "25.0.RC3", "25.0.0", "25.0.5.1"]:
        assert hdk_line_floor("25.0.X") <= hdk(v)
    assert hdk_line_floor("25.0.X") > hdk("24.1.0.1")


@pytest.mark.parametrize("line", ["25.X", "X", "25.0.1.X", "25.0.X/", "/25.0.X", "", "25.0.Y", "25.0.X.1", "abc"])
def test_bad_hdk_line_names_raise(line):
    with pytest.raises(VersionError) as info:
        hdk_line_floor(line)
    assert repr(line) in info.value.message and "HDK line" in info.value.message
    with pytest.raises(VersionError):
        hdk_matches_line("25.0.0", line)


@pytest.mark.parametrize(
    "version,line,expected",
    [
        ("25.0.RC1", "25.0.X", True),
        ("25.0.rc1.1", "25.0.X", True),
        ("25.0.3", "25.0.X", True),
        ("25.0.3.1", "25.0.X", True),
        ("25.2.0", "25.0.X", False),
        ("24.1.0", "25.0.X", False),
        ("250.0.0", "25.0.X", False),
        ("26.0.RC1", "26.0.RC1/25.7.RC1", True),
        ("25.7.rc1", "26.0.RC1/25.7.RC1", True),
        ("25.7.rc1.6", "26.0.RC1/25.7.RC1", True),
        ("25.7.RC2", "26.0.RC1/25.7.RC1", False),
        ("26.0.0", "26.0.RC1/25.7.RC1", False),
        ("26.1.1", "26.1.1", True),
        ("26.1.1.2", "26.1.1", True),
        ("26.1.1.b083", "26.1.1", True),
        ("26.1.10", "26.1.1", False),
        ("26.1.0", "26.1.1", False),
    ],
)
def test_hdk_matches_line(version, line, expected):
    assert hdk_matches_line(version, line) is expected
    assert hdk_matches_line(hdk(version), line) is expected


def test_hdk_matches_line_rejects_other_kinds():
    with pytest.raises(TypeError):
        hdk_matches_line(cann("8.0.0"), "25.0.X")
    with pytest.raises(VersionError):
        hdk_matches_line("8.0.T6.1", "25.0.X")


# --- every version string in the knowledge base parses ----------------------------


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)


def test_every_version_in_the_knowledge_base_parses():
    compat = yaml.safe_load((DATA / "ascend-compat.yaml").read_text())
    seen = {"cann": 0, "line": 0, "hdk": 0, "firmware": 0}
    for release in compat["cann_hdk"]["releases"]:
        cann(release["version"])
        seen["cann"] += 1
        for key in ("paired_hdk", "paired_hdk_all", "paired_hdk_by_product", "supported_hdk", "not_supported_hdk", "min_hdk_line"):
            for line in _strings(release.get(key)):
                hdk_line_floor(line)
                seen["line"] += 1
    for column in compat["cann_hdk"]["rule"]["matrix_from_cann_9_2_0_release_notes"]["columns"]:
        hdk_line_floor(column)
    for pair in compat["hdk_driver_firmware"]["observed_pairs"]:
        for key in ("driver", "hdk"):
            if pair.get(key):
                hdk(pair[key])
                seen["hdk"] += 1
        for text in _strings(pair.get("firmware")):
            firmware(text)
            seen["firmware"] += 1
    for form in ("8.0.RC2.alpha003", "8.0.0.alpha001", "8.5.0.alpha002", "8.0.RC2.beta1", "6.3.RC3.1", "8.0.T6"):
        cann(form)
    assert all(seen.values()), seen


def test_paired_driver_never_goes_down_as_cann_goes_up():
    """The official installer pairs each CANN with an HDK; both orders must agree."""
    packages = json.loads((DATA / "cann-packages.json").read_text())
    pairs = []
    for version, entry in packages["cann"].items():
        npu = [r["version"] for r in entry.get("requires") or [] if r.get("name") == "NPU"]
        if npu:
            pairs.append((cann(version), hdk(npu[0])))
    assert len(pairs) >= 10
    pairs.sort()
    drivers = [driver for _, driver in pairs]
    assert drivers == sorted(drivers), [(str(c), str(d)) for c, d in pairs]
    for version in packages["npu"]:
        hdk(version)


# --- python packages ----------------------------------------------------------------


def test_python_package():
    v = python_package("2.1.0rc1")
    assert isinstance(v, Version)
    assert python_package("2.1.0rc1") < python_package("2.1.0") < python_package("2.1.0.post5")
    assert python_package("2.1.0.rc1") == v
    assert python_package("2.5.1.post1.dev20250619") < python_package("2.5.1.post1")


@pytest.mark.parametrize("text", ["8.0.RC2.alpha003", "24.1.rc2.2", "abc", "", "2.1.0 rc1x"])
def test_python_package_invalid_is_a_version_error(text):
    with pytest.raises(VersionError) as info:
        python_package(text)
    assert repr(text) in info.value.message and "PEP 440" in info.value.message
    assert info.value.__cause__ is None


def test_python_package_non_string():
    with pytest.raises(VersionError):
        python_package(2.1)  # type: ignore[arg-type]


# --- the module must work standalone inside an image --------------------------------

STANDALONE_CHECK = textwrap.dedent(
    """
    import importlib.util, sys
    sys.path.insert(0, sys.argv[1])
    assert importlib.util.find_spec("builder") is None, "builder must not be importable"
    assert importlib.util.find_spec("packaging") is None, "packaging must not be importable"
    import versions
    assert "builder" not in sys.modules
    assert versions.cann("8.0.RC2") == versions.cann("8.0.RC2.beta1")
    assert versions.hdk("26.1.0.b083") > versions.hdk("26.1.0")
    assert versions.firmware("7.5.0.1.129") < versions.firmware("9.0.0.105.229")
    assert versions.hdk_line_floor("26.0.RC1/25.7.RC1").text == "25.7.RC1"
    try:
        versions.cann("8.0")
    except ValueError as e:  # the stand-in UserError is a ValueError
        assert isinstance(e, versions.VersionError) and isinstance(e, versions.UserError)
        assert "'8.0'" in e.message and "8.0.RC1" in e.fix and "fix:" in str(e)
    else:
        raise AssertionError("no error")
    try:
        versions.python_package("2.1.0")
    except versions.UserError as e:
        assert "packaging" in e.message and "pip install packaging" == e.fix
    else:
        raise AssertionError("no error")
    print("standalone ok")
    """
)


def test_imports_standalone_without_builder_or_packaging(tmp_path):
    (tmp_path / "versions.py").write_bytes(Path(versions_module.__file__).read_bytes())
    (tmp_path / "check.py").write_text(STANDALONE_CHECK)
    # -I: no PYTHONPATH, user site or cwd on sys.path; -S: no site-packages at all,
    # so neither the editable `builder` install nor `packaging` can be found.
    result = subprocess.run(
        [sys.executable, "-I", "-S", str(tmp_path / "check.py"), str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "standalone ok" in result.stdout


def test_source_is_python_38_syntax():
    """Images with CANN 7.0 ship Python 3.8; the standalone copy must load there."""
    source = Path(versions_module.__file__).read_text()
    ast.parse(source, feature_version=(3, 8))
    for newer in (".removeprefix(", ".removesuffix(", "strict=", "match_args"):
        assert newer not in source, newer


# --- property tests -------------------------------------------------------------------

num = st.integers(min_value=0, max_value=120)
small = st.integers(min_value=0, max_value=12)
lead0 = st.sampled_from(["", "0", "00"])  # alpha002, b083: leading zeros are allowed
rc = st.sampled_from(["RC", "rc", "Rc"])


def _fmt(template: str):
    return lambda *parts: template.format(*parts)


cann_text = st.one_of(
    st.builds(_fmt("{}.{}.T{}"), small, small, num),
    st.builds(_fmt("{}.{}.{}{}"), small, small, rc, small),
    st.builds(_fmt("{}.{}.{}{}.alpha{}{}"), small, small, rc, small, lead0, num),
    st.builds(_fmt("{}.{}.{}{}.beta{}"), small, small, rc, small, small),
    st.builds(_fmt("{}.{}.{}{}.{}"), small, small, rc, small, small),
    st.builds(_fmt("{}.{}.{}"), small, small, small),
    st.builds(_fmt("{}.{}.{}.alpha{}{}"), small, small, small, lead0, num),
    st.builds(_fmt("{}.{}.{}.beta{}"), small, small, small, small),
    st.builds(_fmt("{}.{}.{}-beta.{}"), small, small, small, small),
)
hdk_text = st.one_of(
    st.builds(_fmt("{}.{}.T{}"), num, small, num),
    st.builds(_fmt("{}.{}.{}{}"), num, small, rc, small),
    st.builds(_fmt("{}.{}.{}{}.{}"), num, small, rc, small, small),
    st.builds(_fmt("{}.{}.{}{}.b{}{}"), num, small, rc, small, lead0, num),
    st.builds(_fmt("{}.{}.{}"), num, small, small),
    st.builds(_fmt("{}.{}.{}.{}"), num, small, small, small),
    st.builds(_fmt("{}.{}.{}.b{}{}"), num, small, small, st.sampled_from(["", "0", "00"]), num),
)
firmware_text = st.builds(_fmt("{}.{}.{}.{}.{}"), small, small, small, num, st.integers(0, 999))

KIND_TEXT = {"cann": cann_text, "hdk": hdk_text, "firmware": firmware_text}
kind_st = st.sampled_from(sorted(KIND_TEXT))


@st.composite
def same_kind(draw, n):
    kind = draw(kind_st)
    return [PARSERS[kind](draw(KIND_TEXT[kind])) for _ in range(n)]


@settings(max_examples=400)
@given(same_kind(2))
def test_order_is_total_and_consistent_with_eq_and_hash(pair):
    a, b = pair
    assert [a < b, a == b, a > b].count(True) == 1
    assert (a <= b) == (a < b or a == b) and (a >= b) == (a > b or a == b)
    assert (a != b) == (not a == b)
    if a == b:
        assert hash(a) == hash(b) and a.release == b.release
    assert (a < b) == (a.key < b.key)


@settings(max_examples=400)
@given(same_kind(3))
def test_order_is_transitive(triple):
    for a, b, c in itertools.permutations(triple):
        if a < b and b < c:
            assert a < c
        if a == b and b == c:
            assert a == c
        if (a < b and b == c) or (a == b and b < c):
            assert a < c
        if a <= b and b <= c:
            assert a <= c
    low, mid, high = sorted(triple)
    assert low <= mid <= high


@given(kind_st.flatmap(lambda kind: st.tuples(st.just(kind), KIND_TEXT[kind])))
def test_round_trip(kind_and_text):
    kind, text = kind_and_text
    v = PARSERS[kind](text)
    assert v.text == str(v) == text and v.kind == kind
    assert PARSERS[kind](str(v)) == v
    assert parse(str(v), kind) == v
    assert hash(PARSERS[kind](str(v))) == hash(v)
    assert v.release == tuple(int(p) for p in text.split(".")[:2])


@given(st.sampled_from(["cann", "hdk"]).flatmap(lambda k: st.tuples(st.just(k), KIND_TEXT[k])))
def test_rc_spelling_never_matters(kind_and_text):
    kind, text = kind_and_text
    assert PARSERS[kind](text) == PARSERS[kind](text.replace("rc", "RC").replace("Rc", "RC"))


cann_release_text = st.one_of(
    st.builds(_fmt("{}.{}.{}{}"), small, small, rc, small),
    st.builds(_fmt("{}.{}.{}"), small, small, small),
)


@given(cann_release_text, small)
def test_cann_beta_community_name_equals_the_release(text, n):
    community = cann(f"{text}.beta{n}")
    assert community == cann(text) and hash(community) == hash(cann(text))
    assert cann(f"{text}.alpha{n}") < cann(text)


@given(st.text(max_size=20))
def test_arbitrary_text_parses_or_raises_version_error(text):
    for parse_ in PARSERS.values():
        try:
            v = parse_(text)
        except VersionError as err:
            assert repr(text) in err.message
        else:
            assert v.text == text and text.isascii() and " " not in text and "\n" not in text


# --- oracles: where another implementation is right, we must agree with it -----------


def _sign(x):
    return (x > 0) - (x < 0)


def _cmp(a, b):
    return _sign((a > b) - (a < b))


def npu_cann_num(major, minor, release=-1, rc=-51, t=-1, alpha=0, weight=0, pre=0):
    """torch_npu's VersionToNum packing (GetCANNInfo.cpp), for oracle use only."""
    return (
        (major + 1) * 100000000
        + (minor + 1) * 1000000
        + (release + 1) * 10000
        + (rc + 1) * 100
        + 5000
        + (t + 1) * 100
        - (100 - alpha)
        - weight
        + pre
    )


def npu_driver_num(major, minor, release=-1, rc=-51, t=-1, patch=0):
    """torch_npu's DriverVersionToNum packing (GetCANNInfo.cpp), for oracle use only."""
    return (major + 1) * 100000000 + (minor + 1) * 1000000 + (release + 1) * 10000 + (rc + 1) * 100 + 5000 + (t + 1) * 100 + patch


# Forms where torch_npu and the facts doc agree, with numbers inside the ranges its
# packing can hold (T < 50, RC < 46, minor and Z < 99, alpha < 100). torch_npu differs on
# RCn.alphaNNN (it puts it after RCn) and X.Y.Z.betaN (a pre-release there): not drawn.
npu_cann = st.one_of(
    st.builds(lambda M, m, t: (f"{M}.{m}.T{t}", npu_cann_num(M, m, t=t)), small, st.integers(0, 98), st.integers(0, 49)),
    st.builds(lambda M, m, r: (f"{M}.{m}.RC{r}", npu_cann_num(M, m, rc=r)), small, st.integers(0, 98), st.integers(1, 45)),
    st.builds(lambda M, m, z: (f"{M}.{m}.{z}", npu_cann_num(M, m, release=z)), small, st.integers(0, 98), st.integers(0, 98)),
    st.builds(
        lambda M, m, z, a: (f"{M}.{m}.{z}.alpha{a:03d}", npu_cann_num(M, m, release=z, weight=300, pre=a)),
        small, st.integers(0, 98), st.integers(0, 98), st.integers(1, 99),
    ),
)
npu_driver = st.one_of(
    st.builds(lambda M, m, t: (f"{M}.{m}.T{t}", npu_driver_num(M, m, t=t)), num, st.integers(0, 98), st.integers(0, 49)),
    st.builds(lambda M, m, r: (f"{M}.{m}.rc{r}", npu_driver_num(M, m, rc=r)), num, st.integers(0, 98), st.integers(1, 48)),
    st.builds(
        lambda M, m, r, k: (f"{M}.{m}.RC{r}.{k}", npu_driver_num(M, m, rc=r, patch=k)),
        num, st.integers(0, 98), st.integers(1, 48), st.integers(0, 99),
    ),
    st.builds(lambda M, m, z: (f"{M}.{m}.{z}", npu_driver_num(M, m, release=z)), num, st.integers(0, 98), st.integers(0, 98)),
    st.builds(
        lambda M, m, z, k: (f"{M}.{m}.{z}.{k}", npu_driver_num(M, m, release=z, patch=k)),
        num, st.integers(0, 98), st.integers(0, 98), st.integers(0, 9999),
    ),
)


@settings(max_examples=500)
@given(npu_cann, npu_cann)
def test_cann_agrees_with_torch_npu_where_the_facts_do(a, b):
    (ta, na), (tb, nb) = a, b
    assert _cmp(cann(ta), cann(tb)) == _cmp(na, nb), (ta, tb)


@settings(max_examples=500)
@given(npu_driver, npu_driver)
def test_hdk_agrees_with_torch_npu_where_the_facts_do(a, b):
    (ta, na), (tb, nb) = a, b
    assert _cmp(hdk(ta), hdk(tb)) == _cmp(na, nb), (ta, tb)


pep440_ok = st.one_of(
    st.builds(_fmt("{}.{}.RC{}"), small, small, st.integers(1, 12)),
    st.builds(_fmt("{}.{}.{}"), small, small, small),
)


@settings(max_examples=300)
@given(pep440_ok, pep440_ok)
def test_agrees_with_packaging_on_plain_rc_and_final_releases(a, b):
    """packaging is right for X.Y.RCn and X.Y.Z alone (facts doc)."""
    assert _cmp(cann(a), cann(b)) == _cmp(Version(a), Version(b))


@given(firmware_text, firmware_text)
def test_firmware_is_numeric_field_by_field(a, b):
    assert _cmp(firmware(a), firmware(b)) == _cmp(tuple(map(int, a.split("."))), tuple(map(int, b.split("."))))


def test_packaging_gets_these_wrong_and_we_do_not():
    """The module docstring's claims, checked against packaging itself."""
    assert Version("8.0.0.alpha001") < Version("8.0.RC3")
    assert cann("8.0.0.alpha001") > cann("8.0.RC3")
    assert Version("8.0.0.beta1") < Version("8.0.0")
    assert cann("8.0.0.beta1") == cann("8.0.0")
    assert Version("26.1.0.b083") < Version("26.1.0")
    assert hdk("26.1.0.b083") > hdk("26.1.0")
    for text in ["8.0.RC2.alpha003", "8.0.RC2.beta1", "6.3.RC3.1", "24.1.rc2.2", "25.0.rc1.1", "8.0.T6"]:
        with pytest.raises(InvalidVersion):
            Version(text)


def test_a_version_with_thousands_of_digits_is_a_version_error_not_a_crash():
    versions = versions_module
    """Python refuses int() of 4,300+ digits (ValueError); no part of a real version has more than 9."""
    huge = "9" * 5000
    for kind, text in (("cann", f"{huge}.0.RC1"), ("cann", f"8.0.RC{huge}"), ("hdk", f"24.1.{huge}"),
                       ("firmware", f"7.5.0.1.{huge}")):
        with pytest.raises(versions.VersionError):
            getattr(versions, kind)(text)
        assert versions.lenient(kind, text) is None
    assert versions.firmware_in_ranges("7.5.0.1.129", [("7.0.0", f"7.{huge}.0")]) is None
    assert versions.cann("8.0.RC123456789").key > versions.cann("8.0.RC1").key  # 9 digits still read


def test_a_python_package_version_of_any_length_is_a_version_error():
    with pytest.raises(UserError) as refused:
        versions_module.python_package("1" * 5000)
    assert "is not a valid Python package version" in refused.value.message
    assert versions_module.lenient("python_package", "1" * 5000) is None
