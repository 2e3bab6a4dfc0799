"""``envtool doctor``: say whether a deep-learning environment will work at scale, and how to fix it.

One line per check (status, finding, fix); exit 0 when nothing failed, 1 when a check failed,
2 on bad input. The checks live in :mod:`envtool.checks`.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Optional

from envtool.cli.common import add_json, name_arg, path_arg, print_json, seconds_arg
from envtool.core import term
from envtool.core.term import LiveStatus, paint

_MARK = {"ok": "ok", "warn": "WARN", "fail": "FAIL", "skipped": "skip"}
_COLOUR = {"ok": "ok", "warn": "warn", "fail": "fail", "skipped": ""}


def human(value) -> str:
    """A detail's value in words, not a Python repr: ``python 3.11.7, torch 2.3.1`` for a mapping,
    ``a, b`` for a list, ``yes``/``no`` for a flag, ``-`` for nothing."""
    if isinstance(value, dict):
        return ", ".join(f"{str(k).replace('_', ' ')} {human(v)}" for k, v in value.items()) or "-"
    if isinstance(value, (list, tuple, set)):
        sep = "; " if any(isinstance(v, dict) for v in value) else ", "
        return sep.join(human(v) for v in value) or "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.2f}"
    if value is None:
        return "-"
    return str(value)


def register(sub) -> None:
    p = sub.add_parser("doctor", help="check an environment: versions, Horovod capabilities, start method, scripts",
                       description="Examine an environment (default: $CONDA_PREFIX, else $VIRTUAL_ENV; with "
                                   "neither and no --script there is nothing to examine: exit 2) and print one line "
                                   "per check with a fix. The spec and lock the environment records "
                                   "(.envtool/create.json, conda-lock.yml) are used unless --spec/--lock are given. "
                                   "Exit 0 when nothing failed, 1 when a check failed, 2 on bad input.")
    p.add_argument("--prefix", type=path_arg, help="the environment to examine")
    p.add_argument("--spec", type=name_arg, help="spec the environment should match (name or file)")
    p.add_argument("--site", type=name_arg, help="site whose launcher and modules apply (default: the spec's)")
    p.add_argument("--lock", type=path_arg, metavar="FILE", help="lockfile to compare the environment with")
    p.add_argument("--script", type=path_arg, metavar="PATH", nargs="+", action="extend", default=[],
                   help="training script(s) or project directories to scan statically for risky patterns "
                        "(local imports are followed)")
    p.add_argument("--entry", type=path_arg, metavar="FILE", nargs="+", action="extend", default=[],
                   help="entry-point script(s) of the --script project: only they and their imports are scanned "
                        "(default: files named in --script and files with an if __name__ == \"__main__\": guard)")
    p.add_argument("--launch", choices=("horovod", "mpi", "torchrun", "lightning", "tf-multiworker", "single"),
                   help="how the scripts are launched (default: decided per entry point from its code)")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 when the script scan leaves a warn finding (same as --fail-on warn)")
    p.add_argument("--fail-on", choices=("warn", "info"),
                   help="exit 1 when the script scan leaves a finding at this level or above")
    p.add_argument("--max-source-mb", type=float, default=None, metavar="MB",
                   help="stop the script scan past this much Python source (default 8)")
    p.add_argument("--max-files", type=int, default=None, metavar="N",
                   help="stop the script scan past this many Python files (default 20000)")
    p.add_argument("--only", metavar="ID", nargs="+", action="extend", default=[],
                   help="run only these checks (ids as shown in the output; see --list)")
    p.add_argument("--list", action="store_true", help="list the checks (id, title) and exit")
    p.add_argument("--timeout", type=seconds_arg, default=120.0, help="seconds each environment probe may take (120)")
    add_json(p)
    p.set_defaults(func=run)


def default_prefix():
    """The active environment: ``$CONDA_PREFIX``, else ``$VIRTUAL_ENV``, else None (never envtool's own
    interpreter, which is not the user's environment)."""
    for var in ("CONDA_PREFIX", "VIRTUAL_ENV"):
        if os.environ.get(var):
            return Path(os.environ[var])
    return None


def _records(prefix: Path):
    """What the environment says about itself: ``(spec name or None, lock path or None)`` from
    ``PREFIX/.envtool/create.json`` (written by ``envtool create``) and ``PREFIX/conda-lock.yml``
    (its own lock, :mod:`envtool.steps.create.lock_step`)."""
    import json

    spec = None
    try:
        with open(prefix / ".envtool" / "create.json", "rb") as fh:
            data = json.loads(fh.read(16 * 1024 * 1024).decode("utf-8"))
        if isinstance(data, dict) and isinstance(data.get("spec"), str) and data["spec"]:
            spec = data["spec"]
    except (OSError, ValueError):
        pass
    lock = prefix / "conda-lock.yml"
    return spec, lock if lock.is_file() and not lock.is_symlink() else None


def _site(name: str):
    """The site file ``name`` (a bundled or ``$ENVTOOL_SITE_PATH`` site, or a path), parsed.

    Returns:
        :class:`envtool.spec.sites.SiteFile` (``name``, ``modules``, ``launcher``, ``scheduler``,
        ``env``: what the checks read of a site).
    Raises:
        SpecError: unknown site or a bad site file (exit 2).
    """
    from envtool.spec import sites

    return sites.load_site(sites.find(name))


def _resolve(args):
    """Validate the options into a :class:`envtool.checks.Context` (UsageError/SpecError: exit 2)."""
    from envtool.checks import Context
    from envtool.cli.common import load_spec
    from envtool.core.errors import UsageError

    prefix = Path(args.prefix).expanduser() if args.prefix else default_prefix()
    if prefix is None:
        if args.script or getattr(args, "entry", None):  # the scan needs no environment
            scripts, options = _script_options(args, _scripts(args))
            ctx = Context(prefix=None, scripts=tuple(scripts), environ=dict(os.environ), timeout=args.timeout)
            options["site_file"] = _site(args.site) if args.site else None
            ctx.script_options = options
            return ctx
        raise UsageError("nothing to examine: give --prefix PREFIX (an environment), activate one ($CONDA_PREFIX "
                         "or $VIRTUAL_ENV), or give --script PATH to scan a training script")
    if not prefix.is_dir():
        raise UsageError(f"--prefix {prefix}: no such directory")
    from envtool.core.prefix import PrefixData

    if not PrefixData(prefix).python.exists():
        raise UsageError(f"--prefix {prefix}: not an environment (no bin/python)")
    spec = site = None
    recorded_spec, recorded_lock = _records(prefix)
    args.records = []
    if args.spec:
        spec = load_spec(args.spec, site=args.site)
        site = spec.site
    elif recorded_spec:
        from envtool.core.errors import SpecError

        try:
            spec = load_spec(recorded_spec, site=args.site, quiet=True)
            site = spec.site
            args.records.append(f"spec {recorded_spec} (from {prefix / '.envtool' / 'create.json'})")
        except SpecError as exc:
            args.records.append(f"spec {recorded_spec} recorded in .envtool/create.json does not load ({exc})")
            if args.site:
                site = _site(args.site)
    if spec is None and site is None and args.site:
        site = _site(args.site)
    if not args.lock and recorded_lock is not None:
        args.lock = str(recorded_lock)
        args.records.append(f"lock {recorded_lock} (the environment's own)")
    lock = None
    if args.lock:
        lock = Path(args.lock)
        from envtool.core.inputs import check_input

        check_input(lock, "--lock")
        if not lock.is_file():
            raise UsageError(f"--lock {args.lock}: no such file")
        from envtool.checks import lockdrift

        lockdrift.read(Context(prefix=prefix, lock=lock))  # UsageError (exit 2) for a bad lock, before any check
    scripts, options = _script_options(args, _scripts(args))
    ctx = Context(prefix=prefix.resolve() if not prefix.is_symlink() else prefix, spec=spec, site=site,
                  lock=lock, scripts=tuple(scripts), environ=dict(os.environ), timeout=args.timeout)
    if scripts:
        options["site_file"] = _scan_site(args, site)
        options["prefix"] = str(prefix)
    ctx.script_options = options
    return ctx


def _scan_site(args, site):
    """The site file whose launch the script scan suggests: ``--site``'s (a bad one is exit 2), else
    the spec's site's file when one by that name loads, else None."""
    from envtool.core.errors import SpecError

    if args.site:
        return site if hasattr(site, "launch") else _site(args.site)
    name = getattr(site, "name", None)
    if not name:
        return None
    try:
        return _site(name)
    except SpecError:  # the spec names a site no file describes: nothing to suggest from
        return None


def _scripts(args):
    """``--script`` paths, each an existing file or directory (UsageError, exit 2)."""
    from envtool.core.errors import UsageError

    scripts = []
    for s in args.script:
        path = Path(s)
        if not (path.is_file() or path.is_dir()):
            raise UsageError(f"--script {s}: no such file or directory")
        scripts.append(path)
    return scripts


def _script_options(args, scripts):
    """``--entry``, ``--strict``/``--fail-on``, ``--launch`` and the scan's limits, checked
    (UsageError, exit 2). Returns ``(scripts, options)``: the scripts to scan (the ``--entry`` files
    when no ``--script`` is given) and the context's ``script_options``."""
    from envtool.checks.scan import Limits
    from envtool.core.errors import UsageError

    entries = []
    for e in getattr(args, "entry", []) or []:
        path = Path(e)
        if not path.is_file():
            raise UsageError(f"--entry {e}: no such file (expected a Python script)")
        entries.append(path)
    if entries and not scripts:
        scripts = list(entries)
    for opt, val in (("--strict", getattr(args, "strict", False)), ("--fail-on", getattr(args, "fail_on", None)),
                     ("--launch", getattr(args, "launch", None))):
        if val and not scripts:
            raise UsageError(f"{opt}: applies to the script scan; give --script PATH")
    defaults = Limits()
    mb, files = getattr(args, "max_source_mb", None), getattr(args, "max_files", None)
    if mb is not None and not mb > 0:
        raise UsageError(f"--max-source-mb {mb}: expected a positive number of MiB")
    if files is not None and files < 1:
        raise UsageError(f"--max-files {files}: expected a positive number of files")
    limits = Limits(max_bytes=int(mb * 1048576) if mb is not None else defaults.max_bytes,
                    max_files=files if files is not None else defaults.max_files)
    return scripts, {"entries": tuple(entries), "launch": getattr(args, "launch", None), "limits": limits}


def fail_level(args) -> Optional[str]:
    """The lowest script-finding level that makes doctor exit 1 (``--strict`` = ``warn``), or None."""
    level = getattr(args, "fail_on", None)
    if getattr(args, "strict", False) and level is None:
        level = "warn"
    return level


def format_text(findings, verbose: bool = False, columns: Optional[int] = None) -> str:
    """The human report: ``STATUS  id  summary``, then items and ``fix:`` indented (an ``ok``
    finding's ``fix:`` only when its check set one: the script scan's launch line).

    The summary, the items and ``-v``'s details are wrapped to ``columns`` (default: stdout's
    width, :func:`envtool.core.term.width`: the terminal's, else ``COLUMNS``, else 80), each
    continuation line indented under its text. A ``fix:`` line is left whole: it often holds a
    command to paste, which a line break would cut in two."""
    columns = columns or term.width(sys.stdout)
    lines = []
    width = max([len(f.id) for f in findings] + [10])
    pad = " " * (5 + 1 + width + 4)
    for f in findings:
        mark = _MARK[f.status]
        head = term.wrap(f"{mark}{' ' * (6 - len(mark))}{f.id:<{width}}  {f.summary}", columns,
                         rest=" " * (6 + width + 2))
        head[0] = paint(mark, _COLOUR[f.status]) + head[0][len(mark):]
        lines += head
        for item in f.details.get("items", []) if (verbose or f.status in ("warn", "fail")) else []:
            lines += term.wrap(item, columns, first=pad + "- ", rest=pad + "  ")
        if f.fix and f.status != "skipped":  # an ok finding has a fix only when its check set one
            lines.append(f"{pad}fix: {f.fix}")
        if verbose:
            for k, v in f.details.items():
                if k != "items":
                    lines += term.wrap(f"{k.replace('_', ' ')}: {human(v)}", columns, first=pad, rest=pad + "  ")
    return "\n".join(lines)


def run(args) -> int:
    from envtool.checks import registry, runner

    started = time.monotonic()
    if args.list:
        checks = registry.all_checks()
        if args.json:
            print_json({"checks": [{"id": c.id, "title": c.title, "fix": c.fix, "needs": list(c.needs)}
                                   for c in checks]})
        else:
            for c in checks:
                print(f"{c.id:<18} {c.title}")
        return 0
    only = tuple(args.only)
    if args.script and only and "script" not in only:
        only += ("script",)  # --script asks for the scan: --only does not silently drop it
    ctx = _resolve(args)
    if ctx.prefix is None:
        only = ("script",)  # no environment: the scan is all there is to do
    checks = registry.select(only)
    quiet = getattr(args, "quiet", False) or args.json
    what = f"{ctx.prefix}" if ctx.prefix is not None else "the scripts only (no environment given)"
    n = len(checks)
    if not quiet:
        for line in getattr(args, "records", []):
            print(f"doctor: using {line}", file=sys.stderr)
    with LiveStatus("doctor: ", sys.stderr) as live:
        if ctx.scripts and any(c.id == "script" for c in checks):
            from envtool.checks import script

            if not quiet:
                live.update("scanning " + ", ".join(str(p) for p in ctx.scripts))
            script.run_scan(ctx)  # a scan limit or an unreadable script: exit 2 before any check runs
        if not quiet:
            live.update(f"examining {what} ({n} check{'' if n == 1 else 's'})")
        finished = set()

        def on_done(finding, done: int, total: int) -> None:
            finished.add(finding.id)
            if not quiet:
                left = [c.id for c in checks if c.id not in finished] if live.live else []
                live.update(f"examining {what}: {done}/{total} checks done" +
                            (f", running {', '.join(left)}" if left else ""), keep=False)

        findings = runner.run_checks(ctx, checks, on_done=on_done)
    status = runner.exit_status(findings)
    gate = fail_level(args)
    gated = []
    if gate is not None:
        levels = ("warn",) if gate == "warn" else ("warn", "info")
        for f in findings:
            if f.id == "script":
                gated = [i for i in f.details.get("issues", []) if i.get("level") in levels]
                if gated or f.details.get("omitted"):
                    status = max(status, 1)
    counts = {s: sum(1 for f in findings if f.status == s) for s in ("ok", "warn", "fail", "skipped")}
    seconds = time.monotonic() - started
    if args.json:
        print_json({"prefix": str(ctx.prefix) if ctx.prefix is not None else None,
                    "records": getattr(args, "records", []), "spec": ctx.spec.name if ctx.spec is not None else None,
                    "site": getattr(ctx.site, "name", None), "lock": str(ctx.lock) if ctx.lock else None,
                    "scripts": [str(s) for s in ctx.scripts], "ok": status == 0, "exit_status": status,
                    "fail_on": gate, "gated": len(gated),
                    "counts": counts, "seconds": round(seconds, 3), "findings": [f.to_dict() for f in findings]})
    else:
        print(format_text(findings, verbose=getattr(args, "verbose", False)))
        print(", ".join(f"{n} {s}" for s, n in counts.items()) + f" ({seconds:.1f} s)")
        if gated and gate is not None:
            print(f"doctor: {len(gated)} script finding(s) at level {gate} or above remain (--"
                  f"{'strict' if getattr(args, 'strict', False) and not getattr(args, 'fail_on', None) else 'fail-on ' + gate}"
                  "): exit status 1", file=sys.stderr)
    return status
