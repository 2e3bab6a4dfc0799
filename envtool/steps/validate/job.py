"""``validate --submit``: a plan of typed steps run by the one :class:`~envtool.steps.kernel.runner.Runner`.

Steps: ``preflight`` (the launcher's PMI against the MPI build, on this host; Slurm-like sites),
``write-script`` (the run directory, the rank probe, the job script), ``submit`` and ``watch`` (or
``run-script`` where the scheduler does not submit), ``collect`` (the records the ranks wrote) and
``judge``. The job runs check-build once in the batch shell, then one launcher step per validation
check the spec and site imply (:func:`envtool.validate.checks.select`: Horovod's MPI controller
through the site's launcher; Horovod's Gloo controller and ``torch.distributed`` under
``srun --mpi=none`` with envtool's rendezvous), each ending with the allreduce sweep, and with
``--benchmark`` the training step at 1 rank and all ranks. Ctrl-C or SIGTERM cancels the job.

The run directory must be on a file system the compute nodes share (the current directory by default).
With ``target.stage`` the job first stages the pack to each node's local storage. With an image
(``validate --image``) check-build and the MPI step run inside it through the site's container runtime.
"""
from __future__ import annotations

import dataclasses
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from envtool.core.errors import CheckFailed, UsageError
from envtool.core.plan import Step
from envtool.scheduler import ddp
from envtool.scheduler.model import LaunchStep, Layout, capabilities, step_bounds
from envtool.scheduler.script import make_layout
from envtool.steps.jobscript import Target, build_request, render
from envtool.steps.validate import judge as jd
from envtool.steps.validate import watch as wt
from envtool.steps.validate.results import JobResult, PreflightResult
from envtool.validate import checks as vc
from envtool.validate import ranks as rk
from envtool.validate import sweep
from envtool.validate.launches import ImageRun, JobContext, in_image

#: Seconds a Gloo or torch.distributed step may take when ``--timeout`` is not given.
RENDEZVOUS_SECONDS = 900
#: The bounds of one check's step (s), from the work it does: importing the frameworks (OLCF measured
#: ``import torch`` at 64 ranks taking 51 s from Lustre, :data:`envtool.validate.ranks.SLOW_IMPORT_SECONDS`
#: is 10: three times the slow case), the controller's rendezvous, and each size of the sweep.
STEP_IMPORT_SECONDS = 180
STEP_RENDEZVOUS_SECONDS = 120
STEP_SWEEP_SECONDS_PER_SIZE = 10
#: The job's parts outside the check steps (s): the wait in the queue, the pre-flight and check-build.
JOB_OVERHEAD_SECONDS = 600
Progress = Callable[[str], None]


@dataclass(frozen=True)
class JobOptions:
    """What ``validate --submit`` was asked for.

    Attributes:
        nodes, ranks_per_node, gpus_per_rank: the layout (defaults as ``jobscript``'s).
        time_limit: ``H:MM:SS`` for the job, or None; account, queue: as ``jobscript``.
        benchmark: add the 1-rank and all-rank benchmark steps; steps, batch_size: its size.
        workdir: the run directory (default ``./envtool-validate-<time>``).
        timeout: seconds to wait for the job before cancelling it (None: as long as it takes).
        preflight_only: run the pre-flight alone.
        slow_seconds: p99 import seconds above which an import is reported with the staging fix.
        sweep_max: bytes of the sweep's largest allreduce (0: no sweep).
        image: run in this image (``--image``); binds: extra directories bound into it.
        launch: ``torchrun`` or ``srun`` (``--launch``): run the torch.distributed checks alone,
            started the way PyTorch users start DDP (:mod:`envtool.scheduler.ddp`); ``launcher``:
            every check with its own launch; None: the site file's ``launch.default`` for the
            torch.distributed checks (beside the others), else as ``launcher``.
    """

    nodes: int
    ranks_per_node: Optional[int] = None
    gpus_per_rank: Optional[int] = None
    time_limit: Optional[str] = None
    account: Optional[str] = None
    queue: Optional[str] = None
    benchmark: bool = False
    steps: int = 20
    batch_size: int = 32
    workdir: Optional[str] = None
    timeout: Optional[float] = None
    preflight_only: bool = False
    slow_seconds: float = rk.SLOW_IMPORT_SECONDS
    sweep_max: int = sweep.MAX_SIZE
    image: Optional[str] = None
    binds: Tuple[str, ...] = ()
    launch: Optional[str] = None


