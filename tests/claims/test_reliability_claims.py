"""Claims of docs/reliability.md that no test without a Docker Engine held: each test here quotes
its claim and fails when the code behind it breaks. Where a registry is needed it is Debian's
docker-registry on loopback (the ``registry`` fixture), a fault proxy in front of it, or an HTTP
server on loopback answering from a script (tests/support/scripted.py) for answers no real
registry gives on cue.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from builder import bounded, registry as reg_module
from builder.errors import UserError
from builder.registry import OCI_MANIFEST, Registry
from tests.support.faults import FaultProxy
from tests.support.promptly import refused_promptly
from tests.support.scripted import Scripted

DIGEST = "sha256:" + "a" * 64


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    """Nothing in the environment or a Docker config: the client is anonymous."""
    monkeypatch.delenv("ASCEND_BUILD_REGISTRY_USER", raising=False)
    monkeypatch.delenv("ASCEND_BUILD_REGISTRY_PASSWORD", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))


@pytest.fixture
def scripted():
    """scripted(script) -> a started `Scripted` server, stopped at the test's end."""
    started = []

    def start(script) -> Scripted:
        started.append(Scripted(script))
        return started[-1]
    yield start
    for server in started:
        server.stop()


@pytest.fixture
def sleeps(monkeypatch):
    """The registry client's waits, recorded and not slept: a wait it should not make fails the test
    at once instead of holding it for the hour a registry asked."""
    made: list = []
    monkeypatch.setattr(reg_module.time, "sleep", made.append)
    return made


def _image_answers(config: bytes, served_config: bytes) -> dict:
    """A registry's answers for ``r:t``: a manifest naming ``config`` by its digest, and
    ``served_config`` as the bytes of that blob."""
    config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
    manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                      "digest": config_digest, "size": len(config)},
                           "layers": []}).encode()
    manifest_digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    return {("GET", r"/v2/r/manifests/t$"): [(200, {"Content-Type": OCI_MANIFEST,
                                                    "Docker-Content-Digest": manifest_digest}, manifest)],
            ("GET", rf"/v2/r/blobs/{config_digest}$"): [(200, {}, served_config)]}


# --- Hostile inputs: "Every manifest and config is checked against its digest." --------------


def test_a_config_whose_bytes_are_not_its_digest_is_never_read_for_labels(no_credentials, scripted):
    """reliability.md, Hostile inputs: "Every manifest and config is checked against its digest."
    A registry serving other bytes under a config's digest (labels saying "validated") is refused;
    the same answers with the config's own bytes are read."""
    genuine = json.dumps({"architecture": "amd64", "config": {"Labels": {"io.ascend-build.validated": "false"}}}).encode()
    forged = json.dumps({"architecture": "amd64", "config": {"Labels": {"io.ascend-build.validated": "true"}}}).encode()
    altered = scripted(_image_answers(genuine, forged))
    with pytest.raises(UserError, match=r"the config blob sha256:[0-9a-f]{64} of r does not hash to its digest"):
        Registry(altered.host).inspect("r", "t", "x86_64")
    honest = scripted(_image_answers(genuine, genuine))
    info = Registry(honest.host).inspect("r", "t", "x86_64")
    assert info is not None and info.labels == {"io.ascend-build.validated": "false"}


def test_a_manifest_that_is_not_the_digest_the_registry_announced_is_refused(no_credentials, scripted):
    """reliability.md, Registries that fail: "A manifest is checked against the digest it was asked
    by, or the one the registry announced." Served for a tag with a Docker-Content-Digest its bytes
    do not hash to, it is refused; with the digest of its bytes, it is read."""
    body = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "layers": []}).encode()
    actual = "sha256:" + hashlib.sha256(body).hexdigest()
    lying = scripted({("GET", r"/v2/r/manifests/t$"): [(200, {"Content-Type": OCI_MANIFEST,
                                                               "Docker-Content-Digest": DIGEST}, body)]})
    with pytest.raises(UserError, match=f"hashes to {actual}, not {DIGEST}: the registry served other bytes than the "
                                        "digest it announced"):
        Registry(lying.host).manifest("r", "t")
    honest = scripted({("GET", r"/v2/r/manifests/t$"): [(200, {"Content-Type": OCI_MANIFEST,
                                                                "Docker-Content-Digest": actual}, body)]})
    assert Registry(honest.host).manifest("r", "t").digest == actual


# --- Registries that fail ---------------------------------------------------------------------


@pytest.mark.parametrize("status", reg_module.TRANSIENT_STATUS)
def test_each_transient_status_is_retried(status, no_credentials, scripted, sleeps):
    """reliability.md, Registries that fail: "retries after HTTP 429, 500, 502, 503, 504 or a
    connection reset" (the reset: tests/test_registry_faults.py)."""
    assert reg_module.TRANSIENT_STATUS == (429, 500, 502, 503, 504)
    server = scripted({("GET", r"/v2/r/tags/list$"): [(status, {}, b""), (200, {}, b'{"tags": ["v1"]}')]})
    assert Registry(server.host).tags("r") == ["v1"]
    assert server.count("GET", r"/tags/list$") == 2 and sleeps == [reg_module.BACKOFF]


@pytest.mark.parametrize("status", [400, 501, 505])
def test_another_status_is_not_retried(status, no_credentials, scripted, sleeps):
    """reliability.md, Registries that fail: only the statuses named are retried; any other answer
    is an error at once."""
    server = scripted({("GET", r"/v2/r/tags/list$"): [(status, {}, b""), (200, {}, b'{"tags": ["v1"]}')]})
    with pytest.raises(UserError, match=f"answered HTTP {status} for GET /v2/r/tags/list"):
        Registry(server.host).tags("r")
    assert server.count("GET", r"/tags/list$") == 1 and sleeps == []


@pytest.mark.parametrize("retry_after, deadline, why", [
    ("3600", None, "asked to retry after 3600 s, more than the 60 s waited for"),
    ("61", None, "asked to retry after 61 s, more than the 60 s waited for"),
    ("30", 5, "asked to retry after 30 s, past the command's deadline"),
])
def test_a_retry_after_too_long_is_not_waited_for(retry_after, deadline, why, no_credentials, scripted, sleeps):
    """reliability.md, Registries that fail: "a `Retry-After` of more than 60 s, or past the
    command's `--deadline`, is not waited for: the command stops at once and says so"."""
    server = scripted({("GET", r"/v2/r/tags/list$"): [(429, {"Retry-After": retry_after}, b"")]})
    with pytest.raises(UserError) as stopped, bounded.command_deadline(deadline):
        Registry(server.host).tags("r")
    assert why in stopped.value.message and sleeps == []  # no wait made at all
    assert server.count("GET", r"/tags/list$") == 1


def test_a_retry_after_within_the_bounds_is_waited_for_as_asked(no_credentials, scripted, sleeps):
    """reliability.md, Registries that fail: "... or after the `Retry-After` the registry names"."""
    server = scripted({("GET", r"/v2/r/tags/list$"): [(503, {"Retry-After": "7"}, b""), (200, {}, b'{"tags": []}')]})
    assert Registry(server.host).tags("r") == []
    assert sleeps == [7.0]


@pytest.fixture
def proxy(registry):
    p = FaultProxy(registry.host)
    yield p
    p.stop()


def test_a_small_upload_whose_post_failed_is_made_again_whole_from_its_head(registry, proxy, monkeypatch):
    """reliability.md, Registries that fail: "an upload session's own POST and PUT are never
    repeated alone" and "a blob's whole upload (again from its HEAD ...)" is retried: `put_blob`
    (attachments) after a 503 to its POST asks HEAD again before its next POST."""
    monkeypatch.setattr(reg_module, "BACKOFF", 0.05)
    through = Registry(proxy.host, registry.username, registry.password)
    repository = f"claims/post-{uuid.uuid4().hex[:8]}"
    through.tags(repository)  # the 401 challenge of the pull scope behind us
    data = b"statement " + uuid.uuid4().hex.encode()
    proxy.plan("POST", r"/blobs/uploads/$", ["503"])

    digest = through.put_blob(repository, data)

    assert digest == "sha256:" + hashlib.sha256(data).hexdigest()
    assert proxy.count("POST", r"/blobs/uploads/$") == 2 and proxy.count("PUT", r"/blobs/uploads/") == 1
    assert proxy.count("HEAD", r"/blobs/sha256:") == 2 + 1  # one per whole try, + the push scope's 401 challenge
    assert Registry(registry.host, registry.username, registry.password).blob(repository, digest) == data


