"""driver_ordinal: an integer per HDK version whose order is the versions' order (for Kubernetes' `Gt`)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builder.versions import VersionError, driver_ordinal, hdk

INT64_MAX = 2 ** 63 - 1


@st.composite
def hdk_texts(draw) -> str:
    """HDK versions in every form the grammar accepts (T, RC, release; .k patch or .bNNN build)."""
    line = f"{draw(st.integers(0, 999))}.{draw(st.integers(0, 999))}"
    stage = draw(st.sampled_from(["T", "RC", "rc", ""]))
    number = draw(st.integers(0, 999))
    if stage.upper() == "T":
        return f"{line}.T{number}"
    tail = draw(st.sampled_from(["", "patch", "build"]))
    suffix = {"": "", "patch": f".{draw(st.integers(0, 999))}",
              "build": f".b{draw(st.integers(0, 9999)):03d}"}[tail]
    return f"{line}.{stage}{number}{suffix}"


@settings(max_examples=400, deadline=None)
@given(hdk_texts(), hdk_texts())
def test_ordinals_order_exactly_as_the_versions_do(a, b):
    va, vb = hdk(a), hdk(b)
    oa, ob = driver_ordinal(a), driver_ordinal(b)
    assert (oa < ob) == (va < vb)
    assert (oa == ob) == (va == vb)
    assert 0 <= oa <= INT64_MAX  # Kubernetes parses a Gt/Lt value as a 64-bit integer


@pytest.mark.parametrize("chain", [
    # the documented HDK order (builder/versions.py), lowest first
    ["24.1.T1", "24.1.RC1", "24.1.rc2", "24.1.rc2.2", "24.1.RC3", "24.1.RC3.b080", "24.1.0", "24.1.0.b083",
     "24.1.0.1", "24.1.1", "25.0.RC1", "25.0.rc1.1", "25.2.0", "26.1.0.b083"],
    ["6.0.0", "23.0.RC1", "23.0.2.1", "24.1.RC3"],
])
def test_known_versions_keep_their_order(chain):
    ordinals = [driver_ordinal(v) for v in chain]
    assert ordinals == sorted(ordinals) and len(set(ordinals)) == len(ordinals)


def test_equal_spellings_share_an_ordinal_and_parsed_versions_are_accepted():
    assert driver_ordinal("24.1.rc3") == driver_ordinal("24.1.RC3") == driver_ordinal(hdk("24.1.RC3"))


def test_a_field_too_wide_is_refused_not_wrapped():
    # 1000 in the major would carry into the next field's digits and tie with another version
    with pytest.raises(VersionError, match="major 1000 has more than 3 digits"):
        driver_ordinal("1000.0.0")
    with pytest.raises(VersionError, match="build 10000"):
        driver_ordinal("24.1.0.b10000")


def test_unreadable_text_is_a_clear_error():
    with pytest.raises(VersionError, match="not a valid HDK"):
        driver_ordinal("24.1")
