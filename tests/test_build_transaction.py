"""Nothing lost: the build-then-rename shared by create and clone (issue 12, "Data loss and races").

Real processes, real signals, real renames: a directory that appears at the target is never
deleted, --force swaps whole, concurrent runs are serialised, repeated signals still clean up,
stale build directories of dead processes are swept, children die with their process group.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, default_stop_signals, run_envtool
from envtool.core import procs
from envtool.core.errors import Interrupted, StepFailed, TargetExists, UsageError
from envtool.steps.kernel.runner import Runner
from envtool.steps.kernel.transaction import RUN_MARKER, BuildTransaction, move_into_place, private_tmp
from helpers.speed import scaled

TINY = "name: tiny\nengine: venv\n"


@pytest.fixture
def world(tmp_path):
    """A spec path with the ``tiny`` spec (a bare venv: a create takes a few seconds) and a cache."""
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "tiny.yaml").write_text(TINY)
    env = {"ENVTOOL_SPEC_PATH": str(specs), "ENVTOOL_CACHE_DIR": str(tmp_path / "cache")}
    return tmp_path, env


def start_create(tmp_path, env, target, *extra):
    return subprocess.Popen([sys.executable, "-m", "envtool", "create", "tiny", "--prefix", str(target), *extra],
                            env=dict(os.environ, **env), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=default_stop_signals)


def wait_for_build(parent: Path, name: str, timeout: float | None = None) -> Path:
    """The build directory once its venv has a bin/ (the create is mid-way)."""
    deadline = time.monotonic() + (scaled(120) if timeout is None else timeout)
    while time.monotonic() < deadline:
        found = [p for p in parent.glob(f".{name}.envtool-build-*") if (p / "bin").is_dir()]
        if found:
            return found[0]
        time.sleep(0.02)
    raise AssertionError("the build directory never appeared")


def running_in_group(pgid: int):
    """Processes of group ``pgid`` that still run (zombies waiting for init to reap them do not count)."""
    out = subprocess.run(["ps", "-o", "pid=,stat=", "-g", str(pgid)], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.split() and not line.split()[1].startswith("Z")]


def envtool_leftovers(parent: Path):
    return sorted(p.name for p in parent.iterdir() if ".envtool-" in p.name)


# ----------------------------------------------------------------------------- move_into_place
def test_move_refuses_an_empty_directory_that_appeared(tmp_path):
    # a plain rename(2) silently replaces an empty directory: this one must not
    build, target = tmp_path / ".t.envtool-build-1", tmp_path / "t"
    build.mkdir()
    (build / "new.txt").write_text("new")
    target.mkdir()
    with pytest.raises(TargetExists) as info:
        move_into_place(build, target, replace=None)
    assert target.is_dir() and list(target.iterdir()) == []
    assert info.value.kept and (info.value.kept / "new.txt").read_text() == "new"
    assert info.value.exit_status == 2


def test_force_replaces_only_the_directory_it_was_given(tmp_path):
    build, target = tmp_path / ".t.envtool-build-1", tmp_path / "t"
    target.mkdir()
    (target / "old.txt").write_text("old")
    st = os.lstat(target)
    build.mkdir()
    (build / "new.txt").write_text("new")
    move_into_place(build, target, replace=(st.st_dev, st.st_ino))
    assert (target / "new.txt").read_text() == "new" and not (target / "old.txt").exists()
    assert not build.exists()
    # a different directory at the target (someone replaced it meanwhile) is left alone
    build.mkdir()
    (build / "newer.txt").write_text("newer")
    with pytest.raises(TargetExists):
        move_into_place(build, target, replace=(st.st_dev, st.st_ino))
    assert (target / "new.txt").read_text() == "new"


def test_commit_removes_cachedir_tag_from_the_prefix_only(tmp_path):
    log = tmp_path / "log"
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "CACHEDIR.TAG").write_text("Signature: 8a477f597d28d172789f06886806bc55\n")
    with BuildTransaction(tmp_path / "env", False, log, say=lambda t: None) as tx:
        tx.build.mkdir()
        (tx.build / "CACHEDIR.TAG").write_text("Signature: 8a477f597d28d172789f06886806bc55\n")
        (tx.build / "bin").mkdir()
        tx.commit()
    assert not (tmp_path / "env" / "CACHEDIR.TAG").exists()
    assert (tmp_path / "env" / "bin").is_dir()
    assert (cache / "CACHEDIR.TAG").exists()
    assert envtool_leftovers(tmp_path) == []


def test_a_failure_inside_the_transaction_removes_the_build_and_says_what_is_left(tmp_path):
    target = tmp_path / "env"
    target.mkdir()
    (target / "pyvenv.cfg").write_text("home = /usr/bin\n")  # --force replaces only an environment
    (target / "keep").write_text("old")
    log = tmp_path / "log"
    with pytest.raises(StepFailed) as info:
        with BuildTransaction(target, True, log, say=lambda t: None) as tx:
            tx.build.mkdir()
            raise StepFailed("x", "boom")
    assert info.value.outcome == f"the old environment at {target} is intact"
    assert info.value.log == log and "FAILED" in log.read_text()
    assert (target / "keep").read_text() == "old"
    assert envtool_leftovers(tmp_path) == []


def test_stale_build_directories_of_dead_processes_are_swept(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f".env.envtool-build-{dead.pid}"
    (stale / "lib").mkdir(parents=True)
    # what a build writes as soon as it starts: its private TMPDIR with the run marker naming the prefix
    run_tmp = private_tmp(tmp_path / "env", dead.pid)[0]
    run_tmp.mkdir()
    (run_tmp / RUN_MARKER).write_text(json.dumps({"prefix": str(tmp_path / "env"), "pid": dead.pid}))
    live = tmp_path / f".env.envtool-build-{os.getppid()}"  # our parent runs: not ours to remove
    live.mkdir()
    said = []
    with BuildTransaction(tmp_path / "env", False, tmp_path / "log", say=said.append) as tx:
        assert sorted(tx.swept) == sorted([stale, run_tmp]) and tx.kept == []
    assert not stale.exists() and not run_tmp.exists() and live.exists()
    assert any(str(stale) in s for s in said)


def test_a_look_alike_at_this_runs_own_build_path_stops_the_run_untouched(tmp_path):
    """A directory named as this process's build directory that nothing proves envtool's (an earlier
    process with this PID, or anyone's ``mkdir``) is neither deleted nor built into: exit 2, named."""
    mine = tmp_path / f".env.envtool-build-{os.getpid()}"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match=re.escape(str(mine))) as info:
        with BuildTransaction(tmp_path / "env", False, tmp_path / "log", say=lambda t: None):
            pass
    assert info.value.exit_status == 2
    assert (mine / "notes.txt").read_text() == "mine" and not (tmp_path / "env").exists()
    assert envtool_leftovers(tmp_path) == [mine.name]  # no lock file, no temporary directory left


