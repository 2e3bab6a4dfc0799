"""Cobalt with Cray ALPS (the older ALCF systems, Theta): ``#COBALT`` directives and ``aprun``.

Layout facts (the ALCF hands-on's scaling runs, ``argonne-lcf/ALCF_Hands_on_HPC_Workshop@5b4beb1902b8:learningFrameworks/distributedDeepLearning/README.md#L199-L202``): ``aprun -n 8 -N 4 --cc depth -d 16``: ``-n`` all ranks,
``-N`` ranks per node, ``--cc depth`` binding, ``-d`` cores per rank (64 per node / ranks per node).
Cobalt's directives are its ``qsub`` options written as ``#COBALT``: ``-n`` nodes, ``-t`` minutes,
``-q`` queue, ``-A`` project, ``-O`` output prefix.

Jobs (not runnable here): ``qsub SCRIPT`` prints the job id; ``qstat ID`` lists it while queued
or running; ``qdel ID``.
"""
from __future__ import annotations

import math
import re
import subprocess
from typing import Dict, List, Optional, Tuple

from envtool.core import external
from envtool.scheduler.model import Capabilities, JobRequest, JobState, SchedulerOutputError, output_error

NAME = "cobalt"
DIRECTIVE = "#COBALT"
#: the registered launcher job scripts use unless the site file names one (``batch.launcher``)
DEFAULT_LAUNCHER: Optional[str] = "aprun"
#: submits to a queue; none of the extras of :class:`~envtool.scheduler.model.Capabilities`, and
#: no bounds of one step (why: ``no_step_bounds``)
CAPABILITIES = Capabilities(
    no_step_bounds="Cobalt has no step launcher of its own (Cray ALPS aprun starts the ranks), and envtool "
                   "has read no public source for an aprun option that limits one step's time or ends it when "
                   "one rank exits non-zero, so none is declared; the job's #COBALT -t limit and validate's "
                   "--timeout bound it")
SUBMIT_STDIN = False
#: qstat state words
QUEUED = ("queued", "user_hold")
RUNNING = ("running", "exiting", "starting")


def directives(req: JobRequest) -> List[Tuple[str, ...]]:
    """``#COBALT`` argument tuples: -n nodes, -t minutes, -q, -A, -O."""
    out: List[Tuple[str, ...]] = [("-n", str(req.layout.nodes))]
    if req.seconds:
        out.append(("-t", str(math.ceil(req.seconds / 60))))
    if req.effective_queue:
        out.append(("-q", req.effective_queue))
    if req.account:
        out.append(("-A", req.account))
    if req.output:
        out.append(("-O", req.output))
    return out


def submit_argv(script: str) -> List[str]:
    """``qsub SCRIPT`` (Cobalt runs the script's ``#COBALT`` lines as options)."""
    return ["qsub", script]


def parse_submit(stdout: str) -> str:
    """The numeric job id Cobalt's ``qsub`` prints (a line holding only it).

    Raises:
        SchedulerOutputError: no such line.
    """
    m = re.search(r"^\s*(\d+)\s*$", stdout, re.M)
    if not m:
        raise output_error("qsub", "the numeric job id", stdout)
    return m.group(1)


def status_argv(job_id: str) -> List[str]:
    """``qstat ID``."""
    return ["qstat", str(job_id)]


def parse_status(stdout: str) -> Dict[str, JobState]:
    """Job id → :class:`JobState` of every ``qstat`` line that starts with a job id and holds a
    state word (:data:`QUEUED`, :data:`RUNNING`); header and rule lines are skipped.

    Raises:
        SchedulerOutputError: a line starting with a job id but holding no state word.
    """
    out: Dict[str, JobState] = {}
    for line in stdout.splitlines():
        words = line.split()
        if not words or not words[0].isdigit():
            continue
        st = next((w for w in words if w in QUEUED + RUNNING), None)
        if st is None:
            raise output_error("qstat", "job lines holding a state (queued, running, exiting …)", stdout)
        out[words[0]] = JobState("queued" if st in QUEUED else "running", st)
    return out


def cancel_argv(job_id: str) -> List[str]:
    """``qdel ID``."""
    return ["qdel", str(job_id)]


def state(job_id: str) -> JobState:
    """The :class:`JobState` of ``job_id`` from ``qstat ID`` (Cobalt forgets a finished job: then
    ``done``, state ``gone``; ``unknown`` when qstat cannot be run or answers unreadably)."""
    try:
        proc = external.run(status_argv(job_id), timeout=30)
        found = parse_status(proc.stdout)
    except (OSError, subprocess.TimeoutExpired, SchedulerOutputError):
        return JobState("unknown", "?")
    return found.get(str(job_id), JobState("done", "gone"))
