"""The knowledge-base commands: ``kb torch-npu VERSION`` and ``kb cann [VERSION]``.

``describe_torch_npu`` and ``describe_cann`` gather what the knowledge base knows of one
release into plain data (dicts, lists, strings) that the commands print, as text or as
JSON. They ask the knowledge base's parts (``kb.releases``, ``kb.drivers``, ...) through their
public names only, and raise UserError (exit code 1) for a release the data does not know.

Example:
    >>> from builder.knowledge import load
    >>> describe_torch_npu(load(), "2.4.0")["torch"]["x86_64"]
    {'requirement': 'torch==2.4.0+cpu', 'index': 'pytorch-cpu'}
    >>> describe_cann(load(), "7.0.RC1")["paired_hdk"]
    '23.0.RC3'
    >>> _print({"version": "7.0.RC1", "sources": ["A", "B"], "supported_hdk": []}, as_json=False)
    version: 7.0.RC1
    sources: A, B
    supported_hdk: -
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

import typer

from builder import knowledge, python_env, versions
from builder.installers import KINDS as installer_kinds
from builder.installers import cann_installers
from builder.cli.app import JsonOpt, kb_app
from builder.errors import UserError
from builder.knowledge import ARCHES, CHIPS, KnowledgeBase
from builder.releases import published


@kb_app.callback(invoke_without_command=True)
def kb_overview_command(ctx: typer.Context, as_json: bool = JsonOpt) -> None:
    """Query the knowledge base of Ascend releases; alone, list what it knows (CANN, torch_npu, chips).

    Example: ascend-build kb
    """
    if ctx.invoked_subcommand is None:
        _print(describe_knowledge(knowledge.load()), as_json)


@kb_app.command("torch-npu")
def kb_torch_npu_command(version: str = typer.Argument(..., help="torch_npu version, e.g. 2.4.0"), as_json: bool = JsonOpt) -> None:
    """What the knowledge base knows of a torch_npu release.

    Example: ascend-build kb torch-npu 2.4.0
    """
    _print(describe_torch_npu(knowledge.load(), version), as_json)


@kb_app.command("cann")
def kb_cann_command(version: Optional[str] = typer.Argument(None, help="CANN version, e.g. 8.0.RC3; none lists all"),
            as_json: bool = JsonOpt) -> None:
    """What the knowledge base knows of a CANN release (or the list of releases).

    Example: ascend-build kb cann 7.0.RC1
    """
    kb = knowledge.load()
    _print(describe_cann(kb, version) if version else {"cann_releases": kb.releases.cann_releases()}, as_json)


def _listed(value: Any) -> List[str]:
    """A data field that holds one string or a list of them, as a list."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [str(value)]


def describe_knowledge(kb: KnowledgeBase) -> Dict[str, Any]:
    """What ``ascend-build kb`` lists: every CANN and torch_npu release it knows, the chips, the products
    a cell may name (and the releases that number their HDK per product), which data files are parsed
    from kept documents and which are kept by hand, where to look next, and what the project's
    additions file brought (when the folder has one).

    Example:
        >>> from builder.knowledge import load
        >>> d = describe_knowledge(load())
        >>> "8.0.RC3" in d["cann_releases"], "2.4.0" in d["torch_npu_releases"], d["chips"][2]
        (True, True, {'chip': 'a3', 'first_cann': '8.1.RC1'})
        >>> d["products"][0]
        {'product': 'atlas-950-superpod', 'chip': '950', 'name': 'Atlas 950 SuperPoD', 'hdk_per_product_in': '9.0.0, 9.1.0'}
    """
    described: Dict[str, Any] = {
        "cann_releases": kb.releases.cann_releases(),
        "torch_npu_releases": kb.releases.torch_npu_versions(),
        "chips": [{"chip": chip, "first_cann": kb.drivers.chip_min_cann(chip)} for chip in kb.drivers.chips()],
        "products": [{"product": p.id, "chip": p.chip, "name": p.name,
                      "hdk_per_product_in": ", ".join(c for c in kb.releases.cann_releases() if kb.drivers.product_hdk(c, p.id)) or None}
                     for p in kb.drivers.products()],
        "arches": list(ARCHES),
        "facts": published.facts(),
        "more": ["ascend-build kb cann VERSION", "ascend-build kb torch-npu VERSION"],
    }
    if kb.additions is not None:  # the project's own releases, read on top (builder/knowledge/additions.py)
        described["additions"] = {"file": kb.additions.path, "torch_npu_releases": list(kb.additions.torch_npu),
                                  "cann_releases": list(kb.additions.cann),
                                  "superseded (the package knows them: delete these entries)":
                                      list(kb.additions.superseded)}
    return described


