"""Check 4, ``script``: the static scan of ``--script`` files (:mod:`envtool.checks.scan`)."""
from __future__ import annotations

from envtool.checks.registry import check, finding

ID = "script"


@check(ID, "Training script scan (--script)", order=40,
       fix="apply the change named on each line")
def run(ctx):
    from envtool.checks import scan

    if not ctx.scripts:
        return finding(ID, "skipped", "no --script given")
    issues = []
    for path in ctx.scripts:
        issues.extend(scan.scan_file(path))
    names = ", ".join(str(p) for p in ctx.scripts)
    if not issues:
        return finding(ID, "ok", f"{names}: no risky pattern found", issues=[])
    items = [f"{i.path}:{i.line}: [{i.rule}] {i.message}; fix: {i.fix}" for i in issues]
    return finding(ID, "warn", f"{len(issues)} risky pattern(s) in {names}", "apply the fix named on each line",
                   items=items, issues=[i.to_dict() for i in issues])
