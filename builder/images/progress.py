"""Build progress as one count over the whole build: ``step 5/11`` across every stage.

BuildKit numbers the steps of each stage apart (``[os 1/2]``, ``[uv 1/1]``, ``[stage-3 1/7]``),
so its own numbers restart with every stage. The Dockerfile says how many steps each stage
has and which stages the image needs (`stage_steps`); `Progress` turns a BuildKit line into
the step's place among all of them.

BuildKit's count, as it prints it: a stage's ``FROM`` of an image is a step (``FROM scratch``
and ``FROM`` another stage are not), and so is each ``RUN``, ``COPY`` and ``ADD``; a stage
without ``AS`` is called ``stage-N`` (N its place, from 0).

Example:
    >>> text = "FROM scratch AS w\\nCOPY a /\\nFROM debian AS os\\nRUN x\\nFROM os\\nCOPY --from=w / /\\nRUN y\\n"
    >>> stage_steps(text)
    {'w': 1, 'os': 2, 'stage-2': 2}
    >>> said = []
    >>> show = Progress("c", said.append, False, text)
    >>> for line in ("#4 [os 1/2] FROM debian", "#5 [w 1/1] COPY a /", "#6 [stage-2 2/2] RUN y"):
    ...     show(line)
    >>> said
    ['[c] step 2/5 FROM debian', '[c] step 1/5 COPY a /', '[c] step 5/5 RUN y']
"""

from __future__ import annotations

import re
from typing import Callable, Dict, List, Optional, Set, Tuple

_FROM = re.compile(r"^FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?\s*$", re.IGNORECASE)
_STEP = re.compile(r"^(RUN|COPY|ADD)\s", re.IGNORECASE)
_USES = re.compile(r"--from=([^\s,]+)|[\s,]from=([^\s,]+)")


def _instructions(text: str) -> List[str]:
    """The Dockerfile's instructions, continuation lines joined, comments and blank lines left out."""
    out: List[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        out.append(current + line)
        current = ""
    if current:
        out.append(current)
    return out


def stage_steps(text: str) -> Dict[str, int]:
    """Each stage the last one needs (itself included), in the Dockerfile's order, with its
    number of steps as BuildKit counts them."""
    stages: List[Tuple[str, int, Set[str]]] = []  # name, steps, stages it uses
    for line in _instructions(text):
        found = _FROM.match(line)
        if found:
            source, alias = found.group(1), found.group(2)
            name = alias or f"stage-{len(stages)}"
            known = {n for n, _, _ in stages}
            own_image = source.lower() != "scratch" and source not in known
            stages.append((name, 1 if own_image else 0, {source} & known))
        elif stages:
            name, steps, uses = stages[-1]
            uses = uses | {a or b for a, b in _USES.findall(line)}
            stages[-1] = (name, steps + (1 if _STEP.match(line) else 0), uses)
    if not stages:
        return {}
    by_name = {name: uses for name, _, uses in stages}
    needed, todo = set(), [stages[-1][0]]
    while todo:
        name = todo.pop()
        if name in needed or name not in by_name:
            continue
        needed.add(name)
        todo.extend(by_name[name])
    return {name: steps for name, steps, _ in stages if name in needed}


class Progress:
    """Turns BuildKit's plain output into one line per step, counted over the whole build
    (``[cell] step 5/11 RUN ...``); without a Dockerfile's count (``dockerfile`` ""), or for a
    stage it does not know, BuildKit's own per-stage numbers."""

    STEP = re.compile(r"^#\d+ \[(?:([\w.-]+) )?(\d+)/(\d+)\] (.*)$")

    def __init__(self, name: str, say: Callable[[str], None], quiet: bool, dockerfile: str = ""):
        self.name, self.say, self.quiet = name, say, quiet
        self.seen: Set[Tuple[Optional[str], str]] = set()
        steps = stage_steps(dockerfile) if dockerfile else {}
        self.total = sum(steps.values())
        self.offset: Dict[str, int] = {}  # steps of the stages before each one
        running = 0
        for stage, count in steps.items():
            self.offset[stage] = running
            running += count

    def __call__(self, line: str) -> None:
        match = self.STEP.match(line)
        if not match or self.quiet:
            return
        stage, number, of, text = match.group(1), int(match.group(2)), match.group(3), match.group(4)
        if stage is None and len(self.offset) == 1:  # a one-stage build: BuildKit names no stage
            stage = next(iter(self.offset))
        if (stage, str(number)) in self.seen:
            return
        self.seen.add((stage, str(number)))
        where = (f"{self.offset[stage] + number}/{self.total}" if stage in self.offset
                 else f"{number}/{of}")
        self.say(f"[{self.name}] step {where} {' '.join(text.split())[:100]}")
