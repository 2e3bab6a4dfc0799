"""``envtool pack --prefix PREFIX|SPEC --format squashfs|tar [-o FILE] [--json]``: one file from an environment,
with its lockfile and SBOM, for staging to node-local storage (:mod:`envtool.steps.pack`).

Prints the file, its size and the lock hash (sha256 of the lockfile inside); ``--json``:
``{"ok", "error", "exit", "path", "format", "kind", "lock_sha256", "size", "seconds", ...}``. An
environment that cannot be packed is refused with the reason (exit 2).
"""
from __future__ import annotations

from envtool.cli.common import add_dry_run, add_environment_argument, add_json, path_arg, print_json


def register(sub) -> None:
    p = sub.add_parser("pack", help="pack an environment into one file (tar or squashfs) for node-local staging",
                       description="Pack an environment into one file that job scripts stage to node-local storage "
                                   "(envtool jobscript --stage FILE). Conda environments go through conda-pack; "
                                   "venvs are relocated by envtool and need their base interpreter at the same path "
                                   "on the compute nodes. The file carries the lockfile (its sha256 is printed) and a "
                                   "CycloneDX SBOM. Only regular files, directories and links inside the "
                                   "environment are carried: a socket, FIFO, device node, set-user-ID, set-group-ID or "
                                   "capability file, a link leaving it, or a directory that cannot be read is "
                                   "refused with its path (exit 2). See "
                                   "docs/staging.md.")
    add_environment_argument(p, "the environment", spec_ok=True)
    p.add_argument("--format", required=True, choices=("squashfs", "tar"),
                   help="tar: unpacked on each node (then relocated); squashfs: mounted read-only with squashfuse")
    p.add_argument("-o", "--output", type=path_arg, metavar="FILE", help="the file to write (default ./NAME.FORMAT)")
    p.add_argument("--dest-prefix", type=path_arg, metavar="DIR",
                   help="squashfs: the directory the image will be mounted at (default: the environment's prefix)")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists")
    p.add_argument("--allow-outside-links", action="store_true",
                   help="keep symbolic links that leave the environment (as links: their targets must exist at "
                        "those paths on every node) instead of refusing the pack")
    add_dry_run(p, "written or replaced")
    add_json(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from envtool.cli.common import environment_arg, prefix_given
    from envtool.steps import pack

    prefix = environment_arg(prefix_given(args))
    output = Path(args.output) if args.output else None
    if args.dry_run:
        return _dry_run(args, pack.compose(prefix, args.format, output, args.dest_prefix, args.force,
                                           args.allow_outside_links))
    result = pack.pack(prefix, args.format, output, args.dest_prefix, force=args.force, verbose=args.verbose,
                       quiet=args.quiet or args.json, allow_outside_links=args.allow_outside_links)
    if args.json:
        print_json(result.to_dict())
        return 0
    print(f"{result.path}")
    print(f"  {result.kind} environment {result.prefix}, {result.format}, {result.size / 1e6:.1f} MB "
          f"in {result.seconds:.1f} s")
    print(f"  lock sha256 {result.lock_sha256} ({result.lock}, {result.lock_source})")
    for note in result.notes:
        print(f"  note: {note}")
    return 0


def _dry_run(args, plan) -> int:
    """``pack --dry-run``: the plan :func:`envtool.steps.pack.pack` would run (an environment that
    cannot be packed, or an output that may not be written, is refused as it would be: exit 2);
    nothing is made or changed."""
    job = plan.job
    replaces = job.out.exists() or job.out.is_symlink()
    if args.json:
        print_json({"dry_run": True, "prefix": str(job.prefix), "kind": job.kind, "path": str(job.out),
                    "replaces": replaces, "plan": plan.to_dict()})
        return 0
    print(plan.format())
    print(f"dry run: would pack the {job.kind} environment {job.prefix} into {job.out}"
          + (" (replacing that file)" if replaces else "") + "; nothing was changed")
    return 0
