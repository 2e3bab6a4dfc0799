"""Import time on every rank (issue 25, item 3): the strace parser on captured real traces, the mount
lookup on a real mount, the summary and its staging fix, and ``validate --import-time`` on this
machine with the real cpu-horovod environment.

The traces under tests/data/strace were written by strace 6.1 (Debian 12) with the options the
rank probe uses (``strace -f -qq -y -e trace=%file,getdents64 -o FILE``):

* ``threads-stat-listdir.txt.gz``: ``python3 -c ...`` with 4 threads, each 50 times
  ``os.stat(P + '/dir with "quote" é')``, ``os.listdir(P)`` and ``os.stat(P + '/missing')``
  (P = /tmp/imptime-fx/pre), then ``os.chdir(P)`` and a relative ``os.stat`` of the first name.
  The threads interleave, so strace splits calls into ``<unfinished ...>`` and ``resumed`` lines.
* ``import-torch-horovod.txt.gz``: ``/work/envs/cpu-horovod/bin/python -c "import torch,
  horovod.torch"`` (a venv over pyenv's Python 3.11.7).
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, run_envtool
from envtool.validate import rank_probe, ranks
from helpers.speed import scaled

DATA = REPO / "tests" / "data" / "strace"


def _lines(name):
    with gzip.open(DATA / name, "rt", errors="replace") as f:
        return f.readlines()


def test_counts_calls_under_the_prefix_in_an_interleaved_trace():
    lines = _lines("threads-stat-listdir.txt.gz")
    assert sum("<unfinished ...>" in ln for ln in lines) > 10  # the fixture does exercise split calls
    got = rank_probe.count_metadata_calls(lines, "/tmp/imptime-fx/pre")
    # per thread and round: stat (1), listdir = openat + getdents64 until empty (3), stat of a missing name (1);
    # 4 threads x 50 rounds x 5 = 1000; then chdir and one relative stat, resolved through AT_FDCWD</...>
    assert got["calls"] == 4 * 50 * 5 + 2
    assert got["by_syscall"] == {"newfstatat": 4 * 50 * 2 + 1, "openat": 200, "getdents64": 400, "chdir": 1}
    assert got["failed"] == 200            # the ENOENT stats, including those whose result came on a resumed line
    assert got["fd_stat"] == 200           # listdir's fstat of the open directory looks up no name
    # a sibling prefix that merely starts with the same characters is not "under" it
    assert rank_probe.count_metadata_calls(lines, "/tmp/imptime-fx/pr")["calls"] == 0
    # a relative name without -y's directory cannot be placed (pyenv's shim runs readlink("pyenv") after a cd)
    assert got["unplaced"] == 5
    stripped = [ln.replace("AT_FDCWD</tmp/imptime-fx/pre>", "AT_FDCWD") for ln in lines]
    again = rank_probe.count_metadata_calls(stripped, "/tmp/imptime-fx/pre")
    assert again["calls"] == 1001 and again["unplaced"] == 6


def test_counts_the_real_import_of_torch_and_horovod():
    lines = _lines("import-torch-horovod.txt.gz")
    env = rank_probe.count_metadata_calls(lines, "/work/envs/cpu-horovod")
    assert env == {"calls": 12479, "failed": 613, "fd_stat": 1905, "unplaced": 0,
                   "by_syscall": {"execve": 1, "openat": 1096, "readlink": 4, "newfstatat": 11086, "getdents64": 292}}
    # the venv's base interpreter (its standard library) is another tree
    base = rank_probe.count_metadata_calls(lines, "/root/.pyenv/versions/3.11.7")
    assert base["calls"] == 2420 and base["by_syscall"]["getdents64"] == 42
    both = rank_probe.count_metadata_calls(lines, ["/work/envs/cpu-horovod", "/root/.pyenv/versions/3.11.7"])
    assert both["calls"] == env["calls"] + base["calls"]
    # getcwd is in strace's %file class but looks up no name
    assert sum(ln.split()[1].startswith("getcwd(") for ln in lines) > 0
    assert "getcwd" not in env["by_syscall"]


def test_unescapes_names_as_strace_prints_them():
    assert rank_probe._unescape(r'dir with \"quote\" \303\251') == 'dir with "quote" é'
    assert rank_probe._unescape(r"tab\there") == "tab\there"


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_mount_of_names_a_real_mount_with_a_space(tmp_path):
    point = tmp_path / "mount point"
    point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "envtool-test", str(point)], check=True, timeout=scaled(30))
    try:
        (point / "lib").mkdir()
        with open("/proc/self/mountinfo") as f:
            info = f.readlines()
        assert rank_probe.mount_of(str(point / "lib"), info) == (str(point), "tmpfs")
        assert rank_probe.mount_of(str(tmp_path), info)[0] != str(point)
    finally:
        subprocess.run(["umount", str(point)], check=True, timeout=scaled(30))


def _rec(rank, host, seconds, calls=None, fs_type="ext4", prefix="/shared/envs/my env", error=None):
    meta = {"calls": calls, "failed": 1, "fd_stat": 0, "by_syscall": {}} if calls is not None else None
    if error:
        meta = {"error": error}
    imp = {"seconds": {"torch": seconds * 0.9, "horovod.torch": seconds * 0.1, "total": seconds},
           "prefix": prefix, "mount": "/shared", "fs_type": fs_type}
    if meta:
        imp["metadata"] = meta
    return {"rank": rank, "host": host, "ok": True, "checks": {}, "import": imp}


def test_summary_percentiles_over_ranks():
    recs = [_rec(r, f"node{r // 8 + 1}", float(r + 1), calls=1000 + r) for r in range(16)]
    s = ranks.import_summary(recs)
    assert s["ranks"] == 16 and s["hosts"] == ["node1", "node2"]
    assert s["seconds"] == {"p50": 8.0, "p99": 16.0, "max": 16.0}     # nearest rank: ceil(0.5*16)=8th, 16th
    assert s["metadata_calls"] == {"p50": 1007, "p99": 1015, "max": 1015}
    assert not s["slow"] and s["fix"] == []                           # ext4 is not a shared file system
    assert ranks.percentile(list(range(1, 201)), 99) == 198
    assert ranks.percentile([], 50) is None


def test_slow_import_on_a_network_file_system_gets_the_staging_fix():
    import shlex

    recs = [_rec(r, "node1", 12.0 + r, calls=12000, fs_type="lustre") for r in range(4)]
    recs.append(_rec(4, "node2", 3.0, fs_type="lustre", error="strace not found on node2 (...)"))
    s = ranks.import_summary(recs)
    assert s["slow"] and s["shared_fs"] == ["lustre"]
    assert shlex.split(s["fix"][0]) == ["envtool", "pack", "/shared/envs/my env", "--format", "squashfs",
                                        "-o", "my env.squashfs"]
    assert shlex.split(s["fix"][1]) == ["envtool", "validate", "--prefix", "/shared/envs/my env", "--submit",
                                        "--stage", "my env.squashfs"]
    from envtool.cli.main import build_parser

    for line in s["fix"]:  # both are commands envtool's own parser accepts
        args = build_parser().parse_args(shlex.split(line)[1:])
    assert args.stage == "my env.squashfs" and args.submit
    text = ranks.format_import(s)
    assert "SLOW: p99 import 15.0 s > 10 s" in text and "51 s from Lustre" in text
    assert "metadata calls not counted: rank 4 on node2: strace not found" in text
    # below the threshold (10 s, OLCF), or with a higher one, no fix
    assert not ranks.import_summary(recs, slow_seconds=20)["slow"]
    assert not ranks.import_summary([_rec(0, "n", 2.0, fs_type="nfs4")])["slow"]
    assert ranks.import_summary([{"rank": 0, "ok": False, "error": "x"}]) is None


def test_import_time_options_are_checked(tmp_path):
    proc = run_envtool("validate", "--prefix", tmp_path, "--submit", "--import-time", "--site", "local",
                       "--json", timeout=scaled(120))
    assert proc.returncode == 2 and "always measures import time" in proc.stderr, proc.stderr
    assert "error" in json.loads(proc.stdout)
    proc = run_envtool("validate", "--prefix", tmp_path, "--slow-import", "0", timeout=scaled(120))
    assert proc.returncode == 2 and "--slow-import" in proc.stderr and "greater than 0" in proc.stderr, proc.stderr
    # no strace on PATH: said before anything runs
    bare = tmp_path / "bin"
    bare.mkdir()
    proc = run_envtool("validate", "--prefix", tmp_path, "--import-time", env={"PATH": str(bare)}, timeout=scaled(120))
    assert proc.returncode == 2 and "strace" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


# validate --import-time on this host, counting real calls: tests/test_validate_here.py (one run with
# the benchmark).


def _traced_children(marker: str):
    """PIDs of live processes whose command line names ``marker``."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker in (d / "cmdline").read_bytes().decode(errors="replace"):
                    out.append(int(d.name))
            except OSError:
                pass
    return out


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
@pytest.mark.parametrize("how", ["timeout", "sigterm"])
def test_a_trace_cut_short_leaves_no_process_and_no_file(tmp_path, how):
    """A traced import that hangs, ended by the trace's timeout or by SIGTERM to the rank (scancel):
    strace and the traced interpreter are gone and the trace file is removed."""
    import signal
    import time

    mod = f"envtool_hang_{how}_{os.getpid()}"
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / f"{mod}.py").write_text("import time\ntime.sleep(120)\n")
    (tmp_path / "tmp").mkdir()
    env = dict(os.environ, PYTHONPATH=f"{tmp_path / 'lib'}:{REPO}", TMPDIR=str(tmp_path / "tmp"))
    code = ("import json, sys\nfrom envtool.validate import rank_probe\n"
            f"print(json.dumps(rank_probe.trace_import(({mod!r},), ['/'], timeout={3 if how == 'timeout' else scaled(60)})))\n")
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
    try:
        if how == "sigterm":
            deadline = time.monotonic() + scaled(60)
            while not _traced_children(f"import {mod}") and time.monotonic() < deadline:
                time.sleep(0.2)
            assert _traced_children(f"import {mod}"), "the traced import never started"
            proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=scaled(120))
    finally:
        if proc.poll() is None:
            proc.kill()
    if how == "timeout":
        assert "did not finish within 3 s" in json.loads(out)["error"]
    deadline = time.monotonic() + scaled(10)
    while _traced_children(f"import {mod}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _traced_children(f"import {mod}") == []
    assert list((tmp_path / "tmp").iterdir()) == []
