"""builder.releases against a real simple index served on loopback by the test.

The index below lays files out as a package index serves them: a project page in
PEP 691 JSON and PEP 503 HTML, wheels under /files/ with HTTP Range support, and
PEP 658 ``.metadata`` files for some wheels. The wheels of the "new" release are real
zips built here, with a real-looking METADATA. Known releases use real torch_npu file
names from the knowledge base; their bodies are never fetched (asserted).
"""

from __future__ import annotations

import ast
import difflib
import doctest
import importlib
import io
import json
import pkgutil
import random
import re
import shutil
import socket
import struct
import sys
import tracemalloc
import zipfile
from pathlib import Path
from typing import List, Tuple

import pytest
import yaml

from builder import knowledge
from builder import releases
from builder.images import matrix
from builder.errors import UserError
from builder.releases import compat_file, http_client, index as index_module, metadata
from tests.support.package_index import NEW, PAYLOAD, File, Index, build_wheel, metadata_text, new_release

DATA = knowledge.DATA_DIR
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# --- wheels ---------------------------------------------------------------------------------


KNOWN = [
    File("torch_npu-2.4.0-cp310-cp310-manylinux_2_17_aarch64.manylinux2014_aarch64.whl", b"never fetched",
         upload_time="2024-10-29T03:00:00Z"),
    File("torch_npu-2.4.0-cp310-cp310-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", b"never fetched",
         upload_time="2024-10-29T03:00:00Z"),
    File("torch_npu-2.4.0-cp38-cp38-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", b"never fetched",
         yanked="broken build", upload_time="2024-10-29T03:00:00Z"),
    File("torch_npu-2.14.0-cp311-cp311-manylinux_2_28_aarch64.whl", b"never fetched", upload_time="2026-10-15T01:00:00Z"),
    File("torch_npu-2.14.0-cp311-cp311-manylinux_2_28_x86_64.whl", b"never fetched", upload_time="2026-10-15T01:00:00Z"),
]


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    """Loopback only: never route the test's requests through a proxy from the environment."""
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture
def serve():
    """serve(files, **options) -> a running Index; every one is stopped at the end."""
    started: List[Index] = []

    def start(files=None, **options) -> Index:
        index = Index(files if files is not None else KNOWN + new_release(), **options)
        started.append(index)
        return index

    yield start
    for index in started:
        index.stop()


@pytest.fixture
def compat_copy(tmp_path) -> Path:
    """A private copy of ascend-compat.yaml (the shipped file is never written by tests)."""
    path = tmp_path / "data" / "ascend-compat.yaml"
    path.parent.mkdir()
    shutil.copyfile(DATA / "ascend-compat.yaml", path)
    return path


def kb_of(path: Path) -> knowledge.KnowledgeBase:
    """A knowledge base read like knowledge.load(), with ascend-compat.yaml taken from ``path``."""
    def doc(name):
        return yaml.load((DATA / name).read_text(), Loader=LOADER)
    return knowledge.KnowledgeBase(compat=yaml.load(path.read_text(), Loader=LOADER),
                                   packages=json.loads((DATA / "cann-packages.json").read_text()),
                                   os_doc=doc("os.yaml"), conda_doc=doc("conda.yaml"),
                                   downloads_doc=doc("cann-downloads.yaml"))


# --- check: a new release -------------------------------------------------------------------


@pytest.mark.parametrize("mode, api", [("both", "json"), ("json", "json"), ("html", "html")])
def test_new_release_found_with_pins_pythons_and_manylinux_per_arch(serve, mode, api):
    index = serve(mode=mode)
    result = releases.check(index.url, timeout=5)

    assert result.api == api and result.api_version == "1.1"
    assert result.new_versions == [NEW]
    assert result.known == ["2.4.0", "2.14.0"]
    e = result.new[0].entry
    assert e["version"] == NEW and e["prerelease"] is False and e["torch"] == "2.15.0"
    assert e["torch_source"] == "wheel METADATA Requires-Dist"
    assert e["requires_dist"] == {"x86_64": "torch==2.15.0.*, numpy, pyyaml", "aarch64": "torch==2.15.0.*, numpy, pyyaml"}
    assert e["python"] == {"x86_64": ["3.10", "3.11"], "aarch64": ["3.10", "3.11"]}
    assert e["manylinux"] == {"aarch64": "manylinux_2_17", "x86_64": "manylinux_2_28"}
    assert e["cann"] is None and e["cann_source"] == [] and e["cann_note"] == "pairing unknown until a human confirms it"
    assert e["source"] == ["PYPI_SIMPLE_JSON", "PYPI_WHEEL_METADATA"]
    assert e["first_upload"] == ("2026-12-01" if api == "json" else None)  # HTML pages carry no upload time
    reads = {m.arch: m for m in result.new[0].metadata}
    assert {a: m.torch_pin for a, m in reads.items()} == {"x86_64": "torch==2.15.0.*", "aarch64": "torch==2.15.0.*"}
    assert {a: m.requires_python for a, m in reads.items()} == {"x86_64": ">=3.10", "aarch64": ">=3.10"}
    assert result.yanked == [releases.YankedFile(KNOWN[2].filename, "2.4.0", "broken build")]
    assert result.warnings == [] and result.skipped == []


