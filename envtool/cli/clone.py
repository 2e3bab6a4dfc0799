"""``envtool clone SOURCE --prefix P``: clone a (read-only) conda env, or layer on a module's Python."""
from __future__ import annotations


from envtool.cli.common import add_dry_run, add_engine_option, add_json, name_arg, path_arg, print_json


def register(sub) -> None:
    p = sub.add_parser("clone", help="clone a conda environment (read-only ones too) to a new prefix",
                       description="Install exactly the source's package records (from existing package caches, "
                                   "read only, then their URLs), copy untracked files with the prefix rewritten, carry "
                                   "conda-meta/pinned and history, and verify the clone and that the source is "
                                   "unchanged. A venv-style source (a module's Python) is layered with "
                                   "--system-site-packages, or copied with --mode copy.")
    p.add_argument("source", type=name_arg, nargs="?", default="",
                   help="env name (conda envs dirs, $CONDA_ENVS_PATH), prefix, or nothing for $CONDA_PREFIX")
    p.add_argument("--prefix", type=path_arg, required=True, help="the new environment's prefix")
    add_engine_option(p, default="rattler", what="clone")
    p.add_argument("--mode", default="layer", choices=("layer", "copy"),
                   help="for a venv-style source: a --system-site-packages layer (default) or a full copy")
    p.add_argument("--verify-source", default="content", choices=("content", "stat"),
                   help="prove the source unchanged by sha256 of every file (default) or by stat data incl. ctime")
    p.add_argument("--force", action="store_true", help="replace the environment at the target (once the clone is complete); only an "
                        "environment is replaced, never another directory, a symlink, the current or home "
                        "directory or an envtool cache (exit 2)")
    add_dry_run(p, "replaced (with --force)")
    add_json(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from envtool.steps.create.clone import clone_env
    from envtool.core.errors import EnvtoolError

    if args.dry_run:
        from envtool.cli.common import replacement_preview

        replaces = replacement_preview(args.prefix, args.force)
        if args.json:
            print_json({"dry_run": True, "source": args.source or None, "prefix": args.prefix, "replaces": replaces})
        else:
            print(f"dry run: would clone {args.source or '$CONDA_PREFIX'} into {args.prefix}"
                  + (" (replacing the environment there)" if replaces else "") + "; nothing was changed")
        return 0
    try:
        result = clone_env(args.source, args.prefix, engine=args.engine, mode=args.mode, force=args.force,
                           verify_content=args.verify_source == "content", verbose=args.verbose,
                           quiet=args.quiet or args.json)
    except EnvtoolError as exc:
        if args.json:
            print_json({"ok": False, "error": str(exc), "log": str(exc.log or ""), "outcome": exc.outcome,
                        "results": exc.results or {}})
        raise
    if args.json:
        print_json(result.to_dict())
        return 0
    info = result.results.get("clone", {})
    untracked = info.get("untracked", {})
    print(f"cloned {result.source} -> {result.prefix}")
    if "records" in info:
        cache = info.get("cache", {})
        print(f"  {info['records']} package records ({cache.get('cached', 0)} cached, {cache.get('copied', 0)} "
              f"copied from the source's caches, {len(cache.get('fetched', []))} downloaded)")
    if untracked:
        print(f"  {untracked.get('copied', 0)} untracked files copied, {len(untracked.get('rewritten', []))} "
              f"with the prefix rewritten; carried: {', '.join(untracked.get('carried', [])) or '-'}")
        for b in untracked.get("binaries", []):
            print(f"  warning: {b} embeds the old prefix {result.source} (binary file, not rewritten)")
    verify = info.get("verify")
    if verify:
        print("  verified: records equal, source unchanged, importlib.metadata view equal")
    print(f"build log: {result.log}")
    return 0
