"""The base OS: the image's first stage, and its OS packages installed by the OS family's package manager.

`FAMILIES` holds each package family (``family`` of ``builder/data/os.yaml``) in one place: the
packages an NPU image and a CPU twin need from it, and how it installs them. OS packages are not
pinned, on purpose: their versions follow the base image's security updates (hadolint's DL3008
and DL3041 are ignored for that step); every Python package comes from the cell's lock.

Parameters:
    family      the package family, a key of `FAMILIES` (``apt``, ``dnf``)
    packages    the OS packages to install, in order
    number      the step's printed number
    stage       the name later stages start from (``os``), "" when none does
    codename    apt only: the distribution's codename, for a mirror's ``deb`` line
    components  apt only: the archive components of that line (``main``, ``main universe``)

Example:
    >>> text = BaseOs("dnf", ("bash", "tar"), 1).render()
    >>> text.splitlines()[-4:]
    ['    dnf install -y \\\\', '        bash \\\\', '        tar \\\\', '    && dnf clean all && rm -rf /var/cache/dnf']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Tuple

from builder.images.blocks.common import SHELL, Block, net


@dataclass(frozen=True)
class BaseOs(Block):
    family: str
    packages: Tuple[str, ...]
    number: int
    stage: str = ""
    codename: str = ""
    components: str = ""

    def render(self) -> str:
        return (f"\nFROM ${{BASE_IMAGE}}{' AS ' + self.stage if self.stage else ''}\n\n{SHELL}\n"
                f"# {self.number}. OS packages, at the versions of the base image's distribution.\n"
                + FAMILIES[self.family].install(self))


def _listed(packages: Tuple[str, ...]) -> str:
    return "".join(f"        {name} \\\n" for name in packages)


def _apt(block: BaseOs) -> str:
    # a mirror (APT_MIRROR, from the build's secret) replaces the base image's sources for this step only
    return ("# hadolint ignore=DL3008\n"
            f"RUN {net()}\n"
            "    apt_opts=() && \\\n"
            '    if [ -n "${APT_MIRROR:-}" ]; then \\\n'
            f"        printf 'deb %s {block.codename} {block.components}\\n' \"$APT_MIRROR\" > /tmp/apt-mirror.list && \\\n"
            "        apt_opts=(-o Dir::Etc::SourceList=/tmp/apt-mirror.list -o Dir::Etc::SourceParts=/nonexistent); \\\n"
            "    fi && \\\n"
            "    if [ -s /run/secrets/ca ]; then apt_opts+=(-o Acquire::https::CaInfo=/run/secrets/ca); fi && \\\n"
            '    apt-get "${apt_opts[@]}" update && \\\n'
            '    DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" install -y --no-install-recommends \\\n'
            f"{_listed(block.packages)}"
            "    && rm -rf /var/lib/apt/lists/* /tmp/apt-mirror.list\n")


def _dnf(block: BaseOs) -> str:
    return ("# hadolint ignore=DL3041\n"
            f"RUN {net()}\n"
            "    dnf install -y \\\n"
            f"{_listed(block.packages)}"
            "    && dnf clean all && rm -rf /var/cache/dnf\n")


@dataclass(frozen=True)
class Family:
    """One package family: what its images install, and the RUN that installs it."""

    # bash/curl/unzip fetch and unpack installers; python3 runs CANN's install scripts (and is
    # the interpreter of venv images); gcc/g++/make: CANN's operator compiler
    npu_packages: Tuple[str, ...]
    cpu_packages: Tuple[str, ...]  # the CPU twin needs no compiler and no installers
    install: Callable[[BaseOs], str]


FAMILIES: Dict[str, Family] = {
    "apt": Family(
        npu_packages=("bash", "ca-certificates", "curl", "unzip", "python3", "python3-venv",
                      "gcc", "g++", "make", "libc6-dev", "libgomp1", "libnuma1"),
        cpu_packages=("bash", "ca-certificates", "curl", "python3", "python3-venv", "libgomp1"),
        install=_apt),
    "dnf": Family(
        npu_packages=("bash", "ca-certificates", "curl", "unzip", "python3", "gcc", "gcc-c++", "make",
                      "libgomp", "numactl-libs", "tar", "gzip", "findutils", "which"),
        cpu_packages=("bash", "ca-certificates", "curl", "python3", "libgomp", "findutils"),
        install=_dnf),
}
# apt's archive components per distribution (the OS id without its version), for a mirror's deb line
APT_COMPONENTS = {"ubuntu": "main universe", "debian": "main"}
