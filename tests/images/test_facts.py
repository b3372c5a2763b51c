"""builder.images.facts: a cell's facts resolved in one pass, as one plain frozen value.

The value holds no knowledge base (walked field by field), hashes the same in every run and
differently when any fact changes, and once it is resolved the planning step asks the
knowledge base nothing (counted with a profile hook, as benchmarks/trace_cell_path.py does).
"""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
from pathlib import Path
from types import MappingProxyType

import pytest

from builder import knowledge
from builder.images import facts, matrix, plan, prepare, render
from builder.images import lock as locking
from builder.images.blocks import CannEnv, CannInstallers
from tests.support.matrix import REPO, SHIPPED_DOCKERFILES, SHIPPED_MATRIX

DEMO = "cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64"
KNOWLEDGE = Path(knowledge.__file__).resolve().parent
# The knowledge base proper: its facade and its parts. The error table (ascend_errors.py, read through
# files.py) is no cell's fact: render ships it into every image, read once per process.
ASKED = {KNOWLEDGE / f"{name}.py" for name in ("__init__", "pairings", "environment", "drivers", "downloads")}
# What the knowledge base is made of: none of it may be inside a cell's facts.
PARTS = (knowledge.KnowledgeBase, knowledge.pairings.Releases, knowledge.environment.Environment,
         knowledge.drivers.Drivers, knowledge.downloads.Downloads)


@pytest.fixture(scope="module")
def kb():
    return knowledge.load()


@pytest.fixture(scope="module")
def cells():
    return matrix.load(SHIPPED_MATRIX).cells


@pytest.fixture(scope="module")
def demo_facts(cells, kb):
    cell = next(c for c in cells if c.id == DEMO)
    lock = locking.read(SHIPPED_DOCKERFILES / DEMO)
    return facts.resolve_facts(cell, kb, lock, digest=render.content_hash(cell, lock))


def not_plain(value, where="facts"):
    """Where ``value`` holds anything but plain values: strings, numbers, None, tuples,
    frozen dataclasses and read-only mappings of them (a cell's ``fields``: where each key was
    written). Returns the paths of the offenders."""
    if isinstance(value, PARTS):
        return [f"{where}: a {type(value).__name__}"]
    if value is None or isinstance(value, (str, int, float, bool)):
        return []
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if not type(value).__dataclass_params__.frozen:  # type: ignore[attr-defined]
            return [f"{where}: {type(value).__name__} is not frozen"]
        return [bad for f in dataclasses.fields(value) for bad in not_plain(getattr(value, f.name), f"{where}.{f.name}")]
    if isinstance(value, tuple):
        return [bad for i, v in enumerate(value) for bad in not_plain(v, f"{where}[{i}]")]
    if isinstance(value, (dict, MappingProxyType)):
        return [bad for k, v in value.items() for bad in not_plain(k, f"{where} key") + not_plain(v, f"{where}[{k!r}]")]
    return [f"{where}: a {type(value).__name__}"]


def test_the_facts_of_every_shipped_cell_hold_no_knowledge_base(cells, kb):
    for cell in cells:
        lock = locking.read(SHIPPED_DOCKERFILES / cell.id)
        assert not_plain(facts.resolve_facts(cell, kb, lock)) == [], cell.id


def test_the_walk_finds_a_knowledge_base_where_one_is_held(demo_facts, kb):
    """The walk above can fail: a value that held the knowledge base (as plan.py's facts did) is found."""
    assert not_plain(dataclasses.replace(demo_facts, os=kb)) == ["facts.os: a KnowledgeBase"]
    assert not_plain(dataclasses.replace(demo_facts, locked=(kb.drivers,))) == ["facts.locked[0]: a Drivers"]
    assert not_plain(dataclasses.replace(demo_facts, installers=[])) == ["facts.installers: a list"]


def test_the_facts_are_frozen_and_hashable(demo_facts):
    with pytest.raises(dataclasses.FrozenInstanceError):
        demo_facts.uv = ""
    assert hash(demo_facts) == hash(dataclasses.replace(demo_facts))
    assert {demo_facts: 1}[dataclasses.replace(demo_facts)] == 1


