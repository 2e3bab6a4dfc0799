"""The suite's own rules, as pytest hooks (issue 37); ``tests/conftest.py`` takes them in, and
``tests/test_suite_rules.py`` runs them on toy suites.

* the fast tier: ``multinode``, ``slurm`` and ``twin`` imply ``slow``; a test not marked ``slow``
  whose set-up and call take over :data:`FAST_LIMIT_S` s times the measured slowdown fails;
* pytest-xdist groups: a test's module, the ``multinode`` tests one group;
* per-phase wall and CPU seconds, the start time and the worker as JUnit properties, for
  ``benchmarks/bench_suite.py``.
"""
from __future__ import annotations

import os
import resource
import time
from pathlib import Path

import pytest

from helpers import speed

#: markers that make a test part of the full suite only (``-m "not slow"`` is the fast tier): a
#: test with one of the others is slow too (it starts Slurm, a cluster or uses the twin)
SLOW_MARKERS = ("slow", "multinode", "slurm", "twin")
#: seconds an unmarked test may take on a quiet machine (set-up and call together), scaled by
#: :func:`helpers.speed.slowdown`; over it the test fails and asks to be marked ``slow``
#: (``ENVTOOL_TEST_FAST_LIMIT`` sets another, for the rule's own test: tests/test_suite_rules.py)
FAST_LIMIT_S = float(os.environ.get("ENVTOOL_TEST_FAST_LIMIT") or 10.0)


#: fixtures that build something large of their own (the twin, an image): a group using one starts
#: first after the multi-node group, then the groups using the cpu-horovod environment
BUILD_FIXTURES = frozenset({"twin", "image", "mpich_image", "image_dir", "mpich_image_dir"})
#: fixtures the other worker's ``test_image`` group builds: multi-node tests using them run last in
#: their group, by when the images are built
IMAGE_FIXTURES = frozenset({"image", "mpich_image", "image_dir", "mpich_image_dir"})


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """A test marked ``multinode``, ``slurm`` or ``twin`` is ``slow`` too, so ``-m "not slow"``
    leaves out everything that compiles, starts a scheduler or uses the twin.

    Under pytest-xdist (``--dist loadgroup``) each test gets an ``xdist_group``: its module's name, so a
    module's tests and its module-scoped fixtures stay in one worker, except the ``multinode`` tests,
    which are one group whatever their module (one worker starts the test cluster, once). A test's
    own ``xdist_group`` marker wins.

    The groups are then ordered longest first, as xdist hands them out in this order (its own order,
    by number of tests, is switched off: ``--no-loadscope-reorder``): the multi-node group (the
    longest chain), then the groups that build the twin or an image, then those using the
    cpu-horovod environment, each by its number of slow tests, then the rest by size. Inside the
    multi-node group the tests that need no build come first (while the cpu-horovod environment is
    built), those on images last; otherwise a group's tests keep their order."""
    groups: dict = {}
    for index, item in enumerate(items):
        if any(item.get_closest_marker(m) for m in SLOW_MARKERS[1:]) and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
        mark = item.get_closest_marker("xdist_group")
        if mark is None:
            group = "multinode" if item.get_closest_marker("multinode") else Path(str(item.fspath)).stem
            item.add_marker(pytest.mark.xdist_group(group))
        else:
            group = mark.args[0] if mark.args else mark.kwargs.get("name", "default")
        groups.setdefault(group, []).append(item)

    def weight(group: str):
        members = groups[group]
        slow = sum(1 for i in members if i.get_closest_marker("slow"))
        used = set().union(*(set(getattr(i, "fixturenames", ())) for i in members))
        rank = 0 if group == "multinode" else 1 if BUILD_FIXTURES & used else 2 if "cpu_horovod_env" in used else 3
        return (rank, -slow, -len(members))

    def inside(item):
        """0: a multi-node test that needs no build (it runs while the cpu-horovod environment is
        built), 1: one on that environment, 2: one on an image or on the cpu-tensorflow
        environment (built after cpu-horovod's); any other test 0."""
        if item.get_closest_marker("multinode") is None:
            return 0
        used = set(getattr(item, "fixturenames", ()))
        return 2 if (IMAGE_FIXTURES | {"cpu_tensorflow_env"}) & used else 1 if "cpu_horovod_env" in used else 0

    order = sorted(groups, key=weight)
    position = {id(item): n for n, item in enumerate(items)}
    items[:] = [item for g in order for item in sorted(groups[g], key=lambda i: (inside(i), position[id(i)]))]
    keep_group_order(config)