def test_metadata_read_by_pep658_and_by_range_without_fetching_a_wheel(serve):
    index = serve()
    result = releases.check(index.url, timeout=5)

    reads = {m.filename: m for m in result.new[0].metadata}
    x86 = f"torch_npu-{NEW}-cp311-cp311-manylinux_2_28_x86_64.whl"
    arm = f"torch_npu-{NEW}-cp311-cp311-manylinux_2_17_aarch64.manylinux2014_aarch64.whl"
    assert set(reads) == {x86, arm}  # one wheel per arch: the newest Python
    assert reads[x86].method == "pep658" and reads[arm].method == "range"
    assert result.full_downloads == []
    # PEP 658: only the .metadata file, never the wheel
    assert index.requests_for(x86) == []
    assert [r[0] for r in index.log].count(f"/files/{x86}.metadata") == 1
    # ranges: every wheel request carried Range, and together they read a small part of it
    size = len(index.files[arm].body)
    assert index.requests_for(arm) and all(r[1] and r[2] == 206 for r in index.requests_for(arm))
    assert index.served(arm) < size / 8, (index.served(arm), size)
    assert reads[arm].bytes_fetched == index.served(arm)
    # no other wheel was touched, known ones least of all
    touched = {r[0] for r in index.log if r[0].startswith("/files/")}
    assert touched == {f"/files/{x86}.metadata", f"/files/{arm}"}


def test_known_releases_are_not_reported(serve):
    index = serve(KNOWN)
    result = releases.check(index.url, timeout=5)
    assert result.new == [] and result.known == ["2.4.0", "2.14.0"]
    assert "no new torch_npu releases" in releases.format_check(result)
    assert all(not r[0].startswith("/files/") for r in index.log)


def test_a_server_without_ranges_means_a_whole_download_and_says_so(serve):
    index = serve(ranges=False)
    result = releases.check(index.url, timeout=5)
    arm = f"torch_npu-{NEW}-cp311-cp311-manylinux_2_17_aarch64.manylinux2014_aarch64.whl"
    assert {m.arch: m.method for m in result.new[0].metadata} == {"x86_64": "pep658", "aarch64": "download"}
    assert result.full_downloads == [arm]
    assert result.new[0].entry["requires_dist"]["aarch64"] == "torch==2.15.0.*, numpy, pyyaml"
    text = releases.format_check(result)
    assert f"downloaded whole (the server ignores Range): {arm}" in text
    assert "METADATA by downloading the whole wheel" in text


def test_advertised_metadata_that_is_missing_falls_back_to_ranges(serve):
    files = KNOWN + new_release()
    for f in files:
        f.metadata_served = False  # advertised on the page, 404 on the server
    index = serve(files)
    result = releases.check(index.url, timeout=5)
    assert {m.arch: m.method for m in result.new[0].metadata} == {"x86_64": "range", "aarch64": "range"}
    assert any("advertised a .metadata file but had none" in w for w in result.warnings)


# --- check: failures ------------------------------------------------------------------------


def check_then_write(url: str, data: Path) -> None:
    releases.write(releases.check(url, timeout=5), data)


@pytest.mark.parametrize("page, what", [
    (("application/vnd.pypi.simple.v1+json", b'{"meta": {"api-version": "1.1"}, "files": [{"filename": '), "not JSON"),
    (("application/vnd.pypi.simple.v1+json", b'{"meta": {"api-version": "1.1"}, "name": "torch-npu"}'), "'files' list"),
    (("application/vnd.pypi.simple.v1+json", b'{"meta": {"api-version": "1.1"}, "files": [{"url": "x"}]}'), "files[0]"),
    (("application/vnd.pypi.simple.v1+json", b'{"meta": {"api-version": "2.0"}, "files": []}'), "API version 2.0"),
    (("text/html", b"Service temporarily unavailable"), "no HTML tags"),
    (("text/html", b"<html><body><a>torch_npu-2.15.0-cp310-cp310-manylinux_2_28_x86_64.whl</a></body></html>"),
     "has no href"),
    (("application/octet-stream", b"\x00\x01\x02"), "neither JSON nor HTML"),
    # a page of no files is a wrong or broken index, not "no new releases"
    (("application/vnd.pypi.simple.v1+json", b'{"meta": {"api-version": "1.1"}, "files": []}'), "lists no files at all"),
    (("text/html", b"<html><body><h1>torch-npu</h1></body></html>"), "lists no files at all"),
])
def test_a_malformed_page_is_a_user_error_and_nothing_is_written(serve, compat_copy, page, what):
    index = serve(mode=page)
    before = compat_copy.read_bytes()
    with pytest.raises(UserError) as err:
        check_then_write(index.url, compat_copy)
    assert err.value.exit_code == 1
    assert index.url + "torch-npu/" in err.value.message
    assert what.lower() in err.value.message.lower()
    assert compat_copy.read_bytes() == before
    assert sorted(p.name for p in compat_copy.parent.iterdir()) == ["ascend-compat.yaml"]


