"""Slurm: ``#SBATCH`` directives and ``srun``.

Layout facts (the KISTI Perlmutter tutorial's ``horovod_batch.sh``, ``hwang2006/distributed-training-with-horovod-on-perlmutter@db9db9a20292:README.md#L302-L313``): ``-A``, ``-C gpu``, ``-q regular``,
``-t``, ``-N``, ``-c 32``, ``--ntasks-per-node=4``, ``--gpus-per-node=4``, ``-o``; ``srun``
inside the allocation inherits the layout. Bede (``N8-CIR-Bede/documentation@338157492d38:software/applications/wmlce.rst#L209-L215``) asks GPUs as ``--gres=gpu:4`` and
queues with ``-p gpu``. ``srun --mpi=pmix`` where the site's ``batch.mpi`` says so (the local test
Slurm; Open MPI 4 initialises through PMIx).

Jobs: ``sbatch --parsable`` prints ``JOBID[;CLUSTER]``; ``squeue -h -j ID -o %T`` gives the state
while the job is known to the queue, ``scontrol -o show job ID`` the final ``JobState`` and
``ExitCode`` afterwards (kept ``MinJobAge``, 300 s by default); ``scancel ID`` cancels.

Nodes: ``sinfo -N -n LIST -o "%N %T"`` prints a node's state with ``*`` appended when its slurmd
does not respond (sinfo(1), NODE STATE CODES: https://slurm.schedmd.com/sinfo.html#SECTION_NODE-STATE-CODES);
slurmctld sets ``DOWN`` after ``SlurmdTimeout`` (slurm.conf(5)). ``srun`` reports a step it could
not start on a node as ``Task launch for StepId=J.S failed on node NODE: CAUSE``.
"""
from __future__ import annotations

import re
import subprocess
from typing import List, Optional, Tuple

from envtool.scheduler.model import hms, missing

NAME = "slurm"
DIRECTIVE = "#SBATCH"
LAUNCHER = "srun"
#: validation jobs start with the pre-flight (:mod:`envtool.validate.preflight`)
PREFLIGHT = True
#: Job states (``squeue %T``) that mean "waiting", "running", or finished.
QUEUED = ("PENDING", "CONFIGURING", "REQUEUED", "RESV_DEL_HOLD", "REQUEUE_HOLD", "REQUEUE_FED", "SUSPENDED",
          "RESIZING")
RUNNING = ("RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING")


def directives(req) -> List[Tuple[str, ...]]:
    """Directive argument tuples (each line is ``#SBATCH`` + the quoted words), the tutorial's order.

    Raises:
        SpecError: GPUs asked for a site whose ``gpus_per_node`` is 0.
    """
    site, lay, b = req.site, req.layout, req.site.batch
    out: List[Tuple[str, ...]] = []
    if req.job_name:
        out.append(("-J", req.job_name))
    if req.account:
        out.append(("-A", req.account))
    if b.constraint:
        out.append(("-C", b.constraint))
    queue = req.effective_queue
    if queue:
        out.append(("-q" if b.queue_option == "qos" else "-p", queue))
    if req.seconds:
        out.append(("-t", hms(req.seconds)))
    out.append(("-N", str(lay.nodes)))
    if lay.cpus_per_rank:
        out.append(("-c", str(lay.cpus_per_rank)))
    out.append((f"--ntasks-per-node={lay.ranks_per_node}",))
    if lay.gpus_per_rank:
        if not site.gpus_per_node:
            raise missing(site, "gpus_per_node", "the GPUs of one node", "--gpus-per-rank needs it")
        out.append((f"--gres=gpu:{lay.gpus_per_node}",) if b.gpu_option == "gres"
                   else (f"--gpus-per-node={lay.gpus_per_node}",))
    if req.output:
        out.append(("-o", req.output))
    return out


def launch_argv(req, layout, whole_job: bool = True, mpi: Optional[str] = None) -> List[str]:
    """``srun [--mpi=P]`` (+ ``-N n -n r`` for a step smaller than the job); ``mpi`` replaces the
    site's ``batch.mpi`` for this step (``none``: no PMI set-up, srun(1))."""
    argv = ["srun"]
    plugin = mpi or req.site.batch.mpi
    if plugin:
        argv.append(f"--mpi={plugin}")
    if not whole_job:
        argv += ["-N", str(layout.nodes), "-n", str(layout.ranks)]
        if layout.cpus_per_rank:
            argv += ["-c", str(layout.cpus_per_rank)]
    return argv


