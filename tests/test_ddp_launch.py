"""The site's own DDP launch (issue 41, item 2): a site file's ``launch`` section names the default
launch of job scripts and ``validate --submit`` with its source, the first node's name for the
rendezvous and the GPU order; ``doctor --script`` suggests the launch of each program's kind.

No Slurm runs here: the job scripts are read as written, and the srun and torchrun wrappers they
write are run by bash with a stand-in ``scontrol`` on PATH that names the job's nodes, so the
variables and the rendezvous endpoint the ranks would get are the shell's own expansion.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, run_envtool
from helpers.speed import scaled

PERLMUTTER = (REPO / "sites" / "perlmutter.yaml").read_text()
NERSC_DDP = "NERSC/nersc-dl-multigpu@1fbb0575ba09:submit_batch_modules.sh"


def jobscript(*args, expect=0) -> subprocess.CompletedProcess:
    proc = run_envtool("jobscript", *args, timeout=scaled(120))
    assert proc.returncode == expect, proc.stderr + proc.stdout
    return proc


def wrapper(text: str):
    """The words of the script's DDP step from ``bash -c`` on (``bash -c SCRIPT NAME ARGS...``)."""
    words = shlex.split([ln for ln in text.splitlines() if ln.startswith("srun ")][-1])
    return words[words.index("bash"):]


