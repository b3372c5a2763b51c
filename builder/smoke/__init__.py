"""What runs INSIDE images: the smoke test, and the small readers it shares with the node.

* ``smoke.py``: the smoke program (stdlib + torch, + torch_npu when present). Every
  image carries it in ``vocabulary.TOOL_DIR`` with ``parsers.py``, ``error_table.py``,
  ``builder/versions.py``, ``builder/vocabulary.py`` and the error table as
  ``errors.json`` beside it. It reads the image's manifest, runs its tiers on ``npu``
  or ``cpu`` and prints one JSON report; the build wing ships the files and reads the
  report, and never imports ``smoke.py``.
* ``parsers.py``, ``error_table.py``: standard-library readers of Ascend's files and of
  the error table. The node wing imports them too, so a file is read the same way in
  an image and on a node.
* ``doctor_probe.py``: what ``ascend-build doctor --image`` runs in any image.
* ``driver_guard.py``: every image's ENTRYPOINT (``vocabulary.GUARD`` links to it): checks the
  node's mounted driver ``version.info`` against the image's minimum, then runs the command.
"""
