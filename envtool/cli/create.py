"""``envtool create SPEC``: build, validate and place an environment (atomically)."""
from __future__ import annotations

import sys

from envtool.cli.common import add_dry_run, add_plan_options, load_spec_site, print_json


def register(sub) -> None:
    p = sub.add_parser("create", help="create (or clone) an environment, build Horovod, validate it",
                       description="Create an environment from a spec: clone or create, install packages, build "
                                   "Horovod, validate (check-build, DataLoader start method), lock. The environment "
                                   "is built in a temporary sibling and moved into place only if everything passed.")
    add_plan_options(p)
    p.add_argument("--force", action="store_true", help="replace the environment at the target (once the new one is complete); only an "
                        "environment is replaced, never another directory, a symlink, the current or home "
                        "directory or an envtool cache (exit 2)")
    add_dry_run(p, "replaced (with --force) and the plan")
    p.set_defaults(func=run)


def run(args) -> int:
    from envtool.cli.plan import options_from_args
    from envtool.core.errors import EnvtoolError
    from envtool.steps.create import validate_step as validate
    from envtool.steps.create.workflow import create
    from envtool.steps.create.planner import clone_source

    from envtool.cli.common import check_generated_inputs

    check_generated_inputs(args, positional_spec=True)
    quiet = args.quiet or args.json
    spec, site = load_spec_site(args.spec, args.site, args.site_file, quiet=quiet)

    def say(line: str) -> None:
        if not quiet:
            print(line, file=sys.stderr)

    from envtool.cli.common import check_machine_platform

    check_machine_platform(spec, args.platform_mismatch_ok, say=say)
    from envtool.steps.create.planner import check_site_modules

    check_site_modules(spec)  # a spec for another site: exit 2 with the cause, before any work
    options = options_from_args(args, spec, site=site, say=say)
    if args.dry_run:
        return _dry_run(args, spec, site, options)
    if options.clone is not None:
        source, why = clone_source(spec, options)
        say(f"clone source: {source or '$CONDA_PREFIX'} ({why})")
    try:
        result = create(spec, options, force=args.force, verbose=args.verbose, quiet=args.quiet or args.json)
    except EnvtoolError as exc:
        report = (exc.results or {}).get("validate")
        if args.json:
            print_json({"ok": False, "error": str(exc), "log": str(exc.log or ""), "outcome": exc.outcome,
                        "results": exc.results or {}})
        elif report:
            print(validate.format_report(report))
        raise
    hint = activation_hint(result.prefix, result.results.get("modulefile"))
    if args.json:
        print_json({"ok": True, "prefix": str(result.prefix), "log": str(result.log), "results": result.results,
                    "timings": result.timings, "relocation": result.relocation, "activate": hint})
        return 0
    report = result.results.get("validate")
    if report:
        print(validate.format_report(report))
    print(f"environment ready at {result.prefix}")
    print(f"build log: {result.prefix}/.envtool/create.log")
    print("to use it:")
    for line in hint:
        print(f"  {line}")
    if result.relocation.get("binaries") and args.verbose:
        print(f"note: {len(result.relocation['binaries'])} binary file(s) still name the temporary build prefix "
              "(RUNPATH entries or compiled-in strings; listed in the build log)", file=sys.stderr)
    return 0


def _dry_run(args, spec, site, options) -> int:
    """``create --dry-run``: the target checks the build makes first (what ``--force`` would
    replace, or the refusal, exit 2) and ``envtool plan``'s steps; nothing is made or changed."""
    from envtool.cli.common import replacement_preview
    from envtool.cli.plan import options_from_args
    from envtool.steps.create.planner import format_plan, make_plan

    replaces = replacement_preview(options.prefix, args.force)
    plan = make_plan(spec, options_from_args(args, spec, preview=True, site=site))
    if args.json:
        print_json({"dry_run": True, "prefix": str(options.prefix), "replaces": replaces, "plan": plan.to_dict()})
        return 0
    print(format_plan(plan))
    print(f"dry run: would {'replace the environment at' if replaces else 'create'} {options.prefix}; "
          "nothing was changed")
    return 0


def activation_hint(prefix, modulefile=None):
    """The shell lines, quoted for pasting, that put the environment at ``prefix`` to use.

    Args:
        prefix: the environment (a venv when it has ``bin/activate`` and no ``conda-meta``, else a
            conda prefix).
        modulefile: ``create``'s ``modulefile`` step result (``{"ok", "root", "module"}``), or None:
            when it wrote one, ``module use ROOT`` and ``module load NAME/VERSION`` come first.
    Returns:
        the lines: ``source PREFIX/bin/activate`` for a venv (Python docs, venv, "How venvs work":
        https://docs.python.org/3/library/venv.html#how-venvs-work); ``conda activate PREFIX``
        (or ``mamba``/``micromamba activate``, whichever is on PATH) for a conda prefix (conda
        accepts a prefix path there: https://docs.conda.io/projects/conda/en/latest/commands/activate.html),
        else the ``PATH`` line without an activator.
    """
    import shlex
    import shutil
    from pathlib import Path

    p = Path(prefix)
    lines = []
    if isinstance(modulefile, dict) and modulefile.get("ok") and modulefile.get("module"):
        lines += [f"module use {shlex.quote(str(modulefile['root']))}",
                  f"module load {shlex.quote(str(modulefile['module']))}"]
        return lines
    from envtool.core.prefix import PrefixData

    script = PrefixData(p).activate_script
    if script is not None:
        return [f"source {shlex.quote(str(script))}"]
    tool = next((t for t in ("conda", "mamba", "micromamba") if shutil.which(t)), None)
    if tool:
        return [f"{tool} activate {shlex.quote(str(p))}"]
    return [f'export PATH={shlex.quote(str(p / "bin"))}:"$PATH"']
