"""Locks in tests, where a missing lock or a missing entry fails the test: `read` and `entry`
return the lock and the entry themselves (never None), naming what is missing."""

from __future__ import annotations

from pathlib import Path

from builder.images import lock


def read(folder: Path) -> lock.Lock:
    made = lock.read(folder)
    assert made is not None, f"no lock in {folder}"
    return made


def entry(made: lock.Lock, name: str) -> lock.Entry:
    found = made.entry(name)
    assert found is not None, f"the lock has no {name}"
    return found
