"""Issue 45, item 2: the FAILED: line names node, rank and cause (rendezvous key and port, /dev/shm
full, the signal a rank died of); the excerpt keeps the error line; the pre-flight reads /dev/shm's
free space and compares the nodes' interfaces and MTUs. Output lines are in the formats the public
sources print (see envtool/validate/causes.py for where each was read)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

from envtool.validate import causes
from envtool.validate import preflight as pf
from envtool.validate import ranks as rk

# a Horovod build path long enough to fill the old 200-character excerpt before the cause
BUILD = "/tmp/pip-install-k2x9/horovod_3f1c/third_party/gloo/gloo/transport/tcp/../../../../horovod/common/gloo/" \
        "gloo_context.cc:" + "x" * 120
HVD_TIMEOUT = (f" 2: terminate called after throwing an instance of 'gloo::IoException'\n"
               f" 2:   what():  [{BUILD}] Wait timeout after 30 seconds for key(s): 2\n"
               f" 2: [node3:01234] *** Process received signal ***\n")


def test_horovod_wait_timeout_names_key_and_survives_a_long_build_path():
    last = rk.last_lines(HVD_TIMEOUT)
    assert "Wait timeout after 30 seconds for key(s): 2" in last[2]
    assert len(last[2]) <= 200
    assert rk.failure_causes(HVD_TIMEOUT) == [
        "rank 2: Gloo rendezvous timed out after 30 s waiting for key(s) 2"]


def test_torch_tcpstore_timeout_names_the_port():
    text = (" 1: torch.distributed.DistNetworkError: The client socket has timed out after 60000ms while trying "
            "to connect to (node1, 29500).\n")
    assert rk.failure_causes(text) == ["rank 1: torch TCPStore timed out after 60 s connecting to node1, port 29500"]


def test_open_mpi_connect_failure():
    text = ("[node3][[12345,1],2][btl_tcp_endpoint.c:803:mca_btl_tcp_endpoint_complete_connect] connect() to "
            "10.0.0.1 failed: Connection timed out (110)\n")
    assert rk.failure_causes(text) == ["Open MPI could not connect to 10.0.0.1: Connection timed out (110)"]


def test_dev_shm_full_with_free_space():
    text = (" 1: RuntimeError: [enforce fail at alloc_cpu.cpp:117] unable to open shared memory object "
            "</torch_123_456> in read-write mode: No space left on device (28)\n"
            " 0: OSError: [Errno 28] No space left on device: '/home/u/out.bin'\n")
    assert rk.failure_causes(text, shm_free_mib=0) == ["rank 1: /dev/shm full (0 MiB free)"]


def test_signal_a_rank_died_of():
    text = ("srun: error: node1: task 0: Segmentation fault (core dumped)\n"
            "srun: error: node2: task 1: Killed\n"
            "srun: error: node3: task 2: Exited with exit code 1\n")
    assert rk.failure_causes(text) == ["node1 rank 0: died of SIGSEGV", "node2 rank 1: died of SIGKILL",
                                       "node3 rank 2: exited with code 1"]
    assert causes.read("srun: error: node1: task 0: exited with exit code 139").text == \
        "died of SIGSEGV (exit 139)"


def test_every_pattern_names_its_public_source():
    assert all("@" in src or "errno" in src for _rx, src, _make in causes.PATTERNS)


def test_preflight_reads_free_space_of_dev_shm_on_this_host(tmp_path):
    if not shutil.which("df") or not os.path.isdir("/dev/shm"):
        import pytest
        pytest.skip("no df or /dev/shm here")
    subprocess.run(["bash", str(pf.SCRIPT), str(tmp_path), "-", "lo", "1"], timeout=60, check=False,
                   capture_output=True)
    (rec,) = pf.gather(tmp_path)
    st = os.statvfs("/dev/shm")
    free_kib = st.f_bavail * st.f_frsize // 1024
    assert abs(int(rec["shm_free_kib"]) - free_kib) <= 64 * 1024
    assert int(rec["local_free_kib"]) >= 0
    assert rec.get("iface_mtu") == str(int(open("/sys/class/net/lo/mtu").read()))
    assert "MiB free" in pf.table([rec])


def _node(host, iface, mtu, shm_free_kib="10485760"):
    return {"task": host[-1], "host": host, "prefix": "-", "first_addr": "10.0.0." + host[-1],
            "own_addrs": "10.0.0." + host[-1], "iface": iface, "iface_source": "hostname", "iface_state": "present",
            "iface_addr": "10.0.0." + host[-1], "iface_mtu": mtu, "ifaces": iface, "shm_kib": "10485760",
            "shm_free_kib": shm_free_kib}


def test_nodes_differing_in_interface_or_mtu_warn():
    warnings: list = []
    pf.judge([_node("node1", "eth0", "1500"), _node("node2", "eth0", "9000"), _node("node3", "ens1", "1500")],
             3, None, None, warnings=warnings)
    joined = "\n".join(warnings)
    assert "interface names differ" in joined and "ens1" in joined and "eth0" in joined
    assert "interface MTUs differ" in joined and "9000" in joined
    table = pf.table([_node("node1", "eth0", "1500")])
    assert "eth0 10.0.0.1 mtu 1500" in table


def test_dev_shm_nearly_full_fails_the_preflight():
    problems = pf.judge([_node("node1", "eth0", "1500"), _node("node2", "eth0", "1500", shm_free_kib="2048")],
                        2, None, None, warnings=[])
    assert any("node2: /dev/shm full (node2 2 MiB free" in p for p in problems), problems


def test_open_mpi_help_text_connect_failure():
    text = ("--------------------------------------------------------------------------\n"
            "WARNING: Open MPI failed to TCP connect to a peer MPI process.  This\nshould not happen.\n")
    assert rk.failure_causes(text) == [
        "Open MPI failed to TCP connect to a peer MPI process (a firewall or route between the nodes)"]


def test_job_output_read_as_bytes_names_node_rank_and_cause(tmp_path):
    from envtool.steps.validate import judge

    out = tmp_path / "job.out"
    out.write_bytes(b" 0: envtool-probe probe on node1: hvd.init() in /home/jos\xe9/env\n"
                    b"srun: error: node1: task 0: Segmentation fault (core dumped)\n")
    assert judge.named_causes(None, out) == ["node1 rank 0: died of SIGSEGV"]
    assert judge.shm_free_mib(type("Got", (), {"preflight": [{"shm_free_kib": "3072"}]})()) == 3.0


def _crash_step(tmp_path, how: str):
    """A step whose rank 0 does what the rank probe does around ``hvd.init()`` (the real
    ``init_mark``/``init_unmark`` of the run directory's rank_probe.py) and, the first time, ``how``
    inside it: ``segv`` (a real SIGSEGV), ``term`` (SIGTERM: ended by the launcher, not a crash) or
    ``raise`` (an exception: the rank writes its error). The second time it passes."""
    probe = rk.install_probe(tmp_path)
    step = tmp_path / "step.py"
    step.write_text(
        "import os, signal, sys\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "import rank_probe as rp\n"
        "out, phase, how = sys.argv[1:4]\n"
        "flag = os.path.join(out, 'tried')\n"
        "mark = rp.init_mark(out, phase, {'launcher_rank': 0, 'host': 'node1'})\n"
        "if not os.path.exists(flag):\n"
        "    open(flag, 'w').close()\n"
        "    if how == 'raise':\n"
        "        rp.init_unmark(mark)\n"
        "        sys.exit(1)\n"
        "    os.kill(os.getpid(), signal.SIGSEGV if how == 'segv' else signal.SIGTERM)\n"
        "rp.init_unmark(mark)\n"
        "print('rank 0 of 1', flush=True)\n")
    return probe, step


def test_a_rank_killed_by_a_crash_signal_in_hvd_init_is_retried_once_and_nothing_else_is(tmp_path):
    """Issue 45, item 3: the job script's retry function runs a check's step once more only when a
    rank died of a crash signal inside ``hvd.init()`` (here a real SIGSEGV, named by faulthandler in
    the rank's mark); a rank ended by SIGTERM or one that failed otherwise is not retried. The
    verdict also reads the launchers' reports (srun's, mpirun's, Open MPI's handler)."""
    from envtool.scheduler import script

    for how, want_rc, retried in (("segv", 0, True), ("term", 143, False), ("raise", 1, False)):
        run = tmp_path / how
        run.mkdir()
        probe, step = _crash_step(run, how)
        out = run / "job.out"
        func = script.retry_function((shutil.which("python3") or "python3", str(probe), str(run), "probe"), str(out))
        line = script.quote_words([script.RETRY_FUNCTION, "probe", "--", "python3", str(step), str(run), "probe", how])
        (run / "job.sh").write_text(f"set -e\n{func}\n{line}\necho done\n")
        with open(out, "wb") as f:
            proc = subprocess.run(["bash", str(run / "job.sh")], stdout=f, stderr=subprocess.STDOUT, timeout=20)
        text = out.read_text()
        assert proc.returncode == want_rc, (how, text)
        assert ("retrying the step once" in text) is retried, (how, text)
        assert (run / "retried" / "probe.json").exists() is retried, how
        if retried:
            ranks = json.loads((run / "retried" / "probe.json").read_text())["ranks"]
            assert [(r["rank"], r["host"], r["signal"]) for r in ranks] == [(0, "node1", "SIGSEGV")], ranks
            assert "Fatal Python error: Segmentation fault" in ranks[0]["said"]
            assert text.count("rank 0 of 1") == 1 and text.rstrip().endswith("done"), text
    # the launchers' reports of a crash (a signal Open MPI's handler took before faulthandler saw it)
    import importlib.util

    spec = importlib.util.spec_from_file_location("rank_probe_copy", tmp_path / "segv" / "rank_probe.py")
    rp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rp)
    assert rp._crash_in("srun: error: node2: task 1: Segmentation fault (core dumped)", 1, "node2", 7)[0] == "SIGSEGV"
    assert rp._crash_in("srun: error: node2: task 1: Terminated", 1, "node2", 7) is None
    assert rp._crash_in("srun: error: node2: tasks 0-3: Bus error", 2, "node2", 7)[0] == "SIGBUS"
    assert rp._crash_in("srun: error: node2: tasks 0,3: Bus error", 2, "node2", 7) is None
    assert rp._crash_in("mpirun noticed that process rank 0 with PID 0 on node vm exited on signal 7 (Bus error).",
                        0, "vm", 9)[0] == "SIGBUS"
    assert rp._crash_in("[vm:00123] Signal: Segmentation fault (11)", 0, "vm", 123)[0] == "SIGSEGV"
    assert rp._crash_in("[vm:00123] Signal: Segmentation fault (11)", 0, "vm", 124) is None
