"""A real headless browser for tests that look at a page: Debian's Chromium, driven by its command line.

``dump_dom`` prints the DOM after the page loaded (what a reader sees, scripts run or not);
``screenshot`` writes a PNG of the window. Each run gets a profile folder of its own and every
background fetch switched off, so nothing leaves the machine. `png_colours` reads the PNG with the
standard library alone (zlib and the PNG row filters), to tell a page drawn from a blank one.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from pathlib import Path
from typing import List, Optional, Set, Tuple

import pytest

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")


def chromium() -> str:
    """The chromium binary; the test is skipped, naming the setup that installs it, when there is none."""
    found = shutil.which("chromium")
    if not found:
        pytest.skip("chromium missing: run scripts/setup-engine.sh as root (apt-get install chromium)")
    return found


def _run(args: List[str], profile: Path) -> subprocess.CompletedProcess:
    done = subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def dump_dom(url: str, profile: Path) -> str:
    return _run(["--dump-dom", url], profile).stdout


def screenshot(url: str, png: Path, profile: Path, size: Tuple[int, int] = (1280, 2000)) -> Path:
    _run([f"--screenshot={png}", f"--window-size={size[0]},{size[1]}", url], profile)
    assert png.is_file(), f"chromium wrote no {png}"
    return png


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else b if pb <= pc else c


def png_colours(png: Path, rows: Optional[int] = None) -> Tuple[int, int, Set[bytes]]:
    """(width, height, the distinct pixel values of the first ``rows`` rows, all by default) of an
    8-bit RGB or RGBA PNG, decoded with the standard library."""
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    position, chunks, header = 8, [], b""
    while position < len(data):
        length, kind = struct.unpack(">I4s", data[position:position + 8])
        body = data[position + 8:position + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            chunks.append(body)
        position += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and interlace == 0, f"an 8-bit RGB(A) PNG expected: {depth=}, {colour=}"
    channels = 3 if colour == 2 else 4
    stride = width * channels
    raw = zlib.decompress(b"".join(chunks))
    previous = bytearray(stride)
    colours: Set[bytes] = set()
    for y in range(min(height, rows or height)):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            left = line[x - channels] if x >= channels else 0
            up, corner = previous[x], previous[x - channels] if x >= channels else 0
            line[x] = (line[x] + (0, left, up, (left + up) // 2, _paeth(left, up, corner))[kind]) & 0xFF
        colours.update(bytes(line[x:x + channels]) for x in range(0, stride, channels * 7))  # every 7th pixel
        previous = line
    return width, height, colours