def test_a_manifest_the_registry_stores_under_another_digest_reports_no_digest(no_credentials, scripted):
    """reliability.md, Registries that fail: "a write reports a digest only once the registry
    confirmed it": a registry that says it stored other bytes than the ones sent gets no digest
    reported; one that confirms the digest sent does."""
    body = b'{"schemaVersion": 2}'
    sent = "sha256:" + hashlib.sha256(body).hexdigest()
    other = scripted({("PUT", r"/v2/r/manifests/t$"): [(201, {"Docker-Content-Digest": DIGEST}, b"")]})
    with pytest.raises(UserError, match=f"stored the manifest for r:t as {DIGEST}, not {sent}"):
        Registry(other.host).put_manifest("r", "t", body, OCI_MANIFEST)
    confirming = scripted({("PUT", r"/v2/r/manifests/t$"): [(201, {"Docker-Content-Digest": sent}, b"")]})
    assert Registry(confirming.host).put_manifest("r", "t", body, OCI_MANIFEST) == sent


def test_a_streamed_blob_the_registry_stores_under_another_digest_counts_as_not_sent(no_credentials, scripted):
    """reliability.md, Registries that fail: "a write reports a digest only once the registry
    confirmed it", for the streamed upload `mirror` makes."""
    data = b"layer bytes"
    sent = "sha256:" + hashlib.sha256(data).hexdigest()

    def server(stored: str) -> Scripted:
        return scripted({("HEAD", rf"/v2/r/blobs/{sent}$"): [(404, {}, b"")],
                         ("POST", r"/v2/r/blobs/uploads/$"): [(202, {"Location": "/v2/r/blobs/uploads/u1"}, b"")],
                         ("PUT", r"/v2/r/blobs/uploads/u1$"): [(201, {"Docker-Content-Digest": stored}, b"")]})

    def stream():
        import contextlib
        import io
        return contextlib.nullcontext(io.BytesIO(data))

    other = server(DIGEST)
    with pytest.raises(UserError, match=f"stored the blob {sent} of r as {DIGEST}"):
        Registry(other.host).put_blob_stream("r", sent, len(data), stream)
    [put] = [s for s in other.seen if s.method == "PUT"]
    assert put.body == data  # the bytes went; the registry's word on them was not taken
    assert Registry(server(sent).host).put_blob_stream("r", sent, len(data), stream) == len(data)


# --- Hostile inputs: each answer's deadline ---------------------------------------------------


def test_each_answer_has_the_deadline_the_page_names():
    """reliability.md, Hostile inputs: "Network answers have a size limit and a deadline over the
    whole answer ...: 120 s for a registry request, 300 s for a package index answer." (That the
    deadline cuts a trickle: tests/test_registry.py and tests/test_bounded.py, with short ones.)"""
    from builder.releases import http_client

    assert Registry("127.0.0.1:5000").deadline == reg_module.DEADLINE == 120
    assert http_client.DEADLINE == 300


# --- Hostile inputs: "Files are read only when regular ... and within a size bound" ------------


@pytest.mark.parametrize("kind", ["public", "private"])
def test_a_key_file_that_is_a_fifo_is_refused_not_waited_on(kind, tmp_path, monkeypatch):
    """reliability.md, Hostile inputs: "Files are read only when regular (a FIFO is refused, not
    waited on) and within a size bound: ... key files ..." """
    import os

    from builder.trust import signing

    monkeypatch.delenv(signing.PASSPHRASE_ENV, raising=False)
    fifo = tmp_path / f"team.{'pub' if kind == 'public' else 'key'}"
    os.mkfifo(fifo)
    load = signing.load_public if kind == "public" else signing.load_private
    refused = refused_promptly(lambda: load(fifo), fifo)
    assert refused.exit_code == 2 and f"cannot read the {kind} key {fifo}: not a regular file" in refused.message


def test_a_key_file_is_read_no_further_than_its_bound(tmp_path, monkeypatch):
    """reliability.md, Hostile inputs: key files are read "within a size bound": a genuine public key
    written after 70,000 bytes of padding lies past the 64 KiB read, and is not found there."""
    from builder.trust import signing

    monkeypatch.delenv(signing.PASSPHRASE_ENV, raising=False)
    _, public = signing.generate(tmp_path / "keys", "team")
    assert signing.load_public(public) is not None
    padded = tmp_path / "padded.pub"
    padded.write_bytes(b"#" * 70_000 + b"\n" + public.read_bytes())
    with pytest.raises(UserError, match="is not a PEM public key"):
        signing.load_public(padded)


def test_a_lock_that_is_a_fifo_is_refused_not_waited_on_nor_taken_for_no_lock(tmp_path):
    """reliability.md, Hostile inputs: "Files are read only when regular (a FIFO is refused, not
    waited on) ...: ... locks". A FIFO where a cell's lock goes is no lock to build from, nor
    the absence of one: it is refused by name."""
    import os

    from builder.images import lock

    fifo = tmp_path / lock.LOCK_FILE
    os.mkfifo(fifo)
    refused = refused_promptly(lambda: lock.read(tmp_path), fifo)
    assert f"{fifo} is not a regular file" in refused.message and refused.exit_code == 1


def test_a_lock_is_read_no_further_than_its_bound(tmp_path, monkeypatch):
    """reliability.md, Hostile inputs: locks are read "within a size bound" (16 MiB), whatever
    their size said when it was looked at: a lock that grows after its size is checked is read
    only to the bound, never whole."""
    from builder import bounded
    from builder.images import lock

    path = tmp_path / lock.LOCK_FILE
    path.write_text("# inputs: -\n")
    asked = []
    real = bounded.read_file

    def counted(target, limit):
        asked.append(limit)
        return real(target, limit)
    monkeypatch.setattr(bounded, "read_file", counted)
    with pytest.raises(UserError):  # a lock of no entries is damaged (A lock cut short)
        lock.read(tmp_path)
    assert asked == [lock.MAX_LOCK_BYTES + 1]


# --- Killed at any point: "The rerun takes over the staged files and folders" -----------------


def test_the_rerun_removes_what_a_killed_render_left_staged_even_for_a_cell_it_no_longer_writes(tmp_path):
    """reliability.md, Killed at any point: a new cell folder "is staged whole under a temporary
    name (`.<cell>.ascend-build-tmp`) ... The rerun takes over the staged files and folders":
    a staged folder of a cell the matrix no longer has, and a staged file beside a cell's
    Dockerfile, are gone after the next render; a folder of the user's is not."""
    from builder import writes
    from builder.images import matrix, render
    from tests.support.matrix import SHIPPED_MATRIX

    rendered = render.render_all(matrix.load(SHIPPED_MATRIX).cells)
    out = tmp_path / "out"
    render.write(rendered, out)
    cell = sorted(rendered)[0]
    gone = out / f".cann0.0.0-gone{writes.TMP_SUFFIX}"  # a killed run's new cell, since dropped from the matrix
    gone.mkdir()
    (gone / "Dockerfile").write_bytes(b"FROM half\n")
    half = writes.temporary_name(out / cell / "Dockerfile")  # a killed run's staged file
    half.write_bytes(b"FROM half\n")
    (out / "notes").mkdir()  # the user's

    render.write(rendered, out)

    assert not gone.exists() and not half.exists() and (out / "notes").is_dir()
    assert render.stale(rendered, out) == []


# --- Deadlines: "Networked commands" ----------------------------------------------------------


class _Deadline(Exception):
    """Raised by a spy once it has seen the command's deadline in force: the command goes no further."""


@pytest.fixture
def deadline_seen(monkeypatch):
    """deadline_seen(module, name) -> the list the spy put in place of ``module.name`` fills with
    `bounded.command_limit()`'s seconds when the command calls it (and stops there)."""
    def spy(module, name):
        seen: list = []

        def record(*args, **kwargs):
            limit = bounded.command_limit()
            seen.append(None if limit is None else limit[1])
            raise _Deadline()
        monkeypatch.setattr(module, name, record)
        return seen
    monkeypatch.delenv(bounded.DEADLINE_ENV, raising=False)
    return spy


def _invoke(*args: str):
    from typer.testing import CliRunner

    from builder import cli

    return CliRunner().invoke(cli.app, list(args))


