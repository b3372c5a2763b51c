"""The lazy variant's parts that need no containerd: the eStargz reader on a layer ctr-remote made
(tests/fixtures/estargz), the record file ctr-remote reads, `--lazy`'s refusals, and what the
pipeline says when the variant fails after the validated image is published. The end-to-end runs
(ctr-remote, a registry, the trust judge) are tests/images/test_lazy_e2e.py."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict

import pytest

from builder import estargz
from builder.errors import UserError
from builder.images import image_run, lazy
from builder.images.prepare import Options
from builder.trust import variant

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "estargz"
CLI = str(Path(sys.executable).with_name("ascend-build"))
BLOB = (FIXTURES / "small.esgz").read_bytes()
DESCRIPTOR = json.loads((FIXTURES / "small.descriptor.json").read_text())
TOC = DESCRIPTOR["annotations"][estargz.TOC_DIGEST]


def _layer(blob: bytes = BLOB, toc: str = TOC) -> estargz.Layer:
    return estargz.Layer.open(lambda start, end: blob[start:end], len(blob), toc)


def test_the_reader_reads_the_listed_files_by_range_and_the_listed_come_first():
    layer = _layer()
    assert layer.counter.requests == 2 and layer.counter.bytes < len(BLOB)
    names = [e["name"] for e in layer.toc["entries"] if e["type"] == "reg"]
    assert names[:3] == ["usr/bin/tool", "etc/conf", ".prefetch.landmark"]
    got = layer.read_files(["/usr/bin/tool", "etc/conf"])
    assert got == {"usr/bin/tool": b"#!/bin/sh\necho hi\n", "etc/conf": b"x=1\n"}
    assert layer.counter.requests == 3  # the two are adjacent: one merged range
    assert layer.read_files(["usr/lib/libtiny.so"])["usr/lib/libtiny.so"] == bytes(range(256)) * 40
    files, links = variant.toc_listing(layer)
    assert len(files) == 4 and links == [("usr/bin/tool2", "tool", "symlink")]


def test_the_reader_refuses_a_chunk_that_is_not_its_digest_and_a_toc_not_named():
    layer = _layer()
    [chunk] = layer.chunks["etc/conf"]
    other = gzip.compress(b"x=2\n", mtime=0)
    forged = BLOB[:chunk.offset] + other + b"\0" * (chunk.end - chunk.offset - len(other)) + BLOB[chunk.end:]
    with pytest.raises(estargz.Corrupt, match="etc/conf: the chunk at file offset 0 .* its chunkDigest is"):
        _layer(forged).read_files(["etc/conf"])
    flipped = bytearray(BLOB)
    flipped[chunk.offset + 15] ^= 0xFF
    with pytest.raises(estargz.Corrupt, match="etc/conf: the chunk .* is not gzip data"):
        _layer(bytes(flipped)).read_files(["etc/conf"])
    with pytest.raises(estargz.Corrupt, match="not the one the manifest names"):
        _layer(toc="sha256:" + "0" * 64)
    with pytest.raises(estargz.Corrupt, match="no eStargz footer"):
        _layer(gzip.compress(bytes(range(256)) * 4))


def test_the_record_file_is_ctr_remotes_json_stream_relative_and_once():
    text = lazy.record_file(["/etc/conf", "etc/conf", "/usr/bin/tool", ""]).decode()
    assert [json.loads(line) for line in text.splitlines()] == [{"path": "etc/conf"}, {"path": "usr/bin/tool"}]
    paths, info = lazy.prefetch_of({"files_read": {"import": ["/a", "/b"], "device": [], "train": ["/b", "/c"],
                                                   "versions": ["/ignored"]}})
    assert paths == ["/a", "/b", "/c"] and info["files"] == 3 and info["tiers"] == ["import", "device", "train"]
    assert lazy.prefetch_of({})[0] == []


def test_the_containerd_config_is_its_own_with_cri_off(tmp_path):
    config = lazy.Containerd(tmp_path / "c").config()
    assert f'root = "{tmp_path / "c" / "root"}"' in config and f'state = "{tmp_path / "c" / "state"}"' in config
    assert f'address = "{tmp_path / "c" / "containerd.sock"}"' in config
    assert 'disabled_plugins = ["io.containerd.grpc.v1.cri"]' in config
    assert "/run/containerd" not in config
    # a state folder too deep for a unix socket (a cell's name is long): the sockets go to a short
    # private folder, removed on exit; root and state stay in the state folder
    deep = lazy.Containerd(tmp_path / ("x" * 120))
    deep.place_sockets()
    assert deep.sockets is not None and deep.sockets.is_dir() and deep.sockets.stat().st_mode & 0o777 == 0o700
    assert len(str(deep.socket.with_name("containerd.sock.ttrpc"))) <= lazy.SOCKET_MAX
    assert f'address = "{deep.socket}"' in deep.config() and f'root = "{tmp_path / ("x" * 120) / "root"}"' in deep.config()
    sockets = deep.sockets
    deep.__exit__(None, None, None)
    assert deep.sockets is None and not sockets.exists()


def test_the_conversions_working_state_is_removed_when_its_containerd_ends_and_its_log_kept(tmp_path):
    """What a conversion leaves under the state folder (as ctr-remote's containerd lays it out: the
    content store with the pulled and converted blobs, the unpacked snapshots, the runtime state), planted:
    the end of the tool's containerd (pushed or failed, `convert` ends it the same way) removes it, and
    keeps its config, its log and the prefetch record (a few KB)."""
    folder = tmp_path / "lazy" / "cell" / "containerd"
    planted = [folder / "root/io.containerd.content.v1.content/blobs/sha256" / ("ab" * 32),
               folder / "root/io.containerd.snapshotter.v1.overlayfs/snapshots/1/fs/usr/lib/libtorch_cpu.so",
               folder / "root/io.containerd.metadata.v1.bolt/meta.db",
               folder / "state/io.containerd.runtime.v2.task/ascend-build/x"]
    for path in planted:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * 4096)
    (folder / "config.toml").write_text(lazy.Containerd(folder).config())
    (folder / "containerd.log").write_text("level=info msg=done\n")
    (folder.parent / "prefetch.record.json").write_bytes(lazy.record_file(["/etc/conf"]))
    containerd = lazy.Containerd(folder)
    containerd.__exit__(None, None, None)  # none was started by this object: it counts as stopped
    left = sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "lazy").rglob("*"))
    assert left == ["lazy/cell", "lazy/cell/containerd", "lazy/cell/containerd/config.toml",
                    "lazy/cell/containerd/containerd.log", "lazy/cell/prefetch.record.json"]
    assert containerd.left == []
    # a root that is a symbolic link is not followed: nothing outside the state folder is removed, and it is said
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "blobs").mkdir(parents=True)
    (elsewhere / "blobs" / "kept").write_text("not the conversion's")
    (folder / "root").symlink_to(elsewhere)
    linked = lazy.Containerd(folder)
    linked.__exit__(None, None, None)
    assert (elsewhere / "blobs" / "kept").read_text() == "not the conversion's"
    assert len(linked.left) == 1 and linked.left[0].startswith(f"{folder / 'root'}: ")


@pytest.mark.parametrize("args, said", [
    (("--lazy", "estargz"), "--lazy needs --push"),
    (("--lazy", "zstd", "--push", "127.0.0.1:1"), "'zstd' is not a lazy format"),
])
def test_lazy_is_refused_without_a_push_or_with_another_format(args, said):
    done = subprocess.run([CLI, "image", "--cell", "no-such-cell", *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_variant_that_fails_leaves_the_validated_image_published_and_says_so(monkeypatch, tmp_path):
    def fail(*args, **kwargs):
        raise UserError("ctr-remote images convert failed: boom", fix="read the message")
    monkeypatch.setattr(lazy, "publish_variant", fail)
    out = image_run.Outcome("c", "cpu", status="passed", digests={"r:5000/p:c-cpu": "sha256:" + "a" * 64})
    report = {"tiers": [{"name": "versions", "status": "passed"}]}
    done = image_run.lazy_variant(_run(out, Options(state_dir=tmp_path, push="r:5000", lazy="estargz"), report, lambda line: None))
    assert done.status == "error" and not done.lazy
    assert done.message.startswith("r:5000/p:c-cpu (sha256:" + "a" * 64 + ") is published, its estargz variant is not")
    assert "boom" in done.message
    # without --lazy, or for an image that did not pass, nothing is converted
    for options, status in ((Options(state_dir=tmp_path, push="r:5000"), "passed"),
                            (Options(state_dir=tmp_path, push="r:5000", lazy="estargz"), "candidate")):
        untouched = image_run.Outcome("c", "cpu", status=status, digests={"r:5000/p:c-cpu": "sha256:" + "a" * 64})
        assert image_run.lazy_variant(_run(untouched, options, report, print)).status == status


def _run(out: image_run.Outcome, options: Options, report: Dict, say: Callable[[str], None]) -> image_run.ImageRun:
    """The run of a pushed image ``out`` that lazy_variant takes (it asks no engine)."""
    return image_run.ImageRun("c-cpu", "p:c-cpu", out, options, None, say, content_hash="h",  # type: ignore[arg-type]  # no engine
                              arch="x86_64", tiers=("versions",), report=report)


def _with_toc(entries, blob: bytes = BLOB):
    """The fixture's chunks, then a TOC holding ``entries`` and the footer pointing at it: (blob, TOC digest)."""
    import io
    import tarfile

    at = _layer().toc_at
    raw = json.dumps({"version": 1, "entries": entries}).encode()
    packed = io.BytesIO()
    with tarfile.open(fileobj=packed, mode="w") as tar:
        info = tarfile.TarInfo(estargz.TOC_NAME)
        info.size = len(raw)
        tar.addfile(info, io.BytesIO(raw))
    footer = (bytes.fromhex("1f8b08040000000000ff1a0053471600") + f"{at:016x}".encode() + b"STARGZ"
              + bytes.fromhex("010000ffff0000000000000000"))
    assert estargz.toc_offset(footer) == at
    import hashlib
    return blob[:at] + gzip.compress(packed.getvalue(), mtime=0) + footer, "sha256:" + hashlib.sha256(raw).hexdigest()


