"""PBS Pro (ALCF Polaris): ``#PBS`` directives and Cray PALS ``mpiexec``.

Layout facts (argonne-lcf/user-guides, Polaris "Example Job Scripts" and the GettingStarted
``submit.sh`` scripts): ``#PBS -l select=N:system=polaris``, ``-l place=scatter``,
``-l walltime=0:30:00``, ``-l filesystems=…``, ``-q``, ``-A``; then
``mpiexec -n TOTAL --ppn RANKS_PER_NODE --depth=DEPTH --cpu-bind depth``, with 4 ranks per node
at depth 8 on Polaris's 32-core nodes.

Jobs (not runnable here; OpenPBS's documented commands): ``qsub SCRIPT`` prints ``ID.server``;
``qstat -x -f ID`` shows one ``Job Id: ID`` block per job with ``job_state = S`` (Q, H, W, T, S
queued; R, E, B running; F, X finished) and ``Exit_status = N`` (qstat(1B) of OpenPBS,
https://github.com/openpbs/openpbs/blob/master/doc/man1/qstat.1B; job states in the PBS
Professional Reference Guide, "Job States"); ``qdel ID``. Public real outputs are in
``tests/data/scheduler/pbs/``.
"""
from __future__ import annotations

import re
import subprocess
from typing import Dict, List, Optional, Tuple

from envtool.core import external
from envtool.scheduler.model import Capabilities, JobRequest, JobState, SchedulerOutputError, phase_of, hms, output_error

NAME = "pbs"
DIRECTIVE = "#PBS"
#: the registered launcher job scripts use unless the site file names one (``batch.launcher``)
DEFAULT_LAUNCHER: Optional[str] = "mpiexec"
#: Submits to a queue, and names each task's rank and the job's first node, so the DDP launches
#: (:mod:`envtool.scheduler.ddp`) can be written for it; none of the other extras of
#: :class:`~envtool.scheduler.model.Capabilities` and no bounds of one step (why: ``no_step_bounds``). Each expression from ALCF's user guide
#: (``argonne-lcf/user-guides@7d04a3f91d5e``):
#:
#: - rank and node-local rank: ``$PALS_RANKID``, ``$PALS_LOCAL_RANKID``, which Cray PALS's
#:   ``mpiexec`` gives each rank (``docs/aurora/compiling-and-linking/aurora-example-program-makefile.md#L100-L107``;
#:   on Polaris ``docs/polaris/data-science/profiling_dl.md#L49``);
#: - tasks: ``$PMI_SIZE`` (``docs/aurora/data-science/frameworks/oneCCL.md#L253-L254`` sets ``RANK`` and
#:   ``WORLD_SIZE`` from ``PMI_RANK`` and ``PMI_SIZE``);
#: - nodes: the lines of ``$PBS_NODEFILE``, one host per line (``docs/polaris/running-jobs/index.md#L81``,
#:   ``docs/polaris/data-science/frameworks/deepspeed.md#L42``);
#: - job number: ``$PBS_JOBID`` up to its first dot (``1234.polaris-pbs-01…``: qsub's answer);
#: - first node: the first line of ``$PBS_NODEFILE``, mpiexec's default host file
#:   (``docs/polaris/running-jobs/index.md#L68``); that rank 0 runs there (PALS placing ranks in the
#:   host file's order) is envtool's inference, not a sentence of the guide. Cut at its first dot:
#:   PALS names hosts on the high-speed network (``x3104c0s31b0n0.hsn.cm.polaris.alcf.anl.gov``,
#:   ``docs/polaris/known-issues.md#L15``; that the node file does too is again inferred), and a
#:   site's ``launch.rendezvous_host`` adds that suffix.
CAPABILITIES = Capabilities(
    task_exprs=("$PALS_RANKID", "$PALS_LOCAL_RANKID", "$PMI_SIZE", '$(wc -l < "$PBS_NODEFILE")', "${PBS_JOBID%%.*}"),
    first_node='head -n 1 "$PBS_NODEFILE" | cut -d . -f 1',
    no_step_bounds="PBS Pro has no step launcher of its own (Cray PALS mpiexec starts the ranks on Polaris), "
                   "and envtool has read no public HPE source for a PALS option that ends a step when one rank "
                   "exits non-zero or that limits one step's time, so none is declared; the job's "
                   "-l walltime and validate's --timeout bound it")
