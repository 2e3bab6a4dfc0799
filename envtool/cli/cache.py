"""``envtool cache``: show, trim and publish the user's cache of built Horovod wheels.

``list`` and ``prune`` act on the user's cache (``$ENVTOOL_CACHE_DIR``, else
``$XDG_CACHE_HOME/envtool``, else ``~/.cache/envtool``); ``publish --to DIR`` copies its entries
(wheel, ``key.json``, ``build.log``) into a site cache root that users then name in
``$ENVTOOL_CACHE_PATH`` or a site file's ``build_caches`` (see :mod:`envtool.horovod.cache`).
"""
from __future__ import annotations

from typing import Dict, Optional

from envtool.cli.common import add_dry_run, add_json, add_yes, finite_number_arg, path_arg, print_json


#: argparse ``type`` for ``--older-than``: a finite number of days >= 0.
_days_arg = finite_number_arg("days", zero_ok=True)


def register(sub) -> None:
    p = sub.add_parser("cache", help="show, trim and publish the cache of built Horovod wheels",
                       description="The user's cache of built Horovod wheels: list it, prune it, or publish its "
                                   "wheels (with key.json and build.log) into a read-only site cache that other "
                                   "users name in $ENVTOOL_CACHE_PATH or in a site file's build_caches.")
    csub = p.add_subparsers(dest="cache_command", metavar="ACTION")
    ls = csub.add_parser("list", help="the cached wheels (key digest, wheel, size, last use), then what else is in "
                                      "envtool's cache and uv's and pip's (sizes with --du)",
                         description="The cached Horovod wheels, each sized from its own few files (key.json records "
                                     "the wheel's size), then the directories of envtool's cache and the caches of "
                                     "uv and pip. Those directories are not measured by default, so the command "
                                     "costs the same however large the caches grow; --du walks them and prints "
                                     "exact sizes (hard links counted once).")
    ls.add_argument("--du", action="store_true",
                    help="measure every directory of the caches exactly (walks every file: slow on a large cache)")
    add_json(ls)
    ls.set_defaults(func=run_list)
    pr = csub.add_parser("prune", help="delete wheels not used for DAYS days (and incomplete entries), build logs "
                                       "older than DAYS days, and kept bytecode no environment links")
    pr.add_argument("--older-than", type=_days_arg, default=30.0, metavar="DAYS",
                    help="delete entries not used for this many days (default 30; 0 deletes every entry)")
    add_dry_run(pr, "deleted")
    add_yes(pr)
    add_json(pr)
    pr.set_defaults(func=run_prune)
    pub = csub.add_parser("publish", help="copy cached wheels into a site cache directory (admin)",
                          description="Copy the user's cached Horovod wheels, each with its key.json and build.log, "
                                      "into DIR/horovod-wheels/<key>/, group-readable (files g+r, directories "
                                      "g+rx). Users then set ENVTOOL_CACHE_PATH=DIR (or the site file lists DIR "
                                      "under build_caches) and a create whose build key matches never compiles. A "
                                      "stale entry published earlier under the same key is replaced; anything "
                                      "else in its place is left alone.")
    pub.add_argument("--to", required=True, type=path_arg, metavar="DIR", help="the site cache root")
    pub.add_argument("--key", action="append", default=[], metavar="DIGEST",
                     help="publish only this entry (a key digest or its first characters, as 'cache list' shows; "
                          "repeatable; default: every complete entry)")
    add_dry_run(pub, "copied or replaced")
    add_json(pub)
    pub.set_defaults(func=run_publish)
    p.set_defaults(func=_no_action, cache_parser=p)


def _no_action(args) -> int:
    import sys

    args.cache_parser.print_help(sys.stderr)
    return 2


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def usage(measure: bool = True) -> dict:
    """What envtool's runs keep in caches, measured on disk (hard links counted once per cache).

    Args:
        measure: walk every directory and sum its files (``cache list --du``); False: only name
            them (one ``listdir`` of the cache root), every size ``None`` (``total_bytes`` too).
    Returns:
        ``{"root", "measured", "directories": {name: bytes}, "other": {name: bytes}, "total_bytes",
        "tools": [{"name", "path", "bytes"}]}``: the cache root's entries
        (:data:`envtool.core.paths.CACHE_ENTRIES`: wheels, conda packages, repodata, logs, fix-rule
        files, build directories, kept bytecode), anything else found there, and the caches of the
        tools envtool runs (uv's, pip's), which envtool fills but does not prune.
    """
    import os
    from pathlib import Path

    from envtool.cli.info import _pip_cache, _uv_cache
    from envtool.core.paths import CACHE_ENTRIES, CACHE_TAG, cache_root
    from envtool.core.sizes import tree_size
    from envtool.engines.installer import find_uv

    root = cache_root()
    dirs: Dict[str, Optional[int]] = {}
    other: Dict[str, Optional[int]] = {}
    try:
        names = sorted(os.listdir(root))
    except OSError:
        names = []
    for name in names:
        if name == CACHE_TAG:  # envtool's mark on a cache root it created (envtool.core.paths)
            continue
        (dirs if name in CACHE_ENTRIES else other)[name] = tree_size(root / name) if measure else None
    tools = []
    for name, path in (("uv", _uv_cache(find_uv()[0])), ("pip", _pip_cache())):
        p = Path(path)
        tools.append({"name": name, "path": str(p),
                      "bytes": (tree_size(p) if p.is_dir() else 0) if measure else None})
    total = sum(n or 0 for n in list(dirs.values()) + list(other.values())) if measure else None
    return {"root": str(root), "measured": measure, "directories": dirs, "other": other,
            "total_bytes": total, "tools": tools}