def describe_torch_npu(kb: KnowledgeBase, version: str) -> Dict[str, Any]:
    """Everything known about one torch_npu version, as plain data for ``ascend-build kb torch-npu``.

    Raises UserError (exit code 1) when the version is neither on PyPI nor named by Huawei.

    Example:
        >>> from builder.knowledge import load
        >>> d = describe_torch_npu(load(), "2.1.0.post4")
        >>> d["on_pypi"], d["cann"]
        (False, '8.0.RC1')
    """
    rel = kb.releases.torch_npu(version)
    if rel is None:
        entry = kb.releases.unpublished(version)
        if entry is not None:
            return {
                "version": str(entry["version"]),
                "on_pypi": False,
                "note": "named in Huawei tables or tags, but PyPI has no files for it",
                "cann": entry.get("cann"),
                "entry": entry,
                "sources": _listed(entry.get("source")),
            }
        raise UserError(
            f"torch_npu {version} is not a known release: PyPI has no files for it",
            fix=_nearby_hint(kb, version),
            exit_code=1,
        )
    return {
        "version": rel.version,
        "on_pypi": True,
        "prerelease": rel.prerelease,
        "torch": {a: dict(zip(("requirement", "index"), kb.environment.torch_requirement(rel.version, a))) for a in ARCHES},
        "torch_cpu_build": {a: dict(zip(("requirement", "index"), kb.environment.cpu_torch(rel.torch, a))) for a in ARCHES},
        "requires_dist": dict(rel.requires_dist),
        "cann": rel.cann,
        "cann_sources": list(rel.cann_sources),
        "cann_at_least": (lambda f: f"{f[0]} (inferred from torch_npu {f[1]})" if f else None)(kb.releases.cann_floor(rel.version)),
        "pta": kb.releases.pta_of(rel.version),
        "cann_tables": _table_rows(kb, rel.version),
        "python": {a: list(rel.python.get(a, ())) for a in ARCHES},
        "manylinux": dict(rel.manylinux),
        "glibc_floor": {a: ".".join(map(str, g)) for a in ARCHES if (g := kb.environment.glibc_floor(rel.version, a))},
        "branch": rel.branch,
        "first_upload": rel.first_upload,
        "notes": list(rel.notes),
        "sources": list(rel.sources),
    }


def _table_rows(kb: KnowledgeBase, torch_npu: str) -> List[Dict[str, Any]]:
    """Every published table row that speaks of the release's PTA (TorchNPU) release, newest
    document first: the CANN releases it marks compatible, those it leaves out, and where it is;
    then the hand-kept windows that name that PTA.

    Example:
        >>> from builder.knowledge import load
        >>> rows = _table_rows(load(), "2.9.0")
        >>> rows[0]["pta"], rows[0]["compatible"], rows[0]["source"]
        ('7.3.X', '8.5.X, 9.0.X, 9.1.X', 'Ascend/pytorch@v26.2.0-beta.1-pytorch2.13.0:docs/zh/release_notes.md, line 75')
        >>> _table_rows(load(), "2.13.0")
        []
    """
    pta = kb.releases.pta_of(torch_npu)
    if pta is None:
        return []
    rows = [{"pta": r.pta, "compatible": ", ".join(r.compatible) or "-",
             "not_compatible": ", ".join(c for c, ok in r.cann if not ok) or "-", "source": r.where}
            for r in reversed(kb.releases.tables.covering(pta))]
    return rows + [{"pta": w.pta_text, "compatible": w.cann_text, "not_compatible": "-", "source": ", ".join(w.sources)}
                   for w in kb.releases.compat_windows() if pta in w.pta]


def _nearby_hint(kb: KnowledgeBase, version: str) -> str:
    """The fix for an unknown torch_npu: the PyPI releases on the same torch line.

    Example:
        >>> from builder.knowledge import load
        >>> _nearby_hint(load(), "2.1.0.post5")  # doctest: +ELLIPSIS
        'releases of torch_npu on torch 2.1.0: 2.1.0rc1, 2.1.0, 2.1.0.post3, ..., 2.1.0.post17'
    """
    wanted = versions.lenient("python_package", version)
    if wanted is None:
        return "write a torch_npu version like 2.4.0 or 2.1.0.post3"
    line = wanted.base_version
    same = [v for v in kb.releases.torch_npu_versions() if versions.python_package(v).base_version == line]
    if same:
        return f"releases of torch_npu on torch {line}: {', '.join(same)}"
    return f"the newest releases are {', '.join(kb.releases.torch_npu_versions()[-4:])}; `ascend-build kb` lists them all"


