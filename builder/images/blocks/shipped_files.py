"""What every image carries about itself: the smoke program and the files it runs with, the driver
guard (executable, linked from the ENTRYPOINT's path), the image's manifest (the run record of the
cell) and, when the cell has a usable lock, that lock.

Parameters:
    number         the step's printed number
    manifest_file  the manifest's file in the context (``manifest.json``, ``manifest.cpu.json``)
    lock_file      the lock's file in the context, "" when the cell has no usable lock
    files          the files shipped beside the smoke program, the guard's aside
    guard_file     the guard's file among the shipped ones
    tool_dir       where they go in the image
    guard          the guard's path in the image (the ENTRYPOINT)
    manifest_path  where the manifest goes in the image
    lock_path      where the lock goes in the image

Example:
    >>> ShippedFiles(9, "manifest.json", manifest_path="/m.json").render().splitlines()[-1]
    'COPY manifest.json /m.json'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

from builder import vocabulary
from builder.images.blocks.common import Block

BESIDE_THE_GUARD = tuple(n for n in vocabulary.SHIPPED_FILES if n != vocabulary.GUARD_FILE)


@dataclass(frozen=True)
class ShippedFiles(Block):
    number: int
    manifest_file: str
    lock_file: str = ""
    files: Tuple[str, ...] = BESIDE_THE_GUARD
    guard_file: str = vocabulary.GUARD_FILE
    tool_dir: str = vocabulary.TOOL_DIR
    guard: str = vocabulary.GUARD
    manifest_path: str = vocabulary.MANIFEST
    lock_path: str = vocabulary.LOCK

    def render(self) -> str:
        return (f"\n# {self.number}. The smoke program, the driver guard and this image's manifest "
                "(the run record of the cell).\n"
                f"COPY {' '.join(self.files)} {self.tool_dir}/\n"
                f"COPY --chmod=0755 {self.guard_file} {self.tool_dir}/\n"
                f"RUN ln -s {self.tool_dir}/{self.guard_file} {self.guard}\n"
                f"COPY {self.manifest_file} {self.manifest_path}\n"
                + (f"COPY {self.lock_file} {self.lock_path}\n" if self.lock_file else ""))
