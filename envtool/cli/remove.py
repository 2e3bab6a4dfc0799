"""``envtool remove --prefix PREFIX`` (or ``envtool remove PREFIX``): delete an environment envtool made (all or nothing)."""
from __future__ import annotations

from envtool.cli.common import add_dry_run, add_environment_argument, add_json, add_yes, prefix_given, print_json


def register(sub) -> None:
    p = sub.add_parser("remove", help="delete an environment envtool made (refuses anything else)",
                       description="Delete the environment at PREFIX, only if its own .envtool/create.json shows "
                                   "that envtool made it there. Anything else (a directory envtool did not make, a "
                                   "symbolic link, the current or home directory, a cache, a published module: "
                                   "use 'envtool retire') is refused with exit 2 and nothing touched. The prefix is "
                                   "renamed aside first, then deleted, so an interruption leaves all or nothing. "
                                   "A removal that could not delete everything exits 1, naming what is left and "
                                   "the command that finishes it; a later remove of the same PREFIX finishes "
                                   "what an interrupted remove or create left beside it (--dry-run lists it).")
    add_environment_argument(p, "the environment to delete")
    add_dry_run(p, "deleted")
    add_yes(p)
    add_json(p)
    p.set_defaults(func=run)


def run(args) -> int:
    import os
    import sys

    from envtool.core.sizes import human
    from envtool.steps.lifecycle.remove import remove_environment

    from envtool.cli.common import progress_lines

    def say(line: str) -> None:
        if not (args.quiet or args.json):
            print(line, file=sys.stderr)

    from envtool.cli.common import confirm, will_ask

    from pathlib import Path

    prefix = Path(prefix_given(args))
    if will_ask(args):  # on a terminal: say what goes and ask, as 'conda remove --all' does
        plan = remove_environment(prefix, dry_run=True, say=say)
        if not confirm(args, f"remove will delete {plan['prefix']} (spec {plan['spec'] or '?'}, "
                             f"{human(plan['size'])})"):
            print("nothing was removed")
            return 0
    with progress_lines(args, "remove: ") as status:
        result = remove_environment(prefix, dry_run=args.dry_run, say=status)
    # exit 1: something could not be deleted, or all there is are look-alikes envtool cannot prove its own
    only_kept = (bool(result["kept"]) and not result["removed"] and not result["leftovers"]
                 and not (result["dry_run"] and os.path.lexists(result["prefix"])))
    code = 1 if result["left"] or only_kept else 0
    if args.json:
        print_json(result)
        return code
    for p in result["swept"]:
        say(f"removed {p}, left by an envtool process that no longer runs")
    spec = result["spec"] or "?"
    if only_kept:
        print(f"remove: {result['prefix']}: nothing there is envtool's to delete:", file=sys.stderr)
        for line in result["problems"]:
            print(f"  {line}", file=sys.stderr)
    elif result["dry_run"]:
        for p in result["leftovers"]:
            print(f"would remove {p}, left by an envtool process that no longer runs")
        what = f"{result['prefix']} (spec {spec}, {human(result['size'])})" if os.path.lexists(result["prefix"]) \
            else (f"the registry's record of {result['prefix']} (nothing is there)" if result["forgot"]
                  else f"what is left of {result['prefix']} ({human(result['size'])})")
        print(f"would remove {what}; nothing was changed")
    elif code:
        print(f"remove: {result['prefix']} is gone, but not everything of it could be deleted:", file=sys.stderr)
        for line in result["problems"]:
            print(f"  {line}", file=sys.stderr)
        print(f"to finish: {result['finish']}", file=sys.stderr)
    elif result["forgot"]:
        print(f"forgot {result['prefix']}: nothing was there any more; its record in envtool's registry is deleted")
    elif result["removed"]:
        print(f"removed {result['prefix']} (spec {spec}, {human(result['size'])} freed)")
    else:
        print(f"finished removing {result['prefix']}: deleted what an interrupted envtool left beside it "
              f"({human(result['size'])} freed)")
    if not code:
        for line in result["problems"]:  # the look-alikes left alone
            say(f"note: {line}")
    return code
