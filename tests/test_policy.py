"""What a verified validation statement must say (builder.trust.policy), and how pull and index use it, without a registry.

Statements are signed for real (P-256) and checked by `statements.check`; the registry side
(cosign's .att tag, the CLI) is in test_trust_policy_e2e.py.
"""

from __future__ import annotations

import copy

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from builder.trust import attached, policy, statements
from builder.images import attest, publish
from builder.errors import UserError
from builder.node.pull import TRUST_REFUSED, Node, Wanted, choose, suggestions
from builder.registry import ImageInfo
from builder.vocabulary import CPU, NPU, Label, tier_names

DIGEST = "sha256:" + "ab" * 32
CELL = "cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64"
LABELS = {Label.CELL: CELL, Label.VARIANT: CPU}
KEY = ec.generate_private_key(ec.SECP256R1())


def report(device=CPU, statuses=None, **extra) -> dict:
    statuses = statuses or {}
    return {"device": device, "host": {"driver": "24.1.rc3", "firmware": "7.5.0.1.129"} if device == NPU else {},
            "tiers": [{"name": t, "status": statuses.get(t, "passed"), "summary": f"{t}"} for t in tier_names()], **extra}


def verification(predicate: dict, key=KEY, digest: str = DIGEST) -> attached.Verification:
    envelope = statements.sign(statements.statement("r/x", digest, statements.VALIDATION_V1, predicate), key)
    checked = statements.check(envelope, KEY.public_key(), DIGEST)
    return attached.Verification("t", DIGEST, "sha256-ab.att",
                                 [attached.Found("sha256:" + "00" * 32, statements.VALIDATION_V1, checked)])


def predicate(device=CPU, variant=CPU, statuses=None, **extra) -> dict:
    return attest.validation_predicate(report(device, statuses, **extra), tier_names(), CELL, variant, "h")


def test_a_passed_twin_statement_is_trusted_under_any_and_refused_under_npu_host():
    found = verification(predicate())
    assert policy.judge(found, LABELS, policy.ANY) == ""
    assert policy.judge(found, LABELS, policy.NPU_HOST) == (
        "its validation statement says it ran on cpu-twin; --require npu-host")


def test_an_npu_host_statement_satisfies_npu_host():
    labels = {Label.CELL: CELL, Label.VARIANT: NPU}
    assert policy.judge(verification(predicate(NPU, NPU)), labels, policy.NPU_HOST) == ""
    emulated = verification(predicate(NPU, NPU, emulated="qemu-aarch64"))
    assert "ran on emulated" in policy.judge(emulated, labels, policy.NPU_HOST)


def test_a_skipped_tier_counts_as_not_failed_a_failed_one_refuses():
    assert policy.judge(verification(predicate(statuses={"collective": "skipped"})), LABELS) == ""
    failed = copy.deepcopy(predicate())
    failed["tiers"][-1]["status"] = "failed"
    assert policy.judge(verification(failed), LABELS) == (
        "its validation statement says not every required tier passed: collective failed")
    unrun = copy.deepcopy(predicate())
    unrun["tiers"] = unrun["tiers"][:2]
    assert "import not run" in policy.judge(verification(unrun), LABELS)


def test_a_verdict_other_than_passed_refuses():
    failed = dict(predicate(), verdict="failed")
    assert policy.judge(verification(failed), LABELS) == "its validation statement says failed, not passed"


def test_a_statement_about_another_cell_or_variant_than_the_labels_refuses():
    assert policy.judge(verification(predicate()), {**LABELS, Label.CELL: "other"}) == (
        f"its validation statement is about cell '{CELL}', the image's labels say 'other'")
    assert "about variant 'cpu', the image's labels say 'npu'" in policy.judge(
        verification(predicate()), {**LABELS, Label.VARIANT: NPU})


def test_a_statement_about_another_cell_than_the_tag_names_refuses():
    """`run` of a tag: the labels and the statement agree (both bound to the digest), the tag does not."""
    arm = CELL[: -len("x86_64")] + "aarch64"
    assert policy.judge(verification(predicate()), LABELS, named=(arm, CPU)) == (
        f"the tag names cell {arm} (cpu), but its validation statement is about cell {CELL} (cpu): "
        "another cell's image under this cell's tag")
    assert policy.judge(verification(predicate()), LABELS, named=(CELL, NPU)) == (
        f"the tag names cell {CELL} (npu), but its validation statement is about cell {CELL} (cpu): "
        "another cell's image under this cell's tag")
    assert policy.judge(verification(predicate()), LABELS, named=(CELL, CPU)) == ""
    assert policy.judge(verification(predicate()), LABELS, named=None) == ""  # a digest, or a tag naming no cell


def test_unverified_statements_say_why_and_no_key_checks_nothing():
    stranger = ec.generate_private_key(ec.SECP256R1())
    assert "signed by another key" in policy.judge(verification(predicate(), key=stranger), LABELS)
    assert "a statement about another image" in policy.judge(
        verification(predicate(), digest="sha256:" + "cd" * 32), LABELS)
    assert policy.decide(None, "r", DIGEST, LABELS, None) == policy.Verdict()  # type: ignore[arg-type]


