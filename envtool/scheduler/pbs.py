"""PBS Pro (ALCF Polaris): ``#PBS`` directives and Cray PALS ``mpiexec``.

Layout facts (argonne-lcf/user-guides, Polaris "Example Job Scripts" and the GettingStarted
``submit.sh`` scripts): ``#PBS -l select=N:system=polaris``, ``-l place=scatter``,
``-l walltime=0:30:00``, ``-l filesystems=…``, ``-q``, ``-A``; then
``mpiexec -n TOTAL --ppn RANKS_PER_NODE --depth=DEPTH --cpu-bind depth``, with 4 ranks per node
at depth 8 on Polaris's 32-core nodes.

Jobs (not runnable here; OpenPBS's documented commands): ``qsub SCRIPT`` prints ``ID.server``;
``qstat -x -f ID`` shows ``job_state`` (Q, H, W queued; R, E running; F finished) and
``Exit_status``; ``qdel ID``.
"""
from __future__ import annotations

import re
import subprocess
from typing import List, Optional, Tuple

from envtool.scheduler.model import hms, missing

NAME = "pbs"
DIRECTIVE = "#PBS"
LAUNCHER = "mpiexec"


def directives(req) -> List[Tuple[str, ...]]:
    """``#PBS`` argument tuples: select (with ``batch.constraint``), walltime, queue, account, name, output."""
    b = req.site.batch
    select = f"select={req.layout.nodes}" + (f":{b.constraint}" if b.constraint else "")
    out: List[Tuple[str, ...]] = [("-l", select)]
    if req.seconds:
        out.append(("-l", f"walltime={hms(req.seconds)}"))
    if req.effective_queue:
        out.append(("-q", req.effective_queue))
    if req.account:
        out.append(("-A", req.account))
    if req.job_name:
        out.append(("-N", req.job_name))
    if req.output:
        out.append(("-o", req.output))
        out.append(("-j", "oe"))
    return out


def launch_argv(req, layout, whole_job: bool = True) -> List[str]:
    """``mpiexec -n T --ppn R --depth=D --cpu-bind depth``.

    Raises:
        SpecError: ``batch.cpus_per_node`` missing (``--depth`` needs it).
    """
    if not layout.cpus_per_rank:
        raise missing(req.site, "batch.cpus_per_node", "the cores a job may use on one node (an integer)",
                      "mpiexec --depth needs it")
    return ["mpiexec", "-n", str(layout.ranks), "--ppn", str(layout.ranks_per_node),
            f"--depth={layout.cpus_per_rank}", "--cpu-bind", "depth"]


def per_node_argv(req) -> List[str]:
    """``mpiexec -n NODES --ppn 1``: one process on each node (Cray PALS ``-n`` total and ``--ppn`` per
    node, as ALCF's Polaris example job scripts write them: https://docs.alcf.anl.gov/polaris/running-jobs/).
    Staging's per-node steps."""
    n = str(req.layout.nodes)
    return ["mpiexec", "-n", n, "--ppn", "1"]


def submit_argv(script: str) -> List[str]:
    """``qsub SCRIPT``."""
    return ["qsub", script]


def parse_job_id(text: str) -> Optional[str]:
    """The id (``1234.polaris-pbs-01``) from ``qsub`` output, or None."""
    m = re.search(r"^\s*(\d+(?:\.\S+)?)\s*$", text, re.M)
    return m.group(1) if m else None


def cancel_argv(job_id: str) -> List[str]:
    """``qdel ID``."""
    return ["qdel", str(job_id)]


def state(job_id: str) -> Tuple[str, str, Optional[int]]:
    """``(phase, job_state, Exit_status)`` from ``qstat -x -f ID``."""
    try:
        proc = subprocess.run(["qstat", "-x", "-f", str(job_id)], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown", "?", None
    m = re.search(r"job_state\s*=\s*(\S+)", proc.stdout)
    st = m.group(1) if m else "?"
    if st in ("Q", "H", "W", "T", "S"):
        return "queued", st, None
    if st in ("R", "E", "B"):
        return "running", st, None
    if st in ("F", "X"):
        code = re.search(r"Exit_status\s*=\s*(-?\d+)", proc.stdout)
        return "done", st, (int(code.group(1)) if code else None)
    return "unknown", st, None
