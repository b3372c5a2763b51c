"""The build context's optional inputs, each as a stage of its own: the wheelhouse, and Miniforge's
installer for a conda image.

Each stage copies its folder when the context has it; the COPY source is a glob that matches the
folder and nothing else, and a glob matching nothing copies nothing, so the same Dockerfile builds
with and without the folder. Every pip step mounts the wheelhouse stage at /wheelhouse.

Parameters:
    wheelhouse        the context folder (and stage) of optional wheels
    conda_installer   the context folder (and stage) that may hold Miniforge's installer ("" for a venv image)

Example:
    >>> print(ContextInputs().render(), end="")
    <BLANKLINE>
    FROM scratch AS wheelhouse
    COPY wheelhous[e] /
"""

from __future__ import annotations

from dataclasses import dataclass

from builder.images.blocks.common import Block
from builder.images.stage import WHEELHOUSE


def glob(folder: str) -> str:
    """A COPY source that matches ``folder``, and nothing when it is absent.

    Example:
        >>> glob("wheelhouse")
        'wheelhous[e]'
    """
    return f"{folder[:-1]}[{folder[-1]}]"


@dataclass(frozen=True)
class ContextInputs(Block):
    wheelhouse: str = WHEELHOUSE
    conda_installer: str = ""

    def render(self) -> str:
        text = f"\nFROM scratch AS {self.wheelhouse}\nCOPY {glob(self.wheelhouse)} /\n"
        if self.conda_installer:
            text += f"\nFROM scratch AS {self.conda_installer}\nCOPY {glob(self.conda_installer)} /\n"
        return text
