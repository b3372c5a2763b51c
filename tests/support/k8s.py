"""What the k8s tests share: the fixture node lists, Kubernetes' node affinity rules, the schemas, a PodSpec."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any, Dict, List

import jsonschema
import kubernetes_validate
import yaml

from builder.k8s import pod, pool

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CLUSTER = FIXTURES / "k8s" / "cluster.json"
POOL_910B = FIXTURES / "k8s" / "pool-910b.json"
VOLCANO_CRD = FIXTURES / "volcano" / "batch.volcano.sh_jobs.yaml"
# The oldest and newest Kubernetes kubernetes-validate carries schemas for, and some between.
K8S_VERSIONS = ("1.25.0", "1.28.0", "1.31.0", "1.34.0", "1.37.0")


def nodes(path: Path) -> List[Dict[str, Any]]:
    return json.loads(path.read_text())["items"]


def _int64(text: str):
    """strconv.ParseInt(text, 10, 64) as the scheduler reads a Gt/Lt value; None when it fails."""
    try:
        value = int(text, 10)
    except ValueError:
        return None
    return value if -2 ** 63 <= value < 2 ** 63 and text.strip() == text and "_" not in text else None


def expression_matches(expr: Dict[str, Any], labels: Dict[str, str]) -> bool:
    """One nodeSelectorRequirement, as Kubernetes evaluates it (k8s.io/component-helpers nodeaffinity)."""
    key, op, values = expr["key"], expr["operator"], expr.get("values", [])
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        assert len(values) == 1, "Gt/Lt take exactly one value"
        have, bound = (_int64(labels[key]) if present else None), _int64(values[0])
        if have is None or bound is None:
            return False
        return have > bound if op == "Gt" else have < bound
    raise AssertionError(f"unknown operator {op}")


def admitted(pod_spec: Dict[str, Any], cluster: List[Dict[str, Any]]) -> List[str]:
    """Names of the nodes the pod's required node affinity admits: terms ORed, expressions ANDed,
    an empty term admits nothing."""
    terms = pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    out = []
    for node in cluster:
        labels = node["metadata"]["labels"]
        if any(term.get("matchExpressions") and all(expression_matches(e, labels) for e in term["matchExpressions"])
               for term in terms):
            out.append(node["metadata"]["name"])
    return out


def validate_k8s(manifest: Dict[str, Any]) -> None:
    """Against Kubernetes' own OpenAPI schemas, strict (unknown fields are errors), for each version."""
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(manifest, version, strict=True)


def _closed(schema: Any) -> Any:
    """The CRD schema with unknown fields refused: Kubernetes prunes them silently, which would hide a typo."""
    if isinstance(schema, dict):
        schema = {k: _closed(v) for k, v in schema.items()}
        if "properties" in schema and "additionalProperties" not in schema \
                and not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema["additionalProperties"] = False
    elif isinstance(schema, list):
        schema = [_closed(v) for v in schema]
    return schema


def volcano_schema() -> Dict[str, Any]:
    crd = yaml.safe_load(VOLCANO_CRD.read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1")
    return _closed(copy.deepcopy(version["schema"]["openAPIV3Schema"]))


def validate_volcano(manifest: Dict[str, Any]) -> None:
    """Against Volcano's Job CRD (v1alpha1), and its Pod template against Kubernetes' Pod schema too."""
    jsonschema.validate(manifest, volcano_schema())
    for task in manifest["spec"]["tasks"]:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", **task["template"].get("metadata", {})},
               "spec": task["template"]["spec"]}
        validate_k8s(pod)


OPENKRUISE_CRD = FIXTURES / "openkruise" / "apps.kruise.io_imagepulljobs.yaml"


