"""``envtool validate``: the checks ``create`` runs (check-build against the spec, N-rank allreduce
on every controller the build has, DataLoader start method), on this machine or with ``--submit``
as a batch job through the site's scheduler; ``--benchmark`` adds the scaling numbers."""
from __future__ import annotations

import sys

from envtool.cli.common import add_json, path_arg, print_json, seconds_arg
from envtool.cli.jobscript import add_layout, add_target, resolve, stage_summary


def register(sub) -> None:
    p = sub.add_parser("validate", help="validate an environment here or as a batch job (--submit); --benchmark",
                       description="Run the checks create runs on an environment: horovodrun --check-build "
                                   "against the spec, an allreduce on every rank for each controller, a DataLoader "
                                   "under the spec's start method. With --submit, as a batch job through the "
                                   "site's scheduler (results per rank; Ctrl-C cancels the job). Exit 0 when all "
                                   "passed, 1 when a check failed (naming rank and host), 2 on bad input.")
    add_target(p)
    p.add_argument("--submit", action="store_true", help="run as a batch job through the site's scheduler")
    p.add_argument("--preflight", action="store_true",
                   help="with --submit: run only the pre-flight (one task per node: the prefix and its lock on "
                        "every node, hostnames distinct and not resolving to loopback, the interface on every "
                        "node and reaching the others, /dev/shm, one libnccl on GPU nodes; srun's PMI against "
                        "the MPI build)")
    add_layout(p, nodes_required=False)
    p.add_argument("--sweep-max", default="64MiB", metavar="SIZE",
                   help="with --submit: largest allreduce of the sweep, a power of two from 8B to 64MiB, or 0 for "
                        "no sweep (64MiB)")
    p.add_argument("--ranks", type=int, default=2, help="ranks on this machine without --submit (2)")
    p.add_argument("--import-time", action="store_true",
                   help="here: every rank also counts the file system metadata calls (stat, open, ...) of importing "
                        "torch and horovod.torch under the prefix, with strace (each rank's import time is always "
                        "recorded; --submit always counts both)")
    p.add_argument("--slow-import", type=seconds_arg, metavar="SECONDS",
                   help="p99 import time above which an import from a shared file system is reported with the "
                        "staging fix (default 10; OLCF: import torch at 64 ranks takes 2 s from node-local NVMe, "
                        "51 s from Lustre)")
    p.add_argument("--benchmark", action="store_true",
                   help="synthetic data-parallel training step at 1 rank and all ranks: samples/s, efficiency")
    p.add_argument("--steps", type=int, default=20, help="timed benchmark steps per point (20)")
    p.add_argument("--batch-size", type=int, default=32, help="benchmark samples per step and rank (32)")
    p.add_argument("--plot", metavar="FILE.png", help="draw the benchmark's samples/s and efficiency (matplotlib)")
    p.add_argument("--workdir", metavar="DIR",
                   help="run directory of a --submit job, seen by the compute nodes (default ./envtool-validate-TIME)")
    p.add_argument("--timeout", type=seconds_arg, help="seconds to wait for the job before cancelling it (default: derived from the plan, "
                        "shown by --dry-run: the queue, pre-flight and check-build, then each check's step "
                        "bounded by its import, rendezvous and sweep)")
    p.add_argument("--export", choices=("reframe",),
                   help="write the validation as a ReFrame regression test and the site's ReFrame settings "
                        "instead of running it (docs/validating-across-nodes.md)")
    p.add_argument("--output", "-o", type=path_arg, metavar="FILE.py",
                   help="with --export: the test file (default ./envtool_validate_rfm.py)")
    p.add_argument("--settings", type=path_arg, metavar="FILE.py",
                   help="with --export: the ReFrame settings file (default: beside the test, NAME_settings.py)")
    p.add_argument("--reframe-scheduler", choices=("slurm", "squeue"),
                   help="with --export: ReFrame's Slurm scheduler: slurm (polls with sacct; default) or squeue "
                        "(for a Slurm without accounting)")
    p.add_argument("--image", metavar="IMAGE",
                   help="with --submit: run check-build and every rank of the allreduce inside this image (made "
                        "by envtool image) through the site file's container runtime; no --prefix/--module")
    p.add_argument("--bind", action="append", default=[], metavar="SRC[:DST]",
                   help="with --image: also bind this host directory into the image (repeatable)")
    p.add_argument("--launch", choices=("torchrun", "srun", "launcher"),
                   help="with --submit: run the torch.distributed checks alone, started as PyTorch users start DDP: "
                        "torchrun on each node (c10d rendezvous on the first node) or one srun task per rank with "
                        "RANK, WORLD_SIZE and MASTER_ADDR exported (env://); Slurm sites; launcher: every check "
                        "through its own launch; default: the site file's launch.default for the torch.distributed "
                        "checks beside the others, else launcher")
    p.add_argument("--dry-run", action="store_true",
                   help="with --submit: print the plan (its steps, the validation checks, the job script and the "
                        "submit command); write and submit nothing")
    add_json(p)
    p.set_defaults(func=run)


