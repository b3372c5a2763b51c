"""Property: the parsers that read what a host, npu-smi or an installed CANN wrote take any
text and return a value or nothing, never raise: those files and that output are not ours."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from builder.node import host
from builder.smoke import parsers

# Text near what the real files hold (keys, separators, table rules, versions), and anything.
TOKENS = list("|+-=:.\n\t ") + ["Version", "NPU", "Name", "910B3", "Ascend", "version=", "Innerversion=",
                                  "24.1.RC3", "7.5.0.1.129", "Chip Name", "Board ID", "0x", "OK", "=>", "(0x", ")",
                                  "not found", "\x00", "\u202e", "9" * 30]
NEAR = st.lists(st.sampled_from(TOKENS), max_size=40).map("".join)
TEXT = st.one_of(NEAR, st.text(max_size=200))


@settings(max_examples=600, deadline=None)
@given(text=TEXT)
def test_host_parsers_take_any_text(text):
    host.ranges(text)
    host.soc_name(text)
    host.chip_of_soc(text)
    host.parse_smi_table(text)
    board = host.parse_board(text)
    host.soc_from_board(board)
    host.soc_from_board({k: text for k in ("Chip Name", "Chip Type", "Board ID", "NPU Name")})


@settings(max_examples=600, deadline=None)
@given(text=TEXT)
def test_image_side_parsers_take_any_text(text):
    parsers.parse_kv(text)
    parsers.cann_version_from_cfg(text)
    parsers.cann_version_from_install_info(text)
    parsers.info_version(text)
    parsers.parse_ldd(text)
    parsers.canonical(text)
