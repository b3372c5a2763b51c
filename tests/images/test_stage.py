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
