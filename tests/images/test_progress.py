"""Build progress counts its steps over the whole build, not again from 1 in every stage (issue 32).

The lines are BuildKit's own, as a build of the shipped Debian 12 cell's CPU twin printed them
(one stage after another, and the final stage's steps interleaved with the uv stage's)."""

from __future__ import annotations

import re

from tests.support.matrix import SHIPPED_DOCKERFILES

from builder.images import progress

CELL = "cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64"
BUILDKIT = """\
#4 [os 1/2] FROM docker.io/local/debian:12
#8 [wheelhouse 1/1] COPY wheelhous[e] /
#5 [os 2/2] RUN --mount=type=secret,id=buildenv --mount=type=secret,id=ca     if [ -s /run/secrets/buildenv ]
#9 [uv 1/1] RUN --mount=type=secret,id=buildenv --mount=type=secret,id=ca     --mount=type=bind,from=wheelhouse
#6 [stage-3 1/7] RUN python3 -m venv /opt/venv
#9 [uv 1/1] RUN --mount=type=secret,id=buildenv --mount=type=secret,id=ca     --mount=type=bind,from=wheelhouse
#10 [stage-3 2/7] RUN --mount=type=secret,id=buildenv --mount=type=secret,id=ca --mount=type=bind,from=wheelhouse
#11 [stage-3 3/7] COPY smoke.py parsers.py error_table.py versions.py vocabulary.py errors.json /opt/ascend-build/
#12 [stage-3 4/7] COPY --chmod=0755 driver_guard.py /opt/ascend-build/
#13 [stage-3 5/7] RUN ln -s /opt/ascend-build/driver_guard.py /usr/local/bin/ascend-driver-guard
#14 [stage-3 6/7] COPY manifest.cpu.json /etc/ascend-build/manifest.json
#15 [stage-3 7/7] COPY requirements.lock /etc/ascend-build/requirements.lock
"""


def test_the_step_count_runs_over_every_stage_of_the_build():
    dockerfile = (SHIPPED_DOCKERFILES / CELL / "Dockerfile.cpu").read_text()
    said: list = []
    show = progress.Progress(f"{CELL}-cpu", said.append, False, dockerfile)
    for line in BUILDKIT.splitlines():
        show(line)
    counts = [m.groups() for m in (re.search(r"\] step (\d+)/(\d+) ", line) for line in said) if m]
    assert len(counts) == len(said)
    assert {total for _, total in counts} == {"11"}  # one total, the whole build's
    assert sorted(int(n) for n, _ in counts) == list(range(1, 12))  # each step once, none restarted
    assert said[-1] == f"[{CELL}-cpu] step 11/11 COPY requirements.lock /etc/ascend-build/requirements.lock"


def test_a_stage_the_image_does_not_need_is_not_counted():
    text = "FROM scratch AS spare\nCOPY x /\nFROM debian AS os\nRUN a\nFROM os\nRUN b\n"
    assert progress.stage_steps(text) == {"os": 2, "stage-2": 1}


def test_quiet_says_nothing():
    said: list = []
    progress.Progress("c", said.append, True, "FROM debian\nRUN a\n")("#5 [1/2] RUN a")
    assert said == []
