"""Slurm: ``#SBATCH`` directives and ``srun``.

Layout facts (the KISTI Perlmutter tutorial's ``horovod_batch.sh``, ``hwang2006/distributed-training-with-horovod-on-perlmutter@db9db9a20292:README.md#L302-L313``): ``-A``, ``-C gpu``, ``-q regular``,
``-t``, ``-N``, ``-c 32``, ``--ntasks-per-node=4``, ``--gpus-per-node=4``, ``-o``; ``srun``
inside the allocation inherits the layout. Bede (``N8-CIR-Bede/documentation@338157492d38:software/applications/wmlce.rst#L209-L215``) asks GPUs as ``--gres=gpu:4`` and
queues with ``-p gpu``. ``srun --mpi=pmix`` where the site's ``batch.mpi`` says so (the local test
Slurm; Open MPI 4 initialises through PMIx).

Jobs: ``sbatch --parsable`` prints ``JOBID[;CLUSTER]`` (sbatch(1), ``--parsable``:
https://slurm.schedmd.com/sbatch.html#OPT_parsable); ``squeue -h -j ID -o "%i %T"`` gives the id and
state while the job is known to the queue (squeue(1), ``%i``/``%T``:
https://slurm.schedmd.com/squeue.html#OPT_format), ``scontrol -o show job ID`` the final
``JobState`` and ``ExitCode`` (``status:signal``) afterwards (kept ``MinJobAge``, 300 s by default);
``scancel ID`` cancels. ``sacct`` is not used: it needs Slurm's accounting storage, which the
test Slurm (and many small sites) runs without (it then prints "Slurm accounting storage is
disabled"). Real outputs of these commands are in ``tests/data/scheduler/slurm/``.

Nodes: ``sinfo -N -n LIST -o "%N %T"`` prints a node's state with ``*`` appended when its slurmd
does not respond (sinfo(1), NODE STATE CODES: https://slurm.schedmd.com/sinfo.html#SECTION_NODE-STATE-CODES);
slurmctld sets ``DOWN`` after ``SlurmdTimeout`` (slurm.conf(5)). ``srun`` reports a step it could
not start on a node as ``Task launch for StepId=J.S failed on node NODE: CAUSE``.
"""
from __future__ import annotations

import re
import subprocess
from typing import Dict, List, Optional, Tuple

from envtool.core import external
from envtool.scheduler.model import Capabilities, JobRequest, JobState, SchedulerOutputError, phase_of, hms, missing, output_error

NAME = "slurm"
DIRECTIVE = "#SBATCH"
#: the registered launcher job scripts use unless the site file names one (``batch.launcher``)
DEFAULT_LAUNCHER: Optional[str] = "srun"
SUBMIT_STDIN = False
#: what Slurm can do: ``sbcast`` a file to the job's nodes, ``srun --label`` output, ``srun --overlap``
#: per-node steps, a pre-flight per node, nodes named by ``sinfo``/``srun``, validation steps on ``srun --mpi=``,
#: a step ended by one task's non-zero exit and by its own ``--time``
CAPABILITIES = Capabilities(broadcast=("sbcast", "--force"), label_output=(("SLURM_LABELIO", "1"),),
                            overlap="--overlap", preflight=True, names_nodes=True, step_launcher="srun",
                            task_vars=("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_JOB_NUM_NODES",
                                       "SLURM_JOB_ID"),
                            first_node='scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1',
                            # srun(1): https://slurm.schedmd.com/srun.html#OPT_kill-on-bad-exit and #OPT_time
                            kill_on_bad_exit=("--kill-on-bad-exit=1",), step_time="--time")
#: Job states (``squeue %T``) that mean "waiting", "running", or finished.
QUEUED = ("PENDING", "CONFIGURING", "REQUEUED", "RESV_DEL_HOLD", "REQUEUE_HOLD", "REQUEUE_FED", "SUSPENDED",
          "RESIZING")
RUNNING = ("RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING")


def directives(req: JobRequest) -> List[Tuple[str, ...]]:
    """Directive argument tuples (each line is ``#SBATCH`` + the quoted words), the tutorial's order.

    Raises:
        SpecError: GPUs asked for a site whose ``gpus_per_node`` is 0.
    """
    site = req.site
    lay, b = req.layout, site.batch
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


_SUBMIT_RE = re.compile(r"^\s*(\d+)(?:;\S+)?\s*$", re.M)


def parse_submit(stdout: str) -> str:
    """The job id from ``sbatch --parsable`` output (``123`` or ``123;cluster``).

    Raises:
        SchedulerOutputError: no such line in ``stdout``.
    """
    m = _SUBMIT_RE.search(stdout)
    if not m:
        raise output_error("sbatch --parsable", "a job id (digits, optionally ';CLUSTER')", stdout)
    return m.group(1)



