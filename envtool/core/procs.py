"""Child processes and scratch directories that an interrupted command must clean up (core layer).

Every subprocess a long command starts goes through :func:`popen`: it runs in its own process
group (``start_new_session=True``), so that :func:`kill_children` can stop it *and its own
children* (``pip`` → compiler, ``cp`` batches) with ``killpg``; a terminal's Ctrl-C then reaches
envtool only, which kills the groups itself and cleans up. Scratch directories (a build prefix,
a package-cache staging directory) are registered with :func:`scratch` so that the single
clean-up path removes them whatever was running when the signal came.

Children die with envtool on every path: each one started by :func:`popen` asks the kernel for
SIGKILL when envtool goes (``prctl(PR_SET_PDEATHSIG)``, prctl(2)), even by ``kill -9``; and a
build marks every process it starts, and their descendants, with :data:`BUILD_MARKER` in the
environment, so that :func:`kill_marked` finds them all (``/proc/PID/environ``, proc(5)) —
the clean-up of an interrupted build, and the next run on the same prefix before it sweeps a
dead run's directory.

Directory names end in ``-PID`` (``.NAME.envtool-build-PID``, ``.envtool-seed-PID``):
:func:`stale_dirs` finds those whose process is gone (``kill -9``, a node crash) so that the
next run removes them.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Sequence, Set, Tuple

#: Signals whose default action ends the process (signal(7)) and that a terminal, a batch system
#: or ``kill`` sends; a long command turns each into a clean-up and exit 130.
EXIT_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
                signal.SIGALRM)
#: The environment variable that marks a build's processes (its value: the build directory).
BUILD_MARKER = "ENVTOOL_BUILD"
#: ``PR_SET_PDEATHSIG`` of linux/prctl.h.
_PR_SET_PDEATHSIG = 1


def _prctl():
    try:
        fn = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    fn.restype = ctypes.c_int
    return fn


_PRCTL = _prctl()  # looked up once, in the parent: the child calls it between fork and exec


def die_with_parent() -> None:
    """``preexec_fn`` for a child: SIGKILL it when the thread that started it ends (``kill -9`` of
    envtool included). ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (prctl(2)); a no-op where it is missing."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


def ignored_at_start(sig: int) -> bool:
    """Whether ``sig`` was ignored when this process started (``nohup`` ignores SIGHUP; a shell's
    background job, SIGINT and SIGQUIT). Python itself sets only SIGINT, so any other ``SIG_IGN``
    found is inherited."""
    return signal.getsignal(sig) == signal.SIG_IGN


def marked(value: str) -> List[int]:
    """PIDs of live processes (not zombies, not this one) whose environment has
    ``BUILD_MARKER=value`` (those of other users are unreadable unless root: skipped)."""
    needle = f"{BUILD_MARKER}={value}".encode()
    out: List[int] = []
    try:
        entries = list(os.scandir("/proc"))
    except OSError:  # no /proc here: the death signal and the process groups still apply
        return out
    for entry in entries:
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as fh:
                env = fh.read()
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != b"Z" and needle in env.split(b"\0"):
            out.append(int(entry.name))
    return out


#: The guard (:func:`watch`): a separate small Python process that reads ``+VALUE`` / ``-VALUE``
#: lines on its stdin and, when the pipe closes (envtool is gone, ``kill -9`` included), kills
#: every process still marked with a watched value.
_GUARD_CODE = r"""
import os, signal, sys, time
watched = set()
for line in sys.stdin.buffer:
    line = line.rstrip(b"\n")
    if line[:1] == b"+":
        watched.add(line[1:])
    elif line[:1] == b"-":
        watched.discard(line[1:])
needles = {b"%s=" + v for v in watched}
deadline = time.monotonic() + 10
while needles:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open("/proc/%%s/environ" %% name, "rb") as fh:
                env = fh.read().split(b"\0")
        except OSError:
            continue
        if needles.intersection(env):
            found.append(int(name))
    if not found or time.monotonic() > deadline:
        break
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    time.sleep(0.05)
"""
_guard: Optional["subprocess.Popen[bytes]"] = None


def watch(value: str) -> None:
    """Have the guard process kill every process marked ``value`` should envtool die without
    cleaning up (``kill -9``, a crash): the kernel's death signal (:func:`die_with_parent`) reaches
    only direct children, the guard reaches their descendants too. The guard is started on first
    use (in its own session, unmarked) and ends when this process does."""
    global _guard
    with _lock:
        try:
            if _guard is None or _guard.poll() is not None:
                env = {k: v for k, v in os.environ.items() if k != BUILD_MARKER}
                _guard = subprocess.Popen([sys.executable, "-I", "-S", "-c", _GUARD_CODE % BUILD_MARKER],
                                          stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL, start_new_session=True, env=env,
                                          close_fds=True)
            _tell_guard(_guard, b"+" + os.fsencode(value) + b"\n")
        except OSError:
            pass  # no guard: the death signal and the next run's sweep still apply


