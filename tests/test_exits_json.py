"""Exit statuses and ``--json`` on every path (issue 23, "What to build" item 6).

Each test puts the real CLI in front of one class of condition — a real read-only mount, a real
full filesystem, a real second user, bytes that are not UTF-8, an endless device, real signals
to real processes, bad ``ENVTOOL_*`` variables — and checks the exit status (0 success, 1 a
check or build step failed, 2 input or environment problem, 3 only a bug, 130 interrupted),
that the message names the path and the cause, and that ``--json`` prints one JSON object with
``ok``, ``error`` and ``exit`` on stdout.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import REPO
from helpers.speed import scaled

USER = "envtool-user"
USER_VENV = Path(os.environ.get("ENVTOOL_TEST_USER_VENV", "/opt/envtool-test/venv"))


def envtool(*args, env=None, cwd=None, timeout=None, umask=None, memory=None, stdin=None):
    """The real CLI of this checkout (``args`` may hold bytes: paths that are not UTF-8)."""
    full = dict(os.environ, PYTHONPATH=str(REPO))
    full.pop("ENVTOOL_DEBUG", None)
    full.update(env or {})

    def limits():
        if umask is not None:
            os.umask(umask)
        if memory is not None:  # a bound, so that an unbounded read fails instead of eating the machine
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    argv = [sys.executable, "-m", "envtool", *[a if isinstance(a, bytes) else str(a) for a in args]]
    return subprocess.run(argv, capture_output=True, env=full, cwd=cwd or REPO,
                          timeout=scaled(120) if timeout is None else timeout,
                          preexec_fn=limits, stdin=stdin)


def text(proc) -> str:
    return proc.stderr.decode(errors="replace")


def assert_condition(proc, status, *words):
    """Exit ``status``, no traceback, no internal error, each of ``words`` in the message."""
    err = text(proc)
    assert proc.returncode == status, (proc.returncode, err, proc.stdout[-500:])
    assert "Traceback" not in err and "internal error" not in err, err
    for w in words:
        assert w in err, (w, err)


#: An interpreter every user may run (the test runner's may live under /root).
SYSTEM_PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable


def venv(path: Path) -> Path:
    """A real (small) environment: a venv without pip, over an interpreter every user may run."""
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--without-pip", str(path)], check=True)
    return path


def need_root():
    if os.geteuid() != 0:
        pytest.skip("mounts and a second user need root")


@pytest.fixture
def shared_dir():
    """A directory under /tmp that other users may enter (pytest's tmp_path is 0700)."""
    d = Path(tempfile.mkdtemp(prefix="envtool-exits-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def mount_tmpfs(where: Path, options: str) -> None:
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "envtool-test", str(where)], check=True)


def umount(where: Path) -> None:
    subprocess.run(["umount", "-l", str(where)], check=False)


# ------------------------------------------------------------------ read-only and full filesystems
@pytest.mark.slow  # 8-10 s with two workers: the full suite only (tests/README.md, fast tier)
def test_read_only_filesystem_is_an_input_error_naming_the_path(shared_dir):
    need_root()
    env_dir = venv(shared_dir / "env")
    ro = shared_dir / "ro"
    mount_tmpfs(ro, "ro,size=1m")
    try:
        cache = {"ENVTOOL_CACHE_DIR": str(shared_dir / "cache")}
        for args, path in ((("lock", "--prefix", env_dir, "-o", ro / "env.lock.yml"), ro / "env.lock.yml"),
                           (("sbom", "--prefix", env_dir, "-o", ro / "env.cdx.json"), ro / "env.cdx.json"),
                           (("create", "cpu-horovod", "--prefix", ro / "new"), ro)):
            proc = envtool(*args, env=cache)
            assert_condition(proc, 2, str(path), "read-only")
        # the cache (and so the build log) on the read-only mount: the build stops, exit 1, nothing left
        proc = envtool("create", "cpu-horovod", "--prefix", shared_dir / "built",
                       env={"ENVTOOL_CACHE_DIR": str(ro / "cache")}, timeout=scaled(300))
        assert_condition(proc, 1, str(ro / "cache"), "read-only")
        assert not (shared_dir / "built").exists()
    finally:
        umount(ro)


@pytest.mark.slow  # 8-10 s with two workers: the full suite only (tests/README.md, fast tier)
def test_full_filesystem_is_an_input_error_naming_the_path(shared_dir):
    need_root()
    env_dir = venv(shared_dir / "env")
    full = shared_dir / "full"
    mount_tmpfs(full, "size=64k")
    try:
        (full / "d").mkdir()
        with open(full / "filler", "wb", buffering=0) as fh:  # fill it up for real
            try:
                while True:
                    fh.write(b"\0" * 4096)
            except OSError:
                pass
        cache = {"ENVTOOL_CACHE_DIR": str(shared_dir / "cache")}
        for args, path in ((("lock", "--prefix", env_dir, "-o", full / "d" / "env.lock.yml"), full / "d" / "env.lock.yml"),
                           (("sbom", "--prefix", env_dir, "-o", full / "d" / "env.cdx.json"), full / "d" / "env.cdx.json"),
                           (("create", "cpu-horovod", "--prefix", full / "d" / "new"), full / "d")):
            proc = envtool(*args, env=cache)
            assert_condition(proc, 2, str(path), "no space")
            assert sorted(p.name for p in (full / "d").iterdir()) == [], "a half-written file was left"
        proc = envtool("create", "cpu-horovod", "--prefix", shared_dir / "built",
                       env={"ENVTOOL_CACHE_DIR": str(full / "d" / "cache")}, timeout=scaled(300))
        assert_condition(proc, 1, str(full / "d" / "cache"), "no space")
        assert not (shared_dir / "built").exists()
    finally:
        umount(full)


# ------------------------------------------------------------------ another user
def as_user(args, cwd: Path, env=None, timeout=None):
    """``envtool ARGS`` run by the real second user through runuser, in a clean environment."""
    from helpers.readable import importable_root

    if not (USER_VENV / "bin" / "python").exists():
        msg = f"no {USER_VENV} (run tests/setup.d/publish.sh as root)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    base = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "LANG": "C.UTF-8", "PYTHONPATH": str(importable_root())}
    base.update(env or {})
    return subprocess.run(["runuser", "-u", USER, "--", "env", "-i", *[f"{k}={v}" for k, v in base.items()],
                           str(USER_VENV / "bin" / "python"), "-m", "envtool", *map(str, args)],
                          capture_output=True, cwd=cwd, timeout=scaled(120) if timeout is None else timeout)


def test_another_user_reads_a_shared_lock_and_is_told_what_it_cannot_read(shared_dir):
    """A lock written under umask 022 is readable by the other users of the environment; a file
    they cannot read is exit 2 naming it; an environment they cannot fully read gets no SBOM."""
    need_root()
    env_dir = venv(shared_dir / "env")
    lock = shared_dir / "env.conda-lock.yml"
    proc = envtool("lock", "--prefix", env_dir, "-o", lock, umask=0o022)
    assert proc.returncode == 0, text(proc)
    assert lock.stat().st_mode & 0o777 == 0o644
    proc = as_user(["diff", "--prefix", env_dir, "--lock", lock, "--json"], shared_dir)
    assert proc.returncode == 0, text(proc)
    assert json.loads(proc.stdout)["ok"] is True

    lock.chmod(0o600)  # now really unreadable for the other user
    proc = as_user(["diff", "--prefix", env_dir, "--lock", lock, "--json"], shared_dir)
    assert_condition(proc, 2, str(lock), "permission denied")
    out = json.loads(proc.stdout)
    assert out["ok"] is False and out["exit"] == 2 and str(lock) in out["error"]

    site_packages = next(env_dir.glob("lib/python*/site-packages"))
    dist = site_packages / "hello-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: hello\nVersion: 1.0\n")
    (dist / "INSTALLER").write_text("pip\n")
    site_packages.chmod(0o700)
    proc = as_user(["sbom", "--prefix", env_dir], shared_dir)
    assert_condition(proc, 2, str(site_packages), "cannot read")
    assert proc.stdout == b""


