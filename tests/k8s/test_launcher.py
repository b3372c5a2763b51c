"""What each launcher is told: which command is torchrun, plain python or unknown, and what is refused."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from builder.errors import UserError
from builder.k8s import launcher


@pytest.mark.parametrize("command, kind", [
    (("torchrun", "--nproc_per_node", "8", "train.py"), "torchrun"),
    (("/opt/venv/bin/torchrun", "train.py"), "torchrun"),
    (("python", "-m", "torch.distributed.run", "--nproc-per-node=8", "train.py"), "torchrun"),
    (("python3.11", "-u", "-m", "torch.distributed.launch", "train.py"), "torchrun"),
    (("python3", "-mtorch.distributed.run", "train.py"), "torchrun"),
    (("python", "train.py", "-m", "torch.distributed.run"), "python"),  # -m after the script is the script's
    (("python", "-m", "mypkg.train"), "python"),
    (("/usr/bin/python3", "train.py"), "python"),
    (("bash", "-c", "torchrun train.py"), "unknown"),
    (("deepspeed", "train.py"), "unknown"),
    (("pythonista", "x"), "unknown"),
])
def test_the_launcher_is_read_from_the_command(command, kind):
    assert launcher.kind_of(command) == kind


def test_torchrun_on_several_pods_reads_pet_variables_and_no_process_rank_is_set():
    command, env = launcher.rendezvous(("torchrun", "--nproc_per_node", "8", "train.py"), 2, 8, {"fieldRef": {}},
                                       "j-worker-0.j", "2222", "Volcano")
    names = [e["name"] for e in env]
    assert command == ("torchrun", "--nproc_per_node", "8", "train.py")
    assert names == ["PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_NPROC_PER_NODE"]
    assert env[1] == {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {}}}
    # RANK/WORLD_SIZE are torchrun's to set per process: a node rank and an NPU count there disagreed
    assert not {"RANK", "WORLD_SIZE"} & set(names)


def test_a_node_rank_the_controller_appends_is_read_in_the_command_not_in_the_env():
    """An env value expands only the variables before it, and the controller's come after: in the
    env, PET_NODE_RANK or RANK would be the text "$(VC_TASK_INDEX)"."""
    rank = launcher.appended("VC_TASK_INDEX")
    command, env = launcher.rendezvous(("python", "-m", "torch.distributed.run", "t.py"), 3, 2, rank, "m", "1", "V")
    assert command == ("python", "-m", "torch.distributed.run", "--node-rank=$(VC_TASK_INDEX)", "t.py")
    assert [e["name"] for e in env] == ["PET_NNODES", "PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_NPROC_PER_NODE"]
    command, env = launcher.rendezvous(("python3", "train.py", "--lr", "1"), 3, 1, rank, "m", "1", "V")
    assert command == ("env", "RANK=$(VC_TASK_INDEX)", "python3", "train.py", "--lr", "1")
    assert {e["name"]: e["value"] for e in env} == {"MASTER_ADDR": "m", "MASTER_PORT": "1", "WORLD_SIZE": "3",
                                                    "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
    assert "$(" not in str(env)


def test_the_pet_names_are_the_ones_torchrun_reads():
    """torchrun's own parser, in the Python with torch (ASCEND_BUILD_TORCH_PYTHON), given only the PET_* set here."""
    torch_python = os.environ.get("ASCEND_BUILD_TORCH_PYTHON", "/work/main/.venv-torch/bin/python")
    if not Path(torch_python).exists():
        pytest.skip("set ASCEND_BUILD_TORCH_PYTHON to a Python with torch")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PET_")}
    env.update({e["name"]: e["value"] for e in launcher.torchrun_env(3, 2, "1", "m.j", "2345")})
    probe = ("import json, torch.distributed.run as r; a = r.get_args_parser().parse_args(['train.py']); "
             "print(json.dumps([a.nnodes, a.node_rank, a.master_addr, a.master_port, a.nproc_per_node]))")
    done = subprocess.run([torch_python, "-W", "ignore", "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == ["3", 1, "m.j", 2345, "2"]


@pytest.mark.parametrize("command, given", [
    (("torchrun", "--nnodes", "2", "train.py"), "--nnodes"),
    (("torchrun", "--standalone", "--nproc_per_node=8", "train.py"), "--standalone"),
    (("python", "-m", "torch.distributed.run", "--master_addr=10.0.0.1", "train.py"), "--master_addr"),
    (("torchrun", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1", "t.py"), "--rdzv-backend, --rdzv-endpoint"),
])
def test_a_torchrun_command_setting_its_own_rendezvous_is_refused_on_several_pods(command, given):
    with pytest.raises(UserError) as info:
        launcher.check(command, 2, "Volcano")
    assert f"the command sets {given} itself" in info.value.message
    assert info.value.fix.startswith(f"leave {given} out")
    assert launcher.check(command, 1, "Volcano") == "torchrun"  # one pod: the command's own choice stands


def test_the_scripts_own_flags_after_the_script_are_not_torchruns():
    assert launcher.check(("torchrun", "--nproc_per_node", "8", "train.py", "--nnodes", "4"), 2, "Volcano") == "torchrun"


def test_an_unknown_launcher_on_several_pods_is_refused_with_the_fix_and_allowed_on_one():
    with pytest.raises(UserError) as info:
        launcher.check(("mpirun", "-n", "16", "python", "train.py"), 3, "Volcano")
    assert info.value.message == ("--nodes-count 3: cannot tell 'mpirun' how the 3 pods find each other "
                                  "(ascend-build wires torchrun and plain python)")
    assert "-- torchrun --nproc_per_node 8 train.py" in info.value.fix and "--nodes-count 1" in info.value.fix
    assert launcher.rendezvous(("mpirun", "x"), 1, 8, "0", "localhost", "2222", "batch/v1") == (("mpirun", "x"), [])