def status_argv(job_id: str) -> List[str]:
    """``squeue -h -j ID -o "%i %T"``: the job's id and state while the queue knows it."""
    return ["squeue", "-h", "-j", str(job_id), "-o", "%i %T"]


_SQUEUE_LINE = re.compile(r"(\S+) ([A-Z][A-Z_]*)")


def parse_status(stdout: str) -> Dict[str, JobState]:
    """Job id → :class:`JobState` from ``squeue -h -o "%i %T"`` lines ({} for none: the job left the queue).

    Raises:
        SchedulerOutputError: a line that is not ``ID STATE``.
    """
    out: Dict[str, JobState] = {}
    for line in stdout.splitlines():
        if not line.strip():
            continue
        m = _SQUEUE_LINE.fullmatch(line.strip())
        if not m:
            raise output_error('squeue -h -o "%i %T"', "lines of a job id and a state (1234 RUNNING)", stdout)
        out[m.group(1)] = JobState(phase_of(m.group(2), QUEUED, RUNNING), m.group(2))
    return out


def final_status_argv(job_id: str) -> List[str]:
    """``scontrol -o show job ID``: one line of ``Key=Value`` words per job, kept after it ends."""
    return ["scontrol", "-o", "show", "job", str(job_id)]


def parse_final_status(stdout: str) -> Dict[str, JobState]:
    """Job id → :class:`JobState` from ``scontrol -o show job`` output (``JobId=``, ``JobState=`` and
    ``ExitCode=STATUS:SIGNAL`` words; scontrol(1): https://slurm.schedmd.com/scontrol.html).

    Raises:
        SchedulerOutputError: a non-empty line without ``JobId=`` and ``JobState=``.
    """
    out: Dict[str, JobState] = {}
    for line in stdout.splitlines():
        if not line.strip():
            continue
        jid = re.search(r"(?:^|\s)JobId=(\S+)", line)
        js = re.search(r"\sJobState=(\S+)", line)
        if not jid or not js:
            raise output_error("scontrol -o show job", "one line of JobId=… JobState=… words per job", stdout)
        phase = phase_of(js.group(1), QUEUED, RUNNING)
        code = re.search(r"\sExitCode=(\d+):(\d+)", line)
        out[jid.group(1)] = JobState(phase, js.group(1),
                                     external.small_int(code.group(1)) if code and phase == "done" else None)
    return out


def cancel_argv(job_id: str) -> List[str]:
    """``scancel ID``."""
    return ["scancel", str(job_id)]


def _run(argv: List[str]) -> Optional[str]:
    """``argv``'s standard output, or None when it failed, could not run or took over 30 s."""
    try:
        proc = external.run(argv, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def state(job_id: str) -> JobState:
    """Where job ``job_id`` is: ``squeue`` while the queue knows it, then ``scontrol``.

    Returns:
        the :class:`JobState`: phase ``queued``, ``running``, ``done`` or ``unknown``; the Slurm
        state name (``PENDING``, ``RUNNING``, ``COMPLETED``, ``FAILED``, ``CANCELLED`` …); the
        batch script's exit status once done (None before). An unreadable answer reads as
        ``unknown`` (the caller polls again).
    """
    jid = str(job_id)
    st = ""
    text = _run(status_argv(jid))
    if text is not None:
        try:
            found = parse_status(text)
        except SchedulerOutputError:  # an unreadable answer: asked again at the next poll
            found = {}
        if jid in found:
            st = found[jid].state
            if found[jid].phase in ("queued", "running"):
                return found[jid]
    text = _run(final_status_argv(jid))
    try:
        final = parse_final_status(text) if text is not None else {}
    except SchedulerOutputError:
        final = {}
    if jid in final:
        return final[jid]
    return JobState("done", st) if st else JobState("unknown", "?")


def job_nodes(job_id: str) -> Optional[str]:
    """The job's ``NodeList`` (a hostlist such as ``node[1-2]``), or None before it has nodes."""
    try:
        proc = external.run(["scontrol", "-o", "show", "job", str(job_id)], timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_job_nodes(proc.stdout)


def parse_job_nodes(text: str) -> Optional[str]:
    """The ``NodeList`` of ``scontrol -o show job`` output (decoded by :func:`envtool.core.external.decode`),
    or None when it has none yet (``(null)``)."""
    m = re.search(r"\bNodeList=(\S+)", text)
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
        proc = external.run(["sinfo", "-h", "-N", "-n", nodelist, "-o", "%N %T"], timeout=30)
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
