"""The conda part of a conda cell's lock, against a real conda channel on loopback.

The channel is made here: real conda packages (.tar.bz2, written by conda-package-handling
from tiny recipes: a "python" 3.9.7 and 3.10.1, the "libzz" it depends on, a noarch "pip"),
a real repodata.json per subdir (py-rattler's indexer), served by a real HTTP server.
py-rattler solves against it (the lock), builder/templates/conda-fetch.sh fetches and checks
the files with curl and sha256sum (the build's step), and py-rattler installs the checked
list into a folder (the installer conda is in the image; neither conda, Miniforge's
installer nor conda-forge's Python can be had on this machine).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Dict, Optional, Sequence

import pytest
from typer.testing import CliRunner

import rattler
from rattler.explicit_environment import ExplicitEnvironmentSpec

from builder import cli, knowledge, vocabulary
from builder.images import conda_lock, lock, matrix, prepare, relock, render, stage
from builder.images.plan import lock_inputs
from builder.errors import UserError
from builder.smoke import smoke
from tests.support import locks
from tests.support.matrix import CANN_7, SHIPPED_DOCKERFILES, SHIPPED_MATRIX, write_cells

KB = knowledge.load()
FETCH = render.TEMPLATES / conda_lock.FETCH_SCRIPT
TOKEN = "s3cret-t0ken"
MISSION_ARM = "cann7.0.rc1-910b-ubuntu22.04-py3.9-torch_npu2.1.0rc1-aarch64"


def make_package(channel: Path, subdir: str, name: str, version: str, build: str, depends: Sequence[str] = (),
                 files: Optional[Dict[str, str]] = None) -> Path:
    """A real conda package (.tar.bz2): info/index.json, paths.json, files, and its payload."""
    import conda_package_handling.api as cph

    files = files or {f"share/{name}/VERSION": f"{name} {version}\n"}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        (root / "info").mkdir()
        (root / "info" / "index.json").write_text(json.dumps({
            "name": name, "version": version, "build": build, "build_number": 0, "depends": list(depends),
            "subdir": subdir, **({"noarch": "generic"} if subdir == "noarch" else {})}))
        paths = [{"_path": rel, "path_type": "hardlink", "size_in_bytes": len(text.encode()),
                  "sha256": hashlib.sha256(text.encode()).hexdigest()} for rel, text in files.items()]
        (root / "info" / "paths.json").write_text(json.dumps({"paths": paths, "paths_version": 1}))
        (root / "info" / "files").write_text("\n".join(files) + "\n")
        (channel / subdir).mkdir(parents=True, exist_ok=True)
        filename = f"{name}-{version}-{build}.tar.bz2"
        cph.create(str(root), ["info/index.json", "info/paths.json", "info/files", *files], filename,
                   out_folder=str(channel / subdir))
    return channel / subdir / filename


def index(channel: Path) -> None:
    """repodata.json for every subdir, as py-rattler's indexer writes it."""
    asyncio.run(rattler.index.index_fs(channel, write_shards=False, write_zst=False, force=True))


@pytest.fixture
def channel(tmp_path, serve_folder):
    folder = tmp_path / "channel"
    make_package(folder, "linux-64", "libzz", "1.2", "h0_0")
    make_package(folder, "linux-64", "python", "3.9.7", "h1_0", ["libzz >=1.0", "__glibc >=2.17"])
    make_package(folder, "linux-64", "python", "3.10.1", "h1_0", ["libzz >=1.0"])
    make_package(folder, "noarch", "pip", "24.0", "pyh_0", ["python >=3.8"])
    index(folder)
    return folder, serve_folder(folder)


def fetch(explicit: Path, folder: Path, channel_env: str = "") -> subprocess.CompletedProcess:
    """The build's fetch step, run here as the Dockerfile runs it (sh, curl, sha256sum)."""
    env = {k: v for k, v in os.environ.items() if k != "CONDA_CHANNEL"}
    if channel_env:
        env["CONDA_CHANNEL"] = channel_env
    return subprocess.run(["sh", str(FETCH), str(explicit), str(folder)], capture_output=True, text=True,
                          env=env, timeout=120)


