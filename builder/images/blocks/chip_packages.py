"""The chip's CANN packages (NPU image only): its operator package, then NNAL (ATB) when the cell
asks for it, installed with the toolkit's environment sourced.

They sit on the Python closure, so the images of two chips share everything below them (the
toolkit and the whole environment); torch_npu sits on them, so a bump moves neither. A CANN-only
image has them last. The files come from `CannInstallers`' stage, checked there.

Parameters:
    chip          the chip the packages are for
    number        the step's printed number
    installers    the chip's packages, `InstallerFile`, in install order
    mount_points  True when torch_npu's layer above is built to be the same bytes on every chip:
                  the mount points laid down by `CannInstallers` are copied in first

Example:
    >>> from builder.images.blocks.cann_installers import InstallerFile
    >>> ops = InstallerFile("ops.run", "", "0" * 64, "ops.run", kind="ops")
    >>> ChipPackages("910b", 5, (ops,)).render().splitlines()[:2]
    ['', '# 5. The 910b operator package.']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

from builder.images.blocks.cann_installers import InstallerFile
from builder.images.blocks.common import Block, install_package


@dataclass(frozen=True)
class ChipPackages(Block):
    chip: str
    number: int
    installers: Tuple[InstallerFile, ...]
    mount_points: bool = False

    def render(self) -> str:
        nnal = ", then NNAL (ATB), with the toolkit's environment" if len(self.installers) > 1 else ""
        return (f"\n# {self.number}. The {self.chip} operator package{nnal}.\n"
                + ("COPY --from=mount-points /mount-points/ /etc/\n" if self.mount_points else "")
                + "".join(install_package(f.run, f.sources) for f in self.installers))