def _sweep_max(args):
    """``--sweep-max`` in bytes, or None when it is not a sweep size (or 0)."""
    from envtool.spec.sites import REFERENCE_SIZES, parse_size

    value = parse_size(args.sweep_max)
    return value if value is not None and (value == 0 or value in REFERENCE_SIZES) else None


def _missing(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is None


def _no_strace() -> bool:
    import shutil

    return shutil.which("strace") is None


def _export_only(args) -> str:
    return next(opt for opt, v in (("-o/--output", args.output), ("--settings", args.settings),
                                   ("--reframe-scheduler", args.reframe_scheduler)) if v)


#: The option combinations ``validate`` refuses (exit 2), checked in order: (broken?, message).
RULES = (
    (lambda a: bool(a.output or a.settings or a.reframe_scheduler),
     lambda a: f"{_export_only(a)} goes with --export reframe"),
    (lambda a: a.preflight and not a.submit, lambda a: "--preflight runs the pre-flight of a batch job: add --submit"),
    (lambda a: a.plot and not a.benchmark, lambda a: "--plot draws the benchmark: add --benchmark"),
    (lambda a: a.plot and not a.plot.lower().endswith(".png"), lambda a: f"--plot {a.plot}: expected a .png file name"),
    (lambda a: _sweep_max(a) is None,
     lambda a: f"--sweep-max {a.sweep_max}: expected a power of two from 8B to 64MiB (8B, 1KiB, 64MiB), or 0 for no "
               f"sweep"),
    (lambda a: a.ranks < 1 or a.steps < 1 or a.batch_size < 1,
     lambda a: "--ranks, --steps and --batch-size must be 1 or more"),
    (lambda a: a.plot and _missing("matplotlib"), lambda a: "--plot needs matplotlib (pip install matplotlib)"),
    (lambda a: a.import_time and a.submit,
     lambda a: "--import-time: a --submit validation always measures import time and metadata calls; drop "
               "--import-time"),
    (lambda a: a.import_time and a.preflight,
     lambda a: "--import-time measures the ranks' imports; --preflight runs none"),
    (lambda a: a.import_time and _no_strace(),
     lambda a: "--import-time counts metadata calls with strace, which is not on PATH (Debian/Ubuntu: apt-get "
               "install strace)"),
    (lambda a: a.stage and not a.submit,
     lambda a: "--stage stages the environment in a batch job: add --submit"),
    (lambda a: a.launch is not None and not a.submit,
     lambda a: f"--launch {a.launch} starts the ranks of a batch job: add --submit"),
    (lambda a: a.image is not None and not a.submit,
     lambda a: "--image runs the ranks in the image through the site's scheduler: add --submit"),
    (lambda a: a.image is not None and bool(a.prefix or a.module or a.stage),
     lambda a: "--image validates the environment the image carries: give no --prefix, --module or --stage"),
    (lambda a: a.image is None and bool(a.bind), lambda a: "--bind goes with --image (directories bound into the image)"),
    (lambda a: a.dry_run and not a.submit,
     lambda a: "--dry-run prints the job validate --submit would submit: add --submit"),
)


def check_rules(args, rules=RULES) -> None:
    """Refuse the first broken rule of ``rules`` (exit 2 with its message).

    Raises:
        UsageError: a rule's condition holds.
    """
    from envtool.core.errors import UsageError

    for broken, message in rules:
        if broken(args):
            raise UsageError(message(args))


def run(args) -> int:
    """``envtool validate``: the checks on this machine, as a job (``--submit``), its plan
    (``--submit --dry-run``) or a ReFrame test (``--export reframe``)."""
    from envtool.cli.common import check_generated_inputs

    check_generated_inputs(args)
    if args.export:
        return _export(args)
    check_rules(args)
    target = _image_target(args) if args.image is not None else resolve(args)
    return _submit(args, target) if args.submit else _here(args, target)


def _status(args):
    """The live status line (one line on a terminal, plain lines elsewhere) and what feeds it."""
    from envtool.core.term import LiveStatus

    status = LiveStatus("validate: ", sys.stderr)
    quiet = getattr(args, "quiet", False) or args.json
    return status, (lambda line: None) if quiet else status.update


def _runner(args, log_path, say):
    from envtool.steps.kernel.runner import Runner

    return Runner(log_path=log_path, verbose=getattr(args, "verbose", False), say=say)


def _extras(args, target, result) -> None:
    from envtool.validate import ranks as rk

    if args.plot and result.benchmark and len(result.benchmark["points"]) == 2:
        rk.plot(result.benchmark, args.plot)
        result.extras.plot = args.plot
    result.extras.site = target.site.name
    result.extras.stage = stage_summary(target)
    result.extras.spec = target.spec.name if target.spec is not None else None


def _here(args, target) -> int:
    """``validate`` on this machine."""
    from envtool.steps.validate.here import HereOptions, run_here
    from envtool.validate import ranks as rk

    opts = HereOptions(ranks=args.ranks, benchmark=args.benchmark, steps=args.steps, batch_size=args.batch_size,
                       import_time=args.import_time,
                       slow_seconds=rk.SLOW_IMPORT_SECONDS if args.slow_import is None else args.slow_import)
    status, say = _status(args)
    with status:
        result = run_here(target, opts, lambda log: _runner(args, log, say))
    _extras(args, target, result)
    return _report(args, result, _print_here)


def _job_options(args):
    from envtool.steps.validate.job import JobOptions
    from envtool.validate import ranks as rk

    return JobOptions(nodes=args.nodes, ranks_per_node=args.ranks_per_node, gpus_per_rank=args.gpus_per_rank,
                      time_limit=args.time, account=args.account, queue=args.queue, benchmark=args.benchmark,
                      steps=args.steps, batch_size=args.batch_size, workdir=args.workdir, timeout=args.timeout,
                      preflight_only=args.preflight, sweep_max=_sweep_max(args) or 0, image=args.image,
                      binds=tuple(args.bind), launch=args.launch,
                      slow_seconds=rk.SLOW_IMPORT_SECONDS if args.slow_import is None else args.slow_import)


def _submit(args, target) -> int:
    """``validate --submit``: the plan, run by the one runner (or printed with ``--dry-run``)."""
    from envtool.steps.validate import job

    status, say = _status(args)
    plan = job.plan_job(target, _job_options(args), say)
    if args.dry_run:
        if args.json:
            print_json({"ok": True, "dry_run": True, "plan": plan.to_dict()})
        else:
            print(job.format_plan(plan))
            print("dry run: nothing was written or submitted")
        return 0
    with status:
        result = job.run_job(plan, _runner(args, plan.run_dir / "validate.log", say))
    _extras(args, target, result)
    return _report(args, result, _print_job)


def _report(args, result, printer) -> int:
    """Print the result (``--json``: its object) and return the exit status (0 ok, 1 a check failed)."""
    from envtool.core.term import paint

    if args.json:
        print_json(result.to_dict())
        return 0 if result.ok else 1
    if result.check_build is not None and result.check_build.table:
        print(result.check_build.table)
    printer(args, result)
    _print_common(result)
    for problem in result.problems:
        print(f"{paint('FAILED', 'fail', sys.stderr)}: {problem}", file=sys.stderr)
    where = getattr(result, "output", None) or result.log
    if where and not result.ok:
        print(f"validate: log: {where}", file=sys.stderr)
    return 0 if result.ok else 1


def _print_common(result) -> None:
    from envtool.validate import ranks as rk

    if result.import_time:
        print(rk.format_import(result.import_time))
    if result.benchmark:
        print(rk.format_scaling(result.benchmark))
    if result.extras.plot:
        print(f"plot: {result.extras.plot}")


def _print_here(args, result) -> None:
    from envtool.validate import ranks as rk

    for controller, recs in result.runs.items():
        print(f"{controller} controller, {args.ranks} ranks:")
        print(rk.table(recs))
    for name, why in result.skipped.items():
        print(f"{name}: skipped ({why})")


def _print_preflight(pre) -> None:
    from envtool.core.term import paint
    from envtool.validate import preflight as pf

    print("pre-flight " + (paint("ok", "ok") if pre.ok else paint("FAILED", "fail")) + ":")
    if pre.nodes:
        print(pf.table(pre.nodes))
    for warning in pre.warnings:
        print(f"warning: {warning}", file=sys.stderr)


def _print_controllers(result) -> None:
    from envtool.validate import ranks as rk
    from envtool.validate import sweep as sw

    for name, c in result.controllers.items():
        if c.skipped:
            print(f"{name}: skipped ({c.skipped})")
            continue
        if name != "nccl":
            print(f"{name} controller, {result.layout['ranks']} ranks:")
            print(rk.table(c.ranks))
        if c.sweep:
            print(sw.table(name, c.sweep, c.transport or ""))


def _print_job(args, result) -> None:
    from envtool.validate import ranks as rk

    nodes = result.layout["nodes"]
    if result.state == "not submitted":
        print(f"job not submitted ({nodes} node(s)): the pre-flight on this host failed")
    else:
        print(f"job {result.job_id or '(local)'}: {result.state} ({nodes} node(s), "
              + ("pre-flight only)" if args.preflight else f"{result.layout['ranks']} ranks)"))
    if result.preflight is not None:
        _print_preflight(result.preflight)
    if result.controllers:
        _print_controllers(result)
    elif result.ranks or not (args.preflight or (result.preflight is not None and result.preflight.problems)):
        print(rk.table(result.ranks))
    if getattr(result, "references", None):
        from envtool.steps.validate import references as published_refs

        for v in result.references:
            print("reference " + published_refs.line(v))
    for warning in getattr(result, "warnings", ()):
        print(f"warning: {warning}", file=sys.stderr)


def _image_target(args):
    """The target of ``validate --image``: the site's, with no prefix (the image carries the environment)."""
    from envtool.steps.jobscript import container_run

    return container_run.resolve_image_target(args.spec, args.site, args.site_file)[0]


def _export(args) -> int:
    """``--export reframe``: write the test and the settings (nothing runs)."""
    import shlex

    from envtool.core.errors import UsageError
    from envtool.steps import jobscript
    from envtool.steps.validate.job import JobOptions
    from envtool.steps.validate.reframe_export import export_reframe

    clash = [opt for opt, on in (("--submit", args.submit), ("--preflight", args.preflight),
                                 ("--benchmark", args.benchmark), ("--plot", args.plot), ("--workdir", args.workdir),
                                 ("--timeout", args.timeout is not None), ("--dry-run", args.dry_run)) if on]
    if clash:
        raise UsageError(f"--export reframe writes a test and runs nothing: drop {', '.join(clash)}")
    if args.nodes is None or args.nodes < 1:
        raise UsageError("--nodes must be 1 or more")
    target = jobscript.resolve_target(args.prefix, args.module, args.spec, args.site, args.site_file)
    result = export_reframe(target, JobOptions(nodes=args.nodes, ranks_per_node=args.ranks_per_node,
                                               gpus_per_rank=args.gpus_per_rank, time_limit=args.time,
                                               account=args.account, queue=args.queue),
                            output=args.output or "envtool_validate_rfm.py", settings_path=args.settings,
                            scheduler=args.reframe_scheduler or "slurm")
    if args.json:
        print_json(result.to_dict())
        return 0
    lay = result.layout
    print(f"ReFrame test: {result.test} ({lay['nodes']} node(s), {lay['ranks']} ranks; system "
          f"{result.system}:{result.partition}, scheduler {result.scheduler}, launcher srun)")
    print(f"ReFrame settings: {result.settings}")
    print(f"launch: {result.launch['note']}")

    def bound(frac):
        return "none" if frac is None else f"{frac * 100:+g} %"

    refs = result.references
    print("references: " + (", ".join(f"{k} {v[0]:g} {v[3]} (lower {bound(v[1])}, upper {bound(v[2])})"
                                       for k, v in refs.items())
                            if refs else f"none {'comparable ' if result.not_comparable else ''}for {lay['nodes']} "
                                         f"node(s) in {shlex.quote(target.site.path)}"))
    for v in result.not_comparable:
        print(f"reference {v['name']} ({v['value']:g} {v['unit']}, {v['date']}, {v['source']}; "
              f"stack {v['stack_hash']}): not comparable, not in the test: " + "; ".join(v["why"]))
    print(f"run it: {result.command}")
    return 0
