"""IBM Spectrum LSF with jsrun (Summit): ``#BSUB`` directives and ``jsrun`` resource sets.

Layout facts (OLCF's Summit page, ``olcf/olcf-user-docs@6c07271c3d12:software/analytics/distributed-dl-env.rst#L120-L130``, "Basic Distributed Deep Learning BSUB Script"): ``#BSUB -P <PROJECT>``,
``-W 0:10`` (hours:minutes), ``-nnodes 2``, ``-q batch``, ``-J``, ``-o``/``-e``; then
``jsrun -r1 -g6 -a6 -c42 -bpacked:7``: one resource set per node (``-r1``) holding the node's
GPUs (``-g``), its ranks (``-a``) and cores (``-c``), each rank bound to ``cores / ranks``
contiguous cores (``-bpacked:``). Without ``-n``, jsrun makes as many resource sets as the
allocation holds.

Jobs (not runnable here; the commands are IBM's documented ones): ``bsub < SCRIPT`` prints
``Job <ID> is submitted to queue <Q>.``; ``bjobs -o "jobid stat exit_code" ID`` prints a header
line (``JOBID STAT EXIT_CODE``) and one line per job, or ``Job <ID> is not found`` /
``No unfinished job found`` (IBM Spectrum LSF 10.1, bjobs -o:
https://www.ibm.com/docs/en/SSWRJV_10.1.0/lsf_command_ref/bjobs.o.1.html, and
LSB_BJOBS_CONSISTENT_EXIT_CODE: https://www.ibm.com/docs/en/spectrum-lsf/10.1.0?topic=lsfconf-lsb-bjobs-consistent-exit-code);
``bkill ID``. Documented outputs are in ``tests/data/scheduler/lsf/``.
"""
from __future__ import annotations

import math
import re
import subprocess
from typing import Dict, List, Optional, Tuple

from envtool.core import external
from envtool.scheduler.model import Capabilities, JobRequest, JobState, SchedulerOutputError, phase_of, output_error

NAME = "lsf"
DIRECTIVE = "#BSUB"
#: the registered launcher job scripts use unless the site file names one (``batch.launcher``)
DEFAULT_LAUNCHER: Optional[str] = "jsrun"
#: submits to a queue; none of the extras of :class:`~envtool.scheduler.model.Capabilities`, and
#: no bounds of one step (why: ``no_step_bounds``)
CAPABILITIES = Capabilities(
    no_step_bounds="jsrun starts the ranks, and envtool has read no public IBM source for a jsrun option that "
                   "ends a step when one task exits non-zero or that limits one step's time, so none is "
                   "declared; the job's #BSUB -W limit and validate's --timeout bound it")
SUBMIT_STDIN = True
#: bjobs STAT values (IBM, "Job states": https://www.ibm.com/docs/en/SSWRJV_10.1.0/lsf_users_guide/job_states.html)
QUEUED = ("PEND", "PSUSP", "WAIT")
RUNNING = ("RUN", "USUSP", "SSUSP", "PROV")
FINISHED = ("DONE", "EXIT")


def walltime(seconds: int) -> str:
    """Seconds → LSF's ``H:MM`` (``-W`` takes hours:minutes; seconds are rounded up)."""
    minutes = math.ceil(seconds / 60)
    return f"{minutes // 60}:{minutes % 60:02d}"


def directives(req: JobRequest) -> List[Tuple[str, ...]]:
    """``#BSUB`` argument tuples in OLCF's order (-P, -W, -nnodes, -q, -J, -o, -e)."""
    out: List[Tuple[str, ...]] = []
    if req.account:
        out.append(("-P", req.account))
    if req.seconds:
        out.append(("-W", walltime(req.seconds)))
    out.append(("-nnodes", str(req.layout.nodes)))
    if req.effective_queue:
        out.append(("-q", req.effective_queue))
    if req.job_name:
        out.append(("-J", req.job_name))
    if req.output:
        out.append(("-o", req.output))
        out.append(("-e", req.output))
    return out


def per_node_argv(req) -> List[str]:
    """``jsrun -n NODES -r1 -a1 -c1``: one resource set on each host with one task and one core
    (``-n`` resource sets, ``-r`` of them per host, ``-a`` tasks and ``-c`` cores in each: OLCF's Summit
    user guide, https://docs.olcf.ornl.gov/systems/summit_user_guide.html#job-launcher-jsrun). Staging's
    per-node steps."""
    n = str(req.layout.nodes)
    return ["jsrun", "-n", n, "-r1", "-a1", "-c1"]


def submit_argv(script: str) -> List[str]:
    """``bsub`` (the script goes on standard input: ``bsub < SCRIPT``)."""
    return ["bsub"]


def parse_submit(stdout: str) -> str:
    """The id from ``Job <123> is submitted to queue <batch>.``.

    Raises:
        SchedulerOutputError: no ``Job <ID> is submitted`` in ``stdout``.
    """
    m = re.search(r"^Job <(\d+)> is submitted", stdout, re.M)
    if not m:
        raise output_error("bsub", "'Job <ID> is submitted to queue <QUEUE>.'", stdout)
    return m.group(1)


def status_argv(job_id: str) -> List[str]:
    """``bjobs -o "jobid stat exit_code" ID``."""
    return ["bjobs", "-o", "jobid stat exit_code", str(job_id)]



def parse_status(stdout: str) -> Dict[str, JobState]:
    """Job id → :class:`JobState` from ``bjobs`` output with its header line (``-o "jobid stat
    exit_code"``, or bjobs' default columns, which start ``JOBID USER STAT``). ``Job <ID> is not
    found`` and ``No unfinished job found`` lines list nothing. A finished job's exit status is its
    ``EXIT_CODE`` column where there is one, else 0 for ``DONE``.

    Raises:
        SchedulerOutputError: job lines without a header naming JOBID and STAT, or a job line
            too short for them.
    """
    out: Dict[str, JobState] = {}
    header: Optional[List[str]] = None
    for line in stdout.splitlines():
        words = line.split()
        if not words or re.fullmatch(r"Job <\S+> is not found\.?|No unfinished job found\.?", line.strip()):
            continue
        if "JOBID" in words and "STAT" in words:
            header = words
            continue
        if header is None or len(words) <= max(header.index("JOBID"), header.index("STAT")) \
                or not words[header.index("JOBID")].isdigit():
            raise output_error("bjobs", "a header line naming JOBID and STAT, then one line per job", stdout)
        stat = words[header.index("STAT")]
        code: Optional[int] = None
        if "EXIT_CODE" in header and len(words) > header.index("EXIT_CODE") \
                and external.small_int(words[header.index("EXIT_CODE")]) is not None:
            code = external.small_int(words[header.index("EXIT_CODE")])
        elif stat == "DONE":
            code = 0
        phase = phase_of(stat, QUEUED, RUNNING, FINISHED)
        out[words[header.index("JOBID")]] = JobState(phase, stat, code if phase == "done" else None)
    return out


def cancel_argv(job_id: str) -> List[str]:
    """``bkill ID``."""
    return ["bkill", str(job_id)]


def state(job_id: str) -> JobState:
    """The :class:`JobState` of ``job_id`` from :func:`status_argv` (``unknown`` when bjobs cannot be
    run, does not list the job, or answers unreadably)."""
    try:
        proc = external.run(status_argv(job_id), timeout=30)
        found = parse_status(proc.stdout)
    except (OSError, subprocess.TimeoutExpired, SchedulerOutputError):
        return JobState("unknown", "?")
    return found.get(str(job_id), JobState("unknown", "?"))
