"""The knowledge base: typed answers about the Ascend stack, read once from ``builder/data``.

Everything the checks, the plan and the CLI know about torch_npu releases, CANN releases,
driver/firmware pairing, chips, base operating systems and where installers come from
comes from here. The data files keep a ``source`` for every fact; the knowledge base only
reads them, builds its lookup tables once, and answers with small frozen dataclasses,
tuples and strings (never a raw YAML dict, except ``unpublished()`` and ``cann_entry()``,
which hand back a copy of their entry, and ``cann_package()``, a read-only view).

It is split by concern, one part per module, each reading only its own data:

* `releases`     torch_npu and CANN releases, their pairings, TorchNPU's published tables (``Releases``);
* `environment`  the Python environment: torch pins, Python lines, base OSes, OS per CANN release (``Environment``);
* `drivers`      chips, products, driver (HDK) minimums, firmware (``Drivers``);
* `downloads`    where installers come from, Miniforge, uv (``Downloads``, ``Installer``);
* `ascend_errors` the error table (``error_entries``);
* `additions`    a project's own torch_npu and CANN releases (``ascend-build/knowledge.yaml``), laid over
  ``ascend-compat.yaml`` before the parts are built.

`KnowledgeBase` is the facade over them: it builds the parts and hands out their methods
under one name each (``kb.min_driver`` is the ``Drivers`` part's own bound method, so a
call through the facade makes no extra hop). Installer file names are not here: they are
`builder.installers`'s, which reads this package (never the other way round).

Lookups are lenient (``versions.lenient``): a version string that does not parse, or
that the data does not know, yields ``None`` (or ``[]``); the matrix stage reports
malformed strings with file:line. The ``ascend-build kb`` descriptions are in
``builder.cli.kb``.

Example:
    >>> kb = load()
    >>> kb.torch_npu("2.1.0.rc1").cann
    '7.0.RC1'
    >>> kb.torch_requirement("2.1.0.post3", "x86_64")
    ('torch==2.1.0+cpu', 'pytorch-cpu')
    >>> kb.paired_hdk("7.0.RC1")
    '23.0.RC3'
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Mapping, Optional, Tuple

from builder.knowledge.downloads import CannRelease, Downloads, Installer
from builder.knowledge.drivers import OTHER_PRODUCTS, Drivers, Product, chip_of_soc, chip_min_cann
from builder.knowledge.environment import CannOs, Environment, OsInfo, known_arch
from builder.knowledge import additions as team_additions
from builder.knowledge import cann_products
from builder.knowledge.ascend_errors import ERRORS_FILE, error_entries
from builder.knowledge.files import ADDITIONS_FILE, DATA_DIR, MINDCLUSTER_FILE, TABLES_FILE, read_json, read_yaml
from builder.knowledge.pairings import CannFit, CompatWindow, Releases, TorchNpu
from builder.vocabulary import CHIPS

# vocabulary.ARCHS in the order the ``kb`` commands and the release tools list them.
ARCHES: Tuple[str, ...] = ("x86_64", "aarch64")
# CHIPS (from vocabulary): the matrix's chip ids; the data also knows 310b, which ascend-build does not build for.


class KnowledgeBase:
    """The parts of the knowledge base, composed; their methods under one name each.

    Build it with :func:`load` (cached); the constructor takes already parsed documents
    so tests can feed their own.

    Example:
        >>> kb = load()
        >>> kb.min_driver("8.0.RC3"), kb.firmware_range("24.1.rc3")
        ('24.1.RC3', ('7.0.0', '7.5.99'))
        >>> kb.min_driver == kb.drivers.min_driver
        True
    """

    def __init__(
        self,
        compat: Mapping[str, Any],
        packages: Mapping[str, Any],
        os_doc: Mapping[str, Any],
        conda_doc: Mapping[str, Any],
        downloads_doc: Optional[Mapping[str, Any]] = None,
        uv_doc: Optional[Mapping[str, Any]] = None,
        tables_doc: Optional[Mapping[str, Any]] = None,
        mindcluster_doc: Optional[Mapping[str, Any]] = None,
        additions: Optional[team_additions.Additions] = None,
    ) -> None:
        self.additions = additions  # what a project's additions file brought (`compat` holds it already)
        self.releases = releases = Releases(compat, packages, tables_doc)
        self.environment = environment = Environment(releases, compat, os_doc)
        self.drivers = drivers = Drivers(releases, compat, mindcluster_doc)
        self.downloads = downloads = Downloads(releases, environment, conda_doc, downloads_doc, uv_doc)
        # releases and pairings
        self.torch_npu = releases.torch_npu
        self.torch_npu_versions = releases.torch_npu_versions
        self.unpublished = releases.unpublished
        self.torch_npu_for_cann = releases.torch_npu_for_cann
        self.cann_floor = releases.cann_floor
        self.cann_releases = releases.cann_releases
        self.canonical_cann = releases.canonical_cann
        self.cann_entry = releases.cann_entry
        self.cann_package = releases.cann_package
        self.downstream_evidence = releases.downstream_evidence
        self.pta_of = releases.pta_of
        self.compat_window = releases.compat_window
        self.cann_fit = releases.cann_fit
        self.compat_windows = releases.compat_windows
        # the Python environment
        self.torch_requirement = environment.torch_requirement
        self.cpu_torch = environment.cpu_torch
        self.image_torch = environment.image_torch
        self.glibc_floor = environment.glibc_floor
        self.python_official = environment.python_official
        self.os_info = environment.os_info
        self.os_ids = environment.os_ids
        self.os_family_name = environment.os_family_name
        self.cann_os = environment.cann_os
        self.cann_os_not_checked = environment.cann_os_not_checked
        # drivers and products
        self.chips = drivers.chips
        self.products = drivers.products
        self.product = drivers.product
        self.hdk_by_product = drivers.hdk_by_product
        self.hdk_by_product_source = drivers.hdk_by_product_source
        self.product_hdk = drivers.product_hdk
        self.chip_min_cann = drivers.chip_min_cann
        # since when CANN's release notes name a product (cann-products.yaml, parsed from the notes);
        # what downstream releases require (downstream-pins.yaml) is read by its rule when a cell pins one
        self.product_first_release = cann_products.first_release
        self.paired_hdk = drivers.paired_hdk
        self.min_driver_reason = drivers.min_driver_reason
        self.min_driver = drivers.min_driver
        self.downstream_driver = drivers.downstream_driver
        self.hdk_known = drivers.hdk_known
        self.supported_hdk_lines = drivers.supported_hdk_lines
        self.firmware_range = drivers.firmware_range
        self.firmware_ranges = drivers.firmware_ranges
        self.firmware_observed = drivers.firmware_observed
        self.paired_firmware = drivers.paired_firmware
        # installers' sources
        self.nnal_since = downloads.nnal_since
        self.torch_atb_glibc = downloads.torch_atb_glibc
        self.cann_release = downloads.cann_release
        self.cann_release_folder = downloads.cann_release_folder
        self.cann_release_folder_source = downloads.cann_release_folder_source
        self.uv_requirement = downloads.uv_requirement
        self.download_referer = downloads.download_referer
        self.conda_installer = downloads.conda_installer
        self.conda_installers = downloads.conda_installers


def load(fresh: bool = False) -> KnowledgeBase:
    """The knowledge base, read from ``builder/data`` and the project's additions file
    (``ascend-build/knowledge.yaml`` of the current folder, `additions`) once per process
    (cached; read again when that file changes, or with ``fresh``).

    Example:
        >>> load() is load()
        True
    """
    if fresh:
        _load.cache_clear()
    return _load(team_additions.stamp())


@lru_cache(maxsize=None)
def _load(stamp: Optional[Tuple[str, int, int]]) -> KnowledgeBase:
    compat = read_yaml(DATA_DIR / "ascend-compat.yaml")
    added = None
    if stamp is not None:
        compat, added = team_additions.merge(compat, team_additions.read(ADDITIONS_FILE), str(ADDITIONS_FILE))
    return KnowledgeBase(
        compat=compat,
        packages=read_json(DATA_DIR / "cann-packages.json"),
        os_doc=read_yaml(DATA_DIR / "os.yaml"),
        conda_doc=read_yaml(DATA_DIR / "conda.yaml"),
        downloads_doc=read_yaml(DATA_DIR / "cann-downloads.yaml"),
        uv_doc=read_yaml(DATA_DIR / "uv.yaml"),
        tables_doc=read_yaml(DATA_DIR / TABLES_FILE),
        mindcluster_doc=read_yaml(DATA_DIR / MINDCLUSTER_FILE),
        additions=added,
    )


__all__ = ["load", "KnowledgeBase", "TorchNpu", "CannFit", "CompatWindow", "OsInfo", "CannOs", "Product", "OTHER_PRODUCTS", "Installer", "CannRelease", "ARCHES", "CHIPS", "DATA_DIR", "ADDITIONS_FILE", "TABLES_FILE", "ERRORS_FILE",
           "error_entries", "chip_of_soc", "chip_min_cann", "known_arch"]
