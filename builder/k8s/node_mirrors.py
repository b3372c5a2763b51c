"""The files that make a node pull a registry's images through mirrors (`k8s mirror-config`).

- **containerd** (the runtime of most Kubernetes nodes) reads ``<config_path>/<host>/hosts.toml``
  (containerd ``docs/hosts.md``; parsed by ``core/remotes/docker/config/hosts.go``,
  ``parseHostsFile``): each ``[host."<url>"]`` table is a mirror, tried in the order the tables
  appear, and ``server`` is tried last (the fallback). A pull-through cache (the distribution
  registry's proxy mode, Harbor's proxy cache) or a P2P agent (Dragonfly, Spegel) is named here.
  The mirrors get ``capabilities = ["pull", "resolve"]``: a private mirror may resolve a tag.
- **Docker** reads ``"registry-mirrors"`` from ``/etc/docker/daemon.json``; Docker uses them for
  Docker Hub's images only, which the notes say when the registry is another.

`containerd_hosts` reads a hosts.toml back by containerd's own rules (the order of the host
tables, ``https://`` added to a scheme-less name, ``/v2`` appended to the path, the known
capabilities), so a test checks what containerd would try, in order.

Example:
    >>> config = configure("registry.example:5000", ["http://10.0.0.5:5000"])
    >>> print(config.hosts_toml, end="")
    # written by ascend-build k8s mirror-config: pull registry.example:5000's images through the mirrors, in order,
    # then from registry.example:5000 itself
    server = "https://registry.example:5000"
    <BLANKLINE>
    [host."http://10.0.0.5:5000"]
      capabilities = ["pull", "resolve"]
    >>> [(h.scheme, h.host, h.path) for h in containerd_hosts(config.hosts_toml)]
    [('http', '10.0.0.5:5000', '/v2'), ('https', 'registry.example:5000', '/v2')]
"""

from __future__ import annotations

import importlib
import json
import re
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Sequence, Tuple

from builder import writes
from builder.errors import UserError
from builder.registry import DOCKER_HUB_NAMES, is_loopback

CERTS_D = Path("/etc/containerd/certs.d")
CAPABILITIES = ("pull", "resolve")
KNOWN_CAPABILITIES = ("pull", "resolve", "push", "referrers")  # hosts.go parseHostConfig
_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?(?::[0-9]{1,5})?|\[[0-9A-Fa-f:.]+\](?::[0-9]{1,5})?")
_PATH = re.compile(r"(?:/[A-Za-z0-9._~-]+)*/?")


@dataclass(frozen=True)
class NodeMirrors:
    registry: str
    mirrors: Tuple[str, ...]
    hosts_toml: str
    daemon_json: str
    notes: List[str] = field(default_factory=list)

    @property
    def hosts_path(self) -> Path:
        """Where containerd looks for it (CRI ``config_path = "/etc/containerd/certs.d"``)."""
        return CERTS_D / self.registry / "hosts.toml"


def check_registry(registry: str) -> str:
    name = registry.strip().rstrip("/")
    if not _HOST.fullmatch(name):
        raise UserError(f"--registry {registry!r} is not HOST[:PORT]", exit_code=2,
                        fix="name the registry the images are pulled by, e.g. --registry registry.example:5000")
    return name


def check_mirror(url: str) -> str:
    """``url`` when it is ``http(s)://HOST[:PORT][/PATH]`` (nothing else reaches the TOML)."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
    except ValueError:  # e.g. an unbalanced "[" in the host
        parts = urllib.parse.SplitResult("", "", "", "", "")
    if (parts.scheme not in ("http", "https") or not _HOST.fullmatch(parts.netloc) or not _PATH.fullmatch(parts.path)
            or parts.query or parts.fragment):
        raise UserError(f"--mirror {url!r} is not http(s)://HOST[:PORT][/PATH]", exit_code=2,
                        fix="give the mirror's address with its scheme, e.g. --mirror http://10.0.0.5:5000")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc.lower(), parts.path.rstrip("/"), "", ""))


def configure(registry: str, mirrors: Sequence[str]) -> NodeMirrors:
    """hosts.toml and daemon.json for pulling ``registry``'s images through ``mirrors`` (in order)."""
    name = check_registry(registry)
    urls = tuple(dict.fromkeys(check_mirror(m) for m in mirrors))
    if not urls:
        raise UserError("no --mirror given", exit_code=2, fix="add --mirror URL (repeatable)")
    scheme = "http" if is_loopback(name) else "https"
    lines = [f"# written by ascend-build k8s mirror-config: pull {name}'s images through the mirrors, in order,",
             f"# then from {name} itself", f"server = {json.dumps(f'{scheme}://{name}')}"]
    for url in urls:
        lines += ["", f"[host.{json.dumps(url)}]", f"  capabilities = {json.dumps(list(CAPABILITIES))}"]
    text = "\n".join(lines) + "\n"
    daemon = json.dumps({"registry-mirrors": list(urls)}, indent=2) + "\n"
    notes = []
    if name.lower() not in DOCKER_HUB_NAMES:
        notes.append(f"Docker uses registry-mirrors for Docker Hub's images only: Docker nodes pulling {name}/... "
                     "go to it directly; name the mirror in the image reference there, or use containerd's hosts.toml")
    return NodeMirrors(name, urls, text, daemon, notes)


@dataclass(frozen=True)
class Host:
    """One host containerd tries: ``hosts.go``'s hostConfig (scheme, host, path, capabilities)."""

    scheme: str
    host: str
    path: str
    capabilities: Tuple[str, ...]


def containerd_hosts(text: str) -> List[Host]:
    """The hosts containerd tries for a hosts.toml, in order, the ``server`` last, by ``hosts.go``'s
    ``parseHostsFile``/``parseHostConfig`` rules; ValueError where containerd would refuse the file.
    Needs Python 3.11's TOML parser (``tomllib``); it checks, `configure` does not need it."""
    data = importlib.import_module("tomllib").loads(text)
    tables = data.get("host") or {}
    if not isinstance(tables, dict):
        raise ValueError("host is not a table")
    found = [_host(url, config) for url, config in tables.items()]
    return found + [_host(str(data.get("server", "")), data)]


def _host(server: str, config: dict) -> Host:
    if not isinstance(config, dict):
        raise ValueError(f"host {server!r} is not a table")
    capabilities = config.get("capabilities") or list(KNOWN_CAPABILITIES)
    if not isinstance(capabilities, list) or any(str(c).lower() not in KNOWN_CAPABILITIES for c in capabilities):
        raise ValueError(f"unknown capability in {capabilities!r}")
    if not server.startswith("http"):
        server = "https://" + server
    parts = urllib.parse.urlsplit(server)
    path = parts.path.rstrip("/")
    if not path.endswith("/v2") and not config.get("override_path"):
        path += "/v2"
    return Host(parts.scheme, parts.netloc, path, tuple(str(c).lower() for c in capabilities))


def write(config: NodeMirrors, folder: Path) -> List[Path]:
    """``FOLDER/certs.d/<registry>/hosts.toml`` and ``FOLDER/daemon.json``, each written whole; their paths."""
    hosts = Path(folder) / "certs.d" / config.registry / "hosts.toml"
    daemon = Path(folder) / "daemon.json"
    try:
        hosts.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise writes.write_error(exc, hosts.parent, "nothing was written") from None
    writes.replace_file(hosts, config.hosts_toml.encode())
    writes.replace_file(daemon, config.daemon_json.encode())
    return [hosts, daemon]
