"""Refuse a conda layer that holds the channel's credential: the conda step of an image runs this
after conda made the environment, with Miniforge's own Python (standard library only).

The channel (``mirrors.conda_channel``, a BuildKit secret: ``$CONDA_CHANNEL``) may carry a
credential. It is found with a URL parser, not a pattern: in any case of scheme
(``HTTPS://``), the user information (``user:password@``: the whole of it as written, and the
password alone, each as written and percent-decoded), every anaconda.org path token
(``/t/<token>/``) and every query value. Each is then looked for, as bytes, in the files conda
keeps (``conda-meta/`` of both environments, ``.condarc``); a file holding one refuses the layer
(exit 1, naming the file, never the credential).

Usage: python conda_secrets.py PATH...   (a folder is read whole; a missing path is skipped)

Example:
    >>> secrets("HTTPS://user:p%40ss@host/t/TOKEN/conda-forge?k=v")
    ['user:p%40ss', 'user:p@ss', 'p%40ss', 'p@ss', 'TOKEN', 'v']
    >>> secrets("https://conda.anaconda.org/conda-forge")
    []
"""

from __future__ import annotations

import os
import sys
import urllib.parse
from typing import Iterator, List

VARIABLE = "CONDA_CHANNEL"


def secrets(url: str) -> List[str]:
    """Every part of ``url`` that may be a credential, as written and percent-decoded, each once."""
    parts = urllib.parse.urlsplit(url.strip())
    found: List[str] = []
    userinfo = parts.netloc.rpartition("@")[0] if "@" in parts.netloc else ""
    password = userinfo.partition(":")[2]
    segments = parts.path.split("/")
    tokens = [segments[i + 1] for i, segment in enumerate(segments[:-1]) if segment == "t" and segments[i + 1]]
    values = [value for _, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=False)]
    for raw in [userinfo, password, *tokens]:
        found += [raw, urllib.parse.unquote(raw)]
    found += values
    return list(dict.fromkeys(s for s in found if s))


def files(paths: List[str]) -> Iterator[str]:
    """Every regular file under ``paths`` (a file itself, or a folder's, recursively)."""
    for path in paths:
        if os.path.isfile(path):
            yield path
        for root, _, names in os.walk(path):
            for name in sorted(names):
                full = os.path.join(root, name)
                if os.path.isfile(full) and not os.path.islink(full):
                    yield full


def holding(url: str, paths: List[str]) -> List[str]:
    """The files under ``paths`` that hold a credential of ``url``."""
    wanted = [s.encode() for s in secrets(url)]
    if not wanted:
        return []
    out = []
    for path in files(paths):
        with open(path, "rb") as fh:
            data = fh.read()
        if any(secret in data for secret in wanted):
            out.append(path)
    return out


def main(argv: List[str]) -> int:
    found = holding(os.environ.get(VARIABLE, ""), argv)
    if found:
        print("conda wrote the credential of mirrors.conda_channel into " + ", ".join(found) + ": refusing the layer",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
