"""Probe: does a real ``torch.utils.data.DataLoader`` with worker processes run under a start method?

Run with the environment's interpreter (standalone: imports only the standard library at module
level, ``torch`` and ``horovod.torch`` inside :func:`main`)::

    python dataloader.py [--hvd-init] METHOD [METHOD ...]

``METHOD`` is ``fork``, ``spawn``, ``forkserver`` or ``default`` (the interpreter's default start
method). Used by ``create``'s validation (one method, no Horovod) and by ``doctor``'s
``start-method`` check (``--hvd-init default EXPECTED``).

Prints one JSON object per line, each after ``ENVTOOL-PROBE ``, in this order, flushed as it goes
so that a hang still leaves the records of what finished:

1. ``{"default": "fork"}``: the default start method, read before anything could fix it
   (``multiprocessing.get_start_method(allow_none=True)`` does not set it;
   ``docs/reference/horovod.md``, "DataLoader start method");
2. only when ``torch`` cannot be imported: ``{"torch": false, "installed": false, "error": "..."}``
   (exit status 1, nothing else follows);
3. with ``--hvd-init``: ``{"hvd_init": true, "controller": "gloo", "size": 1}`` or
   ``{"hvd_init": false, "error": "..."}``: ``hvd.init()`` in this one process, with Gloo when
   built (MPI otherwise), so the workers start after Horovod/MPI initialization as in training;
4. per distinct method: ``{"method": "fork", "total": 140, "seconds": 0.41}`` or
   ``{"method": "fork", "error": "...", "seconds": 0.2}``: a DataLoader over :data:`ITEMS`
   squares with :data:`WORKERS` workers and batch size :data:`BATCH_SIZE`; it worked when
   ``total`` equals :func:`expected_total`.

Exit status: 0 when every method worked, 1 otherwise, 2 for bad arguments.
"""
import json
import os
import sys
import time

# argparse, importlib.util and multiprocessing are imported where used: envtool imports this
# module for its constants and helpers, and its start-up stays fast.

#: Line prefix of every record (the same in every probe and in ``envtool.probes.MARKER``).
MARKER = "ENVTOOL-PROBE "

#: The dataset's length, the loader's worker processes and its batch size. One worker: it is started
#: by the method under test, imports torch, unpickles the dataset and sends every batch, which is
#: all the check asks; each further worker only repeats that start (an ``import torch``, about
#: 1.1-1.7 s of CPU here, more on a loaded node's shared file system) on every rank of every job.
ITEMS = 8
WORKERS = 1
BATCH_SIZE = 2

#: Longest error text a record carries (characters).
ERROR_CHARS = 300


def expected_total(items=ITEMS):
    """The sum a complete pass over :class:`Squares` returns: 0² + 1² + … + (items-1)² (int; 140 for 8)."""
    return sum(i * i for i in range(items))


class Squares(object):
    """A map-style dataset of ``i * i`` for ``i`` in ``range(ITEMS)``.

    A plain class (a DataLoader takes any object with ``__len__`` and ``__getitem__``), so this
    module imports without torch; defined at module level so spawn/forkserver workers, which
    re-import the main script, can unpickle it.
    """

    def __len__(self):
        return ITEMS

    def __getitem__(self, i):
        if not 0 <= i < ITEMS:
            raise IndexError(i)
        return i * i


def say(record):
    """Print ``record`` (a dict) as one marked JSON line and flush it."""
    print(MARKER + json.dumps(record, default=str), flush=True)


def one_line(exc, limit=ERROR_CHARS):
    """``"TypeName: message"`` of ``exc``, first line only, at most ``limit`` characters (str)."""
    text = "{}: {}".format(type(exc).__name__, exc).strip()
    return (text.splitlines() or [""])[0][:limit]


def default_start_method():
    """The interpreter's default start method (``fork`` on Linux before Python 3.14), read with
    ``get_start_method(allow_none=True)`` first so that an unset method is reported as the
    platform default without having been fixed by an earlier call (str)."""
    import multiprocessing

    return multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_context().get_start_method()


def resolve_methods(requested, default):
    """The start methods to try, in order, with ``"default"`` replaced by ``default`` and repeats dropped.

    Args:
        requested: method names from the command line (list of str).
        default: the interpreter's default start method (str).
    Returns:
        a list of distinct method names.
    """
    out = []
    for method in requested:
        method = default if method == "default" else method
        if method not in out:
            out.append(method)
    return out


def init_horovod():
    """``hvd.init()`` in this process, with Gloo as controller and CPU operations when built.

    Returns:
        the record to print (dict): ``hvd_init`` True with ``controller`` (``gloo``/``mpi``) and
        ``size``, or False with ``error``.
    """
    try:
        import horovod.torch as hvd
        if not hasattr(hvd, "init"):
            raise ImportError("horovod.torch has no init (extension not built)")
        if hvd.gloo_built():
            os.environ["HOROVOD_CONTROLLER"] = "gloo"
            os.environ["HOROVOD_CPU_OPERATIONS"] = "gloo"
        hvd.init()
        controller = "gloo" if hvd.gloo_enabled() else ("mpi" if hvd.mpi_enabled() else "unknown")
        return {"hvd_init": True, "controller": controller, "size": hvd.size()}
    except Exception as exc:
        return {"hvd_init": False, "error": one_line(exc)}


def load(data_loader, method):
    """Iterate a DataLoader over :class:`Squares` under start method ``method``.

    Args:
        data_loader: ``torch.utils.data.DataLoader``.
        method: the start method (str).
    Returns:
        the record to print (dict): ``method``, ``seconds`` (wall time, s) and ``total`` (int) or
        ``error`` (str).
    """
    started = time.monotonic()
    try:
        loader = data_loader(Squares(), batch_size=BATCH_SIZE, num_workers=WORKERS, multiprocessing_context=method)
        total = int(sum(int(batch.sum()) for batch in loader))
        return {"method": method, "total": total, "seconds": round(time.monotonic() - started, 3)}
    except Exception as exc:
        return {"method": method, "error": one_line(exc), "seconds": round(time.monotonic() - started, 3)}


def is_installed(name):
    """True when top-level module ``name`` can be found on ``sys.path`` (whether or not it imports)."""
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def parse_args(argv=None):
    """The command line (``argparse.Namespace`` with ``methods`` and ``hvd_init``); exits 2 when bad."""
    import argparse

    parser = argparse.ArgumentParser(prog="dataloader.py", description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--hvd-init", action="store_true", help="run hvd.init() (Gloo when built) first")
    parser.add_argument("methods", nargs="+", metavar="METHOD", help="fork, spawn, forkserver or default")
    return parser.parse_args(argv)


def main(argv=None):
    """Run the probe (see the module docstring); returns the exit status (int)."""
    args = parse_args(argv)
    default = default_start_method()
    say({"default": default})
    try:
        from torch.utils.data import DataLoader
    except Exception as exc:
        say({"torch": False, "installed": is_installed("torch"), "error": one_line(exc)})
        return 1
    if args.hvd_init:
        say(init_horovod())
    ok = True
    for method in resolve_methods(args.methods, default):
        record = load(DataLoader, method)
        ok = ok and record.get("total") == expected_total()
        say(record)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
