"""builder.images.matrix: the matrix format and its schema.

Every YAML below is written by the test itself, so each expected line and column is
read off the text right above it.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from builder.images import matrix
from builder.errors import Location, UserError
from tests.support.matrix import VALID, load_text, where, write_cells
from tests.support.promptly import refused_promptly


def _yaml(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


# --- defaults, expansion, ids -------------------------------------------------------


def test_defaults_merge_mappings_key_wise_and_scalars_override(tmp_path):
    m = load_text(tmp_path, _yaml("""
        defaults:
          os: ubuntu22.04
          arch: x86_64
          chip: 910b
          python: "3.9"
          env_vars: {A: "1", B: "2"}
          mirrors: {pip_index: "http://127.0.0.1:3141/simple", apt: "http://127.0.0.1:3142/ubuntu"}
          sha256: {one.run: "%s", two.run: "%s"}
        cells:
          - cann: 8.0.RC3
            torch_npu: 2.4.0
            python: "3.10"
            env_vars: {B: "3", C: "4"}
            mirrors: {apt: "http://127.0.0.1:9999/ubuntu"}
            sha256: {two.run: "%s"}
          - cann: 8.0.RC3
            torch_npu: 2.4.0
        """) % ("a" * 64, "b" * 64, "c" * 64))
    assert m.findings == []
    first, second = m.cells
    assert first.python == "3.10"  # scalar: the cell wins
    assert first.env_vars == (("A", "1"), ("B", "3"), ("C", "4"))
    assert first.mirrors == (("apt", "http://127.0.0.1:9999/ubuntu"), ("pip_index", "http://127.0.0.1:3141/simple"))
    assert first.sha256 == (("one.run", "a" * 64), ("two.run", "c" * 64))
    # a cell that says nothing gets the defaults unchanged
    assert second.python == "3.9"
    assert second.env_vars == (("A", "1"), ("B", "2"))
    assert second.sha256 == (("one.run", "a" * 64), ("two.run", "b" * 64))
    # a merged mapping points at the cell's own key; a default at the defaults line
    assert first.locate("env_vars") == ("cells[0].env_vars", Location(str(tmp_path / "matrix.yaml"), 13, 15))
    assert second.locate("python") == ("defaults.python", Location(str(tmp_path / "matrix.yaml"), 5, 11))


def test_arch_and_chip_lists_expand_in_order(tmp_path):
    m = load_text(tmp_path, _yaml("""
        cells:
          - os: ubuntu22.04
            arch: [aarch64, x86_64]
            chip: [910b, a3]
            cann: 8.5.0
            python: "3.11"
            torch_npu: 2.8.0.post2
          - name: mine
            os: ubuntu22.04
            arch: [aarch64, x86_64]
            chip: 910b
            cann: 8.5.0
            python: "3.11"
            torch_npu: 2.8.0.post2
        """))
    assert m.findings == []
    assert [c.id for c in m.cells] == [
        "cann8.5.0-910b-ubuntu22.04-py3.11-torch_npu2.8.0.post2-aarch64",
        "cann8.5.0-a3-ubuntu22.04-py3.11-torch_npu2.8.0.post2-aarch64",
        "cann8.5.0-910b-ubuntu22.04-py3.11-torch_npu2.8.0.post2-x86_64",
        "cann8.5.0-a3-ubuntu22.04-py3.11-torch_npu2.8.0.post2-x86_64",
        "mine-910b-aarch64",
        "mine-910b-x86_64",
    ]
    assert [(c.arch, c.chip) for c in m.cells[:4]] == [
        ("aarch64", "910b"), ("aarch64", "a3"), ("x86_64", "910b"), ("x86_64", "a3")]
    assert all(where(c).line == 2 for c in m.cells[:4])


def test_a_named_single_cell_keeps_its_name(tmp_path):
    path, lines = write_cells(tmp_path, {"name": "my-cell", **VALID})
    m = matrix.load(path)
    assert [c.id for c in m.cells] == ["my-cell"]
    assert m.cells[0].ref == "ascend-build/pytorch:my-cell"
    _, named = m.cells[0].locate("name")
    assert named and named.line == lines[(0, "name")] == 2


def test_derived_id():
    assert matrix.derive_id("7.0.RC1", "910b", "ubuntu22.04", "3.9", "2.1.0rc1", "aarch64") == \
        "cann7.0.rc1-910b-ubuntu22.04-py3.9-torch_npu2.1.0rc1-aarch64"
    # a tag has no '+': a local version label becomes '_'
    assert matrix.derive_id("8.0.RC3", "a3", "debian12", "3.11", "2.4.0+abc", "x86_64") == \
        "cann8.0.rc3-a3-debian12-py3.11-torch_npu2.4.0_abc-x86_64"


def test_image_repository_sets_the_ref(tmp_path):
    m = load_text(tmp_path, _yaml("""
        image: registry.local:5000/team/ascend
        cells:
          - {os: ubuntu22.04, arch: x86_64, chip: 910b, cann: 8.0.RC3, python: "3.10", torch_npu: 2.4.0}
        """))
    assert m.findings == []
    assert m.cells[0].ref == "registry.local:5000/team/ascend:cann8.0.rc3-910b-ubuntu22.04-py3.10-torch_npu2.4.0-x86_64"


# --- completion from the knowledge base --------------------------------------------


def test_torch_driver_firmware_completed_when_absent(tmp_path):
    m = load_text(tmp_path, _yaml("""
        cells:
          - {os: ubuntu22.04, arch: x86_64, chip: 910b, cann: 7.0.RC1, python: "3.9", torch_npu: 2.1.0rc1}
        """))
    (cell,) = m.cells
    assert cell.torch == "2.1.0"           # torch_npu 2.1.0rc1 is built on torch 2.1.0
    assert cell.driver == "23.0.RC3"       # CANN 7.0.RC1 pairs with Ascend HDK 23.0.RC3
    assert cell.firmware == "6.4.0.4.220"  # the 910b firmware observed with driver 23.0.rc3


def test_given_versions_are_not_overridden(tmp_path):
    m = load_text(tmp_path, _yaml("""
        cells:
          - {os: ubuntu22.04, arch: x86_64, chip: 910b, cann: 7.0.RC1, python: "3.9", torch_npu: 2.1.0rc1,
             torch: 2.1.0, driver: 24.1.RC3, firmware: 7.5.0.1.129}
        """))
    (cell,) = m.cells
    assert (cell.torch, cell.driver, cell.firmware) == ("2.1.0", "24.1.RC3", "7.5.0.1.129")


def test_unknown_versions_stay_empty(tmp_path):
    """No guess: `checks` reports what the knowledge base cannot fill in."""
    m = load_text(tmp_path, _yaml("""
        cells:
          - {os: ubuntu22.04, arch: x86_64, chip: 910b, cann: 8.4.0, python: "3.10", torch_npu: 2.1.0.post5}
        """))
    (cell,) = m.cells
    assert (cell.torch, cell.driver, cell.firmware) == ("", "", None)


@pytest.mark.parametrize("written, kept", [("3.10", "3.10"), ("3.9", "3.9"), ("3.11", "3.11"), ("3.10.12", "3.10.12")])
def test_python_stays_the_string_typed(tmp_path, written, kept):
    m = load_text(tmp_path, _yaml(f"""
        cells:
          - os: ubuntu22.04
            arch: x86_64
            chip: 910b
            cann: 8.0.RC3
            python: {written}
            torch_npu: 2.4.0
        """))
    assert m.findings == []
    assert m.cells[0].python == kept
    assert "-py" + kept + "-" in m.cells[0].id


# --- schema errors: location and field path ----------------------------------------


def test_schema_error_carries_file_line_column_and_field(tmp_path):
    m = load_text(tmp_path, _yaml("""
        image: ascend-build/pytorch
        defaults:
          os: ubuntu22.04
          arch: x86_64
          chip: 910b
        cells:
          - cann: 8.0.RC3
            python: "3.10"
            torch_npu: 2.4.0
          - cann: 8.0.RC3
            python: "3.10"
            torch_npu: "2.4.0 && rm -rf /"
        """))
    (finding,) = m.findings
    path = str(tmp_path / "matrix.yaml")
    assert finding.rule == "schema-value"
    assert finding.severity == "error"
    assert finding.field == "cells[1].torch_npu"
    assert finding.where == Location(path, 12, 16)
    assert str(finding).startswith(f"{path}:12:16: error: schema-value [cells[1].torch_npu]: "
                                   "cells[1].torch_npu = '2.4.0 && rm -rf /' is not a valid version")
    assert "never allowed" in finding.fix
    # the bad cell is dropped, the good one stays
    assert [where(c).line for c in m.cells] == [7]


def test_every_schema_error_of_a_file_is_reported_with_its_place(tmp_path):
    m = load_text(tmp_path, _yaml("""
        defaults:
          os: ubuntu22.4
        cells:
          - arch: x86_64
            chip: 910bb
            cann: 8.0.RC3
            python: 3.1O
            torch_npu: 2.4.0
            env: pip
            pip: [numpy]
            env_vars: {1BAD: x}
            mirrors: {pip_indx: "http://127.0.0.1:3141/simple"}
            sha256: {file.run: ABC}
            cann_source: {image: "x:1", local: /srv}
        """))
    got = [(f.rule, f.field, where(f).line, where(f).column) for f in m.findings]
    assert got == [
        ("schema-value", "defaults.os", 2, 7),
        ("schema-value", "cells[0].chip", 5, 11),
        ("schema-value", "cells[0].python", 7, 13),
        ("schema-value", "cells[0].env", 9, 10),
        ("schema-value", "cells[0].pip[0]", 10, 11),
        ("schema-value", "cells[0].env_vars.1BAD", 11, 16),  # the key is wrong
        ("schema-unknown-key", "cells[0].mirrors.pip_indx", 12, 15),
        ("schema-value", "cells[0].sha256.file.run", 13, 24),
        ("schema-value", "cells[0].cann_source", 14, 18),
    ]
    assert m.cells == []
    by_field = {f.field: f for f in m.findings}
    assert "did you mean 'ubuntu22.04'?" in by_field["defaults.os"].fix
    assert "did you mean '910b'?" in by_field["cells[0].chip"].fix
    assert "did you mean 'pip_index'?" in by_field["cells[0].mirrors.pip_indx"].fix


def test_unknown_key_suggests_the_known_one(tmp_path):
    m = load_text(tmp_path, _yaml("""
        cells:
          - os: ubuntu22.04
            arch: x86_64
            chip: 910b
            cann: 8.0.RC3
            python: "3.10"
            torch_nup: 2.4.0
        """))
    (finding,) = m.findings
    assert finding.rule == "schema-unknown-key"
    assert finding.field == "cells[0].torch_nup"
    assert finding.message == "unknown key cells[0].torch_nup"
    assert finding.fix.startswith("did you mean 'torch_npu'? known keys: name, os, arch, chip, cann,")
    assert (where(finding).line, where(finding).column) == (7, 5)  # the key itself


def test_unknown_top_level_key(tmp_path):
    m = load_text(tmp_path, _yaml("""
        image: ascend-build/pytorch
        cell:
          - os: ubuntu22.04
        """))
    rules = [(f.rule, f.field, where(f).line) for f in m.findings]
    assert rules == [("schema-unknown-key", "cell", 2), ("schema-missing", "cells", 1)]
    assert m.findings[0].message == "unknown top-level key 'cell'"
    assert m.findings[0].fix == "did you mean 'cells'? allowed: image, defaults, cells"
    assert m.findings[1].message == "the matrix has no 'cells' list"


def test_missing_required_keys_named_with_help(tmp_path):
    m = load_text(tmp_path, _yaml("""
        defaults:
          os: ubuntu22.04
        cells:
          - arch: x86_64
            chip: 910b
            cann: 8.0.RC3
        """))
    (finding,) = m.findings
    assert finding.rule == "schema-missing"
    assert finding.field == "cells[0]"
    assert finding.message == "cells[0] lacks python"  # not torch_npu: without it the cell is CANN-only
    assert (where(finding).line, where(finding).column) == (4, 5)
    assert 'python: Python version, e.g. "3.10" (quote it)' in finding.fix


@pytest.mark.parametrize("text, rule, message", [
    ("cells: {}\n", "schema-type", "'cells' must be a list"),
    ("- a\n- b\n", "schema-type", "(top level) must be a mapping (KEY: value lines)"),
    ("", "schema-missing", "the matrix file is empty"),
    ("# only a comment\n", "schema-missing", "the matrix file is empty"),
    ("cells:\n  - os: [ubuntu22.04]\n", "schema-type", "cells[0].os must be a single value, not a list"),
    ("cells:\n  - arch: []\n", "schema-value", "cells[0].arch is an empty list"),
    ("defaults:\n  name: x\ncells: []\n", "schema-value", "defaults.name would give every cell the same id"),
])
def test_shape_errors(tmp_path, text, rule, message):
    m = load_text(tmp_path, text)
    assert (m.findings[0].rule, m.findings[0].message) == (rule, message)
    assert where(m.findings[0]).file == str(tmp_path / "matrix.yaml")
    assert where(m.findings[0]).line >= 1 and where(m.findings[0]).column >= 1


def test_duplicate_key_in_one_mapping_is_refused(tmp_path):
    with pytest.raises(UserError) as info:
        load_text(tmp_path, "cells:\n  - os: ubuntu22.04\n    os: debian12\n")
    assert info.value.message == "key 'os' appears twice in one mapping"
    assert info.value.where == Location(str(tmp_path / "matrix.yaml"), 3, 5)


# --- YAML-level refusals --------------------------------------------------------------


def test_yaml_syntax_error_has_location(tmp_path):
    with pytest.raises(UserError) as info:
        load_text(tmp_path, "cells:\n  - cann: 8.0.RC3\n   python: \"3.10\"\n")
    err = info.value
    assert err.where == Location(str(tmp_path / "matrix.yaml"), 3, 4)
    assert err.message.startswith("YAML syntax error: ")
    assert str(err).startswith(f"{tmp_path / 'matrix.yaml'}:3:4: YAML syntax error")
    assert err.exit_code == 2


def test_unclosed_quote_is_a_syntax_error(tmp_path):
    with pytest.raises(UserError) as info:
        load_text(tmp_path, "cells:\n  - cann: '8.0.RC3\n")
    assert info.value.message.startswith("YAML syntax error")
    assert info.value.where is not None and info.value.where.line == 3


def test_aliases_are_refused(tmp_path):
    with pytest.raises(UserError) as info:
        load_text(tmp_path, _yaml("""
            defaults: &shared
              os: ubuntu22.04
            cells:
              - *shared
            """))
    assert info.value.message == "YAML anchors and aliases are not supported in a matrix"
    assert where(info.value).file == str(tmp_path / "matrix.yaml")
    assert "defaults" in info.value.fix


def test_merge_keys_are_refused(tmp_path):
    with pytest.raises(UserError) as info:
        load_text(tmp_path, "base: &b {os: ubuntu22.04}\ncells:\n  - <<: *b\n    arch: x86_64\n")
    assert info.value.message == "YAML merge keys (<<) are not supported in a matrix"
    assert info.value.where == Location(str(tmp_path / "matrix.yaml"), 3, 5)


def test_alias_bomb_is_refused_before_expansion(tmp_path):
    """'Billion laughs': 9 levels of 9 aliases would be 9**9 strings if expanded."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, 10):
        refs = ",".join([f"*a{level - 1}"] * 9)
        lines.append(f"a{level}: &a{level} [{refs}]")
    lines.append("cells: [*a9]")
    with pytest.raises(UserError) as info:
        load_text(tmp_path, "\n".join(lines) + "\n")
    assert info.value.message == "YAML anchors and aliases are not supported in a matrix"
    assert where(info.value).line == 1  # refused at the first repeated node, nothing expanded


