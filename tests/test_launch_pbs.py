"""DDP launches on a PBS site (issue 41, item 2): Polaris's job scripts start DDP ranks the way
ALCF's user guide does, Cray PALS's ``mpiexec -n T --ppn R --depth=D --cpu-bind depth``, each rank
taking ``RANK``/``LOCAL_RANK`` from ``PALS_RANKID``/``PALS_LOCAL_RANKID`` and ``MASTER_ADDR``
from the first line of ``$PBS_NODEFILE`` (``envtool/scheduler/pbs.py`` names the source of each).
The launches are registered plug-ins (:data:`envtool.spec.registry.DDP_LAUNCHES`) whose needs are
the scheduler's declared capabilities and the site's launcher, not the scheduler's name.

No PBS runs here: the job script is read as written, and its DDP wrapper is run by bash with the
variables PALS and PBS give a rank and a real node file, so what the ranks would get is the
shell's own expansion.
"""
from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from conftest import run_envtool
from helpers.speed import scaled

JOB = ("--site", "polaris", "--module", "conda", "--nodes", "2", "--account", "A")
#: How PBS on Polaris names hosts in the node file
#: (argonne-lcf/user-guides@7d04a3f91d5e:docs/polaris/known-issues.md#L15).
NODES = "x3006c0s13b0n0.hsn.cm.polaris.alcf.anl.gov\nx3006c0s13b1n0.hsn.cm.polaris.alcf.anl.gov\n"
PBS_JOBID = "1234567.polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov"


def jobscript(*args, expect=0) -> subprocess.CompletedProcess:
    proc = run_envtool("jobscript", *JOB, *args, timeout=scaled(120))
    assert proc.returncode == expect, proc.stderr + proc.stdout
    return proc


def launch_line(text: str) -> list:
    """The script's last line as words: every printed line must be shell-quoted (shlex reads it)."""
    return shlex.split(text.strip().splitlines()[-1])


def run_rank(words: list, tmp_path: Path, program: list, keep: int = 4, **pals) -> str:
    """Run a DDP step's ``bash -c SCRIPT`` words as one PALS rank would, ``program`` in place of
    what follows the first ``keep`` words (``bash -c SCRIPT NAME`` for a per-rank launch, ``bash -c
    SCRIPT`` for torchrun, whose interpreter is ``$0``), with a real ``$PBS_NODEFILE`` and the
    rank's variables."""
    nodefile = tmp_path / "nodefile"
    nodefile.write_text(NODES)
    env = {"PATH": os.environ["PATH"], "PBS_NODEFILE": str(nodefile), "PBS_JOBID": PBS_JOBID,
           **{k: str(v) for k, v in pals.items()}}
    start = words.index("bash")
    proc = subprocess.run(words[start:start + keep] + program, capture_output=True, text=True, env=env,
                          timeout=scaled(30))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_polaris_starts_ddp_ranks_with_alcfs_mpiexec_and_pals_variables(tmp_path):
    """Without --launch: the site's default (mpiexec, sourced), one rank per GPU through PALS's
    mpiexec, each rank's torch.distributed variables from PALS and the node file."""
    text = jobscript("--", "python", "train.py", "--lr", "0.1").stdout
    assert "# launch: mpiexec, site polaris's default launch (source alcf-pytorch: argonne-lcf/user-guides@" in text
    words = launch_line(text)
    assert words[:words.index("bash")] == ["mpiexec", "-n", "8", "--ppn", "4", "--depth=8", "--cpu-bind", "depth"]
    assert words[-4:] == ["python", "train.py", "--lr", "0.1"]
    show = ["python3", "-c", "import os; print(*(os.environ[k] for k in ('RANK', 'LOCAL_RANK', 'WORLD_SIZE', "
            "'MASTER_ADDR', 'MASTER_PORT')))"]
    out = run_rank(words, tmp_path, show, PALS_RANKID=5, PALS_LOCAL_RANKID=1, PMI_SIZE=8).split()
    assert out == ["5", "1", "8", "x3006c0s13b0n0.hsn.cm.polaris.alcf.anl.gov", str(29500 + 567)], out


def test_torchrun_on_polaris_is_one_torchrun_per_node_through_mpiexec(tmp_path):
    """--launch torchrun: mpiexec starts one task per node (no PMI plug-in option: PALS has none),
    each a torchrun whose c10d rendezvous is the first node of the node file."""
    words = launch_line(jobscript("--launch", "torchrun", "--", "python", "train.py").stdout)
    assert words[:words.index("bash")] == ["mpiexec", "-n", "2", "--ppn", "1", "--depth=32", "--cpu-bind", "depth"]
    assert words[-1] == "train.py"
    echo = tmp_path / "args"
    echo.write_text('#!/bin/sh\nfor a; do echo "$a"; done\n')
    echo.chmod(0o755)
    args = run_rank(words, tmp_path, [str(echo)], keep=3).split("\n")
    assert args[:7] == ["-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=4", "--rdzv_backend=c10d",
                        f"--rdzv_endpoint=x3006c0s13b0n0.hsn.cm.polaris.alcf.anl.gov:{29500 + 567}",
                        "--rdzv_id=envtool-1234567"], args


def test_a_launch_the_site_cannot_start_is_exit_2_naming_the_ones_it_can():
    """srun's per-rank launch needs srun as the site's launcher, mpiexec's needs mpiexec: a declared
    need of each registered launch, checked against the site."""
    err = jobscript("--launch", "srun", "--", "python", "t.py", expect=2).stderr
    assert "--launch srun needs a site whose launcher is srun" in err and "not mpiexec" in err, err
    assert "--launch torchrun or --launch mpiexec or --launch launcher" in err, err
    proc = run_envtool("jobscript", "--site", "perlmutter", "--module", "m", "--nodes", "1", "--account", "A",
                       "--launch", "mpiexec", "--", "python", "t.py", timeout=scaled(120))
    assert proc.returncode == 2 and "needs a site whose launcher is mpiexec" in proc.stderr, proc.stderr


def test_the_launches_are_registered_and_the_schedulers_declare_what_they_need():
    """The DDP launches are plug-ins of one registry; Slurm and PBS declare the rank expressions
    and first node the launches need, LSF declares none (no scheduler's name is compared)."""
    from envtool import scheduler
    from envtool.scheduler import ddp
    from envtool.scheduler.model import capabilities
    from envtool.spec import registry

    assert registry.DDP_LAUNCHES.names() == ("torchrun", "srun", "mpiexec") == ddp.LAUNCHES
    assert [ddp.get(n).through for n in ddp.LAUNCHES] == ["", "srun", "mpiexec"]
    caps = {n: capabilities(scheduler.get(n)) for n in ("slurm", "pbs", "lsf")}
    assert caps["pbs"].ddp_exprs[:3] == ("$PALS_RANKID", "$PALS_LOCAL_RANKID", "$PMI_SIZE")
    assert caps["slurm"].ddp_exprs == ("$SLURM_PROCID", "$SLURM_LOCALID", "$SLURM_NTASKS", "$SLURM_JOB_NUM_NODES",
                                       "${SLURM_JOB_ID:-0}")
    assert [caps[n].ddp_ready for n in ("slurm", "pbs", "lsf")] == [True, True, False]
    assert ddp.get("mpiexec").unmet(caps["lsf"], "jsrun").startswith("a scheduler that names each task's rank")
