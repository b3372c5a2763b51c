"""A CycloneDX SBOM of one image, made from what the build installs from: its lock and CANN's packages.

Its components are what the build installs from its lock and the knowledge base:

* each distribution of the cell's lock (the twin's lock is the same minus torch_npu), as a
  ``pkg:pypi`` library with the sha256 of the file the build installed and its name (property
  ``ascend-build:installed-file``), as the image recorded it (`builder.images.installed`); when
  the image recorded none for it, the sha256 of every file the lock allows, with the property
  ``ascend-build:installed-file`` saying so. An entry of an incomplete lock, installed unverified
  under --allow-incomplete-lock, carries the property ``ascend-build:unverified``, and the
  sha256 of the file pip installed when pip's report names it;
* each CANN package of the NPU image (toolkit, the chip's ops/kernels package, NNAL), as an
  application with its version, the installer's sha256 and where it was downloaded from.

Not listed: the base image's OS packages (apt/dnf, at the versions of its distribution's
day), and a conda cell's conda packages (Python and what is beneath it), although the
lock's conda part pins them. The SBOM says it is partial: its composition is ``incomplete``.
The same job gives the same bytes (the serial number is derived from the content hash).
`pipeline` writes it into the state folder and, with a signing key, attaches it to the pushed
digest as a signed in-toto statement of predicate type `statements.CYCLONEDX_BOM` (as
``cosign attest --type cyclonedx`` does).

Example:
    >>> bom = of(job)                                      # doctest: +SKIP
    >>> bom["bomFormat"], bom["components"][0]["purl"]     # doctest: +SKIP
    ('CycloneDX', 'pkg:pypi/absl-py@2.1.0')
"""

from __future__ import annotations

import uuid
from typing import Dict, List, Optional

from packageurl import PackageURL

from builder import __version__
from builder.images.installed import Installed
from builder.images.prepare import Job

SPEC_VERSION = "1.5"
_NAMESPACE = uuid.UUID("5c8d2a4e-7f3b-4e1a-9c6d-2b8f0e4a1d37")  # ascend-build's: serial numbers of its SBOMs


def _hashes(hexes) -> List[Dict[str, str]]:
    return [{"alg": "SHA-256", "content": h} for h in hexes]


NOT_RECORDED = "not recorded: the hashes are every file the lock allows"


def of(job: Job, installed: Optional[Dict[str, Installed]] = None) -> Dict:
    """The CycloneDX 1.5 document (a dict, JSON-ready) of ``job``'s image.

    Parameters
    ----------
    job: the image, decided (`builder.images.prepare.prepare`): its lock and CANN installers.
    installed: {canonical name: the file installed}, as the built image recorded it
        (`builder.images.installed.read`); None or a name missing: not recorded.
    """
    installed = installed or {}
    plan, image = job.plan, job.image
    lock = plan.lock
    entries = () if lock is None or plan.lock_state not in ("ok", "incomplete") else (
        lock.entries if job.npu else lock.without("torch-npu"))
    components: List[Dict] = []
    for entry in sorted(entries, key=lambda e: e.name):
        purl = PackageURL(type="pypi", name=entry.name, version=entry.version).to_string()  # canonical: + is %2B
        component: Dict = {"type": "library", "bom-ref": purl, "name": entry.name, "version": entry.version,
                           "purl": purl}
        got = installed.get(entry.name)
        if entry.hashes:
            component["hashes"] = _hashes([got.sha256] if got else entry.hashes)
            component["properties"] = [{"name": "ascend-build:installed-file", "value": got.file if got else NOT_RECORDED}]
        else:  # an incomplete lock: installed unverified, and the SBOM says so
            component["properties"] = [{"name": "ascend-build:unverified", "value": entry.note or "no sha256 in the lock"}]
            if got:  # pip's report names the file: its hash, which no lock checked
                component["hashes"] = _hashes([got.sha256])
                component["properties"].append({"name": "ascend-build:installed-file", "value": got.file})
        components.append(component)
    cann = str(plan.manifests[job.variant].get("cann_version") or "")
    for file in image.installers if job.npu else ():
        component = {"type": "application", "bom-ref": f"cann:{file.filename}", "name": file.filename.rsplit("_", 2)[0],
                     "version": cann, "group": "CANN",
                     "externalReferences": [{"type": "distribution", "url": file.url}],
                     "properties": [{"name": "ascend-build:file", "value": file.filename},
                                    {"name": "ascend-build:cann-package", "value": file.kind}]}
        if file.sha256:
            component["hashes"] = _hashes([file.sha256])
        components.append(component)
    return {
        "bomFormat": "CycloneDX",
        "specVersion": SPEC_VERSION,
        "serialNumber": f"urn:uuid:{uuid.uuid5(_NAMESPACE, f'{plan.content_hash}/{job.name}')}",
        "version": 1,
        "metadata": {
            "tools": {"components": [{"type": "application", "name": "ascend-build", "version": __version__}]},
            "component": {"type": "container", "bom-ref": job.ref, "name": job.ref.rsplit(":", 1)[0],
                          "version": job.ref.rsplit(":", 1)[1]},
            "properties": [{"name": "ascend-build:content-hash", "value": plan.content_hash},
                           {"name": "ascend-build:lock", "value": plan.lock_state},
                           {"name": "ascend-build:base-image", "value": job.base_image}],
        },
        "components": components,
        # the OS packages of the base image are not in it: nothing here pins them
        "compositions": [{"aggregate": "incomplete", "assemblies": [job.ref]}],
    }
