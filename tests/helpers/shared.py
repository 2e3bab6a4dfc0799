"""Artifacts built once per test run and shared by every pytest-xdist worker (issue 37).

A session-scoped fixture runs once per *worker*; an expensive artifact (the cpu-horovod
environment: a Horovod compile) must be built once per *run*. :func:`once` builds it under the
run's common temporary directory (``pytest-of-USER/pytest-N/`` holds every worker's
``popen-gwK/``), serialised by an ``fcntl`` lock: the first worker that asks builds, the others wait
for it and reuse the result; a failed build is remembered, and every later asker fails with its
message instead of building again. Without xdist it is an ordinary once-per-session build.
"""
from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple


def run_root(tmp_path_factory) -> Path:
    """The directory every worker of this run shares: the base temporary directory's parent under
    xdist (``PYTEST_XDIST_WORKER`` set), else the base temporary directory itself."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


#: name -> the lock threads of this process take before the file lock (which would also keep them
#: apart: each opens the file anew)
_thread_locks: Dict[str, threading.Lock] = {}
_guard = threading.Lock()


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with _guard:
        tlock = _thread_locks.setdefault(str(path), threading.Lock())
    with tlock:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            # flock, not lockf: a POSIX record lock belongs to the process, and the kernel's deadlock
            # detection then sees two workers, each with one thread holding a build's lock and
            # another waiting for the other's, as a deadlock (EDEADLK) although no thread waits for
            # itself; flock's lock belongs to the open file and detects nothing (flock(2), fcntl(2))
            fcntl.flock(fd, fcntl.LOCK_EX)  # blocks while another worker builds
            yield
        finally:
            os.close(fd)


_running: List[subprocess.Popen] = []
#: set by :func:`stop_builds`: a build that fails from now on was stopped, not broken
_stopping = threading.Event()
_early: List[threading.Thread] = []


def run_stoppable(argv: List[str], cwd: Path, timeout: float = 3600,
                  env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """``subprocess.run(argv)`` (text, output captured) in a session of its own, which
    :func:`stop_builds` can end when pytest stops first; ``env``: more variables."""
    full = dict(os.environ)
    full.pop("ENVTOOL_DEBUG", None)
    full.update(env or {})
    proc = subprocess.Popen(argv, cwd=cwd, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    _running.append(proc)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        _killpg(proc.pid, signal.SIGTERM)
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            _killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        raise
    finally:
        _running.remove(proc)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def finish(interrupted: bool, grace: float = 60.0) -> None:
    """End of a worker's session. Normally the builds :func:`start_early` began are waited for: a
    pytest-xdist worker that ran out of tests may be the one building what the other worker waits
    for. When the session was interrupted or stopped early (``-x``), they are stopped instead
    (:func:`stop_builds`)."""
    if interrupted:
        stop_builds(grace)
    for thread in _early:
        thread.join()


def stop_builds(grace: float = 60.0) -> None:
    """SIGTERM to every build :func:`run_stoppable` still runs (its whole session), then SIGKILL
    after ``grace`` seconds. Such a build leaves no failure record: the next asker builds again."""
    _stopping.set()
    for proc in list(_running):
        _killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            _killpg(proc.pid, signal.SIGKILL)


def start_early(tmp_path_factory, name: str, build: Callable[[Path], None],
                after: Sequence[Tuple[str, Callable[[Path], None]]] = ()) -> threading.Thread:
    """Begin :func:`once` for ``name`` in a background thread now (at the start of the run), so that
    the build overlaps the tests that do not need it; the fixture's own :func:`once` then waits for
    it. ``after``: ``(name, build)`` of artifacts to make (or wait for) first, so that two compiles
    do not share the cores with each other. A failure is left for that fixture to report. The
    caller's thread settles pytest's base temporary directory first (``getbasetemp`` takes no lock:
    two threads making it at once get two)."""
    tmp_path_factory.getbasetemp()

    def run() -> None:
        for first, first_build in after:
            try:
                once(tmp_path_factory, first, first_build)
            except BaseException:  # reported by the fixture that asks for it
                pass
        try:
            once(tmp_path_factory, name, build)
        except BaseException:  # reported by the fixture that asks for it
            pass

    thread = threading.Thread(target=run, name=f"build {name}", daemon=True)
    _early.append(thread)
    thread.start()
    return thread


def once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """``run_root/shared/name``, made by ``build(path)`` once per run.

    Args:
        tmp_path_factory: pytest's fixture.
        name: the artifact's name (a file name).
        build: makes the artifact at the path it is given (which does not exist yet); raises on
            failure (an ``AssertionError`` from ``assert`` too).
    Returns:
        the artifact's path.
    Raises:
        AssertionError: this run's build of ``name`` failed (now or in another worker): its message.
    """
    shared = run_root(tmp_path_factory) / "shared"
    shared.mkdir(exist_ok=True)
    target, record = shared / name, shared / f"{name}.json"
    with _locked(shared / f"{name}.lock"):
        if record.exists():
            done = json.loads(record.read_text())
            assert done["ok"], f"{name}: the build failed in {done['worker']}: {done['error']}"
            return target
        started = time.monotonic()
        try:
            build(target)
        except Exception as exc:
            if not _stopping.is_set():  # a stopped build is no verdict: the next asker builds again
                text = f"{type(exc).__name__}: {exc}"
                record.write_text(json.dumps({"ok": False, "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
                                              "error": text if len(text) <= 20000 else "…" + text[-20000:]}))
            raise
        record.write_text(json.dumps({"ok": True, "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
                                      "seconds": round(time.monotonic() - started, 1)}))
        return target