def per_node_argv(req) -> List[str]:
    """``srun --mpi=none -N NODES -n NODES --ntasks-per-node=1``: one task on each node of the job
    (the pre-flight). ``-n`` is explicit because srun inside a batch job otherwise takes the job's
    task count from ``SLURM_NTASKS``; ``--mpi=none``: the task is a shell script, and it must run
    where the MPI set-up is what is broken (srun(1): https://slurm.schedmd.com/srun.html)."""
    n = str(req.layout.nodes)
    return ["srun", "--mpi=none", "-N", n, "-n", n, "--ntasks-per-node=1"]


def submit_argv(script: str) -> List[str]:
    """``sbatch --parsable SCRIPT``."""
    return ["sbatch", "--parsable", script]


def parse_job_id(text: str) -> Optional[str]:
    """The job id from ``sbatch --parsable`` output (``123`` or ``123;cluster``), or None."""
    m = re.search(r"^\s*(\d+)(?:;\S+)?\s*$", text, re.M)
    return m.group(1) if m else None


def cancel_argv(job_id: str) -> List[str]:
    """``scancel ID``."""
    return ["scancel", str(job_id)]


def state(job_id: str) -> Tuple[str, str, Optional[int]]:
    """Where job ``job_id`` is: ``(phase, scheduler state, exit status)``.

    Returns:
        phase ``queued``, ``running``, ``done`` or ``unknown``; the Slurm state name
        (``PENDING``, ``RUNNING``, ``COMPLETED``, ``FAILED``, ``CANCELLED`` …); the batch script's
        exit status once done (None before).
    """
    try:
        proc = subprocess.run(["squeue", "-h", "-j", str(job_id), "-o", "%T"], capture_output=True, text=True,
                              timeout=30)
        st = proc.stdout.strip().split("\n")[0].strip() if proc.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired):
        st = ""
    if st in QUEUED:
        return "queued", st, None
    if st in RUNNING:
        return "running", st, None
    try:
        proc = subprocess.run(["scontrol", "-o", "show", "job", str(job_id)], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown", st or "?", None
    m = re.search(r"\bJobState=(\S+)", proc.stdout)
    if not m:
        return ("done", st, None) if st else ("unknown", "?", None)
    js = m.group(1)
    if js in QUEUED:
        return "queued", js, None
    if js in RUNNING:
        return "running", js, None
    code = re.search(r"\bExitCode=(\d+):(\d+)", proc.stdout)
    return "done", js, (int(code.group(1)) if code else None)


def job_nodes(job_id: str) -> Optional[str]:
    """The job's ``NodeList`` (a hostlist such as ``node[1-2]``), or None before it has nodes."""
    try:
        proc = subprocess.run(["scontrol", "-o", "show", "job", str(job_id)], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"\bNodeList=(\S+)", proc.stdout)
    return m.group(1) if m and m.group(1) != "(null)" else None


def parse_node_states(text: str) -> List[Tuple[str, str]]:
    """``(node, state)`` of every node whose slurmd does not respond or that is down, from
    ``sinfo -h -N -o "%N %T"`` output (a state ending in ``*``, or ``down``/``fail``)."""
    out: List[Tuple[str, str]] = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            st = parts[1].lower()
            if st.endswith("*") or st.rstrip("*~#$@^-!%") in ("down", "fail", "failing", "not_responding") or \
                    "not_responding" in st:
                if (parts[0], parts[1]) not in out:
                    out.append((parts[0], parts[1]))
    return out


def unresponsive_nodes(nodelist: str) -> List[Tuple[str, str]]:
    """The nodes of ``nodelist`` whose slurmd does not respond or that are down: ``(node, state)``."""
    try:
        proc = subprocess.run(["sinfo", "-h", "-N", "-n", nodelist, "-o", "%N %T"], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return parse_node_states(proc.stdout) if proc.returncode == 0 else []


def parse_launch_failures(text: str) -> List[Tuple[str, str]]:
    """``(node, cause)`` of every ``srun: error: Task launch for StepId=… failed on node NODE: CAUSE``
    line of a job's output, each node once."""
    out: List[Tuple[str, str]] = []
    for m in re.finditer(r"Task launch for \S+ failed on node (\S+?):\s*(.*)$", text, re.M):
        if m.group(1) not in [n for n, _ in out]:
            out.append((m.group(1), m.group(2).strip()))
    return out
