"""CANN's ``set_env.sh`` as ENV lines (NPU image only), so that non-interactive shells have it too.

set_env.sh sourced from .bashrc is lost by non-interactive shells ("libhccl.so: cannot open shared
object file"), hence ENV. The lines are in order: each may refer to the ones before it (the
toolkit's home first). `builder.images.plan.cann_env` decides them.

Parameters:
    env   (name, value) pairs, in order

Example:
    >>> print(CannEnv((("ASCEND_TOOLKIT_HOME", "/usr/local/Ascend/ascend-toolkit/latest"),)).render(), end="")
    <BLANKLINE>
    # CANN's set_env.sh as ENV, for non-interactive shells too.
    ENV ASCEND_TOOLKIT_HOME="/usr/local/Ascend/ascend-toolkit/latest"
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

from builder.images.blocks.common import Block, env_lines


@dataclass(frozen=True)
class CannEnv(Block):
    env: Tuple[Tuple[str, str], ...]

    def render(self) -> str:
        return "\n# CANN's set_env.sh as ENV, for non-interactive shells too.\n" + env_lines(self.env)
