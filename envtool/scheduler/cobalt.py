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
from typing import List, Optional, Tuple

from envtool.scheduler.model import missing

NAME = "cobalt"
DIRECTIVE = "#COBALT"
LAUNCHER = "aprun"


def directives(req) -> List[Tuple[str, ...]]:
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


def launch_argv(req, layout, whole_job: bool = True) -> List[str]:
    """``aprun -n T -N R --cc depth -d D``.

    Raises:
        SpecError: ``batch.cpus_per_node`` missing (``-d`` needs it).
    """
    if not layout.cpus_per_rank:
        raise missing(req.site, "batch.cpus_per_node", "the cores a job may use on one node (an integer)",
                      "aprun -d needs it")
    return ["aprun", "-n", str(layout.ranks), "-N", str(layout.ranks_per_node), "--cc", "depth",
            "-d", str(layout.cpus_per_rank)]


def submit_argv(script: str) -> List[str]:
    """``qsub SCRIPT`` (Cobalt runs the script's ``#COBALT`` lines as options)."""
    return ["qsub", script]


def parse_job_id(text: str) -> Optional[str]:
    """The numeric job id Cobalt's ``qsub`` prints, or None."""
    m = re.search(r"^\s*(\d+)\s*$", text, re.M)
    return m.group(1) if m else None


def cancel_argv(job_id: str) -> List[str]:
    """``qdel ID``."""
    return ["qdel", str(job_id)]


def state(job_id: str) -> Tuple[str, str, Optional[int]]:
    """``(phase, state, None)`` from ``qstat ID`` (Cobalt forgets a finished job: then ``done``)."""
    try:
        proc = subprocess.run(["qstat", str(job_id)], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown", "?", None
    for line in proc.stdout.splitlines():
        words = line.split()
        if words and words[0] == str(job_id):
            st = next((w for w in words if w in ("queued", "running", "exiting", "user_hold", "starting")), "?")
            return ("queued" if st in ("queued", "user_hold") else "running"), st, None
    return "done", "gone", None