@pytest.mark.parametrize("given, expected", [((), 6 * 3600.0), (("--deadline", "7"), 7.0), (("--deadline", "0"), None)])
def test_mirror_runs_within_its_deadline_six_hours_by_default(given, expected, deadline_seen, tmp_path):
    """reliability.md, Deadlines: "`pull`, `verify`, `index`, `mirror`, `lock` ... finish within
    `--deadline SECONDS` ... The default is 900 s, six hours for `lock` and `mirror`. `0` leaves
    only each answer's own deadline." """
    from builder.node import mirror

    seen = deadline_seen(mirror, "mirror")
    done = _invoke("mirror", "127.0.0.1:9/team/pytorch", f"oci:{tmp_path / 'layout'}", *given)
    assert isinstance(done.exception, _Deadline) and seen == [expected]


@pytest.mark.parametrize("given, expected", [((), 6 * 3600.0), (("--deadline", "7"), 7.0)])
def test_lock_runs_within_its_deadline_six_hours_by_default(given, expected, deadline_seen, tmp_path):
    """reliability.md, Deadlines: the default is "six hours for `lock`"."""
    from builder.images import relock
    from tests.support.matrix import SHIPPED_MATRIX

    seen = deadline_seen(relock, "run")
    done = _invoke("lock", "--matrix", str(SHIPPED_MATRIX), "--out", str(tmp_path / "out"), *given)
    assert isinstance(done.exception, _Deadline) and seen == [expected]


@pytest.mark.parametrize("given, expected", [((), 900.0), (("--deadline", "7"), 7.0)])
def test_pull_runs_within_its_deadline_900_s_by_default(given, expected, deadline_seen, tmp_path):
    """reliability.md, Deadlines: "The default is 900 s" (`pull`; `verify`, `index`, `releases` share
    the option and its default: tests/test_registry.py, tests/releases/test_releases.py)."""
    from builder.node import pull

    seen = deadline_seen(pull, "pick")
    done = _invoke("pull", "--cann", "8.0.RC3", "--registry", "127.0.0.1:9", "--root", str(tmp_path), *given)
    assert isinstance(done.exception, _Deadline) and seen == [expected]


def test_mirror_from_a_stalling_registry_stops_at_its_deadline_naming_what_it_waited_on(registry, creds, proxy, tmp_path):
    """reliability.md, Deadlines: networked commands (`mirror` here) "finish within `--deadline
    SECONDS` (or `ASCEND_BUILD_DEADLINE`), or stop with exit 1 naming what they were waiting on"."""
    import os
    import subprocess
    import sys

    from tests.support import trust as ht

    repository = f"claims/mirror-{uuid.uuid4().hex[:8]}"
    ht.put_tiny_image(Registry(registry.host), repository, ht.TAG)
    proxy.plan("GET", r"/manifests/", always="stall")
    cli = str(Path(sys.executable).with_name("ascend-build"))
    for how in ("option", "variable"):
        env = {**os.environ, **creds}
        args = [cli, "mirror", f"{proxy.host}/{repository}", f"oci:{tmp_path / how}"]
        if how == "option":
            args += ["--deadline", "3"]
        else:
            env[bounded.DEADLINE_ENV] = "3"
        start = time.monotonic()
        done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=60)
        elapsed = time.monotonic() - start
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert "the command's deadline of 3 s passed, waiting on" in done.stderr and "/manifests/" in done.stderr
        assert elapsed < 3 + 10, elapsed  # the start of a Python process and the registry's, no more


def test_a_uv_run_lock_waits_for_ends_at_the_commands_deadline(tmp_path):
    """reliability.md, Deadlines: "The deadline bounds every answer they read and every `uv` run
    `lock` waits for." A uv that never answers is given up at the command's deadline, named."""
    import sys

    from builder.images import lock

    hung = [sys.executable, "-c", "import time; time.sleep(30)"]  # a uv that never ends (arguments ignored)
    inputs = lock.Inputs(cell="c", python="3.11", platform="x86_64-manylinux_2_35", requirements=("six",),
                         constraints=(), torch_index="")
    start = time.monotonic()
    with pytest.raises(bounded.DeadlinePassed) as late, bounded.command_deadline(2):
        lock._compile(hung, inputs, ["six"], [], [], None, None)
    assert time.monotonic() - start < 10
    assert late.value.message == "the command's deadline of 2 s passed, waiting on uv resolving cell c"


# --- Hostile inputs: "Numbers of any length" --------------------------------------------------


@pytest.mark.parametrize("kind, text", [("cann", "8.0.RC1234567890"), ("cann", "1234567890.0.RC1"),
                                        ("hdk", "24.1.1234567890"), ("firmware", "7.5.0.1.1234567890")])
def test_an_ascend_version_part_of_ten_digits_is_a_version_error(kind, text):
    """reliability.md, Hostile inputs: "Ascend version parts of more than 9 digits are version
    errors." (Nine still read: tests/test_versions.py.)"""
    from builder import versions

    with pytest.raises(versions.VersionError):
        getattr(versions, kind)(text)
    assert versions.lenient(kind, text) is None


@pytest.mark.parametrize("wanted", ["\u0661", "0,\u0663", "\u00b9", "1" * 5000])
def test_devices_of_other_scripts_or_any_length_are_no_device_numbers(wanted):
    """reliability.md, Hostile inputs: "What is read as a number from text ... is a bounded run of
    ASCII digits. A longer one, or digits of another script, is no number." `--devices ١` (an
    Arabic-Indic one) names no NPU 1."""
    from builder import devices

    with pytest.raises(UserError, match="is not a list of numbers") as refused:
        devices.choose([0, 1, 3], wanted)
    assert refused.value.exit_code == 2
    assert devices.choose([0, 1, 3], "0, 3") == [0, 3]


# --- Hostile inputs: "OCI layouts" ------------------------------------------------------------