def install(explicit: Path, prefix: Path) -> None:
    """Install a checked explicit list (file:// URLs) into ``prefix`` with py-rattler."""
    spec = ExplicitEnvironmentSpec.from_path(explicit)
    paths = [Path(p.url.split("#", 1)[0].removeprefix("file://")) for p in spec.packages]

    async def run() -> None:
        records = [await rattler.RepoDataRecord.from_package_archive(p) for p in paths]
        await rattler.install(records, prefix, cache_dir=prefix.parent / "pkgs-cache", show_progress=False,
                              platform=rattler.platform.Subdir("linux-64"))

    asyncio.run(run())


# --- solving ----------------------------------------------------------------------------


def test_py_rattler_solves_python_x_y_and_pip_into_files_with_their_sha256(channel):
    folder, url = channel
    part = conda_lock.resolve(url, "3.9", "x86_64", (2, 35))
    assert part.complete and part.channel == url
    assert [(p.name, p.version, p.build) for p in part.packages] == [
        ("libzz", "1.2", "h0_0"), ("python", "3.9.7", "h1_0"), ("pip", "24.0", "pyh_0")]  # dependencies first
    for p in part.packages:
        assert p.sha256 == hashlib.sha256((folder / p.path).read_bytes()).hexdigest(), p.path
    assert conda_lock.resolve(url, "3.10", "x86_64", (2, 35)).packages[1].version == "3.10.1"


def test_a_glibc_older_than_python_needs_has_no_solution_and_says_so(channel):
    with pytest.raises(UserError, match="py-rattler found no conda environment of Python 3.9"):
        conda_lock.resolve(channel[1], "3.9", "x86_64", (2, 12))


def test_a_channel_that_does_not_answer_gives_an_incomplete_part_with_the_reason(serve_folder, tmp_path):
    dead = serve_folder(tmp_path)  # answers 404 for every repodata.json: no channel there
    part = conda_lock.resolve(dead, "3.9", "x86_64", (2, 35))
    assert not part.complete and part.packages == ()
    assert part.note.startswith(f"the conda channel {dead} could not be reached where the lock was made")
    assert "`ascend-build lock` runs where it answers" in part.note
    tokened = conda_lock.resolve(dead.replace("http://", f"http://ci:{TOKEN}@") + f"/t/{TOKEN}/forge", "3.9", "x86_64", (2, 35))
    assert not tokened.complete and TOKEN not in tokened.note and f"{dead}/forge" in tokened.note


def test_the_part_is_written_into_the_lock_and_read_back(channel):
    part = conda_lock.resolve(channel[1], "3.9", "x86_64", (2, 35))
    made = lock.Lock("c", "0" * 16, "t", "uv 0", (lock.Entry("six", "1.17.0", ("0" * 64,)),), conda=part)
    text = made.text()
    assert f"# conda-channel: {channel[1]}\n" in text
    assert "# conda: python 3.9.7 h1_0 linux-64/python-3.9.7-h1_0.tar.bz2 sha256:" in text
    assert lock.Lock.parse(text) == made and made.complete
    missing = replace(made, conda=conda_lock.Part(channel[1], (), "no answer"))
    assert lock.Lock.parse(missing.text()) == missing and not missing.complete
    assert "# conda-incomplete: no answer\n" in missing.text()


def test_credentials_never_reach_the_lock():
    assert conda_lock.public("https://user:pw@mirror.example:8443/t/abc123/conda-forge/?token=x") == \
        "https://mirror.example:8443/conda-forge"


@pytest.mark.parametrize("port", ["99999", "84a3"])
def test_a_channel_with_no_valid_port_is_a_clear_error_not_a_traceback(tmp_path, port):
    path, _ = write_cells(tmp_path, dict(CANN_7, env="conda", mirrors={"conda_channel": f"https://m.example:{port}/forge"}))
    result = CliRunner().invoke(cli.app, ["render", "--matrix", str(path), "--out", str(tmp_path / "out")])
    assert isinstance(result.exception, UserError), result.exception
    assert f"https://m.example:{port}/forge" in result.exception.message and "port" in result.exception.message


# --- installing by hash -----------------------------------------------------------------