def _interrupted_create(prefix: Path, env: dict) -> int:
    """A real create transaction of ``prefix`` that dies mid-build (``os._exit`` inside the block, as
    ``kill -9`` would): its build directory and private TMPDIR (with the run marker) stay behind.
    Returns the dead run's PID."""
    code = ("import os, sys; from pathlib import Path; from envtool.steps.kernel.transaction import BuildTransaction\n"
            "t = Path(sys.argv[1])\n"
            "with BuildTransaction(t, False, t.parent / 'dead.log') as tx:\n"
            "    (tx.build / 'lib').mkdir(parents=True); print(os.getpid(), flush=True); os._exit(0)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(prefix)], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, **env}, timeout=scaled(60))
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout)


def test_create_sweeps_only_what_envtool_proves_a_dead_runs(world):
    """Issue 43: create's own sweep deleted any dead-PID ``.NAME.envtool-{build,old,tmp}-N`` beside
    the prefix, PID 0 included: the user's ``envs/.data.envtool-old-0/thesis.tex`` went. It now
    deletes only what envtool's records prove a dead run's copy of this prefix (a real interrupted
    create's build directory and TMPDIR), and leaves each look-alike alone, named on stderr and in
    the build log."""
    tmp_path, env = world
    envs = tmp_path / "envs"
    envs.mkdir()
    target = envs / "tiny"
    pid = _interrupted_create(target, env)
    build, run_tmp = envs / f".tiny.envtool-build-{pid}", private_tmp(target, pid)[0]
    assert (build / "lib").is_dir() and (run_tmp / RUN_MARKER).is_file()
    thesis = envs / ".tiny.envtool-old-0" / "thesis.tex"
    thesis.parent.mkdir()
    thesis.write_text("precious")
    bare = envs / ".tiny.envtool-build-99999999"  # a dead PID, but no run marker, no record
    (bare / "lib").mkdir(parents=True)
    proc = run_envtool("create", "tiny", "--prefix", target, env=env, timeout=scaled(300))
    assert proc.returncode == 0, proc.stderr
    assert thesis.read_text() == "precious" and (bare / "lib").is_dir()
    for look_alike in (thesis.parent, bare):
        line = f"left alone: {look_alike} (not envtool's: no record names {target})"
        assert line in proc.stderr, proc.stderr
        assert line in (target / ".envtool" / "create.log").read_text()
    assert f"removed {build}" in proc.stderr and not build.exists() and not run_tmp.exists(), proc.stderr
    assert (target / "bin" / "python").exists()


