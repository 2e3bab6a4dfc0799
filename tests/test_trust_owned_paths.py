"""Ownership is checked on what is used, not on what a path resolves to (issue 43).

Real users and real modes: the tests run as root, and a real second user (``envtool-user``, in
group ``envtool-pub``) plants links, owns directories or shares write access through a group.
Each case is one that the third hostile pass found envtool trusting:

- root's ``ENVTOOL_CACHE_DIR`` naming another user's link to a root-owned directory: ``cache
  prune`` deleted root's files there and ``create`` made the directory ``0700``;
- a directory on the way to the cache that a group can write, or that another user owns;
- ``cache prune`` on a cache another user owns (``create`` refused it already);
- a configuration file, or its directory, that a group can write.

The second part adds: ``cache publish --to`` another user's link; a file group ``root`` can write;
another user's entries inside the cache; a directory envtool did not create keeps its mode; the state
directory through another user's link.

Every command here is fast (``cache prune``, ``specs``, ``config list``, ``list``): nothing is built.
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


# --- issue 43, second part: variants that envtool still got wrong after the first ----------------


def test_cache_publish_to_another_users_link_neither_replaces_nor_chmods_roots_site_cache(shared_tmp, monkeypatch):
    """DATA LOSS. envtool-user links ``site`` (in a sticky, world-writable directory) to a site
    cache of root's, mode 0700, whose entry under the digest root is about to publish does not
    prove itself (root's own files). ``cache publish --to`` that link used to follow it: it deleted
    root's entry to put the new one there and made root's directory group-readable. Now: exit 2
    naming the link and its owner; root's entry and mode are as they were."""
    from envtool.horovod import cache
    from helpers.wheels import make_wheel
    from test_cache_trust import _key

    _ids()
    os.chmod(shared_tmp, 0o1777)
    monkeypatch.setenv("ENVTOOL_CACHE_DIR", str(shared_tmp / "publisher"))
    (shared_tmp / "wheel").mkdir()
    wheel = make_wheel(shared_tmp / "wheel", "horovod", "0.28.1", {"horovod/__init__.py": "X = 1\n"})
    key = _key()
    cache.WheelCache().store(key, wheel)
    roots = shared_tmp / "roots-site"
    entry = roots / "horovod-wheels" / key.digest()
    entry.mkdir(parents=True)
    (entry / "key.json").write_text("{}\n")
    (entry / "notes.txt").write_text("root's own file\n")
    os.chmod(roots, 0o700)
    link = shared_tmp / "site"
    as_user(f"ln -s {roots} {link}")

    _refused(run_envtool("cache", "publish", "--to", link, "--json"), f"{link} is a symbolic link owned by {USER}")
    assert (entry / "notes.txt").read_text() == "root's own file\n"
    assert stat.S_IMODE(roots.stat().st_mode) == 0o700


@pytest.mark.parametrize("which", ["site-wide file", "user file"])
def test_a_configuration_file_group_root_can_write_is_refused(tmp_path, which):
    """SECURITY. A configuration file of root's, group root (gid 0), mode 0664: group 0 is a system
    group whose members (administrators, service accounts, any user whose primary group it is,
    which /etc/group does not list) could set ``cache_dir``. It used to pass as root's private
    group; ``config list`` now exits 2 naming the file, owner, mode, group and fix."""
    _ids()
    user = tmp_path / "config" / "envtool" / "config.yaml"
    site = tmp_path / "etc" / "config.yaml"
    path = user if which == "user file" else site
    path.parent.mkdir(parents=True)
    path.write_text("cache_dir: /tmp\n")
    os.chown(path, 0, 0)
    os.chmod(path, 0o664)
    proc = run_envtool("config", "list", "--json", env={"XDG_CONFIG_HOME": str(tmp_path / "config"),
                                                       "ENVTOOL_SYSTEM_CONFIG": str(site)})
    _refused(proc, str(path), "(owner root (uid 0), mode 0664)", "writable by group root (gid 0)", f"chmod go-w {path}")


def test_cache_prune_deletes_nothing_another_user_owns_in_the_cache(tmp_path):
    """SECURITY. Root's cache (root's, 0700) holds an incomplete wheel entry and a bytecode file
    that envtool-user owns (a cache once shared, or files copied with their owner). ``cache prune``
    used to delete them; it deletes only root's own now and names what it kept and whose it is."""
    uid, _ = _ids()
    root = tmp_path / "cache"
    theirs = root / "horovod-wheels" / ("1" * 64)
    mine = root / "horovod-wheels" / ("2" * 64)
    for d in (theirs, mine):
        d.mkdir(parents=True)
    (root / "bytecode").mkdir()
    pyc = root / "bytecode" / "theirs.pyc"
    pyc.write_bytes(b"\0" * 16)
    for p in (theirs, pyc):
        os.chown(p, uid, -1)
    for d in (root, root / "horovod-wheels", root / "bytecode"):
        os.chmod(d, 0o700)

    proc = run_envtool("cache", "prune", "--older-than", "0", "-y", "--json", env={"ENVTOOL_CACHE_DIR": str(root)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert [e["digest"] for e in out["deleted"]] == ["2" * 64] and not mine.exists()
    assert [(e["digest"], e["owner"]) for e in out["kept"]] == [("1" * 64, f"{USER} (uid {uid})")]
    assert theirs.is_dir() and pyc.exists() and out["bytecode"]["deleted"] == 0


def test_envtool_changes_the_mode_only_of_cache_directories_it_created(tmp_path):
    """Mode never changed. Root's own directory (0755, holding only ``logs/``, as a cache of
    envtool's would) named by ENVTOOL_CACHE_DIR: ``specs``, which writes its table into the cache,
    used to make it 0700 because it looked like envtool's. Now it keeps 0755 (and ``logs/`` too);
    only ``specs/``, which envtool creates, is 0700. A cache root envtool creates carries its
    CACHEDIR.TAG and is made private again when opened up."""
    _ids()
    roots = _roots_directory(tmp_path)
    proc = run_envtool("specs", env={"ENVTOOL_CACHE_DIR": str(roots)})
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(roots.stat().st_mode) == 0o755 and stat.S_IMODE((roots / "logs").stat().st_mode) == 0o755
    assert stat.S_IMODE((roots / "specs").stat().st_mode) == 0o700 and not (roots / "CACHEDIR.TAG").exists()

    made = tmp_path / "made"
    proc = run_envtool("specs", env={"ENVTOOL_CACHE_DIR": str(made)})
    assert proc.returncode == 0, proc.stderr
    assert (made / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55\n")
    os.chmod(made, 0o775)
    os.chmod(made / "specs", 0o775)
    for f in (made / "specs").iterdir():  # the remembered table: without it, specs writes it again
        f.unlink()
    proc = run_envtool("specs", env={"ENVTOOL_CACHE_DIR": str(made)})
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(made.stat().st_mode) == 0o700 and stat.S_IMODE((made / "specs").stat().st_mode) == 0o700


def test_a_state_directory_through_another_users_link_is_refused(shared_tmp):
    """SECURITY (state). Root's XDG_STATE_HOME names envtool-user's link to a directory of root's
    holding a registry record: ``list`` used to read the records there. Now exit 2 naming the
    link, its owner and the variable."""
    _ids()
    os.chmod(shared_tmp, 0o1777)
    state = shared_tmp / "roots-state"
    (state / "envtool" / "environments").mkdir(parents=True)
    (state / "envtool" / "environments" / "a.json").write_text(json.dumps(
        {"prefix": "/opt/planted", "spec": "x", "created": 1, "kind": "created", "module": None}))
    link = shared_tmp / "state"
    as_user(f"ln -s {state} {link}")
    _refused(run_envtool("list", "--json", env={"XDG_STATE_HOME": str(link)}),
             f"{link} is a symbolic link owned by {USER}", "XDG_STATE_HOME")
