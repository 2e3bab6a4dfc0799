"""Check 4, ``script``: the static scan of ``--script`` files and directories (:mod:`envtool.checks.scan`).

Status: ``warn`` when the scan shows a risk (an issue of level ``warn``); ``ok`` when it shows
none, with the issues it could not prove or that are judgement calls (level ``info``) listed as
items (printed with ``-v``, always in ``--json``). ``details.mechanisms`` names, for each rule that
fired, what would satisfy it (:data:`envtool.checks.scan.MECHANISMS`); ``details.programs`` the
entry points, the launch assumed for each and why; ``details.suppressed`` the issues silenced by
``# envtool: ignore[rule]`` comments; ``details.omitted`` the issues past the report's cap. The
text items say the launch assumed once per program (``launch assumed for ENTRY: …``) and list its
issues below without it; ``details.issues`` keeps each message whole. The check never fails: ``doctor --strict`` / ``--fail-on`` turns remaining issues into exit status 1.

For each program whose launch kind has a job-script launch (:func:`launch_for`), the fix (also on
an ``ok`` finding) and ``details.programs[].jobscript`` give the ``envtool jobscript`` line that
starts it that way, shell-quoted: a torch.distributed (DDP) program ``--launch torchrun``, or the
site's default DDP launch when its file names one; an MPI or Horovod program ``--launch launcher``
(the site's launcher line) where the site's default is a DDP launch.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from envtool.checks.model import Context, Finding
from envtool.checks.registry import check, finding

if TYPE_CHECKING:  # the scan is imported when a check runs (import time of the CLI)
    from envtool.checks.scan import ScanReport

ID = "script"


def run_scan(ctx: Context) -> "ScanReport":
    """The :class:`envtool.checks.scan.ScanReport` of ``ctx.scripts`` (made once per context).

    Raises:
        UsageError: a script cannot be read or a scan limit is passed (exit status 2).
    """
    from envtool.checks import scan

    if ctx.script_report is None:
        opts = getattr(ctx, "script_options", None) or {}
        ctx.script_report = scan.scan_project(ctx.scripts, opts.get("entries", ()), opts.get("launch"),
                                              opts.get("limits"))
    return ctx.script_report


def _items(issues, programs) -> List[str]:
    """The report's lines: per program (in the order its first issue comes), ``launch assumed for
    ENTRY: …`` once when any of its messages carries that note, then its issues as
    ``PATH:LINE: [rule] message; fix: …`` with the note taken off.

    Args:
        issues: the :class:`~envtool.checks.scan.ScanIssue` list, in report order.
        programs: the report's programs (``entry``, ``launch``, ``reason``).
    Returns:
        the lines.
    """
    from envtool.checks.scan.model import LAUNCHES, assumed_text

    known = {p["entry"]: p for p in programs if p.get("launch") in LAUNCHES}
    notes = {entry: assumed_text(p["launch"], p["reason"]) for entry, p in known.items()}
    groups: Dict[str, List[str]] = {}
    headed = set()
    for i in issues:
        note = notes.get(i.entry, "")
        message = i.message
        if note and message.endswith(note):
            message = message[:-len(note)]
            headed.add(i.entry)
        groups.setdefault(i.entry, []).append(
            f"{i.path}:{i.line}: [{i.rule}]{' (info)' if i.level == 'info' else ''} {message}; fix: {i.fix}"
            + (f" (edit line {i.edit['line']}: {' / '.join(x.strip() for x in i.edit['new'].splitlines())})"
               if i.edit else ""))
    items: List[str] = []
    for entry, lines in groups.items():
        if entry in headed:
            p = known[entry]
            items.append(f"launch assumed for {entry}: {LAUNCHES[p['launch']]}, because: {p['reason']}")
        items += lines
    return items


def launch_for(kind: str, site: Any) -> Optional[Tuple[str, str]]:
    """The ``jobscript --launch`` value for a program of launch kind ``kind`` (a key of
    :data:`envtool.checks.scan.LAUNCHES`) at ``site`` (a :class:`~envtool.spec.sites.SiteFile` or
    None), and why; None when there is nothing to add (a single process, Lightning, an MPI or
    Horovod program where ``jobscript`` already writes the site's launcher line) or no job-script
    launch fits (a DDP program at a site whose scheduler the DDP launches are not written for).

    Raises:
        SpecError: ``site``'s scheduler is not registered (its file was already checked: a bug).
    """
    from envtool.scheduler import ddp

    sec = getattr(site, "launch", None)
    if kind in ("horovod", "mpi"):
        if sec is not None and sec.default in ddp.LAUNCHES:
            return ddp.LAUNCHER, (f"an MPI or Horovod program: the site's launcher line, not site {site.name}'s "
                                  f"default {sec.default} launch for DDP")
        return None
    if kind != "torchrun":
        return None
    if site is not None:
        from envtool import scheduler
        from envtool.scheduler.model import capabilities

        caps = capabilities(scheduler.get(site.scheduler))
        if not caps.ddp_ready:
            return None
        if sec is not None and sec.default in ddp.LAUNCHES:
            return sec.default, ddp.choose(site, None).origin
    return ddp.TORCHRUN, "a torch.distributed program: torchrun starts each node's ranks"


def jobscript_line(entry: str, launch: str, site: Any, prefix: Optional[str]) -> str:
    """``envtool jobscript [--prefix P] [--site S] --nodes 1 --launch L -- python ENTRY``, each word
    quoted for the shell."""
    import shlex

    words = ["envtool", "jobscript"] + (["--prefix", prefix] if prefix else []) + \
        (["--site", site.name] if site is not None else []) + ["--nodes", "1", "--launch", launch, "--", "python",
                                                               entry]
    return shlex.join(words)


def _launch_lines(programs, opts) -> Tuple[List[dict], List[str], List[str]]:
    """The report's programs with ``jobscript`` (the line) and ``jobscript_launch`` added where a
    launch fits, the item lines (``launch for ENTRY: LINE (why)``) and the fix parts."""
    site, prefix = opts.get("site_file"), opts.get("prefix")
    out, items, fixes = [], [], []
    for p in programs:
        p = dict(p)
        fit = launch_for(p.get("launch", ""), site)
        if fit is None and p.get("launch") == "torchrun" and site is not None:
            items.append(f"launch for {p['entry']}: no jobscript launch at site {site.name} (scheduler "
                         f"{site.scheduler or 'none'}): envtool's DDP launches need a scheduler that names each "
                         "task's rank and the job's first node (Slurm; PBS with Cray PALS); start it as the site "
                         "documents")
        if fit is not None:
            line = jobscript_line(p["entry"], fit[0], site, prefix)
            p["jobscript"], p["jobscript_launch"] = line, fit[0]
            items.append(f"launch for {p['entry']}: {line} ({fit[1]})")
            fixes.append(f"start {p['entry']} with: {line}")
        out.append(p)
    return out, items, fixes


@check(ID, "Training script scan (--script)", order=40,
       fix="apply the change named on each line")
def run(ctx: Context) -> Finding:
    """The ``script`` finding of ``ctx`` (``skipped`` without ``--script``, else ``ok`` or ``warn``)."""
    from envtool.checks import scan

    if not ctx.scripts:
        return finding(ID, "skipped", "no --script given")
    report = run_scan(ctx)
    issues = report.issues
    names = ", ".join(str(p) for p in ctx.scripts)
    files = sorted({i.path for i in issues})
    programs, launch_items, launch_fixes = _launch_lines(report.programs,
                                                         getattr(ctx, "script_options", None) or {})
    items = launch_items + _items(issues, report.programs)
    if report.omitted:
        items.append(f"... {report.omitted} more issue(s) not listed (the report keeps the first {len(issues)})")
    warns = [i for i in issues if i.level != "info"]
    mechanisms = {r: list(scan.MECHANISMS[r]) for r in sorted({i.rule for i in issues}) if r in scan.MECHANISMS}
    infos = len(issues) - len(warns)
    details: Dict[str, Any] = dict(items=items, issues=[i.to_dict() for i in issues], files=files, mechanisms=mechanisms,
                   programs=programs, suppressed=[i.to_dict() for i in report.suppressed],
                   omitted=report.omitted, source_files=report.files, source_bytes=report.bytes)
    sup = f"; {len(report.suppressed)} suppressed" if report.suppressed else ""
    if not warns and not report.omitted:
        note = f"; {infos} unproven note(s) (-v shows them)" if infos else ""
        return finding(ID, "ok", f"{names}: no risky pattern found{note}{sup}", "; ".join(launch_fixes), **details)
    note = f" and {infos} unproven note(s)" if infos else ""
    more = f" (+{report.omitted} not listed)" if report.omitted else ""
    return finding(ID, "warn", f"{len(warns)} risky pattern(s){more}{note} in {names}{sup}",
                   "; ".join(["apply the fix named on each line"] + launch_fixes), **details)
