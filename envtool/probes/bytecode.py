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
compiled as before.

A kept entry is linked only when it proves itself (:func:`trusted_entry`): a regular file (not a
symlink) owned by the user running the probe, writable by nobody else, whose SHA-256 equals the
one recorded when it was kept, in the sidecar ``<entry>.sha256`` (itself a regular file owned by
the user, writable by nobody else). Anything else in the store (a ``.pyc`` planted there by
someone else, an edited one, one kept by an envtool that recorded no hash) is never linked: the
source is compiled, and the entry replaced by the fresh bytecode. The store directory is created
mode ``0700``; one owned by another user, or one its group or others can write, is not used at all
(and its mode is left as it is). Bytecode that is kept loses its
group and other write permission (it is shared by every environment that links it). ``.pyc`` files are replaced by rename, never written in place, so a shared
link is never changed under another environment. Prints one record after ``ENVTOOL-PROBE ``::

    {"sources": 3120, "linked": 3050, "compiled": 70, "kept": 3050, "seconds": 3.1}

Exit status: 0, or 2 for bad arguments.
"""
import compileall
import hashlib
import importlib.util
import json
import os
import stat
import sys
import time
from typing import List

#: Line prefix of every record (the same in every probe and in ``envtool.probes.MARKER``).
MARKER = "ENVTOOL-PROBE "


def sources(root):
    """Every ``.py`` file under ``root`` (list of paths; ``__pycache__`` directories skipped)."""
    out: List[str] = []
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


#: Suffix of the sidecar that records a kept entry's SHA-256 (hex digits and a newline).
HASH_SUFFIX = ".sha256"


def _owned_private(st):
    """True when ``os.stat_result`` ``st`` is a regular file of the current user that neither its
    group nor others may write (bool)."""
    return (stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()
            and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def _read_private(path, limit):
    """``(bytes, stat_result)`` of ``path`` opened without following a symlink, or None when it is
    missing, a symlink, not :func:`_owned_private`, or larger than ``limit`` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not _owned_private(st) or st.st_size > limit:
            return None
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks), st
    except OSError:
        return None
    finally:
        os.close(fd)


def trusted_entry(entry):
    """The ``os.stat_result`` of store entry ``entry`` when it may be linked, else None.

    It may when the entry and its sidecar ``entry + HASH_SUFFIX`` are regular files of the current
    user that nobody else may write, and the entry's SHA-256 is the one the sidecar records."""
    side = _read_private(entry + HASH_SUFFIX, 200)
    if side is None:
        return None
    got = _read_private(entry, 1 << 30)
    if got is None:
        return None
    data, st = got
    if hashlib.sha256(data).hexdigest() != side[0].decode("ascii", "replace").strip():
        return None
    return st


def keep(pyc, entry):
    """Keep ``pyc`` in the store as ``entry`` (a hard link) with its SHA-256 in the sidecar; an
    untrusted entry already there is replaced. Returns True when kept.

    ``pyc`` must be the current user's; its group and other write permission is removed first
    (every environment that links the entry shares the inode)."""
    try:
        st = os.lstat(pyc)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return False
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            os.chmod(pyc, stat.S_IMODE(st.st_mode) & ~(stat.S_IWGRP | stat.S_IWOTH))
        with open(pyc, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        for stale in (entry, entry + HASH_SUFFIX):
            try:
                os.unlink(stale)
            except FileNotFoundError:
                pass
        os.link(pyc, entry)
        tmp = f"{entry}{HASH_SUFFIX}.{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(digest + "\n")
        os.replace(tmp, entry + HASH_SUFFIX)
        return True
    except OSError:
        return False


def open_store(store):
    """The bytecode store ``store`` when it may be used, else None: an existing directory (not a
    link) of the current user's that neither its group nor others may write, or one this probe
    creates (mode ``0700``) in an existing parent. Nothing else is created, and no mode is changed:
    envtool makes its store private under its rule for paths before it runs this probe
    (``envtool.core.paths.ensure_dir``); a store it did not make, that others can write, is
    neither used nor ``chmod``-ed (every source is compiled instead)."""
    try:
        try:
            os.mkdir(store, 0o700)
            os.chmod(store, 0o700)  # the directory just made: exactly 0700 whatever the umask
        except FileExistsError:
            pass
        st = os.lstat(store)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() \
                or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return None
        return store
    except OSError:
        return None


#: Seconds between the progress lines ``compiled N/M files`` (the caller shows the count).
PROGRESS_EVERY = 1.0


def _progress(done, total, last):
    """Print ``compiled DONE/TOTAL files`` when ``PROGRESS_EVERY`` seconds passed since ``last``
    (or at the end); returns the time of the last line."""
    now = time.monotonic()
    if done == total or now - last >= PROGRESS_EVERY:
        print(f"compiled {done}/{total} files", flush=True)
        return now
    return last


def _compile(paths):
    """Byte-compile ``paths`` (``compileall.compile_file``, quiet; up-to-date ``.pyc`` files are
    only read) with a worker process per CPU when there are more than 50, printing
    ``compiled N/M files`` about once a second; returns the number of paths handled (int)."""
    total, last = len(paths), time.monotonic()
    if len(paths) > 50 and (os.cpu_count() or 1) > 1:
        try:
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(max_workers=os.cpu_count()) as pool:
                for done, _ in enumerate(pool.map(_compile_one, paths, chunksize=64), 1):
                    last = _progress(done, total, last)
            return len(paths)
        except (OSError, ImportError, NotImplementedError):
            pass  # no process pool here (a sandbox without semaphores): one process
    for done, path in enumerate(paths, 1):
        _compile_one(path)
        last = _progress(done, total, last)
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
    store = open_store(store) if store else None  # "": link nothing, keep nothing
    shared = []  # (source, pyc, cache entry) of sources with more than one link
    files = sources(root)
    linked = 0
    proven_entries = set()  # store entries checked by trusted_entry and linked
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
        if os.path.exists(pyc) or not os.path.lexists(entry):
            continue
        proven = trusted_entry(entry)
        if proven is None:
            continue  # not proven: compiled below, and the entry replaced when kept
        try:
            os.makedirs(os.path.dirname(pyc), exist_ok=True)
            os.link(entry, pyc)
            if os.lstat(pyc).st_ino != proven.st_ino:  # the entry was replaced meanwhile
                os.unlink(pyc)
                continue
            linked += 1
            done.add(src)
            proven_entries.add(entry)
        except OSError:
            pass
    # what is left: sources with no linked bytecode (compile_file reads the header of an existing
    # .pyc and recompiles only a stale one), one worker per CPU when there are many
    todo = [src for src in files if src not in done]
    compiled = _compile(todo)
    kept = 0
    for pyc, entry in shared:
        if not os.path.exists(pyc):
            continue
        if entry in proven_entries or (os.path.lexists(entry) and trusted_entry(entry) is not None):
            continue  # a proven entry for this inode is kept already
        if keep(pyc, entry):
            kept += 1
    record = {"sources": len(files), "linked": linked, "compiled": compiled, "kept": kept,
              "seconds": round(time.monotonic() - started, 2)}
    print(MARKER + json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
