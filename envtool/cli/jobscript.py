"""``envtool jobscript``: write a batch script for the site's scheduler (Slurm, LSF, PBS Pro,
Cobalt/ALPS, or plain bash on ``local``) that runs COMMAND in an environment at scale."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from envtool.cli.common import add_dry_run, add_json, path_arg, print_json


def add_target(p) -> None:
    """``--prefix``/``--module``, ``--spec``, ``--site``, ``--site-file`` (shared with ``validate``)."""
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prefix", help="the environment (a directory made by envtool create/clone)")
    src.add_argument("--module", metavar="NAME/VERSION", help="the environment's module (loaded in the job)")
    p.add_argument("--spec", help="the spec (default: the one the environment was created from)")
    p.add_argument("--site", help="site whose scheduler and layout apply (default: the spec's, else local)")
    p.add_argument("--site-file", type=path_arg, help="a site file (wins over --site)")
    p.add_argument("--stage", type=path_arg, metavar="FILE",
                   help="stage this pack (envtool pack) to each node's local storage (the site file's node_local) "
                        "at job start and run from there; removed at the end (docs/staging.md)")
    p.add_argument("--retired-ok", action="store_true",
                   help="allow a retired site (its file says 'retired'; without this flag that is exit 2)")
    p.add_argument("--platform-mismatch-ok", action="store_true",
                   help="allow an environment whose spec is for another platform than the site's nodes "
                        "(without this flag that is exit 2)")


def add_layout(p, nodes_required: bool) -> None:
    """``--nodes``, ``--ranks-per-node``, ``--gpus-per-rank``, ``--time``, ``--account``, ``--queue``."""
    p.add_argument("--nodes", type=int, required=nodes_required, default=None if nodes_required else 1,
                   help="nodes of the job")
    p.add_argument("--ranks-per-node", type=int, help="ranks per node (default: one per GPU)")
    p.add_argument("--gpus-per-rank", type=int, help="GPUs per rank (default: 1 on a GPU site, else 0)")
    p.add_argument("--time", metavar="HH:MM:SS", help="wall-clock limit")
    p.add_argument("--account", help="project/account to charge")
    p.add_argument("--queue", help="queue, partition or QOS (default: the site file's batch.queue)")


def resolve(args):
    """The job's :class:`~envtool.steps.jobscript.Target` for ``args`` (``validate``'s too):
    :func:`envtool.steps.jobscript.workflow.resolve_environment`."""
    from envtool.steps.jobscript.workflow import resolve_environment

    return resolve_environment(args.prefix, args.module, args.spec, args.site, args.site_file,
                               getattr(args, "stage", None), retired_ok=getattr(args, "retired_ok", False),
                               platform_mismatch_ok=getattr(args, "platform_mismatch_ok", False))


def stage_summary(target):
    """``{"file", "format", "kind", "prefix", "lock_sha256", "node_local"}`` of a staged target, or None."""
    st = target.stage
    if st is None:
        return None
    return {"file": st.file, "format": st.format, "kind": st.kind, "prefix": st.prefix, "copy": st.copy,
            "lock_sha256": st.lock_sha256, "node_local": st.node_local, "source": st.source}


def register(sub) -> None:
    p = sub.add_parser("jobscript", help="write a batch script for the site's scheduler (Slurm, LSF, PBS, Cobalt)",
                       description="Write a batch script that runs COMMAND on every rank of a job: the site's "
                                   "directives, module loads, the environment's activation, runtime variables and "
                                   "the site's launcher line. Every value is quoted for the shell. Exit 2 when the "
                                   "site file lacks a value a flag needs (the message names the field).")
    add_target(p)
    add_layout(p, nodes_required=True)
    from envtool.spec.registry import ddp_launch_names

    p.add_argument("--launch", choices=ddp_launch_names() + ("launcher",),
                   help="start COMMAND as a PyTorch DDP script: torchrun on each node (c10d rendezvous on the "
                        "first node), or one task per rank with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and "
                        "MASTER_PORT exported (env://): srun on Slurm sites, Cray PALS mpiexec on PBS sites; "
                        "launcher: the site's launcher line (MPI and Horovod programs); default: the site file's "
                        "launch.default, else launcher")
    p.add_argument("--job-name", help="the job's name")
    p.add_argument("--job-output", metavar="FILE", help="file the job's stdout and stderr go to")
    p.add_argument("--workdir", metavar="DIR", help="directory the job changes to first")
    p.add_argument("--output", "-o", metavar="FILE", help="write the script here (default: stdout)")
    p.add_argument("--image", metavar="IMAGE",
                   help="run the ranks in this image through the site's container runtime (the site file's "
                        "container section: Shifter, podman-hpc, Apptainer or Charliecloud); no --prefix/--module: "
                        "the image carries the environment (docs/reference/container-runtimes.md)")
    p.add_argument("--bind", action="append", default=[], metavar="SRC[:DST]",
                   help="with --image: also bind this host directory into the image (repeatable)")
    add_dry_run(p, "written or replaced (--output)")
    add_json(p)
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND ...",
                   help="what every rank runs (after --)")
    p.set_defaults(func=run)


def _command(args) -> list:
    """The words after ``--``.

    Raises:
        UsageError: none given (exit 2).
    """
    from envtool.core.errors import UsageError

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("no command: end the options with -- COMMAND ...")
    if getattr(args, "launch", None) and getattr(args, "image", None):
        raise UsageError(f"--launch {args.launch} starts the command on the host's environment; --image runs it "
                         "through the site's container runtime: give one of them")
    return command


def _json(args, target, req, section, text: str, warnings, launch=None) -> dict:
    """``jobscript --json``: the site, scheduler, launcher, launch (its name and where it came
    from), layout, file, staging, image and script."""
    from pathlib import Path

    lay = req.layout
    return {"site": target.site.name, "site_file": target.site.path,
            "scheduler": target.site.scheduler or "none", "launcher": target.launcher.program,
            "launch": None if launch is None else {"name": launch.name, "from": launch.origin,
                                                   "site_default": launch.from_site},
            "spec": target.spec.name if target.spec is not None else None,
            "layout": {"nodes": lay.nodes, "ranks_per_node": lay.ranks_per_node, "ranks": lay.ranks,
                       "gpus_per_rank": lay.gpus_per_rank, "cpus_per_rank": lay.cpus_per_rank},
            "path": str(Path(args.output).absolute()) if args.output else None,
            "stage": stage_summary(target),
            "image": None if args.image is None else {"image": args.image, "runtime": section.runtime,
                                                      "run_line": text.rstrip("\n").splitlines()[-1]},
            "warnings": warnings, "script": text}


def request_of(args):
    """The :class:`~envtool.steps.jobscript.workflow.JobscriptRequest` of the parsed arguments.

    Raises:
        UsageError: no command after ``--`` (exit 2).
    """
    from pathlib import Path

    from envtool.steps.jobscript.workflow import JobscriptRequest

    return JobscriptRequest(
        command=tuple(_command(args)), prefix=args.prefix, module=args.module, spec=args.spec, site=args.site,
        site_file=args.site_file, stage=args.stage, retired_ok=args.retired_ok,
        platform_mismatch_ok=args.platform_mismatch_ok, image=args.image, bind=tuple(args.bind), nodes=args.nodes,
        ranks_per_node=args.ranks_per_node, gpus_per_rank=args.gpus_per_rank, time=args.time, account=args.account,
        queue=args.queue, job_name=args.job_name, job_output=args.job_output,
        workdir=str(Path(args.workdir).absolute()) if args.workdir else None,
        output=Path(args.output).absolute() if args.output else None, launch=args.launch)


def run(args) -> int:
    from envtool.cli.common import check_generated_inputs
    from envtool.steps.jobscript import workflow

    check_generated_inputs(args)
    plan = workflow.compose(request_of(args))
    if args.dry_run:
        return _dry_run(args, plan)
    res = workflow.run(plan, verbose=getattr(args, "verbose", False))
    for warning in res.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if args.json:
        print_json(_json(args, res.target, res.request, res.section, res.text, list(res.warnings), res.launch))
    elif args.output:
        if not getattr(args, "quiet", False):
            print(f"jobscript: wrote {args.output} ({res.target.site.scheduler or 'no scheduler'}, "
                  f"{res.request.layout.nodes} x {res.request.layout.ranks_per_node} ranks)", file=sys.stderr)
    else:
        sys.stdout.write(res.text)
    return 0


def _dry_run(args, plan) -> int:
    """``jobscript --dry-run``: the plan, and the file ``--output`` would replace; writes nothing."""
    import os

    out = plan.request.output
    replaces = str(out) if out is not None and os.path.lexists(out) else None
    if args.json:
        print_json({"dry_run": True, "path": str(out) if out is not None else None, "replaces": replaces,
                    "plan": plan.to_dict()})
        return 0
    print(plan.format())
    if replaces:
        print(f"would replace: {replaces}")
    return 0
