"""Issue 43, ``remove`` tells the truth: "removed" only when nothing is left; what an interrupted
``remove`` (``kill -9`` between the rename and the deletion) or ``create`` left beside a prefix is
found and finished by the next ``remove``; exit 2 only when nothing was touched.

Real files, real modes, and the real second user (``envtool-user``, through runuser): root may
delete anything, so the undeletable directory and the read-only registry are that user's.
"""
from __future__ import annotations

import json
import os
import pwd
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import REPO, run_envtool
from helpers.speed import scaled

USER = "envtool-user"
USER_VENV = Path(os.environ.get("ENVTOOL_TEST_USER_VENV", "/opt/envtool-test/venv"))
DEAD = 99_999_999  # above the kernel's pid_max (at most 2**22): never a running process


def _made(prefix: Path, spec: str = "bare") -> Path:
    """A directory that envtool's record says envtool made at ``prefix`` (what ``remove`` checks)."""
    (prefix / ".envtool").mkdir(parents=True)
    (prefix / ".envtool" / "create.json").write_text(json.dumps({"spec": spec, "prefix": str(prefix)}))
    (prefix / "bin").mkdir()
    (prefix / "bin" / "python").write_bytes(b"\0" * 9_700)
    return prefix


def _env(home: Path) -> dict:
    return {"XDG_STATE_HOME": str(home / "state"), "XDG_CONFIG_HOME": str(home / "config"),
            "ENVTOOL_CACHE_DIR": str(home / "cache"), "ENVTOOL_SYSTEM_CONFIG": str(home / "etc" / "config.yaml")}


def _root_env(home: Path) -> dict:
    """:func:`_env` for a run by root from ``home``: this checkout's envtool, whatever the directory."""
    return {**_env(home), "PYTHONPATH": str(REPO)}


def _register(env: dict, prefix: Path) -> Path:
    """Write ``prefix``'s registry record under ``env``'s state directory, as ``create`` does (the
    same JSON by hand in the second user's tree, where root's envtool refuses to write: issue 43)."""
    from envtool.core import registry

    before = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = env["XDG_STATE_HOME"]
    try:
        try:
            return registry.record(prefix, "bare")
        except PermissionError:  # the state directory is below the second user's directory
            path = registry.record_path(prefix)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"prefix": os.path.abspath(prefix), "spec": "bare", "created": 1.0,
                                        "kind": "created", "module": None}))
            return path
    finally:
        if before is None:
            del os.environ["XDG_STATE_HOME"]
        else:
            os.environ["XDG_STATE_HOME"] = before


@pytest.fixture
def user_dir():
    """A directory under /tmp owned by the second user (pytest's tmp_path is root's, mode 0700)."""
    if os.geteuid() != 0:
        pytest.skip("a second user needs root")
    try:
        pwd.getpwnam(USER)
    except KeyError:
        pytest.skip(f"test user {USER} missing (bash scripts/setup.sh --test)")
    if not (USER_VENV / "bin" / "python").exists():
        msg = f"no {USER_VENV} (run tests/setup.d/publish.sh as root)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    top = Path(tempfile.mkdtemp(prefix="envtool-remove-", dir="/tmp"))
    top.chmod(0o755)
    work = top / "work"
    work.mkdir()
    shutil.chown(work, USER, USER)
    yield work
    subprocess.run(["chmod", "-R", "u+w", str(top)], check=False)
    shutil.rmtree(top, ignore_errors=True)


def _chown_tree(path: Path) -> None:
    subprocess.run(["chown", "-R", f"{USER}:{USER}", str(path)], check=True)


def as_user(args, home: Path, env: dict) -> subprocess.CompletedProcess:
    """``envtool ARGS`` run by the second user through runuser, in a clean environment."""
    from helpers.readable import importable_root

    base = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", "PYTHONPATH": str(importable_root()),
            **env}
    return subprocess.run(["runuser", "-u", USER, "--", "env", "-i", *[f"{k}={v}" for k, v in base.items()],
                           str(USER_VENV / "bin" / "python"), "-m", "envtool", *map(str, args)],
                          capture_output=True, text=True, cwd=home, timeout=scaled(120))


