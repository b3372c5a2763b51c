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

`KnowledgeBase` is the facade over them: it loads the data, builds the parts and holds them;
a caller asks the part it needs (``kb.drivers.min_driver``), so each call site names the
part, and the module, it reads. Installer file names are not here: they are
`builder.installers`'s, which reads this package (never the other way round).

Lookups are lenient (``versions.lenient``): a version string that does not parse, or
that the data does not know, yields ``None`` (or ``[]``); the matrix stage reports
malformed strings with file:line. The ``ascend-build kb`` descriptions are in
``builder.cli.kb``.

Example:
    >>> kb = load()
    >>> kb.releases.torch_npu("2.1.0.rc1").cann
    '7.0.RC1'
    >>> kb.environment.torch_requirement("2.1.0.post3", "x86_64")
    ('torch==2.1.0+cpu', 'pytorch-cpu')
    >>> kb.drivers.paired_hdk("7.0.RC1")
    '23.0.RC3'
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Mapping, Optional, Tuple

from builder.knowledge.downloads import CannRelease, Downloads, Installer
from builder.knowledge.drivers import OTHER_PRODUCTS, Drivers, Product, chip_of_soc, chip_min_cann
from builder.knowledge.environment import CannOs, Environment, OsInfo, known_arch
from builder.knowledge import additions as team_additions
from builder.knowledge.ascend_errors import ERRORS_FILE, error_entries
from builder.knowledge.files import ADDITIONS_FILE, DATA_DIR, MINDCLUSTER_FILE, TABLES_FILE, read_json, read_yaml
from builder.knowledge.pairings import CannFit, CompatWindow, Releases, TorchNpu
from builder.vocabulary import CHIPS

# vocabulary.ARCHS in the order the ``kb`` commands and the release tools list them.
ARCHES: Tuple[str, ...] = ("x86_64", "aarch64")
# CHIPS (from vocabulary): the matrix's chip ids; the data also knows 310b, which ascend-build does not build for.


class KnowledgeBase:
    """The parts of the knowledge base, composed: ``releases``, ``environment``, ``drivers``,
    ``downloads``, and ``additions`` (what a project's additions file brought, or None).

    A caller asks the part that answers (``kb.drivers.min_driver(...)``): the facade hands out
    no method of its own, so which part a module reads shows at each call
    (tests/test_knowledge.py holds that rule).

    Build it with :func:`load` (cached); the constructor takes already parsed documents
    so tests can feed their own.

    Example:
        >>> kb = load()
        >>> kb.drivers.min_driver("8.0.RC3"), kb.drivers.firmware_range("24.1.rc3")
        ('24.1.RC3', ('7.0.0', '7.5.99'))
        >>> sorted(vars(kb))
        ['additions', 'downloads', 'drivers', 'environment', 'releases']
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
        self.drivers = Drivers(releases, compat, mindcluster_doc)
        self.downloads = Downloads(releases, environment, conda_doc, downloads_doc, uv_doc)


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
