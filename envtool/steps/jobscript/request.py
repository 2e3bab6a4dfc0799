"""The job request and script for a target (:mod:`envtool.steps.jobscript`)."""
from __future__ import annotations

import shlex
from typing import Dict, List, Optional, Sequence, Tuple

from envtool.scheduler.model import INTERFACE_VARIABLES, JobRequest, LaunchStep, parse_time
from envtool.scheduler.script import activation_lines, make_layout
from envtool.steps.jobscript.target import Target


def _fabric(target: Target, nodes: int, env: Dict[str, str], notes: Dict[str, str]) -> List[str]:
    """Add the site's ``fabric`` variables that apply to ``nodes`` nodes and the target's modules to
    ``env`` (with a note naming their source), and return the script comments for those the
    site's module already sets (shown, not exported again)."""
    site = target.site
    fabric = getattr(site, "fabric", ())
    if not fabric:
        return []
    from envtool.spec.sites.fabric import applying

    comments: List[str] = []
    for v in applying(fabric, nodes, target.modules):
        if v.module_sets:
            comments.append(f"{v.name}={shlex.quote(v.value)} is set by the site's module (fabric in {site.path}, "
                            f"source {v.source}, mark {v.mark}): not exported again")
            continue
        env.pop(v.name, None)
        env[v.name] = v.value
        notes[v.name] = f"fabric, {v.when_text()} (source {v.source}, mark {v.mark})"
    return comments


def build_request(target: Target, nodes: int, steps: Sequence[LaunchStep], ranks_per_node: Optional[int] = None,
                  gpus_per_rank: Optional[int] = None, time: Optional[str] = None, account: Optional[str] = None,
                  queue: Optional[str] = None, job_name: Optional[str] = None, output: Optional[str] = None,
                  workdir: Optional[str] = None, extra_env: Sequence[Tuple[str, str]] = ()) -> JobRequest:
    """The :class:`JobRequest` for ``target`` (see the module docstring for what goes in).

    Raises:
        UsageError: a bad ``--time`` or count.
        SpecError: the site file lacks what the layout needs (names the field), among it
            ``batch.cpus_per_node`` (the CPUs per rank must be known).
    """
    site = target.site
    layout = make_layout(site, nodes, ranks_per_node, gpus_per_rank)
    if not layout.cpus_per_rank:
        from envtool.scheduler.model import missing

        raise missing(site, "batch.cpus_per_node", "the CPUs a job may use on one node (an integer; 'auto' for "
                      "this machine's)", "the job script's CPUs per rank and OMP_NUM_THREADS come from it (a "
                      "script with an unknown CPU count would leave the binding to chance)")
    env: Dict[str, str] = {}
    notes: Dict[str, str] = {}
    if layout.cpus_per_rank:
        env["OMP_NUM_THREADS"] = str(layout.cpus_per_rank)
    iface = getattr(site.batch, "interface", None)
    if iface:
        for k in INTERFACE_VARIABLES:
            env[k] = iface
            notes[k] = f"batch.interface in {site.path}"
    comments = _fabric(target, layout.nodes, env, notes)
    for k, v in list(target.env) + list(extra_env):
        env.pop(k, None)
        env[k] = v
        notes.pop(k, None)   # the site's or spec's own env wins, without the interface's note
    if target.spec is not None and target.spec.expect.dataloader_start_method:
        comments.append(f"spec {target.spec.name} expects DataLoader(multiprocessing_context="
                        f"{target.spec.expect.dataloader_start_method!r}); ENVTOOL_START_METHOD names it")
    seconds = parse_time(time) if time else None
    if seconds is None and site.batch.time and site.scheduler:
        seconds = parse_time(site.batch.time)
        comments.append(f"wall-clock limit {site.batch.time}: the site's default (batch.time in {site.path}); "
                        "--time sets another")
    return JobRequest(site=site, layout=layout, steps=tuple(steps), seconds=seconds,
                      account=account, queue=queue, job_name=job_name, output=output,
                      modules=target.modules,
                      activation=activation_lines(target.prefix, target.kind) if target.prefix else (),
                      env=tuple(env.items()), env_paths=target.env_paths, workdir=workdir,
                      launcher=target.launcher,
                      comments=tuple(comments), env_notes=tuple(notes.items()), stage=target.stage,
                      extra_directives=tuple(site.node_local.directives)
                      if target.stage is not None and site.node_local is not None else ())


def gpu_mismatch(target: Target, req: JobRequest) -> Optional[str]:
    """A warning when a CPU-only environment runs in a job that asks for GPUs or loads GPU modules
    (issue 38: a CPU venv wrapped in ``module load cudnn nccl`` and a 4-GPU request for
    ``--spec perlmutter-horovod``), else None.

    Not an error: the script runs (the ranks compute on the nodes' CPUs), as a CPU smoke test on a
    GPU partition may mean to; it costs GPU allocation the ranks never use.

    Args:
        target: the job's :class:`Target` (its ``cpu_only`` evidence).
        req: the :class:`JobRequest` (its layout's GPUs and the modules it loads).
    Returns:
        one line naming the environment and its evidence, the GPUs asked, the GPU modules and where
        they come from, and what to do; or None.
    """
    from envtool.checks.gpu import gpu_modules

    if not target.cpu_only:
        return None
    lay = req.layout
    gpus = lay.ranks_per_node * lay.gpus_per_rank
    mods = gpu_modules(req.modules)
    if not gpus and not mods:
        return None
    asks, cpu_job = [], []
    if gpus:
        asks.append(f"requests {gpus} GPU{'s' if gpus > 1 else ''} per node ({lay.ranks_per_node} "
                    f"rank{'s' if lay.ranks_per_node > 1 else ''} x {lay.gpus_per_rank} GPU"
                    f"{'s' if lay.gpus_per_rank > 1 else ''})")
        cpu_job.append("--gpus-per-rank 0")
    if mods:
        spec = target.spec
        from_spec = spec is not None and set(mods) <= set(spec.site.modules)
        whose = f"spec {spec.name}'s site modules" if spec is not None and from_spec else f"site {target.site.name}'s modules"
        asks.append(f"loads {' '.join(mods)} ({whose})")
        cpu_job.append("the --spec of a CPU stack" if from_spec else "a --site-file without them")
    where = str(target.prefix) if target.stage is None else f"{target.stage.file} (staged to {target.prefix})"
    return (f"the environment at {where} is CPU-only ({target.cpu_only}) but the job script "
            f"{' and '.join(asks)}: the ranks will not use the GPUs; use an environment made from a GPU spec, "
            f"or for a CPU job give {' and '.join(cpu_job)}")


def render(req: JobRequest) -> str:
    """The script text (see :func:`envtool.scheduler.script.render`)."""
    from envtool import __version__
    from envtool.scheduler.script import render as _render

    return _render(req, version=__version__)
