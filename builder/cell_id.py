"""What a cell id (an image tag) names: the one parser of tag names.

A cell's default id is also its image tag (``builder.images.matrix.derive_id``:
``cann8.0.rc3-910b-ubuntu22.04-py3.10-torch_npu2.4.0-aarch64``, ``-cpu`` after it for
the CPU twin). Whoever needs a version back from a tag (`pull` reading a twin, which
carries no CANN label) reads it here, so ``8.0.rc3`` is CANN 8.0.RC3 everywhere.

Example:
    >>> parse_id("cann8.0.rc3-910b-ubuntu22.04-py3.10-torch_npu2.4.0-aarch64-cpu").cann
    '8.0.RC3'
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Tuple

from builder.vocabulary import ARCHS, CANDIDATE_SUFFIX, CHIPS, CPU, LAZY_FORMATS, NPU


@dataclass(frozen=True)
class CellId:
    """A derived id's parts; ``variant`` is ``cpu`` for a twin's tag, else ``npu``; ``torch_npu`` is ""
    for a CANN-only cell (and keeps ``derive_id``'s ``_`` for a ``+`` local version)."""

    cann: str
    chip: str
    os: str
    python: str
    torch_npu: str
    arch: str
    variant: str = NPU
    product: str = ""  # the product after the chip (``950-atlas-350``), where the cell names one


# derive_id's shape; the OS is any letters-then-version id (ubuntu22.04, openeuler24.03, debian12)
_ID = re.compile(r"cann(?P<cann>[0-9][0-9a-z.]{0,40}?)-(?P<chip>" + "|".join(map(re.escape, CHIPS)) + r")"
                 r"(?:-(?P<product>[a-z][a-z0-9]{0,30}(?:-[a-z0-9]{1,30}){0,5}))?"
                 r"-(?P<os>[a-z]{1,20}[0-9]{1,4}(?:\.[0-9]{1,4})?)-py(?P<python>[0-9]{1,2}\.[0-9]{1,3})"
                 r"(?:-torch_npu(?P<torch_npu>[0-9][0-9a-z._]{0,60}?))?-(?P<arch>" + "|".join(ARCHS) + r")"
                 r"(?:-(?P<cpu>" + CPU + r"))?")


def parse_id(text: str) -> Optional[CellId]:
    """The inverse of ``matrix.derive_id``, for a cell id or an image tag; CANN in its releases'
    spelling (``8.0.RC3``); None for an id a matrix chose itself (``id:``).

    Parameters
    ----------
    text: a cell id or a tag, e.g. the value of the image's cell label (``Label.CELL``).

    Examples
    --------
    >>> parse_id("cann8.0.rc3-910b-ubuntu22.04-py3.10-torch_npu2.4.0-x86_64-cpu")
    CellId(cann='8.0.RC3', chip='910b', os='ubuntu22.04', python='3.10', torch_npu='2.4.0', arch='x86_64', variant='cpu', product='')
    >>> parse_id("cann8.5.0-a3-ubuntu22.04-py3.11-aarch64").torch_npu, parse_id("team-base")
    ('', None)
    >>> parse_id("cann9.1.0-950-atlas-950-superpod-ubuntu22.04-py3.11-aarch64").product
    'atlas-950-superpod'
    """
    m = _ID.fullmatch(str(text).strip().lower()[:200])
    if m is None:
        return None
    cann = re.sub(r"\.rc([0-9])", r".RC\1", m["cann"])  # the releases' own spelling, as Releases.canonical_cann (knowledge.pairings)
    return CellId(cann, m["chip"], m["os"], m["python"], m["torch_npu"] or "", m["arch"], CPU if m["cpu"] else NPU,
                  m["product"] or "")


_STAND_IN = re.compile(r"-" + CPU + r"-on-[a-z]{1,20}[0-9]{1,4}(?:\.[0-9]{1,4})?")  # vocabulary.stand_in_tag's tail


def named_by_tag(tag: str) -> Optional[Tuple[str, str]]:
    """The (cell id, variant) an image tag names: a release tag (``<cell>``, ``<cell>-cpu``), a
    ``-candidate``, a stand-in twin's (``<cell>-cpu-on-<os>``) or a lazily pullable variant's (the
    tag it was made from, then ``-estargz``); None for a tag that names no derived cell id
    (``latest``, a matrix's own ``id:``, an index's tag without its arch).

    Examples
    --------
    >>> named_by_tag("cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64-cpu")
    ('cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64', 'cpu')
    >>> named_by_tag("cann8.5.0-a3-ubuntu22.04-py3.11-aarch64-cpu-on-debian12")
    ('cann8.5.0-a3-ubuntu22.04-py3.11-aarch64', 'cpu')
    >>> named_by_tag("cann8.5.0-a3-ubuntu22.04-py3.11-aarch64-candidate"), named_by_tag("latest")
    (('cann8.5.0-a3-ubuntu22.04-py3.11-aarch64', 'npu'), None)
    >>> named_by_tag("cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64-cpu-estargz")
    ('cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64', 'cpu')
    """
    text = str(tag).strip().lower()[:200]
    lazy = next((fmt for fmt in LAZY_FORMATS if text.endswith("-" + fmt)), None)
    if lazy is not None:
        text = text[: -len(lazy) - 1]
    if text.endswith(CANDIDATE_SUFFIX):
        text = text[: -len(CANDIDATE_SUFFIX)]
    stand_in = _STAND_IN.search(text)
    if stand_in is not None and stand_in.end() == len(text):
        text = text[: stand_in.start()] + "-" + CPU
    parsed = parse_id(text)
    if parsed is None:
        return None
    return (text[: -len("-" + CPU)] if parsed.variant == CPU else text), parsed.variant


__all__ = ["CellId", "named_by_tag", "parse_id"]
