"""The run record of the field guide (section 7): the environment, saved next to the weights.

Why: a checkpoint is only reproducible with the stack that made it. The guide's own
example pairs CANN 7.0.RC1 with a torch_npu that was never published, so the record
is measured, not typed in: torch/torch_npu from ``importlib.metadata`` of the running
interpreter the run used (inside ``--image``, or the ``python3`` first on PATH; not the CLI
process's own), CANN/driver/firmware/chip from the host probe, the image's manifest and
validation report from ``vocabulary.ETC_DIR`` (inside the image with ``--image``), the job's ASCEND_/HCCL_/PYTORCH_NPU_ variables, plus the user's own
``key=value`` pairs (model, seq_len, learning_rate, ...), flat at the top level as in
the guide's example.

Decisions:

- **Values**: a user value becomes an int when it is a plain decimal integer without
  leading zeros (``8``, ``-3``), a float when it is a finite decimal or exponent number
  (``3e-5``, ``0.1``, ``2.0``) that a float writes back with the same digits; everything else
  stays a string (``2.1.0``, ``1.10``, ``08``, ``0x10``, ``nan``, ``true``). So the guide's ``"seq_len": 4096, "learning_rate": 3e-5`` come
  out as numbers and version strings never do.
- **User keys** may not replace a measured key (``torch_version``, ``driver``, ...):
  that would make the record lie. They must look like identifiers (``[A-Za-z_][\\w.-]*``).
- **Never overwrite**: the first record in a folder is ``ascend-build-record.json``;
  when it exists the next is ``ascend-build-record.1.json``, ``.2.json``, ... The file is
  created with ``O_EXCL``, so two jobs writing at once never clobber each other. No
  ``--force``: records are cheap, lost records are not.
- **Measured beats declared**: a value the probe cannot read (no torch in this
  interpreter, no CANN file) falls back to the image manifest, and ``sources`` says so.

Example:
    >>> parse_value("8"), parse_value("3e-5"), parse_value("2.1.0"), parse_value("08")
    (8, 3e-05, '2.1.0', '08')
"""

from __future__ import annotations

import datetime
import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from builder import bounded, documents, writes
from builder.errors import UserError
from builder.node import doctor
from builder.node.host import HostInfo, probe
from builder.smoke import doctor_probe
from builder.vocabulary import LABEL_PREFIX, MANIFEST, OCI_PREFIX, VALIDATION_REPORT as VALIDATION

SCHEMA = 1
RECORD_READ_MAX = 16 << 20  # the image's manifest and validation report are KBs; a larger one is not read
RECORD_STEM = "ascend-build-record"
ENV_PREFIXES = ("ASCEND_", "HCCL_", "PYTORCH_NPU_")
MEASURED = ("schema", "created", "framework", "torch_version", "torch_npu_version", "cann_version",
            "python_version", "driver", "firmware", "chip", "soc", "arch", "image", "env", "sources",
            "problems", "distributions")
_INT = re.compile(r"-?(?:0|[1-9][0-9]*)")
_FLOAT = re.compile(r"-?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][-+]?[0-9]+)?")
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
_MAX_TRIES = 10000

Value = Union[int, float, str]


def parse_value(text: str) -> Value:
    """A user value as int, float or str (see the module docstring).

    Example:
        >>> parse_value("-3"), parse_value("0.5"), parse_value("1e3"), parse_value("nan"), parse_value("1.10")
        (-3, 0.5, 1000.0, 'nan', '1.10')
    """
    if _INT.fullmatch(text) and len(text.lstrip("+-")) <= 18:  # a longer number stays text, as written
        return int(text)
    fraction = re.split("[eE]", text)[0].partition(".")[2]
    if len(fraction) > 1 and fraction.endswith("0"):  # 1.10 as a float is 1.1: a version, or digits the writer meant
        return text
    if _FLOAT.fullmatch(text) and any(ch in text for ch in ".eE"):
        value = float(text)
        if math.isfinite(value):
            return value
    return text


def parse_pairs(items: Sequence[str]) -> Dict[str, str]:
    """``["model=qwen2.5", "seq_len=4096"]`` (``--set`` options) -> dict; UserError for a bad one.

    Example:
        >>> parse_pairs(["model=qwen2.5-27b", "note=a=b"])
        {'model': 'qwen2.5-27b', 'note': 'a=b'}
    """
    out: Dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not _KEY.fullmatch(key):
            raise UserError(f"--set {item!r} is not key=value with a name-like key",
                            fix="write e.g. --set model=qwen2.5-27b --set seq_len=4096")
        if key in out:
            raise UserError(f"--set {key}=... given twice", fix="give each key once")
        out[key] = value
    return out


