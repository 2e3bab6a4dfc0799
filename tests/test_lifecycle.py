"""Issue 27, life cycle: ``list``, ``remove``, the activation hint of ``create``, ``info`` and the
configuration files, and ``cache list/prune`` counting everything. Every test runs the real CLI
on real files; the environment tests make a real (bare) venv with ``envtool create``."""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from conftest import REPO, run_envtool
from helpers.speed import scaled


def _home(tmp_path: Path) -> dict:
    """Variables that give the run its own state, cache and configuration directories."""
    (tmp_path / "specs").mkdir(exist_ok=True)
    (tmp_path / "specs" / "bare.yaml").write_text(textwrap.dedent("""\
        name: bare
        summary: a bare venv
        sources: {nersc: "docs.nersc.gov (PyTorch: installing additional packages)"}
        engine: venv
        horovod: {install: none}
        expect: {check_build: null}
        """))
    return {"XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "ENVTOOL_CACHE_DIR": str(tmp_path / "cache"), "ENVTOOL_SPEC_PATH": str(tmp_path / "specs"),
            "ENVTOOL_SYSTEM_CONFIG": str(tmp_path / "etc" / "config.yaml"),
            "PYTHONPATH": str(REPO)}  # this checkout's envtool when a test runs it from another directory


def _listed(env) -> list:
    # from the run's own directory: `list` also looks under ./envs, and the checkout may hold the
    # README's main-job environment (issue 37: a rehearsal listed one another process had made)
    proc = run_envtool("list", "--json", env=env, timeout=scaled(300), cwd=env["XDG_STATE_HOME"])
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["environments"]


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_create_list_remove(tmp_path):
    env = _home(tmp_path)
    prefix = tmp_path / "my envs" / "bare one"  # a space: the hint must be quoted
    proc = run_envtool("create", "bare", "--prefix", prefix, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr
    hint = proc.stdout.split("to use it:\n", 1)[1].strip()
    assert hint == f"source {shlex.quote(str(prefix / 'bin' / 'activate'))}"
    # the hint works when pasted into a shell
    out = subprocess.run(["bash", "-c", f"{hint} && python -c 'import sys; print(sys.prefix)'"],
                         capture_output=True, text=True, timeout=scaled(60))
    assert out.stdout.strip() == str(prefix), out.stderr

    rows = _listed(env)
    assert [r["prefix"] for r in rows] == [str(prefix)]
    row = rows[0]
    assert row["spec"] == "bare" and row["status"] == "ok" and row["registered"]
    measured = sum(p.stat().st_size for p in prefix.rglob("*") if p.is_file() and not p.is_symlink())
    assert row["size"] == measured > 1_000_000  # a venv with pip: megabytes, measured for real
    text = run_envtool("list", env=env, timeout=scaled(300), cwd=env["XDG_STATE_HOME"]).stdout
    assert str(prefix) in text and "bare" in text and " MB" in text and "ok" in text

    proc = run_envtool("remove", prefix, "--dry-run", env=env)
    assert proc.returncode == 0 and "would remove" in proc.stdout and prefix.is_dir(), proc.stderr
    proc = run_envtool("remove", prefix, "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["ok"] and data["removed"] and data["size"] == measured
    assert not os.path.lexists(prefix)
    assert sorted(os.listdir(prefix.parent)) == []  # nothing aside, no lock file left
    assert _listed(env) == []

    # an environment deleted behind envtool's back is shown as missing, not forgotten
    proc = run_envtool("create", "bare", "--prefix", prefix, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr
    subprocess.run(["rm", "-rf", str(prefix)], check=True)
    rows = _listed(env)
    assert [(r["prefix"], r["status"]) for r in rows] == [(str(prefix), "missing")]
    assert "missing" in run_envtool("list", env=env, cwd=env["XDG_STATE_HOME"]).stdout


def test_list_finds_environments_under_envs_without_a_registry(tmp_path):
    """An environment from before the registry: found under ./envs by its own record."""
    env = _home(tmp_path)
    work = tmp_path / "work"
    made = work / "envs" / "old"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(made)], check=True)
    (made / ".envtool").mkdir()
    (made / ".envtool" / "create.json").write_text(json.dumps({"spec": "cpu-horovod", "prefix": str(made),
                                                               "created": 1700000000.0}))
    other = work / "envs" / "copied"  # a copy: its record names another prefix
    subprocess.run(["cp", "-a", str(made), str(other)], check=True)
    proc = run_envtool("list", "--json", env=env, cwd=work)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["environments"]
    assert [(r["prefix"], r["spec"], r["status"], r["registered"]) for r in rows] == \
        [(str(made), "cpu-horovod", "ok", False)]


def test_remove_refuses_what_envtool_did_not_make(tmp_path):
    env = _home(tmp_path)
    plain = tmp_path / "plain"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(plain)], check=True)
    made = tmp_path / "made"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(made)], check=True)
    (made / ".envtool").mkdir()
    (made / ".envtool" / "create.json").write_text(json.dumps({"spec": "bare", "prefix": str(made)}))
    moved = tmp_path / "moved"
    subprocess.run(["cp", "-a", str(made), str(moved)], check=True)
    link = tmp_path / "link"
    link.symlink_to(made)
    published = tmp_path / "published"
    subprocess.run(["cp", "-a", str(made), str(published)], check=True)
    (published / ".envtool" / "create.json").write_text(json.dumps({"spec": "bare", "prefix": str(published)}))
    (published / ".envtool" / "publish.json").write_text(json.dumps({"module": "bare/2024.1"}))
    cases = [(plain, "no readable .envtool/create.json"), (moved, "not here"), (link, "symbolic link"),
             (published, "envtool retire bare/2024.1"), (tmp_path / "nothing", "no such environment"),
             (Path(env["ENVTOOL_CACHE_DIR"]), "envtool cache"), (tmp_path, "current directory")]
    Path(env["ENVTOOL_CACHE_DIR"]).mkdir()
    for path, said in cases:
        before = sorted(os.listdir(tmp_path))
        proc = run_envtool("remove", path, "--json", env=env, cwd=tmp_path)
        assert proc.returncode == 2, (path, proc.stdout, proc.stderr)
        data = json.loads(proc.stdout)
        assert not data["ok"] and said in data["error"] and "Traceback" not in proc.stderr, (path, data)
        assert sorted(os.listdir(tmp_path)) == before, path
    assert (made / "bin" / "python").exists() and (plain / "bin" / "python").exists()
    # home and its ancestors
    proc = run_envtool("remove", tmp_path / "home", env={**env, "HOME": str(tmp_path / "home")})
    assert proc.returncode == 2
    (tmp_path / "home").mkdir()
    proc = run_envtool("remove", tmp_path / "home", env={**env, "HOME": str(tmp_path / "home")})
    assert proc.returncode == 2 and "home directory" in proc.stderr
    # the record that matches the path: removed, and a dead run's aside copy swept with it
    stale = tmp_path / ".made.envtool-old-99999999"
    shutil.copytree(made / ".envtool", stale / ".envtool")  # envtool's record naming ``made``: its copy
    proc = run_envtool("remove", made, env=env)
    assert proc.returncode == 0, proc.stderr
    assert not made.exists() and not stale.exists()


