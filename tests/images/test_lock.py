"""The lock: its file format, its states, and real resolutions with uv against the package index.

Tests marked `index` resolve for real (uv, the package index this machine reaches, the
wheelhouse, a loopback page standing in for the PyPI-less PyTorch CPU index).
"""

from __future__ import annotations

from packaging.version import Version

import hashlib
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from builder import cli, knowledge
from builder.images import conda_lock, lock, matrix, relock
from builder.images.plan import lock_inputs
from builder.errors import UserError
from tests.support import locks
from tests.support.locks import entry
from tests.support.matrix import CANN_7, SHIPPED_DOCKERFILES, SHIPPED_MATRIX, write_cells

KB = knowledge.load()
CELLS = {c.id: c for c in matrix.load(SHIPPED_MATRIX).cells}
DEMO = CELLS["cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64"]
WHEELHOUSE = Path("/opt/wheels")
TORCH_WHEEL = next(iter(sorted(WHEELHOUSE.glob("torch-2.13.0+cpu-cp311-*.whl"))), None)
needs_wheel = pytest.mark.skipif(TORCH_WHEEL is None, reason="no torch 2.13.0+cpu wheel in /opt/wheels")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- the file ---------------------------------------------------------------------------


def test_text_and_parse_are_each_others_inverse():
    made = lock.Lock(cell="c", inputs="0" * 16, target="Python 3.9 on x86_64-manylinux_2_35", resolver="uv 1",
                     entries=(lock.Entry("numpy", "1.26.4", ("a" * 64, "b" * 64)),
                              lock.Entry("torch", "2.1.0+cpu", (), "its index could not be reached")),
                     unpinned=("python: conda's python=3.9, no channel reachable",))
    text = made.text()
    assert lock.Lock.parse(text) == made
    assert "# incomplete: torch==2.1.0+cpu: its index could not be reached\n" in text
    assert "numpy==1.26.4 \\\n    --hash=sha256:" + "a" * 64 + " \\\n    --hash=sha256:" + "b" * 64 + "\n" in text
    assert made.without("torch").__len__() == 1 and not made.complete and entry(made, "NumPy").version == "1.26.4"


def test_a_damaged_lock_is_refused_naming_the_line():
    with pytest.raises(UserError) as caught:
        lock.Lock.parse("# inputs: x\nnumpy==1.0 \\\n    --hash=sha256:zz\n", where="dockerfiles/c/requirements.lock")
    assert caught.value.message.startswith("dockerfiles/c/requirements.lock:3: not a line of an ascend-build lock")
    with pytest.raises(UserError, match="no '# inputs:' line"):
        lock.Lock.parse("numpy==1.0\n")


def _cut_after(text: str, kept: int) -> str:
    """``text`` cut on an entry boundary: the header and the first ``kept`` entries, whole."""
    lines, entries = text.splitlines(keepends=True), 0
    for number, line in enumerate(lines):
        if not line.startswith((" ", "#")):
            entries += 1
            if entries > kept:
                return "".join(lines[:number])
    return text


def test_a_lock_cut_short_between_two_entries_or_edited_is_damaged_not_complete():
    """The header counts and hashes the entries: a lock cut on an entry boundary still parses
    line by line, and only the count tells it from a whole one."""
    shipped = (SHIPPED_DOCKERFILES / DEMO.id / lock.LOCK_FILE).read_text()
    whole = lock.Lock.parse(shipped)
    assert whole.complete and len(whole.entries) > 3
    for damaged in (_cut_after(shipped, len(whole.entries) - 1), _cut_after(shipped, 1),
                    shipped.replace(whole.entries[0].hashes[0], "0" * 64),          # a hash edited
                    shipped.replace(f"{whole.entries[1].name}=={whole.entries[1].version}",
                                    f"{whole.entries[1].name}==0.0.1")):             # a version edited
        assert damaged != shipped
        with pytest.raises(UserError) as refused:
            lock.Lock.parse(damaged, where="x/requirements.lock")
        assert refused.value.message.startswith(f"x/requirements.lock: damaged: its header says {len(whole.entries)} entries")
        assert "cut short or edited" in refused.value.message and refused.value.exit_code == 1
    legacy = "".join(line for line in shipped.splitlines(keepends=True) if not line.startswith("# entries: "))
    assert lock.Lock.parse(legacy) == whole  # written before the count existed: read as it is
    # cut before the count: no entry and no count is no lock of 0 entries, but a damaged one
    before = "".join(shipped.splitlines(keepends=True)[:shipped.splitlines().index(
        next(line for line in shipped.splitlines() if line.startswith("# entries: ")))])
    assert "# inputs: " in before and "# entries: " not in before
    with pytest.raises(UserError, match="x/requirements.lock: damaged: no '# entries:' line and no entry"):
        lock.Lock.parse(before, where="x/requirements.lock")


