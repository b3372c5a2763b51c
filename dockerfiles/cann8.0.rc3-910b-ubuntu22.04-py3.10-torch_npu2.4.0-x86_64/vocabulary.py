"""The image's words, said once: label keys, paths inside images, variants, tags, tiers.

Why: the build wing writes these words into images (labels, files, tags) and the node
wing and the smoke program read them back. Spelled in one place, a rename cannot
leave a reader behind. A test greps the rest of ``builder/`` for the raw spellings.

This file is copied into every image beside ``smoke.py`` and imported there on its
own, so it stays standard-library only and valid Python 3.8.

Example:
    >>> Label.MIN_DRIVER
    'io.ascend-build.min-driver'
    >>> release_tag("cann9.0.0-910b-x", CPU)
    'cann9.0.0-910b-x-cpu'
    >>> normalize_arch("arm64"), normalize_arch("sparc")
    ('aarch64', None)
"""

from __future__ import annotations

from typing import Tuple

# ------------------------------------------------------------------ image labels
LABEL_PREFIX = "io.ascend-build."
OCI_PREFIX = "org.opencontainers.image."


class Label:
    """Keys of the labels every image carries (the node decides from these alone)."""

    CELL = LABEL_PREFIX + "cell"
    VARIANT = LABEL_PREFIX + "variant"
    OS = LABEL_PREFIX + "os"
    ARCH = LABEL_PREFIX + "arch"
    PYTHON = LABEL_PREFIX + "python"
    TORCH = LABEL_PREFIX + "torch"
    CONTENT_HASH = LABEL_PREFIX + "content-hash"
    LOCK = LABEL_PREFIX + "lock"  # the state of the lock it was built from: ok, incomplete, missing, stale
    CANN = LABEL_PREFIX + "cann"
    CHIP = LABEL_PREFIX + "chip"
    TORCH_NPU = LABEL_PREFIX + "torch-npu"
    MIN_DRIVER = LABEL_PREFIX + "min-driver"
    MIN_FIRMWARE = LABEL_PREFIX + "min-firmware"
    PRODUCT = LABEL_PREFIX + "product"  # only where the cell names one: min-driver is that product's HDK number
    # added by the seal step, only to images whose required tiers passed
    VALIDATED = LABEL_PREFIX + "validated"
    VALIDATED_TIERS = LABEL_PREFIX + "validated-tiers"  # the required tiers that passed, nothing else
    SKIPPED_TIERS = LABEL_PREFIX + "skipped-tiers"  # required tiers skipped with a reason (in the report)
    VALIDATED_DEVICE = LABEL_PREFIX + "validated-device"
    VALIDATED_DRIVER = LABEL_PREFIX + "validated-driver"
    VALIDATED_FIRMWARE = LABEL_PREFIX + "validated-firmware"
    VALIDATED_UNDER = LABEL_PREFIX + "validated-under"  # "native", or the emulation the smoke test ran under
    STAND_IN = LABEL_PREFIX + "stand-in"  # a twin on another base than the cell's: which, and why
    OCI_TITLE = OCI_PREFIX + "title"
    OCI_DESCRIPTION = OCI_PREFIX + "description"
    OCI_VERSION = OCI_PREFIX + "version"


# ------------------------------------------------------------------ paths inside images
TOOL_DIR = "/opt/ascend-build"  # the smoke program and the files shipped beside it
ETC_DIR = "/etc/ascend-build"  # what the image says of itself
NODE_TRUST_KEY = ETC_DIR + "/trust.pub"  # a node's default trust key (on the host, beside no image)
NODE_CONFIG = ETC_DIR + "/node.yaml"  # a node's settings (on the host): trust_key, a key file kept elsewhere
SMOKE_PROGRAM = TOOL_DIR + "/smoke.py"
# Which file each Python step installed (builder/images/installed.py): <step>.txt for uv's steps,
# unverified.json (pip's --report) for the unverified one. Under TOOL_DIR, which the first Python
# step makes: a later step then changes no folder an earlier per-chip step made (the torch_npu
# step's layer is the same bytes on every chip).
INSTALLED_DIR = TOOL_DIR + "/installed"
MANIFEST = ETC_DIR + "/manifest.json"
VALIDATION_REPORT = ETC_DIR + "/validation.json"
LOCK = ETC_DIR + "/requirements.lock"  # the cell's lock, as the image installed it
# The files beside smoke.py in every image, in the order the Dockerfile copies them.
GUARD_FILE = "driver_guard.py"  # the driver guard, executable, linked from GUARD below
SHIPPED_FILES = ("smoke.py", "parsers.py", "error_table.py", "versions.py", "vocabulary.py", "errors.json", GUARD_FILE)

