"""``envtool plan SPEC``: print the ordered steps with their exact commands, then one line saying
whether Horovod will come from a wheel cache or be compiled (and about how long that takes);
changes nothing. ``--json``: the plan, with ``horovod`` (:func:`envtool.steps.create.horovod_build.forecast`,
null when the plan builds no Horovod)."""
from __future__ import annotations

import sys

from envtool.cli.common import add_plan_options, default_prefix, load_spec_site, print_json


def register(sub) -> None:
    p = sub.add_parser("plan", help="show the ordered steps create would run (no side effects)",
                       description="Print the ordered steps (modules, create or clone, packages, Horovod build with "
                                   "its exact HOROVOD_* set and fix rules, validation, lock, modulefile).")
    add_plan_options(p)
    p.set_defaults(func=run)


def options_from_args(args, spec, preview: bool = False, site=None, say=None):
    """PlanOptions from the shared create/plan arguments (``preview``: see ``PlanOptions.preview``).

    Args:
        args: the parsed create/plan arguments.
        spec: the resolved spec.
        preview: see ``PlanOptions.preview``.
        site: the site file the spec was resolved with (``SiteFile``), or None: with ``--clone``
            and no ``--prefix``, its ``clone_prefix`` is the default prefix.
        say: a callable taking one line for people (the default prefix and clone source chosen), or None.
    """
    import os
    from pathlib import Path

    from envtool.steps.create.from_lock import choose
    from envtool.core.plan import PlanOptions

    if args.prefix:
        prefix = Path(os.path.abspath(args.prefix))
    else:
        prefix = default_prefix(spec.name)
        if args.clone is not None and site is not None:
            from envtool.spec.sites import clone_prefix

            site_prefix = clone_prefix(site, spec.name)
            if site_prefix is not None:
                prefix = site_prefix
                if say is not None:
                    say(f"prefix: {prefix} (site {site.name}'s clone_prefix; --prefix to choose)")
    choice = choose(spec, explicit=Path(args.lock) if args.lock else None, resolve=args.resolve,
                    clone=args.clone is not None)
    return PlanOptions(prefix=prefix, clone=args.clone, from_lock=choice.path, lock_reason=choice.reason,
                       engine=args.engine, modulefile_root=Path(args.modulefile_root) if args.modulefile_root else None,
                       cpu_count=args.jobs or os.cpu_count() or 2, site=getattr(args, "site", None), preview=preview,
                       installer=getattr(args, "installer", None) or "")


def run(args) -> int:
    from envtool.cli.common import check_generated_inputs
    from envtool.steps.create.horovod_build import forecast, forecast_line
    from envtool.steps.create.planner import format_plan, make_plan

    check_generated_inputs(args, positional_spec=True)
    spec, site = load_spec_site(args.spec, args.site, args.site_file, quiet=args.json)
    from envtool.cli.common import check_machine_platform

    check_machine_platform(spec, args.platform_mismatch_ok,
                           say=None if args.json else (lambda line: print(line, file=sys.stderr)))
    from envtool.cli.common import progress_lines

    # usually under 2 s: said on stderr only when it takes longer (a loaded machine, a slow file system)
    with progress_lines(args, "plan: ", after=2.0) as say:
        say("reading the lock and the spec")
        options = options_from_args(args, spec, preview=True, site=site)
        say("probing the machine (installer, compiler, CMake, MPI)")
        plan = make_plan(spec, options)
        say("looking up the Horovod wheel caches")
        horovod = forecast(plan)  # from a wheel cache or compiled, and how long (issue 38)
    if args.json:
        data = plan.to_dict()
        data["horovod"] = horovod
        if options.clone is not None:
            from envtool.steps.create.planner import clone_source

            source, why = clone_source(spec, options)
            data["clone_source"] = {"source": source or None, "reason": why}
        print_json(data)
    else:
        print(format_plan(plan))
        if horovod is not None:
            print(forecast_line(horovod))
    return 0
