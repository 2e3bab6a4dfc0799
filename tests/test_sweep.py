"""The allreduce sweep's arithmetic and parsers (issue 24, item 3): nccl-tests' bus bandwidth, the
network transport NCCL used (from NCCL_DEBUG=INFO lines as NCCL printed them in public issue
threads, each cited), the site file's fabric and references (ReFrame's value/lower/upper/unit),
and bad references refused with exit 2 naming file and field."""
from __future__ import annotations

import pytest

from conftest import run_envtool
from envtool.spec import sites
from envtool.validate import sweep
from helpers.speed import scaled

# NCCL 2.19.3 on RoCE: NVIDIA/nccl-tests#185 (https://github.com/NVIDIA/nccl-tests/issues/185)
IB_LINES = """\
dgxh100-4:460770:460770 [0] NCCL INFO Bootstrap : Using enp220s0np0:11.1.128.136<0>
dgxh100-4:460770:460770 [0] NCCL INFO NET/Plugin : dlerror=libnccl-net.so: cannot open shared object file: No such file or directory No plugin found (libnccl-net.so), using internal implementation
dgxh100-4:460770:460842 [0] NCCL INFO NET/IB : Using [0]mlx5_10:1/RoCE [1]mlx5_11:1/RoCE [RO]; OOB enp220s0np0:11.1.128.136<0>
dgxh100-4:460770:460842 [0] NCCL INFO Using non-device net plugin version 0
dgxh100-4:460770:460842 [0] NCCL INFO Using network IB
""".splitlines()
# Two hosts without IB: NVIDIA/nccl-tests#179 (https://github.com/NVIDIA/nccl-tests/issues/179)
SOCKET_LINES = """\
manolinux1:12260:12268 [0] NCCL INFO NET/IB : No device found.
manolinux1:12260:12268 [0] NCCL INFO NET/Socket : Using [0]enp1s0:10.39.42.196<0>
manolinux1:12260:12268 [0] NCCL INFO Using non-device net plugin version 0
manolinux1:12260:12268 [0] NCCL INFO Using network Socket
""".splitlines()
# NCCL 2.4 with aws-ofi-nccl on EFA (no "Using network" line yet): NVIDIA/nccl#229
# (https://github.com/NVIDIA/nccl/issues/229)
OFI_LINES = """\
ip-192-168-16-255:35481:35549 [1] NCCL INFO NET/OFI No NIC info for dev 0
ip-192-168-29-243:26465:26533 [0] NCCL INFO Ring 00 : 7 -> 8 [receive] via NET/AWS Libfabric/0
ip-192-168-29-243:26465:26533 [0] NCCL INFO Ring 00 : 8[0] -> 9[1] via P2P/IPC
""".splitlines()
# NCCL 2.4.7 initialising both transports on an IB cluster: Mellanox/nv_peer_memory#56
# (https://github.com/Mellanox/nv_peer_memory/issues/56)
BOTH_INIT_LINES = """\
master_node:20:289 [0] NCCL INFO NET/Socket : Using [0]ib0:192.168.11.1<0>
master_node:20:289 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so).
master_node:20:289 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:192.168.11.1<0>
""".splitlines()
# Channels over sockets between nodes and shared memory inside one: NVIDIA/nccl#1232
# (https://github.com/NVIDIA/nccl/issues/1232)
CHANNEL_LINES = """\
[0] node0:13571:13571 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0
[2] node0:13572:13572 [1] NCCL INFO Channel 00 : 2[1] -> 0[0] via SHM/direct/direct
[1] node2:22555:22555 [0] NCCL INFO Channel 01/0 : 2[1] -> 1[0] [receive] via NET/Socket/0
""".splitlines()


def test_busbw_is_nccl_tests_definition():
    # 64 MiB in 0.1 s on 4 ranks: algbw 671 MB/s, busbw x 2*3/4
    assert sweep.busbw(64 << 20, 0.1, 4) == pytest.approx((64 << 20) / 0.1 * 1.5)
    assert sweep.busbw(8, 1e-6, 2) == pytest.approx(8e6)          # 2 ranks: factor 1
    assert sweep.busbw(1 << 20, 0.5, 1) == 0.0                    # one rank moves nothing
    with pytest.raises(ValueError):
        sweep.busbw(8, 0.0, 2)
    assert sweep.SIZES[0] == 8 and sweep.SIZES[-1] == 64 << 20 and len(sweep.SIZES) == 24


