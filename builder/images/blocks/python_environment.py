"""The Python environment the image's packages go into: a venv of the OS's python3, or a conda
environment of Miniforge (a cell's ``env``); `MANAGERS` holds each way in one place.

conda: Miniforge's installer comes from the context's conda-installer/ folder when it holds it,
else from ``mirrors.conda_installer`` (a folder serving the same file), else from its release
URL; its sha256 is checked whichever way. The environment is every conda package of the lock's
conda part, fetched and checked against its sha256 by conda-fetch.sh (the channel, with any
token, reaches curl alone), then installed from those local files by conda, which checks the
sha256 again. Nothing conda records (conda-meta/history, the records' URLs) may hold the
channel's credential (user:password@, anaconda.org's /t/TOKEN, a query value, found with a URL
parser by conda_secrets.py): the last check refuses the layer if one does. Without a complete
conda part the step is refused unless the build is asked (``allow_unverified``).

Parameters:
    manager           how the environment is made: a key of `MANAGERS` (``venv``, ``conda``)
    python            the Python version (``3.11``)
    prefix            the environment's folder
    number            the step's printed number
    installer_file    conda: Miniforge's installer file name
    installer_url     conda: where it is published
    installer_sha256  conda: the sha256 it must match
    explicit_file     conda: the context file listing the lock's conda packages, "" when the lock has no complete conda part
    fetch_script      conda: the context file that fetches and checks them
    secrets_script    conda: the context file that refuses a layer holding the channel's credential
    installer_folder  conda: the context folder (and stage) that may hold the installer
    allow_unverified  the build arg that lets an unverified step run

Example:
    >>> print(PythonEnvironment("venv", "3.11", "/opt/venv", 3).render(), end="")
    <BLANKLINE>
    # 3. Python 3.11 in a dedicated venv environment.
    RUN python3 -m venv /opt/venv
    ENV VIRTUAL_ENV="/opt/venv" PATH="/opt/venv/bin:${PATH}"
    ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict

from builder.images.blocks.common import ALLOW_UNVERIFIED, Block, net
from builder.images.conda_lock import FETCH_SCRIPT, SECRETS_SCRIPT
from builder.images.stage import CONDA_INSTALLER


@dataclass(frozen=True)
class PythonEnvironment(Block):
    manager: str
    python: str
    prefix: str
    number: int
    installer_file: str = ""
    installer_url: str = ""
    installer_sha256: str = ""
    explicit_file: str = ""
    fetch_script: str = FETCH_SCRIPT
    secrets_script: str = SECRETS_SCRIPT
    installer_folder: str = CONDA_INSTALLER
    allow_unverified: str = ALLOW_UNVERIFIED

    def render(self) -> str:
        return (f"\n# {self.number}. Python {self.python} in a dedicated {self.manager} environment.\n"
                + MANAGERS[self.manager](self)
                + "ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1\n")


def _venv(block: PythonEnvironment) -> str:
    return (f"RUN python3 -m venv {block.prefix}\n"
            f'ENV VIRTUAL_ENV="{block.prefix}" PATH="{block.prefix}/bin:${{PATH}}"\n')


def _conda(b: PythonEnvironment) -> str:
    allow, prefix, file = b.allow_unverified, b.prefix, b.installer_file
    if b.explicit_file:
        text = (f"#    Every conda package pinned by the lock's conda part ({b.explicit_file}), its sha256 checked.\n"
                f"RUN {net(binds=(b.explicit_file, b.fetch_script, b.secrets_script), conda_folder=b.installer_folder)}\n")
    else:
        text = ("#    NOT VERIFIED: no complete conda part in the cell's lock (`ascend-build lock` writes it where the\n"
                "#    channel answers): Python's build and the conda packages beneath it are what the channel serves today.\n"
                f"#    Refused unless the build is asked: --build-arg {allow}=1.\n"
                f"ARG {allow}=0\n"
                f"RUN {net(binds=(b.secrets_script,), conda_folder=b.installer_folder)}\n"
                f'    if [ "${{{allow}}}" != 1 ]; then \\\n'
                f'        echo "refusing to create the conda environment without its lock (pass --build-arg {allow}=1 '
                'to allow it)" >&2; exit 1; \\\n'
                "    fi && \\\n")
    text += (f"    installer='/tmp/{b.installer_folder}/{file}' && \\\n"
             '    if [ ! -f "$installer" ]; then \\\n'
             f"        installer=/tmp/conda-installer.sh && url='{b.installer_url}' && \\\n"
             f'        if [ -n "${{CONDA_INSTALLER_URL:-}}" ]; then url="${{CONDA_INSTALLER_URL%/}}/{file}"; fi && \\\n'
             '        { curl -fsSL --retry 3 -o "$installer" "$url" || { \\\n'
             f"            echo \"could not download Miniforge's installer {file}: put the file in the build context's "
             f"{b.installer_folder}/ folder (ascend-build image --conda-installer FILE), or set mirrors.conda_installer "
             "to a folder URL that serves it; its sha256 is checked either way\" >&2; exit 1; }; }; \\\n"
             "    fi && \\\n"
             f"    echo '{b.installer_sha256}  '\"$installer\" | sha256sum -c - && \\\n"
             '    bash "$installer" -b -p /opt/conda && rm -f /tmp/conda-installer.sh && \\\n')
    if b.explicit_file:
        text += (f"    sh /tmp/{b.fetch_script} /tmp/{b.explicit_file} /tmp/conda-pkgs && \\\n"
                 f"    /opt/conda/bin/conda create -y -p {prefix} --offline --file /tmp/conda-pkgs/explicit.txt && \\\n"
                 "    rm -rf /tmp/conda-pkgs && \\\n")
    else:
        text += (f'    /opt/conda/bin/conda create -y -p {prefix} ${{CONDA_CHANNEL:+--override-channels -c "$CONDA_CHANNEL"}} \\\n'
                 f"        'python={b.python}' pip && \\\n"
                 f"    sed -i '/^# cmd:/d' {prefix}/conda-meta/history && \\\n")
    return text + (f"    /opt/conda/bin/python /tmp/{b.secrets_script} /opt/conda/conda-meta {prefix}/conda-meta "
                   "/opt/conda/.condarc && \\\n"
                   "    /opt/conda/bin/conda clean -afy\n"
                   f'ENV PATH="{prefix}/bin:/opt/conda/bin:${{PATH}}"\n')


MANAGERS: Dict[str, Callable[[PythonEnvironment], str]] = {"venv": _venv, "conda": _conda}
