"""The level a scan rule ships at, from its measured precision on code its rules were not tuned on.

Issue 42's policy: a rule whose ``warn`` findings have a precision below :data:`MIN_WARN_PRECISION` on
the held-out part of the second corpus (``benchmarks/scan_corpus2.yaml``, split ``heldout``, judged in
``benchmarks/scan_truth2.yaml`` before any rule change) ships at ``info``: its findings are shown, but
they do not fail ``doctor --script``. The figures are measured by ``benchmarks/score_scan.py --corpus2
--split heldout`` and written in docs/reference/scan-rules.md; this table is their data.
"""
from __future__ import annotations

from typing import Dict, Tuple

#: a rule's ``warn`` findings must be at least this precise on the held-out corpus (issue 42)
MIN_WARN_PRECISION = 0.9

#: rule id -> (true, false) ``warn`` findings on the held-out corpus, 28 projects, scored 2026-11-29 on
#: main after issue 42's rule changes (benchmarks/score_scan.py --corpus2 --split heldout). Rules absent
#: here had no ``warn`` finding there and keep their level.
HELD_OUT_WARN: Dict[str, Tuple[int, int]] = {
    "checkpoint-all-ranks": (0, 4),
    "no-gpu-pinning": (0, 1),
    "dataloader-workers": (2, 0),
    "data-not-sharded": (1, 0),
    "syntax": (1, 0),
    # shipped at info when first scored, their findings counted against the judged risks at warn level:
    # precision 1.00 -> warn; log-all-ranks's two findings were judged info risks (over-severe) -> info
    "sampler-no-set-epoch": (1, 0),
    "unseeded-split": (2, 0),
    "download-all-ranks": (4, 0),
    "log-all-ranks": (0, 2),
}


def held_out_precision(rule: str) -> float | None:
    """The held-out precision (0.0-1.0) of ``rule``'s ``warn`` findings, or None when none was made."""
    tp, fp = HELD_OUT_WARN.get(rule, (0, 0))
    return tp / (tp + fp) if tp + fp else None


def shipped_level(rule: str, level: str) -> str:
    """``level`` (``warn`` or ``info``) as the rule ships it: ``warn`` becomes ``info`` for a rule whose
    held-out precision is below :data:`MIN_WARN_PRECISION`; ``info`` stays ``info``."""
    precision = held_out_precision(rule)
    if level == "warn" and precision is not None and precision < MIN_WARN_PRECISION:
        return "info"
    return level
