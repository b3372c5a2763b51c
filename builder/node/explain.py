"""Known Ascend error strings -> cause and fix, with this node's versions filled in.

Why: the same dozen messages (``dcmi ... ret is -8020``, ``207004``,
``libascend_hal.so: cannot open``, ``undefined symbol: _ZN3atb...``) cost every new
user a day; their meaning is known (ascend-facts.md, "What users hit"). The table
lives in ``builder/data/errors.yaml`` and is the one source for ``ascend-build
explain`` and for the fixes ``ascend-build doctor`` prints (``fix_for``).

A fix may name ``{placeholders}``; they are filled from, in this order of strength:
named groups of the matching pattern (the text is the subject), the image labels
(``builder.vocabulary.Label``), the host probe, and the knowledge base; an unknown value
reads ``(unknown here)``.

Example:
    >>> m = explain("RuntimeError: not support driver 24.1")[0]
    >>> m.id
    'driver-too-old'
    >>> "24.1" in m.fix
    True
    >>> explain("all good")
    []
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Dict, List, Mapping, Optional, Tuple

from builder import knowledge
from builder.node.host import HostInfo
from builder.smoke import error_table
from builder.smoke.error_table import Entry
from builder.vocabulary import Label, normalize_arch

UNKNOWN = "(unknown here)"
# Placeholders a fix may use besides the named groups of its own patterns.
PLACEHOLDERS = (
    "host_driver", "host_firmware", "host_arch", "host_chip", "devices", "driver_fw_range",
    "image_min_driver", "image_min_firmware", "image_cann", "image_torch_npu", "image_arch",
    "image_chip", "paired_cann", "paired_torch_npu",
)


@dataclass(frozen=True)
class Match:
    """One known error found in the text: what matched, why, what to do (fix filled in)."""

    id: str
    matched: str
    cause: str
    fix: str
    source: str

    def to_dict(self) -> Dict[str, str]:
        return asdict(self)


@lru_cache(maxsize=1)
def table() -> Tuple[Entry, ...]:
    """The entries of errors.yaml, read and compiled once.

    Example:
        >>> [e.id for e in table()][:2]
        ['platform-mismatch', 'dcmi-device-in-use']
    """
    return error_table.compile_table(knowledge.error_entries())


def entry(entry_id: str) -> Entry:
    """The entry with that id (KeyError for an unknown id: a programming error).

    Example:
        >>> entry("no-valid-device").id
        'no-valid-device'
    """
    for e in table():
        if e.id == entry_id:
            return e
    raise KeyError(entry_id)


# ---------------------------------------------------------------------------------------
# placeholder values


def _platform_arch(text: Optional[str]) -> Optional[str]:
    """``linux/arm64/v8`` -> ``aarch64``."""
    parts = str(text or "").split("/")
    return normalize_arch(parts[1]) if len(parts) > 1 else None


def _ranges_text(ranges: List[List[str]]) -> str:
    return ", ".join(f"[{a},{b}]" for a, b in ranges)


def context(host: Optional[HostInfo] = None, labels: Optional[Mapping[str, str]] = None,
            **values: Optional[str]) -> Dict[str, str]:
    """Placeholder values from the host, the image labels and ``values`` (strongest last).

    Example:
        >>> context(HostInfo(driver="24.1.rc3"), {Label.CANN: "8.0.RC3"})["image_min_driver"]
        '24.1.RC3'
    """
    kb = knowledge.load()
    labels = labels or {}
    ctx: Dict[str, Optional[str]] = {}
    if host is not None:
        ctx.update(host_driver=host.driver, host_firmware=host.firmware, host_arch=host.arch,
                   host_chip=host.chip)
        if host.devices:
            ctx["devices"] = " ".join(f"--device /dev/davinci{n}" for n in host.devices)
        if host.driver_fw_ranges:
            ctx["driver_fw_range"] = _ranges_text(host.driver_fw_ranges)
    ctx.update({k: v for k, v in (
        ("image_min_driver", labels.get(Label.MIN_DRIVER)),
        ("image_min_firmware", labels.get(Label.MIN_FIRMWARE)),
        ("image_cann", labels.get(Label.CANN)),
        ("image_torch_npu", labels.get(Label.TORCH_NPU)),
        ("image_arch", labels.get(Label.ARCH)),
        ("image_chip", labels.get(Label.CHIP)),
    ) if v})
    ctx.update({k: v for k, v in values.items() if v})
    if ctx.get("reported_driver") and not values.get("host_driver"):
        ctx["host_driver"] = ctx["reported_driver"]
    for group, key in (("host_platform", "host_arch"), ("image_platform", "image_arch")):
        if _platform_arch(ctx.get(group)):
            ctx[key] = _platform_arch(ctx.get(group))
    # what the knowledge base adds
    image_cann = ctx.get("image_cann")
    if image_cann:
        ctx.setdefault("image_min_driver", kb.drivers.min_driver(image_cann, labels.get(Label.PRODUCT) or ""))
        paired = [r.version for r in kb.releases.torch_npu_for_cann(image_cann)]
        if paired:
            ctx.setdefault("paired_torch_npu", "torch_npu " + " or ".join(paired))
    image_torch_npu = ctx.get("image_torch_npu")
    if image_torch_npu:
        rel = kb.releases.torch_npu(image_torch_npu)
        ctx.setdefault("paired_cann", rel.cann if rel else None)
    host_driver = ctx.get("host_driver")
    if host_driver and not ctx.get("driver_fw_range"):
        rng = kb.drivers.firmware_range(host_driver)
        ctx["driver_fw_range"] = f"[{rng[0]},{rng[1]}]" if rng else None
    defaults = {"devices": "--device /dev/davinciN", "paired_torch_npu": "see `ascend-build kb cann <version>`"}
    return {k: (ctx.get(k) or defaults.get(k) or UNKNOWN) for k in set(PLACEHOLDERS) | set(ctx)}


def fill(template: str, values: Mapping[str, str]) -> str:
    """``template`` with ``{name}`` replaced; unknown names read ``(unknown here)``.

    Example:
        >>> fill("upgrade to {image_min_driver}; firmware {x}", {"image_min_driver": "24.1.RC3"})
        'upgrade to 24.1.RC3; firmware (unknown here)'
    """
    return error_table.fill(template, values, UNKNOWN)


def fix_for(entry_id: str, host: Optional[HostInfo] = None, labels: Optional[Mapping[str, str]] = None,
            **values: Optional[str]) -> str:
    """The filled-in fix of one entry: doctor's fixes come from here, not from its own text.

    Example:
        >>> fix_for("driver-too-old", image_min_driver="25.0.RC1").split(" to at least ")[1][:8]
        '25.0.RC1'
    """
    return fill(entry(entry_id).fix, context(host, labels, **values))



# ---------------------------------------------------------------------------------------
# explain


def explain(text: str, host: Optional[HostInfo] = None,
            labels: Optional[Mapping[str, str]] = None) -> List[Match]:
    """Every known error in ``text``, once each, in the order they first appear.

    Unknown text gives ``[]`` (the CLI then says it knows no such error, exit 1).

    Example:
        >>> [m.id for m in explain("ImportError: libhccl.so: cannot open shared object file\\n"
        ...                        "RuntimeError: Failed to infer device type")]
        ['cann-env-not-set']
    """
    found = sorted(error_table.find(table(), text), key=lambda hit: hit[3])  # in order of appearance
    return [Match(e.id, first.group(0), e.cause, fill(e.fix, context(host, labels, **groups)), e.source)
            for e, first, groups, _ in found]


def format_explanations(matches: List[Match]) -> str:
    """Matches as text blocks (``ascend-build explain``); empty string for none.

    Example:
        >>> print(format_explanations(explain("ret is -8020, dcmi model initialized failed, because the device is used")).splitlines()[0])
        dcmi-device-in-use: "dcmi model initialized failed, because the device is used"
    """
    blocks = []
    for m in matches:
        blocks.append(f'{m.id}: "{m.matched}"\n  cause:  {m.cause}\n  fix:    {m.fix}\n  source: {m.source}')
    return "\n\n".join(blocks)


def entries_to_dicts() -> List[Dict[str, object]]:
    """Every known error as JSON-able data: id, patterns, cause, fix (unfilled) and source
    (``ascend-build explain --list --json``).

    Example:
        >>> sorted(entries_to_dicts()[0])
        ['cause', 'fix', 'id', 'patterns', 'source']
    """
    return [{"id": e.id, "patterns": [p.pattern for p in e.patterns], "cause": e.cause, "fix": e.fix,
             "source": e.source} for e in table()]


def format_table(width: int = 100) -> str:
    """What `explain` knows, one line each: the id and its cause, cut to ``width``; a count at the end.

    Example:
        >>> print(format_table().splitlines()[0])  # doctest: +ELLIPSIS
        platform-mismatch          The image was built for another CPU architecture than this host ...
    """
    import textwrap

    known = table()
    pad = max(len(e.id) for e in known) + 2
    lines = [f"{e.id:<{pad}}" + textwrap.shorten(e.cause, width=max(20, width - pad), placeholder=" ...")
             for e in known]
    return "\n".join(lines + ["", f"{len(known)} known errors; `ascend-build explain \"TEXT\"` finds them in a log, "
                                  "`--list --json` shows each one's patterns, fix and source"])


__all__ = ["Entry", "Match", "table", "entry", "explain", "format_explanations", "fix_for", "fill", "context",
           "entries_to_dicts", "format_table"]
