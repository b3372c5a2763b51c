"""Which of builder's modules one cell's path goes through, traced (not a timing).

Runs `pipeline.run` on the demo cell's CPU twin through the real engine (as `make demo`
does; the BuildKit cache may be warm) under `sys.setprofile`, and records each call made
from one builder module into another. An image the engine holds sealed already is reused,
a shorter path, and the output says which it was ("built" or "reused"): `docker rmi` the
sealed twin first to trace a build. Prints, for that one cell:

    the distinct cross-module calls (caller -> callee function), the stops they make (the
    modules they enter, in order, one module entered twice in a row counted once), the
    modules, how many stops return to a module the path had already been in, and the
    stops per module.

First, the planning step alone (`prepare.prepare` of the same image, traced the same way):
its distinct cross-module calls, the stops per module, the calls of the knowledge base's
functions, and how many of those come after the cell's facts are resolved
(`builder.images.facts.resolve_facts` returned). ``--plan`` stops there (no engine needed);
``--path`` traces the whole path alone (its first calls then fill the caches, as a run's do).
The modules of ``builder/images/blocks/`` count as one (`AS_ONE`).

Run: .venv/bin/python -m benchmarks.trace_cell_path [--plan | --path]   (the whole path needs `make engine`)
"""

from __future__ import annotations

import collections
import importlib.util
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, NamedTuple, Tuple

from builder.images import image_run, matrix, pipeline
from builder.engine import Engine

ROOT = Path(__file__).resolve().parent.parent

CELL_ID = "cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64"
PACKAGE = str(ROOT / "builder")
# the smoke program runs inside the image; its modules are not the builder's path
OUTSIDE = ("builder/smoke/",)
# The Dockerfile's building blocks count as one module: the plan lists them and render formats
# each through the one interface (`Block.render`), in a loop, not a path a reader follows.
AS_ONE = ("builder.images.blocks",)


def _module(filename: str) -> str:
    if not filename.startswith(PACKAGE) or any(part in filename for part in OUTSIDE):
        return ""
    name = filename[len(str(ROOT)) + 1:-3].replace("/", ".")
    return next((package for package in AS_ONE if name.startswith(package + ".")), name)


# Where a cell's facts come from: the knowledge base, the plan's resolution, the raw cell.
SOURCES = ("builder.knowledge", "builder.images.facts", "builder.images.plan", "builder.images.matrix")


class Trace:
    """What ``run()`` called, from one builder module into another (see `record`)."""

    def __init__(self) -> None:
        self.unique: Dict[Tuple[str, str, str, str], None] = {}  # first occurrence of each, in order
        self.counts: collections.Counter = collections.Counter()  # module.function -> calls (any caller)
        self.after_build: collections.Counter = collections.Counter()  # into SOURCES once the build started
        self.building = False

    def record(self, run) -> None:
        def profile(frame, event, arg):
            if event != "call":
                return
            callee = _module(frame.f_code.co_filename)
            caller_frame = frame.f_back
            caller = _module(caller_frame.f_code.co_filename) if caller_frame else ""
            name = f"{callee}.{frame.f_code.co_name}"
            if callee:
                self.counts[name] += 1
            if not (callee and caller and callee != caller):
                return
            self.unique.setdefault((caller, caller_frame.f_code.co_name, callee, frame.f_code.co_name), None)
            if name == "builder.engine.build":
                self.building = True
            if self.building and callee.startswith(SOURCES):
                self.after_build[name] += 1

        sys.setprofile(profile)
        try:
            run()
        finally:
            sys.setprofile(None)


class Summary(NamedTuple):
    modules: int
    calls: int
    stops: int
    returns: int
    entered: "collections.Counter[str]"  # module -> stops in it


def summary(calls: List[Tuple[str, str, str, str]]) -> Summary:
    """Stops: the modules the unique calls enter, in order, a module entered twice in a row
    counted once; returns: stops at a module an earlier stop already was."""
    stops: List[str] = []
    for _, _, callee, _ in calls:
        if not stops or stops[-1] != callee:
            stops.append(callee)
    returns = sum(1 for i, module in enumerate(stops) if module in stops[:i])
    modules = {m for c in calls for m in (c[0], c[2])}
    return Summary(modules=len(modules), calls=len(calls), stops=len(stops), returns=returns,
                   entered=collections.Counter(stops))


def _options(tmp: str) -> pipeline.Options:
    return pipeline.Options(variants=("cpu",), state_dir=Path(tmp), base_image="local/debian:12",
                            wheelhouse=Path("/opt/wheels") if Path("/opt/wheels").is_dir() else None,
                            ca_bundle=Path("/etc/ssl/certs/ca-certificates.crt"), quiet=True,
                            locks_dir=ROOT / "dockerfiles")