# --- files and folders ------------------------------------------------------------------


def test_file_over_one_mib_is_refused_naming_its_size(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("cells: []\n" + "#" * matrix.MAX_BYTES)
    size = path.stat().st_size
    with pytest.raises(UserError) as info:
        matrix.load(path)
    assert info.value.message == f"matrix file {path} is {size} bytes, over the 1048576-byte limit"
    assert "split" in info.value.fix


def test_file_of_exactly_the_limit_is_read(tmp_path):
    path = tmp_path / "edge.yaml"
    head = "cells: []\n"
    path.write_text(head + "#" * (matrix.MAX_BYTES - len(head)))
    assert path.stat().st_size == matrix.MAX_BYTES
    assert matrix.load(path).cells == []


def test_missing_file_names_the_path(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(UserError) as info:
        matrix.load(path)
    assert info.value.message == f"matrix file not found: {path}"
    assert info.value.exit_code == 2
    assert "--matrix" in info.value.fix


def test_unreadable_file_names_the_path(tmp_path):
    path = tmp_path / "secret.yaml"
    path.write_text("cells: []\n")
    path.chmod(0)
    try:
        if os.access(path, os.R_OK):
            pytest.skip("running as a user who can read a mode-000 file (root)")
        with pytest.raises(UserError) as info:
            matrix.load(path)
        assert info.value.message == f"cannot read matrix file {path}: Permission denied"
    finally:
        path.chmod(0o644)


def test_non_utf8_file_is_refused(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("cells: []\n# caf\xe9\n".encode("latin-1"))
    with pytest.raises(UserError) as info:
        matrix.load(path)
    assert info.value.message == f"matrix file {path} is not UTF-8 text"


def test_folder_of_several_files(tmp_path):
    (tmp_path / "b.yml").write_text(
        "cells:\n  - {os: ubuntu22.04, arch: x86_64, chip: 910b, cann: 8.0.RC3, python: \"3.10\", torch_npu: 2.4.0}\n")
    (tmp_path / "a.yaml").write_text(
        "image: team/one\n"
        "cells:\n  - {os: ubuntu22.04, arch: aarch64, chip: 910b, cann: 7.0.RC1, python: \"3.9\", torch_npu: 2.1.0rc1}\n")
    (tmp_path / "notes.txt").write_text("not a matrix: {")
    (tmp_path / "sub.yaml").mkdir()  # a folder, not a file: ignored
    m = matrix.load(tmp_path)
    assert m.files == [str(tmp_path / "a.yaml"), str(tmp_path / "b.yml")]
    assert [(c.ref, where(c).file, where(c).line) for c in m.cells] == [
        ("team/one:cann7.0.rc1-910b-ubuntu22.04-py3.9-torch_npu2.1.0rc1-aarch64", str(tmp_path / "a.yaml"), 3),
        ("ascend-build/pytorch:cann8.0.rc3-910b-ubuntu22.04-py3.10-torch_npu2.4.0-x86_64", str(tmp_path / "b.yml"), 2),
    ]


def test_findings_of_a_folder_name_their_own_file(tmp_path):
    (tmp_path / "a.yaml").write_text("cells:\n  - {os: ubuntu22.04}\n")
    (tmp_path / "b.yaml").write_text("cells:\n  - os: ubuntu22.04\n    cann: \"8.0.RC3;\"\n")
    m = matrix.load(tmp_path)
    assert [(where(f).file, where(f).line, f.rule) for f in m.findings] == [
        (str(tmp_path / "a.yaml"), 2, "schema-missing"),
        (str(tmp_path / "b.yaml"), 3, "schema-value"),
    ]


@pytest.mark.parametrize("text", ["cells: []\n", "image: r/x\ncells: []\n", "cells:\n"])
def test_a_matrix_of_no_cells_is_an_error_with_its_line_as_an_empty_file_is(tmp_path, text):
    path = tmp_path / "m.yaml"
    path.write_text(text)
    findings = matrix.load(path).findings
    assert [(f.rule, where(f).line, f.severity) for f in findings] in (
        [("schema-value", text.count("\n"), "error")],   # cells: []
        [("schema-type", 1, "error")])                     # cells: (null): not a list


def test_empty_folder_is_an_error(tmp_path):
    (tmp_path / "README.md").write_text("no matrix here\n")
    with pytest.raises(UserError) as info:
        matrix.load(tmp_path)
    assert info.value.message == f"no .yaml matrix files in folder {tmp_path}"
    assert info.value.exit_code == 2


def test_shipped_matrix_loads_clean():
    from tests.support.matrix import SHIPPED_MATRIX

    m = matrix.load(SHIPPED_MATRIX)
    assert m.findings == []
    assert len(m.cells) == len({c.id for c in m.cells}) >= 10
    assert all(c.torch and c.driver for c in m.cells)


# --- hostile inputs: files that are no files, keys that would forge output ------------------


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_matrix_that_is_no_regular_file_is_refused_without_reading_it(tmp_path, kind):
    import os
    path = tmp_path / "matrix.yaml"
    if kind == "fifo":
        os.mkfifo(path)  # open() would block forever waiting for a writer
    else:
        path = Path("/dev/zero")  # would never end
    refused = refused_promptly(lambda: matrix.load(path), path)
    assert refused.message == f"matrix file {path} is not a regular file"


def test_a_key_with_a_newline_cannot_forge_an_output_line(tmp_path):
    path = tmp_path / "matrix.yaml"
    path.write_text('cells:\n  - "os\\n::error::forged": x\n    "\\x1b[31mred": y\n')
    shown = "\n".join(str(f) for f in matrix.load(path).findings)
    assert "::error::forged" in shown and "\n::error" not in shown  # on the finding's own line, escaped
    assert "\x1b" not in shown and "\\x1b[31mred" in shown


# --- nesting: any depth is a clear error, never a RecursionError ---------------------------------


@pytest.mark.parametrize("levels", [70, 500, 990, 5000])
@pytest.mark.parametrize("style", ["flow", "block"])
def test_nesting_of_any_depth_is_a_clear_error(tmp_path, levels, style):
    """Lists in lists: under libyaml's own limit of 1000 it was a RecursionError (Python's stack)."""
    if style == "flow":
        text = "cells: " + "[" * levels + "]" * levels + "\n"
    else:
        text = "cells:\n  " + "- " * levels + "x\n"  # "- - x" is a list in a list, in block style
    with pytest.raises(UserError) as info:
        load_text(tmp_path, text)
    assert "nested deeper than" in info.value.message or "maximum nesting depth" in info.value.message
    assert str(tmp_path / "matrix.yaml") in str(info.value)
    assert info.value.fix


def test_a_deep_matrix_through_the_cli_says_so_without_a_traceback(tmp_path):
    (tmp_path / "deep.yaml").write_text("cells: " + "[" * 600 + "]" * 600 + "\n")
    from tests.support.matrix import run_cli
    out = run_cli("validate", "--matrix", tmp_path / "deep.yaml")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"{tmp_path / 'deep.yaml'}:1:" in out.stderr and "nested deeper than 64 levels" in out.stderr


def test_a_refused_mirror_url_is_shown_without_its_user_and_password(tmp_path):
    """A URL the schema refuses is echoed in the finding: never its user:password."""
    loaded = load_text(tmp_path, textwrap.dedent("""\
        cells:
          - {os: ubuntu22.04, arch: x86_64, chip: 910b, cann: 8.0.RC3, python: "3.10", torch_npu: 2.4.0,
             mirrors: {pip_index: "https://alice:s3cret@mirror.example/simple index"}}
        """))
    [finding] = [f for f in loaded.findings if f.field == "cells[0].mirrors.pip_index"]
    assert "https://***@mirror.example/simple index" in finding.message
    assert "s3cret" not in str(finding) and "alice" not in str(finding)
