"""Choosing an image for a node from registry labels (no engine: pure selection)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builder.images.matrix import derive_id
from builder.cell_id import parse_id
from builder.errors import UserError
from builder.node.pull import Node, Wanted, cann_of, choose, split_registry, suggestions, verify_pulled, why_not
from builder.vocabulary import ARCHS, CHIPS
from builder.registry import ImageInfo

NODE = Node(arch="aarch64", chip="910b", driver="24.1.RC3", firmware="7.5.0.1.129")


def image(tag, **over):
    labels = {
        "io.ascend-build.cell": tag, "io.ascend-build.variant": "npu", "io.ascend-build.validated": "true",
        "io.ascend-build.arch": "aarch64", "io.ascend-build.chip": "910b", "io.ascend-build.cann": "8.0.RC3",
        "io.ascend-build.torch": "2.4.0", "io.ascend-build.torch-npu": "2.4.0", "io.ascend-build.python": "3.10",
        "io.ascend-build.min-driver": "24.1.RC3", "io.ascend-build.min-firmware": "7.5.0.1.129",
    }
    labels.update({f"io.ascend-build.{k.replace('_', '-')}": v for k, v in over.items()})
    return ImageInfo(tag, "sha256:" + format(abs(hash(tag)), "x").ljust(64, "0")[:64], labels, "arm64")


def test_a_fitting_image_has_no_reasons():
    assert why_not(image("a"), NODE, Wanted(cann="8.0.RC3")) == []


def tag_of(best) -> str:
    """The chosen image's tag; "" when none was chosen."""
    return best.tag if best else ""


def test_newest_torch_wins_then_torch_npu():
    older = image("old", torch="2.1.0", torch_npu="2.1.0.post8")
    newer = image("new", torch="2.4.0", torch_npu="2.4.0")
    newest_npu = image("newest", torch="2.4.0", torch_npu="2.4.0.post2")
    best, rejected = choose([older, newest_npu, newer], NODE, Wanted(cann="8.0.RC3"))
    assert best and best.tag == "newest" and rejected == []


def test_a_cann_only_image_is_taken_only_when_no_image_with_pytorch_fits():
    cann_only = image("cann-only", torch="", torch_npu="")
    with_torch = image("with-torch", torch="2.1.0", torch_npu="2.1.0.post8")
    assert tag_of(choose([cann_only, with_torch], NODE, Wanted(cann="8.0.RC3"))[0]) == "with-torch"
    assert tag_of(choose([cann_only, image("other-cann", cann="8.1.RC1")], NODE, Wanted(cann="8.0.RC3"))[0]) == "cann-only"


def test_cann_spellings_are_compared_as_versions():
    assert why_not(image("a", cann="8.0.RC3"), NODE, Wanted(cann="8.0.rc3")) == []


@pytest.mark.parametrize("over, reason", [
    ({"min_driver": "25.0.RC1"}, "driver 24.1.RC3 < required 25.0.RC1"),
    ({"min_firmware": "7.7.0.1.231"}, "firmware 7.5.0.1.129 < required 7.7.0.1.231"),
    ({"chip": "a3"}, "chip a3 is not this node's (910b)"),
    ({"arch": "x86_64"}, "wrong arch: x86_64, node is aarch64"),
    ({"validated": "false"}, "not validated (a -candidate: run `ascend-build promote` on an NPU host)"),
    ({"variant": "cpu"}, "CPU twin, not an NPU image"),
    ({"cann": "8.0.RC1"}, "CANN 8.0.RC1, not 8.0.RC3"),
])
def test_each_reason_is_named(over, reason):
    assert reason in why_not(image("x", **over), NODE, Wanted(cann="8.0.RC3"))


def test_unknown_node_driver_is_not_assumed_new_enough():
    node = Node(arch="aarch64", chip="910b", driver=None, firmware=None)
    reasons = why_not(image("x"), node, Wanted())
    assert "node driver unknown; requires 24.1.RC3" in reasons
    assert "node firmware unknown; requires 7.5.0.1.129" in reasons


def test_foreign_images_are_rejected_plainly():
    info = ImageInfo("latest", "sha256:" + "0" * 64, {}, "arm64")
    assert why_not(info, NODE, Wanted()) == ["not built by ascend-build (no io.ascend-build labels)"]


