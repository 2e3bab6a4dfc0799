"""Build-then-rename, shared by ``create`` and ``clone``: the one place that decides what is left.

Guarantees (the brief's "nothing is lost"):

* one build at a time per prefix: a lock file ``.NAME.envtool-lock`` beside the prefix
  (``flock``), opened ``O_NOFOLLOW`` and used only when it is a regular file of the caller's; a
  second ``create``/``clone`` to the same prefix waits, saying for whom, for at most
  ``$ENVTOOL_LOCK_TIMEOUT`` seconds (default 300), then exits 2;
* ``--force`` replaces only an environment, never the current directory, the home directory,
  an envtool cache or a symlink (:func:`envtool.core.targets.check_replaceable`, exit 2 with
  nothing touched);
* the environment is built in ``.NAME.envtool-build-PID`` beside the target and appears at the
  target only by a rename, after every step has passed; the build's children get a private
  ``$TMPDIR`` (``.NAME.envtool-tmp-PID``, mode 0700) removed with it, and carry
  ``ENVTOOL_BUILD=<build directory>`` in their environment;
* whatever sits at the target is never deleted unless ``--force`` was given *and* it is the
  very directory that was there when the build started (same device and inode): without
  ``--force`` a target that appeared meanwhile is left alone, the command exits 2 and the new
  environment is kept beside it (path printed); with ``--force`` the old one is swapped out
  whole (``renameat2(RENAME_EXCHANGE)``, one atomic step, where the filesystem has it);
* on a failure or a signal (:data:`SIGNALS`: SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2,
  SIGALRM; one ignored when envtool started, as ``nohup`` ignores SIGHUP, stays ignored) —
  repeated ones too: after the first, further signals are ignored (until the process exits: it
  is on its way to exit 130) — the children are killed (by process group, and every process
  carrying the build's marker: :mod:`envtool.core.procs`), the build directory, the temporary
  directory and any registered scratch directory (the package-cache staging directory of a
  clone) are removed, the lock file too, the log says why, and the error carries the log path
  and what was left (``nothing was left at …`` or ``the old environment at … is intact``);
* children die with envtool even on ``kill -9`` (``PR_SET_PDEATHSIG``); the next run on the same
  prefix kills what still carries a dead run's marker, then removes its build and temporary
  directories, and says so — only those envtool's records prove a dead run's copies of this prefix
  (:mod:`envtool.steps.kernel.aside`: the environment's ``create.json`` or the run marker in the
  build's private ``TMPDIR`` naming the prefix, a PID above 1 that no longer runs, a directory of
  the user's). A look-alike (``mkdir .data.envtool-old-0``) is left alone and named, on stderr
  and in the build log; one at this run's own build or temporary path stops the run (exit 2,
  nothing touched).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import os
import pwd
import shlex
import signal
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, ContextManager, Dict, List, Literal, Optional, Tuple, Union

from envtool.core import procs
# RUN_MARKER, MAX_TMPDIR, private_tmp, write_run_marker: defined there, named here too (their home before)
from envtool.steps.kernel.aside import (MAX_TMPDIR, RUN_MARKER, leftovers, private_tmp, proven,  # noqa: F401
                                        marker_names, stray_tmps, write_run_marker)
from envtool.core.plan import redact
from envtool.core.targets import check_replaceable
from envtool.core.errors import Interrupted, TargetExists, UsageError, condition_message, naming
from envtool.spec.names import check_prefix

#: Signals turned into a clean-up (then exit 130): those a terminal, a batch system or ``kill`` sends
#: and whose default action ends the process (signal(7)); one that was ignored when envtool
#: started (``nohup`` ignores SIGHUP) stays ignored.
SIGNALS = procs.EXIT_SIGNALS
#: How long a second ``create``/``clone`` waits for the prefix lock (seconds), unless
#: ``$ENVTOOL_LOCK_TIMEOUT`` says otherwise.
LOCK_TIMEOUT = 300.0
#: Set in every child's environment during a build: the build directory. The next run on the
#: same prefix kills processes that still carry a dead run's value before it sweeps the directory.
BUILD_MARKER = procs.BUILD_MARKER
#: Flags of Linux ``renameat2(2)`` (linux/fs.h).
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _renameat2(src: Path, dst: Path, flags: int) -> bool:
    """``renameat2(src, dst, flags)``; False when the kernel, libc or filesystem lacks it.

    Raises:
        OSError: the rename failed for another reason (``EEXIST`` for ``RENAME_NOREPLACE``).
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(dst))


