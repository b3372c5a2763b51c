"""Every GitHub Actions workflow is schema-valid and has no high-severity zizmor finding.

Both tools come from PyPI through the ``test`` extra (check-jsonschema, zizmor) and
run offline: check-jsonschema vendors its builtin schemas (``--builtin-schema
vendor.github-workflows`` reads a file inside the package) and ``zizmor --offline``
skips the audits that query GitHub. The tests prove it by running them with no way
out: in a network namespace of their own when the kernel allows one (``unshare
-rn``), and always with every proxy variable pointing at a closed local port.

A missing tool fails these tests, never skips them: `pip install -e '.[test]'`.
Each tool is also fed a known-bad workflow, so a tool that silently checks nothing
cannot pass.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

REPO = Path(__file__).resolve().parent.parent
WORKFLOW_DIR = REPO / ".github" / "workflows"
WORKFLOWS = sorted([*WORKFLOW_DIR.glob("*.yml"), *WORKFLOW_DIR.glob("*.yaml")])
DEAD_PROXY = "http://127.0.0.1:9"  # the discard port: nothing listens, every request fails fast

BAD_WORKFLOW = """\
name: bad
on:
  issues:
jobs:
  greet:
    runs-on: ubuntu-24.04
    steps:
      - uses: actions/checkout@v4
      - run: echo "${{ github.event.issue.title }}"
"""


def tool(name: str) -> str:
    """The tool from this interpreter's environment (the venv), else from PATH; fail if absent."""
    beside = Path(sys.executable).with_name(name)
    found = str(beside) if beside.exists() else shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not installed: run `.venv/bin/pip install -e '.[test]'` "
                    f"(it is in pyproject.toml's test extra)")
    return found


@functools.lru_cache(maxsize=1)
def _no_network_prefix() -> tuple:
    """``unshare -rn`` when this kernel lets an unprivileged user make a network namespace."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-rn", "true"], capture_output=True).returncode == 0:
        return (unshare, "-rn")
    return ()


def offline(cmd: List[str], cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        env[var] = DEAD_PROXY
    for var in ("NO_PROXY", "no_proxy", "GH_TOKEN", "GITHUB_TOKEN", "ZIZMOR_GITHUB_TOKEN"):
        env.pop(var, None)
    return subprocess.run([*_no_network_prefix(), *cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def high_findings(stdout: str, stderr: str) -> List[str]:
    try:
        findings = json.loads(stdout)
    except json.JSONDecodeError:
        pytest.fail(f"zizmor printed no JSON:\nstdout: {stdout[:2000]}\nstderr: {stderr[-2000:]}")
    out = []
    for f in findings:
        if f.get("determinations", {}).get("severity") == "High" and not f.get("ignored"):
            where = [f"{loc['symbolic']['key'].get('Local', {}).get('verbatim_path', '?')}:"
                     f"{loc['concrete']['location']['start_point']['row'] + 1}"
                     for loc in f.get("locations", [])]
            out.append(f"{f['ident']}: {f.get('desc', '')} at {', '.join(where)}")
    return out


def test_the_workflows_exist():
    names = {p.name for p in WORKFLOWS}
    assert {"ci.yml", "images.yml", "release-watch.yml"} <= names


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_matches_the_github_schema(workflow: Path):
    proc = offline([tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(workflow)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ok -- validation done" in proc.stdout


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_has_no_high_severity_zizmor_finding(workflow: Path):
    proc = offline([tool("zizmor"), "--offline", "--format", "json", str(workflow.relative_to(REPO))])
    # Exit codes 10-14 mean "findings" (by the worst severity); anything else non-zero is a failure to run.
    assert proc.returncode == 0 or 10 <= proc.returncode <= 14, proc.stderr
    assert high_findings(proc.stdout, proc.stderr) == []


def test_the_checks_catch_a_bad_workflow(tmp_path: Path):
    """The same commands fail on a workflow with an unpinned action and a template injection,
    and on one that breaks the schema: neither tool is silently checking nothing."""
    folder = tmp_path / ".github" / "workflows"
    folder.mkdir(parents=True)
    bad = folder / "bad.yml"
    bad.write_text(BAD_WORKFLOW)
    proc = offline([tool("zizmor"), "--offline", "--format", "json", ".github/workflows/bad.yml"], cwd=tmp_path)
    found = high_findings(proc.stdout, proc.stderr)
    assert any(f.startswith("template-injection") for f in found), found
    assert any(f.startswith("unpinned-uses") for f in found), found

    broken = folder / "broken.yml"
    broken.write_text("name: broken\non: push\njobs:\n  x:\n    runs-on: ubuntu-24.04\n    steps: not-a-list\n")
    proc = offline([tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(broken)])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "steps" in proc.stdout + proc.stderr


def test_actions_are_pinned_and_credentials_not_persisted():
    """What the zizmor regular persona does not insist on, this project does: every action
    pinned by a full commit SHA with a version comment, and no checkout keeps its token."""
    import re

    import yaml

    for workflow in WORKFLOWS:
        text = workflow.read_text()
        for line in text.splitlines():
            match = re.search(r"uses:\s*(\S+)", line)
            if match and not match.group(1).startswith("./"):
                assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", match.group(1)), f"{workflow.name}: {line.strip()}"
                assert re.search(r"#\s*v\d", line), f"{workflow.name}: no version comment: {line.strip()}"
        doc = yaml.safe_load(text)
        for job_id, job in doc["jobs"].items():
            for step in job.get("steps", []):
                if str(step.get("uses", "")).startswith("actions/checkout@"):
                    assert step.get("with", {}).get("persist-credentials") is False, f"{workflow.name}:{job_id}"


def expressions_in_run_steps(workflow: dict) -> List[str]:
    """Every step whose ``run:`` holds a ``${{ ... }}`` expression: GitHub pastes its value into
    the script before the shell reads it, so a branch name or an issue title becomes code.
    Values reach a script through ``env:`` instead, as shell variables."""
    found = []
    for job_id, job in (workflow.get("jobs") or {}).items():
        for number, step in enumerate(job.get("steps") or [], 1):
            if isinstance(step, dict) and "${{" in str(step.get("run", "")):
                found.append(f"{job_id} step {number} ({step.get('name', 'unnamed')})")
    return found


def test_no_run_step_holds_an_expression():
    import yaml

    found = [f"{workflow.name}: {where}" for workflow in WORKFLOWS
             for where in expressions_in_run_steps(yaml.safe_load(workflow.read_text()))]
    assert found == [], "pass the value through the step's env: and use it as a shell variable"


def test_the_run_step_check_catches_an_expression():
    import yaml

    assert expressions_in_run_steps(yaml.safe_load(BAD_WORKFLOW)) == ["greet step 2 (unnamed)"]
