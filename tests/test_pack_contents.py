"""Issue 43, ``pack`` carries only regular files, directories and links inside the environment:
a socket, a FIFO, a set-user-ID file and a link out of a real venv are each refused with their
path (exit 2, nothing written); ``--allow-outside-links`` keeps such a link, named in the notes;
``-o`` through a symbolic link into the environment is refused before anything is written.

Further (issue 43, third part): a device node and a file with capabilities are refused; a FIFO or
socket named like a ``.pth`` file is found before anything is read (it hung the ``.pth`` scan); a
``bin/`` link to a program beside the base interpreter that is not one is refused; a directory the
second user cannot read is refused, not skipped.

Real venvs (``python -m venv --without-pip``), a real AF_UNIX socket, a real FIFO, a real device
node (mknod), real file capabilities (``security.capability``), real modes and the real second
user; the accepted pack is read back with tarfile.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

from conftest import REPO, run_envtool
from test_remove_truth import USER, USER_VENV, _chown_tree, _env, as_user, user_dir  # noqa: F401  (user_dir: fixture)


@pytest.fixture
def venv(tmp_path) -> Path:
    prefix = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True)
    (prefix / "lib" / "pkg").mkdir()
    (prefix / "lib" / "pkg" / "mod.py").write_text("x = 1\n")
    return prefix


def _pack(prefix: Path, out: Path, *extra, cwd=None):
    proc = run_envtool("pack", prefix, "--format", "tar", "-o", out, "--json", *extra,
                       env={"ENVTOOL_CACHE_DIR": str(prefix.parent / "cache"), "PYTHONPATH": str(REPO)}, cwd=cwd)
    return proc, json.loads(proc.stdout)


def _nothing_written(where: Path) -> bool:
    return [p for p in os.listdir(where) if p.endswith(".tar") or ".envtool-pack-" in p] == []


def test_pack_refuses_sockets_fifos_setuid_files_and_links_out(venv, tmp_path):
    outside = tmp_path / "elsewhere"
    (outside / "pkg").mkdir(parents=True)
    (outside / "pkg" / "__init__.py").write_text("SECRET = 1\n")
    cases = []
    sock_path = venv / "lib" / "pkg" / "daemon.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(sock_path))
    cases.append((sock_path, "a socket", sock_path.unlink))
    fifo = venv / "lib" / "pkg" / "pipe"
    os.mkfifo(fifo)
    cases.append((fifo, "a FIFO", fifo.unlink))
    setuid = venv / "bin" / "helper"
    setuid.write_text("#!/bin/sh\n")
    setuid.chmod(0o4755)
    cases.append((setuid, "set-user-ID", lambda: setuid.chmod(0o755)))
    link = venv / "lib" / "pkg" / "vendored"
    link.symlink_to(outside / "pkg")
    cases.append((link, "links that leave it", None))
    try:
        for path, said, fix in cases:
            proc, out = _pack(venv, tmp_path / "env.tar")
            assert proc.returncode == 2, (path, proc.stdout, proc.stderr)
            assert str(path) in out["error"] and said in out["error"] and "expected" in out["error"], (path, out)
            assert "Traceback" not in proc.stderr and _nothing_written(tmp_path), (path, os.listdir(tmp_path))
            if fix is not None:
                fix()
    finally:
        server.close()
    # the link kept only when asked, and named in the notes
    proc, out = _pack(venv, tmp_path / "env.tar", "--allow-outside-links")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    kept = [note for note in out["notes"] if note.startswith("kept a link")]
    assert len(kept) == 1 and str(link) in kept[0], out["notes"]  # not bin/python*: the base interpreter's links
    with tarfile.open(tmp_path / "env.tar") as tar:
        member = tar.getmember("lib/pkg/vendored")
        assert member.issym() and member.linkname == str(outside / "pkg")
        assert tar.getmember("bin/helper").mode == 0o755
        assert "lib/pkg/vendored/__init__.py" not in tar.getnames()


def test_pack_output_through_a_link_into_the_environment_is_refused(venv, tmp_path):
    """``-o`` whose directory is a symbolic link to (a directory inside) the environment: exit 2
    before anything is written there (the pack would otherwise pack itself)."""
    into = tmp_path / "into"
    into.symlink_to(venv / "lib")
    for out in (into / "env.tar", tmp_path / "alias" / "env.tar"):
        if out.parent.name == "alias":
            out.parent.symlink_to(venv)
        before = sorted(p.name for p in (venv / "lib").iterdir())
        proc, data = _pack(venv, out)
        assert proc.returncode == 2, (out, proc.stdout, proc.stderr)
        assert "inside the environment" in data["error"] and str(out) in data["error"], data
        assert sorted(p.name for p in (venv / "lib").iterdir()) == before
        assert [p for p in os.listdir(venv) if p.endswith(".tar") or ".envtool-pack-" in p] == []
    # and --dry-run says so too
    proc = run_envtool("pack", venv, "--format", "tar", "-o", into / "env.tar", "--dry-run",
                       env={"PYTHONPATH": str(REPO)})
    assert proc.returncode == 2 and "inside the environment" in proc.stderr, proc.stderr


def test_pack_judges_a_link_by_its_text_not_where_it_resolves_today(venv, tmp_path):
    """The reviewer's escape: ``outside/back -> VENV/lib`` and ``venv/evil -> outside/back``. The
    link resolves inside today, but the tar keeps ``outside/back``, which on the node is whatever
    is there: refused (exit 2). A relative link climbing out through ``..`` likewise; a relative
    link that stays inside, and the venv's own bin/python links, are packed."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "back").symlink_to(venv / "lib")
    (venv / "evil").symlink_to(outside / "back")
    (venv / "lib" / "pkg" / "same").symlink_to("../pkg/mod.py")
    proc, out = _pack(venv, tmp_path / "env.tar")
    assert proc.returncode == 2 and str(venv / "evil") in out["error"], (proc.stdout, proc.stderr)
    assert _nothing_written(tmp_path)
    (venv / "evil").unlink()
    (venv / "lib" / "up").symlink_to("../../outside/back")  # relative: climbs out of the environment
    proc, out = _pack(venv, tmp_path / "env.tar")
    assert proc.returncode == 2 and str(venv / "lib" / "up") in out["error"], (proc.stdout, proc.stderr)
    (venv / "lib" / "up").unlink()
    proc, out = _pack(venv, tmp_path / "env.tar")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    with tarfile.open(tmp_path / "env.tar") as tar:
        assert tar.getmember("lib/pkg/same").linkname == "../pkg/mod.py"


