"""What a job script is made of, and what every scheduler and launcher provides.

Plain data (:class:`Layout`, :class:`LaunchStep`, :class:`JobRequest`, :class:`JobState`) and the
two interfaces a plug-in implements: :class:`Scheduler` (one module per scheduler:
:mod:`envtool.scheduler.slurm` …) and :class:`LaunchProgram` (one object per launcher:
:mod:`envtool.scheduler.launchers`). Both are registered by name in :mod:`envtool.spec.registry`.

The split follows ReFrame's: a scheduler back-end emits the preamble (directives), submits and
polls (``reframe-hpc/reframe@v4.5.0:reframe/core/schedulers/__init__.py``, ``JobScheduler``:
``emit_preamble``, ``submit``, ``poll``, ``cancel``), and a launcher is chosen apart from it and
only builds the command words that start the ranks
(``reframe-hpc/reframe@v4.5.0:reframe/core/launchers/__init__.py``, ``JobLauncher.command``).
Unlike ReFrame, the parsing of a scheduler's answers is a pure function of the command's
standard output (``parse_submit``, ``parse_status``), kept apart from the thin function that runs
the command, so it is tested on captured real outputs (``tests/data/scheduler/``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Literal, NamedTuple, Optional, Protocol, Sequence, Tuple

from envtool.core.errors import EnvtoolError, SpecError, UsageError
from envtool.spec.sites import SiteFile


@dataclass(frozen=True)
class Layout:
    """Ranks on nodes.

    Attributes:
        nodes: nodes of the job (>= 1).
        ranks_per_node: ranks (processes) on each node (>= 1).
        gpus_per_rank: GPUs each rank drives (0 for CPU-only).
        cpus_per_rank: CPUs (cores or hardware threads, the site's unit) each rank is bound to;
            0 when the site file does not say how many a node has.
    """

    nodes: int
    ranks_per_node: int
    gpus_per_rank: int = 0
    cpus_per_rank: int = 0

    @property
    def ranks(self) -> int:
        """All ranks of the job (nodes × ranks per node)."""
        return self.nodes * self.ranks_per_node

    @property
    def gpus_per_node(self) -> int:
        """GPUs the job uses on one node (ranks per node × GPUs per rank)."""
        return self.ranks_per_node * self.gpus_per_rank


@dataclass(frozen=True)
class LaunchStep:
    """One launcher line of a job script.

    Attributes:
        argv: the command every rank runs (words; each is quoted in the script).
        layout: the ranks of this step, or None for the whole job's layout (a step may use fewer,
            e.g. the 1-rank run of a scaling benchmark).
        redirect: a file the step's output is appended to, or None.
        direct: run the command once in the batch shell, without the launcher.
        may_fail: the script goes on when the step fails (``|| true``).
        per_node: launch one task on each node of the job (a pre-flight), through the
            scheduler's ``per_node_argv``.
        early: write the line before modules are loaded and the environment is activated (a
            pre-flight must run where the environment is missing).
        wrap: words written before the launcher's (a program in the batch shell that runs the
            launcher line as its child, e.g. the rendezvous server of a Gloo step), or ().
        mpi: Slurm only: the ``srun --mpi=`` plugin of this step instead of the site's
            (``none`` for ranks that must not start through PMI), or None.
        seconds: the step's own time limit (s), written with the scheduler's
            :attr:`Capabilities.step_time` option (rounded up to whole minutes), or None.
        bounded: a task exiting non-zero ends the step: the scheduler's
            :attr:`Capabilities.kill_on_bad_exit` words are added to the launcher's.
        retry_init: ``(python, rank probe, run directory, phase)``: when the step fails and a
            rank died of a crash signal inside ``hvd.init()`` (the rank probe's ``--died-in-init``
            verdict), the script runs the step once more (:func:`envtool.scheduler.script.retry_function`);
            ``()``: no retry.
    """

    argv: Tuple[str, ...]
    layout: Optional[Layout] = None
    redirect: Optional[str] = None
    direct: bool = False
    may_fail: bool = False
    per_node: bool = False
    early: bool = False
    wrap: Tuple[str, ...] = ()
    mpi: Optional[str] = None
    seconds: Optional[int] = None
    bounded: bool = False
    retry_init: Tuple[str, ...] = ()


@dataclass(frozen=True)
class JobRequest:
    """Everything a job script says.

    Attributes:
        site: the :class:`envtool.spec.sites.SiteFile` (scheduler, launcher, ``batch`` section).
        layout: the job's :class:`Layout`.
        steps: launcher lines, in order.
        seconds: wall-clock limit (s), or None for the site's default.
        account: project/account to charge, or None.
        queue: queue (partition, QOS), or None for the site's ``batch.queue``.
        job_name: the job's name, or None.
        output: file the job's stdout and stderr go to, or None for the scheduler's default.
        modules: modules loaded in order (the site's, then the environment's).
        activation: shell lines (already quoted) that activate the environment.
        env: variables exported before the launcher lines, in order.
        env_paths: search-path entries added after ``env``: ``(VAR, "prepend"|"append", entry)``
            applied in order (``export VAR=entry${VAR:+:$VAR}`` for a prepend).
        workdir: directory the script changes to first (absolute), or None.
        launcher: the :class:`envtool.scheduler.launcher.Launcher` to use (None: the site's).
        comments: extra comment lines for the script's header (one line each).
        stage: the environment staged to node-local storage first
            (:class:`envtool.scheduler.stage.Stage`), or None.
        extra_directives: directive arguments added after the site's own (one string each,
            split like ``batch.directives``: the site's ``node_local.directives`` when staging).
        env_notes: ``(VAR, note)``: a comment written after ``export VAR=…`` naming where the
            value comes from (one line; control characters become ``?``).
    """

    site: SiteFile
    layout: Layout
    steps: Tuple[LaunchStep, ...]
    seconds: Optional[int] = None
    account: Optional[str] = None
    queue: Optional[str] = None
    job_name: Optional[str] = None
    output: Optional[str] = None
    modules: Tuple[str, ...] = ()
    activation: Tuple[str, ...] = ()
    env: Tuple[Tuple[str, str], ...] = ()
    workdir: Optional[str] = None
    launcher: object = None
    comments: Tuple[str, ...] = field(default=())
    env_paths: Tuple[Tuple[str, str, str], ...] = ()
    stage: object = None
    extra_directives: Tuple[str, ...] = ()
    env_notes: Tuple[Tuple[str, str], ...] = ()

    @property
    def effective_queue(self) -> Optional[str]:
        """``queue``, else the site's queue for this many nodes (``batch.queue_by_nodes``, then
        ``batch.queue``: :meth:`envtool.spec.sites.BatchSection.queue_for`)."""
        if self.queue:
            return self.queue
        pick = getattr(self.site.batch, "queue_for", None)
        return pick(self.layout.nodes) if pick is not None else getattr(self.site.batch, "queue", None)


#: The variables that tell each controller which network interface to use between nodes, each
#: with where the variable is documented:
INTERFACE_VARIABLES = (
    # Horovod's Gloo controller: horovodrun sets it from --network-interface
    # (horovod/horovod@v0.28.1:horovod/runner/gloo_run.py)
    "HOROVOD_GLOO_IFACE",
    # torch.distributed's Gloo backend: https://pytorch.org/docs/stable/distributed.html#common-environment-variables
    "GLOO_SOCKET_IFNAME",
    # NCCL's socket transport and bootstrap: https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-socket-ifname
    "NCCL_SOCKET_IFNAME",
    # Open MPI's TCP BTL (MCA parameters from OMPI_MCA_* variables):
    # https://www.open-mpi.org/faq/?category=tcp#tcp-selection
    "OMPI_MCA_btl_tcp_if_include",
)


def missing(site, field_name: str, expected: str, why: str) -> SpecError:
    """The error for a site file lacking what a job-script flag needs (exit 2).

    Args:
        site: the site file (``path`` is named in the message).
        field_name: dotted field to add (``batch.cpus_per_node``).
        expected: what to add, in words.
        why: the flag or line that needs it.
    Returns:
        a :class:`SpecError` to raise.
    """
    return SpecError(site.path, field_name, expected, hint=f"site {site.name} lacks it; {why}")


_TIME = re.compile(r"^(?:(\d+)-)?(\d+):(\d{2}):(\d{2})$")


def parse_time(text: str) -> int:
    """``H:MM:SS`` or ``D-H:MM:SS`` (or minutes alone, as ``sbatch -t 30`` reads it) → seconds.

    Two fields (``10:00``) are refused: Slurm reads them as minutes:seconds, LSF as hours:minutes.

    Args:
        text: the ``--time`` value.
    Returns:
        seconds (int, > 0).
    Raises:
        UsageError: unreadable, ambiguous, or zero.
    """
    t = text.strip()
    if t.isdigit():
        seconds = int(t) * 60
    else:
        m = _TIME.match(t)
        if not m or int(m.group(3)) >= 60 or int(m.group(4)) >= 60:
            raise UsageError(f"--time {text!r}: expected HH:MM:SS (or D-HH:MM:SS, or whole minutes)")
        days, h, mi, se = m.groups()
        seconds = int(days or 0) * 86400 + int(h) * 3600 + int(mi) * 60 + int(se)
    if seconds <= 0:
        raise UsageError(f"--time {text!r}: expected a limit above zero")
    return seconds


def hms(seconds: int) -> str:
    """Seconds → ``H:MM:SS`` (hours not padded: ``2:00:00``, as OLCF's and NERSC's job scripts write it)."""
    h, rest = divmod(int(seconds), 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}"


#: Where a job is, in the scheduler-independent terms envtool waits on: ``queued`` (waiting or
#: held), ``running``, ``done`` (finished, failed or cancelled), ``unknown`` (the scheduler does
#: not know the job, or its answer could not be read).
Phase = Literal["queued", "running", "done", "unknown"]


class JobState(NamedTuple):
    """One job's state as a scheduler reported it.

    Attributes:
        phase: the :data:`Phase`.
        state: the scheduler's own state name (``PENDING``, ``RUN``, ``F`` …), ``?`` when unknown.
        exit_status: the batch script's exit status once done, else None (also when the
            scheduler does not report it).
    """

    phase: Phase
    state: str
    exit_status: Optional[int] = None


class SchedulerOutputError(EnvtoolError):
    """A scheduler command's output could not be read (exit status 1: a check failed, not a bug).

    The message names the command, what was expected and the start of what it printed
    (control characters shown as ``?``, at most 200 characters).
    """


def phase_of(state: str, queued: Sequence[str], running: Sequence[str],
             finished: Optional[Sequence[str]] = None) -> Phase:
    """The :data:`Phase` of a scheduler's job state.

    Args:
        state: the state as the scheduler prints it (``PEND``, ``R``, ``COMPLETED``).
        queued: the states of a job still waiting; running: of a job running.
        finished: the states of a job that ended, or None when every other state means ended.
    Returns:
        ``queued``, ``running``, ``done``, or ``unknown`` (a state in none of the lists when
        ``finished`` is given).
    """
    if state in queued:
        return "queued"
    if state in running:
        return "running"
    if finished is None or state in finished:
        return "done"
    return "unknown"


def output_error(command: str, expected: str, stdout: str) -> SchedulerOutputError:
    """The :class:`SchedulerOutputError` for ``command``'s unreadable ``stdout``.

    Args:
        command: the command in words (``sbatch --parsable``).
        expected: what its output should have been, in words.
        stdout: what it printed.
    Returns:
        the error to raise.
    """
    shown = re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", "?", stdout.strip())[:200].replace("\n", " | ")
    return SchedulerOutputError(f"{command}: expected {expected}, got {shown!r}" if shown else
                                f"{command}: expected {expected}, got no output")


@dataclass(frozen=True)
class Capabilities:
    """What a scheduler can do, declared once by its module (``CAPABILITIES``); the steps that write
    and run jobs consult these instead of the scheduler's name (as ReFrame's scheduler back-ends
    declare what they support, ``reframe-hpc/reframe@v4.5.0:reframe/core/schedulers/__init__.py``).

    Attributes:
        submits: jobs go to a queue and are watched there; False: the job script runs on this
            machine as a child process (``local``).
        broadcast: the words before ``SRC DEST`` of the command that copies one file to every node
            of the running job (Slurm: ``sbcast --force``, sbcast(1),
            https://slurm.schedmd.com/sbcast.html), or ``()``: a per-node task copies it.
        label_output: variables that make the launcher prefix each output line with its task number
            (Slurm: ``SLURM_LABELIO=1``, srun(1) ``--label``, https://slurm.schedmd.com/srun.html#OPT_label),
            or ``()``.
        overlap: the option a per-node step needs to run beside the job's other steps (Slurm:
            ``--overlap``, srun(1) https://slurm.schedmd.com/srun.html#OPT_overlap), or ``""``.
        preflight: a pre-flight task can run on every node before the ranks start
            (:mod:`envtool.validate.preflight`), with the launcher choosing each step's PMI plugin.
        names_nodes: the scheduler can name the nodes of a job and the ones that stopped
            responding, and its launcher names the node where a step could not start
            (``job_nodes``, ``unresponsive_nodes``, ``parse_launch_failures``).
        step_launcher: the launcher validation steps need (their own PMI plugin per step, ``srun
            --mpi=none``), whatever the site's job-script launcher; ``""``: the site's.
        task_vars: the variables the step launcher gives each task, as ``(rank, local rank, tasks,
            nodes, job id)`` (Slurm's ``SLURM_PROCID``, ``SLURM_LOCALID``, ``SLURM_NTASKS``,
            ``SLURM_JOB_NUM_NODES``, ``SLURM_JOB_ID``: srun(1), "OUTPUT ENVIRONMENT VARIABLES",
            https://slurm.schedmd.com/srun.html), or ``()``: the DDP launches
            (:mod:`envtool.scheduler.ddp`) are not written for it.
        task_exprs: the same five as shell expressions for inside double quotes, for a scheduler
            whose tasks do not carry all five as variables (PBS with Cray PALS: the rank
            variables come from ``mpiexec``, the node count from ``$PBS_NODEFILE``), or ``()``:
            :attr:`ddp_exprs` derives them from ``task_vars``.
        first_node: a shell command that prints the job's first node (Slurm: ``scontrol show
            hostnames "$SLURM_JOB_NODELIST" | head -n 1``), or ``""``.
        kill_on_bad_exit: the words the step launcher takes so that one task exiting non-zero ends
            the whole step (Slurm: ``--kill-on-bad-exit=1``, srun(1),
            https://slurm.schedmd.com/srun.html#OPT_kill-on-bad-exit), or ``()``: the launcher
            ends the step itself (Open MPI's mpirun aborts the job when a process exits non-zero,
            mpirun(1) "Termination", https://www.open-mpi.org/doc/v4.1/man1/mpirun.1.php) or the
            scheduler has no such option declared yet.
        step_time: the step launcher's option for a step's own time limit in whole minutes (Slurm:
            ``--time``, srun(1), https://slurm.schedmd.com/srun.html#OPT_time: a step past it is
            ended), or ``""``: the step is bounded by the job's limit and ``validate --timeout`` only.
        no_step_bounds: why the scheduler declares neither ``kill_on_bad_exit`` nor ``step_time``
            (one sentence naming its launcher and what bounds its steps instead), shown in
            ``validate --submit``'s plan (:func:`step_bounds`); ``""`` where it declares them.
    """

    submits: bool = True
    broadcast: Tuple[str, ...] = ()
    label_output: Tuple[Tuple[str, str], ...] = ()
    overlap: str = ""
    preflight: bool = False
    names_nodes: bool = False
    step_launcher: str = ""
    task_vars: Tuple[str, ...] = ()
    first_node: str = ""
    kill_on_bad_exit: Tuple[str, ...] = ()
    step_time: str = ""
    no_step_bounds: str = ""
    task_exprs: Tuple[str, ...] = ()

    @property
    def ddp_exprs(self) -> Tuple[str, ...]:
        """``(rank, local rank, tasks, nodes, job number)`` as shell expressions for inside double
        quotes (``$SLURM_PROCID`` … ``${SLURM_JOB_ID:-0}``): :attr:`task_exprs`, else made from
        :attr:`task_vars`; ``()`` when neither names all five. The job number is an integer
        expression (the rendezvous port is computed from it)."""
        if len(self.task_exprs) == 5:
            return tuple(self.task_exprs)
        if len(self.task_vars) != 5:
            return ()
        *first, job = self.task_vars
        return tuple(f"${v}" for v in first) + (f"${{{job}:-0}}",)

    @property
    def ddp_ready(self) -> bool:
        """The DDP launches (:mod:`envtool.scheduler.ddp`) can be written for this scheduler: it
        names each task's rank (:attr:`ddp_exprs`) and the job's first node (:attr:`first_node`)."""
        return bool(self.ddp_exprs) and bool(self.first_node)


def step_bounds(caps: Capabilities) -> Dict[str, object]:
    """What bounds one check's step of a job on a scheduler with ``caps``: ``kill_on_bad_exit``
    (its words, ``[]`` when none), ``step_time`` (the option, ``""`` when none) and ``text``, one
    line for the plan (the options, or the scheduler's ``no_step_bounds`` reason)."""
    words = list(caps.kill_on_bad_exit) + ([f"{caps.step_time}=MINUTES"] if caps.step_time else [])
    if words:
        text = f"{caps.step_launcher or 'the launcher'} {' '.join(words)} on each check's step"
    else:
        text = "none per step: " + (caps.no_step_bounds or "the scheduler declares none; the job's time limit "
                                    "and validate's --timeout bound the job")
    return {"kill_on_bad_exit": list(caps.kill_on_bad_exit), "step_time": caps.step_time, "text": text}


def capabilities(sched: object) -> Capabilities:
    """The :class:`Capabilities` scheduler module ``sched`` declares (``CAPABILITIES``); a module
    that declares none can submit and do nothing more."""
    caps = getattr(sched, "CAPABILITIES", None)
    return caps if isinstance(caps, Capabilities) else Capabilities()


class Scheduler(Protocol):
    """What a scheduler module provides (each one in ``envtool/scheduler/``, registered in
    :data:`envtool.spec.registry.SCHEDULERS`; a module satisfies the protocol with module-level
    names, as PEP 544 allows).

    Attributes:
        NAME: the registered name (``slurm``); a site file's ``scheduler``.
        DIRECTIVE: the directive prefix of job-script lines (``#SBATCH``), or None (no scheduler).
        DEFAULT_LAUNCHER: the registered launcher job scripts use when the site file names none
            in ``batch.launcher`` (``srun``), or None: the site's ``launcher`` template as written.
        SUBMIT_STDIN: the submit command reads the script on standard input (``bsub < SCRIPT``).
        CAPABILITIES: what it can do (:class:`Capabilities`); read through :func:`capabilities`.

    Optional, declared only by the schedulers that have it:
        SUBMIT_DIR_VAR: the variable naming the submission directory when the scheduler starts a
            job elsewhere (PBS: ``PBS_O_WORKDIR``; a job starts in ``$HOME``); job scripts without
            ``--workdir`` change to it first (:func:`envtool.scheduler.script.render`).
    """

    NAME: str
    DIRECTIVE: Optional[str]
    DEFAULT_LAUNCHER: Optional[str]
    SUBMIT_STDIN: bool
    CAPABILITIES: Capabilities

    def directives(self, req: JobRequest) -> List[Tuple[str, ...]]:
        """Directive arguments (one tuple of words per ``DIRECTIVE`` line) for ``req``."""

    def submit_argv(self, script: str) -> List[str]:
        """The command that submits the job script at path ``script``."""

    def parse_submit(self, stdout: str) -> str:
        """The job id from the submit command's standard output.

        Raises:
            SchedulerOutputError: no job id in it.
        """

    def status_argv(self, job_id: str) -> List[str]:
        """The command whose output :meth:`parse_status` reads for job ``job_id``."""

    def parse_status(self, stdout: str) -> Dict[str, JobState]:
        """Job id → :class:`JobState` for every job in the status command's output ({} when it lists none).

        Raises:
            SchedulerOutputError: the output is not the status command's.
        """

    def state(self, job_id: str) -> JobState:
        """Run the status command(s) for ``job_id`` and parse them (the thin subprocess part)."""

    def cancel_argv(self, job_id: str) -> List[str]:
        """The command that cancels job ``job_id`` ([] when there is nothing to call)."""


class LaunchProgram(Protocol):
    """What a registered launcher provides (:data:`envtool.spec.registry.LAUNCHERS`): the words
    that start a step's ranks, built from the layout, whatever the scheduler.

    Attributes:
        name: the registered name, also the program (``srun``).
    """

    name: str

    def launch_argv(self, req: JobRequest, layout: Layout, whole_job: bool = True,
                    mpi: Optional[str] = None) -> List[str]:
        """The launcher words of one job-script line (without the command).

        Args:
            req: the job.
            layout: the step's ranks.
            whole_job: the step uses the job's whole layout.
            mpi: the step's own PMI plugin (Slurm's ``srun --mpi=``), or None for the site's.
        Raises:
            SpecError: the site file lacks a value a flag needs (names the field).
            UsageError: ``mpi`` given to a launcher that has no PMI plugin option.
        """
