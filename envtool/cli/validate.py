"""``envtool validate``: the checks ``create`` runs (check-build against the spec, N-rank allreduce
on every controller the build has, DataLoader start method), on this machine or with ``--submit``
as a batch job through the site's scheduler; ``--benchmark`` adds the scaling numbers."""
from __future__ import annotations

import sys

from envtool.cli.common import add_json, print_json, seconds_arg
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
                        "every node, hostnames distinct and not resolving to loopback)")
    add_layout(p, nodes_required=False)
    p.add_argument("--ranks", type=int, default=2, help="ranks on this machine without --submit (2)")
    p.add_argument("--benchmark", action="store_true",
                   help="synthetic data-parallel training step at 1 rank and all ranks: samples/s, efficiency")
    p.add_argument("--steps", type=int, default=20, help="timed benchmark steps per point (20)")
    p.add_argument("--batch-size", type=int, default=32, help="benchmark samples per step and rank (32)")
    p.add_argument("--plot", metavar="FILE.png", help="draw the benchmark's samples/s and efficiency (matplotlib)")
    p.add_argument("--workdir", metavar="DIR",
                   help="run directory of a --submit job, seen by the compute nodes (default ./envtool-validate-TIME)")
    p.add_argument("--timeout", type=seconds_arg, help="seconds to wait for the job before cancelling it (default: no limit)")
    add_json(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from envtool.core.errors import UsageError
    from envtool.steps import jobscript, validate_job
    from envtool.validate import ranks as rk
    from envtool.cli.common import check_generated_inputs

    check_generated_inputs(args)
    if args.preflight and not args.submit:
        raise UsageError("--preflight runs the pre-flight of a batch job: add --submit")
    if args.plot and not args.benchmark:
        raise UsageError("--plot draws the benchmark: add --benchmark")
    if args.plot and not args.plot.lower().endswith(".png"):
        raise UsageError(f"--plot {args.plot}: expected a .png file name")
    if args.ranks < 1 or args.steps < 1 or args.batch_size < 1:
        raise UsageError("--ranks, --steps and --batch-size must be 1 or more")
    if args.plot:
        try:
            import matplotlib  # noqa: F401 - only to say early that it is missing
        except ImportError:
            raise UsageError("--plot needs matplotlib (pip install matplotlib)") from None
    quiet = getattr(args, "quiet", False) or args.json

    def progress(line: str) -> None:
        if not quiet:
            print(f"validate: {line}", file=sys.stderr, flush=True)

    if args.stage and not args.submit:
        raise UsageError("--stage stages the environment in a batch job: add --submit")
    target = resolve(args)
    if args.submit:
        result = validate_job.run_job(target, args.nodes, args.ranks_per_node, args.gpus_per_rank, args.time,
                                      args.account, args.queue, benchmark=args.benchmark, steps=args.steps,
                                      batch_size=args.batch_size, workdir=args.workdir, timeout=args.timeout,
                                      progress=progress, preflight_only=args.preflight)
        records = result["ranks"]
    else:
        result = validate_job.run_here(target, ranks=args.ranks, benchmark=args.benchmark, steps=args.steps,
                                       batch_size=args.batch_size, progress=progress)
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
            print(f"job {result.get('job_id') or '(local)'}: {result.get('state')} "
                  f"({result['layout']['nodes']} node(s), " + ("pre-flight only)" if args.preflight
                                                               else f"{result['layout']['ranks']} ranks)"))
            if result.get("preflight"):
                from envtool.validate import preflight as pf

                print("pre-flight " + ("ok" if result["preflight"]["ok"] else "FAILED") + ":")
                print(pf.table(result["preflight"]["nodes"]))
            if records or not (args.preflight or (result.get("preflight") or {}).get("problems")):
                print(rk.table(records))
        else:
            for controller, recs in result["runs"].items():
                print(f"{controller} controller, {args.ranks} ranks:")
                print(rk.table(recs))
        if result.get("benchmark"):
            print(rk.format_scaling(result["benchmark"]))
        if result.get("plot"):
            print(f"plot: {result['plot']}")
        for problem in result["problems"]:
            print(f"FAILED: {problem}", file=sys.stderr)
        where = result.get("output") or result.get("log")
        if where and not result["ok"]:
            print(f"validate: log: {where}", file=sys.stderr)
    return 0 if result["ok"] else 1