def test_a_wheel_that_is_no_zip_is_a_user_error(serve, compat_copy):
    files = KNOWN + new_release()
    for f in files:
        if "aarch64" in f.filename and NEW in f.filename:
            f.body = random.Random(1).randbytes(64 * 1024)
    index = serve(files)
    before = compat_copy.read_bytes()
    with pytest.raises(UserError, match="malformed wheel: no zip end-of-central-directory") as err:
        check_then_write(index.url, compat_copy)
    assert err.value.exit_code == 1 and "/files/torch_npu-2.15.0-" in err.value.message
    assert compat_copy.read_bytes() == before


def test_a_metadata_file_with_the_wrong_hash_is_a_user_error(serve):
    files = KNOWN + new_release()
    for f in files:
        if f.metadata is not None:
            f.metadata_hash = "0" * 64
    index = serve(files)
    with pytest.raises(UserError, match="sha256 of the download does not match") as err:
        releases.check(index.url, timeout=5)
    assert ".metadata" in err.value.message and err.value.exit_code == 1


def test_connection_refused_is_a_user_error(compat_copy):
    with socket.socket() as s:  # a port that was free a moment ago and has no listener now
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/simple/"
    before = compat_copy.read_bytes()
    with pytest.raises(UserError) as err:
        check_then_write(url, compat_copy)
    assert err.value.exit_code == 1
    assert err.value.message == f"{url}torch-npu/: connection refused"
    assert compat_copy.read_bytes() == before


def test_an_index_that_never_answers_times_out():
    with socket.socket() as s:  # accepts connections into its backlog, never replies
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        url = f"http://127.0.0.1:{s.getsockname()[1]}/simple/"
        with pytest.raises(UserError) as err:
            releases.check(url, timeout=0.3)
    assert err.value.exit_code == 1
    assert "no answer" in err.value.message and url in err.value.message


def test_http_errors_name_the_status(serve):
    index = serve()
    with pytest.raises(UserError) as err:
        releases.check(index.url, project="torch-npu-typo", timeout=5)
    assert err.value.exit_code == 1
    assert err.value.message == f"{index.url}torch-npu-typo/: HTTP 404 Not Found"


def test_an_index_url_that_is_not_http_is_a_usage_error():
    with pytest.raises(UserError) as err:
        releases.check("file:///srv/simple/")
    assert err.value.exit_code == 2


# --- write ------------------------------------------------------------------------------------


def test_write_adds_the_release_and_knowledge_reading_sees_it(serve, compat_copy):
    result = releases.check(serve().url, timeout=5)
    old = compat_copy.read_text()

    assert releases.write(result, compat_copy) == [NEW]

    new = compat_copy.read_text()
    removed = [line for line in difflib.ndiff(old.splitlines(), new.splitlines()) if line.startswith("- ")]
    assert removed == []  # the rest of the file kept every byte
    assert len(new.splitlines()) > len(old.splitlines())
    kb = kb_of(compat_copy)
    rel = kb.releases.torch_npu(NEW)
    assert rel is not None and rel.cann is None and rel.torch == "2.15.0"
    assert rel.requires_torch == {"x86_64": "torch==2.15.0.*", "aarch64": "torch==2.15.0.*"}
    assert rel.python == {"x86_64": ("3.10", "3.11"), "aarch64": ("3.10", "3.11")}
    assert kb.environment.glibc_floor(NEW, "aarch64") == (2, 17) and kb.environment.glibc_floor(NEW, "x86_64") == (2, 28)
    assert "pairing unknown until a human confirms it" in rel.notes
    assert kb.releases.torch_npu_versions() == knowledge.load().releases.torch_npu_versions() + [NEW]
    assert [p.name for p in compat_copy.parent.iterdir()] == ["ascend-compat.yaml"]  # no temp file left

    assert releases.write(result, compat_copy) == []  # already there: untouched
    assert compat_copy.read_text() == new


def test_write_inserts_in_version_order(serve, compat_copy):
    files = new_release("2.8.0.post6", arches=("x86_64",), pythons=("cp311",))
    result = releases.check(serve(files).url, timeout=5)
    assert releases.write(result, compat_copy) == ["2.8.0.post6"]
    doc = yaml.load(compat_copy.read_text(), Loader=LOADER)
    listed = [str(i["version"]) for i in doc["torch_npu_releases"]["items"]]
    at = listed.index("2.8.0.post6")
    assert listed[at - 1: at + 2] == ["2.8.0.post5", "2.8.0.post6", "2.9.0rc1"]
    text = compat_copy.read_text()
    assert text.index("  - version: 2.8.0.post6\n") < text.index("  - version: 2.9.0rc1\n")
    release = kb_of(compat_copy).releases.torch_npu("2.8.0.post6")
    assert release and release.python == {"x86_64": ("3.11",)}


