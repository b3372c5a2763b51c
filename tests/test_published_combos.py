"""What Ascend and its main downstream project publish, fed through `validate`.

Fixtures (tests/fixtures/, each row with the commit or tag and file it was read from):

- published-cann-images.yaml: every CANN/chip/OS/Python/arch the official CANN images'
  build matrix ever listed (Ascend/cann-container-image, all refs). Those images are
  CANN and Python without PyTorch, so each row is a CANN-only cell.
- published-cann-image-packages.yaml: the .run files each of those images installs, per
  CANN, chip and arch: the installer names the knowledge base derives must be these.
- published-vllm-ascend.yaml: the CANN image, torch and torch_npu of every Dockerfile of
  every vllm-ascend release. A torch_npu that PyPI does not serve (a dev build those
  Dockerfiles download themselves) is written as a wheel of the cell's own, as a user would.

The refusals that must stay are at the end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Tuple

import pytest
import yaml

from builder import installers, knowledge, versions
from builder.images import checks, matrix
from tests.support.matrix import cell_index

FIXTURES = Path(__file__).parent / "fixtures"
# chip spellings the image matrix used at times (the typo included), as the matrix writes them
CHIP = {"atlas-a3": "a3", "altas-a3": "a3"}


def fixture(name):
    return yaml.safe_load((FIXTURES / name).read_text())


def chip(text: str) -> str:
    return CHIP.get(text.lower(), text.lower())


def validate(tmp_path, cells):
    """(errors by cell index, every finding) of `validate` over ``cells``."""
    path = tmp_path / "published.yaml"
    path.write_text(yaml.safe_dump({"image": "published/check", "cells": cells}))
    loaded = matrix.load(path)
    findings = loaded.findings + (checks.check(loaded.cells, knowledge.load()) if not loaded.findings else [])
    errors: Dict[int, List[str]] = {}
    for f in findings:
        if f.severity == "error":
            errors.setdefault(cell_index(f.field), []).append(str(f))
    return errors, findings


def test_every_official_cann_image_validates_as_a_cann_only_cell(tmp_path):
    rows = fixture("published-cann-images.yaml")
    cells = [{"name": f"image-{i}", "cann": r["cann"], "chip": chip(r["chip"]), "os": r["os"], "python": r["python"],
              "arch": r["arch"]} for i, r in enumerate(rows)]
    errors, _ = validate(tmp_path, cells)
    assert errors == {}
    assert len(cells) == 598
    releases = {knowledge.load().releases.canonical_cann(r["cann"]) for r in rows}
    assert len(releases) == 25 and {"8.1.RC1.alpha001", "8.3.RC2", "9.1.0-beta.1"} <= releases


def test_every_cann_release_since_7_0_in_the_image_matrix_is_known():
    kb = knowledge.load()
    known = {versions.cann(c) for c in kb.releases.cann_releases()}
    named = {versions.cann(r["cann"]) for r in fixture("published-cann-images.yaml")}
    assert named <= known


# (CANN, chip) whose images installed something else than the knowledge base names, and why
KNOWN_DIFFERENCES = {
    ("8.1.RC1.alpha001", "910b"): "that image installed NNAL 8.0.0, not its own release's",
    ("8.1.RC1.alpha002", "910b"): "that image installed NNAL 8.0.0, not its own release's",
    ("8.1.rc1", "a3"): "an early commit spelled it Ascend-cann-kernels-atlas-a3_8.1.rc1; cann-packages.json (and "
                       "the later images) Atlas-A3-cann-kernels_8.1.RC1",
    ("9.0.0", "a3"): "an early commit spelled it a3-ops; later ones A3-ops, as the knowledge base does",
}


def test_the_installers_the_official_images_install_are_the_ones_named_here():
    kb = knowledge.load()
    rows = fixture("published-cann-image-packages.yaml")
    differ: Dict[Tuple[str, str], List[tuple]] = {}
    for r in rows:
        ours = [i.run for i in installers.cann_installers(kb, r["cann"], chip(r["chip"]), r["arch"], nnal=True)]
        if ours != r["files"]:
            differ.setdefault((r["cann"], chip(r["chip"])), []).append((ours, r["files"], r["source"]))
    assert set(differ) == set(KNOWN_DIFFERENCES), {k: v[0] for k, v in differ.items() if k not in KNOWN_DIFFERENCES}
    assert len(rows) - sum(map(len, differ.values())) == 180 and len(rows) == 188
    # the same image rows also list the spelling the knowledge base uses, at another commit
    for cann, name in (("8.1.rc1", "a3"), ("9.0.0", "a3")):
        assert any(r["files"] == [i.run for i in installers.cann_installers(kb, cann, name, r["arch"], nnal=True)]
                   for r in rows if (r["cann"], chip(r["chip"])) == (cann, name))


def vllm_cells(rows):
    """One cell per Dockerfile and arch; a torch_npu PyPI does not serve as the cell's own wheel."""
    kb = knowledge.load()
    cells: List[dict] = []
    for r in rows:
        for arch in (("x86_64", "aarch64") if r["arch"] == "both" else (r["arch"],)):
            cell = {"name": f"vllm-{len(cells)}", "cann": r["cann"], "chip": chip(r["chip"]), "os": r["os"],
                    "python": r["python"], "arch": arch, "torch_npu": r["torch_npu"]}
            pinned = str(r.get("torch", ""))
            if kb.releases.torch_npu(r["torch_npu"]) is None:  # downloaded by the Dockerfile: a wheel of one's own
                cp = "cp" + r["python"].replace(".", "")
                cell["torch_npu_wheel"] = {"path": f"wheels/torch_npu-{r['torch_npu']}-{cp}-{cp}-manylinux_2_17_{arch}.whl",
                                           "sha256": "0" * 64}
                # torch_npu X.Y.Z.* is built against torch X.Y.Z; where the tag only says torch>=, that one
                cell["torch"] = pinned if pinned[:1].isdigit() else versions.python_package(r["torch_npu"]).base_version[:5]
            elif pinned[:1].isdigit():
                cell["torch"] = pinned
            cells.append(cell)
    return cells


