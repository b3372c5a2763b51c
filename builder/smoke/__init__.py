"""The smoke test that runs INSIDE every built image.

`smoke.py` is a standalone program (stdlib + torch, + torch_npu when present) that
the templates copy to `/opt/ascend-build/smoke.py`, next to a copy of
`builder/versions.py`. It reads `/etc/ascend-build/manifest.json`, runs its tiers
(versions, libraries, import, device, train, collective) on `npu` or `cpu`, and
prints one JSON report. Nothing in this package is imported by the builder at run
time; the builder only ships the file and reads the report.
"""

import os

SMOKE_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "smoke.py")
