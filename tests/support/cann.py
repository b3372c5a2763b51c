"""Synthetic CANN installers of exactly the vendor's shape, for builds through the real engine.

No CANN installer can be downloaded here, so tests and benchmarks make them: tiny shell
`.run` files that take the real options (--quiet --install --install-for-all) and lay down
a toolkit tree with a real `<arch>-linux/ascend_toolkit_install.info` and a `set_env.sh`
shaped like CANN's (entries added only when their folder exists), a chip package's folder,
or NNAL's ATB for both C++ ABIs with its ABI-picking `set_env.sh`. ``payload_mb`` makes a
package weigh what a benchmark needs (random bytes, so no layer compresses them away).

Which bytes a session's installers have decides what BuildKit may take from its cache:
CANN 9.1.0's toolkit and chips' packages (the demo cell's, under the Python closure of every
whole-image test) are the same bytes in every session, so a warm cache keeps them and the
layers above them; `installers_91(fresh=True)` gives bytes no other build has. Every other
installer (8.0.RC3's, NNAL's) carries this session's RUN_ID: their tests check in the build
log that they ran, so their layers must not come from an earlier session's cache.
"""

from __future__ import annotations

import uuid

RAN = "SYNTHETIC-INSTALLER-RAN"
TOOLKIT_DIR = "/usr/local/Ascend/ascend-toolkit"
RUN_ID = uuid.uuid4().hex  # this session's: the installers carrying it run in this session's builds, and print
STABLE_ID = "same-bytes-every-session"  # CANN 9.1.0's instead (see above)


def _test_id(version: str) -> str:
    return STABLE_ID if version == "9.1.0" else RUN_ID


def synthetic_run(name: str, home: str, version: str, extra_env: str = "", payload_mb: int = 0) -> bytes:
    """A .run that installs a toolkit tree (toolkit) or adds an ops folder to it (anything else)."""
    toolkit = "toolkit" in name
    body = [
        "#!/bin/sh",
        f"# synthetic CANN installer (test {_test_id(version)}): takes the real options, lays down the real files",
        "set -e",
        'for a in "$@"; do case "$a" in --quiet|--install|--install-for-all) ;; '
        '*) echo "unknown option $a" >&2; exit 2 ;; esac; done',
        f'echo "{RAN} {name}"',
    ]
    if toolkit:
        body += [
            f"mkdir -p {home}/lib64 {home}/tools/aml/lib64 {home}/x86_64-linux {home}/opp",
            # from 8.5 the toolkit lives in cann-<ver>/ and ascend-toolkit/ keeps the old entry points
            *([f"mkdir -p {TOOLKIT_DIR}", f"ln -sfn {home} {TOOLKIT_DIR}/latest",
               f"echo '. {home}/set_env.sh' > {TOOLKIT_DIR}/set_env.sh"] if not home.startswith(TOOLKIT_DIR) else []),
            f"printf 'version={version}\\narch=x86_64\\npath={home}\\n' > {home}/x86_64-linux/ascend_toolkit_install.info",
            f"cat > {home}/set_env.sh <<'EOF'",
            f"export ASCEND_TOOLKIT_HOME={home}",
            "export ASCEND_HOME_PATH=${ASCEND_TOOLKIT_HOME}",
            "export ASCEND_OPP_PATH=${ASCEND_TOOLKIT_HOME}/opp",
            'export LD_LIBRARY_PATH=${ASCEND_TOOLKIT_HOME}/lib64:${LD_LIBRARY_PATH}',
            'aml=${ASCEND_TOOLKIT_HOME}/tools/aml/lib64',
            'if [ -d "$aml" ]; then export LD_LIBRARY_PATH=$aml:$aml/plugin:$LD_LIBRARY_PATH; fi',
            *([extra_env] if extra_env else []),
            "EOF",
        ]
    else:
        body += [f"mkdir -p {home}/opp/vendors/{name.split('_')[0]}"]
    if payload_mb:  # what the package weighs installed
        body += [f"head -c {payload_mb}M /dev/urandom > {home}/lib64/{name.split('_')[0]}.payload"]
    return ("\n".join(body) + "\n").encode()