def test_a_failed_verification_restores_the_original_bytes(serve, compat_copy, monkeypatch):
    result = releases.check(serve().url, timeout=5)
    before = compat_copy.read_bytes()
    calls = []
    real = compat_file._kb_from

    def kb_from(compat, folder):  # the read-back after os.replace does not see the release
        calls.append(folder)
        return real(compat, folder) if len(calls) == 1 else knowledge.load()

    monkeypatch.setattr(compat_file, "_kb_from", kb_from)
    with pytest.raises(UserError, match="went wrong") as err:
        releases.write(result, compat_copy)
    assert len(calls) == 2 and err.value.exit_code == 1
    assert compat_copy.read_bytes() == before
    assert [p.name for p in compat_copy.parent.iterdir()] == ["ascend-compat.yaml"]


def test_write_refuses_when_the_file_changed_meanwhile(serve, compat_copy, monkeypatch):
    result = releases.check(serve().url, timeout=5)
    real = compat_file.insert_entries

    def insert_while_someone_edits(text, entries, path):
        path.write_text(text + "# edited by someone else\n")
        return real(text, entries, path)

    monkeypatch.setattr(compat_file, "insert_entries", insert_while_someone_edits)
    with pytest.raises(UserError, match="changed while releases were being added"):
        releases.write(result, compat_copy)
    assert compat_copy.read_text().endswith("# edited by someone else\n")


# --- propose ----------------------------------------------------------------------------------


def test_propose_writes_cells_that_the_matrix_loader_accepts(serve, tmp_path):
    result = releases.check(serve().url, timeout=5)
    path = tmp_path / "matrix" / "proposed.yaml"

    text = releases.propose(result, path)

    assert "# TODO: confirm CANN pairing" in text
    assert path.read_text().endswith(text)
    loaded = matrix.load(path)
    assert [f for f in loaded.findings if f.severity == "error"] == []
    assert {(c.torch_npu, c.arch, c.python, c.cann, c.os, c.chip) for c in loaded.cells} == {
        (NEW, "aarch64", "3.11", "9.1.0", "ubuntu22.04", "910b"),
        (NEW, "x86_64", "3.11", "9.1.0", "ubuntu22.04", "910b"),
    }
    before = path.read_bytes()
    assert releases.propose(result, path) == ""  # already proposed: nothing appended
    assert path.read_bytes() == before


def test_propose_appends_to_an_existing_matrix_and_keeps_its_cells(serve, tmp_path):
    files = new_release("2.8.0.post6", arches=("x86_64",), pythons=("cp310", "cp311"))
    result = releases.check(serve(files).url, timeout=5)
    path = tmp_path / "proposed.yaml"
    existing = ("image: ascend-build/pytorch\n\ndefaults:\n  os: ubuntu22.04\n\ncells:\n"
                "  - cann: 8.0.RC3\n    chip: 910b\n    arch: aarch64\n    python: \"3.10\"\n    torch_npu: 2.4.0\n")
    path.write_text(existing)

    text = releases.propose(result, path)

    assert path.read_text().startswith(existing)
    assert "9.0.0 is the newest CANN paired with a torch 2.8 torch_npu release" in text
    loaded = matrix.load(path)
    assert [f for f in loaded.findings if f.severity == "error"] == []
    assert [(c.torch_npu, c.cann, c.arch) for c in loaded.cells] == [("2.4.0", "8.0.RC3", "aarch64"),
                                                                      ("2.8.0.post6", "9.0.0", "x86_64")]


def test_propose_refuses_a_file_it_cannot_append_to(serve, tmp_path):
    result = releases.check(serve().url, timeout=5)
    path = tmp_path / "proposed.yaml"
    path.write_text("cells:\n  - cann: 8.0.RC3\n    torch_npu: 2.4.0\nimage: ascend-build/pytorch\n")
    before = path.read_bytes()
    with pytest.raises(UserError, match="'cells' is not the last key"):
        releases.propose(result, path)
    assert path.read_bytes() == before


# --- reporting ----------------------------------------------------------------------------------


def test_text_and_json_reports(serve):
    index = serve()
    result = releases.check(index.url, timeout=5)
    text = releases.format_check(result)
    lines = text.splitlines()
    assert lines[0] == f"index: {index.url}torch-npu/ (PEP 691 JSON, api 1.1)"
    assert lines[1].startswith("files: 9 (9 Linux wheels, 0 skipped); versions: 3 (2 known, 1 new); ")
    assert "  torch_npu 2.15.0: torch 2.15.0, first upload 2026-12-01, CANN unknown" in text
    assert re.search(r"x86_64 +torch==2\.15\.0\.\* +python 3\.10, 3\.11; manylinux_2_28; Requires-Python >=3\.10; "
                     r"METADATA by PEP 658 \.metadata", text)
    assert re.search(r"aarch64 +torch==2\.15\.0\.\* +python 3\.10, 3\.11; manylinux_2_17; .*METADATA by HTTP range reads", text)
    assert f"  {KNOWN[2].filename}: broken build" in text
    doc = json.loads(json.dumps(result.to_dict()))
    assert doc["new"][0]["version"] == NEW and doc["new"][0]["entry"]["cann"] is None
    assert doc["full_downloads"] == [] and doc["api"] == "json"
    assert doc["yanked"] == [{"filename": KNOWN[2].filename, "version": "2.4.0", "reason": "broken build"}]
    assert "kb" not in doc


