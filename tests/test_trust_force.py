"""Issue 23: --force replaces only environments; no orphans, no stray files, no hangs.

Real processes, real signals, real symlinks, real FIFOs, a real second user (``envtool-user``).
A create of the ``tiny`` spec (a bare venv) takes a few seconds; refusals happen before any build.
"""
from __future__ import annotations

import fcntl
import json
import os
import pwd
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, default_stop_signals, run_envtool
from helpers.speed import scaled

TINY = "name: tiny\nengine: venv\n"


@pytest.fixture
def world(tmp_path):
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "tiny.yaml").write_text(TINY)
    # PYTHONPATH: this checkout's envtool also when a test runs it from another directory
    env = {"ENVTOOL_SPEC_PATH": str(specs), "ENVTOOL_CACHE_DIR": str(tmp_path / "cache"), "ENVTOOL_CACHE_PATH": "",
           "PYTHONPATH": str(REPO)}
    return tmp_path, env


def start(argv, env, cwd=REPO, **kw):
    kw.setdefault("preexec_fn", default_stop_signals)  # the nohup test passes its own
    return subprocess.Popen([sys.executable, "-m", "envtool", *map(str, argv)], env=dict(os.environ, **env), cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def wait_for_build(parent: Path, name: str, timeout: float | None = None) -> Path:
    deadline = time.monotonic() + (scaled(120) if timeout is None else timeout)
    while time.monotonic() < deadline:
        found = [p for p in parent.glob(f".{name}.envtool-build-*") if (p / "bin").is_dir()]
        if found:
            return found[0]
        time.sleep(0.02)
    raise AssertionError("the build directory never appeared")


def descendants(pid: int):
    """PIDs of the live (not zombie) descendants of ``pid``, from /proc."""
    parents = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                fields = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    out, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier and p not in out}
        out |= frontier
    return out


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def kill_by_pid(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def leftovers(parent: Path):
    return sorted(p.name for p in parent.iterdir() if ".envtool-" in p.name)


def snapshot(root: Path):
    return sorted((str(p.relative_to(root)), p.is_dir() or p.read_bytes()) for p in root.rglob("*"))


def fake_env(root: Path) -> Path:
    """A directory that is an environment only by its ``pyvenv.cfg`` (the marker ``--force`` looks for)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (root / "work.txt").write_text("precious")
    return root


# ----------------------------------------------------------------------------- item 1: replace only environments
@pytest.mark.parametrize("case", ["not-an-env", "cwd", "ancestor-of-cwd", "home", "cache-root", "inside-cache",
                                  "site-cache", "symlink-to-env", "symlink-to-root"])
def test_force_refuses_what_is_not_a_replaceable_environment(world, case):
    tmp_path, env = world
    cwd = tmp_path / "project" / "sub"
    cwd.mkdir(parents=True)
    (cwd / "thesis.tex").write_text("chapter 1")
    cache = Path(env["ENVTOOL_CACHE_DIR"])
    if case == "not-an-env":
        target = tmp_path / "thesis"
        target.mkdir()
        (target / "ch1.tex").write_text("precious")
        why = "not an environment"
    elif case == "cwd":
        fake_env(cwd)
        target, why = Path("."), "is the current directory"
    elif case == "ancestor-of-cwd":
        fake_env(tmp_path / "project")
        target, why = Path("../b/.."), "an ancestor of the current directory"
    elif case == "home":
        home = fake_env(tmp_path / "home")
        env = dict(env, HOME=str(home))
        target, why = home, "your home directory"
    elif case == "cache-root":
        target, why = fake_env(cache), "is the envtool cache"
    elif case == "inside-cache":
        target, why = fake_env(cache / "horovod-wheels"), "inside the envtool cache"
    elif case == "site-cache":
        site = fake_env(tmp_path / "site-cache")
        env = dict(env, ENVTOOL_CACHE_PATH=str(site))
        target, why = site, "site cache"
    elif case == "symlink-to-env":
        real = fake_env(tmp_path / "real-env")
        target = tmp_path / "link"
        target.symlink_to(real)
        why = "symbolic link"
    else:
        target = tmp_path / "rootlink"
        target.symlink_to("/")
        why = "symbolic link"
    before = snapshot(tmp_path)
    proc = run_envtool("create", "tiny", "--prefix", target, "--force", env=env, cwd=cwd, timeout=scaled(120))
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert why in proc.stderr and "nothing was touched" in proc.stderr, proc.stderr
    assert "environment ready" not in proc.stdout
    assert snapshot(tmp_path) == before  # nothing touched: no lock file, no build directory, no symlink
    for parent in {tmp_path, cwd.parent, tmp_path.parent}:
        assert not [p for p in parent.iterdir() if ".envtool-" in p.name]


@pytest.mark.parametrize("command", ["clone", "create --clone"])
def test_clone_through_a_symlink_into_the_source_is_refused(world, command):
    tmp_path, env = world
    source = tmp_path / "src"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(source)], check=True)
    alias = tmp_path / "ALIAS"
    alias.symlink_to(source)
    before = snapshot(source)
    if command == "clone":
        argv = ["clone", source, "--prefix", alias / "inner", "--mode", "copy"]
    else:
        argv = ["create", "tiny", "--clone", source, "--prefix", alias / "inner"]
    proc = run_envtool(*argv, env=env, timeout=scaled(300))
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "inside the clone source" in proc.stderr and str(source / "inner") in proc.stderr
    assert snapshot(source) == before


# ----------------------------------------------------------------------------- item 5: the lock file
def test_a_planted_lock_symlink_is_refused_not_followed(world):
    tmp_path, env = world
    victim = tmp_path / "victim"
    (tmp_path / "envs").mkdir()
    lock = tmp_path / "envs" / ".tiny.envtool-lock"
    lock.symlink_to(victim)
    started = time.monotonic()
    proc = run_envtool("create", "tiny", "--prefix", tmp_path / "envs" / "tiny", env=env, timeout=scaled(60))
    assert proc.returncode == 2, proc.stderr
    assert time.monotonic() - started < scaled(30)
    assert str(lock) in proc.stderr and "symbolic link" in proc.stderr
    assert not os.path.lexists(victim)
    assert not (tmp_path / "envs" / "tiny").exists()


def test_another_users_lock_file_is_refused_naming_the_owner(world):
    tmp_path, env = world
    user = pwd.getpwnam("envtool-user")
    (tmp_path / "envs").mkdir()
    lock = tmp_path / "envs" / ".tiny.envtool-lock"
    lock.write_text("")
    os.chown(lock, user.pw_uid, user.pw_gid)
    proc = run_envtool("create", "tiny", "--prefix", tmp_path / "envs" / "tiny", env=env, timeout=scaled(60))
    assert proc.returncode == 2, proc.stderr
    assert "envtool-user" in proc.stderr and str(lock) in proc.stderr
    assert lock.exists() and os.stat(lock).st_uid == user.pw_uid
    assert not (tmp_path / "envs" / "tiny").exists()


def test_waiting_for_a_held_lock_is_bounded_and_says_for_whom(world):
    tmp_path, env = world
    (tmp_path / "envs").mkdir()
    lock = tmp_path / "envs" / ".tiny.envtool-lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, b"424242\n")
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        started = time.monotonic()
        proc = run_envtool("create", "tiny", "--prefix", tmp_path / "envs" / "tiny",
                           env=dict(env, ENVTOOL_LOCK_TIMEOUT="2"), timeout=scaled(60))
        took = time.monotonic() - started
    finally:
        os.close(fd)
    assert proc.returncode == 2, proc.stderr
    assert took < scaled(30)
    assert "waiting for another envtool (pid 424242)" in proc.stderr
    assert "still works on" in proc.stderr and "ENVTOOL_LOCK_TIMEOUT" in proc.stderr
    assert not (tmp_path / "envs" / "tiny").exists()


# ----------------------------------------------------------------------------- item 5: FIFOs and devices as input
@pytest.mark.parametrize("argv", [("check-build", "--from-file", "{fifo}"), ("show", "{fifo}"),
                                  ("show", "cpu-horovod", "--site-file", "{fifo}"),
                                  ("create", "tiny", "--prefix", "{tmp}/e", "--lock", "{fifo}"),
                                  ("create", "tiny", "--prefix", "{tmp}/e", "--lock", "/dev/zero"),
                                  ("show", "/dev/zero")])
def test_a_fifo_or_a_device_as_input_is_refused_at_once(world, argv):
    tmp_path, env = world
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    args = [a.format(fifo=fifo, tmp=tmp_path) for a in argv]
    started = time.monotonic()
    proc = run_envtool(*args, env=env, timeout=scaled(60))
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert time.monotonic() - started < scaled(30)
    named = str(fifo) if "{fifo}" in argv else "/dev/zero"
    assert named in proc.stderr and ("FIFO" in proc.stderr or "character device" in proc.stderr), proc.stderr
    assert not (tmp_path / "e").exists()


# ----------------------------------------------------------------------------- item 5: signals, children, TMPDIR
@pytest.mark.parametrize("sig", ["SIGQUIT", "SIGUSR1", "SIGALRM"])
def test_other_fatal_signals_clean_up_like_sigterm(world, sig):
    tmp_path, env = world
    target = tmp_path / "envs" / "tiny"
    proc = start(["create", "tiny", "--prefix", target], env)
    wait_for_build(target.parent, "tiny")
    kids = descendants(proc.pid)
    proc.send_signal(getattr(signal, sig))
    out, err = proc.communicate(timeout=scaled(120))
    deadline = time.monotonic() + scaled(3)
    while time.monotonic() < deadline and [p for p in kids if alive(p)]:
        time.sleep(0.05)
    left = [p for p in kids if alive(p)]
    kill_by_pid(left)  # the test's own clean-up, when the check fails
    assert proc.returncode == 130, err
    assert f"interrupted by {sig}" in err and "build log:" in err
    assert leftovers(target.parent) == []  # no build directory, no lock file, no temporary directory
    assert not left


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_nohup_keeps_sighup_ignored(world):
    tmp_path, env = world
    target = tmp_path / "envs" / "tiny"
    proc = start(["create", "tiny", "--prefix", target], env,
                 preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))  # what nohup(1) does
    wait_for_build(target.parent, "tiny")
    proc.send_signal(signal.SIGHUP)
    out, err = proc.communicate(timeout=scaled(300))
    assert proc.returncode == 0, err
    assert (target / "bin" / "python").exists()
    assert leftovers(target.parent) == []


def _as_a_background_job():
    """What a POSIX shell without job control does for ``cmd &``: SIGINT and SIGQUIT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGQUIT, signal.SIG_IGN)


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_a_background_jobs_ignored_sigint_stays_ignored_and_sigterm_still_stops_it(world):
    """Issue 37's "create exited 0 after SIGINT": a rehearsal started in the background had pytest,
    and so every envtool it started, ignore SIGINT. envtool keeps it ignored (a terminal's Ctrl-C must
    not reach a background job): the environment is placed and the exit is 0. SIGTERM still stops it."""
    tmp_path, env = world
    target = tmp_path / "envs" / "tiny"
    proc = start(["create", "tiny", "--prefix", target], env, preexec_fn=_as_a_background_job)
    wait_for_build(target.parent, "tiny")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=scaled(300))
    assert proc.returncode == 0, err
    assert (target / "bin" / "python").exists() and leftovers(target.parent) == []
    other = tmp_path / "envs" / "other"
    proc = start(["create", "tiny", "--prefix", other], env, preexec_fn=_as_a_background_job)
    wait_for_build(other.parent, "other")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=scaled(300))
    assert proc.returncode == 130, err
    assert not other.exists() and leftovers(other.parent) == []