def _installer_rows(kb: KnowledgeBase, version: str, arch: str) -> List[Dict[str, Any]]:
    """The toolkit once, then every chip's ops package, then NNAL once (when published), for one arch."""
    rows: List[Dict[str, Any]] = []
    for chip in CHIPS:
        for inst in cann_installers(kb, version, chip, arch, nnal=True):
            if inst.kind != "ops" and any(row["kind"] == inst.kind for row in rows):
                continue
            rows.append({"kind": inst.kind, "chip": chip if inst.kind == "ops" else None,
                         "filename": inst.filename, "run": inst.run, "sha256": inst.sha256, "url": inst.url})
    return sorted(rows, key=lambda row: installer_kinds.index(row["kind"]))


def describe_cann(kb: KnowledgeBase, version: str) -> Dict[str, Any]:
    """Everything known about one CANN release, as plain data for ``ascend-build kb cann``.

    Raises VersionError for a string that is no CANN version, UserError (exit code 1)
    when the data does not know that release.

    Example:
        >>> from builder.knowledge import load
        >>> d = describe_cann(load(), "7.0.RC1")
        >>> d["min_driver"], d["torch_npu"], [row["kind"] for row in d["installers"]["x86_64"]][:2]
        ('23.0.RC3', ['2.1.0rc1'], ['toolkit', 'ops'])
        >>> describe_cann(load(), "8.5.0")["python"]["supported"], describe_cann(load(), "7.0.RC1")["python"]["supported"]
        ('3.7 to 3.13', 'not checked')
    """
    entry = kb.releases.cann_entry(version)
    package = kb.releases.cann_package(version)
    if entry is None and package is None:
        if versions.lenient("cann", version) is None:
            raise versions.VersionError(f"{version!r} is not a CANN version", fix="write it like 8.0.RC3 or 8.5.0")
        raise UserError(
            f"CANN {version} is not in the knowledge base",
            fix="known releases: " + ", ".join(kb.releases.cann_releases()),
            exit_code=1,
        )
    return {
        "version": (entry or {}).get("version") or (package[0] if package else version),
        "paired_hdk": kb.drivers.paired_hdk(version),
        "min_driver": kb.drivers.min_driver(version),
        "min_driver_because": kb.drivers.min_driver_reason(version)[1],
        "hdk_by_product": _product_rows(kb, version),
        "hdk_by_product_source": kb.drivers.hdk_by_product_source(version) or None,
        "supported_hdk": list(kb.drivers.supported_hdk_lines(version)),
        "not_supported_hdk": _listed((entry or {}).get("not_supported_hdk")),
        "torch_npu": [r.version for r in kb.releases.torch_npu_for_cann(version)],
        "compatible_pta": _compatible_pta(kb, version),
        "python": _python_rows(version),
        "os": _os_rows(kb, version),
        "python_limits": [c.requirement + (f" (on {c.python})" if c.python else "")
                          for c in python_env.release_constraints(version)],
        "download_folder": kb.downloads.cann_release_folder(version),
        "download_folder_source": kb.downloads.cann_release_folder_source(version) or None,
        "installers": {a: _installer_rows(kb, version, a) for a in ARCHES},
        "sources": _listed((entry or {}).get("source")),
    }


def _product_rows(kb: KnowledgeBase, cann: str) -> List[Dict[str, Any]]:
    """The release's HDK per product, where it numbers it apart: the HDK its table pairs with each
    product, and the minimum driver validate takes for a cell of that product (``product:``); the
    other products keep the CANN's own minimum. [] when the release has no such table.

    Example:
        >>> from builder.knowledge import load
        >>> [(r["product"], r["paired_hdk"], r["min_driver"]) for r in _product_rows(load(), "9.1.0")][::3]
        [('atlas-950-superpod', '25.1.RC1', '25.1.RC1'), ('other_products', '26.1.0', '25.2.RC1')]
    """
    rows: List[Dict[str, Any]] = []
    for product_id, hdk in kb.drivers.hdk_by_product(cann):
        product = kb.drivers.product(product_id)
        rows.append({"product": product_id, "chip": product.chip if product else None,
                     "name": product.name if product else "every product the table does not name",
                     "paired_hdk": hdk, "min_driver": kb.drivers.min_driver(cann, product_id if product else "")})
    return rows


def _compatible_pta(kb: KnowledgeBase, cann: str) -> List[Dict[str, Any]]:
    """The PTA releases a published table row or a hand-kept window marks compatible with that
    CANN, each with where it is (newest document first).

    Example:
        >>> from builder.knowledge import load
        >>> [row["pta"] for row in _compatible_pta(load(), "9.0.0")][:3]
        ['26.1.X', '26.0.X', '7.3.X']
    """
    rows = [{"pta": r.pta, "source": r.where} for r in reversed(kb.releases.tables.rows) if r.column(cann)]
    return rows + [{"pta": w.pta_text, "source": ", ".join(w.sources)} for w in kb.releases.compat_windows() if w.covers(cann)]