def test_lock_check_and_validate_refuse_a_lock_cut_short(tmp_path, monkeypatch):
    import shutil

    out = tmp_path / "dockerfiles"
    shutil.copytree(SHIPPED_DOCKERFILES / DEMO.id, out / DEMO.id)
    path = out / DEMO.id / lock.LOCK_FILE
    path.write_text(_cut_after(path.read_text(), 5))
    monkeypatch.chdir(SHIPPED_DOCKERFILES.parent)
    matrix_file, _ = write_cells(tmp_path, {k: getattr(DEMO, k) for k in ("cann", "chip", "arch", "os", "env", "python",
                                                                         "torch_npu")})
    for args in (["lock", "--check", "--matrix", str(matrix_file), "--out", str(out)],
                 ["validate", "--matrix", str(matrix_file), "--out", str(out)]):
        result = CliRunner().invoke(cli.app, args)
        said = result.output + getattr(result.exception, "message", "")  # a UserError reaches main() as it is
        assert result.exit_code != 0, (args, said)
        assert f"{path}: damaged: its header says 30 entries" in said and "the file holds 5" in said, (args, said)


def test_states():
    inputs = lock_inputs(DEMO, KB)
    made = lock.Lock("c", inputs.digest, "", "", (lock.Entry("a", "1", ("0" * 64,)),))
    assert lock.status(None, inputs) == "missing"
    assert lock.status(made, inputs) == "ok"
    assert lock.status(replace(made, inputs="f" * 16), inputs) == "stale"
    assert lock.status(replace(made, entries=made.entries + (lock.Entry("b", "2"),)), inputs) == "incomplete"


@pytest.mark.parametrize("arch, glibc, platform", [
    ("x86_64", (2, 35), "x86_64-manylinux_2_35"), ("aarch64", (2, 39), "aarch64-manylinux_2_39"),
    ("aarch64", (2, 27), "aarch64-manylinux_2_17"), ("x86_64", (2, 41), "x86_64-manylinux_2_40"),
    ("x86_64", (2, 30), "x86_64-manylinux_2_28"),
])
def test_the_platform_is_the_newest_manylinux_the_os_glibc_runs(arch, glibc, platform):
    assert lock.python_platform(arch, glibc) == platform


def test_inputs_follow_the_cell_and_cann():
    seven = next(c for c in CELLS.values() if c.cann == "7.0.RC1" and c.arch == "x86_64")
    inputs = lock_inputs(seven, KB)
    assert "torch==2.1.0+cpu" in inputs.requirements and "torch-npu==2.1.0rc1" in inputs.requirements
    assert {"numpy", "protobuf", "pip", "setuptools", "wheel"} <= set(inputs.requirements)  # a conda cell
    assert inputs.constraints == ("numpy<2", "protobuf>=3.20,<3.21", "setuptools<82")
    assert inputs.platform == "x86_64-manylinux_2_35" and inputs.python == "3.9"
    assert lock_inputs(replace(seven, pip=("einops==0.8.0",)), KB).digest != inputs.digest
    assert lock_inputs(seven, KB).digest == inputs.digest


def test_every_shipped_cell_has_a_lock_made_from_its_current_inputs():
    rows = relock.check(list(CELLS.values()), KB, SHIPPED_DOCKERFILES)
    assert {r.state for r in rows} <= {"ok", "incomplete"}, [(r.cell, r.state) for r in rows]
    for row in rows:
        made = locks.read(SHIPPED_DOCKERFILES / row.cell)
        # what is incomplete is x86_64's torch==X+cpu alone, the PyTorch CPU index being unreachable here
        assert [(e.name, e.version.endswith("+cpu")) for e in made.incomplete] in ([], [("torch", True)]), row.cell
        assert made.entry("torch-npu") and made.entry("pip") and made.entry("numpy"), row.cell
        assert not [e.name for e in made.entries if e.name.startswith("nvidia-") or e.name == "triton"], row.cell