def test_children_use_a_private_tmpdir_that_goes_with_the_build(world):
    tmp_path, env = world
    target = tmp_path / "envs" / "tiny"
    shared_tmp = tmp_path / "shared-tmp"
    shared_tmp.mkdir()
    proc = start(["create", "tiny", "--prefix", target], dict(env, TMPDIR=str(shared_tmp)))
    build = wait_for_build(target.parent, "tiny")
    # beside the target, or (this test's path is long: Unix sockets under it would not fit) a short
    # one under the system's temporary directory — never the shared TMPDIR itself
    from envtool.steps.kernel.transaction import private_tmp

    expected, stem = private_tmp(target)
    if stem is None:
        private = [p for p in target.parent.iterdir() if p.name.startswith(".tiny.envtool-tmp-")]
    else:
        private = [p for p in expected.parent.iterdir() if p.name.startswith(stem)]
    assert len(private) == 1 and (os.stat(private[0]).st_mode & 0o777) == 0o700
    assert len(str(private[0])) <= 48 + len(".tiny.envtool-tmp-") or stem is None
    envs = []
    for pid in descendants(proc.pid):
        try:
            if b"watched = set()" not in Path(f"/proc/{pid}/cmdline").read_bytes():  # not envtool's guard
                envs.append(Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))
        except OSError:
            pass
    assert envs and all(f"TMPDIR={private[0]}".encode() in e for e in envs), envs
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=scaled(120))
    assert proc.returncode == 130, err
    assert list(shared_tmp.iterdir()) == []  # nothing of ensurepip's (pip-*.whl, cacert.pem) in the shared TMPDIR
    assert leftovers(target.parent) == [] and not build.exists()
    assert not private[0].exists()


