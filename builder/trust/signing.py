"""The team's signing keys: an ECDSA P-256 pair in plain PEM files, made and read with `cryptography`.

``DIR/<name>.key`` is the private key (PKCS#8 PEM, mode 0600; encrypted with the passphrase in
``ASCEND_BUILD_KEY_PASSPHRASE`` when that is set), ``DIR/<name>.pub`` the public key
(SubjectPublicKeyInfo PEM), which is what verifiers get. These are not cosign's own key files
(cosign encrypts its private keys in a format of its own), but cosign verifies with a PEM
public key (``cosign verify-attestation --key NAME.pub``).

Why ECDSA P-256 with SHA-256: it is what cosign generates and what Kyverno and sigstore's
policy-controller verify by default.

Example:
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> pair = generate(folder, "team")
    >>> sorted(p.name for p in pair), oct(pair[0].stat().st_mode & 0o777)
    (['team.key', 'team.pub'], '0o600')
    >>> key = load_private(pair[0])
    >>> fingerprint(key.public_key()) == fingerprint(load_public(pair[1]))
    True
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import List, Optional, Tuple

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from builder import bounded, writes
from builder.errors import UserError

PASSPHRASE_ENV = "ASCEND_BUILD_KEY_PASSPHRASE"
KEY_SUFFIX, PUB_SUFFIX = ".key", ".pub"
KEY_FILE_LIMIT = 64 << 10  # a PEM key is a few hundred bytes
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")

PrivateKey = ec.EllipticCurvePrivateKey
PublicKey = ec.EllipticCurvePublicKey


def _passphrase() -> Optional[bytes]:
    value = os.environ.get(PASSPHRASE_ENV)
    return value.encode() if value else None


def encrypting() -> bool:
    """Whether `generate` encrypts (and `load_private` decrypts) with ``ASCEND_BUILD_KEY_PASSPHRASE``."""
    return _passphrase() is not None


def generate(folder: Path, name: str = "ascend-build") -> Tuple[Path, Path]:
    """Write a new P-256 pair as ``folder/<name>.key`` (0600) and ``.pub``; refuse to overwrite either."""
    if not _NAME.fullmatch(name):
        raise UserError(f"--name {name!r} is not a plain file name", fix="use letters, digits, '.', '_' or '-'")
    key_path, pub_path = folder / (name + KEY_SUFFIX), folder / (name + PUB_SUFFIX)
    present = [str(p) for p in (key_path, pub_path) if p.exists() or p.is_symlink()]
    if present:
        raise UserError(f"{' and '.join(present)} already exist(s): a key is never overwritten", exit_code=1,
                        fix="choose another --name or folder (rotating keys: make a new pair, re-attest, "
                            "then hand out the new .pub)")
    key = ec.generate_private_key(ec.SECP256R1())
    secret = _passphrase()
    encryption = (serialization.BestAvailableEncryption(secret) if secret else serialization.NoEncryption())
    private_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    public_pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo)
    # Whole or not at all: each file is written under a temporary name, then linked to its own
    # (a link never replaces a file: one that appeared since the check above is kept); a failure
    # (a full disk) removes what this call made, so a retry is not refused as "never overwritten".
    made: List[Path] = []
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for path, data, mode in ((key_path, private_pem, 0o600), (pub_path, public_pem, 0o644)):
            staged = writes.stage(path, data, mode=0o600)  # never readable by others, even half
            try:
                os.chmod(staged, mode)  # the umask may have taken bits of the 0644
                os.link(staged, path)
                made.append(path)
            finally:
                staged.unlink(missing_ok=True)
    except OSError as exc:
        for path in made:
            path.unlink(missing_ok=True)
        if isinstance(exc, FileExistsError):
            raise UserError(f"{exc.filename2 or exc.filename or key_path} appeared meanwhile: a key is never overwritten",
                            exit_code=1, fix="choose another --name or folder") from None
        raise writes.write_error(exc, key_path, "no key was written (neither file)") from None
    return key_path, pub_path


def unignored_in_git(key_path: Path) -> Optional[str]:
    """The work tree of the git checkout ``key_path`` lies in when its ``.gitignore`` does not cover
    it (a private key one ``git add .`` from a commit); None otherwise, or when git cannot tell."""
    import subprocess

    def git(*args: str) -> Optional[subprocess.CompletedProcess]:
        try:
            return subprocess.run(["git", "-C", str(key_path.parent), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):  # no git here
            return None

    top = git("rev-parse", "--show-toplevel")
    if top is None or top.returncode != 0:
        return None
    ignored = git("check-ignore", "-q", "--", key_path.name)
    return top.stdout.strip() if ignored is not None and ignored.returncode == 1 else None


def _read(path: Path, what: str) -> bytes:
    try:
        return bounded.read_file(path, KEY_FILE_LIMIT)
    except OSError as exc:
        raise UserError(f"cannot read the {what} {path}: {exc.strerror or exc}", exit_code=2,
                        fix=f"give the {what} made by `ascend-build keys generate DIR`") from None


def _p256(key, path: Path, what: str):
    if not isinstance(key, (ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey)) or key.curve.name != "secp256r1":
        raise UserError(f"{path} is not an ECDSA P-256 {what}", exit_code=2,
                        fix="make one with `ascend-build keys generate DIR` (ECDSA P-256, as cosign makes)")
    return key


def load_private(path: Path) -> PrivateKey:
    """The private key in ``path`` (decrypted with ``ASCEND_BUILD_KEY_PASSPHRASE`` when it is encrypted)."""
    data, secret = _read(path, "private key"), _passphrase()
    try:
        key = serialization.load_pem_private_key(data, password=secret)
    except TypeError:  # encrypted without a passphrase given, or a passphrase for a plain key
        if secret is None:
            raise UserError(f"{path} is encrypted and {PASSPHRASE_ENV} is not set", exit_code=2,
                            fix=f"export {PASSPHRASE_ENV} with the passphrase it was made with") from None
        raise UserError(f"{path} is not encrypted, yet {PASSPHRASE_ENV} is set", exit_code=2,
                        fix=f"unset {PASSPHRASE_ENV}, or give the encrypted key") from None
    except (ValueError, UnsupportedAlgorithm):
        hint = f"the passphrase in {PASSPHRASE_ENV} is wrong, or " if secret else ""
        raise UserError(f"{path} cannot be read as a PEM private key ({hint}it is no PEM key)", exit_code=2,
                        fix="give the .key made by `ascend-build keys generate` (with its passphrase)") from None
    return _p256(key, path, "private key")


def load_public(path: Path) -> PublicKey:
    """The public key in ``path`` (PEM SubjectPublicKeyInfo, as `generate` and cosign write them)."""
    data = _read(path, "public key")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm):
        raise UserError(f"{path} is not a PEM public key", exit_code=2,
                        fix="give the .pub made by `ascend-build keys generate` (not the .key)") from None
    return _p256(key, path, "public key")


def der(key: PublicKey) -> bytes:
    """The public key as DER SubjectPublicKeyInfo."""
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def fingerprint(key: PublicKey) -> str:
    """A public key's id for people: the sha256 of its DER SubjectPublicKeyInfo, in hex (`keys
    generate` and `verify` print it). Envelopes carry no keyid (`builder.trust.statements.sign`)."""
    return hashlib.sha256(der(key)).hexdigest()
