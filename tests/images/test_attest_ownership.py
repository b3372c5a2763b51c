"""A digest is attested only by the run whose image it is: the engine's image ID is its config's
digest, so `attest.attest` refuses a pushed digest whose manifest names another config (another
run pushed the same name meanwhile) and signs nothing. A real registry on loopback; no engine."""

from __future__ import annotations

import json
import uuid

import pytest

from builder.errors import UserError
from builder.images import attest
from builder.registry import Registry
from builder.trust import attached, signing, statements
from tests.support.faults import push_tiny_image

REPO = f"ascend-build-test/ownership-{uuid.uuid4().hex[:8]}"


def test_a_digest_whose_image_is_another_runs_is_not_attested(registry, creds, keys):
    client = Registry(registry.host)
    digest, manifest = push_tiny_image(client, REPO, "cell-cpu")
    ours = json.loads(manifest)["config"]["digest"]
    key = signing.load_private(keys["team"][0])
    predicates = [(statements.VALIDATION_V1, {"verdict": "passed"})]
    pushed = f"{registry.host}/{REPO}:cell-cpu"

    with pytest.raises(UserError) as refused:
        attest.attest(pushed, digest, predicates, key, image_id="sha256:" + "b" * 64)
    assert f"is not the image this run tested (its config is {ours}, this run's image is sha256:{'b' * 64})" \
        in refused.value.message and "nothing was signed about it" in refused.value.message
    with pytest.raises(LookupError):
        client.manifest(REPO, attached.attestation_tag(digest))  # no statement attached

    attest.attest(pushed, digest, predicates, key, image_id=ours)  # its own image: attested
    assert client.manifest(REPO, attached.attestation_tag(digest)).data["subject"]["digest"] == digest


def _tiny(engine, folder, what: str) -> str:
    folder.mkdir()
    (folder / "Dockerfile").write_text("FROM scratch\nCOPY a.txt /a.txt\n")
    (folder / "a.txt").write_text(f"{what} {uuid.uuid4().hex}\n")
    return engine.build(folder, log_path=folder / "build.log")


@pytest.mark.engine
def test_a_name_another_run_takes_during_the_push_publishes_nothing_for_this_run(engine, registry, creds, tmp_path,
                                                                                 monkeypatch):
    """Two runs of one cell share the engine's names: the engine pushes what the name holds when it
    reads it. A run whose name was taken meanwhile records no digest (so attests nothing) and says why;
    its own image stays, by its ID."""
    from builder.images import image_run
    from builder.images.prepare import Options

    ours, theirs = _tiny(engine, tmp_path / "ours", "ours"), _tiny(engine, tmp_path / "theirs", "theirs")
    ref = f"ascend-build-test/ownership-{uuid.uuid4().hex[:8]}:cell-cpu"
    pushed = f"{registry.host}/{ref}"
    real_push = engine.push

    def other_run_retags_first(name, *args, **kwargs):
        engine.tag(theirs, name)  # the other run's tag_and_push, between ours and our push
        return real_push(name, *args, **kwargs)

    monkeypatch.setattr(engine, "push", other_run_retags_first)
    try:
        run = image_run.ImageRun("cell", ref, image_run.Outcome("cell", "cpu", status="passed"), Options(push=registry.host),
                                 engine, lambda line: None)
        out = image_run.tag_and_push(run, ours, ref)
        assert out.status == "error" and out.digests == {}
        assert f"{pushed} was given to another image ({theirs})" in out.message and "nothing is attested" in out.message
        assert engine.image_id(ours) == ours  # kept
    finally:
        for name in (ref, pushed):
            engine.untag(name)
        for image in (ours, theirs):
            engine.remove_if_unnamed(image)