def test_remove_says_removed_only_when_nothing_is_left(user_dir):
    """A directory inside the environment that its owner may not write (mode 0555): the aside copy
    cannot be deleted. ``remove`` exits 1, says what is left and the command that finishes it (not
    "removed", not "freed"); a second ``remove`` finds that copy again; the printed command, pasted,
    finishes it; then nothing is there (exit 2)."""
    env = _env(user_dir)
    prefix = _made(user_dir / "env")
    locked = prefix / "lib" / "locked"
    locked.mkdir(parents=True)
    (locked / "data.bin").write_bytes(b"x" * 4096)
    _chown_tree(prefix)
    locked.chmod(0o555)
    proc = as_user(["remove", prefix, "--json"], user_dir, env)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    out = json.loads(proc.stdout)
    assert out["ok"] is False and out["exit"] == 1 and out["removed"] is False, out
    aside = [p for p in os.listdir(user_dir) if p.startswith(".env.envtool-old-")]
    assert len(aside) == 1 and out["left"] == [str(user_dir / aside[0])], (aside, out)
    assert (user_dir / aside[0] / "lib" / "locked" / "data.bin").exists()
    assert not os.path.lexists(prefix)
    assert str(user_dir / aside[0]) in out["error"] and "chmod -R u+w --" in out["finish"], out

    proc = as_user(["remove", prefix], user_dir, env)  # the first run's PID is gone: its copy is found
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "removed" not in proc.stdout and "freed" not in proc.stdout, proc.stdout
    finish = proc.stderr.splitlines()[-1]
    assert finish.startswith("to finish: ") and str(user_dir / aside[0]) in finish, proc.stderr
    pasted = subprocess.run(["runuser", "-u", USER, "--", "bash", "-c", finish[len("to finish: "):]],
                            capture_output=True, text=True, timeout=scaled(60))
    assert pasted.returncode == 0, pasted.stderr
    assert [p for p in os.listdir(user_dir) if p.startswith(".env.")] == []
    proc = as_user(["remove", prefix], user_dir, env)
    assert proc.returncode == 2 and "nothing is there" in proc.stderr, proc.stderr