def test_a_link_planted_at_a_partial_blobs_name_after_its_removal_is_never_written_through(tmp_path, monkeypatch):
    """reliability.md, OCI layouts: "a blob is written under a name created anew (`O_EXCL`,
    `O_NOFOLLOW`; a link planted there is removed, its target untouched)": a link planted in the
    instant between that removal and the open (a race lost) makes the write fail; its target
    keeps its bytes."""
    import contextlib
    import io
    import os
    import pathlib

    from builder.node import oci_layout

    body = b"a layer's bytes"
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    layout = oci_layout.Layout(tmp_path / "carry", create=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    final = layout.path(digest)
    final.parent.mkdir(parents=True, exist_ok=True)
    final.with_name(oci_layout._TMP + final.name).write_bytes(b"a killed run's part")  # to be removed first
    real_unlink = os.unlink
    planted: list = []  # the name a link was planted at, once

    def racing(path, *args, **kwargs):
        real_unlink(path, *args, **kwargs)
        if pathlib.Path(path).name.startswith(oci_layout._TMP) and not planted:
            planted.append(path)
            os.symlink(victim, path)  # the other side of the race, right after the removal
    monkeypatch.setattr(os, "unlink", racing)
    with pytest.raises(UserError):
        layout.put_blob(digest, len(body), lambda: contextlib.nullcontext(io.BytesIO(body)))
    monkeypatch.undo()
    assert victim.read_text() == "keep me" and not layout.has_blob(digest, len(body))


def test_a_layouts_blob_that_is_a_fifo_is_refused_not_waited_on(tmp_path):
    """reliability.md, Hostile inputs: "Files are read only when regular (a FIFO is refused, not
    waited on) and within a size bound: ... a layout's blobs": a manifest or config blob."""
    import os

    from builder.node import oci_layout

    layout = oci_layout.Layout(tmp_path / "carry", create=True)
    fifo = layout.path(DIGEST)
    os.mkfifo(fifo)
    refused = refused_promptly(lambda: layout.blob("any", DIGEST), fifo)
    assert f"cannot read the blob {DIGEST}" in refused.message
    assert not layout.has_blob(DIGEST, 10)


def test_a_layouts_layer_blob_that_is_a_fifo_is_refused_not_waited_on(tmp_path):
    """reliability.md, Hostile inputs: "... a layout's blobs": the layers `mirror` streams out of a
    layout (`open_blob`) too."""
    import os

    from builder.node import oci_layout

    layout = oci_layout.Layout(tmp_path / "carry", create=True)
    fifo = layout.path(DIGEST)
    os.mkfifo(fifo)

    def stream():
        with layout.open_blob(DIGEST, 10) as blob:
            blob.read()
    refused_promptly(stream, fifo, seconds=3)


# --- Hostile inputs: "Output": the comment header of a manifest -------------------------------

INJECTED = "\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: injected}\n# "


@pytest.fixture(scope="module")
def npu_image(registry, creds, keys):
    """(registry/repository, the team's signed NPU image of CANN 8.0.RC3's cell) in the loopback registry."""
    from builder.images import attest
    from builder.trust import signing
    from builder.vocabulary import NPU, tier_names
    from tests.support import mirror as hm
    from tests.support import trust as ht
    from tests.support.images import cell_8_0_rc3, pipeline_labels

    repository = f"claims/k8s-{uuid.uuid4().hex[:8]}"
    cell = cell_8_0_rc3()
    labels = pipeline_labels(cell)
    digest = hm.push_image(Registry(registry.host), repository, "fits", labels, b"fits")
    predicates = attest.statements_for(ht.report(), tier_names(), cell.id, NPU, labels["io.ascend-build.content-hash"], None)
    attest.attest(f"{registry.host}/{repository}:fits", digest, predicates, signing.load_private(keys["team"][0]))
    return f"{registry.host}/{repository}", digest


def _k8s(where: str, creds, *args: str) -> subprocess.CompletedProcess:
    import os
    import sys

    cli = str(Path(sys.executable).with_name("ascend-build"))
    done = subprocess.run([cli, "k8s", *args[:1], "--registry", where, "--cann", "8.0.RC3", *args[1:]],
                          capture_output=True, text=True, env={**os.environ, **creds}, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return done


def _one_comment_line_each(text: str, manifests: int) -> None:
    """``text`` is comment lines and ``manifests`` YAML documents, none of them injected."""
    import yaml

    documents = list(yaml.safe_load_all(text))
    assert len(documents) == manifests and all(d.get("kind") != "ConfigMap" for d in documents)
    assert "\\u000a---\\u000aapiVersion: v1\\u000akind: ConfigMap" in text
    assert not [line for line in text.splitlines() if line.startswith(("kind: ConfigMap", "metadata: {name: injected"))]


def test_a_node_name_in_the_job_header_adds_no_line_and_no_document(npu_image, creds, tmp_path):
    """reliability.md, Output: "The comment header of a Kubernetes manifest (`k8s job`, `k8s
    prepull`) writes every line break, control or format character of its text as `\\uXXXX`
    ..., so a node name or key path adds no line and no document to the manifest." The pool's
    node with the lowest driver, named in the header, is named with a YAML document in its name."""
    from tests.support.k8s import POOL_910B

    where, _ = npu_image
    pool = json.loads(POOL_910B.read_text())
    for node in pool["items"]:
        node["metadata"]["name"] += INJECTED
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps(pool))
    done = _k8s(where, creds, "job", "--nodes", str(nodes), "--npus", "8", "--prepull", "--", "python", "t.py")
    assert "lowest driver on npu-" in done.stdout
    _one_comment_line_each(done.stdout, 2)  # the Job and its DaemonSet


def test_a_key_path_in_the_prepull_header_adds_no_line_and_no_document(npu_image, creds, keys, tmp_path):
    """reliability.md, Output: the comment header of `k8s prepull` names the key its statement
    verified with; a key path holding a YAML document adds nothing to the manifest."""
    import shutil

    from tests.support.k8s import POOL_910B

    where, digest = npu_image
    folder = tmp_path / f"keys{INJECTED}x"
    folder.mkdir()
    key = folder / "team.pub"
    shutil.copy(keys["team"][1], key)
    done = _k8s(where, creds, "prepull", "--nodes", str(POOL_910B), "--trust-key", str(key))
    assert f"{where}@{digest}" in done.stdout and "verifies with" in done.stdout
    _one_comment_line_each(done.stdout, 1)


# --- Deadlines: "Smoke tests" -----------------------------------------------------------------


def test_a_hung_tier_fails_with_the_stack_of_every_thread_of_its_process(tmp_path):
    """reliability.md, Deadlines: "Every tier has a deadline. A hung or crashed tier fails with
    every thread's stack and the report of the tiers before it." The versions tier hangs (its
    platform.python_version() never returns) after starting a second thread: both stacks are in
    the failed tier's details. The smoke program is standard library only: this Python runs it."""
    import os
    import platform
    import sys

    from tests.support.matrix import REPO

    smoke = REPO / "builder" / "smoke" / "smoke.py"
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({
        "schema": 1, "framework": "pytorch", "cell": "test-cpu", "variant": "cpu", "os": "debian12", "arch": "x86_64",
        "chip": None, "python_version": ".".join(platform.python_version().split(".")[:2]), "torch_version": "2.13.0",
        "torch_npu_version": None, "cann_version": None, "min_driver": None, "min_firmware": None,
        "env": {}, "content_hash": "0" * 64}))
    hanging = tmp_path / "hanging_versions.py"
    hanging.write_text(
        "import os, platform, runpy, sys, threading, time\n"
        "program, real = os.getpid(), platform.python_version\n"
        "def another_thread_of_the_tier():\n    time.sleep(600)\n"
        "def python_version_that_hangs():\n"
        "    if os.getpid() == program:\n        return real()\n"  # only in the tier process the program forks
        "    threading.Thread(target=another_thread_of_the_tier, daemon=True).start()\n"
        "    time.sleep(600)\n"
        "platform.python_version = python_version_that_hangs\n"
        f"sys.argv = [{str(smoke)!r}] + sys.argv[1:]\n"
        f"runpy.run_path({str(smoke)!r}, run_name='__main__')\n")
    start = time.monotonic()
    done = subprocess.run([sys.executable, str(hanging), "--manifest", str(manifest), "--device", "cpu",
                           "--tiers", "versions", "--tier-seconds", "versions=2"],
                          capture_output=True, text=True, timeout=60, env=dict(os.environ, ASCEND_BUILD_SMOKE_TEST="1"))
    assert time.monotonic() - start < 20, done.stderr
    report = json.loads(done.stdout)
    [versions] = report["tiers"]
    assert done.returncode == 1 and report["passed"] is False and versions["status"] == "failed"
    assert versions["summary"].startswith("versions did not finish within 2 s (its deadline): hung in ")
    stacks = versions["details"]["stacks"]
    assert "in python_version_that_hangs" in stacks and "in another_thread_of_the_tier" in stacks, stacks


def test_every_tier_has_a_deadline_by_default():
    """reliability.md, Deadlines: "Every tier has a deadline": without --tier-seconds, each tier's
    is its `vocabulary.tier(name).seconds`, times --timeout-scale (the pipeline passes 4 under qemu)."""
    from builder import vocabulary
    from builder.smoke import smoke

    plain, scaled = smoke.parse_args([]), smoke.parse_args(["--timeout-scale", "4"])
    for tier in vocabulary.tier_names():
        assert 0 < smoke.deadline_of(tier, plain) == vocabulary.tier(tier).seconds < 3600
        assert smoke.deadline_of(tier, scaled) == 4 * vocabulary.tier(tier).seconds
    assert smoke.deadline_of("train", smoke.parse_args(["--tier-seconds", "train=7"])) == 7


# --- Deadlines: "Docker Engine's streams"; Registries that fail: `Engine.push` ------------------
# A stand-in for the engine's API on loopback (tests/support/fake_engine.py), spoken to by the real
# docker SDK: an engine that goes silent or trickles progress for ever cannot be had on cue.

REF = "reg.local:5000/team/pytorch:cell-cpu"


@pytest.fixture
def fake_engine():
    """fake_engine(push=[...], pull=[...], timeout=300) -> (the stand-in, an Engine connected to it)."""
    import docker

    from builder.engine import Engine
    from tests.support.fake_engine import FakeEngine

    made = []

    def start(push=("ok",), pull=("ok",), timeout: int = 300):
        fake = FakeEngine(push=push, pull=pull)
        made.append(fake)
        return fake, Engine(docker.DockerClient(base_url=fake.url, timeout=timeout), fake.url)
    yield start
    for fake in made:
        fake.stop()