def run_list(args) -> int:
    """``cache list``: the wheel entries (each sized from its own files: the wheel, whose size
    ``key.json`` records, ``key.json`` and ``build.log``), then the caches' directories, measured
    only with ``--du`` (:func:`usage`), so that its cost does not grow with the files cached. A cache
    reached through another user's directory or link, not the user's, or that others can write is
    refused before anything in it is read (exit 2), as ``prune`` refuses it."""
    from envtool.core.paths import check_cache
    from envtool.horovod import cache

    check_cache("horovod-wheels", "logs", "bytecode")
    wc = cache.WheelCache()
    entries = wc.entries()
    use = usage(measure=args.du)
    if args.json:
        print_json({"cache": str(wc.dir), "site_caches": [str(r) for r in cache.site_roots()],
                    "entries": [e.to_json() for e in entries], "usage": use})
        return 0
    print(f"wheel cache {wc.dir}: {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}, "
          f"{_size(sum(e.size for e in entries))}")
    import time

    for e in entries:
        what = e.wheel.name if e.wheel else "(incomplete: no wheel)"
        detail = (f"{e.key.requirement}, {', '.join(f'{d} {v}' for d, v in e.key.frameworks)}, {e.key.python_tag}"
                  if e.key else "no readable key.json")
        print(f"  {e.digest}  {what}  {_size(e.size)}  last used {time.strftime('%Y-%m-%d', time.localtime(e.mtime))}"
              f"  ({detail})")
    for r in cache.site_roots():
        print(f"site cache (read-only, from ${cache.CACHE_PATH_VAR}): {r / 'horovod-wheels'}")
    def sized(n) -> str:
        return _size(n) if n is not None else "not measured"

    print(f"envtool's cache {use['root']}: " + (f"{_size(use['total_bytes'])} in all" if args.du else
                                                 "sizes not measured ('envtool cache list --du' measures them)"))
    for name, n in list(use["directories"].items()) + list(use["other"].items()):
        print(f"  {name + '/':16} {sized(n):>12}" + ("" if name in use["directories"] else "  (not envtool's)"))
    for t in use["tools"]:
        print(f"{t['name']}'s cache {t['path']}: {sized(t['bytes'])} (filled by envtool's installs; "
              f"{'uv cache prune' if t['name'] == 'uv' else 'pip cache purge'} trims it)")
    return 0