def test_the_mission_cells_numpy_is_below_2_and_protobuf_3_20():
    for cell in (c for c in CELLS.values() if c.cann == "7.0.RC1"):
        made = locks.read(SHIPPED_DOCKERFILES / cell.id)
        assert entry(made, "numpy").version.startswith("1.") and entry(made, "protobuf").version.startswith("3.20.")


def test_lock_check_passes_on_the_committed_tree_and_fails_on_a_stale_one(tmp_path, monkeypatch):
    monkeypatch.chdir(SHIPPED_DOCKERFILES.parent)
    result = CliRunner().invoke(cli.app, ["lock", "--check"])
    assert result.exit_code == 0, result.output
    assert "0 missing/stale/failed" in result.output
    path, _ = write_cells(tmp_path, dict(CANN_7, pip=["einops==0.8.0"]))
    # another matrix checked against the shipped locks (--check writes nothing, so it may read them)
    stale = CliRunner().invoke(cli.app, ["lock", "--check", "--matrix", str(path), "--out", str(SHIPPED_DOCKERFILES)])
    assert stale.exit_code == 1
    assert "stale      cann7.0.rc1-910b-ubuntu22.04-py3.9-torch_npu2.1.0rc1-x86_64: made from other inputs" in stale.output


def test_relock_writes_each_cell_and_a_failure_stops_no_other_with_a_stub_resolver(tmp_path):
    """The orchestration alone: a stub stands in for uv (the real one is tested below)."""
    cells = [CELLS[k] for k in sorted(CELLS)[:3]]

    def stub(inputs, **kw):
        if inputs.cell == cells[1].id:
            raise UserError("uv could not resolve")
        return lock.Lock(inputs.cell, inputs.digest, "t", "uv 0", (lock.Entry("six", "1.17.0", ("0" * 64,)),))

    def conda(channel, python, arch, glibc):  # the conda part: tested against a real channel in test_conda_lock
        return conda_lock.Part(channel, (conda_lock.Package("python", python, "h0", f"noarch/python-{python}-h0.conda",
                                                            "0" * 64),))

    rows = relock.run(cells, KB, tmp_path, resolve=stub, jobs=2, resolve_conda=conda)
    assert [(r.cell, r.state, r.changed) for r in rows] == [
        (cells[0].id, "ok", True), (cells[1].id, "failed", False), (cells[2].id, "ok", True)]
    assert rows[1].detail == "uv could not resolve"
    assert (tmp_path / cells[0].id / "requirements.lock").read_text().startswith("# ascend-build lock of cell")
    assert not (tmp_path / cells[1].id).exists()
    assert [r.changed for r in relock.run(cells[:1], KB, tmp_path, resolve=stub, resolve_conda=conda)] == [False]  # ok: left alone


# --- resolving for real ---------------------------------------------------------------


@pytest.mark.index
@needs_wheel
def test_the_demo_cell_resolves_completely_from_the_index_and_the_wheelhouse(tmp_path, monkeypatch):
    assert TORCH_WHEEL is not None  # needs_wheel
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    made = lock.resolve(lock_inputs(DEMO, KB), wheelhouse=WHEELHOUSE)
    # uv would unpack the 700 MB torch into its cache on every resolve; nothing is left there
    assert not [p for p in (tmp_path / "uv-cache").rglob("*") if p.is_file()]
    assert made.complete and made.inputs == lock_inputs(DEMO, KB).digest
    assert entry(made, "torch").version == "2.13.0+cpu"
    assert entry(made, "torch").hashes == (sha256(TORCH_WHEEL),)  # the wheel this machine holds, exactly
    assert entry(made, "torch-npu").version == "2.13.0"
    assert Version(entry(made, "protobuf").version) >= Version("4")  # CANN 9.1.0 lifts the 3.20 limit of 9.0.x
    assert not [e.name for e in made.entries if e.name.startswith("nvidia-")]
    assert made.resolver.startswith("uv ")


