"""A trust key is never switched off without a word: `--trust-key` / `$ASCEND_BUILD_TRUST_KEY`.

Only no option and an unset variable mean "no key". `--trust-key .`, `--trust-key ""`, the
variable set to nothing, a folder, a missing file or a file that is no public key each stop
`run`, `pull`, `index` and `k8s job` before they read anything (exit 2, naming the option or
the variable, pointing at the fix); `run --insecure` goes on without a key, saying so loudly.
(The same refusals against a stranger-signed image in a real registry: tests/test_trust_policy_e2e.py.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

import pytest
from typer.testing import CliRunner

from builder import cli
from builder.cli.trust_key import trust_key
from builder.errors import UserError
from builder.trust import signing
from builder.trust.policy import TRUST_KEY_ENV
from tests.support.matrix import run_cli
from tests.support.promptly import refused_promptly

REF = "127.0.0.1:1/ascend-build/pytorch:cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64-cpu"
INDEX_REF = "127.0.0.1:1/ascend-build/pytorch:cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-cpu"
COMMANDS = {  # each command's words around the key; nothing here is reachable, nor read before the refusal
    "run": ["run", "--print", REF, "--", "python", "train.py"],
    "index": ["index", INDEX_REF],
    "pull": ["pull", "--registry", "127.0.0.1:1", "--variant", "cpu"],
    "k8s job": ["k8s", "job", "--registry", "127.0.0.1:1", "--npus", "1"],
}
GIVE = "give --trust-key the team's public key file (the .pub of `ascend-build keys generate`), or "
SET = f"set {TRUST_KEY_ENV} to the team's public key file (the .pub of `ascend-build keys generate`), or "
INSECURE = "pass --insecure to start the image with no statement checked"


def spellings(tmp: Path) -> List[Tuple[str, List[str], dict, str]]:
    """(id, option words, environment, the refusal) of every way a key used to be switched off, and more."""
    (tmp / "folder").mkdir(exist_ok=True)
    (tmp / "notes.txt").write_text("not a key\n")
    return [
        ("dot", ["--trust-key", "."], {}, "--trust-key '.' is a folder, not the team's public key file"),
        ("empty", ["--trust-key", ""], {}, "--trust-key is empty: it names no public key file"),
        ("env-empty", [], {TRUST_KEY_ENV: ""}, f"{TRUST_KEY_ENV} is set but empty: it names no public key file"),
        ("env-dot", [], {TRUST_KEY_ENV: "."}, f"{TRUST_KEY_ENV} '.' is a folder, not the team's public key file"),
        ("folder", ["--trust-key", str(tmp / "folder")], {},
         f"--trust-key '{tmp / 'folder'}' is a folder, not the team's public key file"),
        ("missing", ["--trust-key", str(tmp / "team.pub")], {}, f"--trust-key '{tmp / 'team.pub'}': no such file"),
        ("env-missing", [], {TRUST_KEY_ENV: str(tmp / "team.pub")}, f"{TRUST_KEY_ENV} '{tmp / 'team.pub'}': no such file"),
        ("not-a-key", ["--trust-key", str(tmp / "notes.txt")], {},
         f"--trust-key '{tmp / 'notes.txt'}': {tmp / 'notes.txt'} is not a PEM public key"),
    ]


SPELLINGS = ("dot", "empty", "env-empty", "env-dot", "folder", "missing", "env-missing", "not-a-key")


def _fix(command: str, from_env: bool) -> str:
    if command == "run":
        return (SET if from_env else GIVE) + INSECURE
    return (SET + f"unset {TRUST_KEY_ENV} to choose on labels alone (no statement checked)" if from_env
            else GIVE + "leave --trust-key out to choose on labels alone (no statement checked)")


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_key_that_names_no_key_file_stops_the_command(command, spelling, tmp_path, monkeypatch):
    _, option, env, refusal = next(s for s in spellings(tmp_path) if s[0] == spelling)
    monkeypatch.delenv(TRUST_KEY_ENV, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    words = COMMANDS[command]
    at = words.index("--") if "--" in words else len(words)
    done = CliRunner().invoke(cli.app, words[:at] + option + words[at:])
    assert isinstance(done.exception, UserError), (done.output, done.exception)
    assert done.exception.exit_code == 2
    assert done.exception.message == refusal
    assert done.exception.fix == _fix(command, bool(env))
    assert done.stdout == ""  # no `docker run` line, no manifest, no index


def test_run_print_with_a_dot_key_prints_no_docker_run(tmp_path):
    """The issue's own case through the installed entry point: what a user sees."""
    done = run_cli("run", "--print", "--root", tmp_path, "--trust-key", ".", REF, "--", "python", "train.py")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == ("error: --trust-key '.' is a folder, not the team's public key file\n"
                           f"  fix: {GIVE}{INSECURE}\n")


