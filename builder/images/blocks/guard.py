"""The driver guard: every image's ENTRYPOINT, and what it checks, as ENV.

The guard file is the same bytes in every image; what it checks is this cell's, here at the end.
It reads the node's driver/version.info before the command runs (builder/smoke/driver_guard.py):
``docker run IMAGE CMD`` goes through it, a Kubernetes ``command:`` names it first. Both images
state the NPU image's minimum (the twin's guard can then be run where no NPU is).

Parameters:
    requirement  (name, value) pairs: the minimum driver and firmware
    guard        the guard's path in the image

Example:
    >>> DriverGuard((("ASCEND_REQUIRE_DRIVER", "25.0.RC1"),)).render().splitlines()[-1]
    'ENTRYPOINT ["/usr/local/bin/ascend-driver-guard"]'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

from builder import vocabulary
from builder.images.blocks.common import Block, env_lines


@dataclass(frozen=True)
class DriverGuard(Block):
    requirement: Tuple[Tuple[str, str], ...]
    guard: str = vocabulary.GUARD

    def render(self) -> str:
        return ("\n# The driver guard: refuses to start on a node whose NPU driver is older than this.\n"
                + env_lines(self.requirement) + f'ENTRYPOINT ["{self.guard}"]\n')
