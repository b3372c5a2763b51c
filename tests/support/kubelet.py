"""A stand-in for a cluster in the rendezvous tests: Pods started as a node's kubelet starts them,
each as one container of its own, with an address of its own, on a Docker network the test makes.

What it takes from a Pod (Kubernetes' kubelet, ``pkg/kubelet/kubelet_pods.go``):

- the container's env in order: a ``value`` with ``$(VAR)`` expanded from the variables before it
  (``makeEnvironmentVariables``), a ``valueFrom.fieldRef`` from the Pod's metadata or its
  ``status.podIP``;
- the command with ``$(VAR)`` expanded from the container's whole env
  (``ExpandContainerCommandAndArgs``), by the rule `expand` follows; it replaces the image's
  entrypoint, as Kubernetes' ``command`` does;
- the host name ``spec.hostname``, else the Pod's name; the Pod's own ``/etc/hosts`` line
  ``IP HOSTNAME`` or, with ``spec.subdomain``, ``IP HOSTNAME.SUBDOMAIN.NAMESPACE.svc.cluster.local
  HOSTNAME`` (``managedHostsFileContent``);
- an ``emptyDir`` as a tmpfs, a ``hostPath`` as a bind mount.

Names: a Pod resolves only its own hosts file's names and what the cluster's DNS would answer,
which the caller lists (`Cluster.records`: a Service's name, a headless Service's per-pod names),
written into each Pod's hosts file. Docker's own DNS is switched off (each container's
``resolv.conf`` points at no server): it would also resolve every container's host name, which
Kubernetes' DNS does not, and a rendezvous relying on that would pass here and fail on a cluster.

A ClusterIP Service is `Cluster.service`: a container of its own, at its own address, forwarding
one port to the Pod behind it and refusing connections until that Pod listens there, as
kube-proxy's rules do (no endpoint: rejected; an endpoint whose port is closed: reset).

Not taken: ``resources`` (no device plugin here; the caller drops NPU requests), affinity and
anti-affinity (one node), ``ports`` (informational in Kubernetes too), restarts (``Never``).
"""

from __future__ import annotations

import ipaddress
import random
import re
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

import docker
import requests
from docker.types import Mount

from builder.engine import OWNER_LABEL, _owner

NAMESPACE = "default"
CLUSTER_DOMAIN = "cluster.local"
# the kubelet's hosts file, before the Pod's own line (kubelet_pods.go, managedHostsFileContent)
HOSTS_HEAD = ("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
              "fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n")
NO_DNS = "nameserver 127.0.0.1\noptions attempts:1 timeout:1\n"  # nothing listens there: a lookup fails at once
QUANTITY = {"": 1, "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "k": 10 ** 3, "M": 10 ** 6,
            "G": 10 ** 9, "T": 10 ** 12}
# kube-proxy's part, in the twin's own Python: listen only once the target does, then pipe each connection
FORWARDER = '''
import asyncio, socket, sys, time
target, port = sys.argv[1], int(sys.argv[2])
def up():
    try:
        socket.create_connection((target, port), timeout=1).close()
        return True
    except OSError:
        return False
while not up():
    time.sleep(0.05)
async def pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()
async def handle(reader, writer):
    try:
        to_reader, to_writer = await asyncio.open_connection(target, port)
    except OSError:
        writer.transport.abort()
        return
    await asyncio.gather(pipe(reader, to_writer), pipe(to_reader, writer))
async def main():
    server = await asyncio.start_server(handle, "0.0.0.0", port)
    async with server:
        await server.serve_forever()
asyncio.run(main())
'''


