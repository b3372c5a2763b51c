"""The environment defaults of the field guide, each overridable per cell (``env_vars``).

`builder.images.plan.env_vars` decides them: the field guide's defaults, those the cell's
torch_npu accepts, and the cell's own values over them, by name, sorted.

Parameters:
    number  the step's printed number
    env     (name, value) pairs, in order

Example:
    >>> print(EnvDefaults(7, (("HCCL_CONNECT_TIMEOUT", "1800"),)).render(), end="")
    <BLANKLINE>
    # 7. Defaults from the field guide; each can be overridden per cell (env_vars).
    ENV HCCL_CONNECT_TIMEOUT="1800"
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

from builder.images.blocks.common import Block, env_lines


@dataclass(frozen=True)
class EnvDefaults(Block):
    number: int
    env: Tuple[Tuple[str, str], ...]

    def render(self) -> str:
        return (f"\n# {self.number}. Defaults from the field guide; each can be overridden per cell (env_vars).\n"
                + env_lines(self.env))
