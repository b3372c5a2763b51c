"""The Dockerfile's building blocks: one module per concern, each a frozen dataclass of the values
its fragment prints, documented in its module, with a ``render()`` that returns that fragment.

`ORDER` lists them in one place, in the order their fragments appear in a Dockerfile. A plan
(`builder.images.plan.Plan`) holds the blocks of one image in that order (those the image has:
the CPU twin has no CANN; a Python step is there once per requirements file) and the Dockerfile
is their fragments, joined (`dockerfile`). Layer order is chosen for sharing: OS -> CANN's
toolkit -> Python environment -> the locked closure -> what the lock could not verify -> the
chip's packages -> torch_npu -> ENV -> the image's files, guard and labels. A torch_npu bump that
moves nothing else in the lock changes nothing above its step.

Network steps get the build-time settings (mirrors, proxies, a CA bundle) as BuildKit secrets,
mounted only while a step runs (`common.net`): nothing of them lands in a layer or in
``docker history``. builder/images/stage.py writes them: ``buildenv``, a shell file of exports
(APT_MIRROR, CONDA_CHANNEL, TORCH_INDEX, PIP_INDEX_URL, PIP_CERT...), and ``ca``. Secret mounts
are optional in BuildKit, so a build by hand needs neither. Proxy variables are Docker's
predefined build args, kept out of the history by Docker.

Example:
    >>> [block.__name__ for block in ORDER][:3]
    ['Header', 'ContextInputs', 'BaseOs']
"""

from __future__ import annotations

from typing import Iterable, Tuple, Type

from builder.images.blocks.base_os import BaseOs
from builder.images.blocks.cann_env import CannEnv
from builder.images.blocks.cann_installers import CannInstallers
from builder.images.blocks.chip_packages import ChipPackages
from builder.images.blocks.common import Block, formatted
from builder.images.blocks.context_inputs import ContextInputs
from builder.images.blocks.env_defaults import EnvDefaults
from builder.images.blocks.guard import DriverGuard
from builder.images.blocks.header import Header
from builder.images.blocks.image_labels import ImageLabels
from builder.images.blocks.python_environment import PythonEnvironment
from builder.images.blocks.python_packages import LockedPackages, UnverifiedPackages
from builder.images.blocks.shipped_files import ShippedFiles
from builder.images.blocks.uv_stage import UvStage

# Every block, in the order of its fragment in a Dockerfile. The three Python steps and the
# chip's packages share one place: in the order of the plan's steps.
ORDER: Tuple[Type[Block], ...] = (
    Header,              # what the file is, how to build it by hand; the base image's build arg
    ContextInputs,       # the context's optional folders as stages: wheelhouse, Miniforge's installer
    BaseOs,              # FROM the base image; its OS packages, by package family
    UvStage,             # uv, the installer of the locked steps, in a stage of its own
    CannInstallers,      # NPU: every CANN package fetched and checked; the toolkit installed
    CannEnv,             # NPU: CANN's set_env.sh as ENV
    PythonEnvironment,   # a venv or a conda environment
    LockedPackages,      # a Python step whose every file is pinned by sha256 (closure, torch_npu)
    UnverifiedPackages,  # a Python step the lock could not verify, behind a build arg
    ChipPackages,        # NPU: the chip's operator package (and NNAL), below torch_npu
    EnvDefaults,         # the field guide's environment defaults, and the cell's own
    ShippedFiles,        # the smoke program, the driver guard, the manifest, the lock
    DriverGuard,         # the minimum driver and firmware as ENV; the ENTRYPOINT
    ImageLabels,         # the labels a node decides from; CMD
)
# The blocks that may come in any order among themselves (the Python steps and the chip's).
STEPS = (LockedPackages, UnverifiedPackages, ChipPackages)


def dockerfile(blocks: Iterable[Block]) -> str:
    """The Dockerfile made of ``blocks``: their fragments, in order."""
    return "".join(map(formatted, blocks))


__all__ = ["ORDER", "STEPS", "Block", "dockerfile", "BaseOs", "CannEnv", "CannInstallers", "ChipPackages",
           "ContextInputs", "DriverGuard", "EnvDefaults", "Header", "ImageLabels", "LockedPackages",
           "PythonEnvironment", "ShippedFiles", "UnverifiedPackages", "UvStage"]
