"""``envtool retire NAME/VERSION --root DIR [--modulefiles DIR]``: remove a version ``publish`` made.

``[--force-default] [--dry-run] [--json]``. Removes ``DIR/NAME/VERSION``, its SBOM and its
modulefile, only when publish's marker proves publish made them, and never the module's
default without ``--force-default`` (:func:`envtool.steps.publish.retire`).
"""
from __future__ import annotations

from envtool.cli.common import add_dry_run, add_json, add_yes, path_arg, print_json


def register(sub) -> None:
    p = sub.add_parser("retire", help="remove a published version: its environment, SBOM and modulefile (site admins)",
                       description="Remove NAME/VERSION that 'envtool publish' made under --root: the environment, "
                                   "its SBOM and its modulefile, each proven by the marker publish wrote. Refuses the "
                                   "module's default version unless --force-default. Paths are renamed aside first, "
                                   "so an interruption leaves the whole version or none of it.")
    p.add_argument("module", metavar="NAME/VERSION", help="the published module version to retire")
    p.add_argument("--root", required=True, type=path_arg, metavar="DIR", help="the --root it was published to")
    p.add_argument("--modulefiles", type=path_arg, metavar="DIR",
                   help="the --modulefiles it was published to (default: the one its publish record names)")
    p.add_argument("--force-default", action="store_true",
                   help="retire it even while it is the module's default (the default marker goes too)")
    add_dry_run(p, "removed")
    add_yes(p)
    add_json(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from envtool.cli.common import confirm, will_ask
    from envtool.core.errors import EnvtoolError
    from envtool.steps.publish import retire

    modulefiles = Path(args.modulefiles) if args.modulefiles else None
    try:
        if will_ask(args):  # on a terminal: say what goes and ask (-y does not)
            plan = retire(args.module, Path(args.root), modulefiles, force_default=args.force_default, dry_run=True)
            if not confirm(args, f"retiring {plan.module} will remove: " + ", ".join(plan.removed)):
                print("nothing was removed")
                return 0
        result = retire(args.module, Path(args.root), modulefiles, force_default=args.force_default,
                        dry_run=args.dry_run, verbose=args.verbose, quiet=args.quiet or args.json)
    except EnvtoolError as exc:
        if args.json:
            print_json({"ok": False, "error": str(exc), "exit": exc.exit_status})
        raise
    if args.json:
        print_json(result.to_dict())
    elif result.dry_run:
        if result.plan is not None:
            print(result.plan.format())
        print(f"dry run: retiring {result.module} would remove:")
        for p in result.removed:
            print(f"  {p}")
    else:
        print(f"retired {result.module}")
    return 0
