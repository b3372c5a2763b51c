"""The image's labels, which a node decides from alone, then its default command.

`builder.images.plan` decides the labels (the cell, its versions, the content hash, the lock's
state, the minimum driver); each value is checked there to be plain text.

Parameters:
    labels   (key, value) pairs, in order
    command  the default command (CMD)

Example:
    >>> print(ImageLabels((("a.cell", "c1"), ("a.variant", "cpu"))).render(), end="")
    <BLANKLINE>
    LABEL \\
        a.cell="c1" \\
        a.variant="cpu"
    <BLANKLINE>
    CMD ["/bin/bash"]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

from builder.images.blocks.common import Block


@dataclass(frozen=True)
class ImageLabels(Block):
    labels: Tuple[Tuple[str, str], ...]
    command: str = "/bin/bash"

    shared = False  # they name the cell and its content hash

    def render(self) -> str:
        lines = " \\\n".join(f'    {key}="{value}"' for key, value in self.labels)
        return f"\nLABEL \\\n{lines}\n\nCMD [\"{self.command}\"]\n"
