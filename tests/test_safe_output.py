"""What ascend-build prints cannot drive a terminal or forge a CI annotation (builder/cli/safe_output.py):
unit cases, and the real entry point fed a matrix whose key carries a newline, a GitHub
Actions command and terminal sequences."""

from __future__ import annotations

import doctest
import io

import pytest

from builder.cli import safe_output
from helpers_matrix import run_cli


def test_module_examples_hold():
    assert doctest.testmod(safe_output).failed == 0


@pytest.mark.parametrize("text, at_start, shown", [
    ("::error::x", True, "\\x3a:error::x"),
    ("::error::x", False, "::error::x"),                    # mid-line: no command
    ("a\n  ::warning::x\n", False, "a\n  \\x3a:warning::x\n"),
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
    assert out.getvalue() == "partial ::not a command\n\\x3a:a command\n"


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