@pytest.mark.timeout(60)  # a stream never cut fails here, not at the suite's bound
@pytest.mark.parametrize("how", ["silent", "trickle", "headless"])
def test_a_push_through_the_engine_is_cut_at_the_commands_deadline(how, fake_engine):
    """reliability.md, Deadlines: "A push or pull through the engine within a deadline is cut at that
    instant, whether the engine is silent or trickles progress: the connection the SDK answers on is
    shut (`Engine._streaming`), and the engine cancels the transfer. The push ends with `push of REF
    to HOST stalled: the command's deadline of N s passed before the engine finished the push; no
    digest was reported, so nothing counts as published (the engine's push was cancelled)`". An
    engine that sends not even its answer's head is cut there too (the client's read limit, cut to
    the deadline)."""
    fake, engine = fake_engine(push=[how])
    start = time.monotonic()
    with pytest.raises(UserError) as stalled, bounded.command_deadline(2):
        engine.push(REF)
    took = time.monotonic() - start
    assert stalled.value.message == (
        f"push of {REF} to reg.local:5000 stalled: the command's deadline of 2 s passed before the engine finished "
        "the push; no digest was reported, so nothing counts as published (the engine's push was cancelled)")
    assert 1.9 <= took < 2 + 4, took  # (the slack: a loaded machine's thread wake-ups)
    [cut] = fake.cuts()  # the engine saw its client shut the connection, at the deadline: it cancels the push
    assert cut is not None and 1.5 <= cut < 2 + 4
    assert fake.count("push") == 1  # a cut push is not tried again


@pytest.mark.timeout(60)  # a stream never cut fails here, not at the suite's bound
@pytest.mark.parametrize("how", ["silent", "trickle"])
def test_a_pull_through_the_engine_is_cut_at_the_commands_deadline(how, fake_engine):
    """reliability.md, Deadlines: "A pull ends with `pull of REF stalled: ...`, nothing pulled."."""
    fake, engine = fake_engine(pull=[how])
    ref = "reg.local:5000/team/pytorch@" + "sha256:" + "1" * 64
    start = time.monotonic()
    with pytest.raises(UserError) as stalled, bounded.command_deadline(2):
        engine.pull(ref)
    assert stalled.value.message == (f"pull of {ref} stalled: the command's deadline of 2 s passed before the engine "
                                     "finished the pull (the engine's pull was cancelled)")
    assert time.monotonic() - start < 2 + 4 and fake.cuts()[0] is not None


@pytest.mark.timeout(60)  # a stream never cut fails here, not at the suite's bound
def test_without_a_deadline_a_silent_push_ends_at_the_clients_read_limit(fake_engine, monkeypatch):
    """reliability.md, Registries that fail: "with `--push-deadline 0`, after the engine client's read
    limit (300 s) with `push of REF to HOST stalled: the engine reported no progress for 300 s; ...`,
    not a traceback": the limit is the client's (1 s here; `Engine.connect` gives it 300 s)."""
    from builder.engine import Engine
    from tests.support.fake_engine import FakeEngine

    fake, engine = fake_engine(push=["silent"], timeout=1)
    with pytest.raises(UserError) as stalled, bounded.command_deadline(0):
        engine.push(REF)
    assert stalled.value.message == (f"push of {REF} to reg.local:5000 stalled: the engine reported no progress for "
                                     "1 s; no digest was reported, so nothing counts as published")
    assert fake.count("push") == 1
    ours = FakeEngine()
    try:
        monkeypatch.setenv("DOCKER_HOST", ours.url)
        assert Engine.connect().client.api.timeout == 300
    finally:
        ours.stop()


@pytest.mark.timeout(60)  # a stream never cut fails here, not at the suite's bound
def test_the_engines_retries_wait_no_longer_than_the_deadline(fake_engine):
    """reliability.md, Registries that fail: "`Engine.push` retries a 5xx 3 times with backoff (a wait
    past the deadline is not made)". Its waits are 1, 2 and 4 s; under a deadline of 1.2 s the second
    is cut to what is left (0.2 s), not made whole: the push stops at the deadline (not at 3 s),
    naming what it waited on."""
    fake, engine = fake_engine(push=["fail"])
    start = time.monotonic()
    with pytest.raises(bounded.DeadlinePassed) as late, bounded.command_deadline(1.2):
        engine.push(REF)
    assert time.monotonic() - start < 1.2 + 1.4  # a second wait made whole ends at 1 + 2 = 3 s
    assert late.value.message == f"the command's deadline of 1.2 s passed, waiting on the push of {REF} to reg.local:5000"
    assert fake.count("push") == 2


def test_a_push_that_keeps_failing_reports_an_error_no_digest_and_keeps_the_image_tagged(fake_engine, monkeypatch, tmp_path):
    """reliability.md, Registries that fail: "When every try fails, the push step reports an error and
    no digest, and keeps the sealed image under its tags." (4 tries: the first and 3 retries.)"""
    from builder import engine as engine_module
    from builder.images import image_run
    from builder.images.prepare import Options

    monkeypatch.setattr(engine_module.time, "sleep", lambda seconds: None)  # the backoff's 1 + 2 + 4 s
    fake, engine = fake_engine(push=["fail"])
    out = image_run.Outcome("cell", "cpu", status="passed")
    run = image_run.ImageRun("cell-cpu", "cell-cpu", out, Options(push="reg.local:5000/team", state_dir=tmp_path), engine,
                             lambda line: None)
    done = image_run.tag_and_push(run, "sha256:" + "e" * 64, "cell-cpu")
    assert fake.count("push") == 4
    assert done.status == "error" and done.digests == {}
    assert done.message.startswith("push of reg.local:5000/team/cell-cpu to reg.local:5000 failed: received unexpected "
                                   "HTTP status: 503")
    assert "(kept locally as cell-cpu, reg.local:5000/team/cell-cpu)" in done.message
    assert done.tags == ["cell-cpu", "reg.local:5000/team/cell-cpu"]
    assert not [r for r in fake.requests if r.startswith("DELETE")]  # no tag taken off


@pytest.mark.timeout(60)  # a stream never cut fails here, not at the suite's bound
def test_a_push_stalled_past_the_push_deadline_keeps_the_image_and_publishes_nothing(fake_engine, tmp_path):
    """reliability.md, Deadlines: "`image --push` ... give each image's push through Docker Engine ...
    `--push-deadline SECONDS`"; a push it cuts: "the image stays sealed and tagged here (`kept
    locally as ...`), and no statement or index is made for it"."""
    from builder.images import image_run, pipeline
    from builder.images.prepare import Options
    from builder.trust import signing

    fake, engine = fake_engine(push=["trickle"])
    options = Options(push="reg.local:5000/team", state_dir=tmp_path, push_deadline=2,
                      sign_key=signing.generate(tmp_path / "keys", "team") and signing.load_private(tmp_path / "keys" / "team.key"))
    run = image_run.ImageRun("cell-cpu", "cell-cpu", image_run.Outcome("cell", "cpu", status="passed"), options, engine,
                             lambda line: None)
    done = image_run.tag_and_push(run, "sha256:" + "e" * 64, "cell-cpu")
    assert done.status == "error" and done.digests == {} and done.tags == ["cell-cpu", "reg.local:5000/team/cell-cpu"]
    assert "stalled: the command's deadline of 2 s passed" in done.message and "(kept locally as cell-cpu, " in done.message
    signed = image_run.attest_pushed(run)
    assert signed.attested == {} and pipeline.indexes([signed], options, lambda line: None) == []


@pytest.mark.timeout(60)  # a stream never cut fails here, not at the suite's bound
def test_pull_counts_the_engines_pull_of_the_layers_against_its_deadline(registry, creds, tmp_path):
    """reliability.md, Deadlines: "`pull` counts Docker Engine's pull of the layers too." The image
    is chosen from a real registry; the engine (a stand-in on loopback, DOCKER_HOST) then trickles
    its pull for ever: `pull --deadline 4` ends after 4 s, saying the pull stalled."""
    import os
    import sys

    from tests.support import trust as ht
    from tests.support.fake_engine import FakeEngine
    from tests.support.node import write

    repository = f"claims/pull-{uuid.uuid4().hex[:8]}"
    digest = ht.put_tiny_image(Registry(registry.host), repository, ht.TAG)
    write(tmp_path / "node" / "proc/sys/kernel/arch", "x86_64\n")
    fake = FakeEngine(pull=["trickle"])
    try:
        cli = str(Path(sys.executable).with_name("ascend-build"))
        start = time.monotonic()
        done = subprocess.run([cli, "pull", "--cann", "9.1.0", "--variant", "cpu", "--registry",
                               f"{registry.host}/{repository}", "--root", str(tmp_path / "node"), "--deadline", "4"],
                              capture_output=True, text=True, timeout=60, env={**os.environ, **creds, "DOCKER_HOST": fake.url})
        took = time.monotonic() - start
    finally:
        fake.stop()
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"pull of {registry.host}/{repository}@{digest} stalled: the command's deadline of 4 s passed" in done.stderr
    assert fake.count("pull") == 1 and took < 4 + 8