def test_index_with_the_variable_set_but_empty_writes_nothing(tmp_path):
    exe = str(Path(sys.executable).with_name("ascend-build"))
    done = subprocess.run([exe, "index", INDEX_REF], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, TRUST_KEY_ENV: ""})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"error: {TRUST_KEY_ENV} is set but empty: it names no public key file\n"
                           f"  fix: {SET}unset {TRUST_KEY_ENV} to choose on labels alone (no statement checked)\n")


def test_run_insecure_goes_on_without_the_key_and_says_so(tmp_path, monkeypatch):
    monkeypatch.delenv(TRUST_KEY_ENV, raising=False)
    done = CliRunner().invoke(cli.app, ["run", "--print", "--insecure", "--root", str(tmp_path), "--trust-key", ".",
                                        "ascend-build/none-such:" + "x" * 8])
    assert done.stderr.startswith(
        "WARNING: --insecure: --trust-key '.' is a folder, not the team's public key file; starting "
        "ascend-build/none-such:xxxxxxxx with no statement checked: nothing signed says it passed the smoke test, "
        "nor that it is the image that was tested\n"), done.stderr
    assert not (isinstance(done.exception, UserError) and "public key file" in done.exception.message)


def test_only_no_option_and_an_unset_variable_mean_no_key(tmp_path):
    _, pub = signing.generate(tmp_path, "team")
    _, other = signing.generate(tmp_path, "team-2027")
    assert trust_key(None, environ={}).key is None
    from_env = trust_key(None, environ={TRUST_KEY_ENV: str(pub)})
    assert from_env.path == str(pub) and from_env.named == TRUST_KEY_ENV
    assert from_env.key is not None and signing.fingerprint(from_env.key) == signing.fingerprint(signing.load_public(pub))
    given = trust_key(str(other), environ={TRUST_KEY_ENV: str(pub)})  # the option over the variable
    assert given.named == "--trust-key" and given.key is not None
    assert signing.fingerprint(given.key) == signing.fingerprint(signing.load_public(other))
    with pytest.raises(UserError, match="set but empty"):
        trust_key(None, environ={TRUST_KEY_ENV: ""})
    refused = trust_key("", insecure=True, environ={})
    assert refused.key is None and refused.refused == "--trust-key is empty: it names no public key file"


def test_a_node_default_key_file_is_the_key_when_neither_the_option_nor_the_variable_is_given(tmp_path, monkeypatch):
    """A node set up with the team's .pub at the default path checks statements with no flag; the option
    and the variable still win; absent, it means no key; there but no key, it is an error naming it."""
    monkeypatch.delenv(signing.PASSPHRASE_ENV, raising=False)
    team = signing.generate(tmp_path / "keys", "team")[1]
    other = signing.generate(tmp_path / "keys", "other")[1]
    default = tmp_path / "etc" / "trust.pub"
    assert trust_key(None, environ={}, node_default=default).key is None  # not there: no key
    default.parent.mkdir()
    default.write_bytes(team.read_bytes())
    found = trust_key(None, environ={}, node_default=default)
    assert found.key is not None and found.path == str(default) and found.named == "the node's default key"
    assert signing.fingerprint(found.key) == signing.fingerprint(signing.load_public(team))
    assert trust_key(str(other), environ={}, node_default=default).path == str(other)           # the option wins
    assert trust_key(None, environ={TRUST_KEY_ENV: str(other)}, node_default=default).path == str(other)  # the variable too
    default.write_text("not a key\n")
    with pytest.raises(UserError) as caught:
        trust_key(None, environ={}, node_default=default)
    assert caught.value.exit_code == 2 and f"the node's default key '{default}'" in caught.value.message
    assert f"remove {default} to choose on labels alone" in (caught.value.fix or "")
    refused = trust_key(None, insecure=True, environ={}, node_default=default)
    assert refused.key is None and "the node's default key" in refused.refused