def test_remove_finishes_what_an_interrupted_remove_or_create_left(tmp_path):
    """``kill -9`` between the rename and the deletion leaves ``.NAME.envtool-old-PID`` (a dead
    PID); an interrupted create leaves ``.NAME.envtool-build-PID``. ``remove NAME`` lists them
    with ``--dry-run``, then deletes them and forgets the registry record; it never touches one
    of a running process, another user's, or a symbolic link with envtool's name."""
    env = _root_env(tmp_path)
    prefix = tmp_path / "env"
    record = _register(env, prefix)
    aside = _made(prefix).rename(tmp_path / f".env.envtool-old-{DEAD}")
    build = tmp_path / f".env.envtool-build-{DEAD - 1}"  # a create's: its record was written already
    (build / "lib").mkdir(parents=True)
    shutil.copytree(aside / ".envtool", build / ".envtool")
    live = tmp_path / f".env.envtool-old-{os.getpid()}"  # a running process's: another envtool at work
    live.mkdir()
    target = tmp_path / "kept"
    target.mkdir()
    (target / "data").write_text("keep")
    link = tmp_path / f".env.envtool-old-{DEAD - 2}"
    link.symlink_to(target)
    theirs = None
    try:
        theirs = tmp_path / f".env.envtool-old-{DEAD - 3}"
        theirs.mkdir()
        shutil.chown(theirs, USER, USER)
    except (LookupError, OSError):  # no second user here: the other checks still hold
        theirs = None
    proc = run_envtool("remove", prefix, "--dry-run", "--json", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["leftovers"] == sorted([str(aside), str(build)]) and out["spec"] == "bare", out
    assert aside.is_dir() and build.is_dir() and record.exists()

    proc = run_envtool("remove", prefix, env=env, cwd=tmp_path)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert proc.stdout.startswith(f"finished removing {prefix}"), proc.stdout
    assert not os.path.lexists(aside) and not os.path.lexists(build) and not record.exists()
    assert live.is_dir() and link.is_symlink() and (target / "data").read_text() == "keep"
    if theirs is not None:
        assert theirs.is_dir()
    proc = run_envtool("remove", prefix, "--json", env=env, cwd=tmp_path)
    assert proc.returncode == 2 and "nothing is there" in json.loads(proc.stdout)["error"], proc.stdout
    assert str(link) in json.loads(proc.stdout)["error"]


def test_remove_exit_2_touches_nothing_and_a_late_failure_is_partial(user_dir, tmp_path):
    """A read-only registry (the user's state directory, mode 0555): exit 2 before anything is
    deleted. A record that cannot be deleted after the environment went (a directory where the
    file should be): exit 1, the environment gone, the record named as what is left."""
    env = _env(user_dir)
    prefix = _made(user_dir / "env")
    record = _register(env, prefix)
    _chown_tree(prefix)
    _chown_tree(user_dir / "state")
    record.parent.chmod(0o555)
    proc = as_user(["remove", prefix, "--json"], user_dir, env)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    out = json.loads(proc.stdout)
    assert str(record.parent) in out["error"] and "nothing was touched" in out["error"], out
    assert (prefix / ".envtool" / "create.json").exists() and record.exists()
    assert [p for p in os.listdir(user_dir) if p.startswith(".env.")] == []

    env = _root_env(tmp_path)
    prefix = _made(tmp_path / "env")
    record = _register(env, prefix)
    record.unlink()
    record.mkdir()
    proc = run_envtool("remove", prefix, "--json", env=env, cwd=tmp_path)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    out = json.loads(proc.stdout)
    assert out["left"] == [str(record)] and out["removed"] is True and not os.path.lexists(prefix), out
    assert out["finish"] == f"rm -rf -- {shlex.quote(str(record))}" and str(record) in out["error"], out


def _interrupted_create(prefix: Path, env: dict) -> int:
    """A real create transaction of ``prefix`` killed mid-build (``os._exit`` inside the block, as
    ``kill -9`` would): its ``.NAME.envtool-build-PID`` and ``.NAME.envtool-tmp-PID`` stay behind.
    Returns the dead run's PID."""
    code = ("import os, sys; from pathlib import Path; from envtool.steps.kernel.transaction import BuildTransaction\n"
            "t = Path(sys.argv[1])\n"
            "with BuildTransaction(t, False, t.parent / 'create.log') as tx:\n"
            "    (tx.build / 'lib').mkdir(parents=True); print(os.getpid(), flush=True); os._exit(0)\n")
    proc = subprocess.run(["python3", "-c", code, str(prefix)], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, **env}, timeout=scaled(60))
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout)