def test_no_fit_suggests_the_driver_upgrade_and_another_cann():
    too_new = image("new", cann="8.0.RC3", min_driver="25.0.RC1")
    fits_other = image("old", cann="8.0.RC1", min_driver="24.1.RC1")
    best, rejected = choose([too_new, fits_other], NODE, Wanted(cann="8.0.RC3"))
    assert best is None
    tips = suggestions(rejected, NODE, Wanted(cann="8.0.RC3"))
    assert "upgrade the node's driver to 25.0.RC1 or newer" in tips[0]
    assert tips[1] == "another CANN fits this node: 8.0.RC1 (ascend-build pull --cann 8.0.RC1)"


def test_split_registry():
    assert split_registry("127.0.0.1:5000", "ascend-build/pytorch") == ("127.0.0.1:5000", "ascend-build/pytorch")
    assert split_registry("reg.example:443/team/img", "x") == ("reg.example:443", "team/img")
    with pytest.raises(UserError):
        split_registry("/", "x")


def test_labels_changed_after_pull_are_refused():
    verify_pulled({"a": "1"}, {"a": "1"}, "ref")
    with pytest.raises(UserError, match="labels differ.*a"):
        verify_pulled({"a": "1"}, {"a": "2"}, "ref")


# --- tag names: one parser (cell_id.parse_id, the inverse of derive_id) -----------------------


def twin(tag, cell=None):
    labels = {"io.ascend-build.cell": cell if cell is not None else tag.removesuffix("-cpu"),
              "io.ascend-build.variant": "cpu", "io.ascend-build.validated": "true", "io.ascend-build.arch": "aarch64"}
    return ImageInfo(tag, "sha256:" + "1" * 64, labels, "arm64")


TWIN_TAG = "cann8.0.rc3-910b-ubuntu22.04-py3.10-torch_npu2.4.0-aarch64-cpu"


def test_a_twin_named_cann8_0_rc3_is_cann_8_0_RC3_for_an_npu_pull():
    """A twin has no CANN label: its cell id names it, and an NPU pull used to call it "CANN unknown"."""
    reasons = why_not(twin(TWIN_TAG), NODE, Wanted(cann="8.5.0"))
    assert reasons == ["CPU twin, not an NPU image", "CANN 8.0.RC3, not 8.5.0"]
    assert why_not(twin(TWIN_TAG), NODE, Wanted(cann="8.0.RC3")) == ["CPU twin, not an NPU image"]
    assert why_not(twin(TWIN_TAG), NODE, Wanted(cann="8.0.RC3", variant="cpu")) == []


def test_a_twin_with_its_own_cell_id_is_read_from_its_tag_else_unknown():
    assert cann_of(twin(TWIN_TAG, cell="team-base")) == "8.0.RC3"
    assert "CANN unknown, not 8.0.RC3" in why_not(twin("team-base-cpu"), NODE, Wanted(cann="8.0.RC3"))


VERSION = st.from_regex(r"[0-9]{1,2}\.[0-9]{1,2}\.(?:[0-9]{1,2}|RC[0-9])", fullmatch=True)


@settings(max_examples=300, deadline=None)
@given(cann=VERSION, chip=st.sampled_from(CHIPS), os_id=st.sampled_from(["ubuntu22.04", "openeuler22.03", "debian12"]),
       python=st.sampled_from(["3.9", "3.10", "3.11"]), arch=st.sampled_from(ARCHS),
       torch_npu=st.one_of(st.just(""), st.from_regex(r"2\.[0-9]\.[0-9](?:\.post[0-9]{1,2}|rc[0-9])?", fullmatch=True)),
       cpu=st.booleans(), product=st.sampled_from(["", "atlas-950-superpod", "atlas-350", "atlas-850"]))
def test_parse_id_reads_back_every_derived_id(cann, chip, os_id, python, arch, torch_npu, cpu, product):
    tag = derive_id(cann, chip, os_id, python, torch_npu, arch, product) + ("-cpu" if cpu else "")
    parsed = parse_id(tag)
    assert parsed is not None
    assert (parsed.cann, parsed.chip, parsed.os, parsed.python, parsed.torch_npu, parsed.arch, parsed.variant,
            parsed.product) == (cann, chip, os_id, python, torch_npu, arch, "cpu" if cpu else "npu", product)