@pytest.mark.parametrize("field, value, said", [
    ("size", "4", "its TOC field size is '4', not a number of bytes"),
    ("offset", -231, "its TOC field offset is '-231'"),
    ("chunkSize", [4], "its TOC field chunkSize is '[4]'"),
    ("innerOffset", True, "its TOC field innerOffset is 'True'"),
    ("chunkSize", 5, "its chunk at file offset 0 (5 bytes) is outside the file's 4 bytes"),
])
def test_a_toc_with_a_field_of_the_wrong_shape_is_corrupt_not_a_traceback(field, value, said):
    entries = [dict(e) for e in _layer().toc["entries"]]
    conf = next(e for e in entries if e.get("name") == "etc/conf")
    conf[field] = value
    blob, toc = _with_toc(entries)
    with pytest.raises(estargz.Corrupt) as refused:
        _layer(blob, toc)
    assert said in str(refused.value)
    unchanged, same = _with_toc(_layer().toc["entries"])
    assert _layer(unchanged, same).read_files(["etc/conf"]) == {"etc/conf": b"x=1\n"}  # the forger itself is sound


def test_a_toc_that_inflates_past_its_bound_is_corrupt_before_it_is_read_whole(monkeypatch):
    monkeypatch.setattr(estargz, "TOC_INFLATED_LIMIT", 4096)
    entries = _layer().toc["entries"] + [{"name": f"pad/{i:05}", "type": "dir"} for i in range(200)]
    blob, toc = _with_toc(entries)
    with pytest.raises(estargz.Corrupt, match="the TOC inflates past 4096 bytes"):
        _layer(blob, toc)