def test_remove_deletes_only_leftovers_envtool_can_prove_its_own(tmp_path):
    """The reviewer's repro: ``.data.envtool-old-0/thesis.tex`` beside a missing ``data`` is the
    user's (PID 0 is no envtool's, no record names ``data``): ``remove data`` leaves it, names it
    with a command to delete it after checking, exits 1. So are a copy whose record names another
    prefix, a build directory and a temporary directory without envtool's run marker. What a real
    interrupted create left (its build directory, its private TMPDIR with the marker) is deleted."""
    from envtool.steps.kernel.transaction import private_tmp

    env = _root_env(tmp_path)
    envs = tmp_path / "envs"
    envs.mkdir()
    pid = _interrupted_create(envs / "data", env)  # first: create's own sweep is not what is tested here
    build, tmp = envs / f".data.envtool-build-{pid}", private_tmp(envs / "data", pid)[0]
    assert (build / "lib").is_dir() and tmp.is_dir()
    thesis = envs / ".data.envtool-old-0" / "thesis.tex"
    thesis.parent.mkdir(parents=True)
    thesis.write_text("precious")
    elsewhere = _made(envs / "other").rename(envs / f".data.envtool-old-{DEAD}")  # its record names envs/other
    bare_build = envs / f".data.envtool-build-{DEAD - 1}"
    (bare_build / "lib").mkdir(parents=True)
    bare_tmp = envs / f".data.envtool-tmp-{DEAD - 2}"
    bare_tmp.mkdir()
    (bare_tmp / ".envtool-run.json").write_text(json.dumps({"prefix": str(envs / "other")}))
    kept = sorted([thesis.parent, elsewhere, bare_build, bare_tmp])
    proc = run_envtool("remove", envs / "data", "--yes", "--json", env=env, cwd=tmp_path)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)  # the interrupted create's copies went
    out = json.loads(proc.stdout)
    assert out["swept"] == sorted([str(build), str(tmp)]) and out["kept"] == [str(p) for p in kept], out
    assert not os.path.lexists(build) and not os.path.lexists(tmp), os.listdir(envs)
    proc = run_envtool("remove", envs / "data", "--yes", "--json", env=env, cwd=tmp_path)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)  # all there is now: what is not envtool's
    out = json.loads(proc.stdout)
    assert out["kept"] == [str(p) for p in kept] and out["swept"] == [] and out["left"] == [], out
    assert f"rm -rf -- {shlex.quote(str(thesis.parent))}" in out["error"], out
    assert thesis.read_text() == "precious" and all(p.is_dir() for p in kept)
    proc = run_envtool("remove", envs / "data", "--yes", env=env, cwd=tmp_path)
    assert proc.returncode == 1 and "nothing there is envtool's" in proc.stderr, proc.stderr
    assert str(thesis.parent) in proc.stderr and thesis.read_text() == "precious", proc.stderr


