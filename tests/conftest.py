"""Shared fixtures.

``cpu_horovod_env``: a real ``cpu-horovod`` environment (PyTorch 2.13.0 CPU + Horovod 0.28.1
with Gloo and MPI) made once per test session with ``envtool create``. The Horovod wheel
cache (``~/.cache/envtool``) makes a second session's build take seconds. Set
``ENVTOOL_TEST_CPU_ENV=/path`` to reuse an existing environment while developing.

``cpu_tensorflow_env``: the same for ``cpu-tensorflow-horovod`` (TensorFlow 2.12.1 CPU + Horovod
0.28.1 built with TensorFlow, Gloo and MPI): a directory holding the environment (``env/``) and
what ``envtool create --json`` printed (``create.json``). ``ENVTOOL_TEST_TF_ENV=/dir`` reuses one.

``multinode_cluster``: a real 2-node Slurm on this machine, each node its own network, UTS and
mount namespace (tests/helpers/cluster.py), started once per session when a test asks for it and
torn down at the end even when tests fail. Its nodes share everything but ``/tmp``; pytest's base
temporary directory is bind-mounted into their private ``/tmp``, so ``tmp_path`` is shared.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from envtool.core.procs import EXIT_SIGNALS  # noqa: E402
from helpers import shared, speed  # noqa: E402  (tests/ is on sys.path from here on)
from helpers.suite_plugin import (  # noqa: E402,F401  (hooks: the tiers, the xdist groups, the phases)
    keep_group_order, pytest_collection_modifyitems, pytest_runtest_makereport, pytest_runtest_setup)

def default_stop_signals():
    """``preexec_fn`` for a child the test will signal: envtool's stop signals at their default action,
    whatever pytest inherited (``nohup pytest`` ignores SIGHUP; a shell's background job, SIGINT and
    SIGQUIT). envtool keeps a signal that was ignored at start ignored, so an inherited ``SIG_IGN``
    would make a signal test meaningless. (Nothing is imported here: the child of a fork runs it.)"""
    for sig in EXIT_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)


#: what :func:`pytest_configure` found ignored in pytest's own process and reset
_RESET_SIGNALS: list = []


#: variables a pytest-xdist worker starts with set to other values than pytest's own process had
#: (COLUMNS=80, LINES=24): envtool fits its tables to COLUMNS, so the worker takes the controller's
_CONTROLLER_ENV = ("COLUMNS", "LINES")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """(pytest-xdist, in the controller) hand each worker the controller's :data:`_CONTROLLER_ENV`."""
    node.workerinput["envtool_controller_env"] = {k: os.environ.get(k) for k in _CONTROLLER_ENV}