def test_another_users_lock_file_and_log_directory_are_conditions_not_bugs(shared_dir):
    need_root()
    work = shared_dir / "work"
    work.mkdir()
    work.chmod(0o777)
    # another user's build lock beside the prefix the user asks for
    (work / ".env.envtool-lock").write_text("1\n")
    home = shared_dir / "home"
    home.mkdir()
    shutil.chown(home, USER, USER)
    proc = as_user(["create", "cpu-horovod", "--prefix", work / "env"], home,
                   env={"ENVTOOL_CACHE_DIR": str(home / "cache")})
    assert proc.returncode in (1, 2), text(proc)
    assert_condition(proc, proc.returncode, str(work / ".env.envtool-lock"), "permission denied")
    assert not (work / "env").exists()
    # a cache (and log directory) the user may not write
    root_cache = shared_dir / "root-cache"
    root_cache.mkdir(mode=0o755)
    proc = as_user(["create", "cpu-horovod", "--prefix", home / "env"], home,
                   env={"ENVTOOL_CACHE_DIR": str(root_cache)}, timeout=scaled(300))
    assert proc.returncode in (1, 2), text(proc)
    assert_condition(proc, proc.returncode, str(root_cache), "permission denied")
    assert not (home / "env").exists()


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
def test_locks_honour_the_umask(tmp_path, umask, mode):
    env_dir = venv(tmp_path / "env")
    lock = tmp_path / "env.conda-lock.yml"
    proc = envtool("lock", "--prefix", env_dir, "-o", lock, umask=umask)
    assert proc.returncode == 0, text(proc)
    assert lock.stat().st_mode & 0o777 == mode