def expand(text: str, env: Mapping[str, str]) -> str:
    """``$(VAR)`` expanded as Kubernetes expands it in an env value or a command: a variable not
    in ``env`` stays as written, ``$$`` is one ``$`` (so ``$$(VAR)`` is the text ``$(VAR)``),
    any other ``$`` stays.

    >>> expand("--node-rank=$(RANK) $$(RANK) $(NONE) $x $(", {"RANK": "2"})
    '--node-rank=2 $(RANK) $(NONE) $x $('
    """
    out, i = [], 0
    while i < len(text):
        if text[i] != "$" or i + 1 == len(text):
            out.append(text[i])
            i += 1
            continue
        after = text[i + 1]
        close = text.find(")", i + 2) if after == "(" else -1
        if after == "$":
            out.append("$")
            i += 2
        elif close != -1:
            name = text[i + 2:close]
            out.append(env.get(name, f"$({name})"))
            i = close + 1
        else:
            out.append("$" + after)
            i += 2
    return "".join(out)


def field(pod: Mapping[str, Any], path: str, pod_ip: str) -> str:
    """A ``fieldRef``'s value, as the kubelet reads it for the Pod (a missing label or annotation: "")."""
    metadata = pod["metadata"]
    keyed = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if keyed:
        return str(metadata.get(keyed.group(1), {}).get(keyed.group(2), ""))
    simple = {"metadata.name": metadata["name"], "metadata.namespace": NAMESPACE, "status.podIP": pod_ip,
              "status.podIPs": pod_ip}
    if path not in simple:
        raise AssertionError(f"the stand-in kubelet reads no fieldRef {path!r}")
    return simple[path]


def container_env(pod: Mapping[str, Any], container: Mapping[str, Any], pod_ip: str) -> Dict[str, str]:
    """The container's env as the kubelet makes it: in order, each value expanded from those before."""
    env: Dict[str, str] = {}
    for variable in container.get("env", []):
        if "valueFrom" in variable:
            source = variable["valueFrom"]
            if set(source) != {"fieldRef"}:
                raise AssertionError(f"the stand-in kubelet reads no {sorted(source)}: give {variable['name']} as a value")
            env[variable["name"]] = field(pod, source["fieldRef"]["fieldPath"], pod_ip)
        else:
            env[variable["name"]] = expand(variable.get("value", ""), env)
    return env


def size_in_bytes(quantity: str) -> int:
    """A Kubernetes memory quantity (``16Gi``, ``500Mi``) in bytes.

    >>> size_in_bytes("16Gi"), size_in_bytes("500M")
    (17179869184, 500000000)
    """
    number, suffix = re.fullmatch(r"([0-9]+)(Ki|Mi|Gi|Ti|k|M|G|T)?", quantity).groups()  # type: ignore[union-attr]
    return int(number) * QUANTITY[suffix or ""]


