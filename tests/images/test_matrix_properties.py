"""Property: whatever a matrix file holds, validate and render answer with findings or a
UserError (what, where, how to fix), never another exception. Hypothesis writes matrices of
every key the schema knows, with values of every YAML type, real version spellings and junk."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Dict, List

import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from builder.images import checks, matrix, render
from builder.errors import UserError

REAL: Dict[str, List[Any]] = {  # spellings the knowledge base knows, so some cells get past the schema to the rules
    "os": ["ubuntu22.04", "debian12", "openeuler24.03"], "arch": ["x86_64", "aarch64", "arm64"],
    "chip": ["910b", "a3", "310p"], "cann": ["8.0.RC3", "9.1.0", "8.5.0", "7.0.RC1"],
    "python": ["3.9", "3.10", "3.11"], "torch_npu": ["2.4.0", "2.13.0", "2.1.0rc1", "2.8.0.post2"],
    "torch": ["2.4.0", "2.13.0"], "driver": ["24.1.RC3", "25.2.RC1"], "firmware": ["7.5.0.1.129"],
    "name": ["my-cell", "a" * 200], "env": ["venv", "conda"], "nnal": [True, False], "unlisted": [True],
    "pip": [["numpy==1.26.4"], ["transformers==4.46.0", "numpy==1.26.4"]],
    "env_vars": [{"HCCL_CONNECT_TIMEOUT": "600"}, {"PATH": "/x"}],
    "mirrors": [{"pip_index": "https://mirror.example/simple"}, {"apt": "http://127.0.0.1/debian"}],
    "sha256": [{"Ascend-cann-toolkit_9.1.0_linux-x86_64.run": "a" * 64}],
    "base_image": ["local/debian:12", "debian@sha256:" + "b" * 64],
    "cann_source": ["installer", {"local": "/tmp"}, {"image": "local/cann@sha256:" + "c" * 64}],
    "torch_npu_wheel": [{"url": "https://example.org/torch_npu-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl",
                         "sha256": "d" * 64}, {"path": "missing.whl", "sha256": "e" * 64}],
}
SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True),
                   st.text(max_size=30), st.sampled_from(["", "~", "null", "9" * 40, "..", "a\nb", "${X}"]))
VALUE = st.recursive(SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                     st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                     max_leaves=6)


def field_value(key: str):
    """Mostly a value of the key's kind (so the rules behind the schema run), sometimes anything."""
    return st.one_of(st.sampled_from(REAL[key]), st.sampled_from(REAL[key]), VALUE) if key in REAL else VALUE


VALID = {"cann": "9.1.0", "chip": "910b", "arch": "x86_64", "os": "debian12", "env": "venv", "python": "3.11",
         "torch_npu": "2.13.0"}  # the demo cell


@st.composite
def cells(draw):
    """Mostly a valid cell with one to three keys changed or added, so most reach the rules
    and render; sometimes any keys at all."""
    if draw(st.integers(0, 4)) == 0:
        return draw(st.fixed_dictionaries({}, optional={key: field_value(key) for key in matrix.CELL_KEYS}))
    cell = dict(VALID)
    for key in draw(st.lists(st.sampled_from(sorted(matrix.CELL_KEYS)), min_size=1, max_size=3, unique=True)):
        if draw(st.booleans()) and key in cell:
            del cell[key]
        else:
            cell[key] = draw(field_value(key))
    return cell


DOCUMENT = st.one_of(
    st.fixed_dictionaries({"cells": st.lists(cells(), min_size=1, max_size=3)}, optional={"defaults": cells()}),
    VALUE,
)

_counter = itertools.count()


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(document=DOCUMENT)
def test_any_matrix_gets_findings_or_a_user_error_never_a_crash(tmp_path: Path, document):
    path = tmp_path / f"m{next(_counter)}.yaml"
    path.write_text(yaml.safe_dump(document, allow_unicode=True))
    try:
        loaded = matrix.load(path)
        findings = loaded.findings or checks.check(loaded.cells)
        event("schema findings" if loaded.findings else "checked by the rules")
        if not checks.has_errors(findings):
            for cell in loaded.cells:
                render.render_cell(cell)
            event("rendered")
    except UserError as refused:
        event("UserError")
        assert refused.message