def test_a_node_config_names_a_key_kept_elsewhere_and_comes_before_the_default_file(tmp_path, monkeypatch):
    """/etc/ascend-build/node.yaml's ``trust_key:`` (relative to the config's folder) is the key when
    neither the option nor the variable is given, before the default key file; both still win over it."""
    monkeypatch.delenv(signing.PASSPHRASE_ENV, raising=False)
    team = signing.generate(tmp_path / "etc" / "keys", "team")[1]
    other = signing.generate(tmp_path / "other", "other")[1]
    config, default = tmp_path / "etc" / "node.yaml", tmp_path / "etc" / "trust.pub"
    default.write_bytes(other.read_bytes())
    config.write_text("trust_key: keys/team.pub\n")
    found = trust_key(None, environ={}, node_default=default, node_config=config)
    assert found.key is not None and found.path == str(team) and found.named == f"trust_key in {config}"
    assert signing.fingerprint(found.key) == signing.fingerprint(signing.load_public(team))
    assert trust_key(str(other), environ={}, node_default=default, node_config=config).path == str(other)
    assert trust_key(None, environ={TRUST_KEY_ENV: str(other)}, node_default=default,
                     node_config=config).path == str(other)
    config.write_text("# no key named here\n")  # a config naming no key is refused, never read past
    with pytest.raises(UserError, match="names no key"):
        trust_key(None, environ={}, node_default=default, node_config=config)


@pytest.mark.parametrize("text, says", [
    ("trust-key: keys/team.pub\n", "holds 'trust-key', which ascend-build does not read (it reads trust_key)"),
    ("trust_key: ''\n", "is set but empty: it names no public key file"),
    ("trust_key:\n", "is set but empty: it names no public key file"),
    ("trust_key: .\n", "is a folder, not the team's public key file"),
    ("trust_key: missing.pub\n", "missing.pub': no such file"),
    ("- trust_key: keys/team.pub\n", "holds a list, not a mapping"),
    ("trust_key: [unclosed\n", "cannot be read:"),
    ("trust_key: !secret team\n", "uses the YAML tag '!secret'"),
    ("", "names no key (it is empty or holds only comments)"),
    ("# trust_key: keys/team.pub\n", "names no key (it is empty or holds only comments)"),
    ("{}\n", "names no key (it is empty or holds only comments)"),
    ("x" * (70 << 10), "is larger than 65536 bytes"),
    ("fifo", "cannot be read: [Errno 22] not a regular file"),
])
def test_a_node_config_that_names_no_key_is_an_error_never_no_key(text, says, tmp_path, monkeypatch):
    """A misspelt key, an empty or folder value, a config that is no mapping or no YAML: each stops the
    command (exit 2) naming the config; none silently means "no key", whatever the default file holds."""
    monkeypatch.delenv(signing.PASSPHRASE_ENV, raising=False)
    signing.generate(tmp_path / "etc" / "keys", "team")
    config, default = tmp_path / "etc" / "node.yaml", tmp_path / "etc" / "trust.pub"
    default.write_bytes((tmp_path / "etc" / "keys" / "team.pub").read_bytes())
    if text == "fifo":
        os.mkfifo(config)  # no writer: refused, never waited on
    else:
        config.write_text(text)
    caught = refused_promptly(lambda: trust_key(None, environ={}, node_default=default, node_config=config), config)
    assert caught.exit_code == 2 and says in caught.message, caught.message
    assert str(config) in caught.message
    going_on = trust_key(None, insecure=True, environ={}, node_default=default, node_config=config)
    assert going_on.key is None and going_on.refused == caught.message  # run --insecure: said, not silent


def test_the_cli_reads_the_node_config_it_is_given_no_flag_for(tmp_path, monkeypatch):
    """Through a command: `run --print` with no flag refuses as the node's config says (not "no key")."""
    from builder.cli import trust_key as module

    monkeypatch.delenv(TRUST_KEY_ENV, raising=False)
    config = tmp_path / "node.yaml"
    config.write_text("trust-key: /etc/ascend-build/team.pub\n")
    monkeypatch.setattr(module, "NODE_CONFIG", config)
    done = CliRunner().invoke(cli.app, COMMANDS["run"])
    assert isinstance(done.exception, UserError) and done.exception.exit_code == 2, done.output
    assert "holds 'trust-key'" in done.exception.message and done.stdout == ""
