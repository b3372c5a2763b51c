"""Drivers and products: chips, the Ascend HDK (driver) each CANN release needs, firmware.

Reads ``ascend-compat.yaml`` (``hdk_driver_firmware.observed_pairs``, the HDK fields of
``cann_hdk.releases`` and ``chips.products``) once; asks the `releases` part for a CANN
release's entry and package, and `cann_products` since when CANN's notes name a product. ``min_driver_reason`` is the one rule of a CANN release's
minimum driver, on a product where the release numbers its HDK per product.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple

from builder import versions
from builder.knowledge import cann_products
from builder.knowledge.pairings import Releases, cann_key, listed
from builder.vocabulary import CHIPS

# First CANN release per chip where one exists (ascend-facts.md "Chips": A3 from CANN 8.1.RC1,
# 950 from CANN 9.0; the data agrees: chips.families[].cann_ops_package and
# chips.official_cann_images_by_chip). Chips not listed have no stated floor.
_CHIP_MIN_CANN = {"a3": "8.1.RC1", "950": "9.0.0"}

# The key of ``paired_hdk_by_product`` for every product the table does not name.
OTHER_PRODUCTS = "other_products"

_RANGE = re.compile(r"\[\s*([0-9][0-9A-Za-z.]*)\s*,\s*([0-9][0-9A-Za-z.]*)\s*\]")


def chip_min_cann(chip: str) -> Optional[str]:
    """First CANN release that supports that chip, where one is stated (a3, 950); else None.

    Example:
        >>> chip_min_cann("a3"), chip_min_cann("910b")
        ('8.1.RC1', None)
    """
    return _CHIP_MIN_CANN.get(str(chip).lower())


def chip_of_soc(soc: str) -> Optional[str]:
    s = soc.lower()
    if s.startswith("ascend950"):
        return "950"
    if s.startswith("ascend910_93"):
        return "a3"
    if re.match(r"ascend910b\d", s):
        return "910b"
    if s.startswith("ascend310p"):
        return "310p"
    if s.startswith("ascend910"):
        return "910"
    return None


def _hdk_names(compat: Mapping[str, Any]) -> Tuple[Dict[versions.AscendVersion, str], Set[Tuple[int, int]]]:
    """(every HDK release the data names, as its data spells it; the (major, minor) of every HDK line "A.B.X")."""
    texts: List[str] = []
    for pair in compat["hdk_driver_firmware"]["observed_pairs"]:
        texts += [str(pair.get("driver") or ""), str(pair.get("hdk") or "")]
    for entry in compat["cann_hdk"]["releases"]:
        for key, value in entry.items():
            if "hdk" in key and key != "not_supported_hdk":
                values = value.values() if isinstance(value, Mapping) else listed(value)
                texts += [part for v in values for part in str(v).split("/")]
    named: Dict[versions.AscendVersion, str] = {}
    lines: Set[Tuple[int, int]] = set()
    for text in texts:
        text = text.strip()
        if text.upper().endswith(".X"):
            line = versions.lenient("hdk", text[:-2] + ".0")
            if line is not None:
                lines.add(line.release)
        elif versions.lenient("hdk", text) is not None:
            named.setdefault(versions.hdk(text), re.sub(r"rc", "RC", text))
    return named, lines


@dataclass(frozen=True)
class Product:
    """A product of one chip whose HDK some CANN release numbers apart (``chips.products``).

    ``id`` is what a matrix cell writes (``product: atlas-950-superpod``); ``name`` is the
    product as the source spells it, the key of a release's ``paired_hdk_by_product``.
    """

    id: str
    chip: str
    name: str


def _products(compat: Mapping[str, Any]) -> Dict[str, Product]:
    items = (compat.get("chips") or {}).get("products", {}).get("items") or ()
    return {str(i["id"]): Product(str(i["id"]), str(i["chip"]).lower(), str(i["name"])) for i in items}


class Drivers:
    """Driver (HDK) and firmware answers, by CANN release (and product) and by driver."""

    def __init__(self, releases: Releases, compat: Mapping[str, Any],
                 mindcluster: Optional[Mapping[str, Any]] = None) -> None:
        self._releases = releases
        # driver -> observed firmware pairs
        self._pairs: List[Tuple[Any, Dict[str, Any]]] = []
        for pair in compat["hdk_driver_firmware"]["observed_pairs"]:
            dv = versions.lenient("hdk", pair.get("driver"))
            if dv is not None:
                self._pairs.append((dv, pair))
        # every HDK (driver) release the data names, and the HDK lines release notes support ("25.2.X")
        self._hdk_spelled, self._hdk_lines = _hdk_names(compat)
        # the HDK per product of each CANN release, by MindCluster's notes (mindcluster-tables.yaml):
        # documents oldest first, so a later page's word on a product wins
        self._by_product: Dict[Tuple[int, ...], Dict[str, Tuple[str, str]]] = {}
        for row in (mindcluster or {}).get("hdk") or ():
            ck = cann_key(row.get("cann"))
            for item in row.get("hdk") or ():
                hdk = versions.lenient("hdk", item.get("hdk"))
                if hdk is not None:
                    self._hdk_spelled.setdefault(hdk, str(item["hdk"]))
                if ck is not None and item.get("id"):
                    self._by_product.setdefault(ck, {})[str(item["id"])] = (
                        str(item["hdk"]), f"{row['document']}, line {row['line']}")
        self._hdk_named = sorted(self._hdk_spelled)
        # products whose HDK some release numbers apart, by the id a matrix cell writes
        self._products = _products(compat)
        # answers that scan every release, kept per release and product (one knowledge base per process)
        self._min_driver: Dict[Tuple[str, str], Tuple[Optional[str], str]] = {}

    def chips(self) -> Tuple[str, ...]:
        """The matrix's chip ids, lower-case.

        Example:
            >>> from builder.knowledge import load
            >>> load().drivers.chips()
            ('910', '910b', 'a3', '310p', '950')
        """
        return CHIPS

    def chip_min_cann(self, chip: str) -> Optional[str]:
        """First CANN release that supports that chip, where one is stated (a3, 950); else None.

        Example:
            >>> from builder.knowledge import load
            >>> load().drivers.chip_min_cann("a3")
            '8.1.RC1'
        """
        return chip_min_cann(chip)

    def products(self) -> Tuple[Product, ...]:
        """The products a matrix cell may name with ``product:``, in the data's order.

        Example:
            >>> from builder.knowledge import load
            >>> [p.id for p in load().drivers.products()]
            ['atlas-950-superpod', 'atlas-350', 'atlas-850']
        """
        return tuple(self._products.values())

    def product(self, product_id: str) -> Optional[Product]:
        """The product of that id (``atlas-950-superpod``); None when the data names none.

        Example:
            >>> from builder.knowledge import load
            >>> load().drivers.product("atlas-350").name, load().drivers.product("atlas-999")
            ('Atlas 350 card', None)
        """
        return self._products.get(str(product_id))

    def product_first_release(self, product_id: str) -> Optional[Tuple[str, cann_products.Source]]:
        """The oldest CANN release whose release notes name that product, with where they do
        (``cann-products.yaml``); None when no notes name it.

        Asked here, of the part that owns the products, so the product rule reads the knowledge
        base alone (and a test hands it other notes through a stand-in part); the notes' data
        stays `cann_products`'s, a file the parser makes, read once per process.

        Example:
            >>> from builder.knowledge import load
            >>> load().drivers.product_first_release("atlas-350")[0]
            '9.0.0'
        """
        return cann_products.first_release(product_id)

    def hdk_by_product(self, cann: str) -> Tuple[Tuple[str, str], ...]:
        """(product id, paired HDK) of the release's per-product HDK table, the id ``other_products``
        last for the products the table does not name; () when the release has no such table.
        MindCluster's notes give it (the latest page's word per product); a release they do not
        number per product may have one kept by hand (``paired_hdk_by_product``).

        Example:
            >>> from builder.knowledge import load
            >>> load().drivers.hdk_by_product("9.1.0")[0], load().drivers.hdk_by_product("8.5.0")
            (('atlas-950-superpod', '25.1.RC1'), ())
        """
        parsed = self._by_product.get(cann_key(cann) or (), {})
        if parsed:
            order = list(self._products) + [OTHER_PRODUCTS]
            return tuple((pid, parsed[pid][0]) for pid in order if pid in parsed)
        entry = self._releases.entry(cann) or {}
        table = entry.get("paired_hdk_by_product") or {}
        named = {p.name: p.id for p in self._products.values()}
        rows = [(named[str(k)], str(v)) for k, v in table.items() if str(k) in named]
        rows.sort(key=lambda row: list(self._products).index(row[0]))
        return tuple(rows) + tuple((OTHER_PRODUCTS, str(v)) for k, v in table.items() if k == OTHER_PRODUCTS)

    def hdk_by_product_source(self, cann: str) -> str:
        """Where the release's per-product HDK table is published ("" when it has none): each page and row."""
        parsed = self._by_product.get(cann_key(cann) or (), {})
        if parsed:
            return "; ".join(dict.fromkeys(where for _, where in parsed.values()))
        entry = self._releases.entry(cann) or {}
        return str(entry.get("by_product_source") or "") if entry.get("paired_hdk_by_product") else ""

    def product_hdk(self, cann: str, product_id: str) -> Optional[str]:
        """The HDK the release's per-product table pairs with that product; None when the release has
        no such table or the table does not name the product.

        Example:
            >>> from builder.knowledge import load
            >>> load().drivers.product_hdk("9.1.0", "atlas-950-superpod"), load().drivers.product_hdk("8.5.0", "atlas-950-superpod")
            ('25.1.RC1', None)
        """
        return dict(self.hdk_by_product(cann)).get(str(product_id)) if product_id != OTHER_PRODUCTS else None

    def paired_hdk(self, cann: str) -> Optional[str]:
        """The Ascend HDK release paired with that CANN; the lowest when the data lists several.

        From ``cann_hdk.releases[].paired_hdk``, else the ``NPU`` requirement in
        cann-packages.json. A pairing stated only as a line (``25.2.X``) is returned as written.

        Example:
            >>> from builder.knowledge import load
            >>> load().drivers.paired_hdk("9.0.1")
            '25.5.1'
        """
        entry = self._releases.entry(cann)
        values = listed(entry.get("paired_hdk")) if entry else ()
        if not values:
            pk = self._releases.cann_package(cann)
            if pk:
                values = tuple(str(r["version"]) for r in pk[1].get("requires", []) if r.get("name") == "NPU")
        if not values:
            return None
        parsed = [(v, versions.lenient("hdk", v)) for v in values]
        exact = [(v, p) for v, p in parsed if p is not None]
        if not exact:
            return values[0]
        return min(exact, key=lambda vp: vp[1])[0]

    def _own_min_driver(self, cann: str) -> Tuple[Optional[versions.AscendVersion], str]:
        """The release's own minimum, from its own data only, and where it comes from."""
        entry = self._releases.entry(cann)
        paired = self.paired_hdk(cann)
        found: List[Tuple[versions.AscendVersion, str]] = []
        if paired:
            pv = versions.minimum("hdk", paired)
            if pv is not None:
                found.append((pv, f"its paired HDK {paired}"))
        if entry:
            lines = listed(entry.get("min_hdk_line")) or listed(entry.get("supported_hdk"))
            for line in lines:
                fv = versions.minimum("hdk", line)
                if fv is not None:
                    found.append((fv, f"its release notes support HDK {line}"))
        if not found:
            return None, ""
        return min(found, key=lambda f: f[0])

    def min_driver_reason(self, cann: str, product: str = "") -> Tuple[Optional[str], str]:
        """The lowest driver (HDK) that runs that CANN (on that product), and the reasoning; (None, "") when unknown.

        The one rule, used by validate (`checks`), the image labels (`plan`), and through
        the labels by pull, run, doctor and the smoke program:

        1. **its own data**: the paired HDK (:meth:`paired_hdk`), lowered to the floor of the
           lowest HDK line its release notes state as supported (``min_hdk_line``, else the
           lowest of ``supported_hdk``; ``versions.hdk_line_floor``: ``25.0.X`` -> its first
           release). A pairing given only as a line (``25.2.X``) yields that line's floor.
        2. **a driver that runs a newer CANN runs every older one**: the minimum is capped
           by the own minimum (1) of every newer release whose notes state their lines,
           so the minimum never falls as CANN rises (8.3.RC1, paired with 25.3.RC1, runs
           on 25.0.RC1 because 8.5.0 does).

        On a ``product`` the release's per-product HDK table names (``paired_hdk_by_product``:
        MindCluster's version mapping numbers CANN 9.1.0's HDK apart on the Atlas 950 SuperPoD,
        Atlas 350 and Atlas 850), the minimum is that product's paired HDK: no source states a
        lower one for it. On any other product, or with none, it is the release's own rule above.

        Example:
            >>> from builder.knowledge import load
            >>> load().drivers.min_driver_reason("8.3.RC1")
            ('25.0.RC1', 'CANN 8.5.0 runs on HDK 25.0.RC1 (its release notes support HDK 25.0.X), and a driver that runs a newer CANN runs an older one')
            >>> load().drivers.min_driver_reason("7.0.RC1")
            ('23.0.RC3', 'its paired HDK 23.0.RC3')
            >>> load().drivers.min_driver_reason("9.1.0", "atlas-950-superpod")
            ('25.1.RC1', 'its per-product HDK table (Ascend/mind-cluster@master:docs/zh/release_notes.md, line 35) pairs it with HDK 25.1.RC1 on Atlas 950 SuperPoD')
        """
        key = (cann, product if self.product_hdk(cann, product) else "")
        if key not in self._min_driver:
            self._min_driver[key] = self._min_driver_reason(cann, key[1])
        return self._min_driver[key]

    def _min_driver_reason(self, cann: str, product: str) -> Tuple[Optional[str], str]:
        if product:  # a product the release's per-product table names: its paired HDK
            paired = self.product_hdk(cann, product)
            found = self.product(product)
            parsed = self._by_product.get(cann_key(cann) or (), {}).get(str(product))
            source = parsed[1] if parsed else (self.hdk_by_product_source(cann) or "source not named")
            return paired, f"its per-product HDK table ({source}) pairs it with HDK {paired} on {found.name if found else product}"
        own, why = self._own_min_driver(cann)
        own_none = own is None
        cv = versions.lenient("cann", cann)
        known = self._releases.known(cann)
        if cv is not None and known:  # an unknown release gets no inferred minimum
            for newer in self._releases.cann_releases():
                nv = versions.lenient("cann", newer)
                entry = self._releases.entry(newer) or {}
                # a release with no minimum of its own (a pre-release with no stated HDK) is bounded by
                # every newer release's own minimum; one with its own only by those whose notes state lines
                stated = entry.get("min_hdk_line") or entry.get("supported_hdk")
                if nv is None or nv <= cv or not (stated or own_none):
                    continue
                theirs, their_why = self._own_min_driver(newer)
                if theirs is not None and (own is None or theirs < own):
                    own, why = theirs, (f"CANN {newer} runs on HDK {theirs.text} ({their_why}), "
                                        "and a driver that runs a newer CANN runs an older one")
        if own is None:
            return self.paired_hdk(cann), ""
        return own.text, why

    def min_driver(self, cann: str, product: str = "") -> Optional[str]:
        """The lowest driver (HDK) version that runs that CANN (on that product) (:meth:`min_driver_reason`); None when unknown.

        Example:
            >>> from builder.knowledge import load
            >>> load().drivers.min_driver("7.0.RC1"), load().drivers.min_driver("8.3.RC1"), load().drivers.min_driver("9.1.0", "atlas-350")
            ('23.0.RC3', '25.0.RC1', '25.7.RC1')
        """
        return self.min_driver_reason(cann, product)[0]

    def downstream_driver(self, cann: str, driver: str) -> str:
        """Where a major downstream runs that CANN on that driver although it is below the
        minimum of CANN's own notes ("" when none does): ``cann_hdk.releases[].downstream_hdk``.

        Example:
            >>> from builder.knowledge import load
            >>> load().drivers.downstream_driver("8.2.RC1", "24.1.rc3")
            'MindIE 2.1.RC1 release notes, version compatibility (MINDIE_21RC1_RN)'
            >>> load().drivers.downstream_driver("8.2.RC1", "24.1.RC1"), load().drivers.downstream_driver("8.3.RC1", "24.1.RC3")
            ('', '')
        """
        entry = self._releases.entry(cann) or {}
        named = entry.get("downstream_hdk") or {}
        wanted = versions.lenient("hdk", driver)
        if wanted is None or not any(versions.lenient("hdk", str(h)) == wanted for h in named.get("hdk") or ()):
            return ""
        return str(named.get("evidence") or "")

    def hdk_known(self, driver: str) -> Tuple[bool, Tuple[str, ...]]:
        """Whether the data names that HDK (driver) release, and the nearest releases it names.

        Named: the driver of an observed driver/firmware pair, an HDK some CANN release is
        paired with, or a release inside an HDK line some CANN's release notes support
        (``25.2.X`` names 25.2.0, 25.2.RC1 ...). A driver string that is no HDK version is unknown.

        Example:
            >>> from builder.knowledge import load
            >>> load().drivers.hdk_known("25.2.1")[0], load().drivers.hdk_known("24.1.RC4")
            (True, (False, ('24.1.RC3', '24.1.0')))
        """
        dv = versions.lenient("hdk", driver)
        if dv is None:
            return False, ()
        if dv.release in self._hdk_lines or any(dv == v for v in self._hdk_named):
            return True, ()
        below = [self._hdk_spelled[v] for v in self._hdk_named if v < dv][-1:]
        above = [self._hdk_spelled[v] for v in self._hdk_named if v > dv][:1]
        return False, tuple(below + above)

    def supported_hdk_lines(self, cann: str) -> Tuple[str, ...]:
        """HDK lines the release notes mark supported for that CANN (``supported_hdk``); () when not stated.

        Example:
            >>> from builder.knowledge import load
            >>> load().drivers.supported_hdk_lines("9.2.0")[0]
            '25.3.X'
        """
        entry = self._releases.entry(cann)
        return listed(entry.get("supported_hdk")) if entry else ()

    def _pairs_for(self, driver: Optional[str]) -> List[Dict[str, Any]]:
        dv = versions.lenient("hdk", driver)
        if dv is None:
            return []
        return [pair for v, pair in self._pairs if v == dv]

    def firmware_range(self, driver: str) -> Optional[Tuple[str, str]]:
        """Firmware range that driver accepts (its version.info ``compatible_version_fw``); None when unknown.

        Example:
            >>> from builder.knowledge import load
            >>> load().drivers.firmware_range("24.1.rc3")
            ('7.0.0', '7.5.99')
        """
        ranges = self.firmware_ranges(driver)
        return ranges[0] if ranges else None

    def firmware_ranges(self, driver: str) -> List[Tuple[str, str]]:
        """Every firmware range recorded for that driver: some dumps list two (``[6.4.0,6.4.99],[7.0.0,7.7.99]``).

        Example:
            >>> from builder.knowledge import load
            >>> load().drivers.firmware_ranges("25.0.rc1.1")
            [('7.0.0', '7.7.99'), ('6.4.0', '6.4.99')]
        """
        found: List[Tuple[str, str]] = []
        for pair in self._pairs_for(driver):
            for low, high in _RANGE.findall(str(pair.get("driver_compatible_version_fw") or "")):
                if (low, high) not in found:
                    found.append((low, high))
        return found

    def firmware_observed(self, firmware: str) -> bool:
        """Whether that firmware was observed shipping with some driver (``observed_pairs``).

        Example:
            >>> from builder.knowledge import load
            >>> load().drivers.firmware_observed("7.5.0.1.129"), load().drivers.firmware_observed("7.5.0.1.130")
            (True, False)
        """
        fv = versions.lenient("firmware", firmware)
        return fv is not None and any(
            versions.lenient("firmware", str(f)) == fv for _, pair in self._pairs
            for f in (pair["firmware"].values() if isinstance(pair.get("firmware"), Mapping) else [pair.get("firmware")])
            if f)

    def paired_firmware(self, driver: Optional[str], chip: Optional[str]) -> Optional[str]:
        """Firmware observed shipping with that driver for that chip; None when unknown.

        An observation that records no chip (one firmware for the whole HDK sample) is
        returned for any chip; one that names a SoC answers only for that chip.

        Example:
            >>> from builder.knowledge import load
            >>> load().drivers.paired_firmware("24.1.rc1", "910b")
            '7.1.0.6.220'
        """
        want = str(chip).lower() if chip else None
        for pair in self._pairs_for(driver):
            fw = pair.get("firmware")
            if isinstance(fw, Mapping):
                if want and want in {str(k).lower() for k in fw}:
                    return next(str(v) for k, v in fw.items() if str(k).lower() == want)
            elif fw:
                soc = pair.get("chip")
                if soc is None or (want and chip_of_soc(str(soc)) == want):
                    return str(fw)
        return None
