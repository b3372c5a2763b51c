"""A plain ``batch/v1`` Job: one pod with N NPUs on one node of the pool.

Example:
    >>> spec = PodSpec(image="r/p@sha256:" + "0" * 64, chip="910b", arch="aarch64", npus=8,
    ...                command=("python", "train.py"), min_driver="24.1.RC3", chip_values=("910B3",), drivers=())
    >>> doc = job("train", spec, {"ascend-build.io/image-tag": "t"})
    >>> doc["apiVersion"], doc["kind"], doc["spec"]["template"]["spec"]["restartPolicy"]
    ('batch/v1', 'Job', 'Never')
"""

from __future__ import annotations

import re
from typing import Any, Dict, Mapping

from builder.errors import UserError
from builder.k8s import launcher
from builder.k8s.pod import MASTER_PORT, PodSpec, pod_spec, ring_controller

MANAGED_BY = {"app.kubernetes.io/managed-by": "ascend-build"}
# A Volcano pod is named JOB-TASK-INDEX and its hostname must stay a DNS label (63 characters).
NAME_MAX = 40


def check_name(name: str) -> str:
    """``--name`` as Kubernetes accepts it for a Job (and Volcano for the pods' host names).

    >>> check_name("llama-sft")
    'llama-sft'
    """
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) or len(name) > NAME_MAX:
        raise UserError(f"--name {name!r} is not a Kubernetes name",
                        fix=f"lowercase letters, digits and '-', starting and ending with a letter or digit, "
                            f"at most {NAME_MAX} characters (e.g. --name llama-sft)")
    return name


def job(name: str, spec: PodSpec, annotations: Mapping[str, str]) -> Dict[str, Any]:
    """The Job manifest. ``backoffLimit: 0``: a failed training run is looked at, not silently restarted
    on the same data; one pod, so the rendezvous is the pod itself (`builder.k8s.launcher`)."""
    check_name(name)
    command, env = launcher.rendezvous(spec.command, 1, spec.npus, "0", "localhost", str(MASTER_PORT), "batch/v1")
    labels = {**MANAGED_BY, **ring_controller(spec)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": dict(labels), "annotations": dict(annotations)},
        "spec": {
            "backoffLimit": 0,
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec(spec, env, command=command)},
        },
    }