def test_pack_output_into_a_bind_mount_of_a_directory_inside_is_refused(venv, tmp_path):
    """``mount --bind VENV/include MNT; pack -o MNT/v.tar``: MNT is a directory of the environment
    under another name (same ``st_dev``/``st_ino``): exit 2 before anything is written there."""
    if os.geteuid() != 0:
        pytest.skip("a bind mount needs root")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    (venv / "include" / "sub").mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "--bind", str(venv / "include"), str(mnt)], check=True)
    try:
        for out in (mnt / "v.tar", mnt / "sub" / "v.tar"):
            proc, data = _pack(venv, out)
            assert proc.returncode == 2 and "inside the environment" in data["error"], (out, proc.stdout, proc.stderr)
            assert not out.exists() and _nothing_written(out.parent)
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_pack_refuses_device_nodes_and_file_capabilities(venv, tmp_path):
    """SECURITY (issue 43): a character device made with mknod(2), and a file without the
    set-user-ID bit but with file capabilities (``security.capability``, ``setcap cap_setuid=ep``:
    the same rights by another door), are each refused with their path (exit 2, nothing written)."""
    import stat
    import struct

    if os.geteuid() != 0:
        pytest.skip("mknod and setting file capabilities need root")
    device = venv / "lib" / "pkg" / "mem"
    os.mknod(device, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
    proc, out = _pack(venv, tmp_path / "env.tar")
    assert proc.returncode == 2 and str(device) in out["error"] and "a character device" in out["error"], out
    assert "Traceback" not in proc.stderr and _nothing_written(tmp_path)
    device.unlink()
    capable = venv / "bin" / "helper"
    capable.write_text("#!/bin/sh\n")
    capable.chmod(0o755)
    try:  # VFS_CAP_REVISION_2 with the effective flag, permitted CAP_SETUID (7): capability.h
        os.setxattr(capable, "security.capability", struct.pack("<IIIII", 0x02000001, 1 << 7, 0, 0, 0))
    except OSError as exc:
        pytest.skip(f"no file capabilities on this file system ({exc})")
    proc, out = _pack(venv, tmp_path / "env.tar")
    assert proc.returncode == 2 and str(capable) in out["error"] and "file capabilities" in out["error"], out
    assert "expected no set-user-ID" in out["error"] and _nothing_written(tmp_path)


def test_pack_reads_nothing_before_a_fifo_or_socket_is_found(venv, tmp_path):
    """INTERNAL ERROR (issue 43): a FIFO named ``y.pth`` in site-packages made the ``.pth`` scan
    wait for a writer for ever, a socket named ``x.pth`` failed with "no such device" naming no
    socket. The contents are checked before anything in the environment is read: exit 2, each
    named with what it is."""
    site = next((venv / "lib").glob("python*/site-packages"))
    fifo = site / "y.pth"
    os.mkfifo(fifo)
    proc = run_envtool("pack", venv, "--format", "tar", "-o", tmp_path / "env.tar", "--json", timeout=30,
                       env={"ENVTOOL_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(REPO)})
    out = json.loads(proc.stdout)
    assert proc.returncode == 2 and str(fifo) in out["error"] and "a FIFO" in out["error"], out
    fifo.unlink()
    sock_path = site / "x.pth"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    short = Path(tempfile.mkdtemp(prefix="s"))  # the same file system as tmp_path: pytest makes it there too
    try:  # bound at a short path (sun_path holds 107 bytes, unix(7)), then renamed into the venv
        server.bind(str(short / "s"))
        os.rename(short / "s", sock_path)
        proc, out = _pack(venv, tmp_path / "env.tar")
    finally:
        server.close()
        os.rmdir(short)
    assert proc.returncode == 2 and str(sock_path) in out["error"] and "a socket" in out["error"], out
    assert "Traceback" not in proc.stderr and _nothing_written(tmp_path)


def test_pack_refuses_a_bin_link_to_a_non_interpreter_beside_the_base(venv, tmp_path):
    """WRONG RESULT (issue 43): every venv's ``bin/python3`` leads to its base interpreter's
    directory, so links there were let through whatever they named: ``bin/sh`` to another program
    in that directory was packed silently. Only interpreters are let through; the venv's own links
    still are (the pack succeeds once that link is gone)."""
    cfg = dict(line.split(" = ", 1) for line in (venv / "pyvenv.cfg").read_text().splitlines() if " = " in line)
    link = venv / "bin" / "sh"
    link.symlink_to(os.path.join(cfg["home"], "pydoc3"))
    proc, out = _pack(venv, tmp_path / "env.tar")
    assert proc.returncode == 2 and str(link) in out["error"] and "links that leave it" in out["error"], out
    link.unlink()
    proc, out = _pack(venv, tmp_path / "env.tar")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    with tarfile.open(tmp_path / "env.tar") as tar:
        assert tar.getmember("bin/python3").issym()


def test_pack_refuses_a_directory_it_cannot_read(user_dir):
    """WRONG RESULT (issue 43): a directory of the environment its owner made unreadable (mode
    0000) was skipped by the walk, and the pack written without its files (exit 0). Refused
    instead: exit 2, naming the directory, nothing written."""
    prefix = user_dir / "env"
    subprocess.run(["runuser", "-u", USER, "--", str(USER_VENV / "bin" / "python"), "-m", "venv", "--without-pip",
                    str(prefix)], check=True, timeout=60)
    secret = prefix / "lib" / "secret"
    secret.mkdir()
    (secret / "data.py").write_text("KEPT = 1\n")
    _chown_tree(secret)
    secret.chmod(0)
    proc = as_user(["pack", prefix, "--format", "tar", "-o", user_dir / "env.tar", "--json"], user_dir, _env(user_dir))
    out = json.loads(proc.stdout)
    assert proc.returncode == 2 and str(secret) in out["error"] and "cannot be read" in out["error"], out
    assert not (user_dir / "env.tar").exists() and _nothing_written(user_dir)