def _identity(path: Path) -> Optional[Tuple[int, int]]:
    """``(st_dev, st_ino)`` of ``path`` (not following a symlink), or None when absent."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def rename_noreplace(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst`` only if ``dst`` does not exist (not even as an empty directory).

    Raises:
        FileExistsError: ``dst`` exists.
    """
    if _renameat2(src, dst, RENAME_NOREPLACE):
        return
    # no renameat2 here: check, then rename (the lock file keeps other envtools out of the gap)
    if os.path.lexists(dst):
        raise FileExistsError(errno.EEXIST, "exists", str(dst))
    os.rename(src, dst)


def kept_path(target: Path) -> Path:
    """Where a finished environment goes when its target is taken: ``NAME.envtool-new-PID`` beside it."""
    return target.parent / f"{target.name}.envtool-new-{os.getpid()}"


def move_into_place(build: Path, target: Path, replace: Optional[Tuple[int, int]] = None) -> None:
    """Put the finished ``build`` directory at ``target``; never delete what appeared there.

    Args:
        build: the finished environment (same filesystem as ``target``).
        target: the final prefix.
        replace: ``(st_dev, st_ino)`` of the directory that ``--force`` may replace (the one that
            was at ``target`` when the build began), or None: nothing may be replaced.
    Raises:
        TargetExists: something is at ``target`` that may not be replaced (exit 2); ``build``
            has been renamed to :func:`kept_path` and the exception names it.
        OSError: a rename failed (``build`` is left where it was, for the caller to remove).
    """
    build, target = Path(build), Path(target)
    current = _identity(target)
    if current is not None and (replace is None or current != replace):
        kept = kept_path(target)
        os.rename(build, kept)
        raise TargetExists(target, kept, appeared=True)
    if current is None:
        try:
            rename_noreplace(build, target)
        except FileExistsError:
            kept = kept_path(target)
            os.rename(build, kept)
            raise TargetExists(target, kept, appeared=True) from None
        return
    # --force: swap the old environment out in one step; it ends up at ``build``
    if not _renameat2(build, target, RENAME_EXCHANGE):
        aside = target.parent / f".{target.name}.envtool-old-{os.getpid()}"
        os.rename(target, aside)
        try:
            rename_noreplace(build, target)
        except BaseException:
            os.rename(aside, target)
            raise
        os.rename(aside, build)
    if _identity(build) == replace:
        _remove_path(build)
    else:  # someone swapped the target between our check and the exchange: keep theirs
        os.rename(build, kept_path(target))


def remove_cachedir_tag(prefix: Path) -> bool:
    """Remove ``CACHEDIR.TAG`` from the root of an environment prefix; True when there was one.

    py-rattler writes one at the root of every prefix it installs into (seen with py-rattler
    0.28); the Cache Directory Tagging Specification (bford.info/cachedir) makes ``tar
    --exclude-caches``, borg and restic skip such a directory, so an environment would be left
    out of backups. Real package caches keep theirs.
    """
    tag = Path(prefix) / "CACHEDIR.TAG"
    if tag.is_file() and not tag.is_symlink():
        tag.unlink()
        return True
    return False


_remove_path = procs.remove_path


def _remove_settled(path: Path, tries: int = 10, pause: float = 0.2) -> None:
    """Remove ``path`` until it stays away for ``pause`` seconds (at most ``tries`` rounds).

    An in-process installer (py-rattler links packages from worker threads that an interrupt
    of the Python thread does not stop at once) may still write into the build directory
    right after the first removal.
    """
    for _ in range(tries):
        if not os.path.lexists(path):
            return
        _remove_path(path)
        time.sleep(pause)


def lock_timeout() -> float:
    """Seconds a build waits for another envtool's prefix lock: ``$ENVTOOL_LOCK_TIMEOUT``, else
    :data:`LOCK_TIMEOUT`.

    Raises:
        UsageError: the variable is not a finite number of seconds >= 0 (exit 2).
    """
    text = os.environ.get("ENVTOOL_LOCK_TIMEOUT", "").strip()
    if not text:
        return LOCK_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value >= 0 and value != float("inf")):
        raise UsageError(f"ENVTOOL_LOCK_TIMEOUT: expected a number of seconds >= 0, got {text[:50]!r}")
    return value


