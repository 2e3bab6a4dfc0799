"""How slow this machine is right now, measured, for the tests' limits (issue 37, item 4).

A test that waits for an event needs an upper bound, but a fixed number of seconds that a quiet
machine meets is missed on a loaded 2-core one. :func:`slowdown` measures the factor: a fixed
pure-Python workload is timed (the CPU share this process gets now) and compared with the time the
same workload took on a quiet reference machine (:data:`REFERENCE_S`); the load average per core
is the second estimate, and the larger of the two is taken, never below 1 nor above
:data:`MAX_SLOWDOWN`. :func:`scaled` turns a
quiet-machine limit into one for now.

The measurement takes about 0.05 s on a quiet machine and is repeated at most every
:data:`REMEASURE_S` seconds (the load changes during a run).
"""
from __future__ import annotations

import os
import threading
import time

#: seconds the workload of :func:`_workload` took on the reference machine (2 cores, quiet, CPython
#: 3.11; the median of 20 runs on the project's development machine, 2026-11-27)
REFERENCE_S = 0.040
#: a measurement is reused for this many seconds
REMEASURE_S = 30.0
#: an environment variable that overrides the measurement (a float >= 1), for a machine known slow
OVERRIDE = "ENVTOOL_TEST_SLOWDOWN"
#: the factor is never larger: a bound a test asserts (``took < scaled(10)`` against a ``sleep 300``)
#: must stay able to fail
MAX_SLOWDOWN = 5.0

_lock = threading.Lock()
_cached = (0.0, 1.0)  # (monotonic time measured, factor)


def _workload() -> float:
    """Seconds of wall time for a fixed CPU-bound loop (single thread)."""
    start = time.perf_counter()
    total = 0
    for i in range(600_000):
        total += i * i % 7
    return time.perf_counter() - start


def measure() -> float:
    """The slowdown factor now (>= 1.0): max(workload time / :data:`REFERENCE_S`, load average per core).

    The workload is run three times and the fastest kept (a single descheduling is not load)."""
    best = min(_workload() for _ in range(3))
    cpu = best / REFERENCE_S
    try:
        load = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        load = 0.0
    return min(MAX_SLOWDOWN, max(1.0, cpu, load))


def slowdown() -> float:
    """The current slowdown factor (>= 1.0), remeasured at most every :data:`REMEASURE_S` s;
    ``$ENVTOOL_TEST_SLOWDOWN`` (a number >= 1) overrides it."""
    global _cached
    forced = os.environ.get(OVERRIDE)
    if forced:
        try:
            return min(MAX_SLOWDOWN, max(1.0, float(forced)))
        except ValueError:
            pass
    with _lock:
        at, factor = _cached
        now = time.monotonic()
        if now - at > REMEASURE_S or at == 0.0:
            factor = measure()
            _cached = (now, factor)
        return factor


def scaled(seconds: float) -> float:
    """``seconds`` (a limit that holds on a quiet machine) times :func:`slowdown`."""
    return seconds * slowdown()
