"""The suite's own rules (issue 37), run for real on toy suites in a pytest of their own: the fast
tier's 10 s rule fires on an unmarked test and not on a ``slow`` one, ``multinode`` implies ``slow``,
the per-phase JUnit properties are written and read back by ``benchmarks/bench_suite.py``, and an
artifact of :func:`helpers.shared.once` is built once for two processes, a failed build remembered."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import REPO
from helpers.speed import scaled

TESTS = REPO / "tests"

TOY = textwrap.dedent('''
    import time
    import pytest

    def test_quick():
        pass

    def test_unmarked_and_slow():
        time.sleep(1.5)

    @pytest.mark.slow
    def test_marked_and_slow():
        time.sleep(1.5)

    @pytest.mark.multinode
    def test_multinode_is_slow_too():
        time.sleep(1.5)
''')


def _toy_run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text("from helpers.suite_plugin import *  # noqa: F401,F403\n"
                                          "def pytest_configure(config):\n"
                                          "    config.addinivalue_line('markers', 'slow: x')\n"
                                          "    config.addinivalue_line('markers', 'multinode: x')\n")
    (tmp_path / "test_toy.py").write_text(TOY)
    env = {**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{REPO}", "ENVTOOL_TEST_FAST_LIMIT": "1",
           "ENVTOOL_TEST_SLOWDOWN": "1"}
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "--rootdir", str(tmp_path), *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=scaled(120))


@pytest.mark.slow  # three pytest runs
def test_an_unmarked_test_over_the_limit_fails_and_a_slow_one_passes(tmp_path):
    proc = _toy_run(tmp_path, "--junitxml", str(tmp_path / "run.xml"))
    assert proc.returncode == 1, proc.stdout
    assert "1 failed, 3 passed" in proc.stdout, proc.stdout
    assert "test_unmarked_and_slow is not marked slow but took 1.5 s" in proc.stdout, proc.stdout
    # the fast tier leaves out what is marked slow, and multinode means slow
    proc = _toy_run(tmp_path, "-m", "not slow", "--collect-only")
    assert "test_quick" in proc.stdout and "test_unmarked_and_slow" in proc.stdout
    assert "test_marked_and_slow" not in proc.stdout and "test_multinode_is_slow_too" not in proc.stdout
    # the JUnit properties, as bench_suite.py reads them
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_suite.py"), str(tmp_path / "run.xml"),
                          "--json"], capture_output=True, text=True, timeout=scaled(60))
    summary = json.loads(out.stdout)
    assert summary["counts"] == {"passed": 3, "failure": 1}
    assert 1.4 < summary["phases"]["multi-node"] < 3 and 2.9 < summary["phases"]["one-node"] < 5, summary
    # the run's timeline: one process (no xdist), its four tests one after another
    (worker,) = summary["workers"].values()
    assert worker["tests"] == 4 and worker["busy_s"] > 4.3, summary["workers"]  # three sleeps of 1.5 s
    # the start times are whole milliseconds; pytest's own start (the XML's timestamp) is rounded too
    assert -0.1 < worker["first_s"] < worker["first_s"] + worker["busy_s"] <= worker["last_s"] + 0.5, worker


BUILDER = textwrap.dedent('''
    import os, sys, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from helpers import shared

    class Factory:  # what once() uses of pytest's tmp_path_factory
        def getbasetemp(self):
            return Path(sys.argv[2])

    def build(target):
        with open(Path(sys.argv[2]) / "builds.log", "a") as fh:
            fh.write(f"{os.getpid()}\\n")
        time.sleep(1)
        if sys.argv[3] == "fail":
            raise AssertionError("the toy build broke")
        target.mkdir()

    try:
        print(shared.once(Factory(), "toy", build))
    except AssertionError as exc:
        print("FAILED", exc)
''')


def test_once_builds_one_artifact_for_two_processes_and_remembers_a_failure(tmp_path):
    script = tmp_path / "builder.py"
    script.write_text(BUILDER)
    for outcome in ("ok", "fail"):
        base = tmp_path / outcome
        base.mkdir()
        env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}  # the base is the shared root
        procs = [subprocess.Popen([sys.executable, str(script), str(TESTS), str(base), outcome],
                                  stdout=subprocess.PIPE, text=True, env=env) for _ in range(2)]
        outs = [p.communicate(timeout=scaled(60))[0].strip() for p in procs]
        assert len((base / "builds.log").read_text().split()) == 1, outs  # one build for both
        if outcome == "ok":
            assert outs == [str(base / "shared" / "toy")] * 2 and (base / "shared" / "toy").is_dir()
        else:
            assert all(o.startswith("FAILED") and "the toy build broke" in o for o in outs), outs


@pytest.mark.slow  # 35 s under CI's load in rehearsal 16 (a nested pytest-xdist run), over the fast tier's limit
def test_pytest_xdist_hands_out_the_groups_in_the_order_the_suite_gives_them(tmp_path):
    """pytest-xdist's controller reorders the groups by size unless told not to; the suite's order
    (a module with a slow test before a larger one without) must reach the worker."""
    (tmp_path / "conftest.py").write_text(
        "from helpers.suite_plugin import *  # noqa: F401,F403\n"
        "def pytest_configure(config):\n"
        "    config.addinivalue_line('markers', 'slow: x')\n"
        "    keep_group_order(config)\n")
    (tmp_path / "test_few.py").write_text("import pytest\n@pytest.mark.slow\ndef test_slow_one():\n    pass\n")
    (tmp_path / "test_many.py").write_text("".join(f"def test_{n}():\n    pass\n" for n in range(4)))
    # only pytest-xdist among the installed plug-ins (CI's run of this test once waited over 177 s
    # for a pytest that loads them all, on a machine busy building images), and Python's
    # faulthandler armed: a run over the bound prints where each process stood (_run_dumping)
    env = {**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{REPO}", "ENVTOOL_TEST_SLOWDOWN": "1",
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONFAULTHANDLER": "1"}
    env.pop("PYTEST_ADDOPTS", None)
    proc = _run_dumping([sys.executable, "-m", "pytest", "-v", "-p", "xdist.plugin", "-p", "no:cacheprovider",
                         "-n", "1", "--dist", "loadgroup", "--rootdir", str(tmp_path)], tmp_path, env, scaled(300))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ran = [line.split("PASSED ")[1].split("::")[0] for line in proc.stdout.splitlines() if "PASSED " in line]
    assert ran == ["test_few.py"] + ["test_many.py"] * 4, proc.stdout


def _run_dumping(argv: list, cwd: Path, env: dict, timeout: float) -> subprocess.CompletedProcess:
    """Run ``argv`` in a session of its own; past ``timeout`` seconds, SIGABRT to the whole process
    group (with ``PYTHONFAULTHANDLER=1`` each Python process prints its threads' stacks), then fail
    with what they printed."""
    import signal

    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGABRT)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        pytest.fail(f"{' '.join(argv)} ran over {timeout:.0f} s; the stacks faulthandler printed:\n{out}\n{err}")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)
