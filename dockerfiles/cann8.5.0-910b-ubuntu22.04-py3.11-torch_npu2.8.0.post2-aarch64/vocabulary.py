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

from typing import NamedTuple, Tuple

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
class Tier(NamedTuple):
    """One smoke tier: everything the smoke program, the pipeline and the docs key on it.

    A new tier is one entry of `SMOKE_TIERS` plus its function in ``builder/smoke/smoke.py``
    (docs/contributing.md, "Adding a smoke tier"); nothing else lists the tiers.
    """

    name: str  # in --tiers, the report, the seal labels and statements: a lowercase word
    function: str  # the function of builder/smoke/smoke.py that runs it: (ctx) -> passed/failed/skipped
    seconds: int  # its deadline on native hardware; the smoke program's --timeout-scale multiplies it
    needs_device: bool  # False: a static tier, run on any build machine (all a -candidate image passed)
    owed_without_torch: Tuple[str, ...]  # the variants of a CANN-only image (no torch) that owe it
    records_reads: bool  # its file reads go into the report's files_read: the lazy variant's prefetch list
    proves: str  # what passing it proves, in one line (the docs' tier table, smoke.py --help)


# The registry, in the order the tiers run. Natively every tier takes seconds: the versions tier's
# `pip check` alone may take 120 s, the collective tier's own all-reduce timeout is 60 s. When a
# deadline passes, that tier fails with the stacks of every thread.
SMOKE_TIERS: Tuple[Tier, ...] = (
    Tier("versions", "tier_versions", 240, needs_device=False, owed_without_torch=(NPU, CPU), records_reads=False,
         proves="Python, torch, torch_npu and CANN are what the manifest declares, the environment is the lock's "
                "with pip check clean, and the ENV holds what CANN's set_env.sh sets"),
    Tier("libraries", "tier_libraries", 240, needs_device=False, owed_without_torch=(NPU,), records_reads=False,
         proves="every library torch_npu's objects need resolves with the image's LD_LIBRARY_PATH, no NPU present "
                "(torch's in the twin, CANN's runtime in a CANN-only image)"),
    Tier("import", "tier_import", 180, needs_device=True, owed_without_torch=(), records_reads=True,
         proves="torch, and torch_npu in an NPU image, import as a user's script imports them, and numpy and torch "
                "agree both ways"),
    Tier("device", "tier_device", 120, needs_device=True, owed_without_torch=(), records_reads=True,
         proves="the device is usable (torch.npu.is_available() in an NPU image), a matmul on it matches the CPU's, "
                "and the host's driver and firmware meet the image's minimums"),
    Tier("train", "tier_train", 180, needs_device=True, owed_without_torch=(), records_reads=True,
         proves="a tiny transformer learns under bf16 autocast and the GradScaler: the loss falls to 70% of its "
                "start and stays finite"),
    Tier("collective", "tier_collective", 150, needs_device=True, owed_without_torch=(), records_reads=False,
         proves="two processes all-reduce a tensor (hccl on NPUs, gloo on the CPU) and both see the sum"),
)
# The tier whose details name the NPU the smoke test saw (a validation statement's ranOn.npuHost).
DEVICE_TIER = "device"
# Before the first tier (the tier process up, the manifest read, the all-reduce workers started)
# and between two tiers; also scaled.
SMOKE_STARTUP_SECONDS = 60


# Everything below reads SMOKE_TIERS when called, never a copy made at import: a tier added to the
# registry is run, required and sealed like the others (tests/test_tiers.py adds one).
def tier_names() -> Tuple[str, ...]:
    """Every tier, in the order they run: what the smoke program runs by default."""
    return tuple(t.name for t in SMOKE_TIERS)


def static_tiers() -> Tuple[str, ...]:
    """The tiers that need no device: what an NPU image passes on a build machine (its -candidate)."""
    return tuple(t.name for t in SMOKE_TIERS if not t.needs_device)


def recorded_tiers() -> Tuple[str, ...]:
    """The tiers whose file reads the report keeps (``files_read``): the road to a first training step."""
    return tuple(t.name for t in SMOKE_TIERS if t.records_reads)


def tier(name: str) -> Tier:
    """The registry's entry of ``name``; KeyError when no tier has that name.

    Example:
        >>> tier("versions").seconds
        240
    """
    for entry in SMOKE_TIERS:
        if entry.name == name:
            return entry
    raise KeyError(name)


def required_tiers(variant: str, cann_only: bool) -> Tuple[str, ...]:
    """The tiers an image must pass to be validated: all of them, but a CANN-only image has no
    torch to import, run or train, so it owes only the tiers whose ``owed_without_torch`` names
    its variant (its NPU image the static tiers, its twin, with no CANN to link, the versions tier).

    Examples:
        >>> required_tiers(NPU, cann_only=True)
        ('versions', 'libraries')
        >>> required_tiers(CPU, cann_only=True)
        ('versions',)
    """
    return tuple(t.name for t in SMOKE_TIERS if not cann_only or variant in t.owed_without_torch)

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
