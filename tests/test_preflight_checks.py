"""The pre-flight's parsers and judgements on captured real outputs (issue 24, item 4), and the
interface variables ``jobscript`` writes from the site file's ``batch.interface``.

Captured in tests/data/multinode/ (each from a real run): ``srun --mpi=list`` and ``scontrol show
config`` of Debian's slurm-wlm 22.05 on the test cluster; ``ompi_info --parsable`` of Debian's
Open MPI 4.1.4 (the MPI the cpu-horovod environment's Horovod links); ``/proc/self/maps`` of a
Python process that loaded NCCL 2.30.7's ``libnccl.so.2`` (the ``nvidia-nccl-cu13`` wheel) once,
then a second copy of it from another directory; the output of a job whose second step srun could
not start because slurmd on node2 had been killed.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import tempfile
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import run_envtool
from envtool.scheduler import slurm
from envtool.validate import pmi
from envtool.validate import preflight as pf
from envtool.validate import ranks as rk
from helpers.speed import scaled

DATA = Path(__file__).parent / "data" / "multinode"


def test_srun_mpi_list_and_mpi_default_of_slurm_22_05():
    plugins = pmi.parse_srun_mpi_list((DATA / "srun-mpi-list-slurm-22.05.txt").read_text())
    assert plugins == ("pmix", "none", "cray_shasta", "pmi2", "pmix_v4")
    assert pmi.parse_mpi_default((DATA / "scontrol-show-config-slurm-22.05.txt").read_text()) == "pmix"
    # the older form, one "srun: NAME" per line
    assert pmi.parse_srun_mpi_list("srun: MPI types are...\nsrun: none\nsrun: pmi2\n") == ("none", "pmi2")


def test_ompi_info_of_debian_open_mpi_speaks_pmix_only():
    mpi = pmi.parse_ompi_info((DATA / "ompi_info-parsable-openmpi-4.1.4-debian.txt").read_text(), source="x")
    assert mpi.name == "Open MPI 4.1.4" and mpi.speaks == ("pmix",)
    assert pmi.parse_ompi_info("MPICH Version: 4.0\n") is None


def test_pmi_judgement_names_the_mismatch_and_a_quoted_fix():
    srun = pmi.parse_srun_mpi_list((DATA / "srun-mpi-list-slurm-22.05.txt").read_text())
    mpi = pmi.parse_ompi_info((DATA / "ompi_info-parsable-openmpi-4.1.4-debian.txt").read_text(),
                              source="/usr/bin/ompi_info")
    site = "/sites/my site.yaml"
    assert pmi.judge("pmix", srun, mpi, site, "login1") == []
    assert pmi.judge("pmix_v4", srun, mpi, site, "login1") == []
    [none] = pmi.judge("none", srun, mpi, site, "login1")
    assert none.startswith("pre-flight: login1: the launcher runs srun --mpi=none, but Open MPI 4.1.4 "
                           "(/usr/bin/ompi_info) initialises under srun through pmix only"), none
    assert "fix: set batch.mpi to pmix in '/sites/my site.yaml'" in none
    [pmi2] = pmi.judge("pmi2", srun, mpi, site, "login1")
    assert "srun --mpi=pmi2, but Open MPI 4.1.4" in pmi2 and "speaks pmix" in pmi2
    [absent] = pmi.judge("pmi3", srun, mpi, site, "login1")
    assert "srun --mpi=pmi3: this Slurm has no such plugin" in absent
    # an MPI that speaks PMI-2 only, on a Slurm without it
    [no_common] = pmi.judge("pmix", ("none", "pmix"), pmi.MpiBuild("Open MPI 4.0.0", ("pmi2",), "o"), site)
    assert "build the MPI with pmix support" in no_common


def _maps(name):
    return (DATA / name).read_text()


def test_libmpi_in_a_latin_1_directory_is_read_not_a_crash(tmp_path, monkeypatch):
    """``ldd`` of Horovod's ``mpi_lib*.so`` names the ``libmpi`` it found through LD_LIBRARY_PATH,
    a directory named in Latin-1 (``mpi\xe9``): its output is not UTF-8. The pre-flight reads it
    (the byte replaced) instead of dying with UnicodeDecodeError (exit 3). A real shared object
    (gcc, ``-lmpi``) and the real ldd."""
    import glob
    import shutil

    real = sorted(glob.glob("/usr/lib/*/libmpi.so.*[0-9]"))
    if shutil.which("gcc") is None or not real:
        pytest.skip("needs gcc and Open MPI's libmpi")
    ext = tmp_path / "env" / "lib" / "python3.11" / "site-packages" / "horovod" / "torch"
    ext.mkdir(parents=True)
    (tmp_path / "empty.c").write_text("int envtool_probe(void) { return 0; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(ext / "mpi_lib_v2.so"), str(tmp_path / "empty.c"),
                    "-Wl,--no-as-needed", f"-L{os.path.dirname(real[0])}", "-l:" + os.path.basename(real[0])],
                   check=True, timeout=scaled(60))
    latin = os.path.join(os.fsencode(tmp_path), b"mpi\xe9")
    os.mkdir(latin)
    os.symlink(os.fsencode(real[0]), os.path.join(latin, os.fsencode(os.path.basename(real[0]))))
    monkeypatch.setenv("LD_LIBRARY_PATH", os.fsdecode(latin))
    found = pmi.linked_libmpi(tmp_path / "env")
    assert found is not None and found.name == os.path.basename(real[0]) and "\ufffd" in str(found), found


def test_one_and_two_libnccl_in_captured_maps():
    assert pf.nccl_libraries(_maps("proc-maps-one-libnccl.txt")) == [
        "/tmp/mnpre-nccl/env/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2"]
    two = pf.nccl_libraries(_maps("proc-maps-two-libnccl.txt"))
    assert sorted(two) == ["/tmp/mnpre-nccl/env/lib/libnccl.so.2",
                           "/tmp/mnpre-nccl/env/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2"]


def test_two_libnccl_fail_the_preflight_with_the_node_named(tmp_path):
    (tmp_path / pf.DIR).mkdir()
    (tmp_path / pf.DIR / "maps-0.txt").write_text(_maps("proc-maps-one-libnccl.txt"))
    (tmp_path / pf.DIR / "maps-1.txt").write_text(_maps("proc-maps-two-libnccl.txt"))
    recs = [{"task": "0", "host": "gpu1", "first_addr": "10.0.0.1", "maps": "maps-0.txt"},
            {"task": "1", "host": "gpu2", "first_addr": "10.0.0.2", "maps": "maps-1.txt"}]
    problems = pf.judge(recs, 2, None, run_dir=tmp_path)
    assert len(problems) == 1 and problems[0].startswith("pre-flight: gpu2: 2 libnccl files in one process"), problems
    assert "python -m pip show -f nvidia-nccl-cu12 nvidia-nccl-cu11" in problems[0]
    # the gate of preflight.sh (bash) agrees
    for r in recs:
        (tmp_path / pf.DIR / f"task-{r['task']}.txt").write_text(
            "".join(f"{k}={v}\n" for k, v in r.items()) + "shm_kib=1048576\n")
    gate = subprocess.run(pf.gate_argv(pf.SCRIPT, tmp_path, 2), capture_output=True, text=True, timeout=scaled(60))
    assert gate.returncode == 1 and "more than one libnccl" in gate.stderr, gate.stderr
    (tmp_path / pf.DIR / "maps-1.txt").write_text(_maps("proc-maps-one-libnccl.txt"))
    gate = subprocess.run(pf.gate_argv(pf.SCRIPT, tmp_path, 2), capture_output=True, text=True, timeout=scaled(60))
    assert gate.returncode == 0, gate.stderr


def test_a_staged_copy_is_compared_through_the_libraries_it_was_packed_from(tmp_path):
    """Issue 45 (item 4): with --stage the ranks' prefix is a node-local copy made in the job, not
    on this host; the PMI check reads the staged copy's libraries where they were packed from (its
    lockfile still the pack's) and compares its MPI, instead of saying "Horovod links no libmpi".
    A real shared object (gcc, ``-lmpi``), the real ldd and ompi_info."""
    import glob
    import hashlib

    real = sorted(glob.glob("/usr/lib/*/libmpi.so.*[0-9]"))
    if shutil.which("gcc") is None or not real or shutil.which("ompi_info") is None:
        pytest.skip("needs gcc and Open MPI's libmpi and ompi_info")
    src = tmp_path / "src"
    ext = src / "lib" / "python3.11" / "site-packages" / "horovod" / "torch"
    ext.mkdir(parents=True)
    (tmp_path / "empty.c").write_text("int envtool_probe(void) { return 0; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(ext / "mpi_lib_v2.so"), str(tmp_path / "empty.c"),
                    "-Wl,--no-as-needed", f"-L{os.path.dirname(real[0])}", "-l:" + os.path.basename(real[0])],
                   check=True, timeout=scaled(60))
    (src / "conda-lock.yml").write_text("version: 1\n")
    lock = hashlib.sha256(b"version: 1\n").hexdigest()
    staged = tmp_path / "node-local" / "envtool-src-0a1b2c3d"  # made on the nodes, not here
    mpi, notes = pmi.mpi_build(staged, staged_from=src, staged_lock=lock)
    assert mpi is not None and mpi.name.startswith("Open MPI"), notes
    assert f"the staged copy {staged}" in mpi.source and not notes
    # compared: Debian's Open MPI speaks PMIx only, so a pmi2 launcher is named
    (problem,) = pmi.judge("pmi2", ("pmi2", "pmix"), mpi, "/site.yaml", "login1")
    assert "srun --mpi=pmi2" in problem and str(staged) in problem
    # the source changed since packing, or is not here: said so, never "links no libmpi"
    (note,) = pmi.mpi_build(staged, staged_from=src, staged_lock="0" * 64)[1]
    assert "holds another environment now" in note and "links no libmpi" not in note
    (note,) = pmi.mpi_build(staged, staged_from=tmp_path / "elsewhere", staged_lock=lock)[1]
    assert "is not on this host" in note and "links no libmpi" not in note


NCCL_WHEEL = Path("/opt/pypi-more/files/nvidia_nccl_cu13-2.30.7-py3-none-manylinux_2_18_x86_64.whl")


@pytest.mark.skipif(not NCCL_WHEEL.is_file(), reason="no NCCL wheel on this machine")
def test_two_libnccl_in_a_live_process(tmp_path):
    """A real process loads NCCL from two directories (pip's wheel and a conda-style lib/): its own
    /proc/self/maps shows both; a symlink to the same file counts once."""
    lib = zipfile.ZipFile(NCCL_WHEEL).read("nvidia/nccl/lib/libnccl.so.2")
    a, b = tmp_path / "site-packages" / "nvidia" / "nccl" / "lib", tmp_path / "lib"
    for d in (a, b):
        d.mkdir(parents=True)
        (d / "libnccl.so.2").write_bytes(lib)
    (b / "libnccl.so").symlink_to("libnccl.so.2")
    code = (f"import ctypes, sys; ctypes.CDLL({str(a / 'libnccl.so.2')!r}); "
            f"ctypes.CDLL({str(b / 'libnccl.so.2')!r}); ctypes.CDLL({str(b / 'libnccl.so')!r}); "
            f"sys.stdout.write(open('/proc/self/maps').read())")
    maps = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=scaled(60), check=True).stdout
    assert sorted(pf.nccl_libraries(maps)) == sorted([str(a / "libnccl.so.2"), str(b / "libnccl.so.2")])


def test_shm_below_64_mib_fails_below_1_gib_warns():
    recs = [{"task": "0", "host": "n1", "first_addr": "10.0.0.1", "shm_kib": str(32 * 1024)},
            {"task": "1", "host": "n2", "first_addr": "10.0.0.2", "shm_kib": str(512 * 1024)},
            {"task": "2", "host": "n3", "first_addr": "10.0.0.3", "shm_kib": str(8 * 1024 * 1024)}]
    warnings = []
    [problem] = pf.judge(recs, 3, None, warnings=warnings)
    assert problem.startswith("pre-flight: n1: /dev/shm is below 64 MiB (n1 32 MiB)") and \
        "fix: as root on those nodes mount -o remount,size=50% /dev/shm" in problem
    assert len(warnings) == 1 and warnings[0].startswith("pre-flight: n2: /dev/shm is below 1 GiB")


def test_launch_failures_and_node_states_from_slurm():
    text = (DATA / "job-out-slurmd-killed-on-node2.txt").read_text()
    assert slurm.parse_launch_failures(text) == [("node2", "Communication connection failure")]
    assert slurm.parse_node_states("node1 idle\nnode2 down*\nnode3 completing*\nnode4 mixed\n") == [
        ("node2", "down*"), ("node3", "completing*")]


def test_last_line_of_each_labelled_rank():
    text = " 0: envtool-probe probe on node1: allreduce on the CPU\n 1: envtool-probe probe on node2: hvd.init()\n" \
           "srun: Job step aborted\n 0: \n 0: slurmstepd-node1: error: *** STEP 2.1 ON node1 CANCELLED AT 2026 ***\n"
    assert rk.last_lines(text) == {0: "envtool-probe probe on node1: allreduce on the CPU",
                                   1: "envtool-probe probe on node2: hvd.init()"}


def _jobscript(site: Path, *extra: str, expect: int = 0):
    proc = run_envtool("jobscript", "--site-file", site, "--module", "m", "--nodes", "2", "--ranks-per-node", "1",
                       *extra, "--", "python", "train.py", timeout=scaled(120))
    assert proc.returncode == expect, proc.stderr + proc.stdout
    return proc


def test_jobscript_writes_the_site_interface_with_its_source(tmp_path):
    site = tmp_path / "ib site.yaml"
    site.write_text("name: ib\nscheduler: slurm\nlauncher: srun\ngpus_per_node: 0\nbatch:\n  cpus_per_node: 8\n  interface: ib0\n"
                    "  env: {NCCL_SOCKET_IFNAME: '=ib1'}\n")
    text = _jobscript(site).stdout
    for var in ("HOROVOD_GLOO_IFACE", "GLOO_SOCKET_IFNAME", "OMPI_MCA_btl_tcp_if_include"):
        assert f"export {var}=ib0  # batch.interface in {site}\n" in text, text
    # the site's own env wins over batch.interface, without the interface's note
    assert "export NCCL_SOCKET_IFNAME==ib1\n" in text, text
    f = tmp_path / "job.sh"
    f.write_text(text)
    out = subprocess.run(["bash", "-c", f"srun() {{ env; }}; module() {{ :; }}; source {f}"],
                         capture_output=True, text=True, timeout=scaled(60))
    assert "HOROVOD_GLOO_IFACE=ib0" in out.stdout.splitlines(), out.stderr


@pytest.mark.parametrize("value", ["'eth0; rm -rf /'", "a-very-long-interface-name", "'eth 0'", "'eth0/1'"])
def test_bad_interface_in_the_site_file_is_exit_2(tmp_path, value):
    site = tmp_path / "bad.yaml"
    site.write_text(f"name: bad\nscheduler: slurm\nlauncher: srun\ngpus_per_node: 0\nbatch:\n  interface: {value}\n")
    err = _jobscript(site, expect=2).stderr
    assert str(site) in err and "batch.interface" in err and "a network interface name" in err, err
    assert "Traceback" not in err


SHUTDOWN = """
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
import rank_probe
rec = {"phase": "probe", "host": "node1", "launcher_rank": 1, "ok": True, "checks": {}}
rank_probe._write(rec, sys.argv[2], "probe")
rank_probe.bounded_shutdown(rec, sys.argv[2], "probe", lambda: time.sleep(float(sys.argv[3])), timeout=1)
print("shutdown returned")
"""


@pytest.mark.parametrize("takes", [60, 0])
def test_a_rank_whose_shutdown_hangs_leaves_and_says_so(tmp_path, takes):
    """A rank whose Horovod shutdown (MPI_Finalize) does not return in time adds that to its record and
    exits 0 at once; validate names it as a warning, not a problem. One that returns in time is
    left alone."""
    import time

    from envtool.validate import rank_probe

    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", SHUTDOWN, str(Path(rank_probe.__file__).parent), str(tmp_path),
                           str(takes)], capture_output=True, text=True, timeout=scaled(60))
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - t0 < 30
    recs = rk.gather(tmp_path, "probe")
    assert rk.judge(recs, 2) == ["rank 0: no result (it did not start or was killed; see the job output)"]
    if takes:
        assert "shutdown returned" not in proc.stdout
        (said,) = rk.shutdown_warnings(recs)
        assert said.startswith("rank 1 on node1: Horovod's shutdown (MPI_Finalize under MPI) did not return "
                               "within 1 s; it left without it"), said
    else:
        assert "shutdown returned" in proc.stdout and "shutdown" not in recs[0]
        assert rk.shutdown_warnings(recs) == []


def _node_report(run_dir: Path, prefix: Path, user: str = "") -> dict:
    """preflight.sh's per-node step run for real on this host (as ``user`` through runuser when
    given) on ``prefix``; returns the node's report as :func:`preflight.gather` reads it."""
    argv = ["bash", str(pf.SCRIPT), str(run_dir), str(prefix), "-", "1", "0"]
    if user:
        argv = ["runuser", "-u", user, "--"] + argv
    subprocess.run(argv, capture_output=True, text=True, timeout=scaled(60))
    (rec,) = pf.gather(run_dir)
    return rec