SUBMIT_STDIN = False
#: PBS Pro starts a batch job in the user's home directory, not where ``qsub`` ran, and names the
#: submission directory in this variable (qsub(1B), "PBS_O_WORKDIR"; ALCF's Polaris job scripts
#: begin with ``cd ${PBS_O_WORKDIR}``: https://docs.alcf.anl.gov/polaris/running-jobs/). A job
#: script without ``--workdir`` changes to it first (:func:`envtool.scheduler.script.render`);
#: schedulers that start the job where it was submitted (Slurm, LSF) declare none.
SUBMIT_DIR_VAR = "PBS_O_WORKDIR"
QUEUED = ("Q", "H", "W", "T", "S")
RUNNING = ("R", "E", "B")
FINISHED = ("F", "X")


def directives(req: JobRequest) -> List[Tuple[str, ...]]:
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


def per_node_argv(req) -> List[str]:
    """``mpiexec -n NODES --ppn 1``: one process on each node (Cray PALS ``-n`` total and ``--ppn`` per
    node, as ALCF's Polaris example job scripts write them: https://docs.alcf.anl.gov/polaris/running-jobs/).
    Staging's per-node steps."""
    n = str(req.layout.nodes)
    return ["mpiexec", "-n", n, "--ppn", "1"]


def submit_argv(script: str) -> List[str]:
    """``qsub SCRIPT``."""
    return ["qsub", script]


def parse_submit(stdout: str) -> str:
    """The id (``1234.polaris-pbs-01``) from ``qsub`` output: a line holding only the job id.

    Raises:
        SchedulerOutputError: no such line.
    """
    m = re.search(r"^\s*(\d+(?:\.[\w.-]+)?)\s*$", stdout, re.M)
    if not m:
        raise output_error("qsub", "the job id (1234.SERVER)", stdout)
    return m.group(1)


def status_argv(job_id: str) -> List[str]:
    """``qstat -x -f ID`` (``-x``: finished jobs too)."""
    return ["qstat", "-x", "-f", str(job_id)]



def parse_status(stdout: str) -> Dict[str, JobState]:
    """Job id → :class:`JobState` from ``qstat -f`` output: ``Job Id: ID`` blocks of indented
    ``name = value`` lines (tab-indented lines continue the previous value). ``job_state`` gives
    the state, ``Exit_status`` the exit status of a finished job.

    Raises:
        SchedulerOutputError: text that is not such blocks, or a block without ``job_state``.
    """
    out: Dict[str, JobState] = {}
    blocks = re.split(r"^Job Id:[ \t]*", stdout, flags=re.M)
    if blocks[0].strip():
        raise output_error("qstat -f", "'Job Id: ID' blocks of 'name = value' lines", stdout)
    for block in blocks[1:]:
        lines = block.splitlines()
        job_id = lines[0].strip() if lines else ""
        st = re.search(r"^\s+job_state = (\S+)", block, re.M)
        if not job_id or not st:
            raise output_error("qstat -f", "a 'job_state = S' line in each 'Job Id: ID' block", stdout)
        phase = phase_of(st.group(1), QUEUED, RUNNING, FINISHED)
        code = re.search(r"^\s+Exit_status = (-?\d+)", block, re.M)
        out[job_id] = JobState(phase, st.group(1), external.small_int(code.group(1)) if code and phase == "done" else None)
    return out


def cancel_argv(job_id: str) -> List[str]:
    """``qdel ID``."""
    return ["qdel", str(job_id)]


def state(job_id: str) -> JobState:
    """The :class:`JobState` of ``job_id`` from :func:`status_argv` (``unknown`` when qstat cannot be
    run, does not list the job, or answers unreadably)."""
    try:
        proc = external.run(status_argv(job_id), timeout=30)
        found = parse_status(proc.stdout)
    except (OSError, subprocess.TimeoutExpired, SchedulerOutputError):
        return JobState("unknown", "?")
    jid = str(job_id)
    if jid in found:
        return found[jid]
    # qstat names the job by its full id (1234.server): match the sequence number too
    same = [v for k, v in found.items() if k.split(".")[0] == jid.split(".")[0]]
    return same[0] if len(same) == 1 else JobState("unknown", "?")
