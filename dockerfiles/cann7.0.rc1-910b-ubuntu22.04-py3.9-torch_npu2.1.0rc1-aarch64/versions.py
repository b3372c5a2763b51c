"""Parse and totally order Ascend version strings (CANN, HDK driver, NPU firmware).

Why not ``packaging.version``? It is right for torch and torch_npu (PEP 440), and
wrong for CANN and HDK, whose strings only look like PEP 440:

- ``8.0.0.alpha001`` parses as ``8.0.0a1``, which packaging puts *before*
  ``8.0.RC3`` (``8.0rc3``); Huawei shipped it after: 8.0.RC3 < 8.0.0.alpha001 < 8.0.0.
- ``8.0.0.beta1`` parses as the pre-release ``8.0.0b1`` < 8.0.0, but it is the
  community-edition name of the commercial 8.0.0 itself: they are equal.
- ``26.1.0.b083`` parses as the beta ``26.1.0b83`` < 26.1.0, but ``.bNNN`` is a
  driver build number *after* the release.
- ``8.0.RC2.alpha003``, ``8.0.RC2.beta1``, ``6.3.RC3.1``, ``24.1.rc2.2``,
  ``25.0.rc1.1`` and ``8.0.T6`` raise ``InvalidVersion``.

So each kind gets its own small grammar and a sort-key tuple; an ``AscendVersion``
compares by that key. The orders, per ``X.Y`` line (``release``):

CANN     ``X.Y.Tn < X.Y.RC1.alphaN < X.Y.RC1 (== .RC1.betaN) < X.Y.RC1.m < X.Y.RC2 ...
         < X.Y.0.alphaN < X.Y.0-beta.N < X.Y.0 (== X.Y.0.betaN) < X.Y.1 ...``
HDK      ``YY.N.Tn < YY.N.RC1 < YY.N.RC1.bNNN < YY.N.RC1.k ... < YY.N.0 < YY.N.0.bNNN
         < YY.N.0.k < YY.N.1 ...`` (``rc`` and ``RC`` are the same)
firmware five numeric fields ``A.B.C.D.E``, compared as numbers.

This module is also copied into Docker images and imported there on its own (as
``versions``, without the ``builder`` package and without ``packaging``): keep it
stdlib-only at import time and valid Python 3.8.

>>> sorted([cann("8.0.0"), cann("8.0.0.alpha001"), cann("8.0.RC3")])
[cann('8.0.RC3'), cann('8.0.0.alpha001'), cann('8.0.0')]
>>> hdk("26.1.0.b083") > hdk("26.1.0")
True
"""

from __future__ import annotations

import functools
import re
from typing import Any, Dict, List, Optional, Tuple, Union

try:
    from builder.errors import UserError
except ImportError:  # standalone copy inside an image: no `builder` package there

    class UserError(ValueError):  # type: ignore[no-redef]
        """Stand-in for ``builder.errors.UserError`` with the same constructor."""

        def __init__(
            self,
            message: str,
            fix: str = "",
            where: Any = None,
            field: str = "",
            exit_code: int = 2,
        ) -> None:
            super().__init__(message)
            self.message = message
            self.fix = fix
            self.where = where
            self.field = field
            self.exit_code = exit_code

        def __str__(self) -> str:
            tail = "\n  fix: " + self.fix if self.fix else ""
            return self.message + tail


__all__ = [
    "AscendVersion",
    "VersionError",
    "cann",
    "driver_ordinal",
    "firmware",
    "hdk",
    "hdk_line_floor",
    "hdk_matches_line",
    "parse",
    "python_package",
]


class VersionError(UserError):
    """A version string that matches none of the accepted forms of its kind.

    ``text`` and ``kind`` hold the offending value and the kind it was read as.
    """

    def __init__(
        self, message: str, fix: str = "", *, text: Any = None, kind: str = "", **kwargs: Any
    ) -> None:
        super().__init__(message, fix, **kwargs)
        self.text = text
        self.kind = kind


# --- grammars -----------------------------------------------------------------
# [0-9] (not \d, which also matches non-ASCII digits) and fullmatch (not `$`,
# which also matches before a trailing newline).
_N = r"[0-9]{1,9}"  # no part of a real version has more digits; Python refuses int() of 4300+

