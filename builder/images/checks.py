"""Compatibility rules over cells: refuse impossible Ascend combinations early.

Each rule is one small function ``(cell, kb) -> findings`` with a stable id,
registered in `RULES`. A finding names the values involved and says how to fix
it, pointing at the line of the key that is wrong. ``null`` in the knowledge base
means "unknown", never "incompatible": unknowns give warnings, not errors.

Versions are compared with the rules in ``builder.versions``: the driver against the
CANN release's minimum with ``versions.meets_minimum`` (the rule pull, run, doctor and
the smoke program use too); installer names come from ``builder.installers``.

Example:
    >>> cell = Cell(id="c", image="i", os="ubuntu22.04", arch="x86_64", chip="910b", cann="8.0.RC3",
    ...             driver="23.0.RC3", firmware=None, python="3.10", torch="2.4.0", torch_npu="2.4.0", env="venv")
    >>> [(f.rule, f.message[:80]) for f in check([cell])]
    [('driver-too-old', 'min_driver 23.0.RC3 is below 24.1.RC3, the minimum HDK for CANN 8.0.RC3 (its pai')]
    >>> from dataclasses import replace
    >>> check([replace(cell, driver="24.1.rc3")])
    []
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterator, List, Mapping, Optional, Sequence, Tuple

from packaging.utils import canonicalize_name

from builder import commands, installers, knowledge, python_env, versions
from builder.errors import Finding, UserError
from builder.vocabulary import CANDIDATE_SUFFIX
from builder.images import own_wheel
from builder.images.downstream_checks import downstream_pins_fit
from builder.images.pin_checks import pins_match_torch_npu
from builder.images.product_checks import product_released
from builder.images.matrix import Cell

Findings = Iterator[Finding]

# Strict parses, cached (every cell compares against the same few dozen releases): a
# string that is no version becomes a version-syntax finding instead of None.
_cann = lru_cache(maxsize=4096)(versions.cann)
_hdk = lru_cache(maxsize=4096)(versions.hdk)


def _finding(cell: Cell, key: str, rule: str, message: str, fix: str, severity: str = "error") -> Finding:
    path, where = cell.locate(key)
    return Finding(rule, severity, message, fix, where, path)


def _parsed(cell: Cell, key: str, parse: Callable, out: List[Finding]):
    """Parse a version field; a syntax error becomes a finding instead of a crash."""
    text = getattr(cell, key)
    if not text:
        return None
    try:
        return parse(text)
    except versions.VersionError as exc:
        out.append(_finding(cell, key, "version-syntax", exc.message, exc.fix))
        return None


def _suggest_torch_npu(kb, cell: Cell) -> str:
    paired = kb.releases.torch_npu_for_cann(cell.cann)
    if not paired:
        return f"pick a torch_npu release from `ascend-build kb cann {cell.cann}` or PyPI"
    return f"for CANN {cell.cann} use " + " or ".join(r.version for r in paired[:3])


def torch_npu_published(cell: Cell, kb) -> Findings:
    """torch_npu must exist on PyPI (a made-up or unpublished version cannot be installed),
    unless the cell brings its own wheel (`own_wheel_fits` checks that one)."""
    if cell.cann_only or kb.releases.torch_npu(cell.torch_npu) is not None or cell.torch_npu_wheel:
        return
    named = kb.releases.unpublished(cell.torch_npu)
    why = ("is named in Huawei's tables but has no files on PyPI" if named
           else "was never published on PyPI")
    yield _finding(cell, "torch_npu", "torch-npu-unpublished", f"torch_npu {cell.torch_npu} {why}",
                   _suggest_torch_npu(kb, cell))


def torch_matches_pin(cell: Cell, kb) -> Findings:
    """torch_npu X.Y.Z[.postN] is built against torch X.Y.Z exactly."""
    release = kb.releases.torch_npu(cell.torch_npu)
    if release is None or not cell.torch:
        return
    try:
        same = versions.python_package(cell.torch).release == versions.python_package(release.torch).release
    except versions.VersionError as exc:
        yield _finding(cell, "torch", "version-syntax", exc.message, exc.fix)
        return
    if not same:
        yield _finding(cell, "torch", "torch-mismatch",
                       f"torch {cell.torch} does not match torch_npu {cell.torch_npu}, which requires torch {release.torch}",
                       f"set torch: {release.torch} (or leave torch out: it follows from torch_npu)")


def cann_paired(cell: Cell, kb) -> Findings:
    """Each torch_npu release is built for one CANN release. Another CANN is judged by the evidence
    Ascend's documents give (`kb.releases.cann_fit`): a published table of its PTA release that lists it
    (``cann-window``, a warning naming the document and row), a downstream that ships it
    (``cann-downstream``), a table that covers its PTA release and leaves it out (``cann-mismatch``,
    an error naming the table and the CANN releases it lists), a later release of the paired line
    (``cann-adjacent``), or no table at all (``cann-uncovered``, a warning; an error under --strict)."""
    release = kb.releases.torch_npu(cell.torch_npu)
    if release is None:
        if cell.torch_npu_wheel:  # a build of the cell's own: nothing published to pair it with
            yield _finding(cell, "torch_npu_wheel", "cann-pairing-unknown",
                           f"torch_npu {cell.torch_npu} (the cell's own wheel) has no published CANN pairing; "
                           f"CANN {cell.cann} is unconfirmed", "validate the image on an NPU host before relying on it",
                           severity="warning")
        return
    fit = kb.releases.cann_fit(cell.torch_npu, cell.cann)
    if release.cann is None and fit is None:
        yield from _cann_unpaired(cell, kb)
        return
    if fit is None or fit.kind == "paired":
        return  # an unparsable CANN is reported by cann_known
    paired = (f"torch_npu {cell.torch_npu} (PTA {fit.pta}) is paired with CANN {release.cann}" if fit.pta
              else f"torch_npu {cell.torch_npu} is paired with CANN {release.cann}")
    if release.cann is None:
        paired = f"torch_npu {cell.torch_npu} (PTA {fit.pta}) has no published CANN pairing"
    keep_paired = f", or set cann: {release.cann} for the published pair" if release.cann else ""
    if fit.kind == "window":  # published compatible, though not the pair: a warning naming the evidence
        yield _finding(cell, "cann", "cann-window",
                       f"{paired}; CANN {cell.cann} is not its pair, but a published table marks PTA {fit.pta} "
                       f"compatible with it ({_evidence(fit.sources)})",
                       "keep it (Ascend documents it compatible)" + keep_paired, severity="warning")
        return
    if fit.kind == "adjacent":
        line = ".".join(map(str, _cann(release.cann).release[:2]))
        yield _finding(cell, "cann", "cann-adjacent",
                       f"torch_npu {cell.torch_npu} is paired with CANN {release.cann} (published); CANN {cell.cann} "
                       f"is a later release of the same line ({line}), inferred compatible but not published",
                       f"validate the image on an NPU host, or set cann: {release.cann}", severity="warning")
        return
    if fit.kind == "downstream":
        yield _finding(cell, "cann", "cann-downstream",
                       f"torch_npu {cell.torch_npu} is paired with CANN {release.cann} (published); CANN {cell.cann} "
                       f"is not published for it, but a downstream project ships this pair ({fit.evidence})",
                       f"validate the image on an NPU host, or set cann: {release.cann}", severity="warning")
        return
    if fit.kind == "uncovered":
        yield _finding(cell, "cann", "cann-uncovered",
                       f"{paired}; no published table covers PTA {fit.pta or '(unknown)'} with CANN {cell.cann}, "
                       "so the pair is unconfirmed (`validate --strict` refuses it)",
                       f"set cann: {release.cann} for the published pair, or validate the image on an NPU host",
                       severity="warning")
        return
    listed = ", ".join(fit.compatible)
    yield _finding(cell, "torch_npu", "cann-mismatch",
                   f"{paired}, not CANN {cell.cann}: the published table that covers PTA {fit.pta} lists CANN "
                   f"{listed} for it, not {cell.cann} ({_evidence(fit.sources)})",
                   (f"set cann: {release.cann} or another CANN that table lists" if release.cann
                    else f"set cann: to one of {listed}") + f", or {_suggest_torch_npu(kb, cell)}")


def _evidence(sources: Sequence[str]) -> str:
    """The newest document and row a verdict rests on, and how many older ones say the same."""
    more = len(sources) - 1
    return sources[0] + (f"; {more} older release notes agree" if more > 0 else "") if sources else "no document"


def _cann_unpaired(cell: Cell, kb) -> Findings:
    """A torch_npu release with no published pairing that no table speaks of: bounded by the
    published pairs of older releases (inferred), else unconfirmed."""
    floor = kb.releases.cann_floor(cell.torch_npu)
    try:
        below = floor is not None and _cann(cell.cann) < _cann(floor[0])
    except versions.VersionError:
        return  # reported by cann_known
    if below:
        fitting = ", ".join(r.version for r in kb.releases.torch_npu_for_cann(cell.cann)[:3])
        yield _finding(cell, "cann", "cann-below-inferred",
                       f"torch_npu {cell.torch_npu} has no published CANN pairing, but the older torch_npu "
                       f"{floor[1]} is paired with CANN {floor[0]}, and a newer torch_npu never needs an older "
                       f"CANN (inferred): CANN {cell.cann} is older than {floor[0]}",
                       f"set cann: {floor[0]} or newer" + (f", or for CANN {cell.cann} use torch_npu {fitting}"
                                                           if fitting else ""))
        return
    inferred = f" (inferred: CANN {floor[0]} or newer, from torch_npu {floor[1]})" if floor else ""
    yield _finding(cell, "torch_npu", "cann-pairing-unknown",
                   f"no published CANN pairing for torch_npu {cell.torch_npu}; CANN {cell.cann} is unconfirmed"
                   + inferred,
                   "check Ascend's compatibility table; validate the image on an NPU host before relying on it",
                   severity="warning")


def cann_known(cell: Cell, kb) -> Findings:
    """An unknown CANN is most often a typo (8.0.rc3 vs 8.0.RC3 is fine, 8.4 does not exist), and
    nothing can vouch for it: an error, unless the cell says it is unlisted on purpose and
    carries what makes its CANN verifiable (its installers' sha256, or an image digest)."""
    out: List[Finding] = []
    parsed = _parsed(cell, "cann", _cann, out)
    yield from out
    if parsed is None:
        return
    known = kb.releases.cann_releases()
    if any(_cann(k) == parsed for k in known):
        return
    below = [k for k in known if _cann(k) < parsed][-1:]
    above = [k for k in known if _cann(k) > parsed][:1]
    nearest = ", ".join(below + above)
    if not cell.unlisted:
        yield _finding(cell, "cann", "cann-unknown",
                       f"CANN {cell.cann} is not a release the knowledge base knows (nearest: {nearest})",
                       "check the spelling (e.g. 8.0.RC3, 8.5.0; `ascend-build kb cann` lists the known releases), "
                       "or set unlisted: true with its installers' sha256 or an image digest")
        return
    verifiable = (cell.cann_source == "image" and "@sha256:" in (cell.cann_image or "")) or (
        cell.cann_source == "local" and len(dict(cell.sha256)) >= 2)
    if not verifiable:
        yield _finding(cell, "unlisted", "cann-unlisted-unverifiable",
                       f"CANN {cell.cann} is unlisted, and nothing makes its bytes verifiable",
                       "use cann_source: {local: DIR} with sha256: {TOOLKIT.run: HEX, OPS.run: HEX}, "
                       "or cann_source: {image: REF@sha256:DIGEST}")
        return
    yield _finding(cell, "unlisted", "cann-unlisted",
                   f"CANN {cell.cann} is unlisted on purpose: its pairings and minimum driver are unchecked "
                   f"(nearest known: {nearest})", "validate the image on an NPU host before relying on it",
                   severity="warning")


def python_has_wheel(cell: Cell, kb) -> Findings:
    """Python versions come from the wheel tags: torch_npu 2.3.1 has no cp311 wheel, for example."""
    release = kb.releases.torch_npu(cell.torch_npu)
    if release is None:
        return
    tags = release.python.get(cell.arch, ())
    minor = ".".join(cell.python.split(".")[:2])
    if minor not in tags:
        yield _finding(cell, "python", "python-no-wheel",
                       f"torch_npu {cell.torch_npu} has no wheel for Python {minor} on {cell.arch}",
                       f"use Python {' or '.join(tags) or '(none published for this arch)'}")


def python_within_cann(cell: Cell, kb) -> Findings:
    """Each CANN release's installation guide states the Pythons it supports, and the range
    moves from release to release: a Python outside it is an error naming the range and its
    source, unless Ascend's own images or a major downstream ship that CANN on that Python
    (then a warning naming them). A release whose guide the knowledge base lacks is unchecked."""
    stated = python_env.python_range(cell.cann)
    if stated is None or stated.allows(cell.python):
        return
    minor = ".".join(cell.python.split(".")[:2])
    shipped = stated.shipped.get(minor)
    if shipped:
        yield _finding(cell, "python", "python-outside-cann-shipped",
                       f"Python {minor} is outside {stated.text}, the Pythons CANN {cell.cann}'s installation guide "
                       f"supports (per {stated.source}), but it is shipped on that CANN: {shipped}",
                       f"validate the image on an NPU host, or use Python {stated.low} to {stated.high}",
                       severity="warning")
        return
    yield _finding(cell, "python", "python-outside-cann",
                   f"Python {minor} is outside {stated.text}, the Pythons CANN {cell.cann}'s installation guide "
                   f"supports (per {stated.source})",
                   f"use Python {stated.low} to {stated.high}, or a CANN release that supports Python {minor}")


def nnal_python(cell: Cell, kb) -> Findings:
    """The installation guides say which Pythons NNAL's Python library (torch_atb) needs (8.5.0:
    3.10 or 3.11): an ``nnal: true`` cell on another Python gets a warning (the guides say
    "install", not "only": NNAL's C++ libraries do not depend on the Python)."""
    stated = python_env.python_range(cell.cann) if cell.nnal else None
    if stated is None or stated.nnal_allows(cell.python) is not False:
        return
    minor = ".".join(cell.python.split(".")[:2])
    yield _finding(cell, "nnal", "nnal-python",
                   f"NNAL's Python library (torch_atb) of CANN {cell.cann} needs Python {' or '.join(stated.nnal)}; "
                   f"the cell has Python {minor} (per {stated.nnal_source})",
                   f"use Python {' or '.join(stated.nnal)}, or drop nnal: true if the image needs no torch_atb",
                   severity="warning")


def not_checked(cells: List[Cell], kb: Any = None) -> List[Finding]:
    """What `validate --strict` reports as not checked (a warning each, so --strict refuses it):
    a cell whose CANN release's Python range the knowledge base marks as not published or not
    found (``python_not_checked``), and one whose release's OS list it marks so (``os_not_checked``).
    Without --strict nothing is said: unknown is not incompatible."""
    kb = kb or knowledge.load()
    out = []
    for cell in cells:
        why = python_env.python_not_checked(cell.cann)
        if why:
            minor = ".".join(cell.python.split(".")[:2])
            out.append(_finding(cell, "python", "python-not-checked",
                                f"Python {minor} is not checked against CANN {cell.cann}: the knowledge base holds no "
                                f"Python range of that release ({why})",
                                "validate the image on an NPU host; when the release's installation guide is found, "
                                "add its range with its source to builder/data/python-env.yaml", severity="warning"))
        why_os = kb.environment.cann_os_not_checked(cell.cann)
        if why_os:
            out.append(_finding(cell, "os", "os-not-checked",
                                f"{cell.os} is not checked against CANN {cell.cann}: the knowledge base holds no list of "
                                f"the operating systems that release's installation guide names ({why_os})",
                                "validate the image on an NPU host; when the release's installation guide is found, "
                                "add its OS list with its source to builder/data/os.yaml (cann_os)", severity="warning"))
    return list(dict.fromkeys(out))


def os_listed(cell: Cell, kb) -> Findings:
    """Each installation guide names the OS families it installs CANN on (``os.yaml``'s
    ``cann_os``): a cell whose OS family the guide of its release does not name gets a warning.
    Not an error: the guides name families as options (the scenario selector, "other systems
    can follow these steps"), not a support statement per version, and an image's OS is not its
    host's. A list read only in part (``complete: false``) says nothing of a family it lacks."""
    stated = kb.environment.cann_os(cell.cann)
    family = kb.environment.os_family_name(cell.os)
    if stated is None or family is None or stated.names(family) or not stated.complete:
        return
    named = [o for o in kb.environment.os_ids() if (f := kb.environment.os_family_name(o)) and stated.names(f)]
    yield _finding(cell, "os", "os-not-listed",
                   f"CANN {cell.cann}'s installation guide names no {family} among the operating systems it installs "
                   f"on ({', '.join(stated.os)}; per {stated.source})",
                   (f"use an OS of a family it names ({', '.join(named)})" if named else "use an OS the guide names")
                   + ", or validate the image on an NPU host before relying on it", severity="warning")


def glibc_new_enough(cell: Cell, kb) -> Findings:
    """manylinux_2_28 wheels do not load on an OS with an older glibc."""
    floor = kb.environment.glibc_floor(cell.torch_npu, cell.arch)
    os_info = kb.environment.os_info(cell.os)
    if floor is None or os_info is None or os_info.glibc >= floor:
        return
    newer = [o for o in kb.environment.os_ids() if kb.environment.os_info(o).glibc >= floor]
    yield _finding(cell, "os", "glibc-too-old",
                   f"{cell.os} has glibc {'.'.join(map(str, os_info.glibc))}, below the manylinux_{floor[0]}_{floor[1]} "
                   f"floor of torch_npu {cell.torch_npu}",
                   f"use a newer OS: {', '.join(newer)}")


def driver_supports_cann(cell: Cell, kb) -> Findings:
    """A CANN release needs at least its paired driver; a newer driver runs older CANN. Where a
    major downstream's release notes name an older driver for it (MindIE for CANN 8.2.RC1),
    that driver is a warning naming them. On a product the release numbers its HDK apart for
    (``product:``), the minimum is that product's (``kb.drivers.min_driver(cann, product)``)."""
    needed = kb.drivers.min_driver(cell.cann, cell.product)
    reason = kb.drivers.min_driver_reason(cell.cann, cell.product)[1]
    by_product = bool(kb.drivers.product_hdk(cell.cann, cell.product))
    target = f"CANN {cell.cann}" + (f" on {cell.product}" if by_product else "")
    if not cell.driver:
        yield _finding(cell, "driver", "driver-missing",
                       f"no min_driver given and none known for CANN {cell.cann}",
                       "set min_driver: to the oldest Ascend HDK the image is meant to run on, e.g. 24.1.RC3")
        return
    out: List[Finding] = []
    driver = _parsed(cell, "driver", _hdk, out)
    yield from out
    if driver is None or not needed:
        return
    if versions.meets_minimum("hdk", cell.driver, needed) is False:
        shipped = kb.drivers.downstream_driver(cell.cann, cell.driver)
        if shipped:  # CANN's notes and a downstream's disagree: the strictest is the default, not a refusal
            yield _finding(cell, "driver", "driver-downstream",
                           f"driver {cell.driver} is below {needed}, the minimum HDK for {target} "
                           f"({reason}), but a downstream runs this pair ({shipped})",
                           f"validate the image on an NPU host, or set driver: {needed} or newer", severity="warning")
            return
        yield _finding(cell, "driver", "driver-too-old",
                       f"min_driver {cell.driver} is below {needed}, the minimum HDK for {target} "
                       f"({reason}): min_driver is the oldest driver the image "
                       "declares it runs on (its min-driver label, which pull, run and doctor compare with a "
                       "node's driver), not your nodes' driver, and no image of this CANN runs on an older one"
                       + (" on that product" if by_product else ""),
                       f"leave min_driver out (it follows from CANN{' and product' if by_product else ''}: {needed}), "
                       f"or set min_driver: {needed} or newer; "
                       "a team-wide min_driver under defaults: fits only CANN releases that need no newer "
                       "driver (nodes below it need their driver and firmware upgraded for this cell)")


def product_fits(cell: Cell, kb) -> Findings:
    """Where a CANN release numbers its HDK per product (``paired_hdk_by_product``: MindCluster's
    mapping for CANN 9.1.0 on the 950's products), the cell's ``product:`` picks the number. A product
    of another chip is refused; a product the release's table does not name, and a cell of such a
    chip that names none, are warnings (the CANN's own minimum then applies)."""
    table = dict(kb.drivers.hdk_by_product(cell.cann))
    choices = [p for p in kb.drivers.products() if p.chip == cell.chip and p.id in table]
    if not cell.product:
        if choices:
            listed = ", ".join(f"{p.id} {table[p.id]}" for p in choices)
            yield _finding(cell, "chip", "product-unstated",
                           f"CANN {cell.cann} numbers its HDK per product on chip {cell.chip} ({listed}; "
                           f"{kb.drivers.hdk_by_product_source(cell.cann)}); the cell names no product, so its minimum driver "
                           f"is the CANN's own ({kb.drivers.min_driver(cell.cann)})",
                           f"add product: {choices[0].id} (or {', '.join(p.id for p in choices[1:])}) when the image "
                           "targets one of them", severity="warning")
        return
    product = kb.drivers.product(cell.product)
    if product is None:  # the schema refuses an unknown id; a Cell made in code may still carry one
        return
    if product.chip != cell.chip:
        yield _finding(cell, "product", "product-chip",
                       f"product {cell.product} ({product.name}) is a chip {product.chip} product; the cell's chip is {cell.chip}",
                       f"set chip: {product.chip}, or drop product: for a chip {cell.chip} image")
        return
    if cell.product not in table:
        why = (f"its table names {', '.join(p for p in table if p != knowledge.OTHER_PRODUCTS)}" if table
               else "it numbers its HDK the same on every product, as far as the knowledge base knows")
        yield _finding(cell, "product", "product-hdk-unknown",
                       f"the knowledge base holds no HDK of {product.name} for CANN {cell.cann} ({why}); "
                       f"the minimum driver is the CANN's own ({kb.drivers.min_driver(cell.cann)})",
                       "set min_driver: to the HDK the product's own notes name for this CANN, or drop product:",
                       severity="warning")


def driver_known(cell: Cell, kb) -> Findings:
    """A driver no HDK release names is most often a typo (24.1.RC4 does not exist), and no
    pairing or range can be checked against it: an error naming the nearest releases, unless
    the cell says it is unlisted on purpose (then a warning)."""
    if not cell.driver or versions.lenient("hdk", cell.driver) is None:  # driver-missing / version-syntax
        return
    known, nearest = kb.drivers.hdk_known(cell.driver)
    if known:
        return
    near = f" (nearest: {', '.join(nearest)})" if nearest else ""
    if cell.unlisted:
        yield _finding(cell, "driver", "driver-unlisted",
                       f"driver {cell.driver} is no HDK release the knowledge base knows{near}: unlisted on purpose, "
                       "its firmware range is unchecked", "check it on an NPU host before relying on it",
                       severity="warning")
        return
    yield _finding(cell, "driver", "driver-unknown",
                   f"driver {cell.driver} is no HDK release the knowledge base knows{near}",
                   "check the spelling (e.g. 24.1.RC3, 25.2.1: `npu-smi info` prints it), leave min_driver out to get "
                   "the CANN release's minimum, or set unlisted: true")


def firmware_in_range(cell: Cell, kb) -> Findings:
    """Driver and firmware ship together; the driver's version.info states the firmware range it accepts."""
    if not cell.firmware:
        return
    out: List[Finding] = []
    firmware = _parsed(cell, "firmware", versions.firmware, out)
    yield from out
    if firmware is None or not cell.driver:
        return
    accepted = kb.drivers.firmware_ranges(cell.driver)
    if not accepted:  # no range of this driver is known: only having seen this firmware ship vouches for it
        if not kb.drivers.firmware_observed(cell.firmware):
            yield _finding(cell, "firmware", "firmware-unlisted" if cell.unlisted else "firmware-unknown",
                           f"firmware {cell.firmware}: no range is known for driver {cell.driver}, and the knowledge "
                           "base never saw this firmware ship", "check it on an NPU host before relying on it"
                           if cell.unlisted else "leave firmware out (the image then states none), use a driver whose "
                           "range is known (`ascend-build kb`), or set unlisted: true",
                           severity="warning" if cell.unlisted else "error")
        return
    if versions.firmware_in_ranges(cell.firmware, accepted) is not False:
        return
    shown = ", ".join(f"[{low}, {high}]" for low, high in accepted)
    paired = kb.drivers.paired_firmware(cell.driver, cell.chip)
    yield _finding(cell, "firmware", "firmware-out-of-range",
                   f"firmware {cell.firmware} is outside {shown}, the range driver {cell.driver} accepts",
                   f"use the firmware of the same HDK release as driver {cell.driver}" + (f" ({paired})" if paired else ""))


def chip_supported(cell: Cell, kb) -> Findings:
    """A3 needs CANN 8.1.RC1 or later, the 950 CANN 9.0.0 or later."""
    first = kb.drivers.chip_min_cann(cell.chip)
    if not first:
        return
    try:
        too_old = _cann(cell.cann) < _cann(first)
    except versions.VersionError:
        return
    if too_old:
        yield _finding(cell, "chip", "chip-unsupported",
                       f"chip {cell.chip} is not supported by CANN {cell.cann}; it needs CANN {first} or later",
                       f"set cann: {first} or newer, or pick another chip")


def venv_python_matches(cell: Cell, kb) -> Findings:
    """A venv uses the OS's own python3; only conda can give another Python."""
    os_info = kb.environment.os_info(cell.os)
    if cell.env != "venv" or os_info is None:
        return
    minor = ".".join(cell.python.split(".")[:2])
    if os_info.python != minor:
        yield _finding(cell, "python", "venv-python-mismatch",
                       f"env venv uses {cell.os}'s Python {os_info.python}, but the cell asks for Python {minor}",
                       f"use env: conda, or python: \"{os_info.python}\"")


def installers_verifiable(cell: Cell, kb) -> Findings:
    """Never run an installer whose sha256 was not checked."""
    given = dict(cell.sha256)
    if cell.cann_source == "image":
        if cell.cann_image and "@sha256:" not in cell.cann_image:
            yield _finding(cell, "cann_source", "cann-image-unpinned",
                           f"CANN base image {cell.cann_image} is not pinned by digest",
                           "write it as REF@sha256:DIGEST so every build starts from the same bytes", severity="warning")
    else:
        files = installers.cann_installers(kb, cell.cann, cell.chip, cell.arch, cell.nnal)
        kinds = {f.kind for f in files}
        wanted = [k for k in installers.kinds(cell.nnal) if not (k == "nnal" and _nnal_too_early(cell, kb))]
        if cell.cann_source == "installer" and not kinds.issuperset(wanted):
            # at cann_source when the matrix writes it, else at the CANN that has no installers
            yield _finding(cell, "cann_source" if "cann_source" in cell.fields else "cann", "installer-unknown",
                           f"the knowledge base has no official {cell.chip}/{cell.arch} installers for CANN {cell.cann}",
                           "use cann_source: {local: DIR} with sha256: {FILE: HEX}, or {image: REF@sha256:DIGEST}")
        if cell.cann_source == "local":
            known = {f.filename for f in files}
            try:
                names = tuple(installers.package(kb, kind, cell.cann, cell.chip, cell.arch)
                              for kind in installers.kinds(cell.nnal))
            except UserError:  # no version, a chip or NNAL it predates: cann_known / chip_supported / nnal_published say so
                names = ()
            for name in names:
                zipped = name[:-4] + ".zip" if name.endswith(".run") else name
                if zipped not in known and name not in given:
                    yield _finding(cell, "sha256", "installer-sha256-unknown",
                                   f"no sha256 known for {name}",
                                   f"add sha256: {{{name}: <64 hex digits>}} taken from the vendor's download page")
    if cell.env == "conda":
        conda = installers.conda_installer(kb, cell.arch)
        if conda is None or (not conda.sha256 and conda.filename not in given):
            name = conda.filename if conda else "the conda installer"
            yield _finding(cell, "env", "installer-sha256-unknown",
                           f"no verified sha256 for {name} ({cell.arch})",
                           f"add sha256: {{{name}: <64 hex digits>}}, or use env: venv")


def tag_fits(cell: Cell, kb) -> Findings:
    """Docker refuses tags over 128 characters; the longest one made is ``<id>-candidate``."""
    longest = cell.tag + CANDIDATE_SUFFIX
    if len(longest) > 128:
        yield _finding(cell, "name", "tag-too-long",
                       f"tag {longest} has {len(longest)} characters; Docker allows 128",
                       "give the cell a shorter name:")


def pins_within_cann_limits(cell: Cell, kb) -> Findings:
    """A matrix pin CANN does not accept on the cell's Python (numpy 2 before CANN 9.0.0-beta.2
    below Python 3.13, protobuf other than 3.20.x up to 9.0.x) would break CANN's tools or
    torch_npu at start-up."""
    limits = python_env.constraints(cell.cann, cell.python)
    for pin in cell.pip:
        name, _, version = pin.partition("==")
        for limit in limits:
            if limit.name == canonicalize_name(name.split("[")[0]) and not limit.allows(version):
                kind = "inferred from" if limit.inferred else "per"
                downstream = python_env.shipped(cell.cann, limit.name, version)
                if downstream:  # the guide and a downstream disagree: the guide is the default, not a refusal
                    yield _finding(cell, "pip", "cann-python-constraint-shipped",
                                   f"{pin} is outside {limit.requirement}, which CANN {cell.cann} needs ({kind} "
                                   f"{limit.source}), but a downstream ships it on that CANN ({downstream})",
                                   f"validate the image on an NPU host, or pin {name} within {limit.requirement}",
                                   severity="warning")
                    continue
                yield _finding(cell, "pip", "cann-python-constraint",
                               f"{pin} is outside {limit.requirement}, which CANN {cell.cann} needs"
                               + (f" on {limit.python}" if limit.python else "") + f" ({kind} {limit.source})",
                               f"pin {name} within {limit.requirement}, or drop the pin and let the lock choose")


def env_vars_accepted(cell: Cell, kb) -> Findings:
    """torch_npu parses some variables itself and stops on a key its release does not parse
    (2.1.0rc1 refuses PYTORCH_NPU_ALLOC_CONF=expandable_segments:True on the first
    allocation), read from the parser at each release tag; a release the data has no parser
    of gets a warning."""
    for variable, value in cell.env_vars:
        for key in python_env.option_keys(value) if variable in python_env.variables() else ():
            accepted = python_env.accepts(variable, key, cell.torch_npu)
            if accepted is False:
                everywhere = python_env.accepting(variable, key)
                mine = versions.lenient("python_package", cell.torch_npu)
                same_line = tuple(v for v in everywhere if mine is not None
                                  and versions.python_package(v).release[:2] == mine.release[:2])
                parsed_by = same_line or everywhere  # a release of the cell's own line first
                refusal = python_env.refusal(variable, cell.torch_npu) or "Unrecognized CachingAllocator option"
                if not parsed_by:
                    other = ""
                elif parsed_by[-1] == (python_env.newest(variable, cell.torch_npu) if same_line else python_env.newest(variable)):
                    other = f", or use torch_npu {parsed_by[0]} or newer"
                else:
                    other = f", or use a torch_npu that parses it ({parsed_by[0]} to {parsed_by[-1]})"
                yield _finding(cell, "env_vars", "env-var-rejected",
                               f"torch_npu {cell.torch_npu} refuses {variable} key {key!r}: it stops at the first "
                               f"allocation with \"{refusal}\" (per {python_env.source(variable, cell.torch_npu)})",
                               f"drop {key} from {variable}" + other)
            elif accepted is None:
                yield _finding(cell, "env_vars", "env-var-unverified",
                               f"{variable} key {key!r}: the knowledge base has not read the parser of torch_npu "
                               f"{cell.torch_npu}; it may refuse the key",
                               f"check torch_npu {cell.torch_npu}'s allocator options; keys some release parses: "
                               + ", ".join(python_env.known_keys(variable)), severity="warning")


def _nnal_too_early(cell: Cell, kb) -> str:
    """The first CANN with NNAL when ``cell``'s CANN predates it, else ""."""
    since, cann = kb.downloads.nnal_since(), versions.lenient("cann", cell.cann)
    return since if cann is not None and since and cann < versions.cann(since) else ""


def nnal_published(cell: Cell, kb) -> Findings:
    """NNAL exists from one CANN release on; a cell asking for it on an earlier one is refused
    (an image's NNAL is the image's own: the smoke test checks it is there)."""
    since = _nnal_too_early(cell, kb) if cell.nnal and cell.cann_source != "image" else ""
    if since:
        yield _finding(cell, "nnal", "nnal-unpublished",
                       f"CANN {cell.cann} has no NNAL package the knowledge base knows: the first is CANN {since}",
                       f"use CANN >= {since}, or drop nnal: true")


def torch_atb_glibc(cell: Cell, kb) -> Findings:
    """From CANN 9.1 on, NNAL's torch_atb plugin needs glibc 2.38 (Ascend's ATB install page): a
    cell asking for NNAL on an OS with an older glibc is refused, unless Ascend's own images
    install NNAL on that OS for that release (then a warning naming the image)."""
    if not cell.nnal or cell.cann_source == "image":
        return
    found = kb.downloads.torch_atb_glibc(cell.cann, cell.os)
    if found is None:
        return
    needs, source, image = found
    newer = [o for o in kb.environment.os_ids() if kb.environment.os_info(o).glibc >= tuple(int(p) for p in needs.split("."))]
    has = ".".join(map(str, kb.environment.os_info(cell.os).glibc))
    message = (f"NNAL's torch_atb from CANN {cell.cann} needs glibc {needs}; {cell.os} has glibc {has} "
               f"(per {source})")
    fix = (f"use an OS with glibc >= {needs} ({', '.join(newer)}), or CANN 9.0's torch_atb wheel as that page shows, "
           "or drop nnal: true")
    if image:
        yield _finding(cell, "nnal", "nnal-glibc-shipped", message + f", but Ascend's image installs NNAL there: {image}",
                       fix, severity="warning")
        return
    yield _finding(cell, "nnal", "nnal-glibc-too-old", message, fix)


def own_wheel_fits(cell: Cell, kb) -> Findings:
    """A wheel the cell brings must be torch_npu of the cell's version, Python and arch, hold
    the bytes of its sha256 (checked when the file is on this machine; `image` always
    checks), and name its torch when the knowledge base cannot."""
    if not cell.torch_npu_wheel:
        return
    path, sha256 = cell.torch_npu_wheel
    name = own_wheel.file_name(path)
    why = own_wheel.fits(name, cell.torch_npu, cell.python, cell.arch)
    if why:
        yield _finding(cell, "torch_npu_wheel", "torch-npu-wheel-mismatch", f"{name} {why}",
                       f"name the wheel built for torch_npu {cell.torch_npu}, CPython {cell.python}, {cell.arch}")
    # a URL is not fetched here: `lock` and `image` download it and check its bytes
    found = None if own_wheel.is_url(path) else own_wheel.mismatch(Path(path), sha256)
    if found == "":
        yield _finding(cell, "torch_npu_wheel", "torch-npu-wheel-absent",
                       f"{path} is not on this machine: its sha256 is not checked here",
                       "run validate where the file is (a relative path is read from the directory ascend-build "
                       "runs in); `image` refuses any other bytes", severity="warning")
    elif found:
        yield _finding(cell, "torch_npu_wheel", "torch-npu-wheel-sha256", *own_wheel.other_bytes(path, found, sha256))
    if not cell.torch and kb.releases.torch_npu(cell.torch_npu) is None:
        yield _finding(cell, "torch_npu_wheel", "torch-unknown",
                       f"torch_npu {cell.torch_npu} is not in the knowledge base: the torch it was built against "
                       "cannot be inferred", "set torch: to the version its wheel requires (its METADATA's Requires-Dist)")


RULES = (
    cann_known, torch_npu_published, torch_matches_pin, cann_paired, python_has_wheel, python_within_cann,
    nnal_python, os_listed, glibc_new_enough,
    product_fits, product_released, driver_supports_cann, driver_known, firmware_in_range, chip_supported, venv_python_matches, installers_verifiable, tag_fits,
    pins_within_cann_limits, pins_match_torch_npu, downstream_pins_fit, env_vars_accepted, nnal_published, torch_atb_glibc, own_wheel_fits,
)

LOCK_RULES = {
    "missing": ("lock-missing", "has no lock: its image would resolve its Python packages at build time",
                "run {lock} (an image builds from it only with --allow-incomplete-lock)"),
    "stale": ("lock-stale", "has a lock made from other inputs (the cell, its pins or CANN's limits changed)",
              "run {lock} and commit the lock"),
    "incomplete": ("lock-incomplete", "has a lock with entries whose sha256 could not be recorded",
                   "run {lock} where their source is reachable (CI does); until then an image "
                   "builds only with --allow-incomplete-lock"),
}


def lock_findings(cells: List[Cell], states: Mapping[str, Tuple[str, str]]) -> List[Finding]:
    """A warning for each cell whose lock is not ``ok``; ``states`` maps cell id to (state, detail)."""
    out = []
    for cell in cells:
        state, detail = states.get(cell.id, ("ok", ""))
        if state in LOCK_RULES:
            rule, what, fix = LOCK_RULES[state]
            out.append(_finding(cell, "python", rule, f"cell {cell.id} {what}" + (f": {detail}" if detail and state == "incomplete" else ""),
                                fix.format(lock=commands.suggest("lock", cell=cell.id)), severity="warning"))
    return list(dict.fromkeys(out))


def installer_findings(cells: List[Cell], unrecorded: Mapping[str, Tuple[str, ...]]) -> List[Finding]:
    """A warning per cell whose CANN installers have no sha256 yet (``unrecorded``: cell id ->
    file names, `plan.unrecorded_installers`): published without one, not yet recorded in the lock."""
    out = []
    for cell in cells:
        files = unrecorded.get(cell.id, ())
        if files:
            out.append(_finding(cell, "cann", "installer-sha256-unrecorded",
                                f"no sha256 known yet for {', '.join(files)} (published without one; the lock has "
                                "none recorded): the NPU image is refused until it has one",
                                f"run {commands.suggest('lock', cell=cell.id)} where the download server answers: it fetches each file "
                                "once and records its sha256 in the lock, and every later download must match it",
                                severity="warning"))
    return out


def unique_tags(cells: List[Cell], others: Sequence[Cell] = ()) -> Findings:
    """Two cells with one tag would overwrite each other's image (``others``: the cells of
    the matrix not being checked, whose tags count too)."""
    counts = Counter(c.ref for c in [*cells, *others])
    seen = {c.ref for c in others}
    for cell in cells:
        if counts[cell.ref] > 1 and cell.ref in seen:
            yield _finding(cell, "name", "duplicate-tag",
                           f"{cell.ref} is produced by {counts[cell.ref]} cells",
                           "give one of them a distinct name:, or remove the duplicate")
        seen.add(cell.ref)


def check(cells: List[Cell], kb: Optional[object] = None, others: Sequence[Cell] = ()) -> List[Finding]:
    """Every finding for every cell, in matrix order (``others``: the rest of the matrix, when
    only some cells are checked: a tag one of them makes too is a duplicate)."""
    kb = kb or knowledge.load()
    findings: List[Finding] = []
    for cell in cells:
        for rule in RULES:
            findings.extend(rule(cell, kb))
    findings.extend(unique_tags(cells, others))
    # A cell with arch or chip lists expands into several cells that share their
    # lines: the same finding at the same place is said once.
    return list(dict.fromkeys(findings))


def refused(cells: List[Cell], kb: Optional[object] = None) -> List[Cell]:
    """The cells an error of their own refuses: a rule's, or a tag another cell makes too.

    Example:
        >>> cell = Cell(id="c", image="i", os="ubuntu22.04", arch="x86_64", chip="910b", cann="8.0.RC3",
        ...             driver="24.1.RC3", firmware=None, python="3.10", torch="2.4.0", torch_npu="2.4.0", env="venv")
        >>> from dataclasses import replace
        >>> [c.id for c in refused([cell, replace(cell, id="old", driver="23.0.RC3")])]
        ['old']
    """
    kb = kb or knowledge.load()
    counts = Counter(c.ref for c in cells)
    return [c for c in cells if counts[c.ref] > 1 or has_errors([f for rule in RULES for f in rule(c, kb)])]


def has_errors(findings: List[Finding], strict: bool = False) -> bool:
    return any(f.severity == "error" or strict for f in findings)
