"""A count of bytes as people read it, the one way every message and page of the tool writes it.

Example:
    >>> size(512), size(1536), size(5 << 20), size(3 << 30)
    ('512 B', '1.5 KiB', '5.0 MiB', '3.0 GiB')
"""


def size(count: int) -> str:
    """``count`` bytes in the largest binary unit that keeps it at 1 or more (TiB at most)."""
    value, unit = float(count), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            break
        value /= 1024
    return f"{count} B" if unit == "B" else f"{value:.1f} {unit}"