def test_an_unreadable_prefix_is_named_for_what_it_is_not_a_partial_copy(tmp_path):
    """Issue 45 (item 4): a venv's absolute bin/python link that does not resolve on the node (what
    sshfs with default options shows) is named as a link that cannot be followed; a prefix the
    job's user cannot reach is 'permission denied'; an absent one is still 'does not exist'."""
    prefix = tmp_path / "env"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python").symlink_to("/nonexistent-base/bin/python3.11")
    rec = _node_report(tmp_path / "run1", prefix)
    assert rec["python"] == "dangling", rec
    (problem,) = pf.judge([rec], 1, prefix)
    assert "symbolic link to /nonexistent-base/bin/python3.11" in problem and "partial copy" not in problem
    assert "make the link resolve there" in problem

    # the link to a prefix that no longer resolves: not "missing"
    link = tmp_path / "envlink"
    link.symlink_to(tmp_path / "gone")
    rec = _node_report(tmp_path / "run2", link)
    assert rec["prefix"] == "unreadable" and "symbolic link to" in rec["prefix_why"], rec
    (problem,) = pf.judge([rec], 1, link)
    assert "cannot be read there" in problem and "does not exist" not in problem

    # permission denied, as another user: a directory on the way that only its owner may search
    import pwd

    user = "envtool-user"
    try:
        pwd.getpwnam(user)
    except KeyError:
        pytest.skip(f"test user {user} missing (bash scripts/setup.sh --test)")
    base = Path(tempfile.mkdtemp(prefix="envtool-pf-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        (base / "private" / "env" / "bin").mkdir(parents=True)
        os.chmod(base / "private", 0o700)
        run = base / "run"
        run.mkdir()
        os.chmod(run, 0o777)
        rec = _node_report(run, base / "private" / "env", user=user)
        assert rec["prefix"] == "unreadable" and "Permission denied" in rec["prefix_why"], rec
        (problem,) = pf.judge([rec], 1, base / "private" / "env")
        assert "Permission denied" in problem and "does not exist" not in problem
    finally:
        shutil.rmtree(base, ignore_errors=True)

    # absent: still named so
    rec = _node_report(tmp_path / "run3", tmp_path / "absent")
    assert rec["prefix"] == "missing"
    assert "does not exist there" in pf.judge([rec], 1, tmp_path / "absent")[0]
