"""The Python packages, from the cell's lock, one step per requirements file: the locked closure
(torch, CANN's Python packages, the extras), what the lock could not verify, then torch_npu.

`LockedPackages`: uv installs exactly the files the lock names, each checked against its sha256
(``--require-hashes --no-deps``), and resolves nothing; the build's pip settings (a mirror,
offline from the wheelhouse) are uv's options. uv's cache, on /tmp and removed before the step
ends, names the file it installed of each distribution and its sha256: the step keeps that
record (`builder.images.installed` reads it, for the SBOM). torch_npu's step, when its layer is
built to be the same bytes on every chip (``same_bytes``), mounts /tmp and /run/secrets as tmpfs
(the mount points made there stay out of the layer), checks bytecode by hash
(SOURCE_DATE_EPOCH), and gives every file it writes one fixed time.

`UnverifiedPackages`: entries without a sha256, refused unless the build asks for them by build
arg (``ascend-build image --allow-incomplete-lock`` passes it), so no image installs them by
accident. Its extra index is the PyTorch CPU index (torch==X+cpu); hadolint reads
``${torch_index:+...}`` as an unpinned package, hence DL3013.

Parameters of `LockedPackages`:
    step            the step's name (``closure``, ``torch_npu``): its record's file name
    file            the context file it installs from
    number          the step's printed number
    prefix          the Python environment's folder
    same_bytes      True for a torch_npu step built to be the same bytes on every chip
    installed_dir   where each step records what it installed
    fixed_mtime     the file time of everything a ``same_bytes`` step writes
    wheelhouse      the stage of optional wheels

Parameters of `UnverifiedPackages`:
    step, file, number, installed_dir, wheelhouse   as above
    names           the distributions its file names
    reason          why they are not verified
    resolve         True when pip must resolve dependencies (no usable lock)
    torch_index     the extra index unverified torch==X+cpu may come from
    allow_unverified  the build arg that lets it run

Example:
    >>> LockedPackages("closure", "lock.closure.txt", 4, "/opt/venv").render().splitlines()[1]
    '# 4. The locked Python closure: every distribution pinned, its sha256 checked.'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

from builder.images.blocks.common import ALLOW_UNVERIFIED, Block, net
from builder.images.stage import WHEELHOUSE
from builder.vocabulary import INSTALLED_DIR

# The file time of everything torch_npu's step writes (1980-01-01, as reproducible builds use):
# its layer then depends on the bytes installed, not on when or on which chip it was built.
FIXED_MTIME = 315532800


@dataclass(frozen=True)
class LockedPackages(Block):
    step: str
    file: str
    number: int
    prefix: str
    same_bytes: bool = False
    installed_dir: str = INSTALLED_DIR
    fixed_mtime: int = FIXED_MTIME
    wheelhouse: str = WHEELHOUSE

    def render(self) -> str:
        title = ("torch_npu, pinned by the lock: a bump rebuilds from here on" if self.step == "torch_npu"
                 else "The locked Python closure: every distribution pinned, its sha256 checked")
        same, prefix, mtime, record = self.same_bytes, self.prefix, self.fixed_mtime, f"{self.installed_dir}/{self.step}.txt"
        text = (f"\n# {self.number}. {title}.\n"
                f"RUN {net(wheels=True, binds=(self.file,), uv=True, tmpfs=same, wheelhouse=self.wheelhouse)}\n")
        if same:
            text += f"    touch {prefix}/.step-start && \\\n    SOURCE_DATE_EPOCH={mtime} \\\n"
        text += (f"    /opt/uv/bin/uv pip install --python {prefix}/bin/python --require-hashes --no-deps \\\n"
                 "        --compile-bytecode --cache-dir /tmp/uv-cache --link-mode=copy --find-links /wheelhouse \\\n"
                 '        ${PIP_INDEX_URL:+--index-url "$PIP_INDEX_URL"} ${PIP_NO_INDEX:+--no-index} '
                 f"-r /tmp/{self.file} && \\\n"
                 f"    mkdir -p {self.installed_dir} && \\\n"
                 "    for entry in /tmp/uv-cache/wheels-v*/*/*/*.http /tmp/uv-cache/wheels-v*/*/*/*/*.http \\\n"
                 "            /tmp/uv-cache/wheels-v*/*/*/*.rev /tmp/uv-cache/wheels-v*/*/*/*/*.rev; do \\\n"
                 "        if [ -f \"$entry\" ]; then printf '%s %s\\n' \"${entry#/tmp/uv-cache/}\" "
                 "\"$(grep -aoE '[0-9a-f]{64}' \"$entry\" | sort -u | tr '\\n' ' ')\"; fi; \\\n"
                 f"    done | sort > {record} && \\\n"
                 "    rm -rf /tmp/uv-cache" + (" && \\\n" if same else "\n"))
        if same:
            text += (f"    find {prefix} -newer {prefix}/.step-start -exec touch -h -d @{mtime} {{}} + && \\\n"
                     f"    rm {prefix}/.step-start && touch -d @{mtime} {prefix} \\\n"
                     f"        {self.installed_dir} {record}\n")
        return text


@dataclass(frozen=True)
class UnverifiedPackages(Block):
    step: str
    file: str
    number: int
    names: Tuple[str, ...]
    reason: str
    resolve: bool = False
    torch_index: str = ""
    installed_dir: str = INSTALLED_DIR
    allow_unverified: str = ALLOW_UNVERIFIED
    wheelhouse: str = WHEELHOUSE

    def render(self) -> str:
        allow = self.allow_unverified
        return (f"\n# {self.number}. NOT VERIFIED: {', '.join(self.names)}. {self.reason}.\n"
                f"#    Refused unless the build is asked: --build-arg {allow}=1.\n"
                f"ARG {allow}=0\n"
                "# hadolint ignore=DL3013\n"
                f"RUN {net(wheels=True, binds=(self.file,), wheelhouse=self.wheelhouse)}\n"
                f'    if [ "${{{allow}}}" != 1 ]; then \\\n'
                f'        echo "refusing to install {", ".join(self.names)} without a sha256 (pass --build-arg {allow}=1 '
                'to allow it)" >&2; exit 1; \\\n'
                "    fi && \\\n"
                f'    torch_index="${{TORCH_INDEX:-{self.torch_index}}}" && \\\n'
                f"    mkdir -p {self.installed_dir} && \\\n"
                f"    pip install {'' if self.resolve else '--no-deps '}--find-links /wheelhouse "
                '${torch_index:+--extra-index-url "$torch_index"} \\\n'
                f"        --report {self.installed_dir}/{self.step}.json -r /tmp/{self.file}\n")
