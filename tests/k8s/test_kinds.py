"""The job kinds' table (`builder.k8s.kinds`): the command line reads it alone, so a kind added
there is one `k8s job` knows (its name, its check, one pod or several) with no other edit."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from builder.cli import app
from builder.errors import UserError
from builder.k8s import kinds
from tests.support.k8s import spec_for


@pytest.fixture
def throwaway(monkeypatch):
    """A kind of this test's own, one pod, refusing every command it is given (its check)."""
    def refuse(command, nodes, variant, npus):
        raise UserError(f"the throwaway kind refuses {' '.join(command)}", fix="use another kind")

    extra = kinds.JobKind("throwaway", "a test's own kind", True,
                          build=lambda name, spec, nodes, annotations: {"kind": "Throwaway", "pods": nodes},
                          header=lambda name, spec: [f"throwaway {name}"], check=refuse)
    monkeypatch.setitem(kinds.KINDS, "throwaway", extra)
    return extra


def test_a_kind_added_to_the_table_is_one_k8s_job_knows(throwaway):
    assert kinds.kind("throwaway") is throwaway and "throwaway: a test's own kind over --nodes-count nodes" \
        in kinds.help_text()
    assert throwaway.build("n", spec_for("24.1.RC3"), 3, {}) == {"kind": "Throwaway", "pods": 3}
    done = CliRunner().invoke(app, ["k8s", "job", "--registry", "127.0.0.1:9/r", "--npus", "8", "--kind", "throwaway",
                                    "--nodes-count", "2", "--", "python", "train.py"])
    # accepted as a kind of several pods (no --kind or --nodes-count refusal): its own check speaks, before
    # any registry is asked
    assert isinstance(done.exception, UserError) and done.exception.message == "the throwaway kind refuses python train.py"


def test_an_unknown_kind_and_a_count_for_a_one_pod_kind_are_refused_from_the_table():
    with pytest.raises(UserError) as unknown:
        kinds.kind("deployment")
    assert unknown.value.message == "--kind 'deployment' is none of job, volcano, ascendjob"
    with pytest.raises(UserError) as count:
        kinds.check_count(kinds.kind("job"), 2)
    assert count.value.message == "--nodes-count is for --kind volcano or ascendjob (a batch/v1 Job here runs one pod)"
    assert count.value.fix == "add --kind volcano (or ascendjob), or leave --nodes-count out"
    kinds.check_count(kinds.kind("volcano"), 3)  # several pods: its business