def test_the_content_hash_is_stable_and_moves_with_any_fact(demo_facts, cells, kb):
    first = demo_facts.content_hash()
    assert len(first) == 16 and first == dataclasses.replace(demo_facts).content_hash()
    again = facts.resolve_facts(demo_facts.cell, kb, demo_facts.lock, digest=demo_facts.digest)
    assert again is not demo_facts and again.content_hash() == first
    # another process (its own hash seed, its own knowledge base) hashes the same facts alike
    code = ("from pathlib import Path; from builder import knowledge; from builder.images import facts, lock, matrix, render; "
            f"c = next(c for c in matrix.load(Path({str(SHIPPED_MATRIX)!r})).cells if c.id == {DEMO!r}); "
            f"k = lock.read(Path({str(SHIPPED_DOCKERFILES / DEMO)!r})); "
            "print(facts.resolve_facts(c, knowledge.load(), k, digest=render.content_hash(c, k)).content_hash())")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == first
    changed = [dataclasses.replace(demo_facts, uv=demo_facts.uv + " "),
               dataclasses.replace(demo_facts, torch="torch==2.13.1+cpu"),
               dataclasses.replace(demo_facts, installers=demo_facts.installers[:1]),
               dataclasses.replace(demo_facts, os=dataclasses.replace(demo_facts.os, codename="trixie")),
               dataclasses.replace(demo_facts, locked=demo_facts.locked[1:]),
               dataclasses.replace(demo_facts, cell=dataclasses.replace(demo_facts.cell, pip=("six==1.16.0",)))]
    hashes = {f.content_hash() for f in changed}
    assert first not in hashes and len(hashes) == len(changed)


def test_a_changed_answer_of_the_knowledge_base_changes_the_facts_but_not_the_digest(demo_facts):
    """The digest (the labels' content hash) is the cell's, its lock's and the templates'; the
    facts' own hash also moves with the knowledge base: a new uv pin is a new plan."""
    files = knowledge.files
    docs = {name: files.read_yaml(knowledge.DATA_DIR / f"{name}.yaml") for name in ("ascend-compat", "os", "conda",
                                                                                      "cann-downloads", "uv")}
    uv = dict(docs["uv"], version="0.0.1")
    other = knowledge.KnowledgeBase(docs["ascend-compat"], files.read_json(knowledge.DATA_DIR / "cann-packages.json"),
                                    docs["os"], docs["conda"], docs["cann-downloads"], uv)
    moved = facts.resolve_facts(demo_facts.cell, other, demo_facts.lock, digest=demo_facts.digest)
    assert moved.uv.startswith("uv==0.0.1 ") and moved.digest == demo_facts.digest
    assert moved.content_hash() != demo_facts.content_hash()


def _knowledge_calls_after_the_facts(run):
    """Run ``run`` under a profile hook; the calls into the knowledge base (`ASKED`) made before
    and after `facts.resolve_facts` first returned, and how many times it returned."""
    counts = {"before": 0, "after": 0, "resolved": 0}
    resolve = facts.resolve_facts.__code__

    def profile(frame, event, arg):
        if event == "return" and frame.f_code is resolve:
            counts["resolved"] += 1
        elif event == "call" and Path(frame.f_code.co_filename).resolve() in ASKED:
            counts["after" if counts["resolved"] else "before"] += 1

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return counts


def test_the_planning_step_asks_the_knowledge_base_nothing_once_the_facts_are_resolved(cells):
    cell = next(c for c in cells if c.id == DEMO)
    options = prepare.Options(variants=("cpu",), locks_dir=SHIPPED_DOCKERFILES, base_image="local/debian:12")
    counts = _knowledge_calls_after_the_facts(lambda: prepare.prepare(cell, "cpu", options))
    assert counts["resolved"] == 1 and counts["before"] > 0  # the one pass asked it
    assert counts["after"] == 0


