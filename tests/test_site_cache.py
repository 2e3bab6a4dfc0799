"""Site-wide Horovod wheel caches: read-only roots consulted after the user's cache, ``envtool cache
list/prune/publish``; a real create that hits a read-only site cache without compiling (slow)."""
import hashlib
import json
import os
import shutil
import stat
import time
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import run_envtool
from envtool.horovod import cache

def _real_entry(cpu_env: Path):
    """The real cached Horovod wheel entry (a directory with horovod-*.whl and key.json; the wheel's
    SHA-256 the one the environment's lock records) of the
    cpu-horovod environment ``cpu_env`` (the ``cpu_horovod_env`` fixture), from the cache that build
    used: ``cache_root()`` (``$ENVTOOL_CACHE_DIR``; under CI a fresh one), else ``~/.cache/envtool``
    (an environment reused through ``ENVTOOL_TEST_CPU_ENV``). Before issue 37 these tests looked in
    ``~/.cache/envtool`` only and so were skipped in every CI run."""
    from envtool.core.paths import cache_root

    from envtool.lock.lockio import read_lock

    assert (cpu_env / "bin" / "horovodrun").exists(), cpu_env
    (locked,) = [e for e in read_lock(cpu_env / "conda-lock.yml").packages if e.name == "horovod"]
    roots = [cache_root(), Path(os.path.expanduser("~/.cache/envtool"))]
    for root in roots:
        for e in cache.WheelCache(root).entries():
            if e.wheel is not None and e.key is not None and cache.file_sha256(e.wheel) == locked.sha256:
                return e
    raise AssertionError(f"no Horovod wheel with the SHA-256 {locked.sha256} of {cpu_env}'s lock in "
                         f"{' or '.join(str(r / 'horovod-wheels') for r in roots)}")


def _copy_entry(entry, root: Path, key=None) -> Path:
    """Copy ``entry`` into cache root ``root``; with ``key``, its key.json says ``key`` (under the
    entry's own digest: a mismatching entry). key.json records the wheel (file, size, SHA-256), as
    ``store`` and ``publish`` write it (an entry of an older envtool may lack that record)."""
    dest = root / "horovod-wheels" / entry.digest
    dest.mkdir(parents=True)
    shutil.copy2(entry.wheel, dest / entry.wheel.name)
    data = cache.asdict(key or entry.key)
    data["wheel"] = {"file": entry.wheel.name, "size": entry.wheel.stat().st_size,
                     "sha256": hashlib.sha256(entry.wheel.read_bytes()).hexdigest()}
    (dest / "key.json").write_text(json.dumps(data, sort_keys=True))
    return dest


