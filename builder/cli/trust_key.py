"""The team's public key a command trusts: ``--trust-key FILE``, else ``$ASCEND_BUILD_TRUST_KEY``, else
the node's default key file (``NODE_KEY_FILE``, vocabulary.NODE_TRUST_KEY) when it exists, decided in
one place for `pull`, `run`, `index`, `k8s job` and `mirror`.

Only no option, an unset variable and no node default file mean "no key" (the image is then chosen on its labels
alone, as each command says). A value that names no key is an error naming the option or the
variable, never a silent "no key": empty (``--trust-key ""``, a variable set to nothing), a
folder (``--trust-key .``), a missing or unreadable file, a file that is no P-256 public key,
an option (``--trust-key --require``). `run` offers ``--insecure``: with it such a key is
left out and the refusal is handed back for the command to say loudly.

Example:
    >>> trust_key(None, environ={}).key is None
    True
    >>> trust_key(".", environ={})
    Traceback (most recent call last):
    ...
    builder.errors.UserError: --trust-key '.' is a folder, not the team's public key file
      fix: give --trust-key the team's public key file (...), or leave --trust-key out to choose on labels alone ...
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

import typer

from builder import vocabulary
from builder.cli.paths import refusal
from builder.errors import UserError
from builder.trust.policy import TRUST_KEY_ENV
from builder.trust.signing import PublicKey

OPTION = "--trust-key"
# A node's default trust key, for every command that takes --trust-key: the team's .pub put here by
# whoever sets the node up. Only when neither the option nor the variable is given; there but not a
# public key file, it is an error (never a silent "no key"), as the option's value would be.
NODE_KEY_FILE = Path(vocabulary.NODE_TRUST_KEY)
# no envvar= here: click takes a variable set to nothing for an unset one; `trust_key` reads it itself
TrustKeyOpt = typer.Option(None, OPTION, metavar="FILE",
                           help="The team's public key (.pub): only images whose signed validation statement "
                                f"verifies with it are trusted (also ${TRUST_KEY_ENV}, else {NODE_KEY_FILE} when it "
                                "exists; given but naming no key file: an error).")


@dataclass(frozen=True)
class TrustKey:
    """The key decided on: ``key`` None means no statement is checked."""

    key: Optional[PublicKey]
    path: str = ""      # the file it was read from
    named: str = ""     # where it was named: --trust-key, or $ASCEND_BUILD_TRUST_KEY
    refused: str = ""   # with --insecure: why the key named could not be used ("" otherwise)


def _why_not(value: str, named: str) -> str:
    """Why ``value`` names no key file ("" when it may), said of ``named`` (the option or the variable)."""
    if value == "":
        return f"{named} is empty: it names no public key file" if named == OPTION else \
            f"{named} is set but empty: it names no public key file"
    said = refusal(named, value, "file")
    if said:
        return said
    path = Path(value)
    if path.is_dir():
        return f"{named} {value!r} is a folder, not the team's public key file"
    if not path.exists():
        return f"{named} {value!r}: no such file"
    return ""


def trust_key(option: Optional[str], insecure: Optional[bool] = None,
              environ: Mapping[str, str] = os.environ, node_default: Path = NODE_KEY_FILE) -> TrustKey:
    """The key of ``--trust-key`` (``option``), else of ``$ASCEND_BUILD_TRUST_KEY``, else the node's default
    key file ``node_default`` when it exists; no key when none of them is there.

    ``insecure``: the command's ``--insecure`` (None: it has none). A value naming no usable key
    is a UserError (exit 2) saying which and how to fix it; under ``--insecure`` it is returned as
    ``refused`` instead, with no key.
    """
    from builder.trust import signing

    if option is not None:
        value, named = option, OPTION
    elif TRUST_KEY_ENV in environ:
        value, named = environ[TRUST_KEY_ENV], TRUST_KEY_ENV
    elif os.path.lexists(node_default):
        value, named = str(node_default), "the node's default key"
    else:
        return TrustKey(None)
    node = named not in (OPTION, TRUST_KEY_ENV)
    give = (f"give {OPTION} the team's public key file" if named == OPTION
            else f"set {TRUST_KEY_ENV} to the team's public key file" if not node
            else f"put the team's public key file at {node_default}") + " (the .pub of `ascend-build keys generate`)"
    without = ("pass --insecure to start the image with no statement checked" if insecure is not None
               else f"leave {OPTION} out to choose on labels alone (no statement checked)" if named == OPTION
               else f"unset {TRUST_KEY_ENV} to choose on labels alone (no statement checked)" if not node
               else f"remove {node_default} to choose on labels alone (no statement checked)")
    why = _why_not(value, named)
    if not why:
        try:
            return TrustKey(signing.load_public(Path(value)), value, named)
        except UserError as exc:  # unreadable, or no P-256 public key: said of the option or variable
            why = f"{named} {value!r}: {exc.message}"
    if insecure:
        return TrustKey(None, value, named, refused=why)
    raise UserError(why, fix=f"{give}, or {without}", exit_code=2)
