"""Probe: import modules and report every warning they print (standalone: standard library only).

Run with the environment's interpreter::

    python imports.py torch horovod.torch

Each module is imported in order, in this one process (as a training script does). The Python
warnings that the interpreter's filters let through — what a user would see printed — are
recorded instead of printed, and whatever is written to file descriptor 2 meanwhile (C/C++
libraries print there directly) is captured too. Prints one JSON object after
``ENVTOOL-PROBE ``::

    {"modules": [{"module": "torch", "ok": true, "error": null, "seconds": 1.93,
                  "warnings": [{"category": "UserWarning", "message": "Failed to initialize NumPy: …",
                                "filename": "…/torch/_subclasses/functional_tensor.py", "lineno": 283}],
                  "stderr": ""}]}

Exit status 0 (the result says which imports failed), 2 for no arguments.
"""
import importlib
import json
import os
import sys
import tempfile
import time
import warnings

#: Line prefix of every record (the same in every probe and in ``envtool.probes.MARKER``).
MARKER = "ENVTOOL-PROBE "
#: Longest captured stderr text per module (characters).
MAX_STDERR = 4000


def import_one(name):
    """Import ``name``; return its record (see the module docstring)."""
    record = {"module": name, "ok": True, "error": None, "warnings": [], "stderr": ""}
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        started = time.monotonic()
        try:
            with warnings.catch_warnings(record=True) as caught:
                try:
                    importlib.import_module(name)
                except BaseException as exc:  # an import may raise anything, SystemExit included
                    record["ok"] = False
                    record["error"] = "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        record["seconds"] = round(time.monotonic() - started, 3)
        capture.seek(0)
        record["stderr"] = capture.read().decode("utf-8", "replace")[:MAX_STDERR]
    for w in caught:
        record["warnings"].append({"category": w.category.__name__, "message": str(w.message),
                                   "filename": str(w.filename), "lineno": w.lineno})
    return record


def main(argv):
    """Import each module of ``argv`` (list of str) in order and print the record; returns the exit status."""
    if not argv:
        sys.stderr.write("usage: imports.py MODULE [MODULE ...]\n")
        return 2
    out = {"modules": [import_one(name) for name in argv]}
    sys.stdout.write(MARKER + json.dumps(out) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
