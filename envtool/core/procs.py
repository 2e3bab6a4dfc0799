"""Child processes and scratch directories that an interrupted command must clean up (core layer).

Every subprocess a long command starts goes through :func:`popen`: it runs in its own process
group (``start_new_session=True``), so that :func:`kill_children` can stop it *and its own
children* (``pip`` → compiler, ``cp`` batches) with ``killpg``; a terminal's Ctrl-C then reaches
envtool only, which kills the groups itself and cleans up. Scratch directories (a build prefix,
a package-cache staging directory) are registered with :func:`scratch` so that the single
clean-up path removes them whatever was running when the signal came.

Directory names end in ``-PID`` (``.NAME.envtool-build-PID``, ``.envtool-seed-PID``):
:func:`stale_dirs` finds those whose process is gone (``kill -9``, a node crash) so that the
next run removes them.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, List, Sequence, Set, Tuple

_lock = threading.Lock()
_children: Set[subprocess.Popen] = set()
_scratch: List[Path] = []


def popen(argv: Sequence[str], **kwargs) -> subprocess.Popen:
    """``subprocess.Popen`` in a new process group, registered for :func:`kill_children`.

    Args:
        argv: the command.
        **kwargs: passed to ``Popen`` (``start_new_session`` is forced to True).
    Returns:
        the started process; call :func:`forget` once it has been waited for.
    Raises:
        OSError: the program cannot be started.
    """
    kwargs["start_new_session"] = True
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
    stale, live = [], []
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


def remove_stale(parent: Path, prefix: str) -> List[Path]:
    """Remove :func:`stale_dirs` ``parent/<prefix><PID>`` of dead processes; returns what was removed."""
    stale, _ = stale_dirs(parent, prefix)
    for p in stale:
        shutil.rmtree(p, ignore_errors=True)
    return [p for p in stale if not os.path.lexists(p)]



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
