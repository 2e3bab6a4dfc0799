"""``envtool lock``: write a conda-lock file for a spec (a solve) or a prefix (a snapshot); check locks."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Dict, List

from envtool.cli.common import add_json, add_spec_site, load_spec, name_arg, path_arg, print_json


def register(sub) -> None:
    """Add the ``lock`` command to the ``sub`` subparsers."""
    p = sub.add_parser(
        "lock", help="lock a spec or an existing prefix (conda-lock format); check committed locks",
        description="Write a conda-lock v1 file (conda-lock.yml). 'envtool lock SPEC' solves without creating "
                    "anything: conda packages with py-rattler per platform, pip packages with pip's resolver "
                    "(URLs and SHA-256). 'envtool lock --prefix P' snapshots an existing environment. "
                    "'envtool lock --check [SPEC...]' fails (exit 1) naming each spec whose committed lock is stale.")
    p.add_argument("spec", nargs="*", type=name_arg, help="spec name or file (one; several or none with --check)")
    p.add_argument("--prefix", type=path_arg, help="snapshot this environment instead of solving a spec")
    p.add_argument("--platform", action="append", metavar="PLATFORM",
                   help="platform to lock (repeatable; default: the spec's platforms)")
    p.add_argument("--virtual-package", action="append", default=[], metavar="NAME=VERSION",
                   help="override a virtual package the solve assumes (__cuda=11.8, __glibc=2.28; NAME= drops it)")
    p.add_argument("-o", "--output", type=path_arg, metavar="FILE",
                   help="where to write (default: ./SPEC.conda-lock.yml, or ./<prefix name>.conda-lock.yml)")
    p.add_argument("--check", action="store_true",
                   help="check that committed locks match their specs' content hash (exit 1 naming stale ones)")
    p.add_argument("--lock-dir", action="append", type=path_arg, metavar="DIR",
                   help="with --check: look for SPEC.conda-lock.yml here (default: $ENVTOOL_LOCK_PATH, lockfiles/)")
    add_spec_site(p)
    add_json(p)
    p.set_defaults(func=run)


def _progress(args):
    quiet = args.quiet or args.json

    def say(text: str) -> None:
        if not quiet:
            print(text, file=sys.stderr, flush=True)
    return say


def _overrides(values):
    from envtool.core.errors import UsageError

    out = {}
    for v in values:
        name, eq, version = v.partition("=")
        if not eq or not name.startswith("__"):
            raise UsageError(f"--virtual-package {v!r}: expected NAME=VERSION with NAME starting with '__' "
                             "(e.g. __cuda=11.8, __glibc=2.28; __cuda= drops it)")
        out[name] = version
    return out


def run(args) -> int:
    """Dispatch to a spec solve, a prefix snapshot or ``--check``.

    Returns:
        0 written (or every lock current), 1 a stale or missing lock with ``--check``.
    Raises:
        UsageError: conflicting or missing arguments (exit 2).
    """
    from envtool.core.errors import UsageError

    if args.check:
        return run_check(args)
    if args.prefix:
        if args.spec:
            raise UsageError("give either SPEC or --prefix, not both")
        return run_prefix(args)
    if len(args.spec) != 1:
        raise UsageError("envtool lock: expected one SPEC (or --prefix P, or --check [SPEC...])")
    return run_spec(args)


def _summary(data, path: Path) -> dict:
    counts: Dict[str, Dict[str, int]] = {p: {"conda": 0, "pip": 0} for p in data.platforms}
    built: Dict[str, List[str]] = {p: [] for p in data.platforms}
    for pkg in data.packages:
        counts[pkg.platform][pkg.manager] += 1
        if pkg.built:
            built[pkg.platform].append(pkg.key[1])
    per = {p: {**counts[p], "built": built[p]} for p in data.platforms}
    return {"ok": True, "lock": str(path), "kind": data.kind, "spec": data.spec, "spec_hash": data.spec_hash,
            "site": data.site, "platforms": list(data.platforms), "channels": list(data.channels), "packages": per}


def _report(args, data, path: Path) -> int:
    summary = _summary(data, path)
    if args.json:
        print_json(summary)
        return 0
    for platform, n in summary["packages"].items():
        built = f", built here: {', '.join(n['built'])}" if n["built"] else ""
        print(f"{platform}: {n['conda']} conda, {n['pip']} pip packages{built}")
    print(f"wrote {path}")
    return 0


def run_spec(args) -> int:
    """``envtool lock SPEC``: solve and write the lock."""
    from envtool.lock import build, lockio

    spec = load_spec(args.spec[0], args.site, args.site_file)
    data = build.lock_spec(spec, platforms=args.platform, site=args.site or "",
                           virtual_overrides=_overrides(args.virtual_package), progress=_progress(args))
    path = Path(args.output or f"{spec.name}.conda-lock.yml")
    data = build.relative_sources(data, path)
    lockio.write_lock(data, path)
    return _report(args, data, path)


def run_prefix(args) -> int:
    """``envtool lock --prefix P``: snapshot and write the lock."""
    from envtool.core.errors import UsageError
    from envtool.lock import build, lockio

    if args.platform or args.virtual_package:
        raise UsageError("--platform and --virtual-package apply to a spec solve, not to --prefix")
    prefix = Path(os.path.abspath(args.prefix))
    data = build.lock_prefix(prefix, site=args.site or "", progress=_progress(args))
    path = Path(args.output or f"{prefix.name}.conda-lock.yml")
    data = build.relative_sources(data, path)
    lockio.write_lock(data, path)
    return _report(args, data, path)


def run_check(args) -> int:
    """``envtool lock --check [SPEC...]``: exit 1 naming each spec whose committed lock is stale or missing."""
    from dataclasses import asdict

    from envtool.lock import check

    dirs = [Path(d) for d in args.lock_dir] if args.lock_dir else None
    committed = check.committed_locks(dirs)
    names = list(args.spec) or sorted(committed)
    results = [check.check_lock(n, committed.get(Path(n).stem if n.endswith((".yaml", ".yml")) else n))
               for n in names]
    ok = all(r.ok for r in results) and bool(results)
    if args.json:
        print_json({"ok": ok, "results": [asdict(r) for r in results]})
    else:
        if not results:
            print("no committed locks found", file=sys.stderr)
        for r in results:
            if r.ok:
                print(f"ok     {r.spec}  {r.lock}")
            else:
                print(f"STALE  {r.spec}: {r.reason}" if r.lock else f"MISSING {r.spec}: {r.reason}")
    return 0 if ok else 1