# --- pieces -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name, arch, pythons, floor", [
    ("torch_npu-2.4.0-cp310-cp310-manylinux_2_17_aarch64.manylinux2014_aarch64.whl", "aarch64", ("3.10",), "2_17"),
    ("torch_npu-2.1.0.post3-cp39-cp39-manylinux2014_x86_64.whl", "x86_64", ("3.9",), "2_17"),
    ("torch_npu-2.14.0-cp314-cp314-manylinux_2_28_x86_64.whl", "x86_64", ("3.14",), "2_28"),
    ("torch_npu-2.1.0-cp38-cp38-linux_x86_64.whl", "x86_64", ("3.8",), None),
    ("torch_npu-2.1.0-cp38-cp38-macosx_11_0_arm64.whl", None, ("3.8",), None),
])
def test_wheel_names(name, arch, pythons, floor):
    w = releases.parse_wheel_filename(name)
    assert (w.arch, w.pythons, w.manylinux) == (arch, pythons, floor)


@pytest.mark.parametrize("name", ["torch_npu-2.1.0.tar.gz", "torch_npu-2.1.0-cp38-linux_x86_64.whl",
                                  "torch_npu-not.a.version-cp38-cp38-linux_x86_64.whl"])
def test_not_wheel_names(name):
    with pytest.raises(ValueError):
        releases.parse_wheel_filename(name)


def test_range_reader_handles_zip64_records(serve, monkeypatch):
    """Central-directory zip64 extras and an EOCD that defers to the zip64 record."""
    name = f"torch_npu-{NEW}-cp311-cp311-manylinux_2_28_x86_64.whl"
    with monkeypatch.context() as m:
        m.setattr(zipfile, "ZIP64_LIMIT", 1024)  # every offset past 1 KiB goes to zip64 fields
        body = bytearray(build_wheel(name, NEW))
    eocd = body.rfind(b"PK\x05\x06")
    assert body.rfind(b"PK\x06\x06") != -1  # zipfile wrote a zip64 end record
    struct.pack_into("<L", body, eocd + 16, 0xFFFFFFFF)  # the cd offset now lives in the zip64 record only
    with zipfile.ZipFile(io.BytesIO(bytes(body))) as zf:  # still a valid zip for the stdlib reader
        assert zf.read(f"torch_npu-{NEW}.dist-info/METADATA").decode() == metadata_text(NEW)
    index = serve([File(name, bytes(body))])
    result = releases.check(index.url, timeout=5)
    assert result.new[0].metadata[0].method == "range"
    assert result.new[0].metadata[0].torch_pin == "torch==2.15.0.*"
    assert index.served(name) < len(body) / 8



def wheel(metadata: bytes, compress: int = zipfile.ZIP_DEFLATED, payload: int = PAYLOAD, modules: int = 0,
          record: int = 0) -> Tuple[str, bytes]:
    """(file name, body) of a wheel with this METADATA; ``modules`` small files before it and a
    ``record``-byte incompressible RECORD after it push both the central directory and
    METADATA out of a range reader's first (tail) read, as in a real torch_npu wheel."""
    name = f"torch_npu-{NEW}-cp311-cp311-manylinux_2_28_x86_64.whl"
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("torch_npu/lib/libtorch_npu.so", random.Random(1).randbytes(payload), compress_type=zipfile.ZIP_STORED)
        for i in range(modules):
            zf.writestr(f"torch_npu/contrib/module_{i:04d}.py", f"X = {i}\n")
        zf.writestr(f"torch_npu-{NEW}.dist-info/METADATA", metadata, compress_type=compress)
        if record:
            zf.writestr(f"torch_npu-{NEW}.dist-info/RECORD", random.Random(2).randbytes(record).hex()[:record])
    return name, out.getvalue()


@pytest.mark.parametrize("layout, requests", [
    ({}, 1),  # the tail read holds the directory and METADATA
    ({"payload": 4 << 20, "modules": 600, "record": 48 * 1024}, 3),  # tail, central directory, METADATA
])
def test_a_metadata_read_by_ranges_takes_few_requests(serve, layout, requests):
    name, body = wheel(metadata_text(NEW).encode(), **layout)
    index = serve([File(name, body)])
    read = releases.check(index.url, timeout=5).new[0].metadata[0]
    assert read.method == "range" and read.torch_pin == "torch==2.15.0.*" and read.requires_python == ">=3.10"
    served = index.requests_for(name)
    assert len(served) == requests and all(r[1] and r[2] == 206 for r in served), served
    assert read.bytes_fetched == index.served(name) < len(body) / 8


