"""Entry points of the static scan: :func:`scan_project`, :func:`scan_paths`, :func:`scan_source`."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Sequence, Set, Tuple, Union

from envtool.checks.scan.facts import parse_source
from envtool.checks.scan.loader import load_project
from envtool.checks.scan.model import LAUNCHES, Limits, ScanIssue, ScanReport, no_gc
from envtool.checks.scan.project import Project

#: a path as callers pass it.
PathLike = Union[str, Path]


def scan_project(paths: Sequence[PathLike], entries: Sequence[PathLike] = (), launch: Optional[str] = None,
                 limits: Optional[Limits] = None) -> ScanReport:
    """Scan a project program by program (see :mod:`envtool.checks.scan`).

    Args:
        paths: files or directories (``str`` or :class:`~pathlib.Path`); a directory means every
            ``*.py`` under it (hidden directories, ``__pycache__`` and environments skipped).
        entries: entry-point files (``--entry``); when given, only they and their imports are read.
        launch: a key of :data:`LAUNCHES` that every program is assumed to use (``--launch``),
            or None to decide per program.
        limits: the bounds (:class:`Limits`; default ``Limits()``).
    Returns:
        a :class:`ScanReport`.
    Raises:
        UsageError: a file cannot be read, an unknown ``launch``, or a limit passed (exit status 2).
    """
    from envtool.core.errors import UsageError

    if launch is not None and launch not in LAUNCHES:
        raise UsageError(f"--launch {launch}: expected one of {', '.join(LAUNCHES)}")
    limits = limits or Limits()
    with no_gc():
        proj = load_project([Path(p) for p in paths], [Path(e) for e in entries], launch, limits)
        programs = []
        issues = proj.run()
        for entry, mods in proj.programs:
            programs.append({"entry": entry.shown, "launch": proj.launches.get(entry.shown, ""),
                             "reason": proj.reasons.get(entry.shown, ""), "modules": [m.shown for m in mods]})
        seen: Set[Tuple[str, int, str]] = set()
        suppressed = []
        for i in proj.suppressed:
            if (i.path, i.line, i.rule) not in seen:
                seen.add((i.path, i.line, i.rule))
                suppressed.append(i)
        return ScanReport(issues[:limits.max_issues], max(0, len(issues) - limits.max_issues), suppressed,
                          programs, proj.files, proj.bytes)


def scan_paths(paths: Sequence[PathLike], entries: Sequence[PathLike] = (),
               launch: Optional[str] = None) -> List[ScanIssue]:
    """Scan a project: the files and directories in ``paths`` and the local modules they import.

    Args:
        paths: files or directories (``str`` or :class:`~pathlib.Path`); a directory means every
            ``*.py`` under it (hidden directories, ``__pycache__`` and environments skipped).
        entries, launch: as for :func:`scan_project`.
    Returns:
        the issues (at most ``Limits().max_issues``), ordered by path and line; a file that does
        not parse gives one ``syntax`` issue and is otherwise skipped.
    Raises:
        UsageError: a file cannot be read, or a limit is passed (exit status 2).
    """
    return scan_project(paths, entries, launch).issues


def scan_source(text: str, path: str = "<string>", launch: Optional[str] = None) -> List[ScanIssue]:
    """Scan Python source ``text`` alone (reported as ``path``; its imports are not followed),
    as an entry point; ``launch`` as for :func:`scan_project`.

    Returns:
        the issues, by line; a file that does not parse gives one ``syntax`` issue.
    """
    with no_gc():
        mod = parse_source(text, path, Path(path))
        mod.text = text  # no file to read a fix's line from
        return Project([mod], {Path(path)}, launch).run()