def pytest_configure(config):
    """SIGINT and SIGQUIT back to their usual actions in pytest's process when it started ignoring them.

    A POSIX shell without job control starts an asynchronous command (``… &``, how CI scripts and
    rehearsals are often started) with SIGINT and SIGQUIT ignored (POSIX, Shell Command Language
    2.11), and every ``envtool`` the suite starts inherits that: envtool then rightly leaves them
    ignored, as for ``nohup``. A rehearsal started that way saw ``create`` exit 0 after the test's
    SIGINT (issue 37). The tests that need an ignored signal set it themselves (``preexec_fn``)."""
    keep_group_order(config)  # in pytest-xdist's controller, which hands out the groups
    for name, value in getattr(config, "workerinput", {}).get("envtool_controller_env", {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    for sig, handler in ((signal.SIGINT, signal.default_int_handler), (signal.SIGQUIT, signal.SIG_DFL)):
        if signal.getsignal(sig) == signal.SIG_IGN:
            signal.signal(sig, handler)
            _RESET_SIGNALS.append(signal.Signals(sig).name)


def pytest_report_header(config):
    if _RESET_SIGNALS:
        return [f"envtool: {', '.join(_RESET_SIGNALS)} were ignored in pytest's process (a background job); "
                "reset to their usual actions for the children the tests start"]
    return None


def run_envtool(*args, env=None, cwd=None, timeout=3600, input=None):
    """Run the real ``envtool`` CLI in a subprocess; returns CompletedProcess (text)."""
    full_env = dict(os.environ)
    full_env.pop("ENVTOOL_DEBUG", None)
    if env:
        full_env.update(env)
    return subprocess.run([sys.executable, "-m", "envtool", *map(str, args)], capture_output=True, text=True,
                          env=full_env, cwd=cwd or REPO, timeout=timeout, input=input)


def _build_cpu_horovod(prefix: Path) -> None:
    # its registry record goes beside it, never into the developer's ~/.local/state (the build may
    # start before _private_state_home has set XDG_STATE_HOME)
    env = {} if os.environ.get("XDG_STATE_HOME") else {"XDG_STATE_HOME": str(prefix.parent / "state")}
    proc = shared.run_stoppable([sys.executable, "-m", "envtool", "create", "cpu-horovod", "--prefix", str(prefix)],
                                cwd=REPO, timeout=speed.scaled(3600), env=env)
    assert proc.returncode == 0, f"envtool create cpu-horovod failed:\n{proc.stdout}\n{proc.stderr}"


def _reused_cpu_env():
    reuse = os.environ.get("ENVTOOL_TEST_CPU_ENV")
    return Path(reuse) if reuse and (Path(reuse) / "bin" / "horovodrun").exists() else None


@pytest.fixture(scope="session")
def cpu_horovod_env(tmp_path_factory) -> Path:
    """Prefix of a real cpu-horovod environment, created once per run (every pytest-xdist worker of
    the run shares it: :func:`helpers.shared.once`; the build starts with the run when a collected
    test needs it, see :func:`pytest_collection_finish`)."""
    return _reused_cpu_env() or shared.once(tmp_path_factory, "cpu-horovod", _build_cpu_horovod)


def _build_cpu_tensorflow(target: Path) -> None:
    """``envtool create`` of specs/cpu-tensorflow-horovod.yaml with one line added: Horovod's Debug
    build (``horovod.extra_env: {HOROVOD_DEBUG: "1"}``; -O0 instead of RelWithDebInfo's -O3,
    horovod@v0.28.1:setup.py), as the site twin's own Horovod (tests/twin/make_twin.py): its compile
    took 144 s here against 207 s, and these tests check what the build has and does, not its
    speed. Everything else is the spec's."""
    target.mkdir()
    text = (REPO / "specs" / "cpu-tensorflow-horovod.yaml").read_text()
    anchor = "  gpu_operations: null\n"
    assert anchor in text, "specs/cpu-tensorflow-horovod.yaml changed: update tests/conftest.py"
    spec = target / "cpu-tensorflow-horovod.yaml"
    spec.write_text(text.replace(anchor, anchor + '  extra_env: {HOROVOD_DEBUG: "1"}\n', 1))
    env = {} if os.environ.get("XDG_STATE_HOME") else {"XDG_STATE_HOME": str(target / "state")}
    proc = shared.run_stoppable([sys.executable, "-m", "envtool", "create", str(spec), "--prefix",
                                 str(target / "env"), "--json"], cwd=REPO, timeout=speed.scaled(3600), env=env)
    assert proc.returncode == 0, f"envtool create cpu-tensorflow-horovod failed:\n{proc.stdout}\n{proc.stderr}"
    (target / "create.json").write_text(proc.stdout)


#: The TensorFlow tests (tests/test_tensorflow.py) run in every full run, CI's included (issue 40:
#: their Horovod build is about 7 minutes here, overlapping the tests that do not need it);
#: ENVTOOL_TEST_TENSORFLOW=0 leaves them out (a developer's quick run of the slow tier).
TENSORFLOW_TESTS = os.environ.get("ENVTOOL_TEST_TENSORFLOW", "1") != "0" or bool(os.environ.get("ENVTOOL_TEST_TF_ENV"))


def _reused_tf_env():
    reuse = os.environ.get("ENVTOOL_TEST_TF_ENV")
    return Path(reuse) if reuse and (Path(reuse) / "env" / "bin" / "horovodrun").exists() else None


@pytest.fixture(scope="session")
def cpu_tensorflow_env(tmp_path_factory) -> Path:
    """A directory with a real cpu-tensorflow-horovod environment (``env/``) and its create's JSON
    (``create.json``), made once per run and shared by the workers (as :func:`cpu_horovod_env`)."""
    return _reused_tf_env() or shared.once(tmp_path_factory, "cpu-tensorflow", _build_cpu_tensorflow)


def pytest_sessionfinish(session, exitstatus):
    """A build :func:`pytest_collection_finish` started is waited for (under pytest-xdist the other
    worker may be waiting for it), unless the session was interrupted or stopped early (``-x``): then
    it is stopped with SIGTERM, which envtool answers by removing its build directory."""
    interrupted = exitstatus == pytest.ExitCode.INTERRUPTED or bool(session.shouldstop) or bool(session.shouldfail)
    shared.finish(interrupted)


def pytest_collection_finish(session):
    """Start the cpu-horovod and cpu-tensorflow environments' builds (a Horovod compile each,
    minutes) as the run starts when a collected test will use them, so they overlap the tests that do
    not (one build per run: every worker starts the thread, the first takes the lock and builds,
    the others find it built); the TensorFlow build waits for the PyTorch one."""
    if getattr(session.config.option, "collectonly", False):
        return

    def wanted(fixture):
        return any(fixture in getattr(item, "fixturenames", ()) for item in session.items)

    torch_first = [] if _reused_cpu_env() or not wanted("cpu_horovod_env") else [("cpu-horovod", _build_cpu_horovod)]
    if torch_first:
        shared.start_early(session.config._tmp_path_factory, "cpu-horovod", _build_cpu_horovod)
    if TENSORFLOW_TESTS and not _reused_tf_env() and wanted("cpu_tensorflow_env"):  # after the PyTorch build: one compile at a time
        shared.start_early(session.config._tmp_path_factory, "cpu-tensorflow", _build_cpu_tensorflow, after=torch_first)


@pytest.fixture(scope="session")
def multinode_cluster(tmp_path_factory):
    """A running 2-node :class:`helpers.cluster.Cluster` (skipped where namespaces cannot be made;
    a failure under ``CI``)."""
    from helpers import cluster

    why = cluster.ensure_installed() or cluster.can_make_namespaces()
    if why:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(f"no multi-node cluster here: {why}")
    # the run's whole temporary tree is the cluster's shared file system: the worker's own tmp_path
    # and what every worker shares (helpers.shared: the cpu-horovod environment, images)
    c = cluster.start(tmp_path_factory.mktemp("envtool-tc"), nodes=2, shared=[shared.run_root(tmp_path_factory)])
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="session", autouse=True)
def _private_state_home(tmp_path_factory):
    """``create``/``clone``/``publish`` record each environment under ``$XDG_STATE_HOME/envtool``
    (what ``envtool list`` reads): every test session gets its own, so no run leaves records in
    the user's home nor reads another run's."""
    if os.environ.get("XDG_STATE_HOME"):
        yield
        return
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state"))
    try:
        yield
    finally:
        os.environ.pop("XDG_STATE_HOME", None)


@pytest.fixture(autouse=True)
def _signal_dispositions_unchanged():
    """No test may leave one of envtool's stop signals ignored in pytest's own process: every later
    child (an ``envtool create`` the suite starts) inherits SIG_IGN across exec, and envtool then
    rightly leaves that signal ignored, as for ``nohup`` — a CI run once saw ``create`` finish with
    exit 0 after SIGQUIT, SIGUSR1 and SIGALRM because an earlier in-process test left them ignored."""
    before = {sig: signal.getsignal(sig) for sig in EXIT_SIGNALS}
    yield
    changed = {sig: signal.getsignal(sig) for sig, h in before.items() if signal.getsignal(sig) != h}
    for sig in changed:  # only those: re-installing an unchanged one would drop a handler set
        handler = before[sig]  # outside Python (faulthandler.register), which getsignal shows as None
        signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
    assert not changed, ("the test left signal handlers changed in pytest's process: "
                         f"{ {signal.Signals(s).name: h for s, h in changed.items()} }")


@pytest.fixture(scope="session", autouse=True)
def _prompt_job_polls():
    """``validate --submit`` looks at its job at most every ``$ENVTOOL_JOB_POLL`` s (default 5): the
    suite sets 1, so each submitted job's end is noticed within a second instead of five (the test
    clusters answer squeue at once; a value the caller set wins)."""
    if os.environ.get("ENVTOOL_JOB_POLL"):
        yield
        return
    os.environ["ENVTOOL_JOB_POLL"] = "1"
    try:
        yield
    finally:
        os.environ.pop("ENVTOOL_JOB_POLL", None)