def test_nccl_transport_from_real_log_lines():
    ib = sweep.nccl_transports(IB_LINES)
    assert ib["network"] == "ib" and ib["initialised"] == ["ib"] and ib["interfaces"] == ["mlx5_10", "mlx5_11"]
    sock = sweep.nccl_transports(SOCKET_LINES)
    assert sock["network"] == "socket" and sock["interfaces"] == ["enp1s0"]
    ofi = sweep.nccl_transports(OFI_LINES)
    assert ofi["network"] == "ofi" and ofi["channels"] == ["ofi", "p2p"]
    both = sweep.nccl_transports(BOTH_INIT_LINES)
    assert both["network"] is None and both["initialised"] == ["socket", "ib"]   # initialised is not used
    ch = sweep.nccl_transports(CHANNEL_LINES)
    assert ch["network"] == "socket" and ch["channels"] == ["socket", "shm"]
    assert sweep.nccl_transports(["plain text", "NCCL WARN NET/IB : oops"])["network"] is None


def test_socket_fallback_fails_on_an_ib_or_ofi_site():
    sock = sweep.nccl_transports(SOCKET_LINES)["network"]
    assert "NCCL used the socket transport between nodes, the site's fabric is ofi (a silent fallback); fix: " \
           "load the site's aws-ofi-nccl plugin" in sweep.check_fabric(sock, "ofi")
    assert "the site's fabric is ib" in sweep.check_fabric(sock, "ib")
    assert sweep.check_fabric(sweep.nccl_transports(IB_LINES)["network"], "ib") is None
    assert sweep.check_fabric(sweep.nccl_transports(OFI_LINES)["network"], "ofi") is None
    assert sweep.check_fabric(sock, "socket") is None and sweep.check_fabric(sock, None) is None
    assert "did not say" in sweep.check_fabric(None, "ib")


def _site(tmp_path, body: str):
    p = tmp_path / "s.yaml"
    p.write_text("name: s\nscheduler: slurm\n" + body)
    return p


def test_references_from_the_site_file_are_checked_per_size(tmp_path):
    site = sites.load_site(_site(tmp_path, """validation:
  fabric: IB
  sweep:
    gloo:
      2:
        64MiB: [1.0, -0.1, null, GB/s]
        8B: [100, null, 0.5, us]
    "*":
      3: {1KiB: [5, -0.5, 0.5, MB/s]}
"""))
    assert site.validate.fabric == "ib"
    refs = {(r.controller, r.nodes, r.size): r for r in site.validate.references}
    assert refs[("gloo", 2, 64 << 20)].lower == -0.1 and refs[("gloo", 2, 8)].unit == "us"
    rows = [{"bytes": 8, "latency_us": 160.0, "busbw_gbs": 0.0001},
            {"bytes": 64 << 20, "latency_us": 1e5, "busbw_gbs": 0.85}]
    problems = sweep.check_references(rows, site.validate.references, "gloo", 2)
    assert len(problems) == 2
    assert problems[0].startswith("gloo allreduce of 64 MiB on 2 node(s): bus bandwidth 0.85 GB/s is below the "
                                  "site's reference 1 GB/s (lower bound 0.9")
    assert problems[1].startswith("gloo allreduce of 8 B on 2 node(s): latency 160 us is above the site's "
                                  "reference 100 us (upper bound 150")
    assert sweep.check_references(rows, site.validate.references, "mpi", 2) == []      # gloo's only
    ok = [{"bytes": 8, "latency_us": 120.0, "busbw_gbs": 0.0001}, {"bytes": 64 << 20, "latency_us": 1, "busbw_gbs": 0.95}]
    assert sweep.check_references(ok, site.validate.references, "gloo", 2) == []
    assert "no measurement" in sweep.check_references(ok, site.validate.references, "mpi", 3)[0]   # "*" applies


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    """A real (small) environment: a venv."""
    import subprocess
    import sys

    p = tmp_path_factory.mktemp("env") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(p)], check=True, timeout=scaled(120))
    return p