# ------------------------------------------------------------------ bytes, devices
def test_bytes_that_are_not_utf8_in_a_path_are_a_usage_error(tmp_path):
    env_dir = venv(tmp_path / "env")
    bad = os.fsencode(str(tmp_path)) + b"/caf\xe9"
    cache = {"ENVTOOL_CACHE_DIR": str(tmp_path / "cache")}
    for args in (("create", "cpu-horovod", "--prefix", bad + b"/env"),
                 ("lock", "--prefix", env_dir, "-o", bad + b".lock.yml"),
                 ("sbom", "--prefix", env_dir, "-o", bad + b".json")):
        proc = envtool(*args, env=cache)
        assert_condition(proc, 2, "UTF-8")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["env"]


def test_an_endless_device_as_input_is_refused_at_once(tmp_path):
    started = time.monotonic()
    proc = envtool("check-build", "--from-file", "/dev/zero", memory=1 << 30, timeout=scaled(60))
    assert_condition(proc, 2, "/dev/zero", "regular file")
    with open("/dev/zero", "rb") as zero:
        proc = envtool("check-build", "--from-file", "-", memory=1 << 30, timeout=scaled(60), stdin=zero)
    assert_condition(proc, 2, "MiB")
    assert time.monotonic() - started < scaled(30)


# ------------------------------------------------------------------ signals
def fake_env(path: Path, program: str) -> Path:
    """A venv whose ``bin/<program>`` starts a child in its own session (as a launcher starts ranks),
    records both PIDs in ``pids`` and waits."""
    venv(path)
    script = path / "bin" / program
    if script.exists() or script.is_symlink():
        script.unlink()
    if program == "python":  # the interpreter itself: a shell script
        script.write_text("#!/bin/sh\n"
                          f"echo $$ >> {path}/pids\n"
                          f"setsid sleep 300 & echo $! >> {path}/pids\n"
                          "wait\n")
    else:  # run by the environment's python (validate runs ``bin/python bin/horovodrun``)
        script.write_text("import os, subprocess\n"
                          "child = subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
                          f"with open({str(path / 'pids')!r}, 'a') as fh:\n"
                          "    fh.write(f'{os.getpid()}\\n{child.pid}\\n')\n"
                          "child.wait()\n")
    script.chmod(0o755)
    return path


def running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in (b"Z", b"X")