# --- Killed at any point / Stopped: what a run leaves in the engine ---------------------------


def _interrupt_after(seconds: float) -> None:
    """Ctrl-C to this process's main thread (where the test runs) in ``seconds``."""
    import signal
    import threading

    main = threading.main_thread().ident or 0
    threading.Timer(seconds, lambda: signal.pthread_kill(main, signal.SIGINT)).start()


def _mine(fake) -> list:
    from builder.engine import _owner, OWNER_LABEL

    return [made for made, ctr in fake.containers.items() if ctr["labels"].get(OWNER_LABEL) == _owner()]


def test_what_a_killed_run_left_in_the_engine_is_removed_by_the_next_run_and_nothing_else(fake_engine):
    """reliability.md, Killed at any point: "A smoke container whose run was killed is removed by the
    next run (`Engine.remove_orphans`: containers labelled with the PID of an ascend-build process of
    this host that is gone)" and "the seal's temporary tag is `ascend-build-candidate:<image>-<host>-<pid>`.
    The next run's `Engine.remove_orphans` (before every build and smoke run) removes those of a
    process of this host that is gone"."""
    import os
    import socket

    from builder import leftovers
    from builder.engine import OWNER_LABEL
    from tests.support.fake_engine import API_VERSION

    fake, engine = fake_engine()
    gone = 4194301  # above the kernel's pid_max: no process has it
    assert not leftovers.alive(gone)
    owners = (f"{socket.gethostname()}:{gone}", f"{socket.gethostname()}:{os.getpid()}",  # a gone run, a live one
              f"elsewhere:{gone}")  # another host's
    for n, owner in enumerate(owners):
        fake.containers[str(n) * 64] = {"labels": {OWNER_LABEL: owner, "ascend-build.run": "1"}, "state": "running"}
    fake.containers["9" * 64] = {"labels": {}, "state": "exited"}  # another tool's
    gone_tag = f"{leftovers.CANDIDATE_REPOSITORY}:{'1' * 20}-{leftovers.host_mark()}-{gone}"
    live_tag = f"{leftovers.CANDIDATE_REPOSITORY}:{'1' * 20}-{leftovers.owner_mark()}"
    fake.images = [{"Id": "sha256:" + "1" * 64, "RepoTags": [gone_tag, live_tag]}]

    engine.run("img", ["python", "smoke.py"])  # a smoke run

    assert sorted(fake.containers) == ["1" * 64, "2" * 64, "9" * 64]  # the gone run's removed, its own too
    deletes = [r for r in fake.requests if r.startswith("DELETE")]
    assert deletes[0].startswith(f"DELETE /v{API_VERSION}/images/{gone_tag}?")  # the gone run's seal tag
    assert deletes[1].startswith(f"DELETE /v{API_VERSION}/containers/{'0' * 64}?")
    created = next(n for n, r in enumerate(fake.requests) if "/containers/create" in r)
    assert fake.requests.index(deletes[1]) < created  # swept before the smoke run's own container is made
    assert not [r for r in deletes if live_tag in r]


@pytest.mark.timeout(60)
def test_a_ctrl_c_while_the_engine_creates_the_smoke_container_removes_it(fake_engine):
    """reliability.md, Stopped: "A Ctrl-C while the engine creates the smoke container removes that
    container too." The engine has made it; its answer never comes back before the Ctrl-C."""
    fake, engine = fake_engine()
    fake.create_delay = 3
    _interrupt_after(0.5)
    with pytest.raises(KeyboardInterrupt):
        engine.run("img", ["python", "smoke.py"])
    assert _mine(fake) == [] and any("/containers/create" in r for r in fake.requests)


@pytest.mark.timeout(60)
def test_a_ctrl_c_during_the_smoke_run_removes_its_container(fake_engine):
    """reliability.md, Stopped: "On Ctrl-C or SIGTERM, ... the smoke container removed"."""
    fake, engine = fake_engine()
    fake.wait_seconds = 30
    _interrupt_after(0.5)
    with pytest.raises(KeyboardInterrupt):
        engine.run("img", ["python", "smoke.py"])
    assert _mine(fake) == [] and any(r.endswith("/wait") or "/wait?" in r for r in fake.requests)


# --- Killed at any point: files written whole; A full disk ------------------------------------


def test_a_record_is_linked_into_place_never_replacing_one(tmp_path):
    """reliability.md, Killed at any point: "A record is linked, never replacing one." Two writers of
    one name: the second finds the first's file there and changes nothing."""
    from builder import writes

    path = tmp_path / "ascend-build-record.json"
    assert writes.create_file(path, b'{"first": 1}\n') is True
    assert writes.create_file(path, b'{"second": 2}\n') is False
    assert path.read_bytes() == b'{"first": 1}\n' and [p.name for p in tmp_path.iterdir()] == [path.name]


@pytest.fixture
def full_disk():
    """A tmpfs of 2 MiB, filled but for ``keep`` bytes: full_disk(keep) -> its folder."""
    import contextlib

    from tests.support.faults import CannotMount, fill, small_fs

    with contextlib.ExitStack() as stack:
        def make(keep: int = 0) -> Path:
            try:
                point = stack.enter_context(small_fs("2m"))
            except CannotMount as why:
                pytest.skip(f"cannot mount a tmpfs here: {why}")
            fill(point, keep)
            return point
        yield make


def test_a_smoke_report_on_a_full_disk_is_not_written_and_the_old_one_stays_whole(full_disk):
    """reliability.md, Killed at any point: "A lock, a smoke report and a run record are written
    whole under a temporary name and renamed into place (`builder/writes.py`)": a report that does
    not fit leaves the one before it byte for byte, and no staged file."""
    from builder.images import image_run

    point = full_disk(keep=64 << 10)
    path = point / "reports" / "cell-cpu.json"
    path.parent.mkdir()
    path.write_bytes(b'{"old": true}\n')
    with pytest.raises(UserError, match=f"no space left on the file system of {path}"):
        image_run._keep_json({"tiers": ["x" * 200] * 2000}, path)  # 400 KB: more than is free
    assert path.read_bytes() == b'{"old": true}\n' and sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_image_on_a_full_state_folder_fails_before_any_build_and_tags_nothing(full_disk, fake_engine, monkeypatch):
    """reliability.md, Free space, checked before the build: "Short of space, the image fails with
    its outcome saying what is short, where, and by how much, before anything is built, downloaded
    or tagged." The engine is the stand-in; a build would be its CLI's, and is watched for.
    (tests/images/test_free_space.py holds the estimate's parts.)"""
    from builder.engine import Engine
    from builder.images import matrix, pipeline
    from builder.images.prepare import Options
    from tests.support.matrix import SHIPPED_DOCKERFILES, SHIPPED_MATRIX
    from tests.support.trust import CELL_ID

    built: list = []
    monkeypatch.setattr(Engine, "build", lambda self, *args, **kwargs: built.append(args))  # a build is a failure here
    cell = next(c for c in matrix.load(SHIPPED_MATRIX).cells if c.id == CELL_ID)
    fake, engine = fake_engine()
    state = full_disk(keep=0) / "state"
    [outcome] = pipeline.run([cell], Options(variants=("cpu",), state_dir=state, locks_dir=SHIPPED_DOCKERFILES),
                             engine, lambda line: None)
    assert outcome.status == "error" and outcome.tags == [] and outcome.digests == {}
    assert (f"not enough free space for this build on the file system of the state folder {state}: 0 B free, "
            "about 16.0 MiB needed") in outcome.message, outcome.message
    assert built == [] and not [r for r in fake.requests if r.startswith("POST")]  # nothing built, nothing tagged


