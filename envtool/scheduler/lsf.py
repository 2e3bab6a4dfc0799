"""IBM Spectrum LSF with jsrun (Summit): ``#BSUB`` directives and ``jsrun`` resource sets.

Layout facts (OLCF's Summit page, ``olcf/olcf-user-docs@6c07271c3d12:software/analytics/distributed-dl-env.rst#L120-L130``, "Basic Distributed Deep Learning BSUB Script"): ``#BSUB -P <PROJECT>``,
``-W 0:10`` (hours:minutes), ``-nnodes 2``, ``-q batch``, ``-J``, ``-o``/``-e``; then
``jsrun -r1 -g6 -a6 -c42 -bpacked:7``: one resource set per node (``-r1``) holding the node's
GPUs (``-g``), its ranks (``-a``) and cores (``-c``), each rank bound to ``cores / ranks``
contiguous cores (``-bpacked:``). Without ``-n``, jsrun makes as many resource sets as the
allocation holds.

Jobs (not runnable here; the commands are IBM's documented ones): ``bsub < SCRIPT`` prints
``Job <ID> is submitted …``; ``bjobs -noheader -o stat ID`` gives PEND/RUN/DONE/EXIT; ``bkill ID``.
"""
from __future__ import annotations

import math
import re
import subprocess
from typing import List, Optional, Tuple

from envtool.scheduler.model import missing

NAME = "lsf"
DIRECTIVE = "#BSUB"
LAUNCHER = "jsrun"
SUBMIT_STDIN = True


def walltime(seconds: int) -> str:
    """Seconds → LSF's ``H:MM`` (``-W`` takes hours:minutes; seconds are rounded up)."""
    minutes = math.ceil(seconds / 60)
    return f"{minutes // 60}:{minutes % 60:02d}"


def directives(req) -> List[Tuple[str, ...]]:
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


def launch_argv(req, layout, whole_job: bool = True) -> List[str]:
    """``jsrun -r1 -g{G} -a{R} -c{C} -bpacked:{C/R}`` (``-n{nodes}`` for a partial step).

    Raises:
        SpecError: ``batch.cpus_per_node`` missing (``-c`` and ``-bpacked`` need it), or GPUs
            asked of a site with ``gpus_per_node`` 0.
    """
    site = req.site
    if not layout.cpus_per_rank:
        raise missing(site, "batch.cpus_per_node", "the cores a job may use on one node (an integer)",
                      "jsrun -c and -bpacked need it")
    argv = ["jsrun"]
    if not whole_job:
        argv.append(f"-n{layout.nodes}")
    argv.append("-r1")
    if layout.gpus_per_rank:
        if not site.gpus_per_node:
            raise missing(site, "gpus_per_node", "the GPUs of one node", "jsrun -g needs it")
        argv.append(f"-g{layout.gpus_per_node}")
    argv += [f"-a{layout.ranks_per_node}", f"-c{layout.cpus_per_rank * layout.ranks_per_node}",
             f"-bpacked:{layout.cpus_per_rank}"]
    return argv


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


def parse_job_id(text: str) -> Optional[str]:
    """The id from ``Job <123> is submitted to queue <batch>.``, or None."""
    m = re.search(r"Job <(\d+)>", text)
    return m.group(1) if m else None


def cancel_argv(job_id: str) -> List[str]:
    """``bkill ID``."""
    return ["bkill", str(job_id)]


def state(job_id: str) -> Tuple[str, str, Optional[int]]:
    """``(phase, LSF stat, exit status)`` from ``bjobs -noheader -o "stat exit_code" ID``."""
    try:
        proc = subprocess.run(["bjobs", "-noheader", "-o", "stat exit_code", str(job_id)], capture_output=True,
                              text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown", "?", None
    words = proc.stdout.split()
    st = words[0] if words else "?"
    if st in ("PEND", "PSUSP", "WAIT"):
        return "queued", st, None
    if st in ("RUN", "USUSP", "SSUSP", "PROV"):
        return "running", st, None
    if st in ("DONE", "EXIT"):
        code = int(words[1]) if len(words) > 1 and words[1].isdigit() else (0 if st == "DONE" else None)
        return "done", st, code
    return "unknown", st, None