@pytest.mark.parametrize("command, program", [
    (["validate", "--prefix"], "horovodrun"),
    (["lock", "--prefix"], "python"),
])
def test_sigterm_is_exit_130_and_kills_the_children(tmp_path, command, program):
    env_dir = fake_env(tmp_path / "env", program)
    pids = env_dir / "pids"
    proc = subprocess.Popen([sys.executable, "-m", "envtool", *command, str(env_dir), "--json"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO), ENVTOOL_CACHE_DIR=str(tmp_path / "cache")))
    children = []
    try:
        deadline = time.monotonic() + scaled(60)
        while time.monotonic() < deadline and len(children) < 2:
            children = [int(p) for p in pids.read_text().split()] if pids.exists() else []
            time.sleep(0.05)
        assert len(children) == 2, proc.stderr.read() if proc.poll() is not None else "no child started"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=scaled(30))
        assert proc.returncode == 130, (proc.returncode, err.decode())
        assert "Traceback" not in err.decode()
        assert json.loads(out)["exit"] == 130
        deadline = time.monotonic() + scaled(10)
        while [p for p in children if running(p)] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [p for p in children if running(p)] == []
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in children:
            if running(p):
                os.kill(p, signal.SIGKILL)


def test_a_signal_while_the_process_registry_is_locked_still_ends_the_command():
    """SIGTERM that lands while the main thread holds :mod:`envtool.core.procs`'s registry lock (as
    when ``command_scope`` starts its guard process) is still exit 130 at once: the CLI's handler
    kills the descendants, which takes that lock again in the same thread. With a plain lock this
    deadlocked; CI's ``retire`` interrupted early hung this way (faulthandler's stack:
    ``kill_descendants`` under ``_on_signal`` under ``watch``)."""
    code = ("import os, signal, sys, time\n"
            "from envtool.cli.main import install_signal_handlers\n"
            "from envtool.core import procs\n"
            "install_signal_handlers()\n"
            "try:\n"
            "    with procs._lock:\n"
            "        os.kill(os.getpid(), signal.SIGTERM)\n"
            "        time.sleep(30)\n"
            "except KeyboardInterrupt as exc:\n"
            "    print('interrupted', type(exc).__name__)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=scaled(20),
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.returncode == 0 and proc.stdout.strip() == "interrupted Interrupted", (proc.stdout, proc.stderr)


def test_a_signal_whose_exception_cpython_drops_still_ends_the_command():
    """A stop signal handled inside a weakref callback (as importlib's module-lock clean-up is):
    CPython drops the handler's exception ("Exception ignored in"), so envtool's unraisable hook
    sends the signal again and the command still ends with Interrupted, with no traceback."""
    code = ("import os, signal, sys, time, weakref\n"
            "from envtool.cli import entry, main\n"
            "sys.unraisablehook = entry._swallowed_stop\n"
            "main.install_signal_handlers()\n"
            "class A: pass\n"
            "def cb(ref):\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"
            "    for _ in range(10 ** 6): pass\n"
            "a = A(); r = weakref.ref(a, cb)\n"
            "try:\n"
            "    del a\n"
            "    time.sleep(20)\n"
            "    print('lost')\n"
            "except KeyboardInterrupt as exc:\n"
            "    print('interrupted', type(exc).__name__)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=scaled(40),
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.stdout.strip() == "interrupted Interrupted", (proc.stdout, proc.stderr)
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_sigint_early_in_publish_is_exit_130_without_traceback(shared_dir):
    """A raw KeyboardInterrupt at any moment of start-up and work: exit 130, no traceback, one JSON object."""
    for delay in (0.3, 0.45, 0.6, 0.9):
        proc = subprocess.Popen([sys.executable, "-m", "envtool", "publish", "cpu-horovod", "--root",
                                 str(shared_dir / "sw"), "--modulefiles", str(shared_dir / "mods"), "--json"],
                                cwd=shared_dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True,
                                env=dict(os.environ, PYTHONPATH=str(REPO),
                                         ENVTOOL_CACHE_DIR=str(shared_dir / "cache")))
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=scaled(120))
        err = err.decode()
        if "Failed to import the site module" in err:
            continue  # the interpreter's own start-up, before any line of envtool ran
        assert proc.returncode == 130, (delay, proc.returncode, err)
        assert "Traceback" not in err and "internal error" not in err, err
        assert json.loads(out)["exit"] == 130
        subprocess.run(["chmod", "-R", "u+w", str(shared_dir)], check=False)
        for child in shared_dir.iterdir():
            shutil.rmtree(child, ignore_errors=True)


# ------------------------------------------------------------------ wrong exit statuses
@pytest.mark.parametrize("args, env, words", [
    (["plan", "open-ce-1.11"], {"ENVTOOL_INSTALLER": "bogus"}, ["$ENVTOOL_INSTALLER", "uv, pip", "bogus"]),
    (["plan", "open-ce-1.11", "--installer", "pip"], {}, ["--installer pip", "no pip packages"]),
    (["cache", "list"], {"ENVTOOL_CACHE_PATH": "/tmp/a\nb"}, ["$ENVTOOL_CACHE_PATH", "control character"]),
    (["plan", "cpu-horovod"], {"ENVTOOL_SPEC_PATH": "/tmp/a\nb"}, ["$ENVTOOL_SPEC_PATH"]),
    (["cache", "list"], {"ENVTOOL_CACHE_DIR": "/dev/null"}, ["$ENVTOOL_CACHE_DIR", "not a directory"]),
    (["specs"], {"ENVTOOL_START_METHOD": "bogus"}, ["$ENVTOOL_START_METHOD", "fork, spawn, forkserver"]),
    (["specs"], {"ENVTOOL_DEFAULT_CHANNELS": "conda-forge \x1b[31m"}, ["$ENVTOOL_DEFAULT_CHANNELS"]),
])
def test_bad_variables_and_options_are_exit_2(tmp_path, args, env, words):
    env = dict({"ENVTOOL_CACHE_DIR": str(tmp_path / "cache")}, **env)
    proc = envtool(*args, env=env, cwd=tmp_path)
    assert_condition(proc, 2, *words)


# ------------------------------------------------------------------ one JSON object on every path
JSON_CASES = [
    (["plan", "nosuch"], 2),
    (["plan", "cpu-horovod", "--jobs", "0"], 2),
    (["show", "nosuch"], 2),
    (["diff-specs", "nosuch", "cpu-horovod"], 2),
    (["specs", "--has", "bogus<<"], 2),
    (["diff", "--prefix", "{tmp}", "--lock", "{tmp}/missing.yml"], 2),
    (["publish", "nosuch", "--root", "{tmp}/r", "--modulefiles", "{tmp}/m"], 2),
    (["publish", "nosuch"], 2),
    (["validate", "--prefix", "{tmp}/missing"], 2),
    (["cache", "prune", "--older-than", "-1"], 2),
    (["cache", "list", "--bogus"], 2),
    (["check-build", "--from-file", "{tmp}/missing"], 2),
    (["doctor", "--prefix", "{tmp}/missing"], 2),
    (["jobscript", "--prefix", "{tmp}/missing", "--nodes", "1", "--", "true"], 2),
    (["jobscript", "--prefix", "{tmp}/missing"], 2),
    (["create", "nosuch"], 2),
    (["clone", "{tmp}/missing", "--prefix", "{tmp}/x"], 2),
    (["lock", "nosuch"], 2),
    (["sbom", "--prefix", "{tmp}/missing"], 2),
    (["modulefile", "--prefix", "{tmp}/missing"], 2),
    (["lock", "--check", "nosuch"], 1),
    (["cache", "list"], 0),
]


@pytest.mark.parametrize("args, status", JSON_CASES, ids=[" ".join(a) for a, _ in JSON_CASES])
def test_json_is_one_object_with_ok_error_exit_on_every_path(tmp_path, args, status):
    args = [a.format(tmp=tmp_path) for a in args]
    at = args.index("--") if "--" in args else len(args)  # after "--" it would be the job's command
    proc = envtool(*args[:at], "--json", *args[at:], cwd=tmp_path,
                   env={"ENVTOOL_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == status, text(proc)
    assert "Traceback" not in text(proc)
    out = json.loads(proc.stdout)  # exactly one JSON document
    assert isinstance(out, dict)
    assert out["ok"] is (status == 0) and out["exit"] == status
    assert (out["error"] is None) if status == 0 else (isinstance(out["error"], str) and out["error"])