def test_the_planning_step_asks_neither_the_cell_nor_the_vocabulary_and_stays_within_its_calls(cells, tmp_path, capsys):
    """The cell's derived values are set when it is made, the variants' names are a table, the
    cell's arch is canonical: the planning step calls into neither module but to read the tiers a
    variant owes from the tier registry (`vocabulary.required_tiers`, read when called so that a
    tier added to `SMOKE_TIERS` counts), and its distinct cross-module calls stay at most what
    `benchmarks.trace_cell_path --plan` measured (with the content hash of the rendered context,
    whose error table it reads, and the Dockerfile's building blocks counted as one module)."""
    from benchmarks import trace_cell_path

    cell = next(c for c in cells if c.id == DEMO)
    options = prepare.Options(variants=("cpu",), locks_dir=SHIPPED_DOCKERFILES, base_image="local/debian:12",
                              state_dir=tmp_path)
    found = trace_cell_path.planning_step(cell, options)
    unique, calls = found["unique"], found["calls"]
    assert isinstance(unique, list) and isinstance(calls, int)
    asked = sorted({(callee, name) for _, _, callee, name in unique
                    if callee in ("builder.images.matrix", "builder.vocabulary")})
    assert asked in ([], [("builder.vocabulary", "required_tiers")])
    assert calls <= 27 and found["asked_after"] == 0
    assert "distinct cross-module calls" in capsys.readouterr().out


def test_the_planning_step_enters_each_module_at_most_twice(cells, tmp_path):
    """What a cell needs from a module comes in one call that returns a plain value (the CANN
    release looked up once, the lock's text formatted once): traced as
    `benchmarks.trace_cell_path --plan` traces it, no module is entered more than twice and
    the distinct cross-module calls stay at 27 or fewer."""
    from benchmarks import trace_cell_path

    cell = next(c for c in cells if c.id == DEMO)
    options = prepare.Options(variants=("cpu",), locks_dir=SHIPPED_DOCKERFILES, base_image="local/debian:12",
                              state_dir=tmp_path)
    found = trace_cell_path.planning_step(cell, options)
    entered = found["entered"]
    assert isinstance(entered, dict) and entered  # module -> how many times the path entered it
    assert {module: n for module, n in entered.items() if n > 2} == {}
    assert isinstance(found["calls"], int) and found["calls"] <= 27


def test_rendering_every_shipped_cell_asks_the_knowledge_base_only_while_resolving_its_facts(cells, kb):
    """Each cell's plan, manifests and files are made from its facts: once a cell's facts are
    resolved, nothing until the next cell's resolution calls into the knowledge base."""
    after = []

    def one(cell):
        counts = _knowledge_calls_after_the_facts(
            lambda: render.files(render.resolve(cell, kb, locking.read(SHIPPED_DOCKERFILES / cell.id))))
        after.append((cell.id, counts["resolved"], counts["after"]))

    for cell in cells:
        one(cell)
    assert after == [(cell.id, 1, 0) for cell in cells]


def test_a_plan_holds_the_facts_answers(demo_facts):
    resolved = plan.resolve(demo_facts)
    npu = resolved.plans["npu"]
    assert (resolved.uv, resolved.glibc, resolved.content_hash) == (demo_facts.uv, demo_facts.os.glibc, demo_facts.digest)
    assert [i.filename for i in npu.installers] == [i.filename for i in demo_facts.installers]
    assert npu.block(CannInstallers).referer == demo_facts.download_referer
    assert npu.block(CannEnv).env[0][1] == demo_facts.cann_home
    assert resolved.refs == {v: resolved.ref(v) for v in ("npu", "cpu")}


def test_the_knowledge_base_imports_nothing_that_names_installer_files():
    """builder/installers.py imports the knowledge base; no part of the knowledge base imports
    it back (the circle knowledge <-> installers is gone)."""
    for path in sorted(KNOWLEDGE.glob("*.py")):
        tree = ast.parse(path.read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
        assert not {"builder.installers", "installers"} & imported, path.name
        assert not any(m and m.startswith("builder.images") for m in imported), path.name