def test_a_server_that_stops_honouring_ranges_midway_means_a_whole_download(serve):
    name, body = wheel(metadata_text(NEW).encode(), payload=1 << 20, modules=600, record=48 * 1024)
    index = serve([File(name, body)], ranges="suffix")
    read = releases.check(index.url, timeout=5).new[0].metadata[0]
    assert read.method == "download" and read.torch_pin == "torch==2.15.0.*"
    assert [r[2] for r in index.requests_for(name)] == [206, 200, 200]  # tail, directory (ignored), download


@pytest.mark.parametrize("compress", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2])
def test_any_member_codec_zipfile_knows_is_read(serve, compress):
    name, body = wheel(metadata_text(NEW).encode(), compress)
    read = releases.check(serve([File(name, body)]).url, timeout=5).new[0].metadata[0]
    assert read.method == "range" and read.torch_pin == "torch==2.15.0.*"


@pytest.mark.parametrize("ranges", [True, False])
def test_a_corrupted_metadata_fails_its_crc(serve, ranges):
    name, body = wheel(metadata_text(NEW).encode(), zipfile.ZIP_STORED)
    at = body.index(b"Requires-Dist: torch==")
    index = serve([File(name, body[:at] + b"r" + body[at + 1:])], ranges=ranges)
    with pytest.raises(UserError, match=r"malformed wheel: torch_npu-2\.15\.0\.dist-info/METADATA: Bad CRC-32") as err:
        releases.check(index.url, timeout=5)
    assert err.value.exit_code == 1 and f"/files/{name}" in err.value.message


def _declare_size(body: bytes, member: str, size: int) -> bytes:
    """``body`` with ``member``'s uncompressed size rewritten in its local and central headers."""
    with zipfile.ZipFile(io.BytesIO(body)) as zf:
        local = zf.getinfo(member).header_offset
    central = body.rindex(b"PK\x01\x02", 0, body.rindex(member.encode()))
    out = bytearray(body)
    struct.pack_into("<L", out, local + 22, size)
    struct.pack_into("<L", out, central + 24, size)
    return bytes(out)


@pytest.mark.parametrize("ranges", [True, False])
@pytest.mark.parametrize("declared, what", [
    (None, "inflates to more than 1048576 bytes; refused"),  # its honest size is refused unread
    (metadata.METADATA_MAX, "Bad CRC-32"),  # a lying size: inflating stops there, and the CRC catches it
])
def test_a_zip_bomb_metadata_is_refused_in_bounded_memory(serve, ranges, declared, what):
    bomb = metadata_text(NEW).encode() + b"\0" * (64 << 20)  # 64 MiB that deflate to ~64 KiB
    name, body = wheel(bomb)
    del bomb
    if declared is not None:
        body = _declare_size(body, f"torch_npu-{NEW}.dist-info/METADATA", declared)
    index = serve([File(name, body)], ranges=ranges)
    tracemalloc.start()
    try:
        with pytest.raises(UserError, match=what) as err:
            releases.check(index.url, timeout=5)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert err.value.exit_code == 1 and "malformed wheel" in err.value.message
    assert peak < 3 * metadata.METADATA_MAX + 2 * len(body), peak


def test_an_answer_over_the_size_cap_is_refused(serve, monkeypatch):
    monkeypatch.setattr(http_client, "MAX_BODY", 64 * 1024)
    index = serve(ranges=False)  # so the aarch64 wheel (262 KiB) is downloaded whole
    with pytest.raises(UserError, match="larger than 65536 bytes; refused") as err:
        releases.check(index.url, timeout=5)
    assert err.value.exit_code == 1 and "/files/torch_npu-2.15.0-" in err.value.message


def test_default_index_url_is_ours_then_pips_then_the_public_one(monkeypatch, tmp_path):
    monkeypatch.setenv(releases.INDEX_URL_ENV, "http://127.0.0.1:1/ours/")
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:1/pip-env/")
    assert releases.default_index_url() == "http://127.0.0.1:1/ours/"
    monkeypatch.delenv(releases.INDEX_URL_ENV)
    assert releases.default_index_url() == "http://127.0.0.1:1/pip-env/"
    monkeypatch.delenv("PIP_INDEX_URL")
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = http://127.0.0.1:1/global/\n[install]\nindex-url = http://127.0.0.1:1/install/\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    assert releases.default_index_url() == "http://127.0.0.1:1/install/"  # what `pip install` would use
    for no_pip in [(sys.executable, "-c", "raise SystemExit(1)"), (str(tmp_path / "no-such-pip"),)]:
        monkeypatch.setattr(index_module, "PIP_CONFIG_LIST", no_pip)
        assert releases.default_index_url() == index_module.PUBLIC_INDEX_URL == "https://pypi.org/simple/"