def test_an_unknown_requirement_is_a_usage_error():
    with pytest.raises(UserError) as caught:
        policy.check_requirement("npu")
    assert caught.value.exit_code == 2 and "none of any, npu-host" in str(caught.value)


# --- pull and index with a trust hook ---------------------------------------------------------

NODE = Node(arch="x86_64", chip=None, driver=None, firmware=None)


def twin(tag: str, torch: str = "2.13.0") -> ImageInfo:
    labels = {Label.CELL: CELL, Label.VARIANT: CPU, Label.VALIDATED: "true", Label.ARCH: "x86_64",
              Label.TORCH: torch, Label.PYTHON: "3.11"}
    return ImageInfo(tag, "sha256:" + tag.ljust(64, "0")[:64], labels, "amd64")


def test_pull_variant_cpu_picks_twins_and_cann_is_read_from_the_cell():
    best, rejected = choose([twin("a")], NODE, Wanted(cann="9.1.0", variant=CPU))
    assert best is not None and best.tag == "a" and rejected == []
    best, rejected = choose([twin("a")], NODE, Wanted(cann="9.1.0"))
    assert best is None and rejected[0][1][0] == "CPU twin, not an NPU image"


def test_pull_asks_trust_only_of_images_that_fit_and_names_the_refused():
    asked = []

    def trust(info: ImageInfo) -> str:
        asked.append(info.tag)
        return "no statement is attached" if info.tag == "newer" else ""

    infos = [twin("old", torch="2.12.0"), twin("newer", torch="2.13.0"), twin("other-cann")]
    best, rejected = choose(infos, NODE, Wanted(cann="9.1.0", variant=CPU, python="3.10"), trust)
    assert best is None and asked == []  # nothing fits on labels: no statement looked up
    best, rejected = choose(infos, NODE, Wanted(cann="9.1.0", variant=CPU), trust)
    assert best is not None and best.tag == "other-cann" and "newer" in asked
    assert [(i.tag, r) for i, r in rejected] == [("newer", [TRUST_REFUSED + "no statement is attached"])]


def test_pull_suggests_no_cann_whose_only_image_was_refused_by_trust():
    refused = ImageInfo("npu", "sha256:" + "e" * 64, {
        Label.CELL: "c", Label.VARIANT: NPU, Label.VALIDATED: "true", Label.ARCH: "x86_64", Label.CANN: "8.0.RC3"},
        "amd64")
    _, rejected = choose([refused], NODE, Wanted(cann="8.0.RC3"), lambda info: "signed by another key")
    assert suggestions(rejected, NODE, Wanted(cann="8.0.RC3")) == []


def test_index_refuses_an_arch_whose_statement_is_refused_and_writes_nothing(monkeypatch):
    class Registry:
        name = "127.0.0.1:5000"
        written = False

        def put_manifest(self, *args):
            self.written = True

    reg = Registry()
    family = CELL[: -len("-x86_64")]
    images = {arch: publish.ArchImage(arch, f"{family}-{arch}-cpu", "sha256:" + arch[0] * 64,
                                      "application/vnd.oci.image.manifest.v1+json", 10, {}) for arch in ("x86_64", "aarch64")}
    monkeypatch.setattr(publish, "read_arch", lambda registry, repository, fam, variant, arch: (images[arch], []))
    with pytest.raises(UserError) as caught:
        publish.publish(reg, "r", family, CPU, trust=lambda image: "no statement is attached"  # type: ignore[arg-type]  # a fake registry
                        if image.arch == "aarch64" else "")
    assert f"{family}-aarch64-cpu (sha256:{'a' * 64}): signed validation refused: no statement is attached" \
        in str(caught.value)
    assert "x86_64-cpu (" not in str(caught.value) and not reg.written


# --- a skipped tier counts only with its reason; the Kyverno policy states the same rule -------------------


def skipped(reason) -> dict:
    found = copy.deepcopy(predicate(statuses={"collective": "skipped"}))
    found["skippedTiers"] = [{"name": "collective", "reason": reason}] if reason is not None else []
    return found


def test_a_required_tier_skipped_without_a_reason_refuses():
    assert policy.judge(verification(skipped("one NPU: nothing to collect over")), LABELS) == ""
    for reason in ("", None, 5):
        assert policy.judge(verification(skipped(reason)), LABELS) == (
            "its validation statement says required tier(s) collective skipped without a reason "
            "(a skipped tier counts only with its reason in skippedTiers)"), reason


