"""CANN's installers (NPU image only): every package fetched (or copied from the context) and checked
in a stage of its own, then the toolkit installed.

CANN reaches an image in one of three ways (a cell's ``cann_source``, `matrix.CANN_SOURCES`).
``installer``: each file downloaded from its published URL; ``local``: copied from the context's
installers folder; ``image``: already in the base image, nothing to install. Whichever way, nothing runs before
every file has matched its sha256 and every signed bundle (a .zip) is unpacked
(``unpack-cann.sh``); each package then installs in its own layer from its own file. The
toolkit installs here, right after the OS; the chip's packages in `ChipPackages`, above the
Python closure.

Parameters:
    cann              the CANN release, as the step's title says it
    chip              the chip the image is for
    source            how CANN comes: ``installer``, ``local`` or ``image``
    number            the step's printed number
    installers        every package, `InstallerFile`, in install order (() for ``image``)
    base_image        the image CANN comes with (``image``: the title names it)
    referer           the Referer every download sends (``installer``)
    chip_number       the printed number of `ChipPackages`' step, 0 when the chip has no package of its own
    mount_points      True when torch_npu's layer is built to be the same bytes on every chip: the
                      mount points BuildKit stamps into /etc are laid down in a stage of their own
    installers_folder the context folder a ``local`` image's installers are in

Example:
    >>> print(CannInstallers("9.1.0", "910b", "image", 2, base_image="ascend/cann:9.1.0").render(), end="")
    <BLANKLINE>
    # 2. CANN 9.1.0 for the 910b.
    #    Comes with the base image ascend/cann:9.1.0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

from builder.images.blocks.common import SHELL, Block, install_package, net
from builder.images.stage import INSTALLERS

UNPACK_SCRIPT = "unpack-cann.sh"  # shipped beside the Dockerfile of an image whose CANN comes as signed bundles


@dataclass(frozen=True)
class InstallerFile:
    """A CANN package: fetched (or copied from the context's installers folder), checked,
    unpacked when it is a signed bundle (``unpack-cann.sh``), run. ``sha256`` is "" when
    neither the knowledge base nor the lock has one yet: the step then refuses to start."""

    filename: str
    url: str
    sha256: str
    run: str
    sources: str = ""  # a script sourced before the installer runs (NNAL: the toolkit's set_env.sh)
    kind: str = "toolkit"  # toolkit | ops | nnal

    @property
    def bundle(self) -> bool:
        return self.filename.endswith(".zip")


@dataclass(frozen=True)
class CannInstallers(Block):
    cann: str
    chip: str
    source: str
    number: int
    installers: Tuple[InstallerFile, ...] = ()
    base_image: str = ""
    referer: str = ""
    chip_number: int = 0
    mount_points: bool = False
    installers_folder: str = INSTALLERS

    @property
    def unpack_script(self) -> str:
        """The context file that unpacks signed bundles, "" when no package is one."""
        return UNPACK_SCRIPT if any(f.bundle for f in self.installers) else ""

    def render(self) -> str:
        rest = (f"'s toolkit; the {self.chip} operator package installs in step {self.chip_number}" if self.chip_number
                else f" for the {self.chip}")
        title = f"\n# {self.number}. CANN {self.cann}{rest}.\n"
        if self.source == "image":
            return title + f"#    Comes with the base image {self.base_image}.\n"
        return (title + "#    A stage of its own fetches every installer, checks its sha256 and unpacks every signed\n"
                "#    bundle, so nothing runs before all of them are verified; each package then installs in\n"
                "#    its own layer from its own file.\n"
                f"FROM os AS cann-files\n{SHELL}" + self._fetch() + self._mount_points()
                + f"\nFROM os\n{SHELL}"
                + "".join(install_package(f.run, f.sources) for f in self.installers if f.kind == "toolkit"))

    def _fetch(self) -> str:
        unpack = self.unpack_script
        if self.source == "installer":
            text = f"RUN {net(binds=(unpack,) if unpack else ())}\n"
        elif self.source == "local":
            text = f"RUN --mount=type=bind,source={self.installers_folder},target=/tmp/installers \\\n"
            if unpack:
                text += f"    --mount=type=bind,source={unpack},target=/tmp/{unpack} \\\n"
        else:
            raise ValueError(f"CANN source {self.source!r}: not installer, local or image")
        text += "    mkdir -p /cann && \\\n"
        for f in self.installers:
            if not f.sha256:
                text += (f"    {{ echo 'no sha256 known for {f.filename}: run ascend-build lock where the download server "
                         "answers (it records it), or add it to the cell under sha256:' >&2; exit 1; } && \\\n")
        for f in self.installers:
            if self.source == "installer":
                text += (f"    curl -fsSL --retry 3 -H 'Referer: {self.referer}' -o '/cann/{f.filename}' "
                         f"'{f.url}' && \\\n")
            else:
                text += f"    cp '/tmp/installers/{f.filename}' /cann/ && \\\n"
            text += f"    echo '{f.sha256}  /cann/{f.filename}' | sha256sum -c - && \\\n"
        for f in self.installers:
            if f.bundle:
                text += (f"    sh /tmp/{UNPACK_SCRIPT} '/cann/{f.filename}' '{f.run}' /cann && "
                         f"rm '/cann/{f.filename}' && \\\n")
        return text + "    ls -l /cann\n"

    def _mount_points(self) -> str:
        # Why torch_npu's layer can be the same bytes on every chip: BuildKit mounts /etc/hosts,
        # /etc/hostname and /etc/resolv.conf into every RUN, creating each that is missing and deleting
        # it afterwards, which stamps the time of the build into /etc in that RUN's layer. Laid down
        # once, below the chip's package, they are only mounted over. The torch_npu step does the rest.
        if not self.mount_points:
            return ""
        return ("\nFROM os AS mount-points\n"
                "RUN mkdir /mount-points && touch /mount-points/hosts /mount-points/hostname /mount-points/resolv.conf\n")
