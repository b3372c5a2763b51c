"""The build context's folder: one per arch and variant, held by one build at a time.

BuildKit keys what it already holds of a context by the folder's path (the docker CLI's
session key), so the folder must be the same from one build to the next for a torch_npu
bump to send only the changed files; measured in benchmarks/bench_build.py.
"""

from __future__ import annotations

import threading

from builder.images import stage


def test_one_folder_per_arch_and_variant(tmp_path):
    with stage.claim(tmp_path, "x86_64", "npu") as first:
        pass
    with stage.claim(tmp_path, "x86_64", "npu") as again, stage.claim(tmp_path, "aarch64", "npu") as arm:
        with stage.claim(tmp_path, "x86_64", "cpu") as twin:
            assert first == again == tmp_path / "npu-x86_64"
            assert len({first, arm, twin}) == 3


def test_a_held_folder_waits_for_its_build(tmp_path):
    """Another ascend-build on the same state folder waits instead of rewriting a context in use."""
    entered = threading.Event()

    def second():
        with stage.claim(tmp_path, "x86_64", "npu"):
            entered.set()

    with stage.claim(tmp_path, "x86_64", "npu"):
        waiter = threading.Thread(target=second)
        waiter.start()
        assert not entered.wait(0.5)  # still held here
    assert entered.wait(10)  # released: the other build goes on
    waiter.join()


def test_a_file_where_the_scratch_folder_goes_is_replaced_not_a_blocked_build(tmp_path):
    """`contexts/cpu-x86_64` is the tool's own scratch folder: a file there (a killed tool, a stray
    `touch`) blocked every build with advice about permissions; it is removed and the folder made."""
    contexts = tmp_path / "state" / "contexts"
    contexts.mkdir(parents=True)
    (contexts / "cpu-x86_64").write_text("not a folder\n")
    with stage.claim(contexts, "x86_64", "cpu") as folder:
        made = stage.context({"Dockerfile": b"FROM scratch\n"}, folder)
    assert made.is_dir() and (made / "Dockerfile").read_bytes() == b"FROM scratch\n"


def test_a_link_where_the_scratch_folder_goes_is_removed_never_followed(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("someone's\n")
    contexts = tmp_path / "contexts"
    contexts.mkdir()
    (contexts / "cpu-aarch64").symlink_to(elsewhere)
    with stage.claim(contexts, "aarch64", "cpu") as folder:
        stage.context({"Dockerfile": b"FROM scratch\n"}, folder)
    assert not (contexts / "cpu-aarch64").is_symlink() and (contexts / "cpu-aarch64" / "Dockerfile").is_file()
    assert (elsewhere / "keep.txt").read_text() == "someone's\n"


def test_a_file_where_the_contexts_folder_goes_is_replaced(tmp_path):
    (tmp_path / "contexts").write_text("x")
    with stage.claim(tmp_path / "contexts", "x86_64", "cpu") as folder:
        stage.context({"Dockerfile": b"FROM scratch\n"}, folder)
    assert (tmp_path / "contexts" / "cpu-x86_64" / "Dockerfile").is_file()