def kyverno_admits(predicate: dict, require: str) -> bool:
    """Kyverno's verdict on ``predicate``: its conditions evaluated as Kyverno does, with JMESPath
    (https://kyverno.io/docs/writing-policies/preconditions/: Equals, GreaterThan, AllIn)."""
    import jmespath

    from builder.k8s import kyverno

    rule = kyverno.kyverno("PEM", ["r/*"], require)["spec"]["rules"][0]
    (conditions,) = rule["verifyImages"][0]["attestations"][0]["conditions"]

    def value(text):
        if isinstance(text, str) and text.startswith("{{") and text.endswith("}}"):
            return jmespath.search(text[2:-2].strip(), predicate)
        return text

    for condition in conditions["all"]:
        key, operator, wanted = value(condition["key"]), condition["operator"], value(condition["value"])
        if operator == "Equals":
            ok = key == wanted
        elif operator == "GreaterThan":
            ok = isinstance(key, (int, float)) and key > wanted
        elif operator == "AllIn":
            ok = isinstance(key, list) and all(k in (wanted or []) for k in key)
        elif operator == "AllNotIn":
            ok = isinstance(key, list) and all(k not in (wanted or []) for k in key)
        else:
            raise AssertionError(f"an operator this test does not evaluate: {operator}")
        if not ok:
            return False
    return True


def shapes() -> dict:
    failed = copy.deepcopy(predicate())
    failed["tiers"][-1]["status"] = "failed"
    unrun = copy.deepcopy(predicate())
    unrun["tiers"] = unrun["tiers"][:2]
    listed_not_skipped = copy.deepcopy(failed)
    listed_not_skipped["skippedTiers"] = [{"name": "collective", "reason": "it failed, but says why"}]
    passed_then_failed = copy.deepcopy(predicate())
    passed_then_failed["tiers"].append(dict(passed_then_failed["tiers"][-1], status="failed"))
    failed_then_passed = copy.deepcopy(failed)
    failed_then_passed["tiers"].append(dict(failed["tiers"][-1], status="passed"))
    passed_twice = copy.deepcopy(predicate())
    passed_twice["tiers"].append(dict(passed_twice["tiers"][-1]))
    name_not_text = copy.deepcopy(predicate())
    name_not_text["tiers"][-1]["name"] = [name_not_text["tiers"][-1]["name"]]
    return {"passed": predicate(), "npu-host": predicate(NPU, CPU), "verdict failed": dict(predicate(), verdict="failed"),
            "passed then failed": passed_then_failed, "failed then passed": failed_then_passed,
            "passed twice": passed_twice, "tier name not text": name_not_text,
            "no required tiers": dict(predicate(), requiredTiers=[]), "failed tier": failed, "tier not run": unrun,
            "skipped with a reason": skipped("why"), "skipped, empty reason": skipped(""),
            "skipped, no entry": skipped(None), "skipped, reason not text": skipped(5),
            "failed but listed as skipped": listed_not_skipped}


@pytest.mark.parametrize("require", policy.REQUIREMENTS)
@pytest.mark.parametrize("shape", sorted(shapes()))
def test_the_kyverno_conditions_decide_as_judge_does(shape, require):
    """One policy: for each shape of a signed predicate (labels and tag agreeing), Kyverno's conditions
    admit exactly what `judge` trusts."""
    found = shapes()[shape]
    trusted = policy.judge(verification(found), LABELS, require) == ""
    assert kyverno_admits(found, require) == trusted, (shape, policy.judge(verification(found), LABELS, require))


def test_the_shapes_include_both_verdicts():
    """The comparison above is not vacuous: some shapes are trusted, most are not."""
    verdicts = [policy.judge(verification(found), LABELS) == "" for found in shapes().values()]
    assert verdicts.count(True) == 4 and verdicts.count(False) == len(verdicts) - 4


def test_a_tier_listed_passed_then_failed_is_refused_naming_both():
    assert policy.judge(verification(shapes()["passed then failed"]), LABELS) == (
        "its validation statement says not every required tier passed: collective passed then failed")


@pytest.mark.parametrize("field, value, trusted", [
    ("tiers", "passed", False), ("tiers", [None, 3, [], {"name": {"a": 1}, "status": "passed"}], False),
    ("tiers", {"collective": "passed"}, False), ("requiredTiers", "collective", False),
    ("requiredTiers", [["collective"]], False), ("requiredTiers", [None], False), ("verdict", {"passed": True}, False),
    ("cell", ["c"], False), ("variant", None, False),
    # fields that do not decide when every tier passed: read or not, never a crash
    ("skippedTiers", [{"reason": "no name"}], True), ("skippedTiers", [{"name": ["x"], "reason": "r"}], True),
    ("skippedTiers", "x", True), ("ranOn", ["npu-host"], True),
])
def test_a_signed_predicate_of_an_odd_shape_is_judged_never_a_crash(field, value, trusted):
    odd = dict(predicate(), **{field: value})
    said = policy.judge(verification(odd), LABELS)
    assert (said == "") == trusted and "\n" not in said, said
    assert policy.judge(verification(odd), LABELS, policy.NPU_HOST)  # and never trusted as run on an NPU host