_CANN_RE = re.compile(
    rf"(?P<major>{_N})\.(?P<minor>{_N})\."
    rf"(?:T(?P<t>{_N})"
    rf"|RC(?P<rc>{_N})(?:\.alpha(?P<rc_alpha>{_N})|\.beta(?P<rc_beta>{_N})|\.(?P<rc_patch>{_N}))?"
    rf"|(?P<z>{_N})(?:\.alpha(?P<z_alpha>{_N})|\.beta(?P<z_beta>{_N})|-beta\.(?P<z_pre>{_N}))?)",
    re.IGNORECASE,
)
_HDK_RE = re.compile(
    rf"(?P<major>{_N})\.(?P<minor>{_N})\."
    rf"(?:T(?P<t>{_N})|(?:RC(?P<rc>{_N})|(?P<z>{_N}))(?:\.b(?P<build>{_N})|\.(?P<patch>{_N}))?)",
    re.IGNORECASE,
)
_FIRMWARE_RE = re.compile(rf"{_N}\.{_N}\.{_N}\.{_N}\.{_N}")

_FORMS: Dict[str, str] = {
    "cann": "X.Y.RCn (8.0.RC1, also 8.3.rc1), X.Y.Z (8.0.0), X.Y.RCn.alphaNNN / "
    "X.Y.Z.alphaNNN (8.0.RC2.alpha003, 8.0.0.alpha001), X.Y.RCn.betaN / X.Y.Z.betaN "
    "(8.0.RC2.beta1, 8.0.0.beta1), X.Y.Z-beta.N (8.5.0-beta.1), X.Y.RCn.m (6.3.RC3.1), "
    "X.Y.Tn (8.0.T63)",
    "hdk": "YY.N.RCn (24.1.RC3, also 24.1.rc3), YY.N.M (24.1.0), a .k patch "
    "(24.1.rc2.2, 23.0.2.1), a .bNNN build (26.1.0.b083), YY.N.Tn (24.1.T1)",
    "firmware": "five numeric fields A.B.C.D.E (7.5.0.1.129)",
    "python_package": "a PEP 440 version (2.1.0, 2.1.0rc1, 2.1.0.post5)",
    "hdk_line": "YY.N.X for a whole line (25.0.X), an HDK version (26.1.1), or "
    "alternatives joined by / (26.0.RC1/25.7.RC1)",
}
_LABELS: Dict[str, str] = {
    "cann": "CANN version",
    "hdk": "HDK (NPU driver) version",
    "firmware": "NPU firmware version",
    "python_package": "Python package version (PEP 440)",
    "hdk_line": "HDK line name",
}

# Stages inside one X.Y line.
_T, _RC, _FINAL = 0, 1, 2
# Pre-release ranks inside one RCn or X.Y.Z: alphaNNN < -beta.N < the release itself.
_ALPHA, _BETA_PRE, _RELEASE = 0, 1, 2

Key = Tuple[int, ...]


def _fail(text: Any, kind: str) -> VersionError:
    what = f"{text!r} is not a valid {_LABELS[kind]}"
    if not isinstance(text, str):
        what += f": got a {type(text).__name__}, versions are strings (quote them in YAML)"
    return VersionError(what, "write it in one of these forms: " + _FORMS[kind], text=text, kind=kind)


def _numbers(m: "re.Match[str]") -> Dict[str, int]:
    """The match's groups (all numeric) that took part in it; one that did not is absent."""
    return {k: int(v) for k, v in m.groupdict().items() if v is not None}


