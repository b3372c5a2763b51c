"""The team's public key a command trusts: ``--trust-key FILE``, else ``$ASCEND_BUILD_TRUST_KEY``, else
the ``trust_key:`` of the node's config file (``NODE_CONFIG``, vocabulary.NODE_CONFIG), else the
node's default key file (``NODE_KEY_FILE``, vocabulary.NODE_TRUST_KEY) when it exists, decided in
one place for `pull`, `run`, `index`, `k8s job` and `mirror`.

Only no option, an unset variable, no ``trust_key:`` in a node config and no node default file mean
"no key" (the image is then chosen on its labels alone, as each command says). A node config that
cannot be read, holds no mapping, or holds a key other than ``trust_key`` (a misspelt
``trust-key:`` would otherwise switch the key off without a word) is an error naming the file.
A value that names no key is an error naming the option, the variable or the file, never a
silent "no key": empty (``--trust-key ""``, a variable set to nothing), a folder (``--trust-key
.``), a missing or unreadable file, a file that is no P-256 public key, an option
(``--trust-key --require``). `run` offers ``--insecure``: with it such a key is
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
import yaml

from builder import bounded, vocabulary
from builder.cli.paths import refusal
from builder.documents import load_yaml
from builder.errors import UserError
from builder.trust.policy import TRUST_KEY_ENV
from builder.trust.signing import PublicKey

OPTION = "--trust-key"
# A node's default trust key, for every command that takes --trust-key: the team's .pub put here by
# whoever sets the node up. Only when neither the option nor the variable is given; there but not a
# public key file, it is an error (never a silent "no key"), as the option's value would be.
NODE_KEY_FILE = Path(vocabulary.NODE_TRUST_KEY)
# A node's config: ``trust_key: PATH`` names a key file kept elsewhere (a mounted secret, a shared
# folder); a relative PATH is read from the config's folder. It comes before NODE_KEY_FILE.
NODE_CONFIG = Path(vocabulary.NODE_CONFIG)
CONFIG_KEYS = ("trust_key",)
CONFIG_MAX = 64 << 10  # a config of one key is a line; more than this is no config
DEFAULT_NAMED = "the node's default key"  # how a refusal names NODE_KEY_FILE
# no envvar= here: click takes a variable set to nothing for an unset one; `trust_key` reads it itself
TrustKeyOpt = typer.Option(None, OPTION, metavar="FILE",
                           help="The team's public key (.pub): only images whose signed validation statement "
                                f"verifies with it are trusted (also ${TRUST_KEY_ENV}, else trust_key: in {NODE_CONFIG}, "
                                f"else {NODE_KEY_FILE} when it exists; given but naming no key file: an error).")


@dataclass(frozen=True)
class TrustKey:
    """The key decided on: ``key`` None means no statement is checked."""

    key: Optional[PublicKey]
    path: str = ""      # the file it was read from
    named: str = ""     # where it was named: --trust-key, $ASCEND_BUILD_TRUST_KEY, the node's config or default key
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


def node_config_key(config: Path = NODE_CONFIG) -> Optional[str]:
    """The key file the node's config ``config`` names (its ``trust_key:``, a relative path read from the
    config's folder); None when there is no config or it names none. UserError (exit 2) when the
    config cannot be read or says anything else."""
    if not os.path.lexists(config):
        return None
    fix = f"write {config} as one mapping, e.g. 'trust_key: {config.parent / 'team.pub'}', or remove it"
    try:
        data = bounded.read_file(config, CONFIG_MAX + 1)  # a FIFO is refused, /dev/zero read no further
        if len(data) > CONFIG_MAX:
            raise UserError(f"the node's config {config} is larger than {CONFIG_MAX} bytes: no config is",
                            fix=fix, exit_code=2)
        loaded = load_yaml(data.decode("utf-8"), str(config))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise UserError(f"the node's config {config} cannot be read: {_first_line(exc)}", fix=fix, exit_code=2) from None
    if loaded is None or loaded == {}:  # empty, or comments alone: a config that says nothing is no "no key"
        raise UserError(f"the node's config {config} names no key (it is empty or holds only comments)",
                        fix=fix, exit_code=2)
    if not isinstance(loaded, dict):
        raise UserError(f"the node's config {config} holds a {type(loaded).__name__}, not a mapping", fix=fix,
                        exit_code=2)
    unknown = sorted(str(key) for key in loaded if key not in CONFIG_KEYS)
    if unknown:
        raise UserError(f"the node's config {config} holds {', '.join(map(repr, unknown))}, which ascend-build does not "
                        f"read (it reads {', '.join(CONFIG_KEYS)})",
                        fix=f"spell it trust_key, or remove it from {config}", exit_code=2)
    if "trust_key" not in loaded:
        return None
    value = loaded["trust_key"]
    if not isinstance(value, str):
        value = "" if value is None else str(value)
    return str(config.parent / value) if value and not value.startswith("-") else value


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def trust_key(option: Optional[str], insecure: Optional[bool] = None, environ: Mapping[str, str] = os.environ,
              node_default: Optional[Path] = None, node_config: Optional[Path] = None) -> TrustKey:
    """The key of ``--trust-key`` (``option``), else of ``$ASCEND_BUILD_TRUST_KEY``, else the ``trust_key:``
    of the node's config ``node_config``, else the node's default key file ``node_default`` when it exists;
    no key when none of them is there.

    ``insecure``: the command's ``--insecure`` (None: it has none). A value naming no usable key, or a
    node config that cannot be read, is a UserError (exit 2) saying which and how to fix it; under
    ``--insecure`` it is returned as ``refused`` instead, with no key. ``node_default`` and
    ``node_config`` (tests): other files than NODE_KEY_FILE and NODE_CONFIG.
    """
    from builder.trust import signing

    node_default, node_config = node_default or NODE_KEY_FILE, node_config or NODE_CONFIG
    try:
        configured = None if option is not None or TRUST_KEY_ENV in environ else node_config_key(node_config)
    except UserError as exc:
        if insecure:
            return TrustKey(None, str(node_config), "the node's config", refused=exc.message)
        raise
    if option is not None:
        value, named = option, OPTION
    elif TRUST_KEY_ENV in environ:
        value, named = environ[TRUST_KEY_ENV], TRUST_KEY_ENV
    elif configured is not None:
        value, named = configured, f"trust_key in {node_config}"
    elif os.path.lexists(node_default):
        value, named = str(node_default), DEFAULT_NAMED
    else:
        return TrustKey(None)
    give = {OPTION: f"give {OPTION} the team's public key file",
            TRUST_KEY_ENV: f"set {TRUST_KEY_ENV} to the team's public key file",
            DEFAULT_NAMED: f"put the team's public key file at {node_default}"}.get(
                named, f"set trust_key in {node_config} to the team's public key file")
    give += " (the .pub of `ascend-build keys generate`)"
    without = ("pass --insecure to start the image with no statement checked" if insecure is not None
               else {OPTION: f"leave {OPTION} out to choose on labels alone (no statement checked)",
                     TRUST_KEY_ENV: f"unset {TRUST_KEY_ENV} to choose on labels alone (no statement checked)",
                     DEFAULT_NAMED: f"remove {node_default} to choose on labels alone (no statement "
                                               "checked)"}.get(
                         named, f"remove trust_key from {node_config} to choose on labels alone (no statement checked)"))
    why = _why_not(value, named)
    if not why:
        try:
            return TrustKey(signing.load_public(Path(value)), value, named)
        except UserError as exc:  # unreadable, or no P-256 public key: said of the option or variable
            why = f"{named} {value!r}: {exc.message}"
    if insecure:
        return TrustKey(None, value, named, refused=why)
    raise UserError(why, fix=f"{give}, or {without}", exit_code=2)
