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


PARSERS = (
    host.ranges, host.soc_name, host.chip_of_soc, host.parse_smi_table,
    lambda text: host.soc_from_board(host.parse_board(text)),
    lambda text: host.soc_from_board({k: text for k in ("Chip Name", "Chip Type", "Board ID", "NPU Name")}),
    parsers.parse_kv, parsers.cann_version_from_cfg, parsers.cann_version_from_install_info, parsers.info_version,
    parsers.parse_ldd, parsers.canonical,  # (the image side: the smoke program's own parsers)
)


@settings(max_examples=600, deadline=None)
@given(text=TEXT)
def test_every_parser_of_foreign_text_takes_any_text(text):
    for parse in PARSERS:
        parse(text)