def _tell_guard(guard: "subprocess.Popen[bytes]", line: bytes) -> None:
    """Write one line to the guard (started with ``stdin=PIPE``, so it has one)."""
    if guard.stdin is not None:
        guard.stdin.write(line)
        guard.stdin.flush()


def unwatch(value: str) -> None:
    """Stop guarding ``value`` (its processes have been waited for or killed)."""
    with _lock:
        if _guard is not None and _guard.poll() is None:
            try:
                _tell_guard(_guard, b"-" + os.fsencode(value) + b"\n")
            except OSError:
                pass


def kill_marked(value: str, wait: float = 10.0) -> int:
    """SIGKILL every process marked with ``value`` (:func:`marked`) until none is left.

    Args:
        value: the marker's value (a build directory).
        wait: seconds to keep looking for stragglers (a process forking as it dies).
    Returns:
        the number of processes killed.
    """
    killed: Set[int] = set()
    deadline = time.monotonic() + wait
    while True:
        pids = marked(value)
        if not pids:
            return len(killed)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except (ProcessLookupError, PermissionError):
                pass
        if time.monotonic() >= deadline:
            return len(killed)
        time.sleep(0.05)

#: Re-entrant: the signal handlers (:func:`kill_descendants` from the CLI's) run in the main thread
#: and may interrupt it while it holds this lock (:func:`watch` starting the guard); a plain lock
#: then deadlocked the command on SIGTERM, with nothing printed (seen in CI under load).
_lock = threading.RLock()
_children: Set[subprocess.Popen] = set()
_scratch: List[Path] = []


def popen(argv: Sequence[str], **kwargs) -> subprocess.Popen:
    """``subprocess.Popen`` in a new process group, registered for :func:`kill_children`.

    Args:
        argv: the command.
        **kwargs: passed to ``Popen`` (``start_new_session`` is forced to True; ``preexec_fn``
            to :func:`die_with_parent`).
    Returns:
        the started process; call :func:`forget` once it has been waited for.
    Raises:
        OSError: the program cannot be started.
    """
    kwargs["start_new_session"] = True
    kwargs["preexec_fn"] = die_with_parent
    proc = subprocess.Popen(list(argv), **kwargs)
    with _lock:
        _children.add(proc)
    return proc


def forget(proc: subprocess.Popen) -> None:
    """Stop tracking ``proc`` (it has exited and been waited for)."""
    with _lock:
        _children.discard(proc)


def kill_group(proc: subprocess.Popen, grace: float = 2.0) -> None:
    """SIGTERM ``proc``'s process group, then SIGKILL it after ``grace`` seconds; waits for ``proc``.

    Args:
        proc: a process started by :func:`popen` (the leader of its group).
        grace: seconds between SIGTERM and SIGKILL.
    """
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=grace if sig == signal.SIGTERM else None)
            if sig == signal.SIGTERM:
                # the leader is gone; make sure nothing of its group survives it
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            break
        except subprocess.TimeoutExpired:
            continue
    forget(proc)


def kill_children(grace: float = 2.0) -> int:
    """Kill every live child started by :func:`popen` (whole process groups).

    Returns:
        the number of process groups signalled.
    """
    with _lock:
        live = list(_children)
    for proc in live:
        kill_group(proc, grace=grace)
    return len(live)


@contextmanager
def scratch(path: Path) -> Iterator[Path]:
    """Register ``path`` as a scratch directory for the duration of the block.

    The block's own ``finally`` should remove it; :func:`remove_scratch` removes it too when an
    interrupt arrives while it is registered.
    """
    path = Path(path)
    with _lock:
        _scratch.append(path)
    try:
        yield path
    finally:
        with _lock:
            if path in _scratch:
                _scratch.remove(path)


def remove_scratch() -> List[Path]:
    """Remove every registered scratch directory; returns the ones that existed."""
    with _lock:
        paths = list(_scratch)
        _scratch.clear()
    removed = []
    for p in paths:
        if os.path.lexists(p):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (``kill(pid, 0)``; EPERM means it exists)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stale_dirs(parent: Path, prefix: str) -> Tuple[List[Path], List[Path]]:
    """Directories ``parent/<prefix><PID>`` left by processes that are gone, and those still alive.

    Args:
        parent: the directory to look in.
        prefix: the name up to the PID, e.g. ``.env.envtool-build-``.
    Returns:
        ``(stale, live)``: paths whose PID is not running here, and paths whose PID is (another
        envtool at work, or a reused PID: left alone). Our own PID counts as live.
    """
    stale: List[Path] = []
    live: List[Path] = []
    pattern = re.compile(re.escape(prefix) + r"(\d+)")
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return stale, live
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if not m:
            continue
        pid = int(m.group(1))
        (live if pid == os.getpid() or pid_alive(pid) else stale).append(Path(entry.path))
    return stale, live