def test_info_shows_each_setting_and_where_it_came_from(tmp_path, monkeypatch):
    # no cache_dir from anywhere (CI sets ENVTOOL_CACHE_DIR for the whole run): its default shows
    monkeypatch.delenv("ENVTOOL_CACHE_DIR", raising=False)
    env = _home(tmp_path)
    user = tmp_path / "config" / "envtool" / "config.yaml"
    system = tmp_path / "etc" / "config.yaml"
    user.parent.mkdir(parents=True)
    system.parent.mkdir(parents=True)
    user.write_text("installer: pip\nsite_path: [~/sites, /sw/sites]\n")
    system.write_text("installer: uv\nlock_timeout: 42\nsite: local\n")
    env = {k: v for k, v in env.items() if k != "ENVTOOL_CACHE_DIR"}
    proc = run_envtool("info", "--json", env={**env, "ENVTOOL_LOCK_PATH": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    got = {s["setting"]: (s["value"], s["from"]) for s in d["settings"]}
    home = os.path.expanduser("~")
    assert got["installer"] == ("pip", str(user))  # the user's file over the site-wide one
    assert got["site_path"] == (f"{home}/sites:/sw/sites", str(user))
    assert got["lock_timeout"] == ("42", str(system))
    assert got["lock_path"] == (str(tmp_path), "environment ($ENVTOOL_LOCK_PATH)")  # the variable over both
    assert got["cache_dir"] == (None, "default")
    assert d["config_files"] == [{"path": str(user), "status": "read"}, {"path": str(system), "status": "read"}]
    assert d["site"]["name"] == "local" and str(system) in d["site"]["reason"]
    assert d["version"] and d["interpreter"]["path"] == sys.executable
    names = [c["name"] for c in d["caches"]]
    assert names == ["envtool", "uv", "pip"]
    assert d["logs"].endswith("/logs")
    text = run_envtool("info", "--no-size", env=env).stdout
    assert f"installer         pip  [{user}]" in text and "build logs:" in text


def test_a_setting_from_the_configuration_file_takes_effect(tmp_path):
    env = _home(tmp_path)
    specs = env.pop("ENVTOOL_SPEC_PATH")
    assert run_envtool("show", "bare", env=env).returncode == 2
    user = tmp_path / "config" / "envtool" / "config.yaml"
    user.parent.mkdir(parents=True)
    user.write_text(f"spec_path: {specs}\n")
    proc = run_envtool("show", "bare", env=env)
    assert proc.returncode == 0 and "a bare venv" in proc.stdout, proc.stderr
    # the variable wins over the file
    proc = run_envtool("show", "bare", env={**env, "ENVTOOL_SPEC_PATH": str(tmp_path / "elsewhere")})
    assert proc.returncode == 2


@pytest.mark.parametrize("text,said", [
    ("cache_dirr: /x\n", "'cache_dirr': not a setting (did you mean cache_dir?)"),
    ("installer: conda\n", "installer: expected one of uv, pip"),
    ("cache_dir: relative/dir\n", "cache_dir: expected an absolute path"),
    ("lock_timeout: -5\n", "lock_timeout: expected a number of seconds greater than 0"),
    ("spec_path: {a: 1}\n", "spec_path: expected a directory or a list of directories"),
    ("- a list\n", "expected a mapping of settings"),
    ("a: [\n", "expected valid YAML"),
])
def test_a_bad_configuration_file_is_exit_2_naming_file_and_key(tmp_path, text, said):
    env = _home(tmp_path)
    for path in (tmp_path / "config" / "envtool" / "config.yaml", tmp_path / "etc" / "config.yaml"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        proc = run_envtool("specs", "--json", env=env)
        assert proc.returncode == 2, proc.stderr
        data = json.loads(proc.stdout)
        assert str(path) in data["error"] and said in data["error"], data
        assert "Traceback" not in proc.stderr
        path.unlink()


def test_a_configuration_file_others_can_write_is_refused(tmp_path):
    env = _home(tmp_path)
    path = tmp_path / "config" / "envtool" / "config.yaml"
    path.parent.mkdir(parents=True)
    path.write_text("installer: pip\n")
    path.chmod(0o666)
    proc = run_envtool("info", env=env)
    assert proc.returncode == 2 and "writable by every user" in proc.stderr and str(path) in proc.stderr


def test_cache_list_counts_everything_and_prune_trims_old_logs(tmp_path):
    env = _home(tmp_path)
    cache = Path(env["ENVTOOL_CACHE_DIR"])
    for sub, size in (("bytecode/ab/x.pyc", 300_000), ("logs/old.log", 5_000), ("logs/new.log", 7_000),
                      ("pkgs/p.conda", 11_000)):
        (cache / sub).parent.mkdir(parents=True, exist_ok=True)
        (cache / sub).write_bytes(b"x" * size)
    os.link(cache / "pkgs" / "p.conda", cache / "pkgs" / "hardlink.conda")  # counted once
    old = time.time() - 40 * 86400
    os.utime(cache / "logs" / "old.log", (old, old))
    # issue 45: by default nothing is walked (the cost stays flat as the cache grows): names, no sizes
    proc = run_envtool("cache", "list", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    use = json.loads(proc.stdout)["usage"]
    assert use["measured"] is False and use["total_bytes"] is None
    assert use["directories"] == {"bytecode": None, "logs": None, "pkgs": None}
    assert [t["bytes"] for t in use["tools"]] == [None, None]
    text = run_envtool("cache", "list", env=env).stdout
    assert "--du" in text and "not measured" in text and "bytecode/" in text and "MB in all" not in text
    # --du: exact, hard links once
    proc = run_envtool("cache", "list", "--du", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    use = json.loads(proc.stdout)["usage"]
    assert use["measured"] is True
    assert use["directories"] == {"bytecode": 300_000, "logs": 12_000, "pkgs": 11_000}
    assert use["total_bytes"] == 323_000
    assert [t["name"] for t in use["tools"]] == ["uv", "pip"]
    text = run_envtool("cache", "list", "--du", env=env).stdout
    assert "0.3 MB in all" in text and "bytecode/" in text and "uv's cache" in text
    proc = run_envtool("cache", "prune", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["logs"] == {"deleted": 1, "freed_bytes": 5_000}
    assert sorted(os.listdir(cache / "logs")) == ["new.log"]


def test_remove_and_cache_prune_say_each_wait_on_stderr(tmp_path):
    """Issue 38 (friction 5): ``remove`` (5-16 s on a real environment) and ``cache prune`` say each
    phase on stderr as it starts (one line each when stderr is not a terminal); ``--json`` keeps
    stderr free of them and stdout one JSON document."""
    env = _home(tmp_path)
    made = tmp_path / "made"
    (made / ".envtool").mkdir(parents=True)
    (made / ".envtool" / "create.json").write_text(json.dumps({"spec": "bare", "prefix": str(made)}))
    proc = run_envtool("remove", made, env=env)
    assert proc.returncode == 0 and not os.path.lexists(made), proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0] == f"remove: measuring {made}", proc.stderr
    assert lines[1].startswith(f"remove: deleting {made} (") and lines[1].endswith(" B; no longer visible there)")
    assert proc.stdout.startswith(f"removed {made}")
    proc = run_envtool("cache", "prune", env=env)
    assert proc.returncode == 0, proc.stderr
    assert f"cache prune: pruning the wheel cache {env['ENVTOOL_CACHE_DIR']}/horovod-wheels" in proc.stderr.splitlines()
    assert "cache prune: deleting kept bytecode that no environment links" in proc.stderr
    quiet = run_envtool("cache", "prune", "--json", env=env)
    assert quiet.returncode == 0 and "cache prune:" not in quiet.stderr, quiet.stderr
    json.loads(quiet.stdout)


def test_remove_interrupted_leaves_all_or_nothing(tmp_path):
    """SIGINT while the aside copy is being deleted: exit 130, the prefix is gone and nothing is left
    beside it (the environment is never half there)."""
    import signal

    env = _home(tmp_path)
    made = tmp_path / "big"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(made)], check=True)
    (made / ".envtool").mkdir()
    (made / ".envtool" / "create.json").write_text(json.dumps({"spec": "bare", "prefix": str(made)}))
    for i in range(100):  # 10,000 files: deleting them takes long enough to be interrupted
        d = made / "lib" / f"pkg{i}"
        d.mkdir(parents=True)
        for j in range(100):
            (d / f"m{j}.py").write_text("x = 1\n")
    proc = subprocess.Popen([sys.executable, "-m", "envtool", "remove", str(made)], cwd=REPO,
                            env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + scaled(120)
    while time.monotonic() < deadline and os.path.lexists(made) and proc.poll() is None:
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=scaled(120))
    assert proc.returncode in (0, 130), err
    assert not os.path.lexists(made), "the rename happened: the prefix must be gone"
    left = [p for p in os.listdir(tmp_path) if p.startswith(".big.")]  # aside copy, lock file
    assert left == [], left
    assert "Traceback" not in err and (proc.returncode == 0 or "interrupted" in err), err


def test_list_fits_60_columns(tmp_path):
    """Issue 38: ``list`` at COLUMNS=60 leaves no line over 60 characters (each environment as a
    block: its prefix, then its fields wrapped below it); without a width (a pipe) it stays one
    row per environment."""
    env = _home(tmp_path)
    work = Path(tempfile.mkdtemp(prefix="el-", dir="/tmp"))  # short prefixes: each fits on its line
    try:
        for name in ("first", "second"):
            made = work / "envs" / name
            (made / ".envtool").mkdir(parents=True)
            (made / ".envtool" / "create.json").write_text(json.dumps({
                "spec": "a-spec-with-a-rather-long-name-for-narrow-terminals", "prefix": str(made),
                "created": 1700000000.0}))
        narrow = run_envtool("list", env=dict(env, COLUMNS="60"), cwd=work)
        assert narrow.returncode == 0, narrow.stderr
        lines = narrow.stdout.splitlines()
        assert all(len(line) <= 60 for line in lines), [line for line in lines if len(line) > 60]
        assert str(work / "envs" / "first") in lines and str(work / "envs" / "second") in lines
        assert "a-spec-with-a-rather-long-name-for-narrow-terminals" in narrow.stdout
        wide = run_envtool("list", env=dict(env, COLUMNS=""), cwd=work)  # a pipe, no width: no limit
        rows = [line for line in wide.stdout.splitlines() if line.startswith(str(work))]
        assert len(rows) == 2 and all("a-spec-with-a-rather-long-name" in row and " ok" in row for row in rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)