def synthetic_nnal(name: str, version: str) -> bytes:
    """A .run shaped like NNAL's: it refuses to install unless the toolkit's set_env.sh was
    sourced, lays down ATB for both C++ ABIs under nnal/atb/<ver>/atb/cxx_abi_{0,1} with a
    `latest` link, and a set_env.sh that picks the ABI torch reports (1 without torch), as
    NNAL's own does."""
    root = "/usr/local/Ascend/nnal/atb"
    body = [
        "#!/bin/sh",
        f"# synthetic NNAL installer (test {RUN_ID})",
        "set -e",
        'for a in "$@"; do case "$a" in --quiet|--install|--install-for-all) ;; '
        '*) echo "unknown option $a" >&2; exit 2 ;; esac; done',
        '[ -n "${ASCEND_TOOLKIT_HOME:-}" ] || { echo "NNAL: source the toolkit set_env.sh first" >&2; exit 3; }',
        f'echo "{RAN} {name}"',
        *(f"mkdir -p {root}/{version}/atb/cxx_abi_{abi}/lib && : > {root}/{version}/atb/cxx_abi_{abi}/lib/libatb.so"
          for abi in (0, 1)),
        f"ln -sfn {version} {root}/latest",
        f"cat > {root}/{version}/atb/set_env.sh <<'EOF'",
        'abi=1',
        'if python3 -c "import torch" >/dev/null 2>&1; then',
        '  [ "$(python3 -c \'import torch; print(torch.compiled_with_cxx11_abi())\')" = True ] || abi=0',
        'fi',
        'atb_path=$(cd "$(dirname "${BASH_SOURCE[0]}")"; pwd)',
        'export ATB_HOME_PATH="${atb_path}/cxx_abi_${abi}"',
        'export LD_LIBRARY_PATH=$ATB_HOME_PATH/lib:$ATB_HOME_PATH/examples:$ATB_HOME_PATH/tests/atbopstest:$LD_LIBRARY_PATH',
        'export PATH=$ATB_HOME_PATH/bin:$PATH',
        'export ATB_WORKSPACE_MEM_ALLOC_ALG_TYPE=1 ATB_SHARE_MEMORY_NAME_SUFFIX="" LCCL_PARALLEL=0',
        "EOF",
        f"echo '. {root}/latest/atb/set_env.sh \"$@\"' > {root}/set_env.sh",
    ]
    return ("\n".join(body) + "\n").encode()


def synthetic_torch_npu_wheel(folder, version: str = "2.13.0", torch: str = "2.13.0", tag: str = "cp311-cp311",
                              platform: str = "manylinux_2_17_x86_64", marker: str = "own build"):
    """A wheel shaped like torch_npu's (METADATA pinning torch, a RECORD pip and uv accept)
    whose module says ``OWN = marker``: a build of one's own that an image can be asked
    to install instead of PyPI's. Returns its path."""
    import base64
    import hashlib
    import zipfile
    from pathlib import Path

    info = f"torch_npu-{version}.dist-info"
    files = {
        "torch_npu/__init__.py": f"__version__ = {version!r}\nOWN = {marker!r}\n".encode(),
        f"{info}/METADATA": (f"Metadata-Version: 2.1\nName: torch_npu\nVersion: {version}\n"
                             f"Requires-Dist: torch=={torch}\n").encode(),
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {tag}-{platform}\n".encode(),
    }
    record = [f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
              for name, data in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = Path(folder) / f"torch_npu-{version}-{tag}-{platform}.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0)), data)  # same bytes every time
    return path


def installers_91(folder, *chip_packages: str, fresh: bool = False, toolkit_mb: int = 0, chip_mb: int = 0):
    """CANN 9.1.0's toolkit and chips' packages (910b's on x86_64 unless named), synthetic,
    written into ``folder`` (made if missing) as a `cann_source: {local: ...}` folder holds them.
    Returns each file's sha256 by name, as the cell's ``sha256:`` gives them. ``fresh``: bytes
    no other build of the session has (BuildKit then cannot reuse a layer: the installers run).
    ``toolkit_mb``, ``chip_mb``: what each weighs installed, in MiB of random bytes."""
    import hashlib
    from pathlib import Path

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    sha = {}
    toolkit = "Ascend-cann-toolkit_9.1.0_linux-x86_64.run"
    for name in (toolkit, *(chip_packages or ("Ascend-cann-910b-ops_9.1.0_linux-x86_64.run",))):
        data = synthetic_run(name, "/usr/local/Ascend/cann-9.1.0", "9.1.0",
                             payload_mb=toolkit_mb if name == toolkit else chip_mb) + (
            f"# {uuid.uuid4().hex}\n".encode() if fresh else b"")
        (folder / name).write_bytes(data)
        sha[name] = hashlib.sha256(data).hexdigest()
    return sha