def remove_stale(parent: Path, prefix: str, before: Optional[Callable[[Path], object]] = None) -> List[Path]:
    """Remove :func:`stale_dirs` ``parent/<prefix><PID>`` of dead processes; returns what was removed.

    Args:
        parent, prefix: as :func:`stale_dirs`.
        before: called with each stale path before it is removed (to stop what still writes there).
    """
    stale, _ = stale_dirs(parent, prefix)
    for p in stale:
        if before is not None:
            before(p)
        remove_path(p)
    return [p for p in stale if not os.path.lexists(p)]


def remove_path(path) -> None:
    """Remove ``path`` if it is there: a symlink itself (never what it points at), a file, or a
    directory tree (errors inside the tree ignored; what stays is what could not be removed)."""
    if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
        try:
            os.unlink(path)
        except OSError:
            pass
    else:
        shutil.rmtree(path, ignore_errors=True)



def descendants(pid: int = 0) -> List[int]:
    """PIDs of every live descendant of ``pid`` (default: this process), whatever their session or
    process group, read from ``/proc/PID/stat`` (proc(5): field 4 is the parent PID).

    Returns:
        the PIDs, parents before their children; empty where ``/proc`` cannot be read.
    """
    root = pid or os.getpid()
    parent_of = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        # the command name (field 2) is in parentheses and may itself hold spaces or parentheses
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 1:
            parent_of[int(name)] = int(fields[1])
    children: dict = {}
    for child, parent in parent_of.items():
        children.setdefault(parent, []).append(child)
    out: List[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(0), []):
            if child not in out and child != root:
                out.append(child)
                todo.append(child)
    return out


def kill_descendants(grace: float = 2.0) -> int:
    """SIGTERM every descendant of this process (:func:`descendants`), then SIGKILL what is left
    after ``grace`` seconds; children started by :func:`popen` go by whole process group too.

    For the interrupt of a command that started children with plain :mod:`subprocess` (``validate``
    runs ``horovodrun``, which starts the ranks): once the command's own exception has killed the
    direct child, its children would be re-parented and out of reach, so they are signalled first.

    Returns:
        how many processes were signalled.
    """
    import time

    found = descendants()
    signalled = len(found)
    with _lock:
        groups = [p.pid for p in _children]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pgid in groups:
            try:
                os.killpg(pgid, sig)
            except OSError:
                pass
        for pid in found:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        if sig == signal.SIGKILL:
            break
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            found = [p for p in found if _alive_not_zombie(p)]
            if not found:
                break
            time.sleep(0.05)
        if not found and not groups:
            break
    return signalled


def _alive_not_zombie(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet waited for, does not count)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    state = stat[stat.rfind(b")") + 2:][:1]
    return state not in (b"Z", b"X")


@contextmanager
def command_scope() -> Iterator[str]:
    """The life of one envtool command: its children cannot outlive it.

    Marks every process the command starts (and their descendants) with :data:`BUILD_MARKER`
    ``=run-PID-NANOSECONDS``; turns each of :data:`EXIT_SIGNALS` that was not ignored when envtool
    started into :class:`envtool.core.errors.Interrupted` (exit 130), after killing the marked
    processes at once (a worker thread may be waiting for one); and on leaving, by any path,
    kills the process groups started by :func:`popen` and every marked process still running.
    A build (:class:`envtool.steps.kernel.transaction.BuildTransaction`) sets its own marker and handlers
    inside this scope.

    Yields:
        the marker's value.
    """
    from envtool.core.errors import Interrupted

    value = f"run-{os.getpid()}-{time.time_ns()}"
    before = os.environ.get(BUILD_MARKER)
    os.environ[BUILD_MARKER] = value
    watch(value)
    previous = {}
    state = {"signalled": False}

    def on_signal(signum, frame):
        if state["signalled"]:
            return
        state["signalled"] = True
        kill_marked(os.environ.get(BUILD_MARKER, value), wait=1.0)
        kill_marked(value, wait=1.0)
        raise Interrupted(signum)

    main = threading.current_thread() is threading.main_thread()
    if main:
        for sig in EXIT_SIGNALS:
            if ignored_at_start(sig):
                continue
            previous[sig] = signal.getsignal(sig)
            signal.signal(sig, on_signal)
    try:
        yield value
    except KeyboardInterrupt:
        state["signalled"] = True  # on the way to exit 130: a repeat must not cut the message short
        raise
    finally:
        try:
            kill_children(grace=1.0)
            kill_marked(value, wait=2.0)
            unwatch(value)
        finally:
            if before is None:
                os.environ.pop(BUILD_MARKER, None)
            else:
                os.environ[BUILD_MARKER] = before
            for sig, handler in previous.items():
                signal.signal(sig, signal.SIG_IGN if state["signalled"] else
                              (handler if handler is not None else signal.SIG_DFL))
