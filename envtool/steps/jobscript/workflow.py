"""``jobscript`` as a plan of typed steps run by the one :class:`~envtool.steps.kernel.runner.Runner`:

1. ``resolve`` — the site, spec, modules and launcher of the environment (``--prefix``/``--module``),
   of the pack's node-local copy (``--stage``: its manifest and lockfile are read) or of the image
   (``--image``: the site's container runtime);
2. ``render`` — the script: directives for the layout, module loads, activation, variables, the
   launcher's line (:func:`envtool.steps.jobscript.request.render`);
3. ``write`` — with ``--output``: the file, written beside its place and renamed over it
   (``--dry-run`` prints this plan, and what the file would replace, and writes nothing).

The steps run no program, so the runner keeps no build log for them (``keep_log=False``); staging
itself is lines of the script, run on the compute nodes when the job starts (docs/staging.md).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from envtool.core.errors import UsageError
from envtool.core.plan import Step, StepContext


@dataclass(frozen=True)
class JobscriptRequest:
    """What one ``jobscript`` asks for (its arguments, read once by the CLI).

    Attributes:
        command: what every rank runs (argv words, at least one).
        prefix, module: the environment (a directory or a module NAME/VERSION), or None.
        spec, site, site_file: the spec and site given, or None (the environment's and the spec's).
        stage: a pack file (``envtool pack``) to stage to each node's local storage, or None.
        retired_ok, platform_mismatch_ok: the overrides of ``jobscript --help``.
        image: an image the ranks run in (the site's container runtime), or None.
        bind: with ``image``, host directories bound into it (``SRC[:DST]``).
        nodes: nodes of the job (>= 1).
        ranks_per_node, gpus_per_rank: the layout, or None (the site's defaults).
        time, account, queue, job_name, job_output: the job's directives, or None.
        workdir: the absolute directory the job changes to first, or None.
        output: the absolute file to write, or None (the script goes to stdout).
        launch: ``torchrun`` or ``srun`` (:mod:`envtool.scheduler.ddp`): start ``command`` as a
            PyTorch DDP script; ``launcher``: with the site's launcher line; None: the site file's
            ``launch.default``, else the site's launcher.
    """

    command: Tuple[str, ...]
    prefix: Optional[str] = None
    module: Optional[str] = None
    spec: Optional[str] = None
    site: Optional[str] = None
    site_file: Optional[str] = None
    stage: Optional[str] = None
    retired_ok: bool = False
    platform_mismatch_ok: bool = False
    image: Optional[str] = None
    bind: Tuple[str, ...] = ()
    nodes: int = 1
    ranks_per_node: Optional[int] = None
    gpus_per_rank: Optional[int] = None
    time: Optional[str] = None
    account: Optional[str] = None
    queue: Optional[str] = None
    job_name: Optional[str] = None
    job_output: Optional[str] = None
    workdir: Optional[str] = None
    output: Optional[Path] = None
    launch: Optional[str] = None


@dataclass(frozen=True)
class Resolved:
    """``resolve``'s result: the :class:`~envtool.steps.jobscript.target.Target`, the launch step
    (``envtool.scheduler.model.LaunchStep``) and the site's container section (``--image``) or None."""

    target: Any
    step: Any
    section: Any


@dataclass(frozen=True)
class Rendered:
    """``render``'s result: the scheduler request (``envtool.scheduler.model.JobRequest``), the
    script's text, the warnings to print (a GPU layout the site's nodes do not have) and the
    launch (:class:`envtool.scheduler.ddp.LaunchChoice`, None with ``--image``)."""

    request: Any
    text: str
    warnings: Tuple[str, ...]
    launch: Any = None


@dataclass(frozen=True)
class JobscriptResult:
    """What one ``jobscript`` made.

    Attributes:
        target: the resolved target (site, spec, launcher, staging).
        section: the site's container section with ``--image``, else None.
        request: the scheduler request (layout, directives).
        text: the script.
        warnings: lines printed as ``warning:``.
        path: the file written (``--output``), or None.
        launch: how the ranks start and why (:class:`envtool.scheduler.ddp.LaunchChoice`), or None
            with ``--image``.
    """

    target: Any
    section: Any
    request: Any
    text: str
    warnings: Tuple[str, ...]
    path: Optional[Path]
    launch: Any = None


@dataclass(frozen=True)
class JobscriptPlan:
    """The steps of one ``jobscript`` (:func:`compose`)."""

    request: JobscriptRequest
    steps: Tuple[Step, ...]

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready form (``jobscript --dry-run --json``'s ``plan``)."""
        return {"output": str(self.request.output) if self.request.output else None,
                "stage": self.request.stage, "image": self.request.image,
                "steps": [s.to_dict() for s in self.steps]}

    def format(self) -> str:
        """The plan for people: where the script goes, then the numbered steps."""
        from envtool.core.plan import format_steps

        where = str(self.request.output) if self.request.output else "stdout"
        return "\n".join([f"Plan for jobscript -> {where}"] + format_steps(self.steps))


def compose(req: JobscriptRequest) -> JobscriptPlan:
    """The plan of ``req`` (checks the combination of arguments; reads nothing).

    Raises:
        UsageError: ``--stage`` with ``--module``; ``--image`` with an environment; ``--bind``
            without ``--image`` (exit 2).
    """
    if req.image is None and req.bind:
        raise UsageError("--bind goes with --image (directories bound into the image)")
    if req.image is not None and (req.prefix or req.module or req.stage):
        raise UsageError("--image runs the environment the image carries: give no --prefix, --module or --stage")
    _check_stage(req.stage, req.module)
    if req.image is not None:
        what = f"the image {req.image} through the site's container runtime"
        reads: Tuple[str, ...] = ("#", "read the site file's container section")
    elif req.stage:
        what = f"the node-local copy of the pack {req.stage}"
        reads = ("#", f"read the manifest and lockfile of {req.stage}")
    else:
        what = "the environment " + (req.prefix or req.module or "(the spec's)")
        reads = ("#", "read the environment's record, spec and site file")
    steps: List[Step] = [
        Step("resolve", f"Resolve the site, spec and launcher of {what}", commands=(reads,), action=_resolve,
             data=req),
        Step("render", f"Write the script for {req.nodes} node(s): directives, modules, variables, launcher line",
             notes=(_launch_note(req),), action=_render, data=req)]
    if req.output is not None:
        steps.append(Step("write", f"Write the script to {req.output}",
                          commands=(("#", "write", str(req.output.parent / f".{req.output.name}.tmp-PID")),
                                    ("#", "mv", str(req.output.parent / f".{req.output.name}.tmp-PID"),
                                     str(req.output))),
                          notes=("an existing file there is replaced",), action=_write, data=req))
    return JobscriptPlan(req, tuple(steps))


def _launch_note(req: JobscriptRequest) -> str:
    """The render step's note on the launch (the plan reads no site file, so without ``--launch``
    it names the rule; the script's header says what the rule chose and its source)."""
    if req.image is not None:
        return "launch: the site's container runtime on every rank (--image)"
    if req.launch:
        return f"launch: {req.launch} (--launch {req.launch})"
    return ("launch: the site file's launch.default (torchrun, srun or launcher, with its source), else the "
            "site's launcher; the script's header names the choice and its source")


def _resolve(step: Step, ctx: StepContext) -> Resolved:
    from envtool.scheduler.model import LaunchStep

    req: JobscriptRequest = step.data
    if req.image is not None:
        from envtool.steps.jobscript import container_run

        target, section = container_run.resolve_image_target(req.spec, req.site, req.site_file,
                                                             retired_ok=req.retired_ok)
        return Resolved(target, container_run.image_step(target, section, req.image, list(req.command),
                                                         list(req.bind)), section)
    target = resolve_environment(req.prefix, req.module, req.spec, req.site, req.site_file, req.stage,
                                 retired_ok=req.retired_ok, platform_mismatch_ok=req.platform_mismatch_ok)
    return Resolved(target, LaunchStep(tuple(req.command)), None)


def _check_stage(stage: Optional[str], module: Optional[str]) -> None:
    """Refuse ``--stage`` with ``--module`` (exit 2): a staged job runs the pack, not a module."""
    if stage and module:
        raise UsageError("--stage FILE runs the packed environment: give --prefix (its source) or nothing, "
                         "not --module")


def resolve_environment(prefix: Optional[str], module: Optional[str], spec: Optional[str], site: Optional[str],
                        site_file: Optional[str], stage: Optional[str] = None, retired_ok: bool = False,
                        platform_mismatch_ok: bool = False) -> Any:
    """The job's :class:`~envtool.steps.jobscript.target.Target`: the environment given, or with
    ``stage`` the pack's node-local copy (``jobscript`` and ``validate --submit`` both ask this).

    Raises:
        UsageError, SpecError: ``stage`` with ``module``; a bad environment, spec, site or pack (exit 2).
    """
    from envtool.steps.jobscript.staged import resolve_staged
    from envtool.steps.jobscript.target import resolve_target

    _check_stage(stage, module)
    if stage:
        return resolve_staged(stage, prefix, spec, site, site_file, retired_ok=retired_ok,
                              platform_mismatch_ok=platform_mismatch_ok)
    return resolve_target(prefix, module, spec, site, site_file, retired_ok=retired_ok,
                          platform_mismatch_ok=platform_mismatch_ok)


def _render(step: Step, ctx: StepContext) -> Rendered:
    import dataclasses

    from envtool import scheduler
    from envtool.scheduler import ddp
    from envtool.scheduler.model import capabilities
    from envtool.steps.jobscript.request import build_request, gpu_mismatch, render

    req: JobscriptRequest = step.data
    r: Resolved = ctx.results["resolve"]
    choice = None
    launch_step = r.step
    if r.section is None:
        choice = ddp.choose(r.target.site, req.launch, capabilities(scheduler.get(r.target.site.scheduler)),
                            getattr(getattr(r.target, "launcher", None), "program", None))
        if choice.ddp:
            launch_step = ddp_step(r.target, req, choice.name)
    job = build_request(r.target, req.nodes, [launch_step], req.ranks_per_node, req.gpus_per_rank, req.time,
                        req.account, req.queue, req.job_name, req.job_output, req.workdir)
    if choice is not None and (choice.ddp or choice.from_site or req.launch):
        more = "; --launch sets another" if choice.from_site else ""
        job = dataclasses.replace(job, comments=job.comments + (f"launch: {choice.name}, {choice.origin}{more}",))
    if r.section is not None:
        from envtool.steps.jobscript import container_run

        job = dataclasses.replace(job, comments=job.comments + (container_run.comment(r.target.site, r.section,
                                                                                      str(req.image)),))
    warnings = tuple(w for w in (gpu_mismatch(r.target, job),) if w) if req.image is None else ()
    return Rendered(job, render(job), warnings, choice)


def ddp_step(target: Any, req: JobscriptRequest, launch: Optional[str] = None) -> Any:
    """The launch step of ``req.command`` as a DDP script (a registered
    :class:`~envtool.scheduler.ddp.DdpLaunch`: ``torchrun``, ``srun``, ``mpiexec``; ``launch``
    defaults to ``req.launch``): torchrun on each node with the CPUs and GPUs of its ranks (and no
    PMI where the scheduler's step launcher takes a plug-in per step, ``srun --mpi=none``), or one
    task per rank, started by the site's launcher, with torch.distributed's variables and the
    site's PMI set-up (an MPI or Horovod program started this way still finds its peers). All name
    the first node as the site file's ``launch.rendezvous_host`` says; the per-rank launches export
    ``launch.gpu_order`` on whole nodes.

    Raises:
        UsageError: the site's scheduler does not declare its tasks' variables, or its launcher is
            not the one the launch needs (exit 2).
    """
    import os
    import re

    from envtool import scheduler
    from envtool.scheduler import ddp
    from envtool.scheduler.model import LaunchStep, Layout, capabilities
    from envtool.scheduler.script import make_layout

    launch = launch or req.launch
    assert launch is not None
    caps = capabilities(scheduler.get(target.site.scheduler))
    how = ddp.get(launch)
    program = getattr(getattr(target, "launcher", None), "program", None)
    unmet = how.unmet(caps, program)
    if unmet:
        raise UsageError(f"--launch {launch} needs {unmet}; site {target.site.name} (scheduler "
                         f"{target.site.scheduler or 'none'}, launcher {program}) has not: use --launch "
                         + " or --launch ".join(n for n in ddp.CHOICES if n == ddp.LAUNCHER or
                                                not ddp.get(n).unmet(caps, program)))
    command = list(req.command)
    lay = make_layout(target.site, req.nodes, req.ranks_per_node, req.gpus_per_rank)
    if how.per_rank:
        return LaunchStep(tuple(ddp.per_rank_argv(caps, command, target.site, ddp.gpu_order(target.site, lay),
                                                  launch)))
    python = str(getattr(target, "python", None) or "python3")
    if re.fullmatch(r"python[0-9.]*", os.path.basename(command[0])):
        command = command[1:]  # torchrun runs the script with the interpreter that runs it
    else:
        command = ["--no-python", *command]  # a program, not a script (torchrun --no-python)
    per_node = Layout(nodes=lay.nodes, ranks_per_node=1, gpus_per_rank=lay.gpus_per_rank * lay.ranks_per_node,
                      cpus_per_rank=lay.cpus_per_rank * lay.ranks_per_node)
    return LaunchStep(tuple(ddp.torchrun_argv(caps, python, lay.ranks_per_node, command, target.site)),
                      layout=per_node, mpi="none" if caps.step_launcher else None)


def _write(step: Step, ctx: StepContext) -> Path:
    """Write the script beside ``--output``, then rename it there (executable as the umask allows).

    Raises:
        UsageError: it cannot be written (exit 2), naming the file and why.
    """
    from envtool.core.atomic import umask_mode

    req: JobscriptRequest = step.data
    out = req.output
    assert out is not None
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(ctx.results["render"].text)
        tmp.chmod(umask_mode(0o777))  # executable, as readable as a new file under the umask
        os.replace(tmp, out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UsageError(f"--output {out}: cannot write ({exc.strerror})") from None
    return out


def run(plan: JobscriptPlan, verbose: bool = False) -> JobscriptResult:
    """Run ``plan`` with the one runner (no progress lines: the steps take well under 2 s; ``verbose``
    shows them).

    Returns:
        the :class:`JobscriptResult`.
    Raises:
        UsageError, SpecError: bad arguments, site, spec, environment or pack (exit 2).
    """
    from envtool.steps.kernel.runner import Runner

    runner = Runner(log_path=Path(os.devnull), verbose=verbose, quiet=not verbose, keep_log=False)
    with runner:
        runner.run_steps(plan.steps)
    res = runner.results
    r: Resolved = res["resolve"]
    rendered: Rendered = res["render"]
    return JobscriptResult(r.target, r.section, rendered.request, rendered.text, rendered.warnings,
                           res.get("write"), rendered.launch)