def validate_openkruise(manifest: Dict[str, Any]) -> None:
    """Against OpenKruise's ImagePullJob CRD, for the manifest's version (v1alpha1, served beside the
    stored v1beta1), unknown fields refused."""
    crd = yaml.safe_load(OPENKRUISE_CRD.read_text())
    assert manifest["apiVersion"] == f"{crd['spec']['group']}/v1alpha1" and manifest["kind"] == crd["spec"]["names"]["kind"]
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1")
    assert version["served"] is True
    jsonschema.validate(manifest, _closed(copy.deepcopy(version["schema"]["openAPIV3Schema"])))


ASCENDJOB_CRD = FIXTURES / "mindcluster" / "ascendjobs.mindxdl.gitee.com.yaml.gz"
ASCENDJOB_CRD_SHA256 = "723058d0eee522ef9d26abb48300d51254d1d029a36d8845eba3ac387f757b2e"


@functools.lru_cache(maxsize=1)
def ascendjob_schema() -> Dict[str, Any]:
    import gzip
    import hashlib

    text = gzip.decompress(ASCENDJOB_CRD.read_bytes())
    assert hashlib.sha256(text).hexdigest() == ASCENDJOB_CRD_SHA256, "the AscendJob CRD fixture changed"
    crd = yaml.safe_load(text)
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    return _closed(copy.deepcopy(version["schema"]["openAPIV3Schema"]))


def validate_ascendjob(manifest: Dict[str, Any]) -> None:
    """Against the Ascend Operator's AscendJob CRD (v1), and each replica's Pod template against Kubernetes' Pod schema."""
    jsonschema.validate(manifest, ascendjob_schema())
    for replica in manifest["spec"]["replicaSpecs"].values():
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", **replica["template"].get("metadata", {})},
               "spec": replica["template"]["spec"]}
        validate_k8s(pod)


DIGEST = "sha256:" + "ab" * 32
IMAGE = f"127.0.0.1:5000/ascend-build/pytorch@{DIGEST}"


def spec_for(min_driver: str, npus: int = 8, path: Path = POOL_910B, chip=None, **over) -> pod.PodSpec:
    found = pool.read_pool(path.read_text(), path.name, chip)
    fields: Dict[str, Any] = dict(image=IMAGE, chip=found.node.chip, arch=found.node.arch, npus=npus,
                  command=("torchrun", "--nproc_per_node", str(npus), "train.py"), min_driver=min_driver,
                  chip_values=found.chip_values, drivers=found.drivers)
    fields.update(over)
    return pod.PodSpec(**fields)


# --- sources kept verbatim (below a header line naming repository, path and commit) -------------

OPERATOR_SOURCES = FIXTURES / "mindcluster" / "ascend-operator"
KUBEFLOW_COMMON = FIXTURES / "mindcluster" / "kubeflow-common"
VOLCANO_ENV_PLUGIN = FIXTURES / "volcano" / "env-plugin"
# What the Ascend Operator appends to the env of a pod that asks for no NPU (its setCommonEnv,
# env.go:168-186, without the two variables it sets only for a huawei.com/ request): the
# rendezvous test gives its AscendJob pods exactly these, and test_ascendjob reads them in env.go.
OPERATOR_COMMON_ENV = ("MINDX_TASK_ID", "MINDX_SERVER_IP", "MINDX_SERVER_DOMAIN", "HostNetwork", "REPLICA_TYPE")


def kept_source(path: Path) -> str:
    """A kept source file's text, without its header line (which names where it is from)."""
    header, _, text = path.read_text(encoding="utf-8").partition("\n")
    assert header.startswith("// Kept unchanged below this line for ascend-build's tests: "), path
    return text


def go_function(text: str, signature: str) -> str:
    """The body of the Go function whose ``func`` line starts with ``signature``, up to the next top-level ``}``."""
    start = text.index(signature)
    return text[start:text.index("\n}\n", start) + 2]


def go_constants(text: str) -> Dict[str, str]:
    """Every ``Name = "value"`` string constant of a Go source."""
    import re

    return dict(re.findall(r'^\s*(\w+)\s*=\s*"([^"]*)"', text, re.M))