def test_the_explicit_list_is_fetched_checked_and_installed_and_the_smoke_test_agrees(channel, tmp_path):
    part = conda_lock.resolve(channel[1], "3.9", "x86_64", (2, 35))
    explicit = tmp_path / conda_lock.EXPLICIT_FILE
    explicit.write_text(part.explicit("linux-64"))
    assert explicit.read_text().splitlines()[3:5] == ["@EXPLICIT", f"{channel[1]}/{part.packages[0].path}#sha256:{part.packages[0].sha256}"]
    fetched = fetch(explicit, tmp_path / "pkgs")
    assert fetched.returncode == 0, fetched.stderr
    assert "3 conda packages fetched, each sha256 as locked" in fetched.stdout
    prefix = tmp_path / "env"
    install(tmp_path / "pkgs" / "explicit.txt", prefix)
    assert (prefix / "share" / "python" / "VERSION").read_text() == "python 3.9.7\n"
    locked = {p.name: f"{p.version} {p.build}" for p in part.packages}  # as the manifest carries it
    assert smoke.conda_problems(locked, smoke.conda_packages(str(prefix))) == []
    assert smoke.conda_problems(dict(locked, python="3.9.7 h2_0"), smoke.conda_packages(str(prefix))) == [
        "conda python 3.9.7 h1_0 installed, 3.9.7 h2_0 locked"]


def test_a_package_with_other_bytes_is_refused_by_its_sha256(channel, tmp_path):
    folder, url = channel
    part = conda_lock.resolve(url, "3.9", "x86_64", (2, 35))
    explicit = tmp_path / conda_lock.EXPLICIT_FILE
    explicit.write_text(part.explicit("linux-64"))
    make_package(folder, "linux-64", "libzz", "1.2", "h0_0", files={"share/libzz/VERSION": "other bytes\n"})
    fetched = fetch(explicit, tmp_path / "pkgs")
    assert fetched.returncode == 1
    assert f"conda-fetch: linux-64/libzz-1.2-h0_0.tar.bz2 has other bytes than the lock's sha256 {part.packages[0].sha256}" \
        in fetched.stderr
    assert "file://" not in (tmp_path / "pkgs" / "explicit.txt").read_text()  # nothing conda could install


def test_a_token_in_the_channel_reaches_curl_alone(channel, tmp_path):
    folder, url = channel
    secret = url.replace("http://", f"http://ci:{TOKEN}@")
    part = conda_lock.resolve(secret, "3.9", "x86_64", (2, 35))
    assert part.complete and part.channel == url
    explicit = tmp_path / conda_lock.EXPLICIT_FILE
    explicit.write_text(part.explicit("linux-64").replace(url, "https://conda.anaconda.org/conda-forge"))
    fetched = fetch(explicit, tmp_path / "pkgs", channel_env=secret)  # the mirror, as the build's secret gives it
    assert fetched.returncode == 0, fetched.stderr
    assert TOKEN not in fetched.stdout + fetched.stderr
    handed = (tmp_path / "pkgs" / "explicit.txt").read_text().splitlines()
    assert handed[0] == "@EXPLICIT" and len(handed) == 4 and all(line.startswith(f"file://{tmp_path}/pkgs/") for line in handed[1:])
    prefix = tmp_path / "env"
    install(tmp_path / "pkgs" / "explicit.txt", prefix)
    written = [p for p in prefix.rglob("*") if p.is_file() and TOKEN.encode() in p.read_bytes()]
    assert written == [] and (prefix / "conda-meta" / "python-3.9.7-h1_0.json").is_file()


# --- the lock of a conda cell: inputs, check, render, image ------------------------------


def _cell(tmp_path, url):
    """The mission's cell (conda, Python 3.9, x86_64) taking its conda packages from ``url``."""
    path, _ = write_cells(tmp_path, dict(CANN_7, mirrors={"conda_channel": url}))
    return path, matrix.load(path).cells[0]


def _stub_pip(inputs, **kw):
    """uv's part stands still here: the conda part is what these tests are about (uv is tested in test_lock)."""
    return lock.Lock(inputs.cell, inputs.digest, "t", "uv 0", (lock.Entry("six", "1.17.0", ("0" * 64,)),))


