"""``envtool validate --submit`` through a real one-node Slurm (Debian's slurm-wlm + munge).

The ``slurm_cluster`` fixture installs Slurm with tests/setup.d/slurm.sh when it is missing (as
root), writes slurm.conf for this machine (loopback only, private ports, state and munge key under
a temporary directory), starts munged/slurmctld/slurmd, waits for the node to be idle, and stops
everything after the module. The tests are skipped only when Slurm cannot be installed (not root,
no package archive), and fail instead under ``CI``.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO
from helpers import slurm
from helpers.speed import scaled

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    why = slurm.ensure_installed()
    if why:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(f"Slurm cannot be installed here: {why}")
    cluster = slurm.start(tmp_path_factory.mktemp("slurm"))
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def slurm_site(slurm_cluster, tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("site") / "testslurm.yaml"
    site.write_text(f"""name: testslurm
summary: the one-node Slurm the tests start (loopback)
platforms: [linux-64]
scheduler: slurm
launcher: "srun -n {{ranks}}"
gpus_per_node: 0
batch:
  cpus_per_node: {slurm_cluster.cpus}
  mpi: pmix
""")
    return site


def envtool(cluster, *args, timeout=900):
    env = dict(os.environ, **cluster.env)
    env.pop("ENVTOOL_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "envtool", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=timeout)


@pytest.mark.slow  # needs the cpu-horovod environment
def test_validate_submit_runs_ranks_under_srun_pmix(slurm_cluster, slurm_site, cpu_horovod_env, tmp_path):
    run = tmp_path / "run"
    proc = envtool(slurm_cluster, "validate", "--prefix", cpu_horovod_env, "--site-file", slurm_site, "--submit",
                   "--sweep-max", "0",
                   "--nodes", "1", "--ranks-per-node", "2", "--workdir", run, "--benchmark", "--steps", "5", "--json")
    assert proc.returncode == 0, proc.stderr + proc.stdout + slurm_cluster.logs()
    data = json.loads(proc.stdout)
    assert data["scheduler"] == "slurm" and data["state"] == "COMPLETED" and data["job_id"].isdigit()
    script = (run / "job.sh").read_text()
    assert "srun --mpi=pmix " in script and "#SBATCH --ntasks-per-node=2" in script
    ranks = data["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        assert r["size"] == 2 and r["controller"] == "mpi", r      # Horovod's MPI controller under srun
        assert r["launcher_rank"] == r["rank"]                      # SLURM_PROCID / PMIx agree with Horovod
        assert r["checks"]["allreduce_cpu"]["value"] == 1.5
        assert r["checks"]["dataloader"]["ok"] and r["checks"]["dataloader"]["method"] == "forkserver"
    assert data["check_build"]["ok"] and "MPI" in data["check_build"]["controllers"]
    bench = data["benchmark"]
    assert [p["ranks"] for p in bench["points"]] == [1, 2]
    assert all(p["samples_per_sec_per_rank"] > 0 for p in bench["points"])
    assert 0 < bench["efficiency"] < 5
    assert slurm_cluster.queue() == ""


def test_failing_rank_is_reported_with_its_error(slurm_cluster, slurm_site, tmp_path):
    """An environment without Horovod: every rank reports ModuleNotFoundError, exit 1, rank and host named."""
    venv = tmp_path / "no-horovod"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    proc = envtool(slurm_cluster, "validate", "--prefix", venv, "--site-file", slurm_site, "--submit",
                   "--nodes", "1", "--ranks-per-node", "2", "--workdir", tmp_path / "run")
    assert proc.returncode == 1, proc.stderr + proc.stdout
    import socket

    host = socket.gethostname()
    assert f"rank 0 on {host} (pytorch): ModuleNotFoundError: No module named 'torch'" in proc.stderr, proc.stderr
    assert f"rank 1 on {host} (pytorch): ModuleNotFoundError" in proc.stderr
    assert "FAILED" in proc.stdout and "job " in proc.stdout
    assert slurm_cluster.queue() == ""


@pytest.mark.slow  # needs the cpu-horovod environment
def test_mpi_not_started_through_pmix_is_reported(slurm_cluster, slurm_site, cpu_horovod_env, tmp_path):
    """srun --mpi=none against an Open MPI that initialises under srun through PMIx only: the ranks
    would die in MPI_Init, so the launcher's PMI is checked against the MPI build before anything is
    submitted (exit 1, the fix names the site file's batch.mpi; no job runs)."""
    site = tmp_path / "nopmix.yaml"
    site.write_text(slurm_site.read_text().replace("mpi: pmix", "mpi: none"))
    proc = envtool(slurm_cluster, "validate", "--prefix", cpu_horovod_env, "--site-file", site, "--submit",
                   "--nodes", "1", "--ranks-per-node", "2", "--workdir", tmp_path / "run")
    assert proc.returncode == 1, proc.stderr + proc.stdout
    assert "the launcher runs srun --mpi=none" in proc.stderr and "MPI_Init" in proc.stderr, proc.stderr
    assert f"fix: set batch.mpi to pmix in {site}" in proc.stderr, proc.stderr
    assert "the job was not submitted: its launcher and MPI do not match" in proc.stderr
    assert not (tmp_path / "run" / "job.sh").exists()
    assert slurm_cluster.queue() == ""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_cancels_the_job(slurm_cluster, slurm_site, tmp_path, sig):
    """A job that waits behind another is cancelled (scancel) on Ctrl-C / SIGTERM; nothing stays queued."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    blocker = slurm_cluster.run("sbatch", "--parsable", "-n", str(slurm_cluster.cpus), "-o", "/dev/null",
                                "--wrap", "sleep 600")
    assert blocker.returncode == 0, blocker.stderr
    blocker_id = blocker.stdout.strip().split(";")[0]
    env = dict(os.environ, **slurm_cluster.env)
    proc = subprocess.Popen([sys.executable, "-m", "envtool", "validate", "--prefix", str(venv), "--site-file",
                             str(slurm_site), "--submit", "--nodes", "1", "--ranks-per-node", "2", "--workdir",
                             str(tmp_path / "run")], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        deadline = time.monotonic() + scaled(120)
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            lines.append(line)
            if "queued (PENDING)" in line or not line:
                break
        assert any("queued (PENDING)" in x for x in lines), "".join(lines)
        job_id = next(x for x in lines if "submitted" in x).split()[2]
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=scaled(120))
    finally:
        if proc.poll() is None:
            proc.kill()
        slurm_cluster.run("scancel", blocker_id)
    assert proc.returncode == 130, "".join(lines) + err
    assert f"cancelling job {job_id}: scancel {job_id}" in err and f"job {job_id} cancelled" in err
    state = slurm_cluster.run("scontrol", "-o", "show", "job", job_id).stdout
    assert "JobState=CANCELLED" in state
    deadline = time.monotonic() + scaled(30)
    while slurm_cluster.queue() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert slurm_cluster.queue() == ""