@pytest.mark.parametrize("body, field, expected", [
    ("validation: {fabric: myrinet}", "validation.fabric", "one of ib, ofi, socket"),
    ("validation: {speed: 1}", "validation.speed", "a known field"),
    ("validation: {sweep: {gloo: {2: {3MiB: [1, -0.1, null, GB/s]}}}}", "validation.sweep.gloo.2.3MiB",
     "a size of the sweep"),
    ("validation: {sweep: {gloo: {2: {8B: [1, 0.1, null, GB/s]}}}}", "validation.sweep.gloo.2.8B",
     "[value > 0, lower (a fraction from -1 to 0, or null)"),
    ("validation: {sweep: {gloo: {2: {8B: [1, -0.1, null, furlongs]}}}}", "validation.sweep.gloo.2.8B",
     "unit (GB/s, MB/s, us, ms)"),
    ("validation: {sweep: {gloo: {two: {8B: [1, -0.1, null, GB/s]}}}}", "validation.sweep.gloo.two",
     "a node count"),
    ("validation: {sweep: {ucx: {2: {8B: [1, -0.1, null, GB/s]}}}}", "validation.sweep.ucx",
     "a controller"),
])
def test_bad_site_references_exit_2_naming_file_and_field(tmp_path, prefix, body, field, expected):
    path = _site(tmp_path, body + "\n")
    proc = run_envtool("validate", "--prefix", prefix, "--site-file", path, "--submit", "--nodes", "2",
                       "--ranks-per-node", "1", "--workdir", tmp_path / "run", timeout=scaled(120))
    assert proc.returncode == 2, proc.stderr
    assert f"{path}:" in proc.stderr and f"{field}: expected " in proc.stderr, proc.stderr
    assert expected in proc.stderr.split(f"{field}: expected ", 1)[1], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()


def test_sweep_max_must_be_a_sweep_size(prefix):
    proc = run_envtool("validate", "--prefix", prefix, "--submit", "--nodes", "1", "--sweep-max", "3MiB")
    assert proc.returncode == 2 and "--sweep-max 3MiB: expected a power of two from 8B to 64MiB" in proc.stderr


def test_rows_take_the_slowest_rank_and_need_every_rank_exact():
    recs = [{"checks": {"sweep": {"sizes": [{"bytes": 8, "seconds": 1e-3, "exact": True, "iterations": 20},
                                           {"bytes": 16, "seconds": 1e-3, "exact": True, "iterations": 20}]}}},
            {"checks": {"sweep": {"sizes": [{"bytes": 8, "seconds": 2e-3, "exact": True, "iterations": 20},
                                           {"bytes": 16, "seconds": 1e-3, "exact": False, "iterations": 20}]}}}]
    rows = sweep.rows(recs)
    assert rows[0]["latency_us"] == pytest.approx(2000.0) and rows[0]["verified"]
    assert rows[0]["busbw_gbs"] == pytest.approx(8 / 2e-3 / 1e9)     # 2 ranks: busbw = algbw
    assert not rows[1]["verified"]
    assert "  16 B" in sweep.table("gloo", rows) and sweep.table("gloo", rows).splitlines()[-1].endswith("NO")


def test_rendezvous_reads_slurm_tasks_per_node():
    """rendezvous.py's host plan: SLURM_TASKS_PER_NODE as slurm prints it (``2(x3),1``, sbatch(1))."""
    import importlib.util

    from envtool.validate import ranks

    spec = importlib.util.spec_from_file_location("rendezvous", ranks.RENDEZVOUS_FILE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.tasks_per_node("2(x3),1", 4) == [2, 2, 2, 1]
    assert mod.tasks_per_node("4", 1) == [4]
    with pytest.raises(ValueError, match="names 2 nodes, the job has 3"):
        mod.tasks_per_node("2(x2)", 3)
    with pytest.raises(ValueError, match="not COUNT"):
        mod.tasks_per_node("two", 1)
