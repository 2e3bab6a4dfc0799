"""A scan's project: every module read, split into programs (an entry point and the modules its
imports reach), each resolved (:class:`~envtool.checks.scan.program.Program`) and judged by every
registered rule (:func:`envtool.checks.scan.registry.all_rules`); findings are collected here,
once per file, line and rule, and ``# envtool: ignore[rule]`` comments applied."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

from envtool.checks.scan.facts import ModuleFacts
from envtool.checks.scan.model import ScanIssue
from envtool.checks.scan.program import Edit, Program, edit_dict
from envtool.checks.scan.registry import all_rules


class Project:
    """Every module read for one scan, and the programs (an entry point and the modules its
    imports reach) judged one by one."""

    def __init__(self, modules: List[ModuleFacts], entries: Set[Path], launch: Optional[str] = None,
                 explicit: Optional[Set[Path]] = None):
        self.modules = [m for m in modules if m.tree is not None]
        self.syntax = [m.syntax for m in modules if m.syntax is not None]
        self.launch = launch
        self.issues: Dict[Tuple[str, int, str], ScanIssue] = {}
        self.suppressed: List[ScanIssue] = []
        self.launches: Dict[str, str] = {}
        self.reasons: Dict[str, str] = {}
        by_path = {m.path: m for m in self.modules}
        self.imported: Set[Path] = set()
        for m in self.modules:
            for f in m.local_imports:
                if f in by_path and f != m.path:
                    self.imported.add(f)

        def closure(start: ModuleFacts) -> List[ModuleFacts]:
            seen = {start.path}
            order = [start]
            i = 0
            while i < len(order):
                for f in sorted(order[i].local_imports):
                    if f in by_path and f not in seen:
                        seen.add(f)
                        order.append(by_path[f])
                i += 1
            return order

        # entry points: files named (or --entry), files with a __main__ guard; then each module no
        # entry reaches and no other module imports (a library or a script run as it is)
        explicit = explicit if explicit is not None else set(entries)
        starts = [m for m in self.modules if m.path in explicit or m.main_guard]
        self.programs: List[Tuple[ModuleFacts, List[ModuleFacts]]] = []
        reached: Set[Path] = set()
        for m in starts:
            mods = closure(m)
            reached.update(x.path for x in mods)
            self.programs.append((m, mods))
        rest = [m for m in self.modules if m.path not in reached]
        rest_paths = {m.path for m in rest}
        imported_in_rest = {f for m in rest for f in m.local_imports if f in rest_paths and f != m.path}
        for m in [m for m in rest if m.path not in imported_in_rest] + rest:
            if m.path in reached:
                continue
            mods = closure(m)
            reached.update(x.path for x in mods)
            self.programs.append((m, mods))
        self.components = [mods for _, mods in self.programs]

    def add(self, mod: ModuleFacts, line: int, rule: str, message: str, fix: str, level: str = "warn",
            edit: Optional[Edit] = None) -> None:
        """Keep a finding (the first per file, line and rule; a ``warn`` replaces an ``info``), with
        the launch assumed appended to its message and its ``edit`` made concrete against the file
        (:func:`~envtool.checks.scan.program.edit_dict`), or set it aside when a comment suppresses it."""
        key = (mod.shown, line, rule)
        old = self.issues.get(key)
        if old is None or (old.level == "info" and level == "warn"):
            if rule not in ("syntax", "no-main-guard") and "[launch assumed" not in message:
                message += self.current_assumed
            issue = ScanIssue(mod.shown, line, rule, message, fix, level, self.current_entry, self.current_launch,
                              edit_dict(edit) if edit is not None else None)
            ignored = mod.ignores.get(line, ())
            if rule in ignored or "*" in ignored:
                self.suppressed.append(issue)
                return
            self.issues[key] = issue

    current_entry = ""
    current_launch = ""
    current_assumed = ""
    files = 0
    bytes = 0

    def run(self) -> List[ScanIssue]:
        """Judge every program with every registered rule (in rule order); the issues found, with the
        ``syntax`` ones, ordered by path, line and rule. The module trees are released after."""
        rules = all_rules()
        for entry, mods in self.programs:
            self.current_entry = entry.shown
            prog = Program(mods, entry, self.add, self.imported, self.launch)
            self.current_launch = prog.launch
            self.current_assumed = prog.assumed()
            self.launches[entry.shown], self.reasons[entry.shown] = prog.launch, prog.launch_reason
            for r in rules:
                if r.applies(prog):
                    r.check(prog)
        self.close()
        return sorted(list(self.issues.values()) + self.syntax, key=lambda i: (i.path, i.line, i.rule))

    def close(self) -> None:
        """Break the module ↔ function ↔ call reference cycles so that reference counting frees
        the trees at once (the scan runs with the cyclic collector paused)."""
        for m in self.modules:
            for f in m.funcs:
                f.sites.clear()
                f.parent = None
            m.funcs.clear()
            m.calls.clear()
            m._dict_idx = None