def _os_rows(kb: KnowledgeBase, version: str) -> Optional[Dict[str, Any]]:
    """The OS families the release's installation guide names, and its page; "not checked" with
    why where the knowledge base holds no such page; None for a release it does not know.

    Example:
        >>> from builder.knowledge import load
        >>> _os_rows(load(), "9.0.0")["named"][:3], _os_rows(load(), "8.1.RC1")["named"]
        (['openEuler', 'Ubuntu', 'veLinux'], 'not checked')
    """
    stated = kb.environment.cann_os(version)
    if stated is None:
        why = kb.environment.cann_os_not_checked(version)
        return {"named": "not checked", "why": why} if why else None
    rows: Dict[str, Any] = {"named": list(stated.os), "source": stated.source}
    if not stated.complete:
        rows["complete"] = "no: read in part, a family missing from it is not checked"
    return rows


def _python_rows(version: str) -> Optional[Dict[str, Any]]:
    """The Python range of the release's installation guide, its source, and any Python
    outside it that is shipped all the same; None when the knowledge base holds no guide."""
    stated = python_env.python_range(version)
    if stated is None:
        why = python_env.python_not_checked(version)
        return {"supported": "not checked", "why": why} if why else None
    rows: Dict[str, Any] = {"supported": stated.text, "source": stated.source}
    if stated.nnal:
        rows["nnal"] = " or ".join(stated.nnal)
        rows["nnal_source"] = stated.nnal_source
    rows.update({f"also shipped on {py}": evidence for py, evidence in stated.shipped.items()})
    return rows


def _print(data: dict, as_json: bool) -> None:
    """``data`` as JSON, or as text: a line per field, long lists wrapped, rows (lists of dicts) as tables."""
    typer.echo(json.dumps(data, indent=2, default=str) if as_json else format_data(data))


# Columns a row shows in text (the rest, e.g. an installer's URL, is in --json); a sha256 is cut.
_HIDDEN = ("url", "run")
_SHA_SHOWN = 16
WIDTH = 100


def format_data(data: Dict[str, Any]) -> str:
    """Text for ``kb``: ``key: value`` lines, lists wrapped at ``WIDTH``, lists of dicts as tables.

    Example:
        >>> print(format_data({"version": "8.0.RC3", "installers": {"x86_64": [
        ...     {"kind": "toolkit", "chip": None, "filename": "t.zip", "sha256": "ab" * 32, "url": "u"}]}}))
        version: 8.0.RC3
        installers (x86_64):
          kind     chip  filename  sha256
          toolkit  -     t.zip     abababababababab...
        (--json shows the full sha256 and the download URLs)
    """
    lines: List[str] = []
    hidden = False
    for key, value in data.items():
        if _rows(value):
            lines += [f"{key}:"] + _table(value)
            hidden = hidden or any(k in row for row in value for k in _HIDDEN + ("sha256",))
        elif isinstance(value, dict) and value and all(_rows(v) or v == [] for v in value.values()):
            for sub, rows in value.items():
                lines += [f"{key} ({sub}):"] + (_table(rows) if rows else ["  -"])
                hidden = hidden or any(k in row for row in rows for k in _HIDDEN + ("sha256",))
        elif isinstance(value, dict):
            lines.append(f"{key}:")
            lines += [_wrapped(f"  {sub}: ", _flat(item)) for sub, item in value.items()]
        else:
            lines.append(_wrapped(f"{key}: ", _flat(value)))
    if hidden:
        lines.append("(--json shows the full sha256 and the download URLs)")
    return "\n".join(lines)


def _rows(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _cell(key: str, value: Any) -> str:
    text = "-" if value is None else _flat(value)
    return text[:_SHA_SHOWN] + "..." if key == "sha256" and len(text) > _SHA_SHOWN else text


def _table(rows: List[Dict[str, Any]]) -> List[str]:
    """Rows as aligned columns (indented two spaces), the hidden columns left out."""
    columns = [k for k in rows[0] if k not in _HIDDEN]
    cells = [[_cell(k, row.get(k)) for k in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    out = ["  " + "  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip()]
    out += ["  " + "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in cells]
    return out


def _wrapped(head: str, text: str) -> str:
    import textwrap

    if len(head) + len(text) <= WIDTH:
        return head + text
    return textwrap.fill(text, width=WIDTH, initial_indent=head, subsequent_indent=" " * min(len(head), 4),
                         break_on_hyphens=False, break_long_words=False)


def _flat(value) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(_flat(v) for v in value) or "-"
    if isinstance(value, dict):
        return "; ".join(f"{k}={_flat(v)}" for k, v in value.items())
    return "unknown" if value is None else str(value)
