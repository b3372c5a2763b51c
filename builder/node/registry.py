"""Read tags, manifests and image labels from a registry, without pulling images.

`ascend-build pull` decides which image fits a node from the labels alone, so it
talks the OCI distribution API directly: list tags, resolve a tag to a manifest
digest (choosing this arch from a multi-arch index), read the image config blob
for its labels. Auth: HTTP basic, or the bearer-token dance most registries use,
with credentials from arguments, ``ASCEND_BUILD_REGISTRY_USER``/``_PASSWORD`` or
``~/.docker/config.json``. Loopback registries are spoken to over plain HTTP, as
Docker itself does; every other registry over HTTPS.

Example:
    >>> reg = Registry("127.0.0.1:5000", username="ci", password="secret")     # doctest: +SKIP
    >>> reg.tags("ascend-build/pytorch")[:1]                                    # doctest: +SKIP
    ['cann9.0.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64']
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from builder.errors import UserError

MANIFEST_TYPES = ", ".join((
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
))
ARCH_TO_PLATFORM = {"x86_64": "amd64", "aarch64": "arm64"}


@dataclass(frozen=True)
class ImageInfo:
    """One tag as the registry describes it: the digest to pull and the image's labels."""

    tag: str
    digest: str
    labels: Dict[str, str]
    architecture: str


def _loopback(host: str) -> bool:
    name = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
    return name in ("localhost", "[::1]") or name.startswith("127.")


def docker_config_auth(host: str) -> Optional[Tuple[str, str]]:
    """Credentials ``docker login`` stored for ``host`` (plain ``auth`` entries only)."""
    path = Path(os.environ.get("DOCKER_CONFIG", Path.home() / ".docker")) / "config.json"
    try:
        auths = json.loads(path.read_text()).get("auths", {})
    except (OSError, ValueError):
        return None
    entry = auths.get(host) or auths.get(f"https://{host}") or {}
    try:
        user, _, password = base64.b64decode(entry.get("auth", "")).decode().partition(":")
    except (ValueError, UnicodeDecodeError):
        return None
    return (user, password) if user else None


class Registry:
    """A minimal OCI distribution API client (read-only)."""

    def __init__(self, host: str, username: Optional[str] = None, password: Optional[str] = None,
                 timeout: float = 20):
        self.host = host.rstrip("/")
        self.base = f"{'http' if _loopback(self.host) else 'https'}://{self.host}"
        if username is None:
            username = os.environ.get("ASCEND_BUILD_REGISTRY_USER")
            password = os.environ.get("ASCEND_BUILD_REGISTRY_PASSWORD")
        if username is None:
            username, password = docker_config_auth(self.host) or (None, None)
        self.username, self.password, self.timeout = username, password, timeout
        self._auth: Dict[str, str] = {}  # scope -> Authorization header value

    # --- HTTP -----------------------------------------------------------------

    def _basic(self) -> Optional[str]:
        if self.username is None:
            return None
        token = base64.b64encode(f"{self.username}:{self.password or ''}".encode()).decode()
        return f"Basic {token}"

    def _open(self, path: str, scope: str, accept: str = "") -> Tuple[bytes, Dict[str, str]]:
        url = self.base + path
        for attempt in range(2):
            request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
            if scope in self._auth:
                request.add_header("Authorization", self._auth[scope])
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    return response.read(), {k.lower(): v for k, v in response.headers.items()}
            except urllib.error.HTTPError as exc:
                if exc.code == 401 and attempt == 0:
                    self._authenticate(exc.headers.get("WWW-Authenticate", ""), scope)
                    continue
                if exc.code in (401, 403):
                    raise UserError(f"registry {self.host} refused authentication for {path}", exit_code=1,
                                    fix="set ASCEND_BUILD_REGISTRY_USER/ASCEND_BUILD_REGISTRY_PASSWORD "
                                        f"or run `docker login {self.host}`")
                if exc.code == 404:
                    raise LookupError(path)
                raise UserError(f"registry {self.host} answered HTTP {exc.code} for {path}", exit_code=1,
                                fix="check the registry address and that it speaks the distribution API (/v2/)")
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                raise UserError(f"cannot reach registry {self.host}: {reason}", exit_code=1,
                                fix="check the address and port, and that the registry is running")
        raise AssertionError("unreachable")

    def _authenticate(self, challenge: str, scope: str) -> None:
        """Answer a 401: basic credentials, or a bearer token fetched from the realm."""
        basic = self._basic()
        if basic is None:
            raise UserError(f"registry {self.host} requires authentication", exit_code=1,
                            fix="set ASCEND_BUILD_REGISTRY_USER/ASCEND_BUILD_REGISTRY_PASSWORD "
                                f"or run `docker login {self.host}`")
        if not challenge.lower().startswith("bearer"):
            self._auth[scope] = basic
            return
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        query = {"service": params.get("service", ""), "scope": params.get("scope", scope)}
        request = urllib.request.Request(params["realm"] + "?" + urllib.parse.urlencode(query),
                                         headers={"Authorization": basic})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body = json.loads(response.read())
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise UserError(f"registry {self.host}: getting a token failed: {exc}", exit_code=1,
                            fix="check the credentials and the token service")
        self._auth[scope] = f"Bearer {body.get('token') or body.get('access_token', '')}"

    def _json(self, path: str, scope: str, accept: str = "") -> Tuple[dict, Dict[str, str], bytes]:
        body, headers = self._open(path, scope, accept)
        try:
            return json.loads(body), headers, body
        except ValueError:
            raise UserError(f"registry {self.host} sent something other than JSON for {path}", exit_code=1)

    # --- API ------------------------------------------------------------------

    def tags(self, repository: str) -> List[str]:
        """Every tag of ``repository`` (an empty list when the repository does not exist)."""
        scope = f"repository:{repository}:pull"
        try:
            data, _, _ = self._json(f"/v2/{repository}/tags/list?n=10000", scope)
        except LookupError:
            return []
        return sorted(data.get("tags") or [])

    def inspect(self, repository: str, tag: str, arch: str) -> Optional[ImageInfo]:
        """Digest and labels of ``repository:tag`` for ``arch``; None if the tag has no such image."""
        scope = f"repository:{repository}:pull"
        try:
            manifest, headers, body = self._json(f"/v2/{repository}/manifests/{tag}", scope, MANIFEST_TYPES)
        except LookupError:
            return None
        digest = headers.get("docker-content-digest") or "sha256:" + hashlib.sha256(body).hexdigest()
        if "manifests" in manifest:  # a multi-arch index: pick this arch's manifest
            wanted = ARCH_TO_PLATFORM.get(arch, arch)
            match = next((m for m in manifest["manifests"]
                          if m.get("platform", {}).get("architecture") == wanted), None)
            if match is None:
                return ImageInfo(tag, digest, {}, "none of: " + ", ".join(
                    m.get("platform", {}).get("architecture", "?") for m in manifest["manifests"]))
            digest = match["digest"]
            manifest, _, _ = self._json(f"/v2/{repository}/manifests/{digest}", scope, MANIFEST_TYPES)
        config_digest = manifest.get("config", {}).get("digest")
        if not config_digest:
            raise UserError(f"{repository}:{tag}: the manifest has no image config", exit_code=1)
        config, _, _ = self._json(f"/v2/{repository}/blobs/{config_digest}", scope)
        labels = (config.get("config") or {}).get("Labels") or {}
        return ImageInfo(tag, digest, dict(labels), config.get("architecture", ""))
