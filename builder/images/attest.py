"""What a passed, pushed image is attested with: a validation statement and SLSA provenance, signed.

After the push (`image_run.conclude`), `attest` attaches up to three in-toto statements to the
pushed digest, each in a DSSE envelope signed with the team's key, in two forms
(`builder.trust.attached`): cosign's ``.att`` tag, and one Sigstore bundle referrer per statement:

- **validation** (`statements.VALIDATION_V1`): the smoke report tier by tier (name, status,
  summary), which tiers passed and which were skipped and why, where it ran (the device; CPU
  twin, stand-in, emulated under qemu, or an NPU host with its driver, firmware and chip), the
  cell, its variant and content hash, and the verdict;
- **provenance** (SLSA v1, `statements.SLSA_PROVENANCE_V1`): the matrix file and cell
  (external parameters), the lock's and CANN installers' sha256 and the base image
  (resolved dependencies; the matrix's annotated with its git commit and whether that commit
  holds it as built: committed, modified, added, untracked, ignored, or outside-git), and this
  builder's package version, with its git commit when the package comes from a checkout of
  ascend-build (`builder.project.checkout`), never the commit of a repository it is merely
  installed in;
- **SBOM** (CycloneDX 1.5, `statements.CYCLONEDX_BOM`, made by `builder.images.sbom`): every
  distribution of the lock and every CANN package, with the hashes the build checked.

Example:
    >>> predicate = validation_predicate({"device": "cpu", "host": {}, "tiers": [
    ...     {"name": "versions", "status": "passed", "summary": "ok"}]}, ("versions",), "c", "cpu", "h")
    >>> predicate["verdict"], predicate["passedTiers"], predicate["ranOn"]["kind"]
    ('passed', ['versions'], 'cpu-twin')
"""

from __future__ import annotations

import datetime
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from packageurl import PackageURL

from builder import __version__, project

from builder.trust import attached, statements
from builder.images import oci
from builder.images.prepare import Job, host_arch
from builder.errors import UserError
from builder.registry import Registry
from builder.trust.signing import PrivateKey
from builder.vocabulary import CPU, DEVICE_TIER, NPU


@dataclass(frozen=True)
class Evidence:
    """What the provenance says of one image, gathered from its job before the build."""

    cell_id: str
    variant: str
    arch: str
    matrix_file: str                       # as given on the command line
    matrix_sha256: str                     # "" when the file cannot be read
    lock_sha256: str                       # of the lock the build installed from ("" when none)
    lock_state: str
    installers: Tuple[Tuple[str, str, str], ...]  # (file, url, sha256) of CANN installers (NPU image)
    base_image: str                        # the reference the build started from
    matrix_git: Tuple[str, str] = ("", "")  # (commit, state) of the matrix file in its checkout (`oci.file_in_git`)
    matrix_repository: Tuple[str, str] = ("", "")  # (repository, path in it) of that checkout (`oci.repository_of`)


