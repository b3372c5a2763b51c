"""What ascend-build prints cannot drive a terminal or forge a CI annotation (builder/cli/safe_output.py):
unit cases, and the real entry point fed a matrix whose key carries a newline, a GitHub
Actions command and terminal sequences."""

from __future__ import annotations

import doctest
import io
import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from builder.cli import safe_output
from tests.support.matrix import run_cli


def test_module_examples_hold():
    assert doctest.testmod(safe_output).failed == 0


@pytest.mark.parametrize("text, at_start, shown", [
    ("::error::x", True, ":\\x3aerror::x"),
    ("::error::x", False, "::error::x"),                    # mid-line: no command
    ("a\n  ::warning::x\n", False, "a\n  :\\x3awarning::x\n"),
    ("title\x1b]0;pwned\x07", True, "title\\x1b]0;pwned\\x07"),
    ("\x1b[2J\x1b[H", True, "\\x1b[2J\\x1b[H"),             # clear screen: escaped
    ("\x1b[1;31mred\x1b[0m", True, "\x1b[1;31mred\x1b[0m"),  # colour: kept
    ("over\rwrite", True, "over\\rwrite"),
    ("tab\tand\nnewline", True, "tab\tand\nnewline"),
    ("\u202eevil", True, "\\u202eevil"),
])
def test_safe(text, at_start, shown):
    assert safe_output.safe(text, at_start) == shown


def test_the_stream_knows_where_a_line_starts_across_writes():
    out = io.StringIO()
    stream = safe_output.SafeStream(out)
    for part in ("partial ", "::not a command\n", "::a command\n"):
        stream.write(part)
    assert out.getvalue() == "partial ::not a command\n:\\x3aa command\n"


def test_a_forged_annotation_in_a_duplicate_key_is_printed_harmlessly(tmp_path):
    key = '"zz\\n::error file=x::INJECTED\\e]0;title\\a\\e[2J"'
    (tmp_path / "m.yaml").write_text(
        "image: ascend-build/pytorch\ncells:\n  - cann: 7.0.RC1\n    chip: 910b\n    arch: x86_64\n"
        f'    python: "3.9"\n    torch_npu: 2.1.0rc1\n    {key}: 1\n    {key}: 2\n')
    out = run_cli("validate", "--matrix", tmp_path / "m.yaml")
    assert out.returncode == 2 and "appears twice in one mapping" in out.stderr
    printed = out.stdout + out.stderr
    assert "INJECTED" in printed                                    # shown...
    assert not [line for line in printed.splitlines() if line.lstrip().startswith("::")]  # ...never as a command
    assert "\x1b" not in printed and "\x07" not in printed


# --- properties over any text, written in any pieces ---------------------------------------

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_PIECE = st.text(alphabet=st.sampled_from([":", ":", " ", "\t", "\n", "\r", "\x1b", "[", "m", "0", "3", ";", "]",
                                           "\x07", "a", "e", "\u202e", "\x85", "\x00"]), max_size=12)


@settings(max_examples=500)
@given(pieces=st.lists(_PIECE, max_size=8), at_start=st.booleans())
@example(pieces=["\n:", ":error"], at_start=True)
@example(pieces=["\n", " ", "::x"], at_start=False)
def test_no_piecing_of_writes_lets_a_command_line_or_a_control_character_through(pieces, at_start):
    """However the text is cut into writes (print writes its arguments and the newline one by
    one), no printed line starts a workflow command and no control character but a colour
    sequence, a newline or a tab reaches the terminal."""
    out = io.StringIO()
    stream = safe_output.SafeStream(out)
    if not at_start:
        stream.write("x")
    for piece in pieces:
        stream.write(piece)
    shown = out.getvalue()
    assert not _CONTROL.search(re.sub(r"\x1b\[[0-9;]*m", "", shown).replace("\n", "").replace("\t", ""))
    assert not [line for line in shown.split("\n") if line.lstrip(" \t").startswith("::")], shown