def _cann_key(m: "re.Match[str]") -> Key:
    g = _numbers(m)
    line = (g["major"], g["minor"])
    if "t" in g:
        # Internal test builds (8.0.T6, 8.0.T63) sort before every RC of their line,
        # by number. torch_npu's VersionToNum means the same (Tn gets 100*n, RCn gets
        # 5000+100*n) but its packing overflows from T51 on: it gives 8.0.T63 the
        # number of 8.0.RC13. A version.cfg sample shows 8.0.T63 was built between
        # 8.0.RC3 and 8.0.0, so the string cannot place T builds among the RCs;
        # below RC1 is the conservative choice: a test build never satisfies a
        # ">= X.Y.RCn" requirement.
        return line + (_T, g["t"], _RELEASE, 0, 0)
    if "rc" in g:
        if "rc_alpha" in g:
            # alphaNNN shipped before its release (facts doc; torch_npu's VersionToNum
            # puts RCn.alphaNNN just after RCn, the facts doc wins).
            return line + (_RC, g["rc"], _ALPHA, g["rc_alpha"], 0)
        # RCn.betaN is the community name of the commercial RCn: same key.
        return line + (_RC, g["rc"], _RELEASE, 0, g.get("rc_patch", 0))
    if "z_alpha" in g:
        return line + (_FINAL, g["z"], _ALPHA, g["z_alpha"], 0)
    if "z_pre" in g:
        return line + (_FINAL, g["z"], _BETA_PRE, g["z_pre"], 0)
    # X.Y.Z.betaN == X.Y.Z (community edition name), unlike the pre-release X.Y.Z-beta.N.
    return line + (_FINAL, g["z"], _RELEASE, 0, 0)


def _hdk_key(m: "re.Match[str]") -> Key:
    g = _numbers(m)
    line = (g["major"], g["minor"])
    if "t" in g:
        return line + (_T, g["t"], 0, 0)  # as for CANN: before RC1 of the line
    stage, number = (_RC, g["rc"]) if "rc" in g else (_FINAL, g["z"])
    # A .bNNN build comes after its release and before the release's first .k patch.
    # torch_npu's packed integer adds a build number and a patch number to the same
    # low digits, which would tie 26.1.0.b001 with 26.1.0.1: we keep them apart.
    return line + (stage, number, g.get("patch", 0), g.get("build", 0))


def _firmware_key(m: "re.Match[str]") -> Key:
    return tuple(int(part) for part in m.group(0).split("."))


_GRAMMARS = {
    "cann": (_CANN_RE, _cann_key),
    "hdk": (_HDK_RE, _hdk_key),
    "firmware": (_FIRMWARE_RE, _firmware_key),
}


@functools.total_ordering
class AscendVersion:
    """One parsed CANN, HDK or firmware version; build it with `cann`, `hdk`, `firmware`.

    ``text`` is the original string (``str(v) == v.text``), ``kind`` is ``"cann"``,
    ``"hdk"`` or ``"firmware"``, ``release`` the ``(major, minor)`` line and ``key``
    the tuple it sorts by. Versions of one kind are totally ordered; equal versions
    (``8.0.RC2`` and ``8.0.RC2.beta1``) hash alike. Ordering versions of different
    kinds raises ``TypeError``; ``==`` between them is False.

    >>> v = cann("8.0.RC2.beta1")
    >>> (v.text, v.kind, v.release)
    ('8.0.RC2.beta1', 'cann', (8, 0))
    >>> v == cann("8.0.RC2") and hash(v) == hash(cann("8.0.RC2"))
    True
    """

    __slots__ = ("_text", "_kind", "_key")

    def __init__(self, text: str, kind: str, key: Key) -> None:
        self._text = text
        self._kind = kind
        self._key = key

    @property
    def text(self) -> str:
        return self._text

    @property
    def kind(self) -> str:
        return self._kind

    @property
    def key(self) -> Key:
        return self._key

    @property
    def release(self) -> Tuple[int, int]:
        return (self._key[0], self._key[1])

    def _other_key(self, other: object) -> Optional[Key]:
        if not isinstance(other, AscendVersion):
            return None
        if other._kind != self._kind:
            raise TypeError(
                f"cannot order {self._kind} version {self._text!r} against "
                f"{other._kind} version {other._text!r}"
            )
        return other._key

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AscendVersion):
            return NotImplemented
        return self._kind == other._kind and self._key == other._key

    def __lt__(self, other: object) -> bool:
        key = self._other_key(other)
        if key is None:
            return NotImplemented
        return self._key < key

    def __hash__(self) -> int:
        return hash((self._kind, self._key))

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"{self._kind}({self._text!r})"

    def __reduce__(self) -> Tuple[Any, Tuple[str, str]]:
        return (parse, (self._text, self._kind))

    def __setattr__(self, name: str, value: Any) -> None:
        if hasattr(self, "_key"):
            raise AttributeError("AscendVersion is immutable")
        object.__setattr__(self, name, value)


