"""Probe: byte-compile an environment's ``lib`` tree, reusing bytecode of hard-linked sources.

Run with the environment's interpreter (standalone: standard library only)::

    python bytecode.py PREFIX/lib BYTECODE_CACHE_DIR     # "" for BYTECODE_CACHE_DIR: link nothing

uv installs a cached wheel by hard-linking its files into the environment, so a second
environment's ``torch/nn/modules/linear.py`` is the *same inode* (same mtime, same size) as the
first one's. CPython's timestamp-based ``.pyc`` records the source's mtime and size (PEP 552),
and the loader sets ``co_filename`` to the path a module was actually found at
(``importlib._bootstrap_external``: ``_imp._fix_co_filename``), so the first environment's
``.pyc`` is valid for the second as is. This probe:

1. links, for every ``.py`` with more than one link whose ``.pyc`` is missing, the bytecode kept
   for that inode in ``BYTECODE_CACHE_DIR`` (``<dev>-<inode>-<mtime_ns>-<size>.<cache_tag>.pyc``);
2. compiles every other source with ``compileall.compile_file`` (one worker per CPU; files that
   do not compile are skipped, as pip skips them; an existing ``.pyc`` is only rewritten when
   stale);
3. links the ``.pyc`` of every multiply-linked source into ``BYTECODE_CACHE_DIR`` for the next
   environment.

Links that cannot be made (another filesystem, a read-only cache) are skipped: the file is then
compiled as before. ``.pyc`` files are replaced by rename, never written in place, so a shared
link is never changed under another environment. Prints one record after ``ENVTOOL-PROBE ``::

    {"sources": 3120, "linked": 3050, "compiled": 70, "kept": 3050, "seconds": 3.1}

Exit status: 0, or 2 for bad arguments.
"""
import compileall
import importlib.util
import json
import os
import sys
import time

#: Line prefix of every record (the same in every probe and in ``envtool.probes.MARKER``).
MARKER = "ENVTOOL-PROBE "


def sources(root):
    """Every ``.py`` file under ``root`` (list of paths; ``__pycache__`` directories skipped)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        out.extend(os.path.join(dirpath, f) for f in filenames if f.endswith(".py"))
    return out


def cache_name(st, pyc):
    """The bytecode cache's file name for a source with ``os.stat`` result ``st`` whose bytecode is
    ``pyc``: the inode's identity, then the ``.pyc`` name's tag and optimization level
    (``cpython-311.pyc``, ``cpython-311.opt-1.pyc``), so optimized bytecode never stands in for
    plain bytecode (str)."""
    tail = os.path.basename(pyc).split(".", 1)[1]
    return f"{st.st_dev:x}-{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}.{tail}"


def _compile(paths):
    """Byte-compile ``paths`` (``compileall.compile_file``, quiet; up-to-date ``.pyc`` files are
    only read) with a worker process per CPU when there are more than 50; returns the number
    of paths handled (int)."""
    if len(paths) > 50 and (os.cpu_count() or 1) > 1:
        try:
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(max_workers=os.cpu_count()) as pool:
                list(pool.map(_compile_one, paths, chunksize=64))
            return len(paths)
        except (OSError, ImportError, NotImplementedError):
            pass  # no process pool here (a sandbox without semaphores): one process
    for path in paths:
        _compile_one(path)
    return len(paths)


def _compile_one(path):
    return compileall.compile_file(path, quiet=2)


def main(argv=None):
    """Run the probe (``argv``: ``[script, LIB_DIR, BYTECODE_CACHE_DIR]``, default ``sys.argv``); 0 or 2."""
    argv = sys.argv if argv is None else argv
    if len(argv) != 3:
        print("usage: bytecode.py LIB_DIR BYTECODE_CACHE_DIR", file=sys.stderr)
        return 2
    root, store = argv[1], argv[2]
    started = time.monotonic()
    try:
        if store:
            os.makedirs(store, exist_ok=True)
        else:
            store = None  # "": link nothing, keep nothing
    except OSError:
        store = None
    shared = []  # (source, pyc, cache entry) of sources with more than one link
    files = sources(root)
    linked = 0
    done = set()  # sources whose bytecode was linked (valid: same inode, so same mtime and size)
    for src in files:
        try:
            st = os.stat(src)
        except OSError:
            continue
        if st.st_nlink < 2 or store is None:
            continue
        pyc = importlib.util.cache_from_source(src)
        entry = os.path.join(store, cache_name(st, pyc))
        shared.append((pyc, entry))
        if not os.path.exists(pyc) and os.path.exists(entry):
            try:
                os.makedirs(os.path.dirname(pyc), exist_ok=True)
                os.link(entry, pyc)
                linked += 1
                done.add(src)
            except OSError:
                pass
    # what is left: sources with no linked bytecode (compile_file reads the header of an existing
    # .pyc and recompiles only a stale one), one worker per CPU when there are many
    todo = [src for src in files if src not in done]
    compiled = _compile(todo)
    kept = 0
    for pyc, entry in shared:
        if os.path.exists(entry) or not os.path.exists(pyc):
            continue
        try:
            os.link(pyc, entry)
            kept += 1
        except OSError:
            pass
    record = {"sources": len(files), "linked": linked, "compiled": compiled, "kept": kept,
              "seconds": round(time.monotonic() - started, 2)}
    print(MARKER + json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
