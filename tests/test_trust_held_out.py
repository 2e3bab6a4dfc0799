"""Held-out variants of issue 43's classes, each against envtool's one rule for paths
(``envtool/core/paths.py``): real users (``envtool-user``, in group ``envtool-pub``), real modes,
real links. Fast: the wheel lookups are in-process, the commands build nothing.

- a read-only site wheel cache reached through a directory a group can write, or through another
  user's link to root's site cache (the site cache had its own, weaker check that followed the
  root's links and looked at nothing above it);
- the bytecode store: the compile probe made any store it was given ``0700``, one envtool did not
  create included; the runner now judges it by the rule first;
- ``cache list``, ``cache prune --dry-run`` and ``info`` on a cache another user owns (``list``
  read it and ``info`` walked it for sizes; ``prune`` refused it already);
- ``image`` looking for the lock's Horovod wheel in a cache of another user's that holds a FIFO
  named ``key.json``: it read the file before any check, and waited for ever.
"""
from __future__ import annotations

import os
import shutil

import pytest

from conftest import run_envtool
from envtool.horovod import cache

from test_cache_trust import GROUP, USER, _key, _need_user, _published_site, _wheels, as_user, shared_tmp  # noqa: F401


@pytest.mark.parametrize("how", ["group-writable directory above", "another user's link"])
def test_a_site_cache_reached_through_what_others_control_is_skipped(shared_tmp, monkeypatch, how):
    """A site cache published by root, then named through a directory group envtool-pub can write
    (its members could swap the cache for their own), or through envtool-user's link: the lookup
    skips it naming the directory or link; named directly, the same cache is used."""
    uid, gid = _need_user()
    genuine, _ = _wheels(shared_tmp, shared_tmp / "unused")
    key = _key()
    site = _published_site(shared_tmp, monkeypatch, genuine, key)
    entry = site / "horovod-wheels" / key.digest()
    assert cache.WheelCache(site, read_only=True).find(key) == (entry / genuine.name, "")
    if how == "group-writable directory above":
        above = shared_tmp / "above"
        above.mkdir()
        shutil.move(str(site), above / "site")
        site, entry = above / "site", above / "site" / "horovod-wheels" / key.digest()
        assert cache.WheelCache(site, read_only=True).find(key) == (entry / genuine.name, "")
        os.chown(above, 0, gid)
        os.chmod(above, 0o775)
        said = f"{above} (owner root (uid 0), mode 0775) is writable by group {GROUP}"
        named = site
    else:
        os.chmod(shared_tmp, 0o1777)  # /tmp-like: anyone may add a name, none may replace another's
        named = shared_tmp / "link"
        proc = as_user(f"ln -s {site} {named}")
        assert proc.returncode == 0, proc.stderr
        said = f"{named} is a symbolic link owned by {USER}"
    monkeypatch.setenv(cache.CACHE_PATH_VAR, str(named))
    skipped: list = []
    assert cache.lookup_chain(cache.chain(), key, skipped=skipped) == (None, None)
    assert len(skipped) == 1 and skipped[0][1].startswith("not trusted: ") and said in skipped[0][1], skipped


