"""How the pods of a job find each other: what the command's launcher reads, chosen from the command.

A job of K pods trains as one only if its launcher is told K, this pod's node rank and where
rank 0 listens. Each launcher reads that from its own place, so the command decides:

- **torchrun** (``torchrun``, ``python -m torch.distributed.run``, ``python -m torch.distributed.launch``):
  its static rendezvous reads every argument from a ``PET_<ARGUMENT>`` variable when the
  argument is not given (``torch/distributed/argparse_util.py``, class ``env``; torch 2.13's
  ``run.py``: ``--nnodes``, ``--node-rank``, ``--master-addr``, ``--master-port``,
  ``--nproc-per-node``). It then sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``... per process
  itself. Arguments win over ``PET_*``, so a command that gives its own ``--nnodes``,
  ``--node-rank``, ``--master-addr``, ``--master-port``, ``--rdzv-*`` or ``--standalone`` on
  more than one pod is refused: those would override what the job knows.
- **plain python** (``python train.py``, ``python -m pkg.train``): one process per pod, reading
  ``env://``: ``RANK`` is the pod's rank and ``WORLD_SIZE`` the number of pods, the process
  rank and count ``torch.distributed.init_process_group`` reads (``LOCAL_RANK`` 0,
  ``LOCAL_WORLD_SIZE`` 1).
- anything else (a shell, ``deepspeed``, ``mpirun``, a script) cannot be wired: on more than
  one pod it is refused with the fix; on one pod it gets no rendezvous variables.

Where the values come from is the job kind's business (`builder.k8s.volcano`,
`builder.k8s.ascendjob`): a number, a ``valueFrom`` the kubelet fills in, or a variable the job's
controller appends to the container's env (`appended`). Such a variable can only be read in the
command: Kubernetes expands ``$(VAR)`` in an env value only from the variables before it, and
in the command from the container's whole env (``kubelet_pods.go``: ``makeEnvironmentVariables``,
``ExpandContainerCommandAndArgs``). So with an appended node rank, torchrun gets
``--node-rank=$(VAR)`` as an argument, and plain python is started as ``env RANK=$(VAR) python ...``
(``env`` is the image's GNU coreutils, as in every OS ascend-build builds on).

Example:
    >>> kind_of(("torchrun", "--nproc_per_node", "8", "train.py"))
    'torchrun'
    >>> kind_of(("python3", "-m", "torch.distributed.run", "train.py")), kind_of(("python", "train.py"))
    ('torchrun', 'python')
    >>> kind_of(("bash", "-c", "torchrun train.py"))
    'unknown'
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from builder.errors import UserError

TORCHRUN = "torchrun"
PYTHON = "python"
UNKNOWN = "unknown"
# python -m MODULE launchers that parse torchrun's arguments (torch.distributed.launch calls run's parser)
TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")
# torchrun's arguments that say where the rendezvous is: given in the command, they would win over PET_*
RENDEZVOUS_FLAGS = ("--nnodes", "--node-rank", "--node_rank", "--master-addr", "--master_addr", "--master-port",
                    "--master_port", "--rdzv-backend", "--rdzv_backend", "--rdzv-endpoint", "--rdzv_endpoint",
                    "--rdzv-id", "--rdzv_id", "--standalone")

Value = Union[str, Dict[str, Any]]  # a literal, a valueFrom, or `appended`'s $(VAR)
Env = List[Dict[str, Any]]


def _is_python(program: str) -> bool:
    return re.fullmatch(r"python(3(\.[0-9]+)?)?", os.path.basename(program)) is not None


def _module(command: Sequence[str]) -> Optional[str]:
    """The module of ``python [OPTIONS] -m MODULE ...``, else None."""
    for i, arg in enumerate(command[1:], start=1):
        if arg == "-m" and i + 1 < len(command):
            return command[i + 1]
        if arg.startswith("-m") and len(arg) > 2:
            return arg[2:]
        if not arg.startswith("-"):
            return None  # the script: python's own options end here
    return None


def kind_of(command: Sequence[str]) -> str:
    """``torchrun``, ``python`` (one process per pod on ``env://``) or ``unknown``."""
    if not command:
        return UNKNOWN
    program = os.path.basename(command[0])
    if program == "torchrun":
        return TORCHRUN
    if _is_python(program):
        return TORCHRUN if _module(command) in TORCHRUN_MODULES else PYTHON
    return UNKNOWN


def _launcher_args(command: Sequence[str]) -> Sequence[str]:
    """The arguments torchrun parses: those before the training script."""
    start = 1 if os.path.basename(command[0]) == "torchrun" else list(command).index("-m") + 2 \
        if "-m" in command else 2
    args: List[str] = []
    for arg in command[start:]:
        if not arg.startswith("-") and (not args or not _takes_value(args[-1])):
            break
        args.append(arg)
    return args


def _takes_value(flag: str) -> bool:
    return flag.startswith("--") and "=" not in flag and flag not in ("--standalone", "--no-python", "--no_python",
                                                                       "--module", "-m", "--run-path", "--run_path")


def appended(variable: str) -> str:
    """A reference to a variable the job's controller appends to the container's env: read in the command.

    >>> appended("VC_TASK_INDEX")
    '$(VC_TASK_INDEX)'
    """
    return f"$({variable})"


def _is_appended(value: Value) -> bool:
    return isinstance(value, str) and re.fullmatch(r"\$\([A-Za-z_][A-Za-z0-9_]*\)", value) is not None


def check(command: Sequence[str], nodes: int, kind_name: str, wired: Sequence[str] = ()) -> str:
    """The launcher of ``command``, refused when a job of ``nodes`` pods cannot wire it. ``wired``:
    torchrun flags the job kind also gives, refused in the command as the rendezvous flags are.

    >>> check(("torchrun", "--nproc_per_node", "8", "train.py"), 2, "volcano")
    'torchrun'
    >>> try:
    ...     check(("bash", "run.sh"), 2, "volcano")
    ... except UserError as e:
    ...     print(e.message)
    --nodes-count 2: cannot tell 'bash' how the 2 pods find each other (ascend-build wires torchrun and plain python)
    """
    kind = kind_of(command)
    if nodes <= 1:
        return kind
    if kind == UNKNOWN:
        program = os.path.basename(command[0]) if command else ""
        raise UserError(f"--nodes-count {nodes}: cannot tell {program!r} how the {nodes} pods find each other "
                        "(ascend-build wires torchrun and plain python)",
                        fix="start the command with torchrun (-- torchrun --nproc_per_node 8 train.py: it gets "
                            "PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT) or with python "
                            "(-- python train.py: one process per pod on env://), or run one pod: --nodes-count 1")
    if kind == TORCHRUN:
        given = sorted({flag.split("=", 1)[0] for flag in _launcher_args(command)} & {*RENDEZVOUS_FLAGS, *wired})
        if given:
            raise UserError(f"--nodes-count {nodes}: the command sets {', '.join(given)} itself, which would "
                            f"override the rendezvous the {kind_name} job gives torchrun",
                            fix=f"leave {', '.join(given)} out: each pod gets its node rank, the node count and "
                                "rank 0's address from the job")
    return kind


def torchrun_env(nodes: int, npus: int, node_rank: Value, master_addr: Value, master_port: Value) -> Env:
    """``PET_*`` for torchrun's static rendezvous; ``PET_NPROC_PER_NODE`` is ``--npus`` unless the
    command says ``--nproc_per_node`` (an argument wins over its variable).

    >>> [(e["name"], e.get("value")) for e in torchrun_env(2, 8, "0", "j-worker-0.j", "2222")]
    [('PET_NNODES', '2'), ('PET_NODE_RANK', '0'), ('PET_MASTER_ADDR', 'j-worker-0.j'), ('PET_MASTER_PORT', '2222'), ('PET_NPROC_PER_NODE', '8')]
    """
    return [_var("PET_NNODES", str(nodes)), _var("PET_NODE_RANK", node_rank), _var("PET_MASTER_ADDR", master_addr),
            _var("PET_MASTER_PORT", master_port), _var("PET_NPROC_PER_NODE", str(npus))]


def python_env(nodes: int, rank: Value, master_addr: Value, master_port: Value) -> Env:
    """``env://`` for one process per pod: ``RANK`` the pod's rank, ``WORLD_SIZE`` the pods.

    >>> [(e["name"], e.get("value")) for e in python_env(1, "0", "localhost", "2222")]
    [('MASTER_ADDR', 'localhost'), ('MASTER_PORT', '2222'), ('WORLD_SIZE', '1'), ('RANK', '0'), ('LOCAL_RANK', '0'), ('LOCAL_WORLD_SIZE', '1')]
    """
    return [_var("MASTER_ADDR", master_addr), _var("MASTER_PORT", master_port), _var("WORLD_SIZE", str(nodes)),
            _var("RANK", rank), _var("LOCAL_RANK", "0"), _var("LOCAL_WORLD_SIZE", "1")]


def _var(name: str, value: Value) -> Dict[str, Any]:
    return {"name": name, "valueFrom": value} if isinstance(value, dict) else {"name": name, "value": value}


def rendezvous(command: Sequence[str], nodes: int, npus: int, node_rank: Value, master_addr: Value,
               master_port: Value, kind_name: str) -> Tuple[Tuple[str, ...], Env]:
    """(command, env) telling the command's launcher about a job of ``nodes`` pods (see the module):
    the variables it reads, and the command itself changed only to read an `appended` node rank.

    >>> rendezvous(("torchrun", "t.py"), 2, 8, appended("VC_TASK_INDEX"), "j-worker-0.j", "2222", "Volcano")[0]
    ('torchrun', '--node-rank=$(VC_TASK_INDEX)', 't.py')
    >>> rendezvous(("python", "t.py"), 2, 1, appended("VC_TASK_INDEX"), "j-worker-0.j", "2222", "Volcano")[0]
    ('env', 'RANK=$(VC_TASK_INDEX)', 'python', 't.py')
    """
    command = tuple(command)
    kind = check(command, nodes, kind_name)
    in_command = _is_appended(node_rank)
    if kind == TORCHRUN:
        env = torchrun_env(nodes, npus, node_rank, master_addr, master_port)
        if in_command:
            return (torchrun_args(command, [("--node-rank", str(node_rank))]),
                    [e for e in env if e["name"] != "PET_NODE_RANK"])
        return command, env
    if kind == PYTHON:
        env = python_env(nodes, node_rank, master_addr, master_port)
        if in_command:
            return ("env", f"RANK={node_rank}", *command), [e for e in env if e["name"] != "RANK"]
        return command, env
    return command, []


def torchrun_args(command: Sequence[str], flags: Sequence[Tuple[str, str]]) -> Tuple[str, ...]:
    """``command`` with ``--flag=value`` inserted right after the launcher (``torchrun`` or
    ``python -m torch.distributed.run``), before its own arguments.

    >>> torchrun_args(("torchrun", "train.py"), [("--nnodes", "2")])
    ('torchrun', '--nnodes=2', 'train.py')
    >>> torchrun_args(("python", "-m", "torch.distributed.run", "t.py"), [("--node-rank", "$(RANK)")])
    ('python', '-m', 'torch.distributed.run', '--node-rank=$(RANK)', 't.py')
    """
    at = 1 if os.path.basename(command[0]) == "torchrun" else list(command).index("-m") + 2 \
        if "-m" in command else next(i for i, a in enumerate(command) if a.startswith("-m")) + 1
    return (*command[:at], *(f"{flag}={value}" for flag, value in flags), *command[at:])