def run_prune(args) -> int:
    """Prune the cache: with ``--dry-run`` only say what would go; on a terminal ask first, as
    ``conda clean`` does (:func:`envtool.cli.common.confirm`; ``-y`` does not ask). A cache
    reached through another user's directory or link, or one that is not the user's or that
    others can write, is refused before anything is read (:func:`envtool.core.paths.check_cache`,
    exit 2). Inside it, only the user's own entries, logs and bytecode are deleted; another user's
    entry is kept and named (``"kept"`` in ``--json``)."""
    from envtool.cli.common import confirm, will_ask
    from envtool.core.paths import cache_root
    from envtool.horovod import cache

    from envtool.engines.installer import prune_bytecode

    from envtool.cli.common import progress_lines
    from envtool.core.paths import check_cache

    # the rule create applies (envtool.core.paths), before anything is read or deleted
    check_cache("horovod-wheels", "logs", "bytecode")
    wc = cache.WheelCache()
    seconds = args.older_than * 86400.0
    dry = args.dry_run or will_ask(args)  # what would go, before asking (or instead of deleting)
    kept: list = []  # entries of another user's, which prune never deletes
    if dry:
        gone = wc.prune(seconds, dry_run=True, kept=kept)
        pyc_count, pyc_bytes = prune_bytecode(dry_run=True)
        log_count, log_bytes = _prune_logs(seconds, dry_run=True)
        total = sum(e.size for e in gone) + pyc_bytes + log_bytes
        if not args.dry_run and (gone or pyc_count or log_count) and not confirm(
                args, f"cache prune will delete {len(gone)} wheel entr{'y' if len(gone) == 1 else 'ies'}, "
                      f"{log_count} build log(s) and {pyc_count} bytecode file(s) from {cache_root()} "
                      f"({_size(total)})"):
            print("nothing was deleted")
            return 0
    if not args.dry_run:
        with progress_lines(args, "cache prune: ") as say:  # stderr; a terminal: the phase with its clock
            say(f"pruning the wheel cache {wc.dir}")
            kept.clear()
            gone = wc.prune(seconds, kept=kept)
            say("deleting kept bytecode that no environment links")
            pyc_count, pyc_bytes = prune_bytecode()
            say(f"deleting build logs older than {args.older_than:g} days")
            log_count, log_bytes = _prune_logs(seconds)
    verb = "would delete" if args.dry_run else "deleted"
    if args.json:
        print_json({"cache": str(wc.dir), "older_than_days": args.older_than, "dry_run": args.dry_run,
                    "deleted": [e.to_json() for e in gone], "freed_bytes": sum(e.size for e in gone),
                    "bytecode": {"deleted": pyc_count, "freed_bytes": pyc_bytes},
                    "logs": {"deleted": log_count, "freed_bytes": log_bytes},
                    "total_freed_bytes": sum(e.size for e in gone) + pyc_bytes + log_bytes,
                    "kept": [dict(e.to_json(), owner=_owner(e.path)) for e in kept]})
        return 0
    for e in kept:
        print(f"kept {e.digest}: it belongs to {_owner(e.path)}, not to you; envtool deletes only your own entries")
    if pyc_count:
        print(f"{verb} {pyc_count} kept bytecode file(s) no environment links ({_size(pyc_bytes)})")
    if log_count:
        print(f"{verb} {log_count} build log(s) older than {args.older_than:g} days ({_size(log_bytes)})")
    for e in gone:
        print(f"{verb} {e.digest} ({e.wheel.name if e.wheel else 'incomplete'}, {_size(e.size)})")
    if args.dry_run:
        print(f"would prune {len(gone)} entr{'y' if len(gone) == 1 else 'ies'} from {wc.dir}, freeing "
              f"{_size(sum(e.size for e in gone))}; nothing was deleted (dry run)")
    else:
        print(f"pruned {len(gone)} entr{'y' if len(gone) == 1 else 'ies'} from {wc.dir}, freed "
              f"{_size(sum(e.size for e in gone))}")
    return 0


def _owner(path) -> str:
    """The owner of ``path`` (not followed), as :func:`envtool.core.paths.owner_name` writes it."""
    import os

    from envtool.core.paths import owner_name

    try:
        return owner_name(os.lstat(path).st_uid)
    except OSError:
        return "unknown"


def _prune_logs(older_than: float, dry_run: bool = False):
    """Delete build logs (``<cache>/logs/*.log``, regular files of the user) not written for
    ``older_than`` seconds (``dry_run``: only count them); returns ``(count, bytes)``. A log being
    written is never that old."""
    import os
    import stat
    import time

    from envtool.core.paths import cache_root

    logs = cache_root() / "logs"
    count = freed = 0
    now = time.time()
    try:
        names = os.listdir(logs)
    except OSError:
        return 0, 0
    for name in names:
        path = logs / name
        try:
            st = os.lstat(path)
            if not name.endswith(".log") or not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                continue
            if now - st.st_mtime >= older_than:
                if not dry_run:
                    os.unlink(path)
                count += 1
                freed += st.st_size
        except OSError:
            continue
    return count, freed


def run_publish(args) -> int:
    from pathlib import Path

    from envtool.core.errors import UsageError
    from envtool.core.paths import check_cache
    from envtool.horovod import cache

    check_cache("horovod-wheels")  # publish only what another user could not have planted
    wc = cache.WheelCache()
    entries = wc.entries()
    if args.key:
        chosen = []
        for k in args.key:
            match = [e for e in entries if e.digest.startswith(k.lower())] if k else []
            if len(match) != 1:
                raise UsageError(f"--key {k!r}: expected the digest (or a unique prefix) of an entry of {wc.dir} "
                                 f"({'none matches' if not match else f'{len(match)} match'}; see 'envtool cache list')")
            chosen += [m for m in match if m not in chosen]
        entries = chosen
    if not entries:
        raise UsageError(f"nothing to publish: {wc.dir} holds no built wheel")
    try:
        results = cache.publish(entries, Path(args.to), dry_run=args.dry_run)
    except OSError as exc:
        raise UsageError(f"cannot publish into {args.to}: {exc.strerror or exc}") from None
    if args.json:
        print_json({"to": str(Path(args.to) / "horovod-wheels"), "dry_run": args.dry_run, "entries": results})
    else:
        for r in results:
            print(f"{r['status']}: {r['digest']} {r.get('wheel') or ''}{' (' + r['reason'] + ')' if r.get('reason') else ''}")
        if args.dry_run:
            print("dry run: nothing was copied or replaced")
        else:
            import shlex

            print(f"users: export {cache.CACHE_PATH_VAR}={shlex.quote(str(Path(args.to).resolve()))} (or list it "
                  "under build_caches in the site file)")
    return 0