def test_the_seal_on_a_full_disk_stops_before_its_build_with_no_half_report(full_disk, fake_engine, monkeypatch):
    """reliability.md, A full disk: "The seal writes its report whole: a disk that fills between the
    smoke test and the seal stops the seal before its build, and no half report is sealed into an
    image."""
    from builder.engine import Engine
    from builder.images import smoke_run

    built: list = []
    monkeypatch.setattr(Engine, "build", lambda self, *args, **kwargs: built.append(args))  # a build is a failure here
    fake, engine = fake_engine()
    folder = full_disk(keep=16 << 10) / "seal" / "cell-cpu"
    report = json.dumps({"passed": True, "tiers": ["x" * 100] * 1000}).encode()  # 100 KB: more than is free
    with pytest.raises(UserError, match="no space left on the file system of"):
        smoke_run.seal(engine, "sha256:" + "c" * 64, report, {"io.ascend-build.validated": "true"}, folder,
                       folder.parent / "seal.log")
    assert built == [] and not [r for r in fake.requests if r.endswith("/tag") or "/tag?" in r]
    assert not (folder / "validation.json").exists()


# --- Stopped ----------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_a_stopped_image_run_says_in_one_line_what_it_published(fake_engine, monkeypatch, tmp_path):
    """reliability.md, Stopped: "On Ctrl-C or SIGTERM, the build is cancelled, the smoke container
    removed and half-set tags removed. One line says what was published: `... published nothing;
    not finished: CELL (cpu), no tag (stopped at "...")`". Stopped during the smoke test; the build
    is a stand-in (it needs an engine), the smoke run the engine's stand-in's."""
    import signal
    import threading

    from builder.engine import Engine
    from builder.images import matrix, pipeline
    from builder.images.prepare import Options
    from tests.support.matrix import SHIPPED_DOCKERFILES, SHIPPED_MATRIX
    from tests.support.trust import CELL_ID

    monkeypatch.setattr(Engine, "build", lambda self, *args, **kwargs: "sha256:" + "c" * 64)
    cell = next(c for c in matrix.load(SHIPPED_MATRIX).cells if c.id == CELL_ID)
    fake, engine = fake_engine()
    fake.wait_seconds = 30
    main = threading.main_thread().ident or 0

    def say(line: str) -> None:
        if "smoke test on" in line:
            threading.Timer(0.5, lambda: signal.pthread_kill(main, signal.SIGINT)).start()
    with pytest.raises(KeyboardInterrupt) as stopped:
        pipeline.run([cell], Options(variants=("cpu",), state_dir=tmp_path / "state", locks_dir=SHIPPED_DOCKERFILES),
                     engine, say)
    assert str(stopped.value).startswith(f"published nothing; not finished: {CELL_ID} (cpu), no tag (stopped at "
                                         f'"[{CELL_ID}-cpu] smoke test on cpu: ')
    assert _mine(fake) == []  # the smoke container removed
    assert not [r for r in fake.requests if "/tag" in r]


@pytest.mark.parametrize("signed", [False, True])
def test_an_image_stopped_after_its_push_is_published_only_with_its_statements(signed, monkeypatch, tmp_path):
    """reliability.md, Stopped: "With `--sign-key`, an image the stop caught after its push and before
    its statements were attached is not called published: the line says `pushed WITHOUT its signed
    statements (stopped before they were attached; ...)` with its digest." (A stand-in for the one
    image's build, smoke test and push, which need an engine, stops right after the push.)"""
    from builder.images import matrix, pipeline
    from builder.images.prepare import Options
    from builder.trust import signing
    from tests.support.matrix import SHIPPED_MATRIX
    from tests.support.trust import CELL_ID

    ref, digest = f"reg.local:5000/team:{CELL_ID}-cpu", "sha256:" + "d" * 64

    def pushed_then_stopped(cell, variant, options, engine, say, out):
        out.status, out.tags, out.digests[ref] = "passed", [ref], digest
        raise KeyboardInterrupt()
    monkeypatch.setattr(pipeline, "build_one", pushed_then_stopped)
    monkeypatch.delenv(signing.PASSPHRASE_ENV, raising=False)
    key = signing.load_private(signing.generate(tmp_path, "team")[0]) if signed else None
    cell = next(c for c in matrix.load(SHIPPED_MATRIX).cells if c.id == CELL_ID)
    with pytest.raises(KeyboardInterrupt) as stopped:
        pipeline.run([cell], Options(variants=("cpu",), state_dir=tmp_path / "state", sign_key=key), None,  # type: ignore[arg-type]  # no engine is asked
                     lambda line: None)
    said = str(stopped.value)
    if signed:
        assert said.startswith("published nothing; pushed WITHOUT its signed statements (stopped before they were "
                               f"attached; `ascend-build verify` refuses it): {ref}@{digest}"), said
    else:
        assert said.startswith(f"published {ref}@{digest}"), said


@pytest.mark.timeout(60)
def test_a_ctrl_c_while_an_image_is_tagged_removes_the_tags_already_set(fake_engine):
    """reliability.md, Stopped: "On Ctrl-C or SIGTERM, ... half-set tags removed": stopped while the
    engine sets the second of an image's two names, the first is taken off again."""
    from builder.images import image_run
    from tests.support.fake_engine import API_VERSION

    fake, engine = fake_engine()
    fake.slow_tag = "reg.local"
    _interrupt_after(0.5)
    with pytest.raises(KeyboardInterrupt):
        image_run._apply_tags(engine, "sha256:" + "e" * 64, ["cell-cpu", "reg.local:5000/team/cell-cpu"])
    tagged = [r for r in fake.requests if "/tag?" in r]
    assert len(tagged) == 2 and "repo=cell-cpu" in tagged[0]
    assert [r.split("?")[0] for r in fake.requests if r.startswith("DELETE")] == [f"DELETE /v{API_VERSION}/images/cell-cpu"]


@pytest.mark.timeout(120)
def test_a_lock_stopped_while_it_downloads_an_installer_lets_the_download_end_and_writes_no_lock(monkeypatch, tmp_path):
    """reliability.md, Stopped: "A `lock` stopped while uv resolves writes no lock. ... A download
    already running is not cut short." Stopped (Ctrl-C) while the demo cell's CANN installer is
    fetched to record its sha256: that fetch runs to its end, and no lock is written."""
    import signal
    import threading
    import types

    from builder import knowledge
    from builder.images import lock, matrix, relock
    from tests.support.matrix import SHIPPED_DOCKERFILES, SHIPPED_MATRIX
    from tests.support.trust import CELL_ID

    stops: list = []

    class Recorded(threading.Event):  # the run's stop event, seen by the stand-in for the download
        def __init__(self) -> None:
            super().__init__()
            stops.append(self)

    monkeypatch.setattr(relock, "threading", types.SimpleNamespace(Event=Recorded))
    demo = next(c for c in matrix.load(SHIPPED_MATRIX).cells if c.id == CELL_ID)  # its 9.1.0 installers: no sha256 known
    previous = lock.read(SHIPPED_DOCKERFILES / CELL_ID)
    fetched: list = []
    workers: list = []

    def fetch(url, **_):  # a download under way when Ctrl-C reaches the main thread
        workers.append(threading.current_thread())
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
        assert len(stops) == 1 and stops[0].wait(60), "the run never took the Ctrl-C"
        fetched.append(url)  # ... and it ends all the same
        return "0" * 64, 1

    # Ctrl-C as a process started from a shell gets it, whatever handler a test run before this one
    # in the same worker left (one that ignores SIGINT would leave the download waiting for a stop)
    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            relock.run([demo], knowledge.load(), tmp_path, resolve=lambda inputs, **_: previous, fetch=fetch)
    finally:
        signal.signal(signal.SIGINT, saved)
    for worker in workers:  # a Ctrl-C can come while the pool still starts its worker: the run does not
        worker.join(60)     # wait for it then, the process's exit does (a pool's thread is no daemon)
    assert len(fetched) == 1
    assert not (tmp_path / CELL_ID / lock.LOCK_FILE).exists()


# --- Two runs at once -------------------------------------------------------------------------