def parse(text: str, kind: str) -> AscendVersion:
    """Parse ``text`` as a version of ``kind`` (``"cann"``, ``"hdk"`` or ``"firmware"``).

    Raises `VersionError` (a `UserError`) naming the string when it matches no form.

    Examples:
    >>> parse("24.1.rc3", "hdk")
    hdk('24.1.rc3')
    >>> try:
    ...     parse("8.0", "cann")
    ... except VersionError as e:
    ...     print(e.message)
    '8.0' is not a valid CANN version
    """
    try:
        regex, key = _GRAMMARS[kind]
    except KeyError:
        raise ValueError(f"unknown version kind {kind!r}; expected one of {sorted(_GRAMMARS)}") from None
    match = regex.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise _fail(text, kind)
    return AscendVersion(text, kind, key(match))


def cann(text: str) -> AscendVersion:
    """Parse a CANN version (toolkit, kernels/ops, NNAL all share the numbering).

    Examples:
    >>> cann("8.0.RC2.alpha002") < cann("8.0.RC2") == cann("8.0.RC2.beta1") < cann("8.0.RC3")
    True
    >>> cann("8.0.RC3") < cann("8.0.0.alpha001") < cann("8.0.0") == cann("8.0.0.beta1")
    True
    >>> cann("8.5.0-beta.1") < cann("8.5.0") and cann("8.3.rc1") == cann("8.3.RC1")
    True
    >>> cann("8.0.T63") < cann("8.0.RC1")
    True
    >>> cann("8.0.RC2").release
    (8, 0)
    """
    return parse(text, "cann")


def hdk(text: str) -> AscendVersion:
    """Parse an Ascend HDK (NPU driver) version, e.g. from driver ``version.info``.

    Examples:
    >>> hdk("24.1.rc2") < hdk("24.1.rc2.2") < hdk("24.1.RC3") < hdk("24.1.0") < hdk("24.1.0.1")
    True
    >>> hdk("26.1.0") < hdk("26.1.0.b083")
    True
    >>> hdk("6.0.0") < hdk("23.0.RC1")
    True
    """
    return parse(text, "hdk")


def firmware(text: str) -> AscendVersion:
    """Parse an NPU firmware version: exactly five numeric fields.

    Examples:
    >>> firmware("7.3.0.1.231") < firmware("7.5.0.1.129") < firmware("9.0.0.105.229")
    True
    >>> try:
    ...     firmware("7.5.0.1")
    ... except VersionError as e:
    ...     print(e)
    '7.5.0.1' is not a valid NPU firmware version
      fix: write it in one of these forms: five numeric fields A.B.C.D.E (7.5.0.1.129)
    """
    return parse(text, "firmware")


# Decimal digits of each field of an HDK key in `driver_ordinal`, most significant first:
# major, minor, stage (T < RC < release), RC or Z number, .k patch, .bNNN build. 17 digits in all,
# so every ordinal is below 10**17 < 2**63: Kubernetes parses a `Gt`/`Lt` value as a 64-bit integer.
_ORDINAL_WIDTHS = (3, 3, 1, 3, 3, 4)
_ORDINAL_FIELDS = ("major", "minor", "stage", "RC or release number", ".k patch", ".bNNN build")