@pytest.mark.index
def test_an_unreachable_torch_index_leaves_torch_incomplete_and_no_cuda_package():
    seven = next(c for c in CELLS.values() if c.cann == "7.0.RC1" and c.arch == "x86_64")
    made = lock.resolve(lock_inputs(seven, KB), is_reachable=lambda url: False)
    assert [e.name for e in made.incomplete] == ["torch"]
    torch = entry(made, "torch")
    assert torch.version == "2.1.0+cpu" and "could not be reached" in torch.note
    assert {"sympy", "networkx", "jinja2", "filelock", "fsspec"} <= {e.name for e in made.entries}
    assert not [e.name for e in made.entries if e.name.startswith("nvidia-") or e.name == "triton"]
    assert entry(made, "numpy").version.startswith("1.")


@pytest.mark.index
@needs_wheel
def test_a_reachable_torch_index_page_completes_torch(tmp_path, serve_folder):
    """A loopback page in the PyTorch CPU index's shape (one project page, #sha256 fragments)."""
    assert TORCH_WHEEL is not None  # needs_wheel
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / TORCH_WHEEL.name).symlink_to(TORCH_WHEEL)
    href = TORCH_WHEEL.name.replace("+", "%2B")
    (tmp_path / "torch" / "index.html").write_text(
        f'<html><body><a href="{href}#sha256={sha256(TORCH_WHEEL)}">{TORCH_WHEEL.name}</a></body></html>')
    made = lock.resolve(replace(lock_inputs(DEMO, KB), torch_index=serve_folder(tmp_path)))
    assert made.complete and entry(made, "torch").hashes == (sha256(TORCH_WHEEL),)


@pytest.mark.index
@needs_wheel
def test_locking_again_keeps_what_still_fits():
    inputs = lock_inputs(DEMO, KB)
    first = lock.resolve(inputs, wheelhouse=WHEELHOUSE)
    older = replace(first, entries=tuple(replace(e, version="2.2.6") if e.name == "numpy" else e for e in first.entries))
    again = lock.resolve(inputs, wheelhouse=WHEELHOUSE, previous=older)
    assert entry(again, "numpy").version == "2.2.6"  # uv kept the earlier pin
    assert entry(again, "torch").version == entry(first, "torch").version


@pytest.mark.index
def test_a_pin_outside_cann_limits_cannot_resolve():
    seven = next(c for c in CELLS.values() if c.cann == "7.0.RC1" and c.arch == "aarch64")
    with pytest.raises(UserError) as caught:
        lock.resolve(lock_inputs(replace(seven, pip=("numpy==2.0.2",)), KB))
    assert caught.value.message.startswith(f"uv could not resolve cell {seven.id} for aarch64-manylinux_2_35")
    # every requirement on the packages uv names, and who asks for it
    said = caught.value.message.split("who asks for each:\n")[1]
    assert "numpy==2.0.2 (the cell's pip:)" in said
    assert "numpy<2 (CANN 7.0.RC1's limit, per " in said


@pytest.mark.parametrize("content, message", [
    (b"numpy==1.26.4 \\\n    --hash=sha256:\xff\xfe\n", "is not UTF-8 text (byte 34): not a lock"),
    (None, "bytes: no lock is that large"),
])
def test_a_lock_file_that_cannot_be_a_lock_is_refused_by_name(tmp_path, content, message):
    path = tmp_path / lock.LOCK_FILE
    if content is None:
        with open(path, "wb") as fh:
            fh.truncate(4 << 30)  # sparse: 4 GiB announced, nothing on disk
    else:
        path.write_bytes(content)
    with pytest.raises(UserError) as caught:
        lock.read(tmp_path)
    assert caught.value.message.startswith(str(path)) and message in caught.value.message


def test_a_resolver_that_outlasts_the_commands_deadline_is_stopped_there():
    """`lock` waits on uv up to 15 minutes a cell, and never past the command's deadline."""
    import subprocess
    import time

    from builder import bounded
    from builder.images import lock as locking

    inputs = locking.Inputs(cell="c", python="3.11", platform="x86_64-manylinux_2_35", requirements=("six==1.16.0",),
                            constraints=(), torch_index="")

    def slow_uv(argv, **options):  # a real process that takes as long as a resolver stuck on the network
        return subprocess.run(["sleep", "30"], **options)
    started = time.monotonic()
    with bounded.command_deadline(1), pytest.raises(bounded.DeadlinePassed) as late:
        locking._compile(["uv"], inputs, list(inputs.requirements), [], [], None, None, run=slow_uv)
    assert "waiting on uv resolving cell c" in late.value.message
    assert time.monotonic() - started < 10


