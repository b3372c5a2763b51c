"""`lock` records the sha256 of CANN installers published without one, the first time it can
fetch them (builder/images/fetch.py, relock.record_installers).

The download server cannot be reached here, so a plain HTTP server on loopback serves the
release folder's files; record_installers is given a fetch that is the real one, pointed
at that server instead of the release folder's host.
"""

from __future__ import annotations

import hashlib
from typing import List
from dataclasses import replace
from http.server import BaseHTTPRequestHandler

import pytest

from tests.support import registry as hr
from builder import knowledge
from builder.images import fetch, lock as locking, matrix, plan, relock
from builder.images.facts import resolve_facts
from builder.errors import UserError
from tests.support import locks
from tests.support.matrix import REPO, SHIPPED_MATRIX

DEMO = "cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64"
FILES = {"Ascend-cann-toolkit_9.1.0_linux-x86_64.run": b"#!/bin/sh\necho toolkit\n" * 1000,
         "Ascend-cann-910b-ops_9.1.0_linux-x86_64.run": b"#!/bin/sh\necho ops\n" * 500}
NNAL = {"Ascend-cann-nnal_9.1.0_linux-x86_64.run": b"#!/bin/sh\necho nnal\n" * 300}


@pytest.fixture
def release_folder():
    """A loopback server holding the 9.1.0 release folder; yields (its URL, the Referers it saw)."""
    seen = []

    class Folder(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            seen.append(self.headers.get("Referer"))
            name = self.path.rsplit("/", 1)[-1]
            body = {**FILES, **NNAL}.get(name)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

    server, port = hr.serve(Folder)
    yield f"http://127.0.0.1:{port}/CANN/CANN%209.1.0/", seen
    server.shutdown()


def test_a_file_is_hashed_as_served_with_the_referer(release_folder):
    folder, seen = release_folder
    name = "Ascend-cann-toolkit_9.1.0_linux-x86_64.run"
    assert fetch.sha256_of_url(folder + name, referer="https://www.hiascend.com/") == (
        hashlib.sha256(FILES[name]).hexdigest(), len(FILES[name]))
    assert seen == ["https://www.hiascend.com/"]
    with pytest.raises(UserError, match="the server answered HTTP 404"):
        fetch.sha256_of_url(folder + "missing.run", referer="")


def test_lock_records_each_unhashed_installer_once_and_keeps_it(release_folder):
    folder, seen = release_folder
    kb = knowledge.load()
    cell = next(c for c in matrix.load(SHIPPED_MATRIX).cells if c.id == DEMO)
    published = kb.downloads.cann_release_folder("9.1.0")

    def local(url, referer):  # the real fetch, at the loopback copy of the release folder
        return fetch.sha256_of_url(url.replace(published, folder), referer=referer)

    lock = locks.read(REPO / "dockerfiles" / DEMO)
    said: List[str] = []
    made, missing = relock.record_installers(resolve_facts(cell, kb), lock, local, said.append)
    assert missing == () and dict(made.installers) == {n: hashlib.sha256(b).hexdigest() for n, b in FILES.items()}
    assert len(seen) == 2 and set(seen) == {kb.downloads.download_referer()}
    assert locking.Lock.parse(made.text()).installers == made.installers  # written and read back
    assert "# installer: Ascend-cann-910b-ops_9.1.0_linux-x86_64.run sha256:" in made.text()

    def unreachable(url, referer):
        raise UserError(f"{url}: cannot be fetched")

    again, missing = relock.record_installers(resolve_facts(cell, kb), made, unreachable, said.append)
    assert (again.installers, missing) == (made.installers, ())  # recorded once, never fetched again
    untouched, missing = relock.record_installers(resolve_facts(cell, kb), lock, unreachable, said.append)
    assert untouched.installers == () and set(missing) == set(FILES)


def test_a_cell_with_nnal_records_its_installer_too(release_folder):
    folder, _ = release_folder
    kb = knowledge.load()
    cell = replace(next(c for c in matrix.load(SHIPPED_MATRIX).cells if c.id == DEMO), nnal=True)
    published = kb.downloads.cann_release_folder("9.1.0")
    lock = locks.read(REPO / "dockerfiles" / DEMO)
    made, missing = relock.record_installers(
        resolve_facts(cell, kb), lock, lambda url, referer: fetch.sha256_of_url(url.replace(published, folder), referer=referer),
        lambda _: None)
    assert missing == () and dict(made.installers) == {n: hashlib.sha256(b).hexdigest() for n, b in {**FILES, **NNAL}.items()}
    assert plan.unrecorded_installers(cell, kb, made) == () != plan.unrecorded_installers(cell, kb, lock)


def test_a_content_length_of_absurd_length_is_a_clear_error():
    server, port = hr.serve(hr.answering(200, {"Content-Length": "9" * 5000}, b"x"))
    try:
        with pytest.raises(UserError) as refused:
            fetch.sha256_of_url(f"http://127.0.0.1:{port}/a.run", referer="")
    finally:
        server.shutdown()
    assert "bytes arrived of the" in refused.value.message or "announced" in refused.value.message


def test_a_server_trickling_its_status_line_and_headers_is_cut_off_at_the_deadline():
    import time
    server, port = hr.serve(hr.TrickleHead)
    started = time.monotonic()
    try:
        with pytest.raises(UserError) as cut:
            fetch.sha256_of_url(f"http://127.0.0.1:{port}/a.run", referer="", read_timeout=5, deadline=1.0)
    finally:
        server.shutdown()
    assert "not there within the deadline" in cut.value.message
    assert time.monotonic() - started < 10  # not the 25 s the head takes


def test_an_index_page_that_trickles_stops_at_the_commands_deadline():
    """`lock` reads the torch index page for its hashes: the command's deadline bounds that read too."""
    import time
    from builder import bounded
    server, port = hr.serve(hr.Trickle)
    started = time.monotonic()
    try:
        with bounded.command_deadline(2), pytest.raises(UserError) as late:
            locking.page_hashes(f"http://127.0.0.1:{port}/torch/", "torch", "2.1.0+cpu", "3.9", "x86_64", timeout=5)
    finally:
        server.shutdown()
    assert "the command's deadline of 2 s passed" in late.value.message
    assert time.monotonic() - started < 10


# --- before any build step: the download server is asked first (issue 26) ----------------------


def test_a_reachable_installer_passes_the_probe_and_is_asked_for_one_byte(release_folder):
    folder, seen = release_folder
    fetch.reachable(folder + "Ascend-cann-toolkit_9.1.0_linux-x86_64.run", referer="https://www.hiascend.com/")
    assert seen == ["https://www.hiascend.com/"]
    with pytest.raises(UserError, match="the download server answered HTTP 404; nothing was built"):
        fetch.reachable(folder + "missing.run", referer="")


def test_an_unreachable_download_server_is_a_clear_error_at_once():
    server, port = hr.serve(BaseHTTPRequestHandler)
    server.shutdown()
    server.server_close()  # nothing listens on the port now
    with pytest.raises(UserError, match="the download server cannot be reached") as caught:
        fetch.reachable(f"http://127.0.0.1:{port}/x.run", referer="", timeout=5)
    assert "cann_source: {local: DIR}" in caught.value.fix