def test_lock_resolves_the_conda_part_and_check_sees_it_stale_when_the_channel_changes(channel, tmp_path, serve_folder):
    path, cell = _cell(tmp_path, channel[1])
    out = tmp_path / "dockerfiles"
    rows = relock.run([cell], KB, out, resolve=_stub_pip)
    assert [(r.state, r.detail) for r in rows] == [("ok", "1 distributions and 3 conda packages, every one with its sha256")]
    made = locks.read(out / cell.id)
    assert made.conda is not None
    assert [p.name for p in made.conda.packages] == ["libzz", "python", "pip"] and made.unpinned == ()
    check = CliRunner().invoke(cli.app, ["lock", "--check", "--matrix", str(path), "--out", str(out), "--cell", cell.id])
    assert check.exit_code == 0, check.output
    (tmp_path / "moved").mkdir()
    moved, _ = write_cells(tmp_path / "moved", dict(CANN_7, mirrors={"conda_channel": serve_folder(tmp_path)}))
    stale = CliRunner().invoke(cli.app, ["lock", "--check", "--matrix", str(moved), "--out", str(out), "--cell", cell.id])
    assert stale.exit_code == 1
    assert f"stale      {cell.id}: made from other inputs" in stale.output
    # the token of a mirror is no input: the same channel with credentials keeps the lock ok
    tokened = replace(cell, mirrors=(("conda_channel", channel[1].replace("http://", f"http://ci:{TOKEN}@")),))
    assert lock_inputs(tokened, KB).digest == lock_inputs(cell, KB).digest


def test_the_dockerfile_installs_the_conda_part_by_hash_and_holds_no_token(channel, tmp_path):
    secret = channel[1].replace("http://", f"http://ci:{TOKEN}@")
    _, cell = _cell(tmp_path, secret)
    made = relock.run([cell], KB, tmp_path / "out", resolve=_stub_pip)
    assert made[0].state == "ok"
    resolved = render.resolve(cell, KB, lock.read(tmp_path / "out" / cell.id))
    files = render.files(resolved)
    docker = files["Dockerfile"].decode()
    assert "'python=3.9'" not in docker and "conda create -y -n ascend" not in docker
    assert ("sh /tmp/conda-fetch.sh /tmp/conda.explicit.txt /tmp/conda-pkgs && \\\n"
            "    /opt/conda/bin/conda create -y -p /opt/conda/envs/ascend --offline --file /tmp/conda-pkgs/explicit.txt") in docker
    assert "--mount=type=bind,source=conda.explicit.txt,target=/tmp/conda.explicit.txt" in docker
    assert files[conda_lock.EXPLICIT_FILE].decode().count("#sha256:") == 3
    assert files[conda_lock.FETCH_SCRIPT] == FETCH.read_bytes()
    leaked = [name for name, data in files.items() if TOKEN.encode() in data]
    assert leaked == []
    manifest = json.loads(files["manifest.json"])
    assert manifest["lock"]["conda"] == {"libzz": "1.2 h0_0", "python": "3.9.7 h1_0", "pip": "24.0 pyh_0"}
    # where it does go: the build's secret, mounted only while a step runs, and no build arg
    assert TOKEN in stage.buildenv(resolved, with_ca=False)
    assert resolved.lock_state == "ok"  # so the pipeline passes no build arg at all (image_run.build)


def test_an_incomplete_conda_part_is_refused_unless_asked(tmp_path, serve_folder):
    _, cell = _cell(tmp_path, serve_folder(tmp_path))  # a server with no channel in it
    rows = relock.run([cell], KB, tmp_path / "out", resolve=_stub_pip)
    assert rows[0].state == "incomplete" and "without sha256: the conda part (the conda channel" in rows[0].detail
    resolved = render.resolve(cell, KB, lock.read(tmp_path / "out" / cell.id))
    docker = render.files(resolved)["Dockerfile"].decode()
    assert "#    NOT VERIFIED: no complete conda part in the cell's lock" in docker
    assert 'if [ "${ASCEND_BUILD_ALLOW_UNVERIFIED}" != 1 ]; then \\\n        echo "refusing to create the conda environment' in docker
    assert conda_lock.EXPLICIT_FILE not in render.files(resolved)
    options = prepare.Options(locks_dir=tmp_path / "out")
    with pytest.raises(UserError, match=r"lacking a sha256 \(its conda part\)"):
        prepare._refuse_unusable(resolved, vocabulary.CPU, options)
    prepare._refuse_unusable(resolved, vocabulary.CPU, replace(options, allow_incomplete_lock=True))


