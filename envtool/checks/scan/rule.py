"""The interface every scan rule implements (:class:`Rule`) and the example type its contract uses.

A rule is a class with a unique ``id``; it judges one *program* (an entry point and the modules its
imports reach, :class:`envtool.checks.scan.program.Program`) and reports through
:meth:`Program.add <envtool.checks.scan.program.Program.add>`. Adding a rule takes one new module
under ``envtool/checks/scan/rules/`` whose class is decorated with
:func:`envtool.checks.scan.registry.rule`, plus its module name in
:data:`envtool.checks.scan.registry.MODULES` (``tests/test_scan_rules.py`` holds the contract
every registered rule passes, and a toy rule that passes it too).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar, Tuple

if TYPE_CHECKING:  # annotations only: the program module does not import the rules
    from envtool.checks.scan.program import Program

#: levels an issue can have: ``warn`` (values resolved, the risk is shown) or ``info`` (a value the
#: scan could not resolve, or a judgement call).
LEVELS = ("warn", "info")


class Rule(ABC):
    """One check of the static scan.

    Class attributes (each rule sets them):
        id: the rule id reported in :attr:`ScanIssue.rule <envtool.checks.scan.model.ScanIssue.rule>`
            and accepted by ``# envtool: ignore[id]``.
        title: what the rule finds, in one line (:data:`envtool.checks.scan.RULES`).
        severity: the level of a finding whose values the scan resolved (a key of :data:`LEVELS`);
            a finding the scan cannot prove is reported as ``info`` whatever the severity.
        sources: public sources of the practice the rule encodes (URLs or ``repo@tag:path``).
        mechanisms: what satisfies the rule, as the scan recognises it, with sources
            (:data:`envtool.checks.scan.MECHANISMS`; empty when obvious from the title).
        order: the order rules run in within a program (lower first); it decides which of two
            programs sharing a module reports first, nothing else.
        fires_on: example scripts (source text) the rule reports on, each scanned alone.
        quiet_on: example scripts the rule does not report on (the fix applied, or a near miss).
    """

    id: ClassVar[str]
    title: ClassVar[str]
    severity: ClassVar[str] = "warn"
    sources: ClassVar[Tuple[str, ...]] = ()
    mechanisms: ClassVar[Tuple[str, ...]] = ()
    order: ClassVar[int] = 100
    fires_on: ClassVar[Tuple[str, ...]] = ()
    quiet_on: ClassVar[Tuple[str, ...]] = ()

    def applies(self, prog: "Program") -> bool:
        """Whether the rule judges ``prog`` at all (default: every program). Rules about one
        launch return e.g. ``prog.horovod``."""
        return True

    @abstractmethod
    def check(self, prog: "Program") -> None:
        """Judge ``prog``; report each finding with ``prog.add(module, line, self.id, message, fix, level)``."""
