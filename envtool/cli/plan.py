"""``envtool plan SPEC``: print the ordered steps with their exact commands; changes nothing."""
from __future__ import annotations

import sys

from envtool.cli.common import (add_json, add_platform_mismatch, add_lock_options, add_spec_site, default_prefix, jobs_arg, load_spec_site,
                                name_arg, path_arg, print_json)


def register(sub) -> None:
    p = sub.add_parser("plan", help="show the ordered steps create would run (no side effects)",
                       description="Print the ordered steps (modules, create or clone, packages, Horovod build with "
                                   "its exact HOROVOD_* set and fix rules, validation, lock, modulefile).")
    p.add_argument("spec", type=name_arg, help="spec name (see 'envtool specs') or path to a spec file")
    p.add_argument("--prefix", type=path_arg, help="target prefix (default: for --clone the site's clone_prefix, "
                                                   "else ./envs/SPEC)")
    p.add_argument("--clone", type=name_arg, nargs="?", const="", default=None, metavar="SOURCE",
                   help="clone SOURCE (default: the site's base env for the spec, else the active "
                        "environment $CONDA_PREFIX) instead of creating from scratch")
    add_lock_options(p)
    p.add_argument("--engine", help="venv, rattler (conda, default for conda specs), conda, mamba, micromamba")
    p.add_argument("--modulefile-root", type=path_arg, metavar="DIR", help="also write a modulefile under DIR")
    p.add_argument("--jobs", type=jobs_arg, default=None, help="parallel compile jobs (default: CPU count)")
    add_spec_site(p)
    add_platform_mismatch(p)
    add_json(p)
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

    from envtool.steps.from_lock import choose
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
    from envtool.steps.planner import format_plan, make_plan

    check_generated_inputs(args, positional_spec=True)
    spec, site = load_spec_site(args.spec, args.site, args.site_file, quiet=args.json)
    from envtool.cli.common import check_machine_platform

    check_machine_platform(spec, args.platform_mismatch_ok,
                           say=None if args.json else (lambda line: print(line, file=sys.stderr)))
    options = options_from_args(args, spec, preview=True, site=site)
    plan = make_plan(spec, options)
    if args.json:
        data = plan.to_dict()
        if options.clone is not None:
            from envtool.steps.planner import clone_source

            source, why = clone_source(spec, options)
            data["clone_source"] = {"source": source or None, "reason": why}
        print_json(data)
    else:
        print(format_plan(plan))
    return 0
