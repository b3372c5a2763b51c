"""The job kinds `k8s job --kind` makes, in one table: adding a kind is one entry here plus its module.

Each kind gives, with one signature for all:

- ``build(name, spec, nodes, annotations)``: the manifest (a dict) for ``nodes`` pods;
- ``header(name, spec)``: the comment lines printed above it (what the cluster must run);
- ``check(command, nodes, variant, npus)``: the kind's own refusals, made before any registry is
  asked (a UserError with the fix);
- ``multi_node``: whether ``--nodes-count`` above 1 is the kind's (a ``batch/v1`` Job runs one pod);
- ``what``: the few words ``--kind``'s help gives it.

The launcher rules (what torchrun or a plain python reads to find the other pods,
`builder.k8s.launcher`) and the labels are each kind's module's business; this table only names
them for the command line.

Example:
    >>> names(), [k.name for k in KINDS.values() if k.multi_node]
    (('job', 'volcano', 'ascendjob'), ['volcano', 'ascendjob'])
    >>> try:
    ...     kind("deployment")
    ... except UserError as e:
    ...     print(e.message, "|", e.fix)
    --kind 'deployment' is none of job, volcano, ascendjob | --kind job, volcano or ascendjob
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Tuple

from builder.errors import UserError
from builder.k8s import ascendjob, job, volcano
from builder.k8s.pod import PodSpec

Manifest = Dict[str, Any]


@dataclass(frozen=True)
class JobKind:
    """One kind of job (see the module)."""

    name: str
    what: str
    multi_node: bool
    build: Callable[[str, PodSpec, int, Mapping[str, str]], Manifest]
    header: Callable[[str, PodSpec], List[str]] = lambda name, spec: []
    check: Callable[[Tuple[str, ...], int, str, int], Any] = lambda command, nodes, variant, npus: None


KINDS: Dict[str, JobKind] = {k.name: k for k in (
    JobKind("job", "a batch/v1 Job", False,
            build=lambda name, spec, nodes, annotations: job.job(name, spec, annotations)),
    JobKind("volcano", "a Volcano Job", True, build=volcano.volcano_job,
            header=lambda name, spec: volcano.header(name)),
    JobKind("ascendjob", "MindCluster's AscendJob", True, build=ascendjob.ascend_job, header=ascendjob.header,
            check=ascendjob.check),
)}


def names() -> Tuple[str, ...]:
    """The kinds' names, in the table's order."""
    return tuple(KINDS)


def _either(words: List[str]) -> str:
    return ", ".join(words[:-1]) + " or " + words[-1] if len(words) > 1 else "".join(words)


def kind(name: str) -> JobKind:
    """The kind ``name``; a UserError naming the kinds there are."""
    if name not in KINDS:
        raise UserError(f"--kind {name!r} is none of {', '.join(names())}", fix=f"--kind {_either(list(names()))}")
    return KINDS[name]


def check_count(chosen: JobKind, nodes: int) -> None:
    """Refuse ``--nodes-count`` above 1 for a kind that runs one pod."""
    if nodes != 1 and not chosen.multi_node:
        multi = [k.name for k in KINDS.values() if k.multi_node]
        raise UserError(f"--nodes-count is for --kind {_either(multi)} ({chosen.what} here runs one pod)",
                        fix=f"add --kind {multi[0]}" + (f" (or {_either(multi[1:])})" if multi[1:] else "")
                            + ", or leave --nodes-count out")


def help_text() -> str:
    """``--kind``'s help: each kind in a few words."""
    return "; ".join(f"{k.name}: {k.what}" + (" over --nodes-count nodes" if k.multi_node else " (one pod)")
                     for k in KINDS.values()) + "."
