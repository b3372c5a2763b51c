"""doctor's (and record's) probe: what an image has, printed as one marked JSON line. Runs INSIDE the image.

``ascend-build doctor --image IMAGE`` runs this with ``python3 -c`` in any image (one
built by ascend-build or not), so it cannot rely on files in the image: the node sends
``parsers.py`` and ``vocabulary.py`` along as source and binds them as modules before
this code runs (``builder.node.doctor.probe_program``). Run as a file, it imports the
ones beside it. Standard library only, Python 3.8+.
"""
import json
import os
import platform
import sys

MARK = "ASCEND_BUILD_DOCTOR "
KEEP = ("ASCEND_", "HCCL_", "PYTORCH_NPU_", "LD_LIBRARY_PATH", "CONDA_DEFAULT_ENV", "CONDA_PREFIX")

if "parsers" not in globals():  # not sent by the node: import them
    try:
        from builder import vocabulary
        from builder.smoke import parsers
    except ImportError:  # run as a file beside them
        import parsers  # type: ignore[import-not-found,no-redef]  # found on sys.path only beside this file
        import vocabulary  # type: ignore[import-not-found,no-redef]


def _document(path):
    """The JSON object at ``path``; None when absent or not one (any image: no file is a fact too)."""
    try:
        with open(path) as fh:
            data = json.load(fh)
    except Exception:
        return None
    return data if isinstance(data, dict) else None


def facts():
    manifest = _document(vocabulary.MANIFEST) or {}
    found, looked = parsers.find_cann(os.environ, manifest, platform.machine())
    return {
        "python": platform.python_version(), "executable": sys.executable, "prefix": sys.prefix,
        "base_prefix": getattr(sys, "base_prefix", sys.prefix), "arch": platform.machine(),
        "torch": parsers.dist_version("torch"), "torch_npu": parsers.dist_version("torch_npu", "torch-npu"),
        "cann": found, "cann_looked": looked, "manifest": bool(manifest),
        "env": {k: v for k, v in os.environ.items() if k.startswith(KEEP)},
        # what `record --image` saves: this environment's own distributions and the image's own documents
        "distributions": parsers.environment_distributions(sys.prefix),
        "manifest_doc": manifest or None, "validation_doc": _document(vocabulary.VALIDATION_REPORT),
    }


if __name__ == "__main__":  # also under `python3 -c`
    sys.stdout.write("\n" + MARK + json.dumps(facts()) + "\n")