def test_kill_9_takes_the_children_with_it(world):
    tmp_path, env = world
    target = tmp_path / "envs" / "tiny"
    proc = start(["create", "tiny", "--prefix", target], env)
    wait_for_build(target.parent, "tiny")
    kids = [p for p in descendants(proc.pid) if alive(p)]
    assert kids
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + scaled(3)
    while time.monotonic() < deadline and [p for p in kids if alive(p)]:
        time.sleep(0.05)
    left = [p for p in kids if alive(p)]
    kill_by_pid(left)  # the test's own clean-up, when the check fails
    assert not left, "children outlived envtool's kill -9"


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_the_next_run_stops_a_dead_runs_stragglers_before_sweeping(world):
    tmp_path, env = world
    target = tmp_path / "envs" / "tiny"
    target.parent.mkdir(parents=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = target.parent / f".tiny.envtool-build-{dead.pid}"
    stale.mkdir()
    # the dead run's private TMPDIR with its run marker: what proves the build directory envtool's
    from envtool.steps.kernel.transaction import RUN_MARKER, private_tmp

    run_tmp = private_tmp(target, dead.pid)[0]
    run_tmp.mkdir()
    (run_tmp / RUN_MARKER).write_text(json.dumps({"prefix": str(target), "pid": dead.pid}))
    # a grandchild of the dead run (its own session, so no death signal reached it) still writes there
    writer = subprocess.Popen(["sh", "-c", 'while :; do mkdir -p "$D/lib" && : > "$D/lib/f$$"; sleep 0.01; done'],
                              env=dict(os.environ, D=str(stale), ENVTOOL_BUILD=str(stale)), start_new_session=True)
    try:
        deadline = time.monotonic() + scaled(10)
        while not list((stale / "lib").glob("f*")) and time.monotonic() < deadline:  # it writes there
            time.sleep(0.01)
        proc = run_envtool("create", "tiny", "--prefix", target, env=env, timeout=scaled(300))
        assert proc.returncode == 0, proc.stderr
        assert f"removed {stale}" in proc.stderr
        deadline = time.monotonic() + scaled(10)
        while writer.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert writer.poll() is not None, "the dead run's straggler still runs"
        assert not stale.exists() and not run_tmp.exists()
    finally:
        if writer.poll() is None:
            writer.kill()
        writer.wait()


# ----------------------------------------------------------------------------- item 5: validate's children
HOROVODRUN = """import os, subprocess, sys, time
# a child in its own session, as a launcher's; its pid goes to a file for the test
child = subprocess.Popen(["sleep", "300"], start_new_session=True, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
open(os.environ["PIDS"], "a").write("%d %d\\n" % (os.getpid(), child.pid))
print("started", flush=True)
if os.environ.get("LINGER"):
    time.sleep(300)
"""


@pytest.mark.parametrize("how", ["exits", "SIGTERM", "SIGHUP", "kill -9"])
def test_validate_leaves_no_children(world, how):
    tmp_path, env = world
    prefix = tmp_path / "env"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python").symlink_to(sys.executable)
    (prefix / "bin" / "horovodrun").write_text(HOROVODRUN)
    pids = tmp_path / "pids"
    env = dict(env, PIDS=str(pids), **({} if how == "exits" else {"LINGER": "1"}))
    proc = start(["validate", "--prefix", prefix], env)
    deadline = time.monotonic() + scaled(60)
    while time.monotonic() < deadline and not (pids.exists() and pids.read_text().endswith("\n")):
        time.sleep(0.05)
    assert pids.exists(), "the fake horovodrun never started its child"
    kids = [int(x) for x in pids.read_text().split()]
    if how == "exits":
        proc.communicate(timeout=scaled(120))
        assert proc.returncode in (1, 2)
    elif how == "kill -9":
        proc.kill()
        proc.wait()
    else:
        proc.send_signal(getattr(signal, how))
        out, err = proc.communicate(timeout=scaled(60))
        assert proc.returncode == 130, err
    deadline = time.monotonic() + scaled(3)
    while time.monotonic() < deadline and [p for p in kids if alive(p)]:
        time.sleep(0.05)
    left = [p for p in kids if alive(p)]
    kill_by_pid(left)  # the test's own clean-up, when the check fails
    assert not left, "validate's children outlived it"


def test_a_fifo_among_scripts_is_skipped_not_read(world):
    tmp_path, env = world
    prefix = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True)
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "train.py").write_text("import os\nos.environ['OMP_NUM_THREADS'] = '1'\n")
    os.mkfifo(scripts / "pipe.py")
    started = time.monotonic()
    proc = run_envtool("doctor", "--prefix", prefix, "--script", scripts, env=env, timeout=scaled(60))
    assert time.monotonic() - started < scaled(45)
    assert proc.returncode in (0, 1), proc.stderr
    assert "check crashed" not in proc.stdout + proc.stderr


def test_publish_force_refuses_a_directory_that_is_not_an_environment(world):
    tmp_path, env = world
    (tmp_path / "specs" / "tiny.yaml").write_text(TINY + 'distribution: {name: site, version: "1.0"}\n')
    squatter = tmp_path / "sw" / "tiny" / "1.0"
    squatter.mkdir(parents=True)
    (squatter / "data.txt").write_text("someone's")
    squatter.chmod(0o700)
    (squatter / "data.txt").chmod(0o600)
    before = [(p, os.lstat(p).st_mode) for p in [squatter, squatter / "data.txt"]]
    proc = run_envtool("publish", "tiny", "--root", tmp_path / "sw", "--modulefiles", tmp_path / "mods", "--force",
                       env=env, timeout=scaled(300))
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert str(squatter) in proc.stderr and "not an environment" in proc.stderr, proc.stderr
    assert [(p, os.lstat(p).st_mode) for p in [squatter, squatter / "data.txt"]] == before
    assert (squatter / "data.txt").read_text() == "someone's"
