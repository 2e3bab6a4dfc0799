"""``envtool modulefile``: write an Lmod (Lua) or Tcl modulefile for an environment.

``envtool modulefile [SPEC] --prefix P [--format lua|tcl] [--root DIR] [--name NAME/VERSION]
[--default] [--extensions all|spec|none] [--json]`` writes ``DIR/NAME/VERSION.lua`` (or ``DIR/NAME/VERSION`` for Tcl) and
prints its path. Without SPEC the module describes the prefix alone (no site modules, launcher
or spec ``env``).
"""
from __future__ import annotations

import os
from pathlib import Path

from envtool.cli.common import add_dry_run, add_json, add_spec_site, load_spec, name_arg, path_arg, print_json
from envtool.modules import registry
from envtool.modules.content import EXTENSIONS_CHOICES


def register(sub) -> None:
    p = sub.add_parser("modulefile", help="write an Lmod (Lua) or Tcl modulefile for an environment",
                       description="Write a modulefile that loads an environment with static, reversible changes "
                                   "(PATH, CONDA_PREFIX or VIRTUAL_ENV, the spec's env, what the env's "
                                   "etc/conda/activate.d scripts set), depends_on the spec's site modules, and "
                                   "lists the spec's packages as extensions for 'module spider'. An archived stack warns on load.")
    p.add_argument("spec", type=name_arg, nargs="?", help="the spec the environment was made from (optional)")
    p.add_argument("--prefix", type=path_arg, required=True, help="the environment's prefix")
    p.add_argument("--format", default=registry.DEFAULT_FORMAT, choices=registry.names(), help=registry.format_help())
    p.add_argument("--root", type=path_arg, default=None, metavar="DIR",
                   help="module tree to write into (default ./modulefiles); users run 'module use DIR'")
    p.add_argument("--name", type=name_arg, metavar="NAME/VERSION",
                   help="module name (default: SPEC/<distribution version>, or <prefix dir>/<date made>)")
    p.add_argument("--default", action="store_true",
                   help=f"mark this version the default ({registry.default_help()})")
    p.add_argument("--extensions", default="spec", choices=EXTENSIONS_CHOICES,
                   help="packages listed for 'module spider': spec (default: the spec's named packages, "
                        "the frameworks and Horovod), all installed packages, or none")
    add_spec_site(p)
    p.add_argument("--force", action="store_true",
                   help="replace a modulefile of the same NAME/VERSION in the other format (without it: exit 2)")
    add_dry_run(p, "written or replaced")
    add_json(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from envtool.core.errors import UsageError
    from envtool.modules import build_content, modulefile_path, parse_module_name, write_modulefile
    from envtool.cli.common import check_generated_inputs

    check_generated_inputs(args, positional_spec=True)
    if args.spec is None and (args.site or args.site_file):
        raise UsageError("--site/--site-file need a SPEC")
    spec = load_spec(args.spec, args.site, args.site_file) if args.spec else None
    name = version = None
    if args.name:
        name, version = parse_module_name(args.name)
    root = Path(os.path.abspath(args.root)) if args.root else Path(os.getcwd()) / "modulefiles"
    content = build_content(Path(args.prefix), spec=spec, name=name, version=version, extensions=args.extensions)
    existed = modulefile_path(root, content, args.format).exists()
    if args.dry_run:
        return _dry_run(args, content, root, existed)
    path = write_modulefile(content, root, args.format, default=args.default, force=args.force)
    if args.json:
        print_json({"path": str(path), "root": str(root), "module": content.full_name, "format": args.format,
                    "default": bool(args.default), "replaced": existed, "content": content.to_dict()})
    else:
        print(path)
    return 0


def _dry_run(args, content, root, existed: bool) -> int:
    """``modulefile --dry-run``: the file that would be written, what it would replace (the same
    file, or with ``--force`` NAME/VERSION's modulefile in the other format), or the refusal
    without ``--force`` (exit 2); nothing is written."""
    from envtool.core.errors import UsageError
    from envtool.modules import modulefile_path
    from envtool.modules import other_format, other_format_message

    path = modulefile_path(root, content, args.format)
    found = other_format(root, content, args.format)
    if found is not None and not args.force:
        raise UsageError(f"{other_format_message(found[0], found[1], content.full_name)}: pass --force to replace it "
                         f"with {path}")
    replaces = [str(path)] if existed else []
    replaces += [str(found[0])] if found is not None else []
    if args.json:
        print_json({"dry_run": True, "path": str(path), "root": str(root), "module": content.full_name,
                    "format": args.format, "replaces": replaces})
    else:
        print(f"dry run: would write {path}" + (f" (replacing {', '.join(replaces)})" if replaces else "")
              + "; nothing was changed")
    return 0