def _read_json(root: Path, path: str, problems: List[str]) -> Optional[Dict[str, Any]]:
    full = root / path.lstrip("/")
    if not full.exists():
        return None
    try:
        raw = bounded.read_file(full, RECORD_READ_MAX + 1)
        if len(raw) > RECORD_READ_MAX:
            problems.append(f"{path} is over {RECORD_READ_MAX} bytes: no such file of the image is that large")
            return None
        data = documents.load_json(raw, path)
    except documents.Refused as exc:
        problems.append(exc.message)
        return None
    except bounded.NotRegular:
        problems.append(f"{path} is not a regular file (a FIFO, a device or a folder): it is not read")
        return None
    except (OSError, ValueError) as exc:
        problems.append(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}")
        return None
    if not isinstance(data, dict):
        problems.append(f"{path} is not a JSON object")
        return None
    return data


def _object(value: Any) -> Optional[Dict[str, Any]]:
    return value if isinstance(value, dict) else None


def _validation_summary(report: Mapping[str, Any]) -> Dict[str, Any]:
    tiers = report["tiers"] if isinstance(report.get("tiers"), list) else []
    return {
        "passed": report.get("passed"),
        "device": report.get("device"),
        "started": report.get("started"),
        "host": report.get("host"),
        "tiers": {str(t.get("name")): t.get("status") for t in tiers if isinstance(t, dict)},
        "lock": report.get("lock"),
        "base_image": report.get("base_image"),
    }


def interpreter_facts() -> Dict[str, Any]:
    """The running interpreter's facts (doctor's probe, in this process): right when the job's own
    Python calls ``write_record``; the CLI never records itself (``python_facts``, ``doctor.probe_image``)."""
    return doctor_probe.facts()