def _owner(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


class PrefixLock:
    """An exclusive ``flock`` on ``.NAME.envtool-lock`` beside a prefix (removed on release).

    The file is opened with ``O_NOFOLLOW`` and must be a regular file owned by the caller: a
    symlink, a FIFO or another user's file planted there is refused (exit 2, naming it), never
    followed. The file is unlinked on release; a waiter re-checks after acquiring that the path
    still names the file it locked, so no two processes ever hold "the" lock at once. Waiting
    is bounded (:func:`lock_timeout`).
    """

    def __init__(self, target: Path):
        self.path = target.parent / f".{target.name}.envtool-lock"
        self.target = target
        self.fd: Optional[int] = None

    def _open(self) -> int:
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags, 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP or os.path.islink(self.path):
                raise UsageError(f"the lock file {self.path} is a symbolic link (to {os.readlink(self.path)}); "
                                 "envtool never follows it: remove it (someone may have planted it) and run "
                                 "again") from None
            # a read-only or full filesystem, a permission: the condition in plain words, exit 2
            raise UsageError("cannot open the lock file " + (condition_message(exc) or f"{self.path}: {exc.strerror}")) \
                from None
        st = os.fstat(fd)
        problem = None
        if not stat.S_ISREG(st.st_mode):
            problem = "is not a regular file"
        elif st.st_uid != os.geteuid():
            problem = (f"belongs to {_owner(st.st_uid)}, not to you ({_owner(os.geteuid())}): another user "
                       f"builds or built {self.target}")
        if problem:
            os.close(fd)
            raise UsageError(f"the lock file {self.path} {problem}; envtool will not use it: remove it, or choose "
                             "another --prefix")
        return fd

    def acquire(self, say=None, timeout: Optional[float] = None) -> None:
        """Take the lock, waiting (and saying so once through ``say``) while another process holds it.

        Args:
            say: called with one line when the lock is held by another process.
            timeout: seconds to wait at most (default :func:`lock_timeout`).
        Raises:
            UsageError: the lock file is a symlink, not a regular file or another user's, it
                cannot be opened, or it is still held after ``timeout`` seconds (exit 2).
        """
        timeout = lock_timeout() if timeout is None else timeout
        deadline = time.monotonic() + timeout
        told = False
        while True:
            fd = self._open()
            try:
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
                        if time.monotonic() >= deadline:
                            raise UsageError(f"another envtool (pid {holder}) still works on {self.target} after "
                                             f"{timeout:g} s (lock file {self.path}); try again later, or set "
                                             "ENVTOOL_LOCK_TIMEOUT to wait longer") from None
                        if not told and say:
                            say(f"waiting for another envtool (pid {holder}) working on {self.target} "
                                f"(lock file {self.path}; at most {timeout:g} s, ENVTOOL_LOCK_TIMEOUT)")
                            told = True
                        time.sleep(0.1)
            except BaseException:
                os.close(fd)
                raise
            if _identity(self.path) == (os.fstat(fd).st_dev, os.fstat(fd).st_ino):
                try:
                    with naming(self.path):
                        os.ftruncate(fd, 0)
                        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
                except BaseException:  # a full disk: the lock file we made must not stay behind
                    try:
                        os.unlink(self.path)
                    except OSError:
                        pass
                    os.close(fd)
                    raise
                self.fd = fd
                return
            os.close(fd)  # the holder unlinked it on release: lock the new file
            if time.monotonic() >= deadline:
                raise UsageError(f"the lock file {self.path} keeps changing under envtool; try again later")

    def release(self) -> None:
        """Unlink the lock file (when the path still names the file locked) and drop the lock."""
        if self.fd is None:
            return
        try:
            st = os.fstat(self.fd)
            if _identity(self.path) == (st.st_dev, st.st_ino):
                os.unlink(self.path)
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None


class BuildTransaction:
    """Build a prefix beside its target, then rename it into place (``with`` block).

    Usage::

        with BuildTransaction(target, force, log) as tx:   # lock, sweep, signal handlers
            ... build in tx.build, with tx.runner logging ...
            tx.commit()                                     # the rename

    Args:
        target: the final prefix (absolute or relative; made absolute).
        force: may replace the directory at ``target`` that exists when the build starts.
        log: the build log (the clean-up appends to it).
        say: where progress lines go (default: stderr), for the lock wait and the stale sweep.
        source: a clone source: ``force`` may not replace a directory that contains it.
    Raises (from ``__enter__``):
        UsageError: the prefix is not a valid path (control characters), or exists without ``force``;
            with ``force`` it is not a replaceable environment (:func:`check_replaceable`); the lock
            file is a symlink, not the caller's, or stays held (:class:`PrefixLock`).
    On a failure inside the block the exception is re-raised with ``log``, ``outcome`` set; a
    signal becomes :class:`envtool.core.errors.Interrupted`.
    """

    def __init__(self, target: Path, force: bool, log: Path, say=None, source: Optional[Path] = None):
        check_prefix(str(target))
        self.target = Path(os.path.abspath(target))
        self.force = force
        self.source = source
        self.log = Path(log)
        self.say = say or (lambda text: print(f"envtool: {text}", file=sys.stderr, flush=True))
        self.build = self.target.parent / f".{self.target.name}.envtool-build-{os.getpid()}"
        #: the build's private temporary directory (``$TMPDIR`` of its children), removed with the build:
        #: beside the target, or under the system's temporary directory when that path would be too
        #: long for the Unix sockets children make there (:func:`private_tmp`)
        self.tmp, self._tmp_stem = private_tmp(self.target)
        self.replace: Optional[Tuple[int, int]] = None
        self.swept: List[Path] = []
        #: look-alikes of a dead run's leftovers that nothing proves envtool's: left alone (named on stderr and in the log)
        self.kept: List[Path] = []
        self._lock = PrefixLock(self.target)
        #: signal number -> the handler in place before the build's (restored afterwards)
        self._previous: Dict[int, Union[Callable[[int, Any], Any], int, None]] = {}
        self._cleaning = False
        self._signalled: Optional[int] = None
        self._scratch: List[ContextManager[Path]] = []
        #: variable -> its value before the build set it (None: unset)
        self._environ: Dict[str, Optional[str]] = {}
        self.committed = False
        self._made_tmp = False

    # ------------------------------------------------------------------ set-up
    def _check_target(self) -> None:
        if os.path.lexists(self.target) and self.force:
            check_replaceable(self.target, source=self.source)  # exit 2, nothing touched
        elif self.target.exists() and not self.force:
            raise TargetExists(self.target)

    def __enter__(self) -> "BuildTransaction":
        self._check_target()
        try:
            self.target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot create {self.target.parent}: {exc.strerror}") from None
        self._lock.acquire(self.say)
        try:
            self._check_target()  # again: it may have changed while we waited for the lock
            self.replace = _identity(self.target) if self.force else None
            self._sweep()
            self._clear_own(self.build)
            self._clear_own(self.tmp)
            self._install_handlers()
            for path in (self.build, self.tmp):
                cm = procs.scratch(path)
                cm.__enter__()
                self._scratch.append(cm)
            os.mkdir(self.tmp, 0o700)
            self._made_tmp = True
            write_run_marker(self.tmp, self.target)
            tempfile.gettempdir()  # envtool's own temporary files stay where they were
            for name, value in ((BUILD_MARKER, str(self.build)), ("TMPDIR", str(self.tmp))):
                self._environ[name] = os.environ.get(name)
                os.environ[name] = value
            procs.watch(str(self.build))
        except BaseException:
            self._leave()
            raise
        return self

    def _sweep(self) -> None:
        """Delete what dead runs on this prefix left beside it, only where envtool's records prove it
        theirs (:func:`envtool.steps.kernel.aside.leftovers`); each look-alike is left alone and named
        (stderr and the build log). Fills :attr:`swept` and :attr:`kept`."""
        found = leftovers(self.target)
        far, far_unproven = stray_tmps(self.target)
        for p in found.mine + [t for t in far if t not in found.mine]:
            procs.kill_marked(str(p))  # a dead run's children may still write there (or the sweep races them)
            _remove_path(p)
            if not os.path.lexists(p):
                self.swept.append(p)
        notes = [f"removed {p}, left by an envtool process that no longer runs" for p in self.swept]
        for p in found.unproven + far_unproven:
            self.kept.append(p)
            notes.append(f"left alone: {p} (not envtool's: no record names {self.target})")
        for p in found.others:
            self.kept.append(p)
            notes.append(f"left alone: {p} (not envtool's: another user's, or not a directory)")
        for line in notes:
            self.say(line)
        if notes:
            self._note(notes)

    def _note(self, lines: List[str]) -> None:
        """Append ``lines`` to the build log (its directory made as the runner makes it); a log that
        cannot be written loses them (they were said on stderr)."""
        from envtool.core.paths import ensure_dir

        try:
            ensure_dir(self.log.parent)
            with open(self.log, "a", encoding="utf-8", errors="replace") as fh:
                fh.write("".join(redact(line) + "\n" for line in lines))
        except (OSError, UsageError):
            pass

    def _clear_own(self, path: Path) -> None:
        """Make room for this run's own build or temporary directory ``path``: what is there (an
        earlier process's with this PID) is deleted only when envtool's records prove it a copy of
        this prefix (:func:`envtool.steps.kernel.aside.proven`, or the run marker for a temporary
        directory under the system's).

        Raises:
            UsageError: something else is there (exit 2; nothing was touched, what is there is named).
        """
        if not os.path.lexists(path):
            return
        try:
            st: Optional[os.stat_result] = os.lstat(path)
        except OSError:
            st = None
        ours = st is not None and stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and (
            proven(self.target, path) or (path == self.tmp and marker_names(path, self.target)))
        if not ours:
            raise UsageError(f"{path}, where envtool builds {self.target}, is taken by something nothing proves "
                             f"envtool made; check it and move it away (mv -- {shlex.quote(str(path))} SOMEWHERE), "
                             "then run again; nothing was touched")
        procs.kill_marked(str(path))
        _remove_path(path)

    def _install_handlers(self) -> None:
        for sig in SIGNALS:
            if procs.ignored_at_start(sig):
                continue  # nohup's SIGHUP, a background job's SIGINT: they stay ignored
            self._previous[sig] = signal.getsignal(sig)
            signal.signal(sig, self._on_signal)

    def _restore_handlers(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        self._previous = {}

    def _on_signal(self, signum, frame) -> None:
        if self._cleaning or self._signalled:
            return  # clean-up is under way (or about to be): repeats must not cut it short
        self._signalled = signum
        # stop the build's processes now: the main thread may be waiting for a worker thread (the
        # validation probes) that waits for its child
        procs.kill_marked(str(self.build), wait=1.0)
        raise Interrupted(signum)

    # ------------------------------------------------------------------ the rename
    def commit(self) -> None:
        """Remove a root ``CACHEDIR.TAG`` and move the build into place (see :func:`move_into_place`).

        Raises:
            Interrupted: a signal came during the build but its exception was swallowed where the
                handler happened to run (CPython ignores exceptions from ``os.register_at_fork``
                callbacks, such as :mod:`logging`'s, and from finalizers: "Exception ignored in"):
                the build is not moved into place, and the ``with`` block cleans it up.
        """
        if self._signalled:
            raise Interrupted(self._signalled)
        remove_cachedir_tag(self.build)
        _remove_path(self.tmp)
        move_into_place(self.build, self.target, self.replace)
        self.committed = True

    # ------------------------------------------------------------------ clean-up
    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        self._cleaning = True
        try:
            if exc is None:
                return False
            killed = procs.kill_children()
            killed += procs.kill_marked(str(self.build))
            removed = procs.remove_scratch()
            if os.path.lexists(self.build):
                removed.append(self.build)
            _remove_settled(self.build)
            _remove_settled(self.tmp)
            if self.committed:
                outcome = f"the new environment is in place at {self.target}"
            elif isinstance(exc, TargetExists) and exc.kept:
                outcome = f"{self.target} was left as it is; the new environment is at {exc.kept}"
            elif self.replace is not None and _identity(self.target) == self.replace:
                outcome = f"the old environment at {self.target} is intact"
            elif _identity(self.target) is not None:
                outcome = f"{self.target} was not touched"
            else:
                outcome = f"nothing was left at {self.target}"
            try:
                with open(self.log, "a", encoding="utf-8") as fh:
                    fh.write(redact(f"FAILED: {type(exc).__name__}: {exc}") + "\n")
                    if killed:
                        fh.write(f"killed {killed} child process group(s) and process(es)\n")
                    for p in removed:
                        fh.write(f"removed {p}\n")
                    fh.write(outcome + "\n")
            except OSError:
                pass
            try:  # any exception: the CLI names the log and what was left (an OSError too)
                exc.log = self.log
                exc.outcome = outcome
            except AttributeError:
                pass
            return False
        finally:
            self._leave()

    def _leave(self) -> None:
        """Common end of ``__exit__`` and of a failed ``__enter__``: temporary directory (when this run
        made it), environment, signal handlers, lock."""
        if self._made_tmp:
            _remove_path(self.tmp)
        if self._environ:
            procs.kill_marked(str(self.build), wait=2.0)  # none on success; stragglers on a failure
            procs.unwatch(str(self.build))
        for cm in self._scratch:
            cm.__exit__(None, None, None)
        self._scratch = []
        for name, value in self._environ.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._environ = {}
        if self._signalled:
            # the command is on its way out (exit 130): a further signal must not replace the
            # Interrupted that carries the log path by a bare KeyboardInterrupt, or kill us mid-message
            for sig in self._previous:
                signal.signal(sig, signal.SIG_IGN)
            self._previous = {}
        self._restore_handlers()
        self._lock.release()
        self._cleaning = False