# --- which torch build an Ascend image takes (kb.environment.cpu_torch), and no CUDA package in any lock ---


def _aarch64_2_13(tmp_path):
    path, _ = write_cells(tmp_path, {"os": "debian12", "arch": "aarch64", "chip": "910b", "cann": "9.1.0",
                                     "python": "3.11", "torch_npu": "2.13.0", "env": "venv"})
    return matrix.load(path).cells[0]


def test_an_aarch64_cell_from_torch_2_11_locks_the_cpu_build_from_the_cpu_index(tmp_path):
    inputs = lock_inputs(_aarch64_2_13(tmp_path), KB)
    assert "torch==2.13.0+cpu" in inputs.requirements and inputs.torch_index == "https://download.pytorch.org/whl/cpu"
    # up to 2.10 PyPI's aarch64 torch is the CPU build: the shipped 2.9.0 cells lock it from there
    nine = next(c for c in CELLS.values() if c.arch == "aarch64" and c.torch_npu == "2.9.0.post2")
    assert "torch==2.9.0" in lock_inputs(nine, KB).requirements and lock_inputs(nine, KB).torch_index == ""


@pytest.mark.index
def test_an_aarch64_2_13_lock_holds_no_cuda_package_and_pypis_cuda_torch_is_refused(tmp_path):
    # the CPU index is not reachable here: torch stays incomplete, its closure without CUDA packages
    made = lock.resolve(lock_inputs(_aarch64_2_13(tmp_path), KB), is_reachable=lambda url: False)
    assert [e.name for e in made.incomplete] == ["torch"] and entry(made, "torch").version == "2.13.0+cpu"
    assert not [e.name for e in made.entries if e.name.startswith(("nvidia-", "cuda-")) or e.name == "triton"]
    # PyPI's aarch64 torch 2.13.0, as a new user would lock it: its CUDA closure is refused by the lock code
    cuda_twin = replace(lock_inputs(_aarch64_2_13(tmp_path), KB), torch_index="",
                        requirements=tuple("torch==2.13.0" if r.startswith("torch==") else r
                                           for r in lock_inputs(_aarch64_2_13(tmp_path), KB).requirements))
    with pytest.raises(UserError) as refused:
        lock.resolve(cuda_twin)
    assert "the lock would hold CUDA packages (" in refused.value.message and "nvidia-cublas" in refused.value.message


@pytest.mark.parametrize("pin", ["triton==3.5.0", "Triton >= 3", "pytorch_triton[extra]==3.5.0 ; python_version >= '3.9'"])
def test_triton_the_cell_pins_itself_is_kept_and_one_torch_pulls_in_is_refused(pin):
    """`refuse_cuda`: triton is a package of its own a cell may pin on purpose; unasked, it is CUDA torch's."""
    name = "pytorch-triton" if "pytorch" in pin else "triton"
    entries = [lock.Entry("torch", "2.13.0", ("0" * 64,)), lock.Entry(name, "3.5.0", ("1" * 64,))]
    asked = lock.Inputs("c", "3.11", "aarch64-manylinux_2_35", ("torch==2.13.0", pin), (), "")
    lock.refuse_cuda(asked, entries)  # no refusal
    unasked = replace(asked, requirements=("torch==2.13.0",))
    with pytest.raises(UserError) as refused:
        lock.refuse_cuda(unasked, entries)
    assert f"CUDA packages ({name})" in refused.value.message


def test_a_broken_lock_read_by_a_lock_thread_suggests_the_lock_command_with_the_runs_flags(tmp_path):
    """`relock.run` reads each lock in a worker thread: the fix line built there carries the
    run's --matrix/--out (`commands.given`) as one built in the main thread does."""
    from builder import commands

    out = tmp_path / "team"
    (out / DEMO.id).mkdir(parents=True)
    (out / DEMO.id / lock.LOCK_FILE).write_text("not a lock line\n")
    with commands.given(matrix="team.yaml", out=out), pytest.raises(UserError) as broken:
        relock.run([DEMO], KB, out, resolve=lambda inputs, **_: None, jobs=2)
    assert f"`ascend-build lock --matrix team.yaml --out {out}`" in broken.value.fix, broken.value.fix
