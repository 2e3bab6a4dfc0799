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
    p.add_argument("--timeout", type=seconds_arg, help="seconds to wait for the job before cancelling it (default: no limit)")
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
    add_json(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from envtool.core.errors import UsageError
    from envtool.steps import validate_job
    from envtool.validate import ranks as rk
    from envtool.cli.common import check_generated_inputs

    check_generated_inputs(args)
    if args.export:
        return _export(args)
    for opt, value in (("-o/--output", args.output), ("--settings", args.settings),
                       ("--reframe-scheduler", args.reframe_scheduler)):
        if value:
            raise UsageError(f"{opt} goes with --export reframe")
    if args.preflight and not args.submit:
        raise UsageError("--preflight runs the pre-flight of a batch job: add --submit")
    if args.plot and not args.benchmark:
        raise UsageError("--plot draws the benchmark: add --benchmark")
    if args.plot and not args.plot.lower().endswith(".png"):
        raise UsageError(f"--plot {args.plot}: expected a .png file name")
    from envtool.spec.sites import REFERENCE_SIZES, parse_size

    sweep_max = parse_size(args.sweep_max)
    if sweep_max is None or (sweep_max != 0 and sweep_max not in REFERENCE_SIZES):
        raise UsageError(f"--sweep-max {args.sweep_max}: expected a power of two from 8B to 64MiB (8B, 1KiB, 64MiB), "
                         f"or 0 for no sweep")
    if args.ranks < 1 or args.steps < 1 or args.batch_size < 1:
        raise UsageError("--ranks, --steps and --batch-size must be 1 or more")
    if args.plot:
        try:
            import matplotlib  # noqa: F401 - only to say early that it is missing
        except ImportError:
            raise UsageError("--plot needs matplotlib (pip install matplotlib)") from None
    quiet = getattr(args, "quiet", False) or args.json

    from envtool.core.term import LiveStatus, paint

    status = LiveStatus("validate: ", sys.stderr)  # one live line on a terminal, plain lines elsewhere

    def progress(line: str) -> None:
        if not quiet:
            status.update(line)

    if args.import_time and args.submit:
        raise UsageError("--import-time: a --submit validation always measures import time and metadata calls; "
                         "drop --import-time")
    if args.import_time and args.preflight:
        raise UsageError("--import-time measures the ranks' imports; --preflight runs none")
    if args.import_time:
        import shutil

        if shutil.which("strace") is None:
            raise UsageError("--import-time counts metadata calls with strace, which is not on PATH "
                             "(Debian/Ubuntu: apt-get install strace)")
    slow = rk.SLOW_IMPORT_SECONDS if args.slow_import is None else args.slow_import
    if args.stage and not args.submit:
        raise UsageError("--stage stages the environment in a batch job: add --submit")
    if args.image is not None:
        target = _image_target(args)
    else:
        if args.bind:
            raise UsageError("--bind goes with --image (directories bound into the image)")
        target = resolve(args)
    with status:
        if args.submit:
            result = validate_job.run_job(target, args.nodes, args.ranks_per_node, args.gpus_per_rank, args.time,
                                          args.account, args.queue, benchmark=args.benchmark, steps=args.steps,
                                          batch_size=args.batch_size, workdir=args.workdir, timeout=args.timeout,
                                          progress=progress, preflight_only=args.preflight, slow_seconds=slow,
                                          sweep_max=sweep_max, image=args.image, binds=args.bind)
            records = result["ranks"]
        else:
            result = validate_job.run_here(target, ranks=args.ranks, benchmark=args.benchmark, steps=args.steps,
                                           batch_size=args.batch_size, progress=progress,
                                           import_time=args.import_time, slow_seconds=slow)
            records = [r for recs in result["runs"].values() for r in recs]
    if args.plot and result.get("benchmark") and len(result["benchmark"]["points"]) == 2:
        rk.plot(result["benchmark"], args.plot)
        result["plot"] = args.plot
    result["site"] = target.site.name
    if target.stage is not None:
        result["stage"] = stage_summary(target)
    result["spec"] = target.spec.name if target.spec is not None else None
    if args.json:
        print_json(result)
    else:
        cb = result.get("check_build") or {}
        if cb.get("table"):
            print(cb["table"])
        if args.submit:
            if result.get("state") == "not submitted":
                print(f"job not submitted ({result['layout']['nodes']} node(s)): the pre-flight on this host failed")
            else:
                print(f"job {result.get('job_id') or '(local)'}: {result.get('state')} "
                      f"({result['layout']['nodes']} node(s), " + ("pre-flight only)" if args.preflight
                                                                   else f"{result['layout']['ranks']} ranks)"))
            if result.get("preflight"):
                from envtool.validate import preflight as pf

                print("pre-flight " + (paint("ok", "ok") if result["preflight"]["ok"] else paint("FAILED", "fail")) + ":")
                if result["preflight"]["nodes"]:
                    print(pf.table(result["preflight"]["nodes"]))
                for warning in result["preflight"].get("warnings") or []:
                    print(f"warning: {warning}", file=sys.stderr)
            controllers = result.get("controllers") or {}
            if controllers:
                from envtool.validate import sweep as sw

                for name, c in controllers.items():
                    if c.get("skipped"):
                        print(f"{name}: skipped ({c['skipped']})")
                        continue
                    if name != "nccl":
                        print(f"{name} controller, {result['layout']['ranks']} ranks:")
                        print(rk.table(c["ranks"]))
                    if c.get("sweep"):
                        print(sw.table(name, c["sweep"], c.get("transport") or ""))
            elif records or not (args.preflight or (result.get("preflight") or {}).get("problems")):
                print(rk.table(records))
        else:
            for controller, recs in result["runs"].items():
                print(f"{controller} controller, {args.ranks} ranks:")
                print(rk.table(recs))
        if result.get("import_time"):
            print(rk.format_import(result["import_time"]))
        if result.get("benchmark"):
            print(rk.format_scaling(result["benchmark"]))
        if result.get("plot"):
            print(f"plot: {result['plot']}")
        for problem in result["problems"]:
            print(f"{paint('FAILED', 'fail', sys.stderr)}: {problem}", file=sys.stderr)
        where = result.get("output") or result.get("log")
        if where and not result["ok"]:
            print(f"validate: log: {where}", file=sys.stderr)
    return 0 if result["ok"] else 1


def _image_target(args):
    """The target of ``validate --image``: the site's, with no prefix (the image carries the environment)."""
    from envtool.core.errors import UsageError
    from envtool.steps import container_run

    if not args.submit:
        raise UsageError("--image runs the ranks in the image through the site's scheduler: add --submit")
    if args.prefix or args.module or args.stage:
        raise UsageError("--image validates the environment the image carries: give no --prefix, --module or --stage")
    return container_run.resolve_image_target(args.spec, args.site, args.site_file)[0]


def _export(args) -> int:
    """``--export reframe``: write the test and the settings (nothing runs)."""
    import shlex

    from envtool.core.errors import UsageError
    from envtool.steps import jobscript, validate_job

    clash = [opt for opt, on in (("--submit", args.submit), ("--preflight", args.preflight),
                                 ("--benchmark", args.benchmark), ("--plot", args.plot), ("--workdir", args.workdir),
                                 ("--timeout", args.timeout is not None)) if on]
    if clash:
        raise UsageError(f"--export reframe writes a test and runs nothing: drop {', '.join(clash)}")
    if args.nodes is None or args.nodes < 1:
        raise UsageError("--nodes must be 1 or more")
    target = jobscript.resolve_target(args.prefix, args.module, args.spec, args.site, args.site_file)
    result = validate_job.export_reframe(target, args.nodes, args.ranks_per_node, args.gpus_per_rank, args.time,
                                         args.account, args.queue, output=args.output or "envtool_validate_rfm.py",
                                         settings_path=args.settings, scheduler=args.reframe_scheduler or "slurm")
    result["site"] = target.site.name
    result["spec"] = target.spec.name if target.spec is not None else None
    if args.json:
        print_json(result)
    else:
        lay = result["layout"]
        print(f"ReFrame test: {result['test']} ({lay['nodes']} node(s), {lay['ranks']} ranks; system "
              f"{result['system']}:{result['partition']}, scheduler {result['scheduler']}, launcher srun)")
        print(f"ReFrame settings: {result['settings']}")
        refs = result["references"]
        def bound(frac):
            return "none" if frac is None else f"{frac * 100:+g} %"

        print("references: " + (", ".join(f"{k} {v[0]:g} {v[3]} (lower {bound(v[1])}, upper {bound(v[2])})"
                                           for k, v in refs.items())
                                if refs else f"none for {lay['nodes']} node(s) in {shlex.quote(target.site.path)}"))
        print(f"run it: {result['command']}")
    return 0
