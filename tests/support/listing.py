"""The engine's images and containers as the tests list them, robust to a shared engine.

The SDK's ``images.list()`` inspects every image it lists, one request each, and raises
ImageNotFound when another process on the engine (another test's cleanup, another run of the
suite, a helper's build) removes one in between; ``containers.list()`` does the same unless
told ``ignore_removed``. Under load that window is wide. `images` asks once and inspects
nothing; `containers` skips what is gone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional


@dataclass(frozen=True)
class Listed:
    """One image as `docker images` lists it."""

    id: str
    tags: List[str]
    digests: List[str]
    labels: Dict[str, str]


def images(engine, name: Optional[str] = None, filters: Optional[Dict[str, Any]] = None) -> List[Listed]:
    """The engine's images (those of repository ``name``, or matching ``filters``), in one request."""
    found = engine.client.api.images(name=name, filters=filters)
    return [Listed(str(row["Id"]), [t for t in row.get("RepoTags") or [] if t != "<none>:<none>"],
                   [d for d in row.get("RepoDigests") or [] if d != "<none>@<none>"], dict(row.get("Labels") or {}))
            for row in found]


def containers(engine, **options: Any) -> List:
    """``containers.list(**options)``, leaving out any removed while it was being listed."""
    return engine.client.containers.list(ignore_removed=True, **options)
