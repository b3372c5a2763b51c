"""The release watcher's CANN side: what Ascend's own publications name that the knowledge
base lacks, proposed with its source, never written into the knowledge base.

Three publications are read:

- Ascend/pytorch's compatibility table (``COMPATIBILITY.en.md``): rows of torch_npu,
  PyTorch and CANN. A CANN release the knowledge base does not know, a torch_npu it does
  not know, and a torch_npu whose CANN pairing it lacks or holds otherwise are proposed.
- The official CANN images' build matrix (``build_cann_arg.json`` of
  Ascend/cann-container-image): its image tags ``<cann>-<chip>-<os><ver>-py<X.Y>``. A CANN
  release, chip or OS the knowledge base does not know is proposed. That file holds only the
  batch its commit builds (at c5a67b3a, 30 tags, all CANN 9.0.1), so a listing of the
  repository's image folders (``cann/<tag>/Dockerfile``, one path per line) is read the same
  way: it names every release ever built.
- The release notes repository (cann/release-management): a listing of its files, one path
  per line (``9.1.1/release-notes.md``). Every CANN release has a folder there, also those
  no torch_npu row and no official image names (9.1.1, 9.2.0-beta.1, which the first two
  sources never showed the watcher).

`propose` returns the proposal as a mapping (``to_yaml`` prints it): a human reads the
sources and edits ``builder/data/ascend-compat.yaml``; the watch workflow opens a pull
request with the proposal file, nothing more.

Example:
    >>> rows = table_rows("| 2.99.0 | Python3.10.x | 2.99.0 | CANN 99.0.0 | ... |")
    >>> rows
    [('2.99.0', '2.99.0', '99.0.0')]
    >>> from builder import knowledge
    >>> propose(knowledge.load(), rows, [], "table.md", "")["cann_releases"]
    [{'version': '99.0.0', 'named_by': ['table.md: torch_npu 2.99.0']}]
"""

from __future__ import annotations

import re
from typing import Dict, List, Sequence, Tuple

import yaml

from builder import bounded, documents, versions
from builder.errors import UserError
from builder.vocabulary import CHIPS

# | torch_npu [(beta)] | Python ... | PyTorch | CANN X | ... (the table's column order)
_ROW = re.compile(r"^\|\s*(\d[\w.]*)(?: \(beta\))?\s*\|\s*[^|]+\|\s*([\d.]+)\s*\|\s*CANN ([\w.-]+)\s*\|", re.M | re.ASCII)
_TAG = re.compile(r"^(?P<cann>\d[\w.-]*?)-(?P<chip>[A-Za-z0-9-]+?)-(?P<os>[a-z]+)(?P<osver>\d[\d.]*)-py(?P<py>\d\.\d+)"
                  r"(?:-devel)?$", re.ASCII)
# cann/<tag>/Dockerfile in a listing of the images repository
_IMAGE_DIR = re.compile(r"^\s*(?:\./)?cann/(?P<tag>[^/\s]+)/Dockerfile\s*$", re.M | re.ASCII)
# <version>/release-notes.md (release-note.md, release-notes_en.md) in a listing of the release notes repository
_NOTES = re.compile(r"^\s*(?:\./)?(?P<version>\d+\.\d+\.[0-9A-Za-z.-]+)/release-notes?(?:_en)?\.md\s*$", re.M | re.ASCII)


def table_rows(text: str) -> List[Tuple[str, str, str]]:
    """(torch_npu, PyTorch, CANN) of every row of the compatibility table, as it spells them."""
    return _ROW.findall(text)


def release_notes(text: str) -> List[str]:
    """Every release with a folder in a listing of the release notes repository.

    Example:
        >>> release_notes("README.md\\n9.1.0-beta.1/release-note.md\\n9.1.1/release-notes.md\\n9.1.1/release-plan.md\\n")
        ['9.1.0-beta.1', '9.1.1']
    """
    return sorted({m["version"] for m in _NOTES.finditer(text)}, key=lambda v: (versions.lenient("cann", v) is None, v))


def image_tags(text: str, where: str) -> List[Dict[str, str]]:
    """cann, chip, os, python of every image tag in the build matrix (``{"cann": [{"tags": [...]}]}``),
    or in a listing of the images repository's Dockerfiles (``cann/<tag>/Dockerfile`` per line).

    Example:
        >>> [t["cann"] for t in image_tags("cann/9.1.0-beta.3-910b-ubuntu22.04-py3.11-devel/Dockerfile\\n", "ls")]
        ['9.1.0-beta.3']
    """
    if not text.lstrip().startswith("{") and _IMAGE_DIR.search(text):
        return _tags([m["tag"] for m in _IMAGE_DIR.finditer(text)])
    doc = documents.load_json(text, where, exit_code=1)
    try:
        items = doc["cann"]
        tags = [t for item in items for t in item["tags"]]
    except (ValueError, KeyError, TypeError):
        raise UserError(f"{where} is not the image build matrix ({{\"cann\": [{{\"tags\": [...]}}]}})",
                        fix="pass the build_cann_arg.json of Ascend/cann-container-image", exit_code=1) from None
    return _tags(tags)


