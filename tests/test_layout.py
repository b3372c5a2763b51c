"""The shape of the package, checked: two wings that never import each other, the release
watchers and the trust ground apart from both, one name per module, and the
image's words (label keys, in-image paths, tier names) spelled only in vocabulary.py."""

import ast
import re
from pathlib import Path

import pytest

from builder import vocabulary

BUILDER = Path(__file__).resolve().parent.parent / "builder"
WINGS = ("images", "node")


def modules(folder: Path):
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def imported(path: Path):
    """Every module name an import statement in ``path`` names (top level and inside functions)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def test_both_wings_exist_with_their_rooms():
    assert {p.stem for p in modules(BUILDER / "images")} >= {"matrix", "checks", "render", "stage", "pipeline", "ci_matrix",
                                                             "publish"}
    assert {p.stem for p in modules(BUILDER / "node")} >= {"host", "pull", "doctor", "explain", "record"}
    assert (BUILDER / "registry.py").is_file()  # shared: the node reads, the build wing writes indexes
    assert {p.stem for p in modules(BUILDER / "trust")} >= {"signing", "statements", "attached", "policy"}
    assert {p.stem for p in modules(BUILDER / "releases")} >= {"cann_watch", "release_check", "index"}


def test_no_folder_is_named_like_one_that_tools_skip_and_no_module_name_is_used_twice():
    """pytest, ruff and setuptools skip or treat specially folders named build/dist; two modules of
    one name send a reader (and a traceback) to the wrong file."""
    skipped = {"build", "dist", "venv", "node_modules"}
    assert [p for p in BUILDER.rglob("*") if p.is_dir() and p.name in skipped] == []
    stems = [p.stem for p in modules(BUILDER) if p.stem != "__init__"]
    assert sorted({s for s in stems if stems.count(s) > 1}) == []
    # nor a module named like a package (knowledge/releases.py beside releases/); the command
    # modules of builder/cli are named for the wing they drive, on purpose
    packages = {p.parent.name for p in modules(BUILDER) if p.stem == "__init__"}
    outside_cli = {p.stem for p in modules(BUILDER) if p.parent.name != "cli" and p.stem != p.parent.name}  # smoke/smoke.py: its program
    assert sorted(packages & outside_cli) == []


@pytest.mark.parametrize("wing", WINGS)
def test_a_wing_never_imports_the_other(wing):
    other = "builder." + next(w for w in WINGS if w != wing)
    crossing = [f"{path.relative_to(BUILDER)} imports {name}" for path in modules(BUILDER / wing)
                for name in imported(path) if name == other or name.startswith(other + ".")]
    assert crossing == []


def test_shared_modules_import_neither_wing():
    shared = [p for p in modules(BUILDER) if p.parent in (BUILDER, BUILDER / "smoke", BUILDER / "trust", BUILDER / "releases")]
    assert len(shared) >= 8
    crossing = [f"{path.relative_to(BUILDER)} imports {name}" for path in shared for name in imported(path)
                if name.startswith(("builder.images", "builder.node", "builder.cli"))]
    assert crossing == []


def test_what_images_run_needs_only_the_standard_library_and_shipped_files():
    """smoke.py and the files beside it run in images without ascend-build installed: any
    import of the package must have a fallback to the shipped sibling (ImportError)."""
    shipped = [BUILDER / "smoke" / n for n in vocabulary.SHIPPED_FILES if (BUILDER / "smoke" / n).is_file()]
    shipped += [BUILDER / "versions.py", BUILDER / "vocabulary.py", BUILDER / "smoke" / "doctor_probe.py"]
    for path in shipped:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        guarded = {id(n) for t in ast.walk(tree) if isinstance(t, ast.Try)
                   for n in ast.walk(t) if isinstance(n, (ast.Import, ast.ImportFrom))}
        functions = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
                     for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("builder", "yaml", "packaging")):
                assert id(node) in guarded or id(node) in functions, f"{path.name}:{node.lineno} imports {node.module}"


# The raw spellings vocabulary.py owns.
RAW = re.compile(r"io\.ascend-build\.[a-z]|org\.opencontainers\.image\.[a-z]|/etc/ascend-build|/opt/ascend-build")
# Every tier name of the registry, but those that are other words here too (a package's versions, an
# import, the device): a new tier's name is checked without a change here.
TIER_WORDS = set(vocabulary.tier_names()) - {"versions", "import", "device"}


def spelled(path: Path):
    text = path.read_text(encoding="utf-8")
    for number, line in enumerate(text.splitlines(), 1):
        if RAW.search(line):
            yield f"{path.name}:{number}: {line.strip()}"
    if path.suffix == ".py":
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                    node.value in TIER_WORDS or "versions,libraries" in node.value):
                yield f"{path.name}:{node.lineno}: tier name {node.value!r}"


def test_no_label_key_path_or_tier_name_is_spelled_outside_the_vocabulary():
    files = [p for p in BUILDER.rglob("*") if p.suffix in (".py", ".j2") and p.name != "vocabulary.py"
             and "__pycache__" not in p.parts]
    assert len(files) > 30
    assert [hit for path in files for hit in spelled(path)] == []


def test_the_spelling_check_can_fail(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('KEY = "io.ascend-build.min-driver"\nTIERS = ("versions", "libraries")\n')
    assert list(spelled(sample)) == ["sample.py:1: KEY = \"io.ascend-build.min-driver\"",
                                     "sample.py:2: tier name 'libraries'"]


# --- tests and benchmarks: packages run from the repository root ------------------------------

REPOSITORY = BUILDER.parent


def path_edits_and_test_imports(path: Path):
    """Where ``path`` edits its own sys.path (insert, append, extend, assignment) or imports a
    test module (a program text built for a subprocess is a string, not an edit, and passes)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in sorted(ast.walk(tree), key=lambda n: getattr(n, "lineno", 0)):
        line = getattr(node, "lineno", 0)
        target = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target = node.func.value
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
        if isinstance(target, ast.Attribute) and target.attr == "path" and isinstance(target.value, ast.Name) \
                and target.value.id == "sys":
            yield f"{path.name}:{line}: edits sys.path"
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if isinstance(node, ast.ImportFrom):
                names += [f"{node.module or ''}.{a.name}" for a in node.names]
            if any(part.startswith("test_") or part == "conftest" for name in names for part in name.split(".")):
                yield f"{path.name}:{line}: imports a test module"