def test_the_conda_bootstrap_comes_from_a_local_file_or_a_mirror_and_its_failure_names_both(channel, tmp_path):
    _, cell = _cell(tmp_path, channel[1])
    docker = render.render_cell(cell, KB)["Dockerfile"].decode()
    bootstrap = KB.downloads.conda_installer("x86_64")
    assert bootstrap is not None
    name = bootstrap.filename
    assert f"installer='/tmp/conda-installer/{name}'" in docker
    assert f'url="${{CONDA_INSTALLER_URL%/}}/{name}"' in docker
    assert (f"could not download Miniforge's installer {name}: put the file in the build context's conda-installer/ "
            "folder (ascend-build image --conda-installer FILE), or set mirrors.conda_installer") in docker
    assert f"echo '{bootstrap.sha256}  '\"$installer\" | sha256sum -c -" in docker
    assert "export CONDA_INSTALLER_URL=https://mirror.example/miniforge" in stage.buildenv(
        replace(cell, mirrors=(("conda_installer", "https://mirror.example/miniforge"),)), with_ca=False)
    local = tmp_path / "Miniforge-local.sh"
    local.write_text("#!/bin/sh\n")
    context = stage.context({"Dockerfile": b""}, tmp_path / "ctx", conda_installer=(local, name))
    assert (context / "conda-installer" / name).read_text() == "#!/bin/sh\n"
    with pytest.raises(UserError, match="conda installer .* is not a file"):
        stage.context({}, tmp_path / "ctx", conda_installer=(tmp_path / "missing.sh", name))


SECRETS = render.TEMPLATES / conda_lock.SECRETS_SCRIPT


def _conda_dockerfile(tmp_path: Path, path: str) -> str:
    """The mission cell's Dockerfile on the ``locked`` path (a complete conda part: conda-fetch.sh) or the
    ``floating`` one (no conda part: conda solves against the channel)."""
    cell = matrix.load(write_cells(tmp_path, CANN_7)[0]).cells[0]
    plan = render.resolve(cell, KB).plans[vocabulary.NPU]
    if path == "locked":
        env = plan.python_environment  # as the plan makes it of a lock with a complete conda part
        plan = replace(plan, conda_explicit="@EXPLICIT\nhttps://c.example/linux-64/python-3.9.7-h1_0.conda#sha256:" + "0" * 64,
                       blocks=tuple(replace(b, explicit_file=conda_lock.EXPLICIT_FILE) if b is env else b for b in plan.blocks))
    docker = render.dockerfile(plan).decode()
    assert ("sh /tmp/conda-fetch.sh" in docker) == (path == "locked")
    return docker


def _credential_check(docker: str, root: Path) -> list:
    """The Dockerfile's last check of the conda step, as a command over ``root`` instead of / (this
    Python for Miniforge's, the template for the bound script)."""
    bound = f"--mount=type=bind,source={conda_lock.SECRETS_SCRIPT},target=/tmp/{conda_lock.SECRETS_SCRIPT}"
    (line,) = [x.strip() for x in docker.splitlines() if x.strip().startswith(f"/opt/conda/bin/python /tmp/{conda_lock.SECRETS_SCRIPT} ")]
    run = docker[: docker.index(line)].rpartition("\nRUN ")[2]
    assert bound in run  # bound into the very step that runs it
    argv = line[: -len(" && \\")].split()
    assert argv[:2] == ["/opt/conda/bin/python", f"/tmp/{conda_lock.SECRETS_SCRIPT}"]
    return ["python3", "-B", str(SECRETS)] + [a.replace("/opt/conda", str(root / "opt" / "conda")) for a in argv[2:]]


