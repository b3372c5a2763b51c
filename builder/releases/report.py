"""``format_check``: the human report of a ReleaseCheck (its ``to_dict`` is the ``--json`` one)."""

from __future__ import annotations

from typing import List

from builder import knowledge
from builder.releases.entries import CANN_NOTE
from builder.releases.metadata import METHOD_TEXT
from builder.releases.release_check import NewRelease, ReleaseCheck
from builder.sizes import size


def format_check(result: ReleaseCheck) -> str:
    """The human report of a check: index, counts, each new release per arch, yanked files.

    Example:
        >>> r = ReleaseCheck(index_url="http://127.0.0.1:1/simple/", project="torch-npu",
        ...                  page_url="http://127.0.0.1:1/simple/torch-npu/", api="html", api_version="1.0")
        >>> print(format_check(r).splitlines()[0])
        index: http://127.0.0.1:1/simple/torch-npu/ (PEP 503 HTML, api 1.0)
    """
    api = "PEP 691 JSON" if result.api == "json" else "PEP 503 HTML"
    out = [
        f"index: {result.page_url} ({api}, api {result.api_version or 'unstated'})",
        f"files: {result.files} ({result.wheels} Linux wheels, {len(result.skipped)} skipped); "
        f"versions: {len(result.known) + len(result.new)} ({len(result.known)} known, {len(result.new)} new); "
        f"{size(result.bytes_fetched)} fetched",
    ]
    if not result.new:
        out.append("no new torch_npu releases")
    else:
        out.append(f"new torch_npu releases ({len(result.new)}):")
        for release in result.new:
            out.extend(_format_release(release))
    if result.yanked:
        out.append(f"yanked files ({len(result.yanked)}):")
        out.extend(f"  {y.filename}" + (f": {y.reason}" if y.reason else "") for y in result.yanked)
    if result.full_downloads:
        out.append(f"downloaded whole (the server ignores Range): {', '.join(result.full_downloads)}")
    out.extend(f"warning: {w}" for w in result.warnings)
    if result.missing:
        out.append(f"{len(result.missing)} known release(s) not on this index (see --json 'missing')")
    if result.new:
        out.append("next: --write adds them to the knowledge base with cann: null; --propose drafts matrix cells")
    return "\n".join(out)


def _format_release(release: NewRelease) -> List[str]:
    e = release.entry
    flags = " (pre-release)" if e.get("prerelease") else ""
    lines = [f"  torch_npu {release.version}{flags}: torch {e['torch']}, first upload {e.get('first_upload') or 'unknown'}, "
             f"CANN unknown ({CANN_NOTE})"]
    reads = {m.arch: m for m in release.metadata}
    for arch in knowledge.ARCHES:
        if arch not in e["python"]:
            continue
        m = reads.get(arch)
        pin = (m.torch_pin or "no torch requirement") if m else "METADATA not read"
        lines.append(
            f"    {arch:<8} {pin:<18} python {', '.join(e['python'][arch])}; {e['manylinux'].get(arch, 'no manylinux tag')}"
            + (f"; Requires-Python {m.requires_python or 'unset'}; METADATA by {METHOD_TEXT[m.method]} ({size(m.bytes_fetched)})"
               if m else ""))
    return lines
