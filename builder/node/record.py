"""The run record of the field guide (section 7): the environment, saved next to the weights.

Why: a checkpoint is only reproducible with the stack that made it. The guide's own
example pairs CANN 7.0.RC1 with a torch_npu that was never published, so the record
is measured, not typed in: torch/torch_npu from ``importlib.metadata`` of the running
interpreter, CANN/driver/firmware/chip from the host probe, the image's manifest and
validation report from ``vocabulary.ETC_DIR`` when running inside an image built by
ascend-build, the job's ASCEND_/HCCL_/PYTORCH_NPU_ variables, plus the user's own
``key=value`` pairs (model, seq_len, learning_rate, ...), flat at the top level as in
the guide's example.

Decisions:

- **Values**: a user value becomes an int when it is a plain decimal integer without
  leading zeros (``8``, ``-3``), a float when it is a finite decimal or exponent number
  (``3e-5``, ``0.1``); everything else stays a string (``2.1.0``, ``08``, ``0x10``,
  ``nan``, ``true``). So the guide's ``"seq_len": 4096, "learning_rate": 3e-5`` come
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
import platform
import re
import sys
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from builder import documents, writes
from builder.errors import UserError
from builder.node.host import HostInfo, probe
from builder.smoke import parsers
from builder.vocabulary import LABEL_PREFIX, MANIFEST, OCI_PREFIX, VALIDATION_REPORT as VALIDATION

SCHEMA = 1
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
        >>> parse_value("-3"), parse_value("0.5"), parse_value("1e3"), parse_value("nan")
        (-3, 0.5, 1000.0, 'nan')
    """
    if _INT.fullmatch(text) and len(text.lstrip("+-")) <= 18:  # a longer number stays text, as written
        return int(text)
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
        with open(full, "rb") as fh:
            data = documents.load_json(fh.read(), path)
    except documents.Refused as exc:
        problems.append(exc.message)
        return None
    except (OSError, ValueError) as exc:
        problems.append(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}")
        return None
    if not isinstance(data, dict):
        problems.append(f"{path} is not a JSON object")
        return None
    return data


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


def build_record(extra: Mapping[str, str], host: HostInfo, environ: Mapping[str, str],
                 image_labels: Optional[Mapping[str, str]] = None, root: Path = Path("/")) -> Dict[str, Any]:
    """The record as a dict (no file written); UserError when a user key is reserved.

    Example:
        >>> rec = build_record({"seq_len": "4096"}, HostInfo(driver="24.1.rc3"), {}, root=Path("/nonexistent"))
        >>> rec["framework"], rec["driver"], rec["seq_len"]
        ('pytorch', '24.1.rc3', 4096)
    """
    clash = sorted(set(extra) & set(MEASURED))
    if clash:
        raise UserError(f"--set {', '.join(clash)}: measured by ascend-build, cannot be set by hand",
                        fix="pick another name (e.g. model, train_mode, seq_len, batch_size, learning_rate)")
    problems = list(host.problems)
    root = Path(root)
    manifest = _read_json(root, MANIFEST, problems)
    validation = _read_json(root, VALIDATION, problems)
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
        "torch_version": pick("torch_version", parsers.dist_version("torch"), "importlib.metadata"),
        "torch_npu_version": pick("torch_npu_version", parsers.dist_version("torch_npu", "torch-npu"), "importlib.metadata"),
        "cann_version": pick("cann_version", host.cann, host.cann_file or "CANN version file"),
        "python_version": platform.python_version(),
        "driver": host.driver,
        "firmware": host.firmware,
        "chip": pick("chip", host.chip, "npu-smi"),
        "soc": host.soc,
        "arch": host.arch,
        # every distribution of the running environment: what the lock said, as it is here
        "distributions": parsers.environment_distributions(sys.prefix),
    }
    if host.driver:
        sources["driver"] = host.driver_file or "npu-smi"
    if host.firmware:
        sources["firmware"] = host.firmware_file or "npu-smi"
    record["sources"] = sources
    image: Dict[str, Any] = {}
    if manifest is not None:
        image["manifest"] = manifest
        image["ref"] = manifest.get("image")
        image["content_hash"] = manifest.get("content_hash")
    if validation is not None:
        image["validation"] = _validation_summary(validation)
    if image_labels:
        image["labels"] = {k: v for k, v in sorted(image_labels.items())
                           if k.startswith((LABEL_PREFIX, OCI_PREFIX))}
    record["image"] = image or None
    record["env"] = {k: v for k, v in sorted(environ.items()) if k.startswith(ENV_PREFIXES)}
    record["problems"] = problems
    for key, value in extra.items():
        record[key] = parse_value(value)
    return record


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
                 image_labels: Optional[Mapping[str, str]] = None, root: Path = Path("/")) -> Path:
    """Write the record into ``output_dir`` (created if needed) and return its path.

    Never overwrites: ``ascend-build-record.json``, then ``.1.json``, ``.2.json``, ...
    ``root`` is where the image's ``MANIFEST`` and ``VALIDATION`` are read (tests point it at a tree).

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
    record = build_record(extra, host, environ, image_labels, root)
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # no permission, a name too long, a read-only or full file system
        raise writes.write_error(exc, output_dir, "no record was written") from None
    return _create(output_dir, (json.dumps(record, indent=2, sort_keys=False) + "\n").encode())


def run_record(output_dir: Path, pairs: Sequence[str] = (), root: Path = Path("/"),
               environ: Optional[Mapping[str, str]] = None, image_labels: Optional[Mapping[str, str]] = None,
               run_npu_smi: bool = True) -> Tuple[Path, Dict[str, Any]]:
    """``ascend-build record OUTPUT_DIR [--set k=v ...]``: probe, write, return (path, record)."""
    extra = parse_pairs(pairs)
    environ = dict(os.environ if environ is None else environ)
    host = probe(root, run_npu_smi=run_npu_smi, environ=environ)
    path = write_record(output_dir, extra, host, environ, image_labels, root)
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
    user = [k for k in record if k not in MEASURED]
    lines += [f"  {k:<18} {record[k]!r}" for k in user]
    if record.get("problems"):
        lines.append(f"  {len(record['problems'])} problem(s) noted in the record")
    return "\n".join(lines)


__all__ = ["parse_value", "parse_pairs", "build_record", "write_record", "run_record", "format_record",
           "RECORD_STEM", "MEASURED"]
