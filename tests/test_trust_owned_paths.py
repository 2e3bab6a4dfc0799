"""Ownership is checked on what is used, not on what a path resolves to (issue 43).

Real users and real modes: the tests run as root, and a real second user (``envtool-user``, in
group ``envtool-pub``) plants links, owns directories or shares write access through a group.
Each case is one that the third hostile pass found envtool trusting:

- root's ``ENVTOOL_CACHE_DIR`` naming another user's link to a root-owned directory: ``cache
  prune`` deleted root's files there and ``create`` made the directory ``0700``;
- a directory on the way to the cache that a group can write, or that another user owns;
- ``cache prune`` on a cache another user owns (``create`` refused it already);
- a configuration file, or its directory, that a group can write.

Every command here is fast (``cache prune``, ``specs``, ``config list``): nothing is built.
"""
from __future__ import annotations

import grp
import json
import os
import pwd
import stat
import subprocess
import time
from pathlib import Path

import pytest

from conftest import run_envtool
from helpers.speed import scaled

from test_cache_trust import GROUP, USER, shared_tmp  # noqa: F401 (the second user, and a directory it reaches)


def _ids():
    """The second user's uid and the shared group's gid (skip when the test user is missing)."""
    try:
        return pwd.getpwnam(USER).pw_uid, grp.getgrnam(GROUP).gr_gid
    except KeyError:
        pytest.skip(f"test user {USER} / group {GROUP} missing (bash scripts/setup.sh --test)")


def as_user(script: str) -> None:
    """Run ``script`` in bash as the second user (runuser); it must succeed."""
    proc = subprocess.run(["runuser", "-u", USER, "--", "bash", "-c", script], capture_output=True, text=True,
                          timeout=scaled(60))
    assert proc.returncode == 0, proc.stderr


def _roots_directory(parent: Path) -> Path:
    """A directory of root's, mode 0755, holding only what envtool keeps in a cache (``logs/`` with
    an old build log of root's): what ``prune`` would delete and ``create`` would make private."""
    d = parent / "roots"
    (d / "logs").mkdir(parents=True)
    os.chmod(d, 0o755)
    os.chmod(d / "logs", 0o755)
    log = d / "logs" / "old.log"
    log.write_text("root's build log\n")
    old = time.time() - 40 * 86400
    os.utime(log, (old, old))
    return d


def _refused(proc, *said):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    error = json.loads(proc.stdout)["error"]
    for s in said:
        assert s in error, error
    assert "Traceback" not in proc.stderr


def test_another_users_link_to_roots_directory_is_neither_pruned_nor_made_private(shared_tmp):
    """/tmp-like (sticky, world-writable) directory; envtool-user links ``cache`` there to a
    directory of root's; root's ENVTOOL_CACHE_DIR names the link. ``cache prune`` refuses before
    reading (root's log stays), ``specs`` (which writes its table into the cache) changes no mode,
    and the function create goes through refuses naming the link and its owner."""
    _ids()
    os.chmod(shared_tmp, 0o1777)
    roots = _roots_directory(shared_tmp)
    link = shared_tmp / "cache"
    as_user(f"ln -s {roots} {link}")
    env = {"ENVTOOL_CACHE_DIR": str(link)}

    _refused(run_envtool("cache", "prune", "--older-than", "0", "-y", "--json", env=env),
             f"{link} is a symbolic link owned by {USER}")
    assert (roots / "logs" / "old.log").exists()

    proc = run_envtool("specs", env=env)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(roots.stat().st_mode) == 0o755 and sorted(os.listdir(roots)) == ["logs"]

    proc = subprocess.run([os.sys.executable, "-c", "from envtool.core.paths import cache_dir; cache_dir('logs')"],
                          capture_output=True, text=True, env=dict(os.environ, **env), cwd=Path(__file__).parent.parent,
                          timeout=scaled(60))
    assert f"UsageError: envtool's cache directory {link}: {link} is a symbolic link owned by {USER}" in proc.stderr
    assert stat.S_IMODE(roots.stat().st_mode) == 0o755 and stat.S_IMODE((roots / "logs").stat().st_mode) == 0o755


@pytest.mark.parametrize("how", ["group-writable", "another user's"])
def test_a_directory_others_control_on_the_way_to_the_cache_is_refused(shared_tmp, how):
    """The cache root is root's own, but a directory above it can be written by group
    envtool-pub, or belongs to envtool-user: either could swap what the path names. ``cache
    prune`` refuses naming that directory, its owner and mode, and deletes nothing."""
    uid, gid = _ids()
    above = shared_tmp / "above"
    above.mkdir()
    roots = _roots_directory(above)
    if how == "group-writable":
        os.chown(above, 0, gid)
        os.chmod(above, 0o775)
        said = f"{above} (owner root (uid 0), mode 0775) is writable by group {GROUP}"
    else:
        os.chown(above, uid, -1)
        said = f"{above} is owned by {USER} (uid {uid}), not by you or root"
    _refused(run_envtool("cache", "prune", "--older-than", "0", "-y", "--json", env={"ENVTOOL_CACHE_DIR": str(roots)}),
             said)
    assert (roots / "logs" / "old.log").exists()


def test_cache_prune_refuses_a_cache_another_user_owns(shared_tmp):
    """envtool-user's own cache (an incomplete wheel entry, which prune deletes at any age) is
    refused by root's ``cache prune`` as ``create`` refuses it: exit 2 naming the owner; nothing
    deleted."""
    uid, _ = _ids()
    cache = shared_tmp / "theirs"
    cache.mkdir()
    os.chown(cache, uid, -1)
    entry = cache / "horovod-wheels" / ("0" * 64)
    as_user(f"mkdir -p {entry} && chmod 700 {cache}")
    _refused(run_envtool("cache", "prune", "--older-than", "0", "-y", "--json", env={"ENVTOOL_CACHE_DIR": str(cache)}),
             f"{cache}: permission denied: envtool's cache directory is owned by another user ({USER}")
    assert entry.is_dir()


@pytest.mark.parametrize("which", ["user file", "site-wide file", "site-wide directory"])
def test_a_configuration_file_a_group_can_write_is_refused(tmp_path, which):
    """A configuration file root owns, group envtool-pub, mode 0664 (or in such a directory, 0775):
    a member of the group could set ``cache_dir`` or ``spec_path``. ``config list`` exits 2 naming
    the file (or directory), owner and mode, and the fix."""
    _, gid = _ids()
    user = tmp_path / "config" / "envtool" / "config.yaml"
    site = tmp_path / "etc" / "config.yaml"
    path = user if which == "user file" else site
    path.parent.mkdir(parents=True)
    path.write_text("installer: pip\n")
    bad = path.parent if which == "site-wide directory" else path
    os.chown(bad, 0, gid)
    os.chmod(bad, 0o775 if bad.is_dir() else 0o664)
    proc = run_envtool("config", "list", "--json", env={"XDG_CONFIG_HOME": str(tmp_path / "config"),
                                                       "ENVTOOL_SYSTEM_CONFIG": str(site)})
    mode = "0775" if bad.is_dir() else "0664"
    _refused(proc, str(path), f"(owner root (uid 0), mode {mode})", f"writable by group {GROUP}", f"chmod go-w {bad}")
