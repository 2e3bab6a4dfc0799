"""``envtool validate`` on this machine: check-build, an N-rank probe per controller, the benchmark and --plot."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import run_envtool
from helpers.speed import scaled

@pytest.mark.slow
def test_validate_here_every_controller_and_benchmark_plot(cpu_horovod_env, tmp_path):
    """Every controller's 2 ranks, the benchmark with its plot, and --import-time: the first run's
    ranks count the metadata calls of their imports under strace, every run times them (one run for
    both: each took about 50 s)."""
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib (the test extra installs it)")
    png = tmp_path / "scaling.png"
    # a short TMPDIR: the DataLoader's forkserver binds a Unix socket under it, and a socket path
    # has at most 107 bytes (unix(7)), which pytest's own temporary paths come close to
    tmp = Path(tempfile.mkdtemp(prefix="etv-", dir="/tmp"))
    try:
        proc = run_envtool("validate", "--prefix", cpu_horovod_env, "--benchmark", "--steps", "5", "--plot", png,
                           *(("--import-time",) if shutil.which("strace") else ()), "--json", timeout=1200,
                           env={"TMPDIR": str(tmp)})
        assert proc.returncode == 0, proc.stderr + proc.stdout
        # a passing run leaves no run directory behind (torch keeps its own torchinductor_USER cache there)
        assert [p.name for p in tmp.iterdir() if p.name.startswith("envtool-")] == []
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    data = json.loads(proc.stdout)
    assert data["check_build"]["ok"] and data["spec"] == "cpu-horovod"
    assert sorted(data["runs"]) == ["gloo", "mpi"]
    for controller, recs in data["runs"].items():
        assert [r["rank"] for r in recs] == [0, 1]
        assert all(r["controller"] == controller and r["checks"]["allreduce_cpu"]["value"] == 1.5 for r in recs)
        assert all(r["checks"]["dataloader"]["method"] == "forkserver" and r["checks"]["dataloader"]["ok"]
                   for r in recs)
    points = data["benchmark"]["points"]
    assert [p["ranks"] for p in points] == [1, 2] and all(p["samples_per_sec_per_rank"] > 0 for p in points)
    eff = data["benchmark"]["efficiency"]
    assert eff == pytest.approx(points[1]["samples_per_sec_per_rank"] / points[0]["samples_per_sec_per_rank"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if shutil.which("strace"):
        _import_time_counts_real_calls(data, cpu_horovod_env)


def _import_time_counts_real_calls(data, prefix):
    s = data["import_time"]
    assert s["ranks"] == 2 and s["prefix"] == str(prefix) and s["untraced"] == []
    first = data["runs"][s["controller"]]
    for r in first:
        imp = r["import"]
        assert 0 < imp["seconds"]["torch"] <= imp["seconds"]["total"]
        # importing torch and horovod.torch from the venv looks up thousands of names under it
        assert imp["metadata"]["calls"] > 1000 and imp["metadata"]["by_syscall"]["openat"] > 100
        assert imp["metadata"]["failed"] > 0 and imp["fs_type"]
    assert s["metadata_calls"]["max"] == max(r["import"]["metadata"]["calls"] for r in first)
    assert s["seconds"]["max"] == max(r["import"]["seconds"]["total"] for r in first)
    # every run times the import; only the first counts calls
    other = [c for c in data["runs"] if c != s["controller"]]
    for c in other:
        assert all("metadata" not in r["import"] and r["import"]["seconds"]["total"] > 0 for r in data["runs"][c])


def test_validate_here_reports_a_missing_horovod(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = run_envtool("validate", "--prefix", venv, timeout=scaled(120), env={"TMPDIR": str(tmp)})
    assert proc.returncode == 2 and "no bin/horovodrun" in proc.stderr, proc.stderr
    assert [p.name for p in tmp.iterdir() if p.name.startswith("envtool-")] == []


def test_validate_bad_options(tmp_path):
    proc = run_envtool("validate", "--prefix", tmp_path, "--plot", "x.png", timeout=scaled(60))
    assert proc.returncode == 2 and "--benchmark" in proc.stderr
    proc = run_envtool("validate", "--module", "x/1", timeout=scaled(60))
    assert proc.returncode == 2 and "--submit" in proc.stderr, proc.stderr
