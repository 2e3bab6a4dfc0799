"""``envtool diff --prefix P --lock FILE``: drift of an environment from a lock (exit 1 on drift)."""
from __future__ import annotations

import os
from pathlib import Path

from envtool.cli.common import add_json, path_arg, print_json


def register(sub) -> None:
    """Add the ``diff`` command to the ``sub`` subparsers."""
    p = sub.add_parser("diff", help="packages added, removed or changed in a prefix since a lock (exit 1 on drift)",
                       description="Compare an environment with a conda-lock file: packages added, removed and "
                                   "changed (version, conda build, archive hash where both sides know it, and a "
                                   "built Horovod's wheel SHA-256 where the lock records a wheel). Exit 1 on drift.")
    p.add_argument("--prefix", required=True, type=path_arg, help="the environment")
    p.add_argument("--lock", type=path_arg, metavar="FILE", help="the lock (default: PREFIX/conda-lock.yml, written by create)")
    p.add_argument("--platform", help="the lock's platform to compare with (default: this machine's)")
    add_json(p)
    p.set_defaults(func=run)


def run(args) -> int:
    """Compare ``--prefix`` with ``--lock``; returns 0 (no drift) or 1 (drift).

    Raises:
        UsageError: unreadable lock, or no entries for the platform (exit 2).
    """
    from envtool.lock import diff, lockio, snapshot
    from envtool.lock.model import pick_platform

    prefix = Path(os.path.abspath(args.prefix))
    lock_path = Path(args.lock) if args.lock else prefix / "conda-lock.yml"
    lock = lockio.read_lock(lock_path)
    platform = pick_platform(lock, args.platform, str(lock_path))
    installed = snapshot.snapshot(prefix, platform, lookup=False)
    report = diff.compare(lock.for_platform(platform), installed, platform, seeded=snapshot.seeded(prefix))
    if args.json:
        out = report.to_dict()
        out.update({"prefix": str(prefix), "lock": str(lock_path)})
        print_json(out)
    else:
        print(diff.format_report(report, str(lock_path), str(prefix)))
    return 0 if report.ok else 1
