"""Check 4, ``script``: the static scan of ``--script`` files and directories (:mod:`envtool.checks.scan`).

Status: ``warn`` when the scan shows a risk (an issue of level ``warn``); ``ok`` when it shows
none, with the issues it could not prove (level ``info``) listed as items (printed with ``-v``,
always in ``--json``). ``details.mechanisms`` names, for each rule that fired, what would
satisfy it (:data:`envtool.checks.scan.MECHANISMS`). The scan never fails the check: doctor's exit status is unchanged by it.
"""
from __future__ import annotations

from envtool.checks.registry import check, finding

ID = "script"


@check(ID, "Training script scan (--script)", order=40,
       fix="apply the change named on each line")
def run(ctx):
    from envtool.checks import scan

    if not ctx.scripts:
        return finding(ID, "skipped", "no --script given")
    issues = scan.scan_paths(ctx.scripts)
    names = ", ".join(str(p) for p in ctx.scripts)
    files = sorted({i.path for i in issues})
    items = [f"{i.path}:{i.line}: [{i.rule}]{' (info)' if i.level == 'info' else ''} {i.message}; fix: {i.fix}"
             for i in issues]
    warns = [i for i in issues if i.level != "info"]
    mechanisms = {r: list(scan.MECHANISMS[r]) for r in sorted({i.rule for i in issues}) if r in scan.MECHANISMS}
    infos = len(issues) - len(warns)
    if not warns:
        note = f"; {infos} unproven note(s) (-v shows them)" if infos else ""
        return finding(ID, "ok", f"{names}: no risky pattern found{note}", items=items,
                       issues=[i.to_dict() for i in issues], files=files, mechanisms=mechanisms)
    note = f" and {infos} unproven note(s)" if infos else ""
    return finding(ID, "warn", f"{len(warns)} risky pattern(s){note} in {names}", "apply the fix named on each line",
                   items=items, issues=[i.to_dict() for i in issues], files=files, mechanisms=mechanisms)