def test_no_test_or_benchmark_edits_sys_path_or_imports_a_test_module():
    files = [p for folder in ("tests", "benchmarks") for p in modules(REPOSITORY / folder)]
    assert len(files) > 50
    assert [hit for path in files for hit in path_edits_and_test_imports(path)] == []


def test_the_sys_path_and_test_import_check_can_fail(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("import sys\nsys.path.insert(0, 'x')\nsys.path = []\nimport test_pipeline_e2e as e2e\n"
                      "from tests.images.test_render import x\nfrom tests.images import test_render\n"
                      "PROGRAM = 'import sys; sys.path.insert(0, \"y\")'\nfrom tests.support.pipeline import CELL_ID\n")
    assert list(path_edits_and_test_imports(sample)) == [
        "sample.py:2: edits sys.path", "sample.py:3: edits sys.path", "sample.py:4: imports a test module",
        "sample.py:5: imports a test module", "sample.py:6: imports a test module"]


def test_the_layout_page_names_every_module_of_builder():
    """docs/layout.md is where a newcomer finds which module does what: each module's file name is
    on it (a package's __init__.py aside)."""
    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "layout.md").read_text()
    missing = sorted(str(p.relative_to(root)) for p in (root / "builder").rglob("*.py")
                     if p.name != "__init__.py" and p.name not in page)
    assert missing == [], f"docs/layout.md does not name: {', '.join(missing)}"