# The planning step's resolution of a cell's facts; calls into the knowledge base after it returns are counted.
RESOLVED = ("builder.images.facts", "resolve_facts")


class PlanningTrace(Trace):
    """What ``prepare`` called, from one builder module into another, and which calls of the
    knowledge base's functions came once the cell's facts were resolved (see `RESOLVED`)."""

    def __init__(self) -> None:
        super().__init__()
        self.resolved = False
        self.asked_after: collections.Counter = collections.Counter()

    def record(self, run) -> None:
        def profile(frame, event, arg):
            callee = _module(frame.f_code.co_filename)
            if event == "return" and (callee, frame.f_code.co_name) == RESOLVED:
                self.resolved = True
            if event != "call" or not callee:
                return
            name = f"{callee}.{frame.f_code.co_name}"
            self.counts[name] += 1
            if self.resolved and callee.startswith("builder.knowledge"):
                self.asked_after[name] += 1
            caller_frame = frame.f_back
            caller = _module(caller_frame.f_code.co_filename) if caller_frame else ""
            if caller and callee != caller:
                self.unique.setdefault((caller, caller_frame.f_code.co_name, callee, frame.f_code.co_name), None)

        sys.setprofile(profile)
        try:
            run()
        finally:
            sys.setprofile(None)


def planning_step(cell: matrix.Cell, options: pipeline.Options) -> Dict[str, object]:
    """Trace `prepare.prepare` of ``cell``'s CPU twin and print what it did (see the module docstring)."""
    from builder.images import prepare

    traced = PlanningTrace()
    traced.record(lambda: prepare.prepare(cell, "cpu", options))
    found = summary(list(traced.unique))
    asked = sum(n for name, n in traced.counts.items() if name.startswith("builder.knowledge"))
    after = sum(traced.asked_after.values())
    print(f"the planning step (prepare): {found.calls} distinct cross-module calls, "
          f"{found.stops} stops in {found.modules} modules, {found.returns} returns to a module it had left")
    for module, count in sorted(found.entered.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {module:40s} {count} stop(s)")
    has_facts = importlib.util.find_spec(RESOLVED[0]) is not None
    print(f"the planning step's calls of the knowledge base's functions: {asked}; after the facts were resolved: "
          + (str(after) if has_facts else f"(no {RESOLVED[0]} module)"))
    return {"calls": found.calls, "entered": found.entered, "asked": asked, "asked_after": after,
            "unique": list(traced.unique)}


def main() -> Dict[str, str]:
    cell = next(c for c in matrix.load(ROOT / "matrix").cells if c.id == CELL_ID)
    if "--path" not in sys.argv[1:]:
        with tempfile.TemporaryDirectory(prefix="ascend-trace-") as tmp:
            planning_step(cell, _options(tmp))
    if "--plan" in sys.argv[1:]:
        return {}
    engine = Engine.connect()
    with tempfile.TemporaryDirectory(prefix="ascend-trace-") as tmp:
        options = _options(tmp)
        outcomes: list = []
        traced = Trace()
        traced.record(lambda: outcomes.extend(pipeline.run([cell], options, engine, lambda line: None)))
    if [o.status for o in outcomes] != ["passed"]:
        raise SystemExit(f"the twin did not pass: {[(o.status, o.message) for o in outcomes]}")
    found = summary(list(traced.unique))
    # an image this engine holds sealed already is reused: a shorter path (`docker rmi` it to trace a build)
    how = "reused, sealed already" if outcomes[0].message == image_run.REUSED else "built"
    print(f"one cell's path ({CELL_ID}, cpu, {how}): {found.calls} distinct cross-module calls, "
          f"{found.stops} stops in {found.modules} modules, {found.returns} returns to a module it had left")
    for module, count in sorted(found.entered.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {module:40s} {count} stop(s)")
    asked = sum(n for name, n in traced.counts.items() if name.startswith("builder.knowledge."))
    print(f"calls of the knowledge base's functions: {asked}; lock inputs derived {traced.counts['builder.images.facts._inputs']} "
          f"time(s), the lock's state {traced.counts['builder.images.lock.status']} time(s)")
    later = ", ".join(f"{name} x{n}" for name, n in sorted(traced.after_build.items())) or "none"
    print(f"once the build started, calls into the knowledge base, the plan or the cell: {later}")
    return {f"one cell's path (traced, {how})": f"{found.stops} stops in {found.modules} modules, "
                                        f"{found.returns} returns; after the build started, "
                                        f"{sum(traced.after_build.values())} calls back into knowledge/plan/cell"}


if __name__ == "__main__":
    main()