def run_wrapper(words, tmp_path: Path, program, **slurm) -> str:
    """Run a DDP step's ``bash -c`` words as one task would: ``program`` in place of the command
    (``$0`` for torchrun's interpreter, the first word after the name for srun's), Slurm's task
    variables set, and a stand-in ``scontrol`` that names nodes ``node7`` and ``node8``."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "scontrol").write_text("#!/bin/sh\nprintf 'node7\\nnode8\\n'\n")
    (bindir / "scontrol").chmod(0o755)
    env = {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", **{f"SLURM_{k}": str(v) for k, v in slurm.items()}}
    proc = subprocess.run(words[:3] + program, capture_output=True, text=True, env=env, timeout=scaled(30))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def site_file(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    f = tmp_path / name
    f.write_text(text)
    return f


def test_perlmutter_jobs_start_with_nerscs_srun_launch_and_say_where_it_came_from(tmp_path):
    """Without --launch a Perlmutter job script starts one srun task per GPU with torch.distributed's
    variables (NERSC's DDP example), keeps the site's PMI plug-in, exports the GPU order on a whole
    node, and its header names the choice and its source; --json says the same; ``--launch
    launcher`` writes the plain srun line; the dry-run plan names the rule."""
    job = ("--site", "perlmutter", "--module", "m", "--nodes", "2", "--account", "A")
    out = tmp_path / "job.sh"
    jobscript(*job, "--output", out, "--", "python", "train.py")
    text = out.read_text()
    assert (f"# launch: srun, site perlmutter's default launch (source nersc-ddp: {NERSC_DDP}); --launch sets "
            "another") in text.splitlines(), text
    line = [ln for ln in text.splitlines() if ln.startswith("srun ")][-1]
    assert line.startswith("srun bash -c ") and "--mpi=none" not in line, line  # the site's PMI plug-in
    assert line.endswith(" envtool-ddp python train.py"), line
    assert 'RANK="$SLURM_PROCID"' in line and "CUDA_VISIBLE_DEVICES=3,2,1,0" in line, line
    data = json.loads(jobscript(*job, "--json", "--", "python", "train.py").stdout)
    assert data["launch"] == {"name": "srun", "site_default": True,
                              "from": f"site perlmutter's default launch (source nersc-ddp: {NERSC_DDP})"}, data
    plain = jobscript(*job, "--launch", "launcher", "--", "python", "train.py").stdout
    assert plain.splitlines()[-1] == "srun python train.py" and "# launch: launcher, --launch launcher" in plain
    plan = jobscript(*job, "--dry-run", "--", "python", "train.py").stdout
    assert "launch: the site file's launch.default" in plan, plan


def test_the_ranks_get_the_sites_rendezvous_host_and_gpu_order(tmp_path):
    """A site file's ``launch.rendezvous_host`` ({node}-hsn0) names the first node in MASTER_ADDR
    (srun) and torchrun's --rdzv_endpoint; the srun launch exports ``launch.gpu_order`` only when
    the job takes every GPU of its nodes. Run by bash as a task would be."""
    f = site_file(tmp_path, PERLMUTTER.replace("  gpu_order: [3, 2, 1, 0]\n", "  gpu_order: [3, 2, 1, 0]\n"
                                               "  rendezvous_host: \"{node}-hsn0\"\n"
                                               "  rendezvous_host_source: nersc-gpu-numa\n"))
    job = ("--site-file", f, "--module", "m", "--nodes", "2", "--account", "A")
    words = wrapper(jobscript(*job, "--", "python", "train.py").stdout)
    env = run_wrapper(words, tmp_path, ["envtool-ddp", "env"], PROCID=5, LOCALID=1, NTASKS=8, JOB_ID=1234)
    got = dict(ln.split("=", 1) for ln in env.splitlines() if "=" in ln)
    assert {k: got.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                                    "CUDA_VISIBLE_DEVICES")} == {
        "RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "MASTER_ADDR": "node7-hsn0", "MASTER_PORT": "29734",
        "CUDA_VISIBLE_DEVICES": "3,2,1,0"}, env
    half = wrapper(jobscript(*job, "--ranks-per-node", "2", "--", "python", "train.py").stdout)
    assert "CUDA_VISIBLE_DEVICES" not in half[2], half  # 2 of 4 GPUs: the indices would not be the node's
    words = wrapper(jobscript(*job, "--launch", "torchrun", "--", "python", "train.py").stdout)
    argv = run_wrapper(words, tmp_path, ["echo", "train.py"], JOB_NUM_NODES=2, JOB_ID=1234).split()
    assert "--rdzv_endpoint=node7-hsn0:29734" in argv and "--nnodes=2" in argv and argv[-1] == "train.py", argv


BAD = [
    ("  default: srun\n", "  default: mpirun\n", "launch.default", "mpirun"),
    ("  source: nersc-ddp\n  gpu_order", "  gpu_order", "launch.source", "the default launch"),
    ("  source: nersc-ddp\n", "  source: nersc-dpp\n", "launch.source", "nersc-dpp"),
    ("  gpu_order: [3, 2, 1, 0]\n", "  gpu_order: [3, 2, 1, 1]\n", "launch.gpu_order", "0 to 3 once"),
    ("  gpu_order_source: nersc-gpu-numa\n", "", "launch.gpu_order_source", "the GPU order"),
    ("  gpu_order: [3, 2, 1, 0]\n", "  gpu_order: [3, 2, 1, 0]\n  rendezvous_host: \"$(id)-hsn0\"\n"
     "  rendezvous_host_source: nersc-ddp\n", "launch.rendezvous_host", "{node}"),
    ("  gpu_order: [3, 2, 1, 0]\n", "  gpu_order: [3, 2, 1, 0]\n  rendezvous_host: \"{node}-hsn0\"\n",
     "launch.rendezvous_host_source", "the rendezvous host"),
]


@pytest.mark.parametrize("old,new,field,says", BAD, ids=[b[2] + "-" + str(i) for i, b in enumerate(BAD)])
def test_a_bad_launch_value_is_refused_naming_the_file_and_field(tmp_path, old, new, field, says):
    from envtool.core.errors import SpecError
    from envtool.spec import sites

    assert old in PERLMUTTER
    f = site_file(tmp_path, PERLMUTTER.replace(old, new, 1))
    with pytest.raises(SpecError) as err:
        sites.load_site(f)
    assert err.value.field == field and err.value.path == str(f) and says in str(err.value), str(err.value)


def test_a_bad_launch_section_and_a_ddp_default_the_scheduler_lacks_are_exit_2(tmp_path):
    """The CLI: a bad value is exit 2 naming the file and field; a DDP default on an LSF site
    (its scheduler declares no task variables) is exit 2 naming ``launch.default``, and
    ``--launch launcher`` still writes the site's jsrun line."""
    bad = site_file(tmp_path, PERLMUTTER.replace("  gpu_order: [3, 2, 1, 0]\n", "  gpu_order: [0, 1]\n"))
    err = jobscript("--site-file", bad, "--module", "m", "--nodes", "1", "--account", "A", "--", "x", expect=2).stderr
    assert f"{bad}:" in err and "launch.gpu_order" in err and "gpus_per_node is 4" in err, err
    summit = (REPO / "sites" / "summit.yaml").read_text()
    lsf = site_file(tmp_path, summit + "launch:\n  default: torchrun\n  source: stacks-summit\n", "l.yaml")
    job = ("--site-file", lsf, "--retired-ok", "--module", "m", "--nodes", "1", "--account", "A")
    err = jobscript(*job, "--", "python", "t.py", expect=2).stderr
    assert f"{lsf}" in err and "launch.default" in err and "scheduler lsf" in err and "'torchrun'" in err, err
    assert jobscript(*job, "--launch", "launcher", "--", "python", "t.py").stdout.splitlines()[-1].startswith("jsrun")


def test_validate_submit_starts_the_torch_checks_with_the_site_default(tmp_path):
    """``validate --submit`` without --launch: the torch.distributed checks go through the site's
    default launch (beside the Horovod checks, which keep theirs) and the plan says where the choice
    came from; ``--launch launcher`` keeps every check's own launch."""
    args = ("validate", "--submit", "--dry-run", "--json", "--site", "perlmutter", "--spec", "perlmutter-horovod",
            "--module", "horovod/0.28.1", "--nodes", "2", "--account", "A", "--workdir", tmp_path / "run")
    proc = run_envtool(*args, timeout=scaled(120))
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)["plan"]
    launches = {c["name"]: c["launch"] for c in plan["checks"]}
    assert launches["torch-gloo"] == launches["torch-nccl"] == "srun" and launches["horovod-mpi"] == "site", launches
    assert plan["launch_note"] == ("torch.distributed checks: launch srun, site perlmutter's default launch "
                                   f"(source nersc-ddp: {NERSC_DDP})"), plan["launch_note"]
    proc = run_envtool(*args, "--launch", "launcher", timeout=scaled(120))
    plan = json.loads(proc.stdout)["plan"]
    assert plan["launch_note"] is None and {c["launch"] for c in plan["checks"]} & {"srun", "torchrun"} == set(), plan


