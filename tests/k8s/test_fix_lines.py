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
from builder.node import pull
from builder.registry import ImageInfo


def _only_8_0_rc3(monkeypatch):
    """The registry holds one image, CANN 8.0.RC3, which fits but for the CANN asked for."""
    image = ImageInfo("fits", "sha256:" + "a" * 64, pipeline_labels(cell_8_0_rc3()), "amd64")
    monkeypatch.setattr(pull, "pick", lambda registry, repository, node, wanted, key=None, require="any":
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
