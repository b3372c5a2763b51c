"""Options and arguments that name a file or folder: the value must be a name, not another option.

An option that takes a value takes the next word, whatever it is: ``host --nfd --cdi -``
gives ``--nfd`` the value ``--cdi`` and would write a file of that name. Every option or
argument naming a file or folder is declared with one of the callbacks at the end (made by
``names``): while the command line is parsed, before the command runs, it refuses a value
that starts with ``-`` (a usage error, exit 2); ``-`` itself passes only where the option
gives it a meaning (``--nfd -``: standard output). ``--trust-key`` is read by
`builder.cli.trust_key`, which asks `refusal` the same question. tests/test_cli_file_options.py
finds every such option from the CLI and checks it carries one.

Example:
    >>> refusal("--nfd", "--cdi", "file", dash="standard output")
    "--nfd takes a file name, got '--cdi' (an option?): give the file, or '-' for standard output"
    >>> refusal("--out", "-", "folder")
    "--out takes a folder name, got '-' (standard input or output, which --out does not take): give the folder"
    >>> refusal("--out", "out/", "folder")
    ''
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

import typer


def refusal(flag: str, value: str, what: str = "file", dash: str = "") -> str:
    """Why ``value`` is no ``what`` name for ``flag`` ("" when it may be one). ``dash``: what ``-``
    means to ``flag`` (e.g. "standard output"), "" when nothing."""
    offer = f"give the {what}" + (f", or '-' for {dash}" if dash else "")
    if value == "-":
        return "" if dash else (f"{flag} takes a {what} name, got '-' (standard input or output, which {flag} "
                                f"does not take): give the {what}")
    if value.startswith("-"):
        return f"{flag} takes a {what} name, got {value!r} (an option?): {offer}"
    return ""


class NotAName(typer.BadParameter):
    """A usage error (exit 2) whose text is the refusal alone (click would prefix "Invalid value for ...")."""

    def format_message(self) -> str:
        return self.message


def _flag(ctx: typer.Context, param: typer.CallbackParam) -> str:
    """How the user named ``param``: its longest option, its metavar, or its environment variable."""
    flag = (max(param.opts, key=len) if param.opts and param.opts[0].startswith("-")
            else param.metavar or (param.name or "").upper())
    source = ctx.get_parameter_source(param.name) if param.name else None
    if getattr(source, "name", "") == "ENVIRONMENT" and isinstance(param.envvar, str):
        return f"${param.envvar} ({flag})"
    return flag


def names(what: str = "file", dash: str = "", exists: bool = False) -> Callable[..., Any]:
    """The ``callback=`` of an option or argument naming a ``what`` ("file", "folder", "file or folder");
    ``dash``: what ``-`` means to it (then ``-`` is let through), "" when nothing; ``exists``: the file
    must be there (checked here, after the name: typer's own ``exists=`` would check first)."""
    def check(ctx: typer.Context, param: typer.CallbackParam, value: Optional[Any]) -> Optional[Any]:
        for one in value if isinstance(value, (list, tuple)) else [value]:
            if one is None:
                continue
            flag = _flag(ctx, param)
            why = refusal(flag, str(one), what, dash)
            if not why and exists and not Path(one).is_file():
                why = f"{flag}: {str(one)!r} is no {what}" + (" (it is a folder)" if Path(one).is_dir() else
                                                               " (nothing is there)")
            if why:
                raise NotAName(why, ctx=ctx)
        return value

    check.names = what  # type: ignore[attr-defined]  # what tests/test_cli_file_options.py looks for
    return check


# the callbacks, one per kind of name (module-level: a call in an argument default runs once anyway)
FILE = names("file")
FOLDER = names("folder")
FILE_OR_FOLDER = names("file or folder")
URL_OR_FILE = names("URL or file")
FILE_OR_STDOUT = names("file", dash="standard output")
EXISTING_FILE = names("file", exists=True)
REGISTRY_OR_LAYOUT = names("registry or oci:FOLDER")