DDP = ("import os\nimport torch\nimport torch.distributed as dist\n\n\ndef main():\n"
       "    dist.init_process_group('nccl')\n    torch.cuda.set_device(int(os.environ['LOCAL_RANK']))\n\n\n"
       "if __name__ == '__main__':\n    main()\n")
HVD = "import horovod.torch as hvd\n\nif __name__ == '__main__':\n    hvd.init()\n"


def test_doctor_script_suggests_the_launch_of_each_programs_kind(tmp_path):
    """A DDP program gets ``jobscript --launch torchrun`` (the site's default launch with --site
    perlmutter: srun), a Horovod program ``--launch launcher`` where the site's default is a DDP
    launch, each line shell-quoted, in the finding's fix and under ``programs``; at Polaris (PBS)
    the site's mpiexec launch; a DDP program at an LSF site gets no line and the reason."""
    ddp, hvd = tmp_path / "my train.py", tmp_path / "hvd.py"
    ddp.write_text(DDP)
    hvd.write_text(HVD)
    proc = run_envtool("doctor", "--script", ddp, hvd, "--json", timeout=scaled(120))
    f = next(c for c in json.loads(proc.stdout)["findings"] if c["id"] == "script")
    lines = {p["entry"]: p.get("jobscript") for p in f["details"]["programs"]}
    assert shlex.split(lines[str(ddp)]) == ["envtool", "jobscript", "--nodes", "1", "--launch", "torchrun", "--",
                                            "python", str(ddp)], lines
    assert lines[str(hvd)] is None and f["fix"] == f"start {ddp} with: {lines[str(ddp)]}", f  # launcher: the default
    text = run_envtool("doctor", "--script", ddp, hvd, "--site", "perlmutter", timeout=scaled(120)).stdout
    fix = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("fix: ")]
    want = [shlex.join(["envtool", "jobscript", "--site", "perlmutter", "--nodes", "1", "--launch", launch, "--",
                        "python", str(p)]) for p, launch in ((ddp, "srun"), (hvd, "launcher"))]
    assert fix == [f"fix: start {ddp} with: {want[0]}; start {hvd} with: {want[1]}"], text
    pbs = run_envtool("doctor", "--script", ddp, "--site", "polaris", timeout=scaled(120)).stdout
    want = shlex.join(["envtool", "jobscript", "--site", "polaris", "--nodes", "1", "--launch", "mpiexec", "--",
                       "python", str(ddp)])
    assert f"fix: start {ddp} with: {want}" in pbs, pbs
    lsf = run_envtool("doctor", "--script", ddp, "--site", "summit", "-v", timeout=scaled(120)).stdout
    assert "fix:" not in lsf and "no jobscript launch at site" in " ".join(lsf.split()), lsf