SHAPES = [  # (channel, what conda wrote, refused)
    ("https://ci:s3cret-t0ken@mirror.example/conda-forge", "https://ci:s3cret-t0ken@mirror.example/conda-forge", True),
    ("https://mirror.example/t/s3cret-t0ken/conda-forge", "https://mirror.example/t/s3cret-t0ken/conda-forge/x.conda", True),
    # user info and a path token: the token alone written (a sed took the user info only)
    ("https://ci:pw@mirror.example/t/s3cret-t0ken/conda-forge", "https://mirror.example/t/s3cret-t0ken/conda-forge", True),
    # an upper-case scheme (a sed matched [a-z]* only)
    ("HTTPS://ci:s3cret-t0ken@mirror.example/conda-forge", "HTTPS://ci:s3cret-t0ken@mirror.example/conda-forge", True),
    ("Https://mirror.example/t/s3cret-t0ken/conda-forge", "mirror.example/t/s3cret-t0ken/conda-forge", True),
    # a percent-encoded password, written decoded; the password alone
    ("https://ci:s3cret%2Dt0ken@mirror.example/conda-forge", "password s3cret-t0ken", True),
    ("https://mirror.example/conda-forge?token=s3cret-t0ken", "https://mirror.example/conda-forge?token=s3cret-t0ken", True),
    ("https://ci:s3cret-t0ken@mirror.example/conda-forge", "https://mirror.example/conda-forge", False),
    ("https://mirror.example/conda-forge", "https://mirror.example/conda-forge", False),  # no credential to keep out
]


@pytest.mark.parametrize("path", ["locked", "floating"])
@pytest.mark.parametrize("url, written, refused", SHAPES)
def test_the_conda_step_refuses_a_layer_where_conda_wrote_the_channels_credential(tmp_path, path, url, written, refused):
    """conda writes the channel into conda-meta/history and each record: the step's last check
    (run here as the Dockerfile has it, on both conda paths) fails the build when a credential of the
    mirror is there, whatever its shape; it never prints the credential."""
    argv = _credential_check(_conda_dockerfile(tmp_path, path), tmp_path)
    meta = tmp_path / "opt" / "conda" / "envs" / "ascend" / "conda-meta"
    meta.mkdir(parents=True)
    (meta / "python-3.9.7-h1_0.json").write_text(json.dumps({"channel": written}))
    (tmp_path / "opt" / "conda" / "conda-meta").mkdir()
    done = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ, CONDA_CHANNEL=url), timeout=30)
    if refused:
        assert done.returncode == 1 and TOKEN not in done.stdout + done.stderr
        assert done.stderr == (f"conda wrote the credential of mirrors.conda_channel into {meta / 'python-3.9.7-h1_0.json'}: "
                               "refusing the layer\n")
    else:
        assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_the_credential_parts_of_a_channel_url_are_found_with_a_url_parser():
    import doctest
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("conda_secrets", SECRETS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    saved, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no __pycache__ among the templates
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = saved
    assert module.secrets("HTTPS://u:p@h/t/TOK/c") == ["u:p", "p", "TOK"]
    assert module.secrets("https://u@h/c") == ["u"]  # a user alone: a token as the user name
    assert module.secrets("https://h:8443/conda-forge/t/") == []  # /t/ last: no token follows it
    assert module.secrets("") == []
    assert doctest.testmod(module).failed == 0


def test_a_stand_in_twin_is_not_held_back_by_the_conda_part_it_does_not_install(tmp_path):
    """`image --twin-os debian11` builds the mission cell's twin in a venv on Debian 11: the
    pip closure only. The shipped lock's incomplete conda part is not that image's."""
    shipped = locks.read(SHIPPED_DOCKERFILES / MISSION_ARM)
    cell = next(c for c in matrix.load(SHIPPED_MATRIX).cells if c.id == MISSION_ARM)
    assert shipped.conda is not None
    assert lock.status(shipped, lock_inputs(cell, KB)) == "incomplete" and not shipped.conda.complete
    stand_in = prepare.prepare(cell, vocabulary.CPU, prepare.Options(locks_dir=SHIPPED_DOCKERFILES, twin_os="debian11"))
    assert stand_in.plan.lock_state == "ok"
    assert "conda create" not in render.files(stand_in.plan)["Dockerfile.cpu"].decode()
    with pytest.raises(UserError, match=r"\(its conda part\)"):  # the cell's own twin still is
        prepare.prepare(cell, vocabulary.CPU, prepare.Options(locks_dir=SHIPPED_DOCKERFILES))
