"""uv, the installer of the locked Python steps, in a stage of its own.

The stage installs uv hash-checked from its context file (pinned by ``builder/data/uv.yaml``);
each locked step mounts it only while it runs, so the image keeps only the empty mount point
/opt/uv. Present only when some Python step is verified.

Parameters:
    requirement_file  the context file pinning uv (``uv.txt``)
    back_to_os        True when no CANN stage follows: the image's own stage starts again from ``os``
    wheelhouse        the stage of optional wheels (uv may come from there)

Example:
    >>> UvStage("uv.txt").render().splitlines()[3]
    'FROM os AS uv'
"""

from __future__ import annotations

from dataclasses import dataclass

from builder.images.blocks.common import SHELL, Block, net
from builder.images.stage import WHEELHOUSE


@dataclass(frozen=True)
class UvStage(Block):
    requirement_file: str
    back_to_os: bool = False
    wheelhouse: str = WHEELHOUSE

    def render(self) -> str:
        return ("\n# uv installs the locked steps: a stage of its own installs it, hash-checked, and each of those\n"
                "# steps mounts it only while it runs: the image keeps only the empty mount point /opt/uv.\n"
                f"FROM os AS uv\n{SHELL}"
                f"RUN {net(wheels=True, binds=(self.requirement_file,), wheelhouse=self.wheelhouse)}\n"
                "    python3 -m venv /tmp/uv-venv && \\\n"
                "    /tmp/uv-venv/bin/pip install --no-cache-dir --require-hashes --no-deps --find-links /wheelhouse \\\n"
                f"        --target /uv -r /tmp/{self.requirement_file}\n"
                + (f"\nFROM os\n{SHELL}" if self.back_to_os else ""))