def test_modules_share_only_public_names():
    """A name one module imports from another is public; nothing comes from pip's internals."""
    for path in sorted(Path(releases.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            assert not [n for n in names if n.startswith("pip._internal")], path.name
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("builder.releases"):
                assert not [a.name for a in node.names if a.name.startswith("_")], (path.name, node.module)

def test_pins_and_metadata_parsing():
    assert releases.torch_pin(["numpy", "Torch==2.1.0+cpu ; platform_machine=='x86_64'"]).startswith("Torch==2.1.0+cpu")
    assert releases.torch_of_pin("torch==2.14.0.*") == "2.14.0"
    assert releases.parse_metadata(metadata_text("2.15.0"))[2] == ("torch==2.15.0.*", "numpy", "pyyaml")


def test_module_examples_hold():
    modules = [releases] + [importlib.import_module(m.name) for m in pkgutil.iter_modules(releases.__path__, "builder.releases.")]
    results = [doctest.testmod(module, optionflags=doctest.ELLIPSIS) for module in modules]
    result = doctest.TestResults(sum(r.failed for r in results), sum(r.attempted for r in results))
    assert result.attempted >= 15 and result.failed == 0


@pytest.mark.parametrize("trickle, within", [("Trickle", 30), ("TrickleHead", 10)])
def test_an_index_that_trickles_is_cut_off_at_the_deadline(monkeypatch, trickle, within):
    """A server that sends a byte every 0.2 s never trips the per-read timeout; the deadline stops it,
    in the body (200 s of it) as in the status line and headers (25 s of them)."""
    import time as _time
    from tests.support import registry as hr
    from builder.releases import http_client

    server, port = hr.serve(getattr(hr, trickle))
    monkeypatch.setattr(http_client, "DEADLINE", 1.0)
    started = _time.monotonic()
    try:
        with pytest.raises(UserError) as cut:
            http_client.Http(timeout=5).get(f"http://127.0.0.1:{port}/simple/torch-npu/")
    finally:
        server.shutdown()
    assert "did not arrive within 1 s" in cut.value.message
    assert _time.monotonic() - started < within  # not the time the server would take


@pytest.mark.parametrize("body, outcome", [
    (b"[" * 100000 + b"]" * 100000, "malformed project page: JSON nested too deep"),
    (b'{"meta": "x", "files": []}', "malformed project page: 'meta' is not an object"),
    (b'{"meta": [1], "files": []}', "malformed project page: 'meta' is not an object"),
    (b'{"meta": {"api-version": "1.0"}, "files": [{"filename": "torch_npu-2.1.0-cp39-cp39-manylinux2014_x86_64.whl",'
     b' "url": "t.whl", "hashes": [1, 2], "requires-python": 3, "upload-time": [], "yanked": 7}]}',
     [("torch_npu-2.1.0-cp39-cp39-manylinux2014_x86_64.whl", {}, None, None)]),
])
def test_a_mistyped_json_project_page_is_read_or_refused_never_a_traceback(body, outcome):
    from builder.releases import index
    url = "http://127.0.0.1/simple/torch-npu/"
    if isinstance(outcome, str):
        with pytest.raises(UserError) as refused:
            index.parse_json_page(body, url)
        assert outcome in refused.value.message
        return
    _, files = index.parse_json_page(body, url)
    assert [(f.filename, f.hashes, f.requires_python, f.upload_time) for f in files] == outcome


# --- hostile indexes ----------------------------------------------------------------------------


def test_a_file_url_listed_by_an_index_is_never_opened(serve, compat_copy):
    page = json.dumps({"meta": {"api-version": "1.1"}, "files": [
        {"filename": "torch_npu-2.99.0-cp311-cp311-manylinux_2_28_x86_64.whl", "hashes": {},
         "url": "file:///etc/passwd", "core-metadata": True}]}).encode()
    index = serve(mode=("application/vnd.pypi.simple.v1+json", page))
    with pytest.raises(UserError) as err:
        check_then_write(index.url, compat_copy)
    assert err.value.message.startswith("file:///etc/passwd") and "is not an http(s) URL; not fetched" in err.value.message


def test_a_wheel_without_a_cpython_tag_is_skipped_not_recorded(serve):
    odd = "torch_npu-2.99.0-cp٣١١-cp٣١١-manylinux_2_28_x86_64.whl"
    page = json.dumps({"meta": {"api-version": "1.1"}, "files": [
        {"filename": odd, "url": f"../../files/{odd}", "hashes": {}}]}).encode()
    index = serve(mode=("application/vnd.pypi.simple.v1+json", page))
    result = releases.check(index.url)
    assert result.new == [] and result.skipped == [f"{odd}: no CPython tag (cpXY)"]


def test_digits_of_other_scripts_are_no_python_or_glibc_version():
    """'cp٣١١' and 'manylinux_٢_٢٨' match \\d but name nothing: they never reach the knowledge base."""
    arabic = releases.parse_wheel_filename("torch_npu-2.99.0-cp٣١١-cp٣١١-manylinux_٢_٢٨_x86_64.whl")
    assert arabic.pythons == () and arabic.arch is None and arabic.manylinux is None
    plain = releases.parse_wheel_filename("torch_npu-2.99.0-cp311-cp311-manylinux_2_28_x86_64.whl")
    assert plain.pythons == ("3.11",) and plain.arch == "x86_64"


def test_a_non_ascii_url_is_fetched_percent_encoded(tmp_path, serve_folder):
    from builder.releases.http_client import Http

    (tmp_path / "wheel-ä٣.txt").write_bytes(b"found")
    status, _, body, _ = Http(5).get(f"{serve_folder(tmp_path)}/wheel-ä٣.txt")
    assert (status, body) == (200, b"found")


# --- nesting: files the watcher edits ------------------------------------------------------------


def test_a_knowledge_base_copy_nested_past_any_need_is_refused_and_left_as_it_was(serve, compat_copy):
    compat_copy.write_text(compat_copy.read_text() + "deep: " + "[" * 900 + "]" * 900 + "\n")
    before = compat_copy.read_bytes()
    result = releases.check(serve().url, timeout=5)
    with pytest.raises(UserError) as refused:
        releases.write(result, compat_copy)
    assert str(compat_copy) in refused.value.message and "nested deeper than 64 levels" in refused.value.message
    assert compat_copy.read_bytes() == before


def test_a_proposal_file_nested_past_any_need_is_refused_and_left_as_it_was(serve, tmp_path):
    path = tmp_path / "proposed.yaml"
    path.write_text("image: ascend-build/pytorch\ncells:\n  - cann: " + "[" * 900 + "]" * 900 + "\n")
    before = path.read_bytes()
    result = releases.check(serve().url, timeout=5)
    with pytest.raises(UserError) as refused:
        releases.propose(result, path)
    assert str(path) in refused.value.message and "nested deeper than 64 levels" in refused.value.message
    assert path.read_bytes() == before


def test_a_content_range_of_absurd_length_means_no_ranges():
    from tests.support import registry as hr
    huge = "9" * 5000
    server, port = hr.serve(hr.answering(206, {"Content-Range": f"bytes 0-1/{huge}", "Content-Length": "2"}, b"PK"))
    try:
        with pytest.raises(http_client.NoRanges):
            http_client.RangeFile(http_client.Http(5), f"http://127.0.0.1:{port}/files/t.whl")
    finally:
        server.shutdown()


@pytest.mark.parametrize("version, why", [("1" * 5000, "holds a number of more than 100 digits"),
                                          ("'" + "1" * 5000 + "'", "is not a PEP 440 version")])
def test_a_knowledge_base_copy_with_an_absurdly_long_version_is_refused_and_left_as_it_was(serve, compat_copy,
                                                                                           version, why):
    text = compat_copy.read_text()
    first = re.search(r"^  - version: (\S+)$", text, re.M)
    assert first
    compat_copy.write_text(text.replace(first.group(0), "  - version: " + version, 1))
    before = compat_copy.read_bytes()
    result = releases.check(serve().url, timeout=5)
    with pytest.raises(UserError) as refused:
        releases.write(result, compat_copy)
    assert str(compat_copy) in refused.value.message and why in refused.value.message
    assert refused.value.exit_code == 1 and compat_copy.read_bytes() == before


# --- deadlines: per answer (head included) and per command ---------------------------------------


@pytest.mark.parametrize("how", ["option", "environment"])
def test_releases_check_against_a_slow_drip_index_stops_at_the_commands_deadline(how):
    """The page trickles for 200 s, within the 300 s an answer may take: only the command's deadline stops it."""
    import os
    import subprocess
    import time as _time
    from tests.support import registry as hr
    from tests.support.matrix import cli_exe

    server, port = hr.serve(hr.Trickle)
    env = dict(os.environ, NO_PROXY="127.0.0.1", no_proxy="127.0.0.1")
    args = [*cli_exe(), "releases", "check", "--index-url", f"http://127.0.0.1:{port}/simple/"]
    if how == "option":
        args += ["--deadline", "2"]
    else:
        env["ASCEND_BUILD_DEADLINE"] = "2"
    started = _time.monotonic()
    try:
        done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=60)
    finally:
        server.shutdown()
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "the command's deadline of 2 s passed" in done.stderr and "ASCEND_BUILD_DEADLINE" in done.stderr
    assert _time.monotonic() - started < 15


def test_wheel_tags_with_numbers_of_any_length_name_no_python_or_glibc():
    huge = "9" * 5000
    wheel = releases.parse_wheel_filename(f"torch_npu-2.99.0-cp3{huge}-cp3{huge}-manylinux_2_{huge}_x86_64.whl")
    assert wheel.pythons == () and wheel.manylinux is None and wheel.arch is None
    with pytest.raises(ValueError, match="is not PEP 440"):
        releases.parse_wheel_filename(f"torch_npu-{huge}-cp311-cp311-linux_x86_64.whl")