def test_image_claims_each_image_in_the_state_folder_refusing_a_second_run_of_it_alone(fake_engine, monkeypatch, tmp_path):
    """reliability.md, Two runs at once: "`image` holds one per image in `<state>/claims/`. A second run
    is refused at once, naming the first ... Two different images on one state folder both run, each
    to its own verdict." The claim of CANN 8.0.RC3's NPU image is held: its build is refused, naming
    what holds it; the demo cell's CPU twin, on the same state folder, goes on to its build (a
    stand-in: it needs an engine)."""
    from builder import claims
    from builder.engine import Engine
    from builder.images import matrix, pipeline
    from builder.images.prepare import Options, prepare
    from tests.support.images import cell_8_0_rc3
    from tests.support.matrix import SHIPPED_DOCKERFILES, SHIPPED_MATRIX
    from tests.support.trust import CELL_ID

    class Built(Exception):
        """The twin reached its build: it was not refused."""

    def build(self, *args, **kwargs):
        raise Built()
    monkeypatch.setattr(Engine, "build", build)
    held, other = cell_8_0_rc3(), next(c for c in matrix.load(SHIPPED_MATRIX).cells if c.id == CELL_ID)
    state = tmp_path / "state"
    options = Options(state_dir=state, locks_dir=SHIPPED_DOCKERFILES, allow_incomplete_lock=True)
    npu = prepare(held, "npu", options).name
    (state / "claims").mkdir(parents=True)
    _, engine = fake_engine()
    with claims.claim(state / "claims" / f"{npu}.lock", "building it in another run", folder=False):
        with pytest.raises(UserError) as refused:
            pipeline.build_one(held, "npu", options, engine, lambda line: None)
        with pytest.raises(Built):
            pipeline.build_one(other, "cpu", options, engine, lambda line: None)
    assert refused.value.message.startswith(f"another ascend-build run is building {npu} with the state folder "
                                            f"{state} ("), refused.value.message
    assert refused.value.message.endswith("); nothing was done here") and refused.value.exit_code == 1


def test_a_name_another_run_took_during_the_push_records_no_digest(fake_engine, tmp_path):
    """reliability.md, Two runs at once: "a run checks after its push that the name still holds its own
    image; when another run took it meanwhile, the run records no digest, attests nothing and says
    so, keeping its image by ID." (The engine's stand-in names another image under the pushed name.)"""
    from builder.images import image_run
    from builder.images.prepare import Options
    from tests.support.fake_engine import IMAGE_ID

    fake, engine = fake_engine(push=["ok"])
    ours = "sha256:" + "a" * 64  # the name now holds IMAGE_ID, another run's
    run = image_run.ImageRun("cell-cpu", "cell-cpu", image_run.Outcome("cell", "cpu", status="passed"),
                             Options(push="reg.local:5000/team", state_dir=tmp_path), engine, lambda line: None)
    done = image_run.tag_and_push(run, ours, "cell-cpu")
    assert fake.count("push") == 1 and done.status == "error" and done.digests == {}
    assert done.message.startswith(f"reg.local:5000/team/cell-cpu was given to another image ({IMAGE_ID}) while this "
                                   "run pushed it")
    assert "nothing is attested (kept locally by its ID)" in done.message


# --- Scratch space ----------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["contexts", "contexts/cpu-x86_64"])
def test_a_fifo_where_a_scratch_folder_goes_is_removed_and_the_folder_made(where, tmp_path):
    """reliability.md, Scratch space: "A file, FIFO or symlink where either folder goes is removed (a
    symlink is never followed) and the folder made, rather than blocking every build." (A file and a
    symlink: tests/images/test_stage.py.)"""
    import os

    from builder.images import stage

    (tmp_path / "contexts").mkdir()
    if where == "contexts":
        (tmp_path / "contexts").rmdir()
    os.mkfifo(tmp_path / where)
    with stage.claim(tmp_path / "contexts", "x86_64", "cpu") as folder:
        made = stage.context({"Dockerfile": b"FROM scratch\n"}, folder)
    assert made == tmp_path / "contexts" / "cpu-x86_64" and (made / "Dockerfile").read_bytes() == b"FROM scratch\n"


def test_each_build_empties_its_context_and_a_linked_contexts_folder_is_kept_and_used(tmp_path):
    """reliability.md, Scratch space: "each build empties its context folder and writes it again ...
    A symlink as `contexts/` itself, to a folder, is kept and used." """
    from builder.images import stage

    elsewhere = tmp_path / "big-disk" / "contexts"
    elsewhere.mkdir(parents=True)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "contexts").symlink_to(elsewhere, target_is_directory=True)
    contexts = tmp_path / "state" / "contexts"
    with stage.claim(contexts, "x86_64", "cpu") as folder:
        stage.context({"Dockerfile": b"FROM one\n", "old.txt": b"left from the build before\n"}, folder)
    with stage.claim(contexts, "x86_64", "cpu") as folder:
        made = stage.context({"Dockerfile": b"FROM two\n"}, folder)
    assert contexts.is_symlink() and sorted(p.name for p in (elsewhere / "cpu-x86_64").iterdir()) == ["Dockerfile"]
    assert (made / "Dockerfile").read_bytes() == b"FROM two\n"


def test_keys_generate_that_fits_its_key_but_not_its_pub_removes_the_key_it_made(full_disk, monkeypatch):
    """reliability.md, A full disk: "`keys generate` makes its pair whole or not at all: a failure
    removes the file it had made, so a retry is not refused as "never overwritten"." Room for one
    page: the .key is written, the .pub is not; no .key is left."""
    from builder.trust import signing

    monkeypatch.delenv(signing.PASSPHRASE_ENV, raising=False)
    point = full_disk(keep=4096)
    with pytest.raises(UserError, match=r"no space left on the file system of .*: no key was written \(neither file\)"):
        signing.generate(point / "k", "team")
    assert list((point / "k").iterdir()) == []


# --- Deadlines: "Pushes": the statements and each index too ------------------------------------


def test_the_statements_and_the_index_of_a_push_end_at_the_push_deadline(registry, creds, proxy, tmp_path, monkeypatch):
    """reliability.md, Deadlines: "`image --push` and `promote --push` give each image's push through
    Docker Engine, its signed statements, and each index `--push-deadline SECONDS`". A registry that
    stops answering while the statements are attached, or the index is made, holds them 2 s, no more.
    (The push itself: test_a_push_stalled_past_the_push_deadline_keeps_the_image_and_publishes_nothing.)"""
    import time

    from dataclasses import replace

    from builder.images import image_run, matrix, pipeline
    from builder.images.prepare import Options
    from builder.trust import signing
    from tests.support import trust as ht
    from tests.support.matrix import SHIPPED_MATRIX

    monkeypatch.delenv(signing.PASSPHRASE_ENV, raising=False)
    repository = f"claims/push-deadline-{uuid.uuid4().hex[:8]}"
    digest = ht.put_tiny_image(Registry(registry.host), repository, ht.TAG)
    ref = f"{proxy.host}/{repository}:{ht.TAG}"
    key = signing.load_private(signing.generate(tmp_path, "team")[0])
    options = Options(push=proxy.host, state_dir=tmp_path, push_deadline=2, sign_key=key)
    proxy.plan("GET", r"/manifests/", always="stall")
    proxy.plan("GET", r"/tags/list", always="stall")

    start = time.monotonic()
    out = pipeline.Outcome(ht.CELL_ID, "cpu", status="passed", digests={ref: digest})
    signed = image_run.attest_pushed(image_run.ImageRun(f"{ht.CELL_ID}-cpu", ref, out, options, None,  # type: ignore[arg-type]  # attaching asks no engine
                                                        lambda line: None, report=ht.report()))
    took = time.monotonic() - start
    assert signed.status == "error" and signed.attested == {} and took < 2 + 6, took  # the stall: 120 s
    assert "is published WITHOUT its signed statements" in signed.message
    assert "the command's deadline of 2 s passed" in signed.message, signed.message

    def pushed(cell, variant, options, engine, say, out):  # a stand-in for one image's build and push (an engine's)
        return pipeline.Outcome(ht.CELL_ID, "cpu", status="passed", digests={ref: digest})
    monkeypatch.setattr(pipeline, "build_one", pushed)
    cell = next(c for c in matrix.load(SHIPPED_MATRIX).cells if c.id == ht.CELL_ID)
    start = time.monotonic()
    [_, index] = pipeline.run([cell], replace(options, variants=("cpu",), sign_key=None), None,  # type: ignore[arg-type]  # no engine is asked
                              lambda line: None)
    took = time.monotonic() - start
    assert index.status != "passed" and "the command's deadline of 2 s passed" in index.message and took < 2 + 6
