r"""Known Ascend error strings -> cause and fix: how the table is matched and filled, said once.

The entries live in ``builder/data/errors.yaml`` (each with its source). On a node,
``ascend-build explain`` and ``doctor`` read them through ``builder.knowledge``; in an
image the smoke program reads the copy shipped beside it as ``errors.json``. Both
match and fill with the functions here, so a failing smoke tier and ``explain`` say
the same thing. Standard library only, Python 3.8+: copied into every image.

Example:
    >>> table = compile_table([{"id": "hal", "patterns": ["libascend_hal\\.so"],
    ...                         "cause": "no driver", "fix": "mount {what}", "source": "guide"}])
    >>> [(entry.id, hit.group(0)) for entry, hit, _, _ in find(table, "cannot open libascend_hal.so")]
    [('hal', 'libascend_hal.so')]
    >>> fill("mount {what} for {who}", {"what": "the driver"}, "?")
    'mount the driver for ?'
"""
from __future__ import annotations

import json
import os
import re
import string
from collections import namedtuple

Entry = namedtuple("Entry", "id patterns cause fix source")


def compile_table(entries):
    """Raw entries (dicts with id, patterns, cause, fix, source) -> Entries, patterns
    compiled case-insensitive."""
    return tuple(Entry(str(e["id"]), tuple(re.compile(p, re.IGNORECASE) for p in e["patterns"]),
                       str(e["cause"]), str(e["fix"]), str(e.get("source", "")))
                 for e in entries)


LINE_LIMIT = 4096  # an error message is a line; a longer one is cut, so no pattern's time can grow with its square


def _first(pattern, lines):
    """(offset of the match in the whole text, match) of the first line ``pattern`` matches."""
    for offset, line in lines:
        m = pattern.search(line)
        if m:
            return offset + m.start(), m
    return None


def find(table, text):
    """Every entry that matches ``text``, in table order: (entry, first match, named groups,
    where in ``text`` it starts).

    Patterns are matched line by line (none spans lines), each line cut at ``LINE_LIMIT``.
    """
    lines, offset = [], 0
    for line in (text or "").splitlines(True):
        lines.append((offset, line.rstrip("\r\n")[:LINE_LIMIT]))
        offset += len(line)
    found = []
    for entry in table:
        hits = [h for h in (_first(p, lines) for p in entry.patterns) if h]
        if hits:
            groups = {k: v for _, m in hits for k, v in m.groupdict().items() if v}
            start, first = min(hits, key=lambda h: h[0])
            found.append((entry, first, groups, start))
    return found


class _Values(dict):
    def __init__(self, values, unknown):
        dict.__init__(self, {k: v for k, v in values.items() if v not in (None, "")})
        self.unknown = unknown

    def __missing__(self, key):
        return self.unknown


def fill(template, values, unknown):
    """``template`` with ``{name}`` replaced from ``values``; names without a value read ``unknown``."""
    return string.Formatter().vformat(template, (), _Values(values, unknown))


def load_shipped(folder):
    """The table shipped into an image as ``errors.json`` in ``folder``; () when absent."""
    try:
        with open(os.path.join(folder, "errors.json")) as fh:
            return compile_table(json.load(fh))
    except (OSError, ValueError, KeyError, TypeError):
        return ()