class Cluster:
    """One node's worth of Pods and Services on a Docker network of its own; all removed on exit."""

    def __init__(self, client: docker.DockerClient, image: str):
        self.client, self.image = client, image
        self.name = f"ascend-build-test-pods-{uuid.uuid4().hex[:8]}"
        self.records: Dict[str, str] = {}  # what the cluster's DNS answers: name -> address
        self.containers: Dict[str, Any] = {}  # pod or service name -> its container
        self._work = Path(tempfile.mkdtemp(prefix="ascend-build-pods-"))
        self._network: Any = None
        self._addresses: List[str] = []

    def __enter__(self) -> "Cluster":
        for _ in range(8):  # a /24 of 10.200-249.*.*: retried when another network holds it
            subnet = ipaddress.ip_network(f"10.{random.randint(200, 249)}.{random.randint(0, 255)}.0/24")
            try:
                ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=str(subnet))])
                self._network = self.client.networks.create(self.name, driver="bridge", ipam=ipam,
                                                            labels={OWNER_LABEL: _owner()})
                break
            except docker.errors.APIError as e:
                if "overlap" not in str(e):
                    raise
        else:
            raise AssertionError("no free 10.x.y.0/24 for the test's network")
        self._addresses = [str(ip) for ip in list(subnet.hosts())[9:]]
        return self

    def __exit__(self, *exc) -> None:
        for ctr in self.containers.values():
            try:
                ctr.remove(force=True)
            except docker.errors.NotFound:
                pass
        if self._network is not None:
            self._network.remove()
        shutil.rmtree(self._work, ignore_errors=True)

    def address(self) -> str:
        """A Pod's (or a Service's) own address on the network, known before it starts."""
        return self._addresses.pop(0)

    def _run(self, name: str, ip: str, command: List[str], hostname: str, hosts: str, env: Mapping[str, str],
             mounts: List[Mount]) -> None:
        folder = self._work / name
        folder.mkdir()
        (folder / "hosts").write_text(hosts)
        (folder / "resolv.conf").write_text(NO_DNS)
        mounts = [*mounts, Mount("/etc/hosts", str(folder / "hosts"), type="bind", read_only=True),
                  Mount("/etc/resolv.conf", str(folder / "resolv.conf"), type="bind", read_only=True)]
        endpoint = self.client.api.create_endpoint_config(ipv4_address=ip)
        ctr = self.client.containers.create(
            self.image, entrypoint=command, hostname=hostname, environment=dict(env), mounts=mounts,
            name=f"{self.name}-{name}", labels={OWNER_LABEL: _owner(), "ascend-build.run": "1"},
            network=self.name, networking_config={self.name: endpoint})
        self.containers[name] = ctr
        ctr.start()

    def _dns_lines(self) -> str:
        return "".join(f"{ip}\t{name}\n" for name, ip in self.records.items())

    def service(self, name: str, port: int, target: str, ip: Optional[str] = None) -> str:
        """A ClusterIP Service ``name`` for ``port`` of the Pod at ``target``, at ``ip`` (the ClusterIP,
        else a new address): its address."""
        ip = ip or self.address()
        self.records[name] = ip
        self.records[f"{name}.{NAMESPACE}.svc.{CLUSTER_DOMAIN}"] = ip
        script = self._work / f"{name}.forward.py"
        script.write_text(FORWARDER)
        self._run(f"svc-{name}", ip, ["python", "/forward.py", target, str(port)], f"svc-{name}",
                  HOSTS_HEAD, {}, [Mount("/forward.py", str(script), type="bind", read_only=True)])
        return ip

    def start(self, pod: Mapping[str, Any], ip: str) -> None:
        """Start ``pod`` (its one container) at ``ip``, as the kubelet would (see the module)."""
        spec = pod["spec"]
        container, = spec["containers"]
        hostname = spec.get("hostname") or pod["metadata"]["name"][:63]
        own = (f"{ip}\t{hostname}.{spec['subdomain']}.{NAMESPACE}.svc.{CLUSTER_DOMAIN}\t{hostname}\n"
               if spec.get("subdomain") else f"{ip}\t{hostname}\n")
        env = container_env(pod, container, ip)
        command = [expand(arg, env) for arg in container["command"]] + \
                  [expand(arg, env) for arg in container.get("args", [])]
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        mounts = []
        for mount in container.get("volumeMounts", []):
            volume = volumes[mount["name"]]
            if "hostPath" in volume:
                mounts.append(Mount(mount["mountPath"], volume["hostPath"]["path"], type="bind",
                                    read_only=mount.get("readOnly", False)))
            elif "emptyDir" in volume:
                limit = volume["emptyDir"].get("sizeLimit")
                mounts.append(Mount(mount["mountPath"], "", type="tmpfs",
                                    tmpfs_size=size_in_bytes(limit) if limit else None))
            else:
                raise AssertionError(f"the stand-in kubelet mounts no {sorted(volume)}")
        self._run(pod["metadata"]["name"], ip, command, hostname, HOSTS_HEAD + own + self._dns_lines(), env, mounts)

    def wait(self, name: str, timeout: float) -> Tuple[Optional[int], str, str]:
        """(exit code, stdout, stderr) of the Pod or Service ``name`` once it has exited; a code of
        None when it was still running after ``timeout`` seconds (it is killed then)."""
        ctr = self.containers[name]
        try:
            code: Optional[int] = ctr.wait(timeout=max(timeout, 1))["StatusCode"]
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
            code = None
            ctr.kill()
        return (code, ctr.logs(stdout=True, stderr=False).decode("utf-8", "replace"),
                ctr.logs(stdout=False, stderr=True).decode("utf-8", "replace"))