@dataclass(frozen=True)
class JobPlan:
    """The composed job: what ``--dry-run`` prints and what the steps act on (their payload).

    Attributes:
        target, options: the environment and the request.
        sched: the scheduler module; run_dir, script: where the files go (nothing written yet).
        text: the job script; submit: the command that submits it (``bash SCRIPT`` without a scheduler).
        checks: the validation checks the job runs; layout: its ranks.
        with_preflight: the job starts with the pre-flight; launcher_note: why srun starts the ranks.
        image: the image the ranks run in, or None; poll_max: the longest pause between two looks.
        steps: the plan's steps, in order.
        launch_note: how the torch.distributed checks start and where that choice came from
            (``--launch`` or the site file's ``launch.default``), or None when each check keeps
            its own launch.
        timeout: seconds the watch waits before cancelling the job (``--timeout``, else
            :func:`default_timeout`); timeout_source: where it came from, in words.
    """

    target: Target
    options: JobOptions
    sched: Any
    run_dir: Path
    script: Path
    text: str
    submit: Tuple[str, ...]
    checks: Tuple[vc.ValidationCheck, ...]
    layout: Layout
    with_preflight: bool
    launcher_note: Optional[str] = None
    image: Optional[ImageRun] = None
    poll_max: float = wt.JOB_POLL_MAX
    steps: Tuple[Step, ...] = ()
    launch_note: Optional[str] = None
    timeout: Optional[float] = None
    timeout_source: str = "--timeout"

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready form (``validate --submit --dry-run --json``)."""
        lay = self.layout
        return {"scheduler": self.sched.NAME, "run_dir": str(self.run_dir), "script": str(self.script),
                "script_text": self.text, "submit": list(self.submit),
                "layout": {"nodes": lay.nodes, "ranks": lay.ranks, "ranks_per_node": lay.ranks_per_node},
                "checks": [c.to_dict() for c in self.checks], "preflight": self.with_preflight,
                "launcher_note": self.launcher_note, "launch_note": self.launch_note,
                "steps": [s.to_dict() for s in self.steps],
                "timeout": {"seconds": self.timeout, "source": self.timeout_source},
                "step_bounds": step_bounds(capabilities(self.sched))}


def _refuse(target: Target, opts: JobOptions, with_preflight: bool) -> None:
    """The option combinations a job cannot run (exit 2), before anything is written."""
    rules = ((opts.image is not None and opts.preflight_only,
              "--preflight checks the environment's prefix on every node; with --image the image carries the "
              "environment: drop --preflight"),
             (opts.preflight_only and not with_preflight,
              f"--preflight: the pre-flight is written for Slurm sites so far; site {target.site.name} "
              f"({target.site.path}) uses scheduler {target.site.scheduler or 'none'}"),
             (opts.preflight_only and opts.benchmark, "--preflight runs the pre-flight alone: drop --benchmark"),
             (opts.image is not None and opts.launch in ddp.LAUNCHES,
              f"--launch {opts.launch} starts torch.distributed on the host's environment: drop --image"),
             (opts.image is not None and opts.benchmark,
              "--benchmark runs on the host's environment: with --image drop --benchmark (the image's ranks are "
              "validated by check-build and the allreduce)"))
    for broken, message in rules:
        if broken:
            raise UsageError(message)


def _step_launcher(target: Target, sched) -> Tuple[Target, Optional[str]]:
    """Validation steps start ranks with their own PMI plug-in (``--mpi=none`` for Gloo and
    torch.distributed), which only the scheduler's step launcher takes; the site's
    ``batch.launcher`` stays for job scripts. Returns the target to use and the note, if any."""
    step_launcher = capabilities(sched).step_launcher
    if not step_launcher or target.launcher is None or target.launcher.program == step_launcher:
        return target, None
    from envtool.scheduler.launcher import Launcher

    note = (f"ranks are started with {step_launcher} (the site's launcher {target.launcher.program} is for job "
            f"scripts; the validation's steps choose their own PMI plugin, which {step_launcher} takes)")
    launcher = Launcher(program=step_launcher, template=step_launcher, scheduler=sched.NAME, native=True)
    return dataclasses.replace(target, launcher=launcher), note


def _image(target: Target, opts: JobOptions) -> Optional[ImageRun]:
    if opts.image is None:
        return None
    from envtool.steps.jobscript.container_run import container_of, image_path

    section = container_of(target.site)
    return ImageRun(section, image_path(section, opts.image, must_exist=True), tuple(opts.binds))


def launch_choice(target: Target, opts: JobOptions, sched, image: Optional[ImageRun]) -> Optional[ddp.LaunchChoice]:
    """The DDP launch of the torch.distributed checks (``--launch``, else the site file's
    ``launch.default``), or None: each check keeps its own launch (``--launch launcher``, no
    default, an image, a pre-flight alone).

    Raises:
        SpecError: the site's default is a DDP launch its scheduler cannot write (exit 2).
    """
    if opts.preflight_only or image is not None or opts.launch == ddp.LAUNCHER:
        return None
    choice = ddp.choose(target.site, opts.launch, capabilities(sched))
    if choice.from_site and choice.name not in vc.LAUNCHES:
        return None  # a site default validation has no launch for (PBS's mpiexec): each check keeps its own
    return choice if choice.ddp else None


def select_checks(target: Target, opts: JobOptions, sched, image: Optional[ImageRun],
                  choice: Optional[ddp.LaunchChoice] = None) -> List[vc.ValidationCheck]:
    """The validation checks this job runs: none for a pre-flight alone, else those the spec's
    frameworks and the site (GPUs, the scheduler's step launcher, an image) imply. With
    ``--launch torchrun|srun`` the torch.distributed checks alone, through that launch; with a
    site default launch (``choice.from_site``) the torch.distributed checks through it and the
    others as they are."""
    if opts.preflight_only:
        return []
    frameworks = jd.frameworks_of(target)
    if target.spec is None and "pytorch" in frameworks:
        # no spec: the job cannot ask check-build first which installed frameworks Horovod was built
        # for; PyTorch's checks, as before TensorFlow had any
        frameworks = ("pytorch",)
    gpus = bool(target.site.gpus_per_node) and (opts.gpus_per_rank is None or opts.gpus_per_rank > 0)
    chosen = vc.select(vc.Selection(where="job", frameworks=frameworks, gpus=gpus, image=image is not None,
                                    step_launcher=bool(capabilities(sched).step_launcher)))
    if choice is None:
        return chosen
    if choice.from_site:
        return [dataclasses.replace(c, launch=choice.name) if c.binding == "torch.distributed" else c for c in chosen]
    torch = [dataclasses.replace(c, launch=choice.name) for c in chosen if c.binding == "torch.distributed"]
    if not torch:
        raise UsageError(f"--launch {choice.name} starts the torch.distributed checks, and this job has none "
                         f"(frameworks: {', '.join(frameworks) or 'none'}; site {target.site.name})")
    return torch


def _preflight_steps(target: Target, opts: JobOptions, run_dir: Path) -> List[LaunchStep]:
    from envtool.validate import preflight as pf

    script = run_dir / "preflight.sh"
    iface = getattr(target.site.batch, "interface", None)
    gpu = bool(target.site.gpus_per_node) and (opts.gpus_per_rank is None or opts.gpus_per_rank > 0)
    out = [LaunchStep(tuple(pf.node_argv(script, run_dir, target.prefix, iface, opts.nodes, gpu)), per_node=True,
                      early=True),
           LaunchStep(tuple(pf.gate_argv(script, run_dir, opts.nodes, jd.lock_of(target))), direct=True, early=True)]
    if not iface:  # the interface every node chose, for the main step (with its source as a comment)
        out.append(LaunchStep(("source", str(pf.interface_env(run_dir))), direct=True, early=True))
    return out


def _check_build_step(target: Target, ctx: JobContext) -> LaunchStep:
    python = ctx.python
    if ctx.image is not None:
        argv = in_image(ctx.image, [python, str(Path(python).parent / "horovodrun"), "--check-build"], ctx.run_dir)
    else:
        argv = tuple(([python, str(target.prefix / "bin" / "horovodrun")] if target.prefix else ["horovodrun"])
                     + ["--check-build"])
    return LaunchStep(argv, redirect=str(ctx.run_dir / "check-build.txt"), direct=True, may_fail=True)


def _launch_steps(target: Target, opts: JobOptions, sched, run_dir: Path, checks, with_preflight: bool,
                  image: Optional[ImageRun]) -> List[LaunchStep]:
    """Pre-flight, check-build and one step per check (each check's launch makes it)."""
    out = _preflight_steps(target, opts, run_dir) if with_preflight else []
    if not checks:
        return out
    ctx = JobContext(python=target.python, probe=run_dir / "rank_probe.py", rendezvous=run_dir / "rendezvous.py",
                     run_dir=run_dir, method=jd.start_method(target),
                     sweep=("--sweep", str(opts.sweep_max)) if opts.sweep_max else (),
                     wait=str(int(opts.timeout or RENDEZVOUS_SECONDS)), site_may_fail=with_preflight, image=image,
                     caps=capabilities(sched), layout=make_layout(target.site, opts.nodes, opts.ranks_per_node,
                                                                  opts.gpus_per_rank), site=target.site)
    out.append(_check_build_step(target, ctx))
    limit = step_seconds(opts)
    # a check's step runs once more when a rank died of a crash signal inside hvd.init() (issue 45:
    # 1 of 10 MPI steps on a Slurm test cluster; see rank_probe.died_in_init); not inside an image,
    # whose interpreter the batch shell does not have
    retry = () if image is not None else (target.python, str(ctx.probe), str(run_dir))
    return out + [dataclasses.replace(vc.launch_for(c, "job").build(c, ctx), bounded=True, seconds=limit,
                                      retry_init=retry + (c.phase,) if retry else ())
                  for c in checks]


def step_seconds(opts: JobOptions) -> int:
    """The time limit (s) of one check's step: :data:`STEP_IMPORT_SECONDS` + :data:`STEP_RENDEZVOUS_SECONDS`
    + :data:`STEP_SWEEP_SECONDS_PER_SIZE` for each size of the sweep up to ``opts.sweep_max`` (the
    benchmark's steps get the same bound)."""
    sizes = sum(1 for size in sweep.SIZES if size <= opts.sweep_max) if opts.sweep_max else 0
    return STEP_IMPORT_SECONDS + STEP_RENDEZVOUS_SECONDS + STEP_SWEEP_SECONDS_PER_SIZE * sizes


def default_timeout(opts: JobOptions, steps: int) -> int:
    """``validate --submit``'s overall limit (s) when ``--timeout`` is not given: every bounded step at
    its :func:`step_seconds`, plus :data:`JOB_OVERHEAD_SECONDS` (queue, pre-flight, check-build).

    Args:
        opts: the request; steps: the job's bounded steps (checks and benchmark points).
    """
    return JOB_OVERHEAD_SECONDS + steps * step_seconds(opts)


def _benchmark_steps(target: Target, opts: JobOptions, run_dir: Path, lay: Layout,
                     framework: str = "pytorch") -> List[LaunchStep]:
    """The benchmark's two steps (1 rank, then every rank) with ``framework``'s synthetic step
    (PyTorch's CNN, or the same network as a Keras step for ``tensorflow``)."""
    probe = run_dir / "rank_probe.py"
    one = Layout(1, 1, lay.gpus_per_rank, lay.cpus_per_rank)
    limit = step_seconds(opts)
    return [LaunchStep(tuple(rk.probe_argv(target.python, probe, run_dir, "bench-1", batch_size=opts.batch_size,
                                           steps=opts.steps, framework=framework)), layout=one, bounded=True,
                       seconds=limit),
            LaunchStep(tuple(rk.probe_argv(target.python, probe, run_dir, f"bench-{lay.ranks}",
                                           batch_size=opts.batch_size, steps=opts.steps, framework=framework)),
                       bounded=True, seconds=limit)]


def _request(target: Target, opts: JobOptions, run_dir: Path, steps: List[LaunchStep], extra_env):
    return build_request(target, opts.nodes, steps, opts.ranks_per_node, opts.gpus_per_rank, opts.time_limit,
                         opts.account, opts.queue, "envtool-validate", str(run_dir / "job.out"), str(run_dir),
                         extra_env=extra_env)


def _script(target: Target, opts: JobOptions, sched, run_dir: Path, steps: List[LaunchStep]):
    """The job request and its script text: srun labels each line with its task number
    (srun(1): ``SLURM_LABELIO``), so a hang can name the last line each rank printed; on GPU
    layouts NCCL says which network transport it picked (INFO level, one log per process)."""
    extra_env = [("PYTHONUNBUFFERED", "1")] + list(capabilities(sched).label_output)
    req = _request(target, opts, run_dir, steps, extra_env)
    if req.layout.gpus_per_rank and opts.sweep_max and not opts.preflight_only:
        extra_env += [("NCCL_DEBUG", "INFO"), ("NCCL_DEBUG_SUBSYS", "INIT,NET"),
                      ("NCCL_DEBUG_FILE", str(run_dir / "nccl" / "%h.%p.log"))]
    if opts.benchmark:
        steps = steps + _benchmark_steps(target, opts, run_dir, req.layout,
                                         vc.benchmark_framework(jd.frameworks_of(target)))
    req = _request(target, opts, run_dir, steps, extra_env)
    return req, render(req)


def plan_job(target: Target, opts: JobOptions, progress: Progress = lambda s: None) -> JobPlan:
    """Compose the job (nothing is written or submitted): the checks, the script, the steps.

    Raises:
        UsageError: a bad option combination, ``$ENVTOOL_JOB_POLL``, or a missing image (exit 2).
        SpecError: the site file lacks a value the layout needs (names the field).
    """
    from envtool import scheduler

    sched = scheduler.get(target.site.scheduler)
    poll_max = wt.job_poll_max()  # a bad ENVTOOL_JOB_POLL is refused before anything is written or submitted
    with_preflight = capabilities(sched).preflight and opts.image is None
    _refuse(target, opts, with_preflight)
    target, note = _step_launcher(target, sched)
    if note:
        progress(f"validate: {note}")
    image = _image(target, opts)
    run_dir = Path(opts.workdir).absolute() if opts.workdir else \
        Path.cwd() / time.strftime("envtool-validate-%Y%m%d-%H%M%S")
    choice = launch_choice(target, opts, sched, image)
    if choice is not None and choice.from_site:
        progress(f"validate: torch.distributed checks start with {choice.name}, {choice.origin} (--launch "
                 "launcher: each check through its own launch)")
    checks = tuple(select_checks(target, opts, sched, image, choice))
    steps = _launch_steps(target, opts, sched, run_dir, checks, with_preflight, image)
    req, text = _script(target, opts, sched, run_dir, steps)
    script = run_dir / "job.sh"
    submit = tuple(wt.pasteable_submit_argv(sched, script)) if capabilities(sched).submits else ("bash", str(script))
    bounded = sum(1 for st in req.steps if st.bounded)
    timeout, source = (opts.timeout, "--timeout") if opts.timeout is not None else \
        (float(default_timeout(opts, bounded)), f"derived: {JOB_OVERHEAD_SECONDS} s for the queue, pre-flight and "
                                                f"check-build + {bounded} step(s) x {step_seconds(opts)} s; "
                                                "--timeout overrides")
    plan = JobPlan(target=target, options=opts, sched=sched, run_dir=run_dir, script=script, text=text,
                   submit=submit, checks=checks, layout=req.layout, with_preflight=with_preflight,
                   launcher_note=note, image=image, poll_max=poll_max,
                   launch_note=None if choice is None else f"torch.distributed checks: launch {choice.name}, "
                                                            f"{choice.origin}",
                   timeout=timeout, timeout_source=source)
    return dataclasses.replace(plan, steps=tuple(_steps(plan)))


def _steps(plan: JobPlan) -> List[Step]:
    """The plan's typed steps; each carries the plan as its payload."""
    from envtool.steps.validate import job_actions as act

    steps = []
    if plan.with_preflight:
        steps.append(Step(id="preflight", title="Pre-flight on this host: the launcher's PMI against the MPI build",
                          commands=(("srun", "--mpi=list"),), action=act.preflight, data=plan))
    steps.append(Step(id="write-script", title=f"Write the job script {plan.script}",
                      commands=(("#", "write", str(plan.script)),),
                      notes=tuple(f"check {c.name}: {c.binding}, {c.backend}, {c.device}, launch {c.launch}"
                                  for c in plan.checks), action=act.write_script, data=plan))
    if capabilities(plan.sched).submits:
        steps += [Step(id="submit", title=f"Submit the job ({plan.sched.NAME})", commands=(plan.submit,),
                       action=act.submit, data=plan),
                  Step(id="watch", title="Watch the job until it ends (Ctrl-C cancels it)", action=act.watch,
                       data=plan)]
    else:
        steps.append(Step(id="run-script", title="Run the job script on this machine", commands=(plan.submit,),
                          action=act.run_script, data=plan))
    steps += [Step(id="collect", title="Collect what every rank wrote", action=act.collect, data=plan),
              Step(id="judge", title="Judge the results", action=act.judge, data=plan)]
    return steps


def format_plan(plan: JobPlan) -> str:
    """Human-readable plan: the steps, the checks, the job script and the submit command (shell-quoted)."""
    import shlex

    lines = [f"Plan for validate --submit on site {plan.target.site.name} ({plan.sched.NAME}) -> {plan.run_dir}",
             f"layout: {plan.layout.nodes} node(s), {plan.layout.ranks} ranks; checks: "
             + (", ".join(c.name for c in plan.checks) or "none")]
    if plan.launch_note:
        lines.append(plan.launch_note)
    lines.append(f"timeout: {plan.timeout:.0f} s ({plan.timeout_source}); on expiry the job is cancelled")
    lines.append(f"step bounds: {step_bounds(capabilities(plan.sched))['text']}")
    for i, step in enumerate(plan.steps, 1):
        lines.append(f"{i}. [{step.id}] {step.title}")
        lines += [f"   $ {line}" for line in step.shell_lines(with_env=False)]
        lines += [f"   note: {n}" for n in step.notes]
    lines += [f"job script {plan.script}:", plan.text.rstrip("\n"), f"submit: {shlex.join(plan.submit)}"]
    return "\n".join(lines)


def run_job(plan: JobPlan, runner) -> JobResult:
    """Run the plan's steps with ``runner`` (SIGTERM handled as Ctrl-C: the watch cancels the job).

    Returns:
        the :class:`JobResult` (also when the pre-flight on this host stopped the job: ``state``
        ``not submitted``).
    Raises:
        CheckFailed: the scheduler refused the job (its message).
        KeyboardInterrupt: Ctrl-C or SIGTERM; the job has been cancelled first.
        BaseException: any other failure after the submission is re-raised too, after the job
            was cancelled (:func:`cancel_unfinished`): no way out leaves a job running.
    """
    total = len(plan.steps)
    try:
        try:
            with wt.TermAsInterrupt():
                for i, step in enumerate(plan.steps, 1):
                    runner.run_step(step, i, total)
        except BaseException:
            try:
                cancel_unfinished(plan, runner)
            except KeyboardInterrupt:  # a signal came before the clean-up held them: once more, held
                cancel_unfinished(plan, runner)
            raise
    except CheckFailed as exc:
        if runner.current is None or runner.current.id != "preflight":
            raise
        runner.current = None
        return _not_submitted(plan, exc.step_result)
    return runner.results["judge"]


def cancel_unfinished(plan: JobPlan, runner) -> None:
    """The clean-up of every failure and interrupt after the submission: cancel the submitted job
    unless the watch saw it end or cancelled it already. Never raises (:func:`watch.cancel`)."""
    job_id = runner.results.get("submit")
    if job_id and runner.results.get("cancelled") != job_id and "watch" not in runner.results:
        wt.cancel(plan.sched, job_id, runner.progress)


def _not_submitted(plan: JobPlan, pmi_result) -> JobResult:
    """The result when the launcher's PMI does not match the MPI build: nothing was submitted."""
    pre = PreflightResult(ok=False, problems=list(pmi_result.problems), warnings=list(pmi_result.notes),
                          pmi=jd.pmi_dict(pmi_result))
    return JobResult(run_dir=plan.run_dir, scheduler=plan.sched.NAME, state="not submitted", preflight=pre,
                     layout={"nodes": plan.options.nodes, "ranks": None, "ranks_per_node": plan.options.ranks_per_node},
                     checks=[c.name for c in plan.checks],
                     problems=list(pmi_result.problems) + ["the job was not submitted: its launcher and MPI do not "
                                                           "match"])
