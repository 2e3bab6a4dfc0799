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
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator


def run_root(tmp_path_factory) -> Path:
    """The directory every worker of this run shares: the base temporary directory's parent under
    xdist (``PYTEST_XDIST_WORKER`` set), else the base temporary directory itself."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX)  # blocks while another worker builds
        yield
    finally:
        os.close(fd)


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
        except BaseException as exc:
            record.write_text(json.dumps({"ok": False, "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
                                          "error": f"{type(exc).__name__}: {exc}"[:20000]}))
            raise
        record.write_text(json.dumps({"ok": True, "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
                                      "seconds": round(time.monotonic() - started, 1)}))
        return target
