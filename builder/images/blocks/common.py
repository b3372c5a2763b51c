"""What every building block shares: the `Block` interface, the cache of formatted fragments,
and the two RUN prefixes several fragments use (the network mounts, one CANN package's install).

A block is a frozen dataclass holding exactly the values its fragment prints, each checked and
decided before (`builder.images.plan`): formatting decides nothing. Two equal blocks print the
same text. The plan makes each distinct block once per process, so the cells that share a block
(the OS packages of a Debian NPU image, the guard of a driver minimum) share the very same
object, and `formatted` formats it once (`Block.text`). Blocks unique to one cell (its header,
its labels) say ``shared = False`` and are formatted each time.

Example:
    >>> net(wheels=True, binds=("uv.txt",)).splitlines()[1]
    '    --mount=type=bind,from=wheelhouse,target=/wheelhouse \\\\'
"""

from __future__ import annotations

from functools import cached_property
from typing import ClassVar, Sequence

from builder.images.stage import WHEELHOUSE

SHELL = 'SHELL ["/bin/bash", "-o", "pipefail", "-c"]\n'
ALLOW_UNVERIFIED = "ASCEND_BUILD_ALLOW_UNVERIFIED"  # the build arg that lets unverified steps run


class Block:
    """One concern of a Dockerfile: `render` returns its fragment, whole lines, each ending in a newline.

    Subclasses are frozen dataclasses whose fields are the fragment's parameters (documented in
    each module's docstring); ``shared`` says whether the fragment is worth keeping for other cells.
    """

    shared: ClassVar[bool] = True

    def render(self) -> str:
        raise NotImplementedError

    @cached_property
    def text(self) -> str:
        """`render`'s fragment, formatted once per block (kept in the block's own ``__dict__``)."""
        return self.render()


def formatted(block: Block) -> str:
    """``block``'s fragment: formatted once when the block is shared (see the module docstring)."""
    return block.text if block.shared else block.render()


def net(wheels: bool = False, binds: Sequence[str] = (), uv: bool = False, tmpfs: bool = False,
        conda_folder: str = "", wheelhouse: str = WHEELHOUSE) -> str:
    """The mounts of a RUN that may reach the network, after ``RUN ``: the build-time settings as
    BuildKit secrets (mounted only while the step runs, never in a layer), then, when asked, the
    wheelhouse stage, context files at /tmp/<name>, Miniforge's installer folder and uv; then the
    settings sourced. Ends with ``&& \\`` (no newline): the step's command follows."""
    text = "--mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/run/secrets \\\n    " if tmpfs else ""
    text += "--mount=type=secret,id=buildenv --mount=type=secret,id=ca"
    if wheels:
        text += f" \\\n    --mount=type=bind,from={wheelhouse},target=/wheelhouse"
    for name in binds:
        text += f" \\\n    --mount=type=bind,source={name},target=/tmp/{name}"
    if conda_folder:
        text += f" \\\n    --mount=type=bind,from={conda_folder},target=/tmp/{conda_folder}"
    if uv:
        text += " \\\n    --mount=type=bind,from=uv,source=/uv,target=/opt/uv"
    return text + " \\\n    if [ -s /run/secrets/buildenv ]; then . /run/secrets/buildenv; fi && \\"


def install_package(run: str, sources: str = "") -> str:
    """The RUN that installs one CANN package from the ``cann-files`` stage, in a layer of its own
    (``sources``: a script sourced first, NNAL's the toolkit's set_env.sh)."""
    sourced = f"    . {sources} && \\\n" if sources else ""
    return (f"RUN --mount=type=bind,from=cann-files,source=/cann/{run},target=/tmp/cann/{run} \\\n"
            f"{sourced}"
            f"    bash '/tmp/cann/{run}' --quiet --install --install-for-all && \\\n"
            "    rm -rf /root/.cache /root/ascend /var/log/ascend_seclog\n")


def env_lines(pairs: Sequence[Sequence[str]]) -> str:
    """``ENV NAME="value"`` lines, one per pair, in order (a later line may refer to an earlier one)."""
    return "".join(f'ENV {name}="{value}"\n' for name, value in pairs)