def test_adjacent_chunks_merge_into_one_range_each_kept_once():
    chunks = [estargz.Chunk(f"f{i}", 10 * i, 10 * i + 10, 0, 1, "") for i in range(5000)]
    [(start, end, group)] = estargz._merged(chunks)
    assert (start, end) == (0, 50000) and group == chunks
    split = estargz._merged(chunks[:2] + chunks[3:4])
    assert [(s, e, len(g)) for s, e, g in split] == [(0, 20, 2), (30, 40, 1)]


# --- what a TOC declares, bounded before anything is inflated (issue 41; bench_hostile's eStargz inputs) ---


def _forged(make):
    blob, toc = make()
    return estargz.Layer.open(lambda start, end: blob[start:end], len(blob), toc)


def test_a_toc_mode_that_is_no_file_mode_is_corrupt_not_a_traceback_in_the_listing():
    from benchmarks.hostile import estargz_reader as forge

    for mode in ("rwxr-xr-x", [420], -1, True):
        with pytest.raises(estargz.Corrupt, match="etc/conf: its TOC field mode is .*, not a file mode"):
            _forged(lambda: forge.one_file(mode=mode))  # noqa: B023  # called at once, in this turn
    files, _ = variant.toc_listing(_forged(lambda: forge.one_file(mode=0o100644)))
    assert files == [("etc/conf", 0o644, forge.sha(b"x=1\n"))]


@pytest.mark.parametrize("make, said", [
    ("_short_chunks", "short: its chunks hold 4 bytes, its TOC entry says 10"),
    ("_doubled_chunks", "twice: its chunks do not follow one another: one starts at file offset 0, the ones before "
                        "it end at 4"),
])
def test_chunks_that_leave_a_gap_or_overlap_are_corrupt_without_a_file_digest(make, said):
    from benchmarks.hostile import estargz_reader as forge

    layer = _forged(getattr(forge, make))
    with pytest.raises(estargz.Corrupt) as refused:
        layer.read_files(layer.regular_files())
    assert str(refused.value) == said and layer.counter.requests == 2  # refused before any chunk was fetched


def test_a_declared_size_past_the_readers_bounds_is_corrupt_before_anything_is_inflated(monkeypatch):
    from benchmarks.hostile import estargz_reader as forge

    huge = _forged(lambda: forge.one_file(size=1 << 64, chunkSize=0))
    with pytest.raises(estargz.Corrupt, match=f"etc/conf: its TOC entry says {1 << 64} bytes, past the"):
        huge.read_files(["etc/conf"])
    monkeypatch.setattr(estargz, "CHUNK_LIMIT", 1024)
    bomb = _forged(lambda: forge._bomb(4096, 4096))
    with pytest.raises(estargz.Corrupt, match="zeros: its chunk at file offset 0 is 4096 bytes, past the 1024 bytes"):
        bomb.read_files(["zeros"])
    assert bomb.counter.requests == 2  # the footer and the TOC: no chunk fetched
    monkeypatch.setattr(estargz, "CHUNK_LIMIT", 4096)
    assert bomb.read_files(["zeros"]) == {"zeros": b"\0" * 4096}  # at the bound: read, checked