def test_remove_whose_rename_fails_deletes_nothing_and_checks_its_own_aside_name(tmp_path, monkeypatch):
    """The environment is a mount point (``mount --bind``: ``rename(2)`` answers EBUSY): ``remove``
    exits 2 "nothing was touched", and a dead run's copy beside it is still there (the rename comes
    before the sweep). A directory with this process's aside name that nothing proves envtool's is
    not deleted to make room: exit 2, named, intact."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a bind mount needs root")
    env = _root_env(tmp_path)
    prefix = _made(tmp_path / "env")
    dead = _made(tmp_path / "copy").rename(tmp_path / f".env.envtool-old-{DEAD}")
    (dead / ".envtool" / "create.json").write_text(json.dumps({"spec": "bare", "prefix": str(prefix)}))
    subprocess.run(["mount", "--bind", str(prefix), str(prefix)], check=True)
    try:
        proc = run_envtool("remove", prefix, "--json", env=env, cwd=tmp_path)
    finally:
        subprocess.run(["umount", str(prefix)], check=True)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "nothing was touched" in json.loads(proc.stdout)["error"], proc.stdout
    assert (dead / ".envtool" / "create.json").exists() and (prefix / "bin" / "python").exists()

    from envtool.core.errors import UsageError
    from envtool.steps.lifecycle.remove import remove_environment

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    mine = tmp_path / f".env.envtool-old-{os.getpid()}"
    (mine / "notes").mkdir(parents=True)
    with pytest.raises(UsageError, match="nothing proves envtool made"):
        remove_environment(prefix)
    assert (mine / "notes").is_dir() and (prefix / "bin" / "python").exists()


def test_remove_names_a_copy_whose_pid_is_alive(tmp_path):
    """An aside copy whose PID a live process has (here a ``sleep``): ``remove`` does not say
    "nothing is there"; it names the copy, says its PID is alive, touches nothing (exit 2)."""
    env = _root_env(tmp_path)
    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        copy = tmp_path / "envs" / f".foo.envtool-old-{sleeper.pid}"
        copy.mkdir(parents=True)
        proc = run_envtool("remove", tmp_path / "envs" / "foo", "--json", env=env, cwd=tmp_path)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    error = json.loads(proc.stdout)["error"]
    assert "nothing is there" not in error and str(copy) in error and f"PID {sleeper.pid} is alive" in error, error
    assert "nothing was touched" in error and copy.is_dir()


def test_remove_forgets_the_record_of_an_environment_already_gone(tmp_path):
    """A removal cut short after the deletion but before the registry record went (a signal):
    nothing is there, only the record (``envtool list`` says ``missing``). ``remove PREFIX`` says
    so and deletes the record (exit 0); ``--dry-run`` keeps it; then ``list`` no longer shows it."""
    env = _root_env(tmp_path)
    prefix = tmp_path / "env"
    record = _register(env, prefix)
    proc = run_envtool("remove", prefix, "--dry-run", env=env, cwd=tmp_path)
    assert proc.returncode == 0 and "registry's record" in proc.stdout and record.exists(), proc.stdout
    proc = run_envtool("remove", prefix, "--json", env=env, cwd=tmp_path)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert json.loads(proc.stdout)["forgot"] is True and not record.exists(), proc.stdout
    proc = run_envtool("list", "--json", env=env, cwd=tmp_path)
    assert str(prefix) not in proc.stdout, proc.stdout


def test_remove_finishes_a_copy_whose_deletion_stopped_after_its_record(tmp_path):
    """WRONG RESULT (issue 43): a remove killed in the last instants of its deletion leaves
    ``.NAME.envtool-old-PID`` holding only an emptied ``.envtool/``: no record proves it envtool's
    any more, and the next ``remove`` said nothing there was envtool's and kept both it and the
    registry record for good. It holds no data, so it is finished (``rmdir`` only) and the record
    forgotten: exit 0. One holding a file of the user's is still left alone."""
    env = _root_env(tmp_path)
    prefix = tmp_path / "env"
    record = _register(env, prefix)
    hollow = tmp_path / f".env.envtool-old-{DEAD}"
    (hollow / ".envtool").mkdir(parents=True)
    proc = run_envtool("remove", prefix, "--json", env=env, cwd=tmp_path)
    out = json.loads(proc.stdout)
    assert proc.returncode == 0 and out["swept"] == [str(hollow)] and out["kept"] == [], out
    assert not os.path.lexists(hollow) and not record.exists()
    data = tmp_path / f".env.envtool-old-{DEAD - 1}"  # not hollow: someone's file, no record: kept, named
    (data / ".envtool").mkdir(parents=True)
    (data / "notes.txt").write_text("mine")
    _register(env, prefix)
    proc = run_envtool("remove", prefix, "--json", env=env, cwd=tmp_path)
    assert proc.returncode == 1 and json.loads(proc.stdout)["kept"] == [str(data)], proc.stdout
    assert (data / "notes.txt").read_text() == "mine"


def test_remove_judges_the_state_directory_before_it_deletes_anything(tmp_path):
    """WRONG EXIT (issue 43): a state directory the group may write (which envtool's rule for paths
    refuses) made ``remove`` delete the environment, then fail to forget its record: exit 1 with a
    record named as left that the rule, not a permission, kept. Now exit 2 before anything is
    touched, naming the directory. With no record of the prefix there, nothing needs forgetting:
    removed, exit 0, no record claimed."""
    env = _root_env(tmp_path)
    prefix = _made(tmp_path / "env")
    record = _register(env, prefix)
    state = Path(env["XDG_STATE_HOME"]) / "envtool"
    state.chmod(0o770)
    proc = run_envtool("remove", prefix, "--json", env=env, cwd=tmp_path)
    out = json.loads(proc.stdout)
    assert proc.returncode == 2 and out["exit"] == 2 and "nothing was touched" in out["error"], out
    assert str(state) in out["error"] and "writable by group" in out["error"], out
    assert (prefix / ".envtool" / "create.json").exists() and record.exists()
    assert [p for p in os.listdir(tmp_path) if p.startswith(".env.")] == []
    record.unlink()
    proc = run_envtool("remove", prefix, "--json", env=env, cwd=tmp_path)
    out = json.loads(proc.stdout)
    assert proc.returncode == 0 and out["removed"] is True and out["left"] == [], out
    assert not os.path.lexists(prefix)