def test_every_vllm_ascend_image_validates(tmp_path):
    rows = fixture("published-vllm-ascend.yaml")
    cells = vllm_cells(rows)
    errors, findings = validate(tmp_path, cells)
    assert errors == {}
    assert len(cells) == 408 and sum("torch_npu_wheel" in c for c in cells) == 108
    def pair(f, before):  # "torch_npu X on CANN", as the image tags spell the CANN
        return f.message.split(" is paired")[0].split(" (PTA")[0] + " on " + f.message.split("; CANN ")[1].split(before)[0]

    # pairs the tables do not list: a warning naming vllm-ascend's Dockerfile (a named project ships it,
    # which is evidence; a later release of the paired line alone would only be an inference)
    downstream = {pair(f, " is not") for f in findings if f.rule == "cann-downstream"}
    assert downstream == {"torch_npu 2.10.0 on 9.1.0-beta.1", "torch_npu 2.10.0.post2 on 9.1.0-beta.1",
                          "torch_npu 2.7.1 on 8.3.rc2", "torch_npu 2.8.0 on 8.3.rc2"}
    assert all("vllm-project/vllm-ascend@v" in f.message for f in findings if f.rule == "cann-downstream")
    # pairs a published table of TorchNPU lists (8.5.X and 9.0.X are whole lines): a warning naming the table
    window = {pair(f, " is not") for f in findings if f.rule == "cann-window"}
    assert window == {"torch_npu 2.5.1 on 8.0.0", "torch_npu 2.9.0 on 8.5.1", "torch_npu 2.8.0.post2 on 8.5.1",
                      "torch_npu 2.10.0.post2 on 9.0.1"}
    assert all("Ascend/pytorch@v" in f.message for f in findings if f.rule == "cann-window")
    assert not [f for f in findings if f.rule in ("cann-adjacent", "cann-uncovered")]


@pytest.mark.parametrize("cell, rule", [
    ({"torch_npu": "2.9.0", "cann": "8.0.RC3"}, "cann-mismatch"),        # the tables of its PTA 7.3.0 leave it out
    ({"torch_npu": "2.6.0.post3", "cann": "9.0.0"}, "cann-mismatch"),    # PTA 7.2.0: TorchNPU 26.0.0's notes leave it out
    ({"torch_npu": "2.4.0", "cann": "6.3.0"}, "cann-unknown"),           # a CANN that does not exist
    ({"cann": "8.4.0"}, "cann-unknown"),                                 # the same, CANN-only
    ({"torch_npu": "2.5.1.dev20250218", "cann": "8.0.0"}, "torch-npu-unpublished"),  # a dev build without its wheel
])
def test_what_nobody_publishes_stays_refused(tmp_path, cell, rule):
    base = {"name": "refused", "os": "ubuntu22.04", "arch": "x86_64", "chip": "910b", "python": "3.10"}
    errors, findings = validate(tmp_path, [dict(base, **cell)])
    assert rule in {f.rule for f in findings if f.severity == "error"}, errors


def test_a_pair_nothing_publishes_either_way_is_unconfirmed_and_strict_refuses_it(tmp_path):
    """torch_npu 2.4.0 (PTA 6.0.rc3) on CANN 9.0.0: no table covers PTA 6.0.rc3, so no document
    excludes the pair either; a warning, which `validate --strict` turns into a refusal."""
    base = {"name": "unconfirmed", "os": "ubuntu22.04", "arch": "x86_64", "chip": "910b", "python": "3.10"}
    _, findings = validate(tmp_path, [dict(base, torch_npu="2.4.0", cann="9.0.0")])
    [f] = [f for f in findings if f.rule.startswith("cann-")]
    assert (f.rule, f.severity) == ("cann-uncovered", "warning")
    assert checks.has_errors([f], strict=True)