def _read_only(root: Path) -> None:
    for p in sorted(root.rglob("*"), reverse=True) + [root]:
        os.chmod(p, stat.S_IMODE(p.stat().st_mode) & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _writable(root: Path) -> None:
    for p in [root] + sorted(root.rglob("*")):
        os.chmod(p, stat.S_IMODE(p.stat().st_mode) | stat.S_IWUSR)


def test_chain_user_first_then_cache_path_then_site_file(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVTOOL_CACHE_DIR", str(tmp_path / "user"))
    monkeypatch.setenv("ENVTOOL_CACHE_PATH", f"{tmp_path}/a::{tmp_path}/b:{tmp_path}/user")
    chain = cache.chain([f"{tmp_path}/c", f"{tmp_path}/a"])
    assert [c.root for c in chain] == [tmp_path / "user", tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    assert [c.read_only for c in chain] == [False, True, True, True]


@pytest.mark.slow  # needs the cpu-horovod environment's wheel
def test_key_mismatch_falls_back_to_the_user_cache(tmp_path, monkeypatch, cpu_horovod_env):
    entry = _real_entry(cpu_horovod_env)
    monkeypatch.setenv("ENVTOOL_CACHE_DIR", str(tmp_path / "user"))
    other = replace(entry.key, frameworks=(("torch", "2.12.0+cpu"),))
    site = tmp_path / "site"
    _copy_entry(entry, site, key=other)  # the wanted digest, but key.json names another build
    _read_only(site)
    try:
        user, site_cache = cache.WheelCache(), cache.WheelCache(site, read_only=True)
        assert cache.lookup_chain([user, site_cache], entry.key) == (None, None)
        stored = user.store(entry.key, entry.wheel, log_text="[100%] Built target horovod\n")
        wheel, hit = cache.lookup_chain([user, site_cache], entry.key)
        assert hit is user and wheel == stored
        assert (stored.parent / "build.log").read_text() == "[100%] Built target horovod\n"
        with pytest.raises(PermissionError):
            site_cache.store(entry.key, entry.wheel)
    finally:
        _writable(site)


@pytest.mark.slow  # needs the cpu-horovod environment's wheel
def test_cache_cli_list_publish_prune(tmp_path, cpu_horovod_env):
    entry = _real_entry(cpu_horovod_env)
    env = {"ENVTOOL_CACHE_DIR": str(tmp_path / "user")}
    dest = _copy_entry(entry, tmp_path / "user")
    (dest / "build.log").write_text("[ 50%] Building CXX object\n")
    stale = _copy_entry(entry, tmp_path / "old")  # an entry last used 40 days ago, under another digest
    stale = stale.rename(tmp_path / "user" / "horovod-wheels" / "0123456789abcdef0123")
    old = time.time() - 40 * 86400
    os.utime(stale, (old, old))
    data = json.loads(run_envtool("cache", "list", "--json", env=env).stdout)
    assert [e["digest"] for e in data["entries"]] == [entry.digest, "0123456789abcdef0123"]
    assert data["entries"][0]["build_log"] is True and data["entries"][0]["key"]["requirement"]

    # --dry-run: says what it would do and makes nothing, not even the site root
    proc = run_envtool("cache", "publish", "--to", tmp_path / "site", "--dry-run", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    assert [e["status"] for e in json.loads(proc.stdout)["entries"]] == ["would publish", "would publish"]
    assert not (tmp_path / "site").exists()
    # something in an entry's place that envtool did not make is left alone (the entry skipped)
    squatter = tmp_path / "site" / "horovod-wheels" / entry.digest
    squatter.parent.mkdir(parents=True)
    squatter.write_text("not a cache entry\n")
    proc = run_envtool("cache", "publish", "--to", tmp_path / "site", "--key", entry.digest, "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["entries"][0]["status"] == "skipped"
    assert squatter.read_text() == "not a cache entry\n"
    squatter.unlink()
    proc = run_envtool("cache", "publish", "--to", tmp_path / "site", "--key", entry.digest[:8], "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["entries"][0]["status"] == "published"
    published = tmp_path / "site" / "horovod-wheels" / entry.digest
    assert sorted(p.name for p in published.iterdir()) == sorted(["build.log", "key.json", entry.wheel.name])
    for p in [published, *published.iterdir()]:
        assert p.stat().st_mode & stat.S_IRGRP, p
    assert published.stat().st_mode & stat.S_IXGRP
    assert cache.WheelCache(tmp_path / "site", read_only=True).lookup(entry.key) == published / entry.wheel.name
    again = run_envtool("cache", "publish", "--to", tmp_path / "site", "--key", entry.digest, "--json", env=env)
    assert json.loads(again.stdout)["entries"][0]["status"] == "already there"
    bad = run_envtool("cache", "publish", "--to", tmp_path / "site", "--key", "zzzz", env=env)
    assert bad.returncode == 2 and "--key 'zzzz'" in bad.stderr and "Traceback" not in bad.stderr

    proc = run_envtool("cache", "prune", "--older-than", "30", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    assert [e["digest"] for e in json.loads(proc.stdout)["deleted"]] == ["0123456789abcdef0123"]
    assert not stale.exists() and dest.is_dir()
    assert run_envtool("cache", "prune", "--older-than", "-2", env=env).returncode == 2


def test_site_file_build_caches_are_planned(tmp_path):
    site = tmp_path / "mysite.yaml"
    site.write_text(f"name: mysite\nbuild_caches: [{tmp_path}/published]\n")
    env = {"ENVTOOL_CACHE_DIR": str(tmp_path / "user"), "ENVTOOL_CACHE_PATH": str(tmp_path / "fromenv")}
    proc = run_envtool("plan", "cpu-horovod", "--site-file", site, "--prefix", tmp_path / "env", env=env)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    first = out.index(f"{tmp_path}/user/horovod-wheels")
    assert first < out.index(f"{tmp_path}/fromenv/horovod-wheels") < out.index(f"{tmp_path}/published/horovod-wheels")
    site.write_text("name: mysite\nbuild_caches: [relative/dir]\n")
    proc = run_envtool("plan", "cpu-horovod", "--site-file", site, "--prefix", tmp_path / "env", env=env)
    assert proc.returncode == 2 and "build_caches" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_create_hits_a_read_only_site_cache_without_compiling(tmp_path, cpu_horovod_env):
    """A user with an empty cache creates cpu-horovod; the first site cache holds the wanted digest
    with another key (skipped), the second the real wheel: installed from there, nothing compiled."""
    entry = _real_entry(cpu_horovod_env)
    mismatch, good = tmp_path / "site-mismatch", tmp_path / "site"
    _copy_entry(entry, mismatch, key=replace(entry.key, compiler="c++ (other) 1.0"))
    _copy_entry(entry, good)
    _read_only(mismatch)
    _read_only(good)
    # root ignores permission bits: that nothing is written to a site cache is checked here too
    before = {p: p.stat().st_mtime_ns for root in (mismatch, good) for p in [root, *root.rglob("*")]}
    try:
        env = {"ENVTOOL_CACHE_DIR": str(tmp_path / "user"), "ENVTOOL_CACHE_PATH": f"{mismatch}:{good}"}
        proc = run_envtool("create", "cpu-horovod", "--prefix", tmp_path / "env", "--json", env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        build = json.loads(proc.stdout)["results"]["build-horovod"]
        assert build["cache_hit"] is True and build["cache"] == "site"
        assert build["cache_dir"] == str(good / "horovod-wheels")
        log = (tmp_path / "env" / ".envtool" / "create.log").read_text()
        assert " -m pip wheel " not in log
        assert f"wheel cache {mismatch}/horovod-wheels (site, read-only): key {entry.digest} miss" in log
        assert f"wheel cache {good}/horovod-wheels (site, read-only): key {entry.digest} hit" in log
        assert {p: p.stat().st_mtime_ns for root in (mismatch, good) for p in [root, *root.rglob("*")]} == before
        assert not (tmp_path / "user" / "horovod-wheels").exists() or not any(
            (tmp_path / "user" / "horovod-wheels").iterdir())
    finally:
        _writable(mismatch)
        _writable(good)


def test_plan_says_whether_horovod_comes_from_a_cache_or_is_compiled(tmp_path, monkeypatch):
    """Issue 38 (friction 6): ``plan`` computes the build step's own cache key from the lock
    (``build_key``, the function the step runs) and looks it up without using the entry: an empty
    cache says compile with the stated default estimate, a compile recorded here gives the
    estimate, an entry under that key in a site cache makes ``plan`` and ``publish --dry-run`` say
    "from cache KEY (PATH)". The first two looks run in this process (the same functions the CLI
    calls), the last through the CLI."""
    from envtool.core.plan import PlanOptions
    from envtool.spec.catalog import load_spec
    from envtool.steps.create import from_lock
    from envtool.steps.create.horovod_build import forecast
    from envtool.steps.create.planner import make_plan

    env = {"ENVTOOL_CACHE_DIR": str(tmp_path / "user"), "ENVTOOL_CACHE_PATH": str(tmp_path / "site")}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    spec = load_spec("cpu-horovod")
    plan = make_plan(spec, PlanOptions(prefix=tmp_path / "env", from_lock=from_lock.choose(spec).path, preview=True))
    hvd = forecast(plan)
    assert hvd["source"] == "compile" and hvd["key_known"] and hvd["wheel"] is None, hvd
    assert hvd["estimate_seconds"] == 891 and "891 s measured on 2 shared cores" in hvd["estimate_basis"]
    key = cache.key_from_json(hvd["key_inputs"])
    assert key.digest() == hvd["key"] and key.frameworks == (("torch", "2.13.0+cpu"),)  # as locked
    wheel = tmp_path / "horovod-0.28.1-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"not a real wheel: plan only proves the entry (key.json, size, SHA-256)")
    # a compile recorded on this machine (another build) is the estimate
    cache.WheelCache(tmp_path / "user").store(replace(key, requirement="horovod==0.27.0"), wheel, seconds=150)
    hvd = forecast(plan)
    assert hvd["source"] == "compile" and hvd["estimate_seconds"] == 150, hvd
    assert hvd["estimate_basis"].startswith("the last compile here took 150 s")
    # the build this plan makes, in a site cache
    cache.WheelCache(tmp_path / "site").store(key, wheel)
    line = f"Horovod: from cache {key.digest()} ({tmp_path}/site/horovod-wheels/{key.digest()}/{wheel.name})"
    proc = run_envtool("plan", "cpu-horovod", "--prefix", tmp_path / "env", env=env)
    assert proc.returncode == 0, proc.stderr
    assert line in proc.stdout.splitlines(), proc.stdout
    proc = run_envtool("publish", "cpu-horovod", "--root", tmp_path / "sw", "--modulefiles", tmp_path / "mf",
                       "--dry-run", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "  " + line in proc.stdout.splitlines(), proc.stdout
    assert not (tmp_path / "sw").exists()
