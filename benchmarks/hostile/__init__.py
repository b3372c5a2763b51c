"""Helpers of benchmarks/bench_hostile.py: the hostile-input suite run against the real CLI.

- ``fakes``: misbehaving servers on loopback (an OCI registry, a simple index, a
  'foreign host' that logs credentials) and a watch that notices a FIFO being opened.
- ``fixtures``: matrices, render trees, fake host roots, snapshots of files.
- ``runner``: one CLI run in a subprocess (timeout, RLIMIT_AS, own session) and the
  output checks every input shares.
- ``inputs``: the inputs, class by class, each with its expected exit codes and checks.

Nothing here talks to anything but 127.0.0.1 and the documentation address 192.0.2.2.
"""
