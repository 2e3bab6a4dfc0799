"""A site file's ``retired`` section: the system is decommissioned (:class:`Retirement`)."""
from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Optional

from envtool.spec.sites.reader import check_source, section

RETIRED_KEYS = ("date", "source", "note")


@dataclass(frozen=True)
class Retirement:
    """A site file's ``retired`` section: the system no longer runs jobs.

    ``specs`` and ``show`` say so, and ``jobscript``/``validate --submit`` for the site need
    ``--retired-ok`` (a job script for a system that is gone is almost always a mistake).

    Attributes:
        date: the day the facility decommissioned it (ISO ``YYYY-MM-DD``), or None when unknown.
        source: id in the site file's ``sources`` naming the announcement, or None.
        source_ref: what that id stands for (a URL), or None.
        note: free text, or None.
    """

    date: Optional[str] = None
    source: Optional[str] = None
    source_ref: Optional[str] = None
    note: Optional[str] = None

    def describe(self) -> str:
        """One line: ``decommissioned 2024-11-15 (https://…)``."""
        text = f"decommissioned {self.date}" if self.date else "decommissioned"
        if self.note:
            text += f"; {self.note}"
        if self.source_ref:
            text += f" (source: {self.source_ref.split()[0]})"
        return text


def parse_retired(spath: str, raw, sources) -> Optional[Retirement]:
    """Parse the ``retired`` section (SpecError naming ``retired.<field>`` on a bad value)."""
    r = section(spath, raw, "retired", RETIRED_KEYS, "a mapping with date (YYYY-MM-DD), source and note")
    if r is None:
        return None
    date = r.get("date")
    if isinstance(date, datetime.date):
        date = date.isoformat()
    if date is not None:
        try:
            datetime.date.fromisoformat(str(date))
        except ValueError:
            raise r.error("date", "a date YYYY-MM-DD", got=date) from None
    source_ids = dict(sources)
    source = r.str("source")
    check_source(r, "source", source, list(source_ids))
    return Retirement(date=str(date) if date is not None else None, source=source,
                      source_ref=source_ids.get(source) if source else None, note=r.str("note"))
