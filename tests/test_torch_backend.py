"""torch.distributed's backend follows the device (issue 41, item 1).

The rank probe picks NCCL where a rank sees a GPU and torch has NCCL, gloo otherwise; asked for a
backend this torch lacks, it fails naming what is missing (no GPU, no NCCL in a CPU build, no MPI
in PyTorch's wheels). Run for real here: two ranks of the real cpu-horovod environment's torch
through the real TCPStore rendezvous (``envtool/validate/rendezvous.py``) that validation jobs use.
This machine has no GPU, so NCCL itself is proven only on a GPU machine (``scripts/gpu_proof.sh``).
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from conftest import REPO
from envtool.validate import checks, ranks
from helpers.speed import scaled

VALIDATE = REPO / "envtool" / "validate"


def _ranks(env_prefix: Path, out: Path, backend: str, size: int = 2) -> list:
    """Run ``size`` ranks of the torch probe with ``--backend backend`` behind the TCPStore
    rendezvous; their records (sorted by rank)."""
    py = str(env_prefix / "bin" / "python")
    line = " & ".join(f"SLURM_PROCID={r} SLURM_LOCALID={r} " + shlex.join(
        [py, str(VALIDATE / "rank_probe.py"), str(out), "probe-torch", "--controller", "torch", "--backend", backend])
        for r in range(size)) + "; wait"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI", "PMIX_", "HOROVOD_"))}
    env["SLURM_NTASKS"] = str(size)
    proc = subprocess.run([py, str(VALIDATE / "rendezvous.py"), "torch-gloo", str(out), "probe-torch", "120", "--",
                           "bash", "-c", line], env=env, capture_output=True, text=True, timeout=scaled(300),
                          cwd=out.parent)
    found = sorted((out / "probe-torch").glob("rank-*.json"))
    assert len(found) == size, proc.stdout + proc.stderr
    return [json.loads(p.read_text()) for p in found]


@pytest.mark.slow
def test_auto_picks_gloo_without_a_gpu_and_the_ranks_agree(cpu_horovod_env, tmp_path):
    recs = _ranks(cpu_horovod_env, tmp_path / "auto", "auto")
    assert [(r["rank"], r["backend"], r["backend_reason"]) for r in recs] == \
        [(0, "gloo", "auto: no GPU on this rank"), (1, "gloo", "auto: no GPU on this rank")]
    assert all(r["ok"] and r["checks"]["allreduce_cpu"]["value"] == 1.5 for r in recs), recs
    assert "allreduce_gpu" not in recs[0]["checks"]
    assert "torch/gloo" in ranks.table(recs)


@pytest.mark.slow
@pytest.mark.parametrize("backend, words", [
    ("nccl", "no NCCL backend in this build"),   # PyPI's CPU wheel of torch has no NCCL
    ("mpi", "no MPI backend in this build"),     # no PyTorch wheel has MPI
])
def test_a_backend_this_torch_lacks_fails_naming_why(cpu_horovod_env, tmp_path, backend, words):
    recs = _ranks(cpu_horovod_env, tmp_path / backend, backend)
    for r in recs:
        assert not r["ok"] and words in r["error"] and r["checks"]["backend"]["ok"] is False, r
    table = ranks.table(recs)
    assert "backend not available" in table and words in table


def test_the_nccl_check_is_selected_on_gpu_sites_only():
    def names(gpus):
        sel = checks.Selection(where="job", frameworks=("pytorch",), gpus=gpus, step_launcher=True,
                               built=frozenset({"mpi", "gloo", "nccl"}))
        return [c.name for c in checks.select(sel)]

    assert "torch-nccl" in names(True) and "torch-gloo" in names(True)
    assert "torch-nccl" not in names(False) and "torch-gloo" in names(False)
    nccl = checks.CHECKS.get("torch-nccl")
    assert nccl.device == "gpu" and nccl.args[-2:] == ("--backend", "nccl") and nccl.phase != \
        checks.CHECKS.get("torch-gloo").phase
