"""The retry a refusal suggests carries the run's own flags (issue 32): `k8s job` keeps --registry,
--npus, --nodes and the command after ``--``; `pull` keeps --registry. The registry is stood in
for by the choice itself (`builder.node.pull.pick`), so no engine is needed."""

from __future__ import annotations

import shlex

from typer.testing import CliRunner
from tests.support.images import cell_8_0_rc3, pipeline_labels
from tests.support.k8s import POOL_910B
from tests.support.node import SMI_910B3, make_node

from builder import cli
from builder.errors import UserError
from builder.node import pull
from builder.registry import ImageInfo


def _only_8_0_rc3(monkeypatch):
    """The registry holds one image, CANN 8.0.RC3, which fits but for the CANN asked for."""
    image = ImageInfo("fits", "sha256:" + "a" * 64, pipeline_labels(cell_8_0_rc3()), "amd64")
    monkeypatch.setattr(pull, "pick", lambda registry, repository, node, wanted, key=None, require="any", verdicts=None:
                        (None, [(image, [f"CANN 8.0.RC3, not {wanted.cann}"])]))


def _retry(stderr: str, head: str) -> list:
    line = next(line for line in stderr.splitlines() if "another CANN fits" in line)
    return shlex.split(line[line.index(f"({head}") + 1:line.rindex(")")])


def test_k8s_job_retry_keeps_registry_npus_nodes_and_the_command(monkeypatch):
    _only_8_0_rc3(monkeypatch)
    result = CliRunner().invoke(cli.app, ["k8s", "job", "--registry", "r.example:5000/team/pt", "--cann", "8.5.0",
                                          "--npus", "8", "--nodes", str(POOL_910B), "--",
                                          "torchrun", "--nproc_per_node", "8", "train.py"])
    assert result.exit_code == 1, result.output
    assert _retry(result.stderr, "ascend-build k8s job") == [
        "ascend-build", "k8s", "job", "--registry", "r.example:5000/team/pt", "--npus", "8", "--nodes", str(POOL_910B),
        "--cann", "8.0.RC3", "--", "torchrun", "--nproc_per_node", "8", "train.py"]


def test_pull_retry_keeps_the_registry(monkeypatch, tmp_path):
    _only_8_0_rc3(monkeypatch)
    root = make_node(tmp_path / "node", arch="x86_64", smi=SMI_910B3)
    result = CliRunner().invoke(cli.app, ["pull", "--registry", "r.example:5000/team/pt", "--cann", "8.5.0",
                                          "--root", str(root)])
    assert result.exit_code == 1, result.output
    assert _retry(result.stderr, "ascend-build pull") == [
        "ascend-build", "pull", "--registry", "r.example:5000/team/pt", "--root", str(root), "--cann", "8.0.RC3"]


# --- k8s job --variant cpu: a manifest on day one, before any NPU image exists ----------------


def test_k8s_job_variant_cpu_prints_a_manifest_of_the_twin_with_no_npu_and_no_driver_mount(monkeypatch):
    import yaml

    from builder.vocabulary import CPU
    from tests.support.k8s import validate_k8s

    labels = {**pipeline_labels(cell_8_0_rc3(), variant=CPU), "io.ascend-build.arch": "x86_64"}
    labels.pop("io.ascend-build.chip", None)
    twin = ImageInfo("twin", "sha256:" + "c" * 64, labels, "amd64")
    asked = []

    def pick(registry, repository, node, wanted, key=None, require="any", verdicts=None):
        asked.append(wanted.variant)
        return (twin, []) if not pull.why_not(twin, node, wanted) else (None, [(twin, pull.why_not(twin, node, wanted))])

    monkeypatch.setattr(pull, "pick", pick)
    monkeypatch.setattr("builder.cli.k8s_choice.host_arch", lambda: "x86_64")
    result = CliRunner().invoke(cli.app, ["k8s", "job", "--registry", "r.example:5000/team/pt", "--variant", "cpu",
                                          "--", "python", "train.py"])
    assert result.exit_code == 0, result.output
    assert asked == [CPU]
    manifest = yaml.safe_load(result.stdout)
    validate_k8s(manifest)
    spec = manifest["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert container["image"] == "r.example:5000/team/pt@sha256:" + "c" * 64
    assert "resources" not in container  # no NPU asked for
    assert [v["name"] for v in spec["volumes"]] == ["dshm"]  # no driver file mounted, only /dev/shm
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]
    assert "# the CPU twin: no NPU asked for" in result.stdout


def test_k8s_job_without_npus_for_the_npu_image_says_what_to_add():
    result = CliRunner().invoke(cli.app, ["k8s", "job", "--registry", "r.example:5000/team/pt", "--", "python", "t.py"])
    error = result.exception
    assert isinstance(error, UserError) and error.exit_code == 2  # a usage error, printed by the CLI's main
    assert "--npus is needed" in error.message and "--variant cpu" in error.fix


def test_k8s_job_variant_cpu_retry_names_the_twins_cann_and_keeps_variant(monkeypatch):
    """A twin has no CANN label (its cell id names it): the retry still finds the CANN that fits."""
    from builder.vocabulary import CPU

    labels = {**pipeline_labels(cell_8_0_rc3(), variant=CPU), "io.ascend-build.arch": "x86_64"}
    labels.pop("io.ascend-build.cann", None)
    twin = ImageInfo(f"{cell_8_0_rc3().id}-cpu", "sha256:" + "c" * 64, labels, "amd64")
    monkeypatch.setattr(pull, "pick", lambda registry, repository, node, wanted, key=None, require="any", verdicts=None:
                        (None, [(twin, pull.why_not(twin, node, wanted))]))
    monkeypatch.setattr("builder.cli.k8s_choice.host_arch", lambda: "x86_64")
    result = CliRunner().invoke(cli.app, ["k8s", "job", "--registry", "r:5000/pt", "--variant", "cpu", "--cann", "8.5.0",
                                          "--", "python", "t.py"])
    assert result.exit_code == 1, result.output
    assert _retry(result.stderr, "ascend-build k8s job") == [
        "ascend-build", "k8s", "job", "--registry", "r:5000/pt", "--npus", "1", "--variant", "cpu", "--cann", "8.0.RC3",
        "--", "python", "t.py"]