def _sha256_of(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


def evidence(job: Job) -> Evidence:
    """The job's inputs, hashed now: what was built from, as the provenance names it."""
    matrix = job.matrix_path
    return Evidence(
        cell_id=job.plan.cell_id, variant=job.variant, arch=job.plan.arch, matrix_file=matrix,
        matrix_sha256=_sha256_of(Path(matrix)) if matrix else "", lock_sha256=_sha256_of(job.lock_file),
        lock_state=job.plan.lock_state,
        installers=tuple((i.filename, i.url, i.sha256) for i in job.image.installers) if job.npu else (),
        base_image=job.base_image, matrix_git=oci.file_in_git(Path(matrix)) if matrix else ("", ""),
        matrix_repository=oci.repository_of(Path(matrix)) if matrix else ("", ""))


def _ran_on(report: Dict) -> Dict:
    """Where the smoke test ran, in the words a policy checks: ``kind`` is ``npu-host``,
    ``emulated``, ``stand-in`` or ``cpu-twin`` (the first that applies)."""
    host = report.get("host") or {}
    device_tier: Dict = next((t for t in report.get("tiers", []) if t.get("name") == DEVICE_TIER), {})
    details = device_tier.get("details") or {}
    npu = report.get("device") == NPU
    kind = ("npu-host" if npu and not report.get("emulated") else "emulated" if report.get("emulated")
            else "stand-in" if report.get("stand_in") else "cpu-twin")
    return {
        "kind": kind, "device": report.get("device") or CPU, "cpuTwin": not npu,
        "emulated": report.get("emulated") or None, "standIn": report.get("stand_in") or None,
        "buildHostArch": host_arch(),
        "npuHost": {"driver": host.get("driver") or None, "firmware": host.get("firmware") or None,
                    "chip": details.get("device_name") or None, "npus": details.get("device_count")} if npu else None,
    }


def _tier(ran: Dict) -> Dict:
    """One tier as the statement says it: name, status, summary, and the seconds it took when the
    report gives them (a number: what `catalogue` shows beside the tier)."""
    said = {"name": ran.get("name"), "status": ran.get("status"), "summary": ran.get("summary", "")}
    seconds = ran.get("seconds")
    if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and math.isfinite(seconds) and seconds >= 0:
        said["seconds"] = seconds
    return said


def validation_predicate(report: Dict, tiers: Tuple[str, ...], cell_id: str, variant: str,
                         content_hash: str) -> Dict:
    """The validation statement's predicate, from a report whose required ``tiers`` passed."""
    ran = [t for t in report.get("tiers", []) if isinstance(t, dict)]
    status = {t.get("name"): t.get("status") for t in ran}
    return {
        "verdict": "passed", "cell": cell_id, "variant": variant, "contentHash": content_hash,
        "requiredTiers": list(tiers),
        "passedTiers": [t for t in tiers if status.get(t) == "passed"],
        "skippedTiers": [{"name": t.get("name"), "reason": t.get("summary", "")} for t in ran
                         if t.get("name") in tiers and t.get("status") == "skipped"],
        "tiers": [_tier(t) for t in ran],
        "ranOn": _ran_on(report),
        "smoke": {"started": report.get("started"), "python": report.get("python"), "exitCode": report.get("exit_code"),
                  "lock": report.get("lock")},
    }


def utc_timestamp(text: str) -> str:
    """An ISO 8601 time as in-toto's timestamps are written: RFC 3339 in UTC with ``Z``; "" when it is none.

    Example:
        >>> utc_timestamp("2026-12-01T11:00:00.250+01:00"), utc_timestamp("soon")
        ('2026-12-01T10:00:00.250000Z', '')
    """
    try:
        moment = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return ""
    if moment.tzinfo is None:  # no offset: a time of unknown zone is no instant
        return ""
    return moment.astimezone(datetime.timezone.utc).replace(tzinfo=None).isoformat() + "Z"


def image_uri(ref: str) -> str:
    """A container image reference as a package URL (``pkg:docker/...``, the purl spec's docker type,
    what in-toto's resource descriptors name images by), its registry a ``repository_url`` unless Docker Hub's.

    Example:
        >>> image_uri("local/debian:12"), image_uri("127.0.0.1:5000/team/img:t")
        ('pkg:docker/local/debian@12', 'pkg:docker/team/img@t?repository_url=127.0.0.1:5000')
    """
    full = oci.qualified(ref)
    host, _, path = full.partition("/")
    name, _, digest = path.partition("@")
    if not digest:
        slash = name.rfind("/")
        colon = name.rfind(":")
        name, version = (name[:colon], name[colon + 1:]) if colon > slash else (name, "latest")
    else:
        version = digest
    namespace, _, last = name.rpartition("/")
    if host == "docker.io" and namespace == "library":
        namespace = ""
    qualifiers = {} if host == "docker.io" else {"repository_url": host}
    return PackageURL(type="docker", namespace=namespace or None, name=last, version=version,
                      qualifiers=qualifiers).to_string()


def file_uri(path: str) -> str:
    """A file as an RFC 8089 ``file:`` URI of its absolute path ("" for none)."""
    return Path(path).resolve().as_uri() if path else ""


def matrix_uri(proof: Evidence) -> str:
    """The matrix file's URI: ``git+<repository>@<commit>#<path>`` (the form SPDX's download
    locations and pip's VCS URLs write) when the file is as the checkout's commit holds it, else
    the ``file:`` URI of its absolute path.

    Example:
        >>> proof = Evidence("c", "cpu", "x86_64", "/src/m.yaml", "ab", "", "ok", (), "b",
        ...                  ("f" * 40, "committed"), ("https://git.example/team/m", "matrix/m.yaml"))
        >>> matrix_uri(proof)
        'git+https://git.example/team/m@ffffffffffffffffffffffffffffffffffffffff#matrix/m.yaml'
    """
    commit, state = proof.matrix_git
    repository, inside = proof.matrix_repository
    if state == "committed" and commit and repository and inside:
        return f"git+{repository}@{commit}#{inside}"
    return file_uri(proof.matrix_file)


def provenance_predicate(proof: Evidence, report: Dict) -> Dict:
    """SLSA provenance v1 (https://slsa.dev/spec/v1.1/provenance) of the image ``proof`` describes."""
    base = report.get("base_image") or {}
    base_digests = [d.rpartition("@")[2] for d in base.get("digests") or [] if "@sha256:" in d]
    base_dep: Dict = {"name": "base-image", "uri": image_uri(str(base.get("ref") or proof.base_image))}
    if base_digests:
        base_dep["digest"] = {"sha256": base_digests[0].split(":", 1)[1]}
    elif str(base.get("id") or "").startswith("sha256:"):  # made locally (docker import): no registry digest
        base_dep["digest"] = {"sha256": str(base["id"]).split(":", 1)[1]}
        base_dep["annotations"] = {"digestOf": "image config (image ID): the base has no registry digest"}
    dependencies: List[Dict] = [base_dep]
    if proof.lock_sha256:
        dependencies.append({"name": "requirements.lock", "digest": {"sha256": proof.lock_sha256},
                             "annotations": {"state": proof.lock_state}})
    dependencies += [{"name": name, "uri": url, "digest": {"sha256": sha}} for name, url, sha in proof.installers if sha]
    if proof.matrix_sha256:
        matrix_dep: Dict = {"name": "matrix", "uri": matrix_uri(proof), "digest": {"sha256": proof.matrix_sha256}}
        commit, state = proof.matrix_git
        if state:  # whether the commit named holds this matrix file as it was built from
            matrix_dep["annotations"] = {"git": state, "gitCommit": commit or None,
                                         "inCommit": state == "committed"}
        dependencies.append(matrix_dep)
    started = utc_timestamp(str(report.get("started") or ""))
    version = {"ascend-build": __version__}  # the installed package's version (its metadata)
    checkout = project.checkout()  # a commit of ascend-build only when the package comes from its checkout
    commit, dirty = oci.git_head(checkout) if checkout is not None else ("", False)
    if commit:
        version["git-commit"] = commit + ("-dirty" if dirty else "")
    return {
        "buildDefinition": {
            "buildType": statements.BUILD_TYPE_V1,
            "externalParameters": {"matrix": proof.matrix_file, "cell": proof.cell_id, "variant": proof.variant,
                                   "arch": proof.arch, "baseImage": proof.base_image},
            "internalParameters": {"contentHash": report.get("content_hash"), "emulated": report.get("emulated")},
            "resolvedDependencies": dependencies,
        },
        "runDetails": {"builder": {"id": statements.BUILDER_ID, "version": version},
                       "metadata": {"startedOn": started} if started else {}},
    }


def attest(pushed: str, digest: str, predicates: List[Tuple[str, Dict]], key: PrivateKey, image_id: str = "") -> str:
    """Sign ``predicates`` ((predicate type, predicate), ...) about ``pushed``'s ``digest`` and attach
    them in its registry; the ``.att`` manifest's digest. Raises UserError when attaching fails.

    ``image_id``: the image this run tested. The engine's image ID is its config's digest, so a
    ``digest`` whose manifest names another config is another run's image (pushed under the same
    name meanwhile): it is refused, and nothing is signed about it."""
    host, _, rest = pushed.partition("/")
    repository = rest.rpartition(":")[0] if ":" in rest.rpartition("/")[2] else rest
    registry = Registry(host)
    try:
        image = registry.manifest(repository, digest)
    except LookupError:
        raise UserError(f"{host}/{repository}@{digest} is not in the registry after its push", exit_code=1,
                        fix="check the registry; then push again") from None
    config = image.data.get("config") if isinstance(image.data, dict) else None
    held = config.get("digest") if isinstance(config, dict) else None
    if image_id and held != image_id:
        raise UserError(f"{host}/{repository}@{digest} is not the image this run tested (its config is "
                        f"{held or 'none'}, this run's image is {image_id}): another run pushed {pushed} meanwhile; "
                        "nothing was signed about it", exit_code=1,
                        fix="run one build of a cell per registry name at a time; then push again")
    name = f"{host}/{repository}"
    envelopes = [(statements.sign(statements.statement(name, digest, kind, predicate), key), kind)
                 for kind, predicate in predicates]
    return attached.attach(registry, repository, image, envelopes, key.public_key())


def statements_for(report: Dict, tiers: Tuple[str, ...], cell_id: str, variant: str, content_hash: str,
                   proof: Optional[Evidence], bom: Optional[Dict] = None) -> List[Tuple[str, Dict]]:
    """The validation statement, and the provenance and SBOM (``bom``, `builder.images.sbom`) when
    the build's inputs are known (``promote`` tests an image built elsewhere: it knows no inputs,
    so it signs the validation only)."""
    made = [(statements.VALIDATION_V1,
             validation_predicate(report, tiers, cell_id, variant, content_hash))]
    if proof is not None:
        made.append((statements.SLSA_PROVENANCE_V1, provenance_predicate(proof, report)))
    if bom is not None:
        made.append((statements.CYCLONEDX_BOM, bom))
    return made