def python_facts(python: str) -> Dict[str, Any]:
    """The facts of the Python at ``python`` (doctor's probe run with it); UserError when it cannot run.

    Example:
        >>> try:
        ...     python_facts("/nonexistent/python3")
        ... except UserError as exc:
        ...     print(exc.message)
        cannot run /nonexistent/python3: No such file or directory
    """
    try:
        done = subprocess.run([python, "-c", doctor.probe_program()], capture_output=True, text=True,
                              timeout=doctor.PROBE_TIMEOUT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise UserError(f"{python} did not answer within {doctor.PROBE_TIMEOUT:.0f} s", exit_code=1,
                        fix="check that this Python starts (`python3 -c 'import sys'`)") from None
    except OSError as exc:
        raise UserError(f"cannot run {python}: {exc.strerror}", exit_code=1,
                        fix="put the job's python3 on PATH, or record inside the image with --image") from None
    return doctor.probe_facts(done.stdout, done.stderr, done.returncode, python,
                              fix="record with the job's own Python 3.8 or newer on PATH, or with --image")


def build_record(extra: Mapping[str, str], host: HostInfo, environ: Mapping[str, str],
                 image_labels: Optional[Mapping[str, str]] = None, root: Path = Path("/"),
                 facts: Optional[Mapping[str, Any]] = None, image: Optional[str] = None,
                 identity: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The record as a dict (no file written); UserError when a user key is reserved.

    ``facts`` is the environment the run used, as doctor's probe reports it (default: this
    interpreter's). ``image`` names the image the facts were measured in: then its manifest,
    validation report, CANN and environment variables come from inside it, not from ``root``.

    Example:
        >>> rec = build_record({"seq_len": "4096"}, HostInfo(driver="24.1.rc3"), {}, root=Path("/nonexistent"))
        >>> rec["framework"], rec["driver"], rec["seq_len"]
        ('pytorch', '24.1.rc3', 4096)
    """
    clash = sorted(set(extra) & set(MEASURED))
    if clash:
        raise UserError(f"--set {', '.join(clash)}: measured by ascend-build, cannot be set by hand",
                        fix="pick another name (e.g. model, train_mode, seq_len, batch_size, learning_rate)")
    facts = interpreter_facts() if facts is None else facts
    problems = list(host.problems)
    root = Path(root)
    if image:
        manifest = _object(facts.get("manifest_doc"))
        validation = _object(facts.get("validation_doc"))
        cann_files = [c for c in facts.get("cann") or [] if isinstance(c, dict) and c.get("version")]
        cann, cann_how = ((str(cann_files[0]["version"]), f"image {image}: {cann_files[0].get('path')}")
                          if cann_files else (None, ""))
        env = {str(k): str(v) for k, v in (_object(facts.get("env")) or {}).items()}
    else:
        manifest = _read_json(root, MANIFEST, problems)
        validation = _read_json(root, VALIDATION, problems)
        cann, cann_how = host.cann, host.cann_file or "CANN version file"
        env = dict(environ)
    python_at = (f"image {image}: " if image else "") + str(facts.get("executable") or "python")
    sources: Dict[str, str] = {}

    def pick(key: str, measured: Optional[str], how: str) -> Optional[str]:
        if measured:
            sources[key] = how
            return measured
        declared = (manifest or {}).get(key)
        if declared:
            sources[key] = "image manifest (not measurable here)"
            return str(declared)
        return None

    record: Dict[str, Any] = {
        "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
        "framework": "pytorch",
        "torch_version": pick("torch_version", facts.get("torch"), f"importlib.metadata of {python_at}"),
        "torch_npu_version": pick("torch_npu_version", facts.get("torch_npu"), f"importlib.metadata of {python_at}"),
        "cann_version": pick("cann_version", cann, cann_how),
        "python_version": facts.get("python"),
        "driver": host.driver,
        "firmware": host.firmware,
        "chip": pick("chip", host.chip, "npu-smi"),
        "soc": host.soc,
        "arch": host.arch,
        # every distribution of the run's environment (not the CLI process's): what the lock said, as it is there
        "distributions": dict(_object(facts.get("distributions")) or {}),
    }
    sources["python_version"] = sources["distributions"] = python_at
    if host.driver:
        sources["driver"] = host.driver_file or "npu-smi"
    if host.firmware:
        sources["firmware"] = host.firmware_file or "npu-smi"
    record["sources"] = sources
    seen: Dict[str, Any] = {"ref": image} if image else {}
    if manifest is not None:
        seen["manifest"] = manifest
        seen["ref"] = image or manifest.get("image")
        seen["content_hash"] = manifest.get("content_hash")
    if validation is not None:
        seen["validation"] = _validation_summary(validation)
    if identity:  # the image by digest as well as by the tag it was named by: a tag can move
        seen["id"] = identity.get("id")
        seen["digests"] = list(identity.get("digests") or [])
        seen["by_digest"] = by_digest(image or "", seen["digests"])
    if image_labels:
        seen["labels"] = {k: v for k, v in sorted(image_labels.items())
                          if k.startswith((LABEL_PREFIX, OCI_PREFIX))}
    record["image"] = seen or None
    record["env"] = {k: v for k, v in sorted(env.items()) if k.startswith(ENV_PREFIXES)}
    record["problems"] = problems
    for key, value in extra.items():
        record[key] = parse_value(value)
    return record


def by_digest(ref: str, digests: Sequence[str]) -> Optional[str]:
    """The ``repository@sha256:...`` of ``ref``'s own repository among the engine's repo digests
    (the first when none is of it); None when the image was never pushed or pulled by digest.

    Example:
        >>> by_digest("r:5000/team/pt:t1", ["other/pt@sha256:aa", "r:5000/team/pt@sha256:bb"])
        'r:5000/team/pt@sha256:bb'
        >>> by_digest("team/pt:t1", []) is None
        True
    """
    repository = ref.split("@", 1)[0]
    if ":" in repository.rsplit("/", 1)[-1]:
        repository = repository.rsplit(":", 1)[0]
    own = [d for d in digests if d.split("@", 1)[0] == repository]
    return (own or list(digests))[0] if (own or digests) else None


def _create(output_dir: Path, data: bytes) -> Path:
    """Write ``data`` whole to the first free record name, never replacing a file (see
    `writes.create_file`: a full disk or a kill never leaves half a record under its name)."""
    for n in range(_MAX_TRIES):
        path = output_dir / (f"{RECORD_STEM}.json" if n == 0 else f"{RECORD_STEM}.{n}.json")
        if not path.exists() and writes.create_file(path, data):
            return path
    raise UserError(f"{output_dir} already holds {_MAX_TRIES} run records", fix="write into a new folder",
                    exit_code=1)


def write_record(output_dir: Path, extra: Mapping[str, str], host: HostInfo, environ: Mapping[str, str],
                 image_labels: Optional[Mapping[str, str]] = None, root: Path = Path("/"),
                 facts: Optional[Mapping[str, Any]] = None, image: Optional[str] = None,
                 identity: Optional[Mapping[str, Any]] = None) -> Path:
    """Write the record into ``output_dir`` and return its path.

    ``output_dir`` is created when only its last part is missing; a missing parent is an error
    (a mistyped path should not grow a new tree beside the weights).
    Never overwrites: ``ascend-build-record.json``, then ``.1.json``, ``.2.json``, ...
    ``root`` is where the image's ``MANIFEST`` and ``VALIDATION`` are read (tests point it at a
    tree) unless ``image`` says the facts were measured inside an image (see ``build_record``).

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> write_record(d, {}, HostInfo(), {}, root=d).name, write_record(d, {}, HostInfo(), {}, root=d).name
        ('ascend-build-record.json', 'ascend-build-record.1.json')
    """
    output_dir = Path(output_dir)
    try:
        dangling = output_dir.is_symlink() and not output_dir.exists()
        not_a_folder = output_dir.exists() and not output_dir.is_dir()
    except OSError as exc:  # e.g. a name longer than the file system allows
        raise UserError(f"cannot use {str(output_dir)[:80]}...: {exc.strerror}", exit_code=1,
                        fix="name the folder the checkpoint is saved in") from None
    if dangling:
        raise UserError(f"{output_dir} is a symlink to nothing", fix="name the folder the checkpoint is saved in")
    if not_a_folder:
        raise UserError(f"{output_dir} is not a folder", fix="name the folder the checkpoint is saved in")
    parent = output_dir.absolute().parent
    if not output_dir.exists() and not parent.is_dir():
        raise UserError(f"{output_dir}: its folder {parent} does not exist", exit_code=1,
                        fix=f"name the folder the checkpoint is saved in, or create it first (mkdir -p {output_dir})")
    record = build_record(extra, host, environ, image_labels, root, facts, image, identity)
    try:
        output_dir.mkdir(exist_ok=True)  # its parent exists (checked above): one new folder at most
    except OSError as exc:  # no permission, a name too long, a read-only or full file system
        raise writes.write_error(exc, output_dir, "no record was written") from None
    return _create(output_dir, (json.dumps(record, indent=2, sort_keys=False) + "\n").encode())


def run_record(output_dir: Path, pairs: Sequence[str] = (), root: Path = Path("/"),
               environ: Optional[Mapping[str, str]] = None, image: Optional[str] = None, engine=None,
               run_npu_smi: bool = True) -> Tuple[Path, Dict[str, Any]]:
    """``ascend-build record OUTPUT_DIR [--image IMAGE] [--root DIR] [--set k=v ...]``: probe, write,
    return (path, record).

    The environment recorded is the run's, not this process's: with ``image``, measured inside it
    (doctor's probe through ``engine``, ``Engine.connect()`` by default); without, the ``python3``
    on ``environ``'s PATH (the job's interpreter where the job ran). The node (driver, firmware,
    chip) is probed under ``root``.
    """
    extra = parse_pairs(pairs)
    environ = dict(os.environ if environ is None else environ)
    host = probe(root, run_npu_smi=run_npu_smi, environ=environ)
    labels, identity = None, None
    if image:
        if engine is None:
            from builder.engine import Engine

            engine = Engine.connect()
        labels = engine.labels(image)  # UserError (exit 1) when there is no such image
        identity = engine.identity(image)
        facts = doctor.probe_image(engine, image)
    else:
        python = shutil.which("python3", path=environ.get("PATH", os.defpath))
        if python is None:
            raise UserError("no python3 on PATH: the run's environment cannot be measured", exit_code=1,
                            fix="run record where the job ran (its python3 on PATH), or name its image with --image")
        facts = python_facts(python)
    path = write_record(output_dir, extra, host, environ, labels, root, facts, image, identity)
    with open(path, encoding="utf-8") as fh:
        return path, json.load(fh)


def format_record(path: Path, record: Mapping[str, Any]) -> str:
    """A short text summary of a written record.

    Example:
        >>> print(format_record(Path("/ckpt/ascend-build-record.json"), {"torch_version": "2.1.0"}).splitlines()[0])
        wrote /ckpt/ascend-build-record.json
    """
    keys = ("framework", "torch_version", "torch_npu_version", "cann_version", "python_version",
            "driver", "firmware", "chip")
    lines = [f"wrote {path}"]
    lines += [f"  {k:<18} {record.get(k) if record.get(k) is not None else 'unknown'}" for k in keys]
    image = record.get("image") or {}
    if image.get("ref"):
        lines.append(f"  {'image':<18} {image['ref']}")
    if image.get("by_digest") or image.get("id"):
        lines.append(f"  {'image digest':<18} {image.get('by_digest') or image['id'] + ' (image id; not pushed)'}")
    user = [k for k in record if k not in MEASURED]
    lines += [f"  {k:<18} {record[k]!r}" for k in user]
    if record.get("problems"):
        lines.append(f"  {len(record['problems'])} problem(s) noted in the record")
    return "\n".join(lines)


__all__ = ["parse_value", "parse_pairs", "interpreter_facts", "python_facts", "build_record", "write_record", "run_record", "format_record",
           "RECORD_STEM", "MEASURED"]
