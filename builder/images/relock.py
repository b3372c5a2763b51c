"""`ascend-build lock`: each selected cell's lock made (again) or checked, side by side.

A cell's inputs come from its facts (`facts.resolve_facts`, the one pass over the knowledge
base; nothing here asks it again); `lock.resolve` turns them into a
lock with uv. Cells are resolved a few at a time (each is one uv process, mostly waiting
on the index). A lock that is made again keeps every version that still fits, so a
changed cell moves only what it must.

Example:
    >>> rows = check(cells, knowledge.load(), Path("dockerfiles"))    # doctest: +SKIP
    >>> [(r.cell, r.state) for r in rows][:1]                          # doctest: +SKIP
    [('cann7.0.rc1-910b-ubuntu22.04-py3.9-torch_npu2.1.0rc1-aarch64', 'ok')]
"""

from __future__ import annotations

import contextvars
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

from builder import writes
from builder.images import conda_lock
from builder.images import fetch as fetching
from builder.images import lock as locking
from builder.images.matrix import Cell
from builder.images.facts import CellFacts, conda_channel, resolve_facts
from builder.images.plan import unrecorded
from builder.errors import UserError

JOBS = 4  # uv processes at once: resolving waits on the index far more than on the CPU


@dataclass(frozen=True)
class Row:
    """One cell's lock: its state (ok, incomplete, missing, stale, failed) and what to say."""

    cell: str
    state: str
    detail: str = ""
    changed: bool = False
    unrecorded: Tuple[str, ...] = ()  # CANN installers with no sha256 in the knowledge base or the lock


def _describe(lock: Optional[locking.Lock], state: str) -> str:
    if lock is None or state == "missing":
        return "no lock"
    if state == "stale":
        return "made from other inputs (the cell, its CANN limits, its pins or its conda channel changed)"
    counts = f"{len(lock.entries)} distributions" + (f" and {len(lock.conda.packages)} conda packages"
                                                      if lock.conda is not None and lock.conda.complete else "")
    missing = [f"{e.name}=={e.version} ({e.note})" for e in lock.incomplete]
    missing += [f"the conda part ({lock.conda.note})"] if lock.conda is not None and not lock.conda.complete else []
    if missing:
        return counts + "; without sha256: " + "; ".join(missing)
    return counts + ", every one with its sha256"


def check(cells: Sequence[Cell], kb, out: Path) -> List[Row]:
    """The state of every cell's lock in ``out``, without the network."""
    rows = []
    for cell in cells:
        lock = locking.read(Path(out) / cell.id)
        facts = resolve_facts(cell, kb, lock)
        state = locking.status(lock, facts.inputs)
        rows.append(Row(cell.id, state, _describe(lock, state), unrecorded=unrecorded(facts)))
    return rows


def record_installers(facts: CellFacts, made: locking.Lock, fetch: Callable, say: Callable[[str], None],
                      stopped: Callable[[], bool] = lambda: False) -> Tuple[locking.Lock, Tuple[str, ...]]:
    """Record in the lock the sha256 of each CANN installer published without one, fetching it
    once; a recorded one is kept (later downloads must match it, never replace it). Returns the
    lock and the installers still without a hash (their server did not answer). Once ``stopped()``
    (Ctrl-C), no further installer is fetched: the one under way ends, the next (GBs) never starts."""
    cell = facts.cell
    if cell.cann_source != "installer":
        return made, ()
    recorded, missing = dict(made.installers), []
    for item in facts.installers:
        if item.sha256 or item.filename in recorded or dict(cell.sha256).get(item.filename):
            continue
        if stopped():
            break
        try:
            recorded[item.filename], size = fetch(item.url, referer=facts.download_referer)
            say(f"[{cell.id}] recorded {item.filename}: {size} bytes, sha256 {recorded[item.filename]}")
        except UserError as exc:
            say(f"[{cell.id}] {item.filename} not recorded: {exc.message}")
            missing.append(item.filename)
    return replace(made, installers=tuple(sorted(recorded.items()))), tuple(missing)


def run(cells: Sequence[Cell], kb, out: Path, *, wheelhouse: Optional[Path] = None, index_url: Optional[str] = None,
        jobs: int = JOBS, say: Callable[[str], None] = lambda line: None,
        resolve: Callable = locking.resolve, fetch: Callable = fetching.sha256_of_url,
        resolve_conda: Callable = conda_lock.resolve) -> List[Row]:
    """Resolve each cell whose lock is not ok and write it to ``out/<cell>/``; a cell that
    fails does not stop the others. Returns a row per cell, in the matrix's order.

    A conda cell's lock gets its conda part too (``resolve_conda``, py-rattler), solved
    against ``mirrors.conda_channel`` as given (a token in it reaches the solver only).
    Once stopped (Ctrl-C, SIGTERM), a cell whose uv (or installer download) ends afterwards
    downloads no installer and writes no lock; cells not started yet never start."""

    def one(cell: Cell) -> Row:
        folder = Path(out) / cell.id
        previous = locking.read(folder)
        facts = resolve_facts(cell, kb, previous)
        inputs = facts.inputs
        if previous is not None and locking.status(previous, inputs) == "ok":  # nothing to resolve; its notes may be new
            made = replace(previous, unpinned=facts.unpinned)
        else:
            say(f"[{cell.id}] resolving for {inputs.platform}, Python {inputs.python}")
            try:
                made = replace(resolve(inputs, wheelhouse=wheelhouse, index_url=index_url, previous=previous),
                               unpinned=facts.unpinned, installers=previous.installers if previous else ())
                if inputs.conda:
                    made = replace(made, conda=resolve_conda(conda_channel(cell), cell.python, cell.arch, facts.os.glibc))
            except UserError as exc:
                return Row(cell.id, "failed", exc.message)
        if stopped.is_set():  # Ctrl-C or SIGTERM came while uv ran: no installer is downloaded to be thrown away
            return Row(cell.id, "failed", "stopped before its lock was written")
        made, missing = record_installers(facts, made, fetch, say, stopped.is_set)
        if stopped.is_set():  # ... or while they downloaded: a stopped run writes nothing more
            return Row(cell.id, "failed", "stopped before its lock was written")
        if previous is not None and previous.text() == made.text():
            return Row(cell.id, locking.status(made, inputs), _describe(made, locking.status(made, inputs)),
                       unrecorded=missing)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise writes.write_error(exc, folder) from None
        writes.replace_file(folder / locking.LOCK_FILE, made.text().encode())  # never a half-written lock
        state = locking.status(made, inputs)
        return Row(cell.id, state, _describe(made, state), changed=previous is None or previous.text() != made.text(),
                   unrecorded=missing)

    if resolve is locking.resolve:
        locking.uv_command()  # find uv (or say it is missing) once, before the threads
    stopped = threading.Event()
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        # each cell in a copy of this thread's context: the run's flags (`commands.given`) reach
        # the fix lines built in the workers, which start with an empty one
        contexts = [contextvars.copy_context() for _ in cells]
        try:
            return list(pool.map(lambda context, cell: context.run(one, cell), contexts, cells))
        except BaseException:
            stopped.set()
            pool.shutdown(wait=False, cancel_futures=True)  # the cells not started yet never start
            raise