def keep_group_order(config) -> None:
    """pytest-xdist's own order of the groups (most tests first) off: the order of the collection is
    kept. The controller process hands out the groups, so this must happen there as well as in the
    workers (:func:`pytest_configure`); ``--no-loadscope-reorder`` is pytest-xdist 3.6's option."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(trylast=True)  # after pytest-xdist has added its options
def pytest_configure(config):
    """In the controller process too (it collects nothing): keep the order
    :func:`pytest_collection_modifyitems` gives the groups (``tests/conftest.py``, which has a
    ``pytest_configure`` of its own, calls :func:`keep_group_order`)."""
    keep_group_order(config)


def _cpu_seconds() -> float:
    """CPU seconds (user + system) of pytest's process and of its children it has waited for (and
    theirs): what a test cost the machine, short of daemons still running (Slurm's, a cluster's)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item.__dict__["_envtool_cpu_mark"] = _cpu_seconds()
    item.__dict__["_envtool_started"] = time.time()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Per-phase durations as JUnit properties (``setup_s``, ``call_s``, ``teardown_s``, ``markers``:
    what ``benchmarks/bench_suite.py`` reads), and the fast tier's limit: a test not marked ``slow``
    whose set-up and call took over :data:`FAST_LIMIT_S` s (scaled by the machine's measured
    slowdown) fails, naming the time and the marker."""
    outcome = yield
    report = outcome.get_result()
    durations = item.__dict__.setdefault("_envtool_durations", {})
    durations[call.when] = report.duration
    cpu = _cpu_seconds()
    durations[f"{call.when}_cpu"] = cpu - item.__dict__.get("_envtool_cpu_mark", cpu)
    item.__dict__["_envtool_cpu_mark"] = cpu
    if call.when == "call" and report.passed and not item.get_closest_marker("slow"):
        took = durations.get("setup", 0.0) + report.duration
        limit = FAST_LIMIT_S * speed.slowdown()
        if took > limit:
            report.outcome = "failed"
            report.longrepr = (f"{item.nodeid} is not marked slow but took {took:.1f} s (set-up and call), over "
                               f"the fast tier's {FAST_LIMIT_S:.0f} s x measured slowdown {limit / FAST_LIMIT_S:.2f} "
                               f"= {limit:.1f} s: mark it @pytest.mark.slow, or make it faster (tests/README.md)")
    if call.when == "teardown":
        for when in ("setup", "call", "teardown"):
            report.user_properties.append((f"{when}_s", f"{durations.get(when, 0.0):.3f}"))
        report.user_properties.append(("setup_cpu_s", f"{durations.get('setup_cpu', 0.0):.3f}"))
        report.user_properties.append(("cpu_s", f"{sum(durations.get(f'{w}_cpu', 0.0) for w in ('call', 'teardown')):.3f}"))
        # when the set-up began (seconds since the epoch) and on which pytest-xdist worker: the run's
        # timeline, which benchmarks/bench_suite.py reads for the time a worker waited
        report.user_properties.append(("started", f"{item.__dict__.get('_envtool_started', 0.0):.3f}"))
        report.user_properties.append(("worker", os.environ.get("PYTEST_XDIST_WORKER", "main")))
        report.user_properties.append(("markers", ",".join(sorted(
            {m.name for m in item.iter_markers() if m.name in SLOW_MARKERS or m.name == "lmod"}))))