# ----------------------------------------------------------------------------- Runner
def test_runner_timeout_holds_when_the_command_prints_nothing(tmp_path):
    runner = Runner(log_path=tmp_path / "log")
    with runner:
        started = time.monotonic()
        with pytest.raises(StepFailed, match="timed out"):
            runner.run(["sh", "-c", "sleep 301"], timeout=1)
        assert time.monotonic() - started < scaled(10)  # at most 50 s (speed.MAX_SLOWDOWN): far from 301
    # the whole process group went: the sleep is gone too
    out = subprocess.run(["ps", "-eo", "stat=,args="], capture_output=True, text=True).stdout
    assert not [l for l in out.splitlines() if l.split()[0][0] != "Z" and l.split(None, 1)[1] == "sleep 301"], out


def test_kill_children_kills_the_whole_process_group():
    proc = procs.popen(["sh", "-c", "sleep 300 & sleep 300 & wait"])
    pgid = proc.pid
    deadline = time.monotonic() + scaled(10)
    while len(running_in_group(pgid)) < 3 and time.monotonic() < deadline:  # sh and its two sleeps
        time.sleep(0.02)
    assert procs.kill_children() == 1
    deadline = time.monotonic() + scaled(10)
    while running_in_group(pgid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert running_in_group(pgid) == []


# ----------------------------------------------------------------------------- the CLI, end to end
@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_a_directory_that_appears_during_create_is_kept_and_the_new_env_beside_it(world):
    tmp_path, env = world
    target = tmp_path / "envs" / "tiny"
    proc = start_create(tmp_path, env, target)
    wait_for_build(target.parent, "tiny")
    target.mkdir()
    (target / "mine.txt").write_text("user data")
    out, err = proc.communicate(timeout=scaled(300))
    assert proc.returncode == 2, err
    assert (target / "mine.txt").read_text() == "user data"
    m = re.search(r"the new environment is kept at (\S+)", err)
    assert m, err
    kept = Path(m.group(1))
    assert (kept / "bin" / "python").exists()
    assert "build log:" in err


def test_concurrent_creates_to_one_prefix_are_serialised(world):
    tmp_path, env = world
    target = tmp_path / "envs" / "tiny"
    first = start_create(tmp_path, env, target)
    wait_for_build(target.parent, "tiny")
    second = run_envtool("create", "tiny", "--prefix", target, env=env, timeout=scaled(300))
    out, err = first.communicate(timeout=scaled(300))
    assert first.returncode == 0, err
    assert second.returncode == 2, second.stderr
    assert "waiting for another envtool" in second.stderr
    assert "exists" in second.stderr
    assert (target / "bin" / "python").exists()
    assert envtool_leftovers(target.parent) == []


@pytest.mark.parametrize("signals", [("SIGINT", "SIGINT"), ("SIGTERM", "SIGINT"), ("SIGTERM", "SIGTERM"),
                                     ("SIGHUP",)])
def test_repeated_signals_still_clean_up_and_print_the_log(world, signals):
    tmp_path, env = world
    target = tmp_path / "envs" / "tiny"
    proc = start_create(tmp_path, env, target)
    wait_for_build(target.parent, "tiny")
    for i, name in enumerate(signals):
        proc.send_signal(getattr(signal, name))
        time.sleep(0.02)  # the second one lands while the first one's clean-up runs
    out, err = proc.communicate(timeout=scaled(120))
    assert proc.returncode == 130, err
    assert "interrupted" in err and "build log:" in err and "nothing was left at" in err
    assert not target.exists()
    assert envtool_leftovers(target.parent) == []


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_sigterm_during_force_says_the_old_environment_is_intact(world):
    tmp_path, env = world
    target = tmp_path / "envs" / "tiny"
    assert run_envtool("create", "tiny", "--prefix", target, env=env, timeout=scaled(300)).returncode == 0
    (target / "marker").write_text("old")
    proc = start_create(tmp_path, env, target, "--force")
    wait_for_build(target.parent, "tiny")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=scaled(120))
    assert proc.returncode == 130
    assert f"the old environment at {target} is intact" in err
    assert "nothing was left" not in err
    assert (target / "marker").read_text() == "old"
    assert envtool_leftovers(target.parent) == []


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_force_replaces_the_old_environment_whole(world):
    tmp_path, env = world
    target = tmp_path / "envs" / "tiny"
    assert run_envtool("create", "tiny", "--prefix", target, env=env, timeout=scaled(300)).returncode == 0
    (target / "marker").write_text("old")
    proc = run_envtool("create", "tiny", "--prefix", target, "--force", env=env, timeout=scaled(300))
    assert proc.returncode == 0, proc.stderr
    assert not (target / "marker").exists() and (target / "bin" / "python").exists()
    assert envtool_leftovers(target.parent) == []


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_kill_9_leaves_a_build_dir_that_the_next_run_removes(world):
    tmp_path, env = world
    target = tmp_path / "envs" / "tiny"
    proc = start_create(tmp_path, env, target)
    build = wait_for_build(target.parent, "tiny")
    proc.kill()
    proc.wait()
    # its children (in their own process group) are orphaned, not stopped: let them finish
    deadline = time.monotonic() + scaled(30)
    while subprocess.run(["pgrep", "-f", str(build)], capture_output=True).returncode == 0 \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    assert build.exists()
    again = run_envtool("create", "tiny", "--prefix", target, env=env, timeout=scaled(300))
    assert again.returncode == 0, again.stderr
    assert f"removed {build}" in again.stderr
    assert not build.exists()


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_sigterm_during_clone_cleans_up(world, tmp_path):
    tmp_path, env = world
    source = tmp_path / "envs" / "tiny"
    assert run_envtool("create", "tiny", "--prefix", source, env=env, timeout=scaled(300)).returncode == 0
    # make the copy long enough to be interrupted: 3000 small files
    big = source / "share" / "data"
    big.mkdir(parents=True)
    for i in range(3000):
        (big / f"f{i}.txt").write_text(f"{source} {i}\n" * 20)
    target = tmp_path / "clones" / "c"
    proc = subprocess.Popen([sys.executable, "-m", "envtool", "clone", str(source), "--prefix", str(target),
                             "--mode", "copy"], env=dict(os.environ, **env), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + scaled(60)
    while time.monotonic() < deadline and not list(target.parent.glob(".c.envtool-build-*")):
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=scaled(120))
    assert proc.returncode in (130, 0), (proc.returncode, err)  # 0 only if the clone won the race
    if proc.returncode == 130:
        assert "build log:" in err and not target.exists()
    assert envtool_leftovers(target.parent) == []


def test_a_signal_whose_exception_was_swallowed_still_stops_the_commit(tmp_path):
    """A SIGTERM that arrives while CPython runs an at-fork callback (logging's ``_releaseLock``
    after a fork for a child) has its exception printed as "Exception ignored in" and dropped; a
    rehearsal's create then ran on and exited 0. The commit must still refuse and clean up."""
    target = tmp_path / "env"
    log = tmp_path / "log"
    # after a signal the transaction leaves the stop signals ignored (the command is on its way
    # out); pytest's process goes on, and its later children must not inherit SIG_IGN
    saved = {sig: signal.getsignal(sig) for sig in procs.EXIT_SIGNALS}  # all seven, not only INT/TERM/HUP
    try:
        with pytest.raises(Interrupted):
            with BuildTransaction(target, False, log, say=lambda t: None) as tx:
                tx.build.mkdir()
                (tx.build / "bin").mkdir()
                try:
                    os.kill(os.getpid(), signal.SIGTERM)
                    time.sleep(5)   # the handler runs here and raises
                except Interrupted:
                    pass            # swallowed, as CPython does for at-fork callbacks
                tx.commit()
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
    assert not target.exists()
    assert envtool_leftovers(tmp_path) == []