def driver_ordinal(version: Union[AscendVersion, str]) -> int:
    """An integer for an HDK (NPU driver) version that orders as the versions do.

    Kubernetes label selectors cannot compare dotted versions, but ``Gt``/``Lt`` compare
    integers: a node labelled with its driver's ordinal can be selected by "driver at
    least X" as ``Gt: ordinal(X) - 1``. The ordinal packs the version's sort key into
    fixed-width decimal fields, so ``a < b`` exactly when ``driver_ordinal(a) <
    driver_ordinal(b)`` and equal versions (``24.1.rc3``, ``24.1.RC3``) get one ordinal.
    A field wider than its width (a major above 999, a build above 9999; no HDK has
    come near) raises `VersionError` rather than wrap around.

    Parameters:
        version: an HDK version, parsed or as text (``24.1.RC3``, ``26.1.0.b083``).

    Examples:
    >>> driver_ordinal("24.1.RC3")
    2400110030000000
    >>> driver_ordinal("24.1.rc3") == driver_ordinal("24.1.RC3") < driver_ordinal("24.1.0")
    True
    >>> driver_ordinal("26.1.0") < driver_ordinal("26.1.0.b083") < driver_ordinal("26.1.0.1")
    True
    """
    v = version if isinstance(version, AscendVersion) else hdk(version)
    if v.kind != "hdk":
        raise TypeError(f"{v.kind} version {v.text!r} has no driver ordinal")
    ordinal = 0
    for value, width, field in zip(v.key, _ORDINAL_WIDTHS, _ORDINAL_FIELDS):
        if value >= 10 ** width:
            raise VersionError(
                f"HDK version {v.text!r} does not fit a driver ordinal: its {field} {value} has more than {width} digits",
                "no released Ascend driver has such a field; check the version (npu-smi info prints it)",
                text=v.text, kind="hdk")
        ordinal = ordinal * 10 ** width + value
    return ordinal


def _hdk_alternatives(line: str) -> List[Tuple[AscendVersion, bool]]:
    """(lowest version, names a whole YY.N line) for each /-separated alternative."""
    if not isinstance(line, str):
        raise _fail(line, "hdk_line")
    out = []
    for part in line.split("/"):
        head, dot, tail = part.rpartition(".")
        whole = bool(dot) and tail in ("X", "x")
        try:
            # "25.0.X" is the whole 25.0 line, whose lowest version is its first RC.
            out.append((parse(head + ".RC1" if whole else part, "hdk"), whole))
        except VersionError:
            raise _fail(line, "hdk_line") from None
    return out


def hdk_line_floor(line: str) -> AscendVersion:
    """Lowest HDK version a knowledge-base line name stands for.

    ``"25.0.X"`` is the whole 25.0 line, whose lowest version is its first RC;
    ``"26.0.RC1/25.7.RC1"`` lists alternatives and gives the lowest of them; a plain
    version gives itself. Internal test builds (``25.0.T1``) are not counted.

    Examples:
    >>> hdk_line_floor("25.0.X")
    hdk('25.0.RC1')
    >>> hdk_line_floor("26.0.RC1/25.7.RC1")
    hdk('25.7.RC1')
    >>> hdk_line_floor("26.1.1")
    hdk('26.1.1')
    """
    return min(version for version, _ in _hdk_alternatives(line))


def hdk_matches_line(version: Union[AscendVersion, str], line: str) -> bool:
    """Whether an HDK version belongs to a knowledge-base line name.

    ``"25.0.X"`` matches every 25.0 version. A plain version such as ``"26.1.1"``
    or ``"26.0.RC1"`` matches itself and its ``.k`` patches and ``.bNNN`` builds.
    ``"A/B"`` matches what either alternative matches. ``version`` may be a string.

    Examples:
    >>> hdk_matches_line("25.0.rc1.1", "25.0.X"), hdk_matches_line("25.2.0", "25.0.X")
    (True, False)
    >>> hdk_matches_line(hdk("25.7.RC1"), "26.0.RC1/25.7.RC1")
    True
    >>> hdk_matches_line("26.1.1.2", "26.1.1"), hdk_matches_line("26.1.10", "26.1.1")
    (True, False)
    """
    v = version if isinstance(version, AscendVersion) else hdk(version)
    if v.kind != "hdk":
        raise TypeError(f"{v.kind} version {v.text!r} cannot match an HDK line")
    for alt, whole_line in _hdk_alternatives(line):
        width = 2 if whole_line else 4  # (major, minor) or (major, minor, stage, number)
        if v.key[:width] == alt.key[:width]:
            return True
    return False


@functools.lru_cache(maxsize=8192)
def lenient(kind: str, text: Any) -> Optional[Any]:
    """``text`` parsed as a ``kind`` version, or None when it is empty or no such version.

    The one lenient parse every module uses for outside text (labels, host files, the
    knowledge base); cached, since the same few dozen strings come back all the time.
    ``kind`` is ``"cann"``, ``"hdk"``, ``"firmware"`` or ``"python_package"`` (PEP 440).

    Examples:
    >>> lenient("hdk", "24.1.rc3"), lenient("hdk", "24.1"), lenient("cann", None)
    (hdk('24.1.rc3'), None, None)
    >>> str(lenient("python_package", "2.1.0.rc1"))
    '2.1.0rc1'
    """
    if text is None or text == "":
        return None
    try:
        if kind == "python_package":
            return python_package(str(text))
        return parse(str(text), kind)
    except (VersionError, TypeError, ValueError):  # packaging's InvalidVersion is a ValueError
        return None


