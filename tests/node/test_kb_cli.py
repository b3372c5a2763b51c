"""`ascend-build kb` as a new user reads it: tables, a listing when run alone, hints that lead somewhere (issue 26)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from builder import knowledge
from builder.cli import kb

CLI = str(Path(sys.executable).with_name("ascend-build"))


def run(*args):
    return subprocess.run([CLI, "kb", *args], capture_output=True, text=True, timeout=120)


def test_kb_alone_lists_the_cann_and_torch_npu_releases_and_the_chips():
    done = run()
    assert done.returncode == 0, done.stderr
    kb_data = knowledge.load()
    text = done.stdout
    found = re.search(r"^cann_releases: (.*?)^torch_npu_releases:", text, re.S | re.M)
    assert found, text
    listed = found.group(1)
    assert [v.strip() for v in listed.replace("\n", " ").split(",")] == kb_data.releases.cann_releases()
    assert "2.4.0" in text.split("torch_npu_releases:")[1].split("chips:")[0]
    assert re.search(r"^  a3    8\.1\.RC1$", text, re.M)  # the chips as a table, with their first CANN
    assert "ascend-build kb cann VERSION" in text
    assert max(len(line) for line in text.splitlines()) <= kb.WIDTH
    data = json.loads(run("--json").stdout)
    assert data["torch_npu_releases"] == kb_data.releases.torch_npu_versions() and data["arches"] == ["x86_64", "aarch64"]


def test_kb_cann_prints_its_installers_as_a_table():
    done = run("cann", "8.0.RC3")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= kb.WIDTH  # was one 2,500-character line
    at = lines.index("installers (x86_64):")
    assert lines[at + 1].split() == ["kind", "chip", "filename", "sha256"]
    assert lines[at + 2].split()[:3] == ["toolkit", "-", "Ascend-cann-toolkit_8.0.RC3_linux-x86_64.zip"]
    assert any(line.split()[:2] == ["ops", "910b"] for line in lines[at:])
    assert "(--json shows the full sha256 and the download URLs)" in lines
    full = json.loads(run("cann", "8.0.RC3", "--json").stdout)["installers"]["x86_64"][0]
    assert lines[at + 2].split()[3] == full["sha256"][:16] + "..." and full["url"].startswith("https://")


def test_kb_torch_npu_unknown_points_to_a_command_that_lists_the_releases():
    done = run("torch-npu", "9.9.9")
    assert done.returncode == 1 and "torch_npu 9.9.9 is not a known release" in done.stderr
    newest = knowledge.load().releases.torch_npu_versions()[-1]
    assert newest in done.stderr and "`ascend-build kb` lists them all" in done.stderr
    assert "torch_npu_releases:" in run().stdout  # the command named lists them