def _tags(tags: Sequence[object]) -> List[Dict[str, str]]:
    out = []
    for tag in tags:
        match = _TAG.match(str(tag))
        if match:
            out.append({"cann": match["cann"], "chip": match["chip"].lower(), "os": match["os"] + match["osver"],
                        "python": match["py"], "tag": str(tag)})
    return out


def read(source: str, timeout: float = 60.0) -> str:
    """The text at ``source``: an http(s) URL (read within a size limit and a deadline) or a file."""
    if source.startswith(("http://", "https://")):
        from builder.releases.http_client import Http

        return Http(timeout).get(source)[2].decode("utf-8", errors="replace")
    try:
        return bounded.read_file(source, 64 << 20).decode("utf-8", errors="replace")
    except OSError as exc:
        raise UserError(f"{source}: cannot be read ({exc.strerror or exc})",
                        fix="pass a URL or an existing file", exit_code=1) from None


def _known(kb, cann: str) -> bool:
    wanted = versions.lenient("cann", cann)
    return wanted is not None and any(versions.lenient("cann", k) == wanted for k in kb.releases.cann_releases())


def propose(kb, rows: Sequence[Tuple[str, str, str]], tags: Sequence[Dict[str, str]],
            table_source: str, images_source: str, notes: Sequence[str] = (),
            notes_source: str = "") -> Dict[str, List[Dict]]:
    """What the publications name and the knowledge base lacks, each with where it was read."""
    releases: Dict[str, List[str]] = {}
    for cann in notes:
        if not _known(kb, cann):
            releases.setdefault(cann, []).append(f"{notes_source}: {cann}/")
    unknown_npu, pairings = [], []
    oldest = versions.cann(kb.releases.cann_releases()[0])  # the knowledge base's scope begins there
    for npu, torch, cann in rows:
        parsed = versions.lenient("cann", cann)
        if parsed is not None and parsed < oldest:
            continue
        if not _known(kb, cann):
            releases.setdefault(cann, []).append(f"{table_source}: torch_npu {npu}")
        release = kb.releases.torch_npu(npu)
        if release is None:
            if not kb.releases.unpublished(npu):
                unknown_npu.append({"torch_npu": npu, "torch": torch, "cann": cann, "source": table_source})
        elif release.cann is None or versions.lenient("cann", release.cann) != versions.lenient("cann", cann):
            pairings.append({"torch_npu": npu, "cann": cann, "knowledge_base": release.cann, "source": table_source})
    chips: Dict[str, str] = {}
    systems: Dict[str, str] = {}
    for tag in tags:
        if not _known(kb, tag["cann"]):
            releases.setdefault(tag["cann"], []).append(f"{images_source}: {tag['tag']}")
        if tag["chip"] not in CHIPS:
            chips.setdefault(tag["chip"], f"{images_source}: {tag['tag']}")
        if kb.environment.os_info(tag["os"]) is None:
            systems.setdefault(tag["os"], f"{images_source}: {tag['tag']}")
    return {
        "cann_releases": [{"version": v, "named_by": sorted(set(by))[:5]} for v, by in sorted(releases.items(), key=_order)],
        "torch_npu_unknown": unknown_npu,
        "torch_npu_pairings": pairings,
        "chips": [{"chip": c, "named_by": by} for c, by in chips.items()],
        "os": [{"os": o, "named_by": by} for o, by in systems.items()],
    }


def _order(item):
    parsed = versions.lenient("cann", item[0])
    return (parsed is None, parsed or versions.cann("0.0.0"), item[0])


def to_yaml(proposal: Dict[str, List[Dict]]) -> str:
    """The proposal as the file a reviewer reads (empty sections left out)."""
    kept = {k: v for k, v in proposal.items() if v}
    head = ("# Proposed by `ascend-build releases cann`: what Ascend's publications name and the knowledge\n"
            "# base lacks. Nothing here is applied: check each source, then edit builder/data/ascend-compat.yaml.\n")
    return head + (yaml.safe_dump(kept, sort_keys=False, allow_unicode=True) if kept else "{}  # nothing new\n")