# ------------------------------------------------------------------ the driver guard (builder/smoke/driver_guard.py)
# Every image's ENTRYPOINT, at a fixed path: a Kubernetes `command:` names it first, as
# [GUARD, *CMD], because `command:` replaces the ENTRYPOINT.
GUARD = "/usr/local/bin/ascend-driver-guard"
REQUIRE_DRIVER_ENV = "ASCEND_REQUIRE_DRIVER"  # the image's minimum NPU driver (its cell's `driver`)
REQUIRE_FIRMWARE_ENV = "ASCEND_REQUIRE_FIRMWARE"  # the image's minimum firmware; empty: none stated
GUARD_ENV = "ASCEND_DRIVER_GUARD"  # set to GUARD_OFF to start the command on any driver
GUARD_OFF = "off-unsafe"

# ------------------------------------------------------------------ variants and tags
NPU = "npu"  # the image that ships: CANN + torch_npu
CPU = "cpu"  # its CPU twin: same OS, Python and torch, no CANN, no torch_npu
VARIANTS = (NPU, CPU)
CANDIDATE_SUFFIX = "-candidate"  # built, static tiers passed, device tiers still owed
LAZY_FORMATS = ("estargz",)  # lazily pullable variants of a validated image, pushed under <tag>-<format>


def release_tag(tag: str, variant: str) -> str:
    """The tag a validated image of ``variant`` gets: the twin's ends in ``-cpu``."""
    return tag if variant == NPU else tag + "-" + CPU


def stand_in_tag(tag: str, os_id: str) -> str:
    """The tag of a CPU twin built on a stand-in base: never the cell's own ``-cpu`` tag.

    Example:
        >>> stand_in_tag("cann7.0.rc1-910b-x", "debian11")
        'cann7.0.rc1-910b-x-cpu-on-debian11'
    """
    return release_tag(tag, CPU) + "-on-" + os_id


def platform_of(arch: str) -> str:
    """Docker's platform of an arch: ``aarch64`` -> ``linux/arm64``, ``x86_64`` -> ``linux/amd64``."""
    return {"aarch64": "linux/arm64", "x86_64": "linux/amd64"}[arch]


def dockerfile_name(variant: str) -> str:
    """The Dockerfile of a variant in ``dockerfiles/<cell>/``."""
    return "Dockerfile" if variant == NPU else "Dockerfile." + CPU


def manifest_name(variant: str) -> str:
    """The manifest file of a variant in ``dockerfiles/<cell>/``."""
    return "manifest.json" if variant == NPU else "manifest." + CPU + ".json"


# ------------------------------------------------------------------ smoke tiers
STATIC_TIERS = ("versions", "libraries")  # need no device: run on any build machine
TIERS = STATIC_TIERS + ("import", "device", "train", "collective")
# the tiers whose file reads the smoke report keeps (files_read): the prefetch list of the lazy variant
RECORDED_TIERS = ("import", "device", "train")
# Each tier's deadline in seconds on native hardware (the smoke program's --timeout-scale
# multiplies them: under qemu the pipeline passes 4). Natively every tier takes seconds; the
# versions tier's `pip check` alone may take 120 s, the collective tier's own all-reduce
# timeout is 60 s. When a deadline passes, that tier fails with the stacks of every thread.
TIER_SECONDS = {"versions": 240, "libraries": 240, "import": 180, "device": 120, "train": 180, "collective": 150}
# Before the first tier (the tier process up, the manifest read, the all-reduce workers started)
# and between two tiers; also scaled.
SMOKE_STARTUP_SECONDS = 60


def required_tiers(variant: str, cann_only: bool) -> Tuple[str, ...]:
    """The tiers an image must pass to be validated: all of them, but a CANN-only image has no
    torch to import, run or train, so its NPU image owes the static tiers and its twin the
    versions tier (its twin has no CANN to link).

    Examples:
        >>> required_tiers(NPU, cann_only=True)
        ('versions', 'libraries')
        >>> required_tiers(CPU, cann_only=True)
        ('versions',)
    """
    if not cann_only:
        return TIERS
    return STATIC_TIERS if variant == NPU else STATIC_TIERS[:1]

# ------------------------------------------------------------------ hardware words
ARCHS = ("aarch64", "x86_64")
CHIPS = ("910", "910b", "a3", "310p", "950")
# /dev nodes every NPU container needs besides its /dev/davinciN
CONTROL_DEVICES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
_ARCH_ALIASES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


def normalize_arch(value):
    """``amd64``/``x86_64`` -> ``x86_64``, ``arm64``/``aarch64`` -> ``aarch64``, else None."""
    return _ARCH_ALIASES.get(str(value or "").strip().lower())


DEFAULT_IMAGE = "ascend-build/pytorch"  # the repository cells are tagged in unless the matrix says
