"""``envtool publish SPEC … --root DIR --modulefiles DIR``: build stacks into a shared tree.

``[--site S | --site-file F] [--group G] [--umask 022] [--default] [--force] [--format lua|tcl]
[--extensions all|spec|none] [--lock FILE | --resolve] [--installer uv|pip] [--dry-run] [--json]``.
Packages come from each spec's lock, as for ``create``. Each stack goes to ``DIR/NAME/VERSION`` (built, or
cloned from the site's base environment when ``--site`` names a site that has one), with its
modulefile, its SBOM beside it, group ownership, setgid directories and a read-only
environment (:mod:`envtool.steps.publish`).
"""
from __future__ import annotations

from envtool.cli.common import (add_json, add_lock_options, add_spec_site, load_spec, name_arg, path_arg,
                                print_json)
from envtool.modules import registry
from envtool.modules.content import EXTENSIONS_CHOICES


def register(sub) -> None:
    p = sub.add_parser("publish", help="build stacks into a shared tree with modulefiles and SBOMs (site admins)",
                       description="Build (or, with --site, clone the site's base environment into) DIR/NAME/VERSION "
                                   "for each SPEC, write its modulefile and a CycloneDX SBOM beside it, mark defaults, "
                                   "refresh Lmod's spider cache when the site uses one, and leave the tree group-owned "
                                   "(setgid directories), group-readable and the environments read-only. A stack "
                                   "already published is left alone unless --force.")
    p.add_argument("spec", nargs="+", type=name_arg, help="spec names or files")
    p.add_argument("--root", required=True, metavar="DIR", type=path_arg,
                   help="software tree: environments go to DIR/NAME/VERSION")
    p.add_argument("--modulefiles", required=True, metavar="DIR", type=path_arg, help="module tree users 'module use'")
    p.add_argument("--group", metavar="G", help="group that owns the published tree (its members can use it)")
    p.add_argument("--umask", default="022", metavar="OCTAL",
                   help="permissions taken from everyone (022: world-readable, default; 027: the group only)")
    p.add_argument("--default", action="store_true", help="make each published version the default of its name")
    p.add_argument("--force", action="store_true", help="rebuild and replace stacks already published")
    p.add_argument("--format", default=registry.DEFAULT_FORMAT, choices=registry.names(),
                   help=f"modulefile format (default {registry.DEFAULT_FORMAT})")
    p.add_argument("--extensions", default="spec", choices=EXTENSIONS_CHOICES,
                   help="packages listed for 'module spider' (default: the spec's, the frameworks, Horovod)")
    add_lock_options(p)
    p.add_argument("--dry-run", action="store_true",
                   help="say what would be created or changed (paths, modes, group, modulefiles, default marker) "
                        "and change nothing")
    add_spec_site(p)
    add_json(p)
    p.set_defaults(func=run)


def _umask(text: str) -> int:
    """``--umask`` as a number.

    Raises:
        UsageError: not octal, or it takes read access from the owner or group (exit 2).
    """
    from envtool.core.errors import UsageError

    try:
        umask = int(text, 8)
    except ValueError:
        umask = -1
    if not 0 <= umask <= 0o777 or umask & 0o440:
        raise UsageError(f"--umask: expected an octal mask such as 022 or 027 that leaves owner and group "
                         f"read access, got {text!r}")
    return umask


def run(args) -> int:
    from pathlib import Path

    from envtool.cli.common import check_generated_inputs
    from envtool.core.errors import EnvtoolError
    from envtool.steps.publish import publish

    try:
        check_generated_inputs(args, positional_spec=True)
        umask = _umask(args.umask)
        specs = [load_spec(s, args.site, args.site_file, quiet=args.json) for s in args.spec]
        result = publish(specs, args.root, args.modulefiles, group=args.group, default=args.default,
                         force=args.force, fmt=args.format, extensions=args.extensions, umask=umask,
                         clone_site_base=bool(args.site or args.site_file),
                         lock=Path(args.lock) if args.lock else None, resolve=args.resolve,
                         installer=args.installer or "", dry_run=args.dry_run, verbose=args.verbose,
                         quiet=args.quiet or args.json)
    except EnvtoolError as exc:
        if args.json:
            print_json({"ok": False, "error": str(exc), "exit": exc.exit_status,
                        "log": str(exc.log) if exc.log else None})
        raise
    if args.json:
        print_json(result.to_dict())
    elif result.dry_run:
        _print_dry_run(result)
    else:
        import shlex

        print(f"module use {shlex.quote(str(args.modulefiles))}")
        for s in result.stacks:
            print(f"  {s.module:30} {s.action:9} {s.prefix}")
    return 0


def _print_dry_run(result) -> None:
    """``publish --dry-run`` in text: the plan (the steps and their commands, create's included), each
    path that would change with its mode and group, each stack's packages and Horovod look-ahead."""
    from envtool.steps.create.horovod_build import forecast_line

    if result.plan is not None:
        print(result.plan.format())
    print("dry run: nothing was changed")
    for c in result.changes:
        extra = " ".join(str(c[k]) for k in ("mode", "group") if k in c)
        print(f"  {'would ' + str(c['change']) if c['change'] != 'keep' else 'keep':14} {c['kind']:16} {c['path']}"
              + (f"  {extra}" if extra else "") + (f"  ({c['note']})" if c.get("note") else ""))
    for s in result.stacks:
        print(f"{s.module}: {s.action if s.action == 'unchanged' else 'would be ' + s.action}")
        if s.lock:
            print(f"  packages: {s.lock['reason']}")
        if s.horovod:
            print(f"  {forecast_line(s.horovod)}")
    if result.spider_caches:
        print("would refresh Lmod's spider cache: " + ", ".join(result.spider_caches))