def test_the_bytecode_store_is_judged_by_the_rule_before_the_probe_runs(shared_tmp, monkeypatch):
    """A cache root envtool did not create (no CACHEDIR.TAG) whose ``bytecode/`` group
    envtool-pub can write: the compile command is refused (exit 2's UsageError, naming the
    ``chmod``) before the probe runs, and the directory keeps its mode (the probe made it ``0700``
    and kept bytecode there). In a cache root envtool made, the store is created ``0700`` and used."""
    import stat
    import sys

    from envtool.core.errors import UsageError
    from envtool.engines.installer import compile_command
    from envtool.steps.kernel.runner import Runner

    _, gid = _need_user()
    source = shared_tmp / "a.py"
    source.write_text("VALUE = 1\n")
    lib = shared_tmp / "env" / "lib"
    lib.mkdir(parents=True)
    os.link(source, lib / "a.py")  # shared with another environment, as uv links it: kept in the store
    root = shared_tmp / "cache"
    store = root / "bytecode"
    store.mkdir(parents=True)
    os.chown(store, 0, gid)
    os.chmod(store, 0o2775)
    monkeypatch.setenv("ENVTOOL_CACHE_DIR", str(root))
    argv = compile_command(sys.executable, shared_tmp / "env")
    with Runner(log_path=shared_tmp / "logs" / "compile.log", quiet=True) as runner:
        with pytest.raises(UsageError, match=f"{store}: envtool's cache directory can be written by others "
                                             f"\\(group {GROUP} \\(gid {gid}\\), mode 2775\\)"):
            runner.run(argv)
    assert stat.S_IMODE(store.stat().st_mode) == 0o2775 and os.listdir(store) == []
    assert not (lib / "__pycache__").exists()

    shutil.rmtree(root)
    monkeypatch.setenv("ENVTOOL_CACHE_DIR", str(root))
    with Runner(log_path=shared_tmp / "logs" / "compile.log", quiet=True) as runner:
        runner.run(argv)
    assert (root / "CACHEDIR.TAG").is_file()  # a root envtool made: tagged
    assert stat.S_IMODE(store.stat().st_mode) == 0o700 and len(os.listdir(store)) == 2  # the entry and its hash


def test_cache_list_prune_dry_run_and_info_on_a_cache_another_user_owns(shared_tmp):
    """envtool-user's cache (mode 0755, so root could read it) named by root's ENVTOOL_CACHE_DIR:
    ``cache list`` and ``cache prune --dry-run`` refuse it (exit 2 naming the owner, ``--json``
    envelope), and ``info`` names the problem instead of measuring what is in it."""
    import json

    uid, _ = _need_user()
    theirs = shared_tmp / "theirs"
    theirs.mkdir()
    os.chown(theirs, uid, -1)
    proc = as_user(f"mkdir -p {theirs}/horovod-wheels/{'0' * 20} && chmod -R 755 {theirs}")
    assert proc.returncode == 0, proc.stderr
    env = {"ENVTOOL_CACHE_DIR": str(theirs)}
    said = f"{theirs}: permission denied: envtool's cache directory is owned by another user ({USER}"
    for argv in (("cache", "list", "--json"), ("cache", "prune", "--dry-run", "--json")):
        proc = run_envtool(*argv, env=env)
        assert proc.returncode == 2, (argv, proc.stdout, proc.stderr)
        assert said in json.loads(proc.stdout)["error"] and "Traceback" not in proc.stderr
    proc = run_envtool("info", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    row = [c for c in json.loads(proc.stdout)["caches"] if c["name"] == "envtool"][0]
    assert said in row["problem"] and row["bytes"] is None
    assert (theirs / "horovod-wheels" / ("0" * 20)).is_dir()


def test_image_never_blocks_on_a_fifo_key_json_in_another_users_cache(shared_tmp):
    """envtool-user's cache, named in ENVTOOL_CACHE_PATH, holds the lock's build key as an entry
    whose ``key.json`` is a FIFO: the image's wheel lookup says the wheel is not available (the
    ImageError ``image`` reports) within seconds, instead of blocking on the FIFO."""
    import subprocess
    import sys

    from conftest import REPO

    _need_user()
    os.chmod(shared_tmp, 0o1777)
    digest = "0" * 20
    theirs = shared_tmp / "theirs"
    proc = as_user(f"mkdir -p {theirs}/horovod-wheels/{digest} && mkfifo {theirs}/horovod-wheels/{digest}/key.json")
    assert proc.returncode == 0, proc.stderr
    code = ("from envtool.steps.image.wheels import horovod_wheel\n"
            "try:\n    horovod_wheel(%r, 'a' * 64, [], None, mark_used=False)\n"
            "except Exception as exc:\n    print(type(exc).__name__, exc)\n") % digest
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=10,
                          env=dict(os.environ, ENVTOOL_CACHE_DIR=str(shared_tmp / "mine"),
                                   ENVTOOL_CACHE_PATH=str(theirs)))
    assert proc.stdout.startswith("ImageError ") and "is not available" in proc.stdout, proc.stdout + proc.stderr
