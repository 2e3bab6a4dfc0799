"""``envtool check-build``: parse ``horovodrun --check-build`` (live or saved) and compare with a spec."""
from __future__ import annotations

import sys

from envtool.cli.common import add_json, load_spec, path_arg, print_json, read_input


def register(sub) -> None:
    p = sub.add_parser("check-build", help="parse horovodrun --check-build and compare with a spec",
                       description="Run horovodrun --check-build in an environment (or read saved output) and "
                                   "compare the capabilities with a spec's expect.check_build. Exit 1 on a mismatch.")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prefix", type=path_arg, help="environment whose bin/horovodrun to run (default: the active one)")
    src.add_argument("--from-file", type=path_arg, metavar="F", help="saved output of horovodrun --check-build ('-' for stdin)")
    p.add_argument("--spec", help="spec whose expect.check_build to compare with")
    add_json(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from envtool.engines.base import active_prefix
    from envtool.core.errors import UsageError
    from envtool.horovod import checkbuild
    from envtool.validate import probes

    prefix = None
    if args.from_file:
        text = read_input(args.from_file, "--from-file")
    else:
        prefix = Path(args.prefix) if args.prefix else active_prefix()
        if prefix is None:
            raise UsageError("no --prefix, --from-file or active environment (CONDA_PREFIX / VIRTUAL_ENV)")
        from envtool.core.term import LiveStatus

        try:
            with LiveStatus("check-build: ", sys.stderr) as status:
                if not args.json:
                    status.update(f"running {prefix}/bin/horovodrun --check-build")
                text = probes.check_build_output(prefix)
        except FileNotFoundError:
            raise UsageError(f"{prefix} has no bin/horovodrun (is Horovod installed there?)") from None
    found = checkbuild.parse(text)
    unbuilt = [] if prefix is None else checkbuild.listed_without_extension(found, prefix)
    if unbuilt:
        found = checkbuild.without_frameworks(found, unbuilt)
        if not args.json:
            for label in unbuilt:
                print(f"note: horovodrun --check-build marks [X] {label}, but Horovod's {label} extension "
                      f"(horovod/*/mpi_lib*.so) is not in {prefix}: the binding imports without it and has no "
                      "hvd.init(); counted as not built", file=sys.stderr)
    extra = {"listed_without_extension": unbuilt}
    if not args.spec:
        if args.json:
            print_json({**found.to_dict(), **extra})
        else:
            print(f"Horovod {found.version or '(version not printed)'}")
            for section in checkbuild.SECTIONS.values():
                names = [n for n, ok in getattr(found, section) if ok]
                print(f"  {section.replace('_', ' ')}: {', '.join(names) or '-'}")
        return 0
    spec = load_spec(args.spec)
    if spec.expect.check_build is None:
        raise UsageError(f"spec {spec.name!r} has no expect.check_build to compare with")
    comparison = checkbuild.compare(found, spec.expect.check_build)
    if args.json:
        print_json({"spec": spec.name, "found": found.to_dict(), **comparison.to_dict(), **extra})
    else:
        print(checkbuild.format_table(comparison))
        for r in comparison.missing:
            print(f"missing: {r.name} ({r.section.replace('_', ' ')}) is expected by {spec.name} but not built",
                  file=sys.stderr)
    return 0 if comparison.ok else 1
