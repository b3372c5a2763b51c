#!/usr/bin/env python3
"""The driver guard: every image's ENTRYPOINT. Checks the node's NPU driver, then runs the command.

Why: like ``NVIDIA_REQUIRE_CUDA``, an image must refuse an older driver whoever starts it:
``docker run IMAGE CMD`` (ENTRYPOINT + CMD), ``ascend-build run``, or a Kubernetes Pod whose
``command:`` (which replaces the ENTRYPOINT) is written as ``[GUARD, *CMD]``. The image
states what it needs in its environment (``ASCEND_REQUIRE_DRIVER``, ``ASCEND_REQUIRE_FIRMWARE``,
the same values as its ``min-driver``/``min-firmware`` labels); the node's versions come from
the files the device plugin or ``ascend-build run`` mounts (``/usr/local/Ascend/driver/version.info``
and, when mounted, ``.../firmware/version.info``), read with the smoke program's parsers and
ordered by ``versions.py``, the same rule as ``pull`` and ``run``.

What it does, in order (``decide``):

- ``ASCEND_DRIVER_GUARD=off-unsafe``: runs the command, saying on stderr that nothing was checked.
- No requirement stated (the variable unset or empty): runs the command, silently.
- No ``driver/version.info`` (a CPU twin, a build step, ``docker run IMAGE python`` on a laptop):
  runs the command, with one line on stderr that no driver was found. Refusing would break
  every use of an image off an NPU node; an NPU program then fails on its own, at its first
  device call.
- A ``version.info`` of what the image states a minimum for (the driver's; the firmware's when
  it is mounted) that cannot be read, or gives no version: refuses (the driver is there but
  broken, or mounted wrong). One the image states no minimum for is not read at all.
- A driver (or a mounted firmware) below the requirement: refuses, naming both versions,
  with the cause and fix of the error table's entry (``errors.json`` beside it: the one
  ``ascend-build explain`` uses, which also explains this refusal from a Pod's log).
- Otherwise: ``exec`` of the command, silently (same PID, same environment).

A refusal exits with ``REFUSED`` (78, sysexits' EX_CONFIG): not the command's own code, and not
126/127, which shells use for "cannot execute" and "not found".

Shipped into every image beside the smoke program in ``vocabulary.TOOL_DIR``, with the link
``/usr/local/bin/ascend-driver-guard`` (``vocabulary.GUARD``) to it; it imports the files beside it. Standard library
only, Python 3.8+: it runs under the image's ``python3``.

Example:
    >>> decide({"ASCEND_REQUIRE_DRIVER": "25.0.RC1"}, "Version=24.1.rc3\\n", None, ()).run
    False
    >>> decide({"ASCEND_REQUIRE_DRIVER": "25.0.RC1"}, "Version=25.0.rc1.1\\n", None, ())
    Decision(run=True, lines=[])
"""
import os
import sys
from collections import namedtuple

try:  # from the repository (tests, `ascend-build`): the package's modules
    from builder import versions, vocabulary
    from builder.smoke import error_table, parsers
except ImportError:  # in an image: the files beside this one (vocabulary.GUARD is a link to it)
    sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
    import error_table  # type: ignore[import-not-found,no-redef]  # found on sys.path only in an image
    import parsers  # type: ignore[import-not-found,no-redef]
    import versions  # type: ignore[import-not-found,no-redef]
    import vocabulary  # type: ignore[import-not-found,no-redef]

NAME = "ascend-driver-guard"
REFUSED = 78
MAX_READ = 64 * 1024  # a version.info is a few hundred bytes

Decision = namedtuple("Decision", "run lines")
KIND = {"driver": "hdk", "firmware": "firmware"}  # versions.py's name of each


def _refusal(what, need, have, path, table, values):
    """The lines of a refusal: what, then cause and fix from the first table entry the first line matches."""
    first = "%s: refused: this image needs NPU %s %s or newer; %s says %s" % (NAME, what, need, path, have)
    lines = [first]
    found = error_table.find(table, first)
    if found:
        entry = found[0][0]
        lines += ["  cause: " + entry.cause, "  fix: " + error_table.fill(entry.fix, values, "unknown")]
    else:  # no errors.json (an image built before the guard's entry): still say what to do
        lines.append("  fix: upgrade the node's NPU driver and firmware to at least %s, or use an image "
                     "built for the node's driver" % need)
    lines.append("  to start it anyway (unsafe): %s=%s" % (vocabulary.GUARD_ENV, vocabulary.GUARD_OFF))
    return lines


def _version(text, path, kind):
    """(version text, None) from a version.info's text, or (None, why it gives none)."""
    raw = parsers.info_version(text)
    if raw is None:
        return None, "%s has no Version= line" % path
    if versions.lenient(kind, raw) is None:
        return None, "%s says Version=%s, which is no %s version" % (path, raw[:40], kind)
    return raw, None