def minimum(kind: str, need: Any) -> Optional[AscendVersion]:
    """The lowest version a requirement stands for: itself, or for an HDK line name
    (``25.2.X``, ``26.0.RC1/25.7.RC1``) the line's first release; None when unreadable.

    Examples:
    >>> minimum("hdk", "25.0.X"), minimum("hdk", "24.1.RC3"), minimum("firmware", "7.5")
    (hdk('25.0.RC1'), hdk('24.1.RC3'), None)
    """
    found = lenient(kind, need)
    if found is None and kind == "hdk" and isinstance(need, str):
        try:
            found = hdk_line_floor(need)
        except VersionError:
            return None
    return found


def meets_minimum(kind: str, have: Any, need: Any) -> Optional[bool]:
    """Whether a node's ``have`` is at least an image's ``need`` (``kind`` ``"hdk"`` for
    the driver, ``"firmware"``); None when either cannot be read.

    The one rule "node driver >= image minimum": ``validate``, ``pull``, ``run``,
    ``doctor`` and the smoke program (which carries this file) all decide with it.

    Examples:
    >>> meets_minimum("hdk", "25.0.rc1.1", "25.0.RC1"), meets_minimum("hdk", "24.1.RC3", "25.0.X")
    (True, False)
    >>> meets_minimum("hdk", "unknown", "25.0.RC1") is None
    True
    """
    have_v, need_v = lenient(kind, have), minimum(kind, need)
    if have_v is None or need_v is None:
        return None
    return have_v >= need_v


def firmware_in_ranges(firmware_text: Any, ranges: Any) -> Optional[bool]:
    """Whether a firmware version is inside a driver's ``compatible_version_fw`` ranges.

    The bounds have three fields (``[7.0.0,7.5.99]``), the firmware five: they are
    compared on the bound's fields. None when nothing can be decided. ``validate`` and
    ``doctor`` both decide with this.

    Examples:
    >>> firmware_in_ranges("7.5.0.1.129", [("7.0.0", "7.5.99")]), firmware_in_ranges("7.7.0.1.231", [("7.0.0", "7.5.99")])
    (True, False)
    >>> firmware_in_ranges("7.5", [("7.0.0", "7.5.99")]) is None
    True
    """
    parsed = lenient("firmware", firmware_text)
    if parsed is None:
        return None
    decided = False
    for low, high in ranges:
        bounds = [tuple(int(p) for p in str(b).strip().rstrip(".").split(".")) if re.fullmatch(rf"{_N}(\.{_N})*\.?", str(b).strip()) else None
                  for b in (low, high)]
        lo, hi = bounds
        if lo is None or hi is None:
            continue
        decided = True
        if lo <= parsed.key[:len(lo)] and parsed.key[:len(hi)] <= hi:
            return True
    return False if decided else None


def python_package(text: str) -> Any:
    """Parse a PEP 440 version (torch, torch_npu): a ``packaging.version.Version``.

    PEP 440 is right for these (2.1.0rc1 < 2.1.0 < 2.1.0.post1); ``packaging`` is
    imported only here, so the module itself stays stdlib-only.

    Examples:
    >>> python_package("2.1.0rc1") < python_package("2.1.0") < python_package("2.1.0.post5")
    True
    >>> python_package("2.1.0.rc1") == python_package("2.1.0rc1")
    True
    """
    try:
        from packaging.version import Version
    except ImportError:
        raise UserError(
            f"cannot parse python package version {text!r}: the 'packaging' module is not installed",
            "pip install packaging",
        ) from None
    if not isinstance(text, str):
        raise _fail(text, "python_package")
    try:
        return Version(text)
    except ValueError:  # InvalidVersion, or a part of 4300+ digits that int() refuses
        raise _fail(text, "python_package") from None