def decide(environ, driver_text, firmware_text, table):
    """Whether to run the command, and the lines to print on stderr first.

    Parameters:
        environ: the environment (``ASCEND_REQUIRE_DRIVER``, ``ASCEND_REQUIRE_FIRMWARE``,
            ``ASCEND_DRIVER_GUARD``).
        driver_text: the text of the mounted driver ``version.info``; None when there is none,
            ``False`` when it is there but cannot be read.
        firmware_text: the same for the firmware's ``version.info``.
        table: the compiled error table (``error_table.compile_table``), () for none.

    Examples:
        >>> env = {"ASCEND_REQUIRE_DRIVER": "25.0.X"}
        >>> decide(env, None, None, ()).lines[0][:60]
        'ascend-driver-guard: no NPU driver found (no /usr/local/Asce'
        >>> decide(dict(env, ASCEND_DRIVER_GUARD="off-unsafe"), "Version=23.0.0", None, ()).run
        True
        >>> decide(env, False, None, ()).run
        False
        >>> decide(env, "Version=25.0.1", "not a version.info", ()).run  # no firmware minimum: not read
        True
    """
    need = {"driver": (environ.get(vocabulary.REQUIRE_DRIVER_ENV) or "").strip(),
            "firmware": (environ.get(vocabulary.REQUIRE_FIRMWARE_ENV) or "").strip()}
    switch = (environ.get(vocabulary.GUARD_ENV) or "").strip()
    if switch == vocabulary.GUARD_OFF:
        return Decision(True, ["%s: %s=%s: the NPU driver is NOT checked (this image needs %s or newer)"
                               % (NAME, vocabulary.GUARD_ENV, switch, need["driver"] or "no stated driver")])
    notes = []
    if switch:
        notes.append("%s: %s=%s is not understood: only %s turns the check off; checking"
                     % (NAME, vocabulary.GUARD_ENV, switch, vocabulary.GUARD_OFF))
    if not any(need.values()):
        return Decision(True, notes)
    for what, variable in (("driver", vocabulary.REQUIRE_DRIVER_ENV), ("firmware", vocabulary.REQUIRE_FIRMWARE_ENV)):
        if need[what] and versions.minimum(KIND[what], need[what]) is None:
            return Decision(False, notes + ["%s: refused: %s=%s is no %s version (the image is broken: rebuild it)"
                                            % (NAME, variable, need[what], what)])
    if driver_text is None:
        return Decision(True, notes + ["%s: no NPU driver found (no %s): running without the driver check; "
                                       "this image needs driver %s or newer on an NPU node"
                                       % (NAME, parsers.DRIVER_INFO, need["driver"] or "(any)")])
    # only what the image states a minimum for is read: a file it asks nothing of refuses nothing
    mounted = {"driver": (driver_text, parsers.DRIVER_INFO)} if need["driver"] else {}
    if firmware_text is not None and need["firmware"]:  # the device plugin mounts no firmware file; run does
        mounted["firmware"] = (firmware_text, parsers.FIRMWARE_INFO)
    have = {}
    for what, (text, path) in mounted.items():
        if text is False:
            return Decision(False, notes + ["%s: refused: %s is there but cannot be read (mounted wrong?)"
                                            % (NAME, path),
                                            "  fix: mount the node's %s read-only at %s" % (path, path)])
        have[what], why = _version(text, path, KIND[what])
        if have[what] is None:
            return Decision(False, notes + ["%s: refused: %s" % (NAME, why),
                                            "  fix: mount the node's own %s (a driver install writes it)" % path])
    values = {"image_min_driver": need["driver"], "image_min_firmware": need["firmware"],
              "host_driver": have.get("driver"), "host_firmware": have.get("firmware")}
    for what, (_, path) in mounted.items():
        if need[what] and versions.meets_minimum(KIND[what], have[what], need[what]) is False:
            return Decision(False, notes + _refusal(what, need[what], have[what], path, table, values))
    return Decision(True, notes)


def read_info(path):
    """The text of a version.info; None when there is none, False when it cannot be read."""
    if not os.path.lexists(path):
        return None
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_READ) if os.path.isfile(path) else None
    except OSError:
        return False
    if data is None or b"\0" in data:
        return False
    return data.decode("utf-8", "replace")


def main(argv):
    """Check, then ``exec`` ``argv`` (never returns when it runs); the exit code otherwise."""
    if not argv:
        sys.stderr.write("usage: %s COMMAND [ARG...]: checks the NPU driver, then runs COMMAND\n" % NAME)
        return 2
    decision = decide(os.environ, read_info(parsers.DRIVER_INFO), read_info(parsers.FIRMWARE_INFO),
                      error_table.load_shipped(vocabulary.TOOL_DIR))
    for line in decision.lines:
        sys.stderr.write(line + "\n")
    if not decision.run:
        return REFUSED
    sys.stderr.flush()
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write("%s: cannot run %s: %s\n" % (NAME, argv[0], exc.strerror or exc))
        return 127 if isinstance(exc, FileNotFoundError) else 126
    return 0  # not reached: exec replaced this process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
