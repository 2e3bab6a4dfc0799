"""Rule ``syntax``: a file of the project that Python's parser rejects.

Nothing else is checked in such a file (the scan reads syntax trees only). The parser itself
reports the finding while the file is read (:func:`envtool.checks.scan.facts.parse_source`), so
this rule judges nothing per program; it is registered so that its id, severity and examples are
part of the rule contract like every other rule's.
"""
from __future__ import annotations

from envtool.checks.scan.program import Program
from envtool.checks.scan.registry import rule
from envtool.checks.scan.rule import Rule


@rule
class SyntaxRule(Rule):
    """A file that does not parse: ``ast.parse`` raises SyntaxError (or the parser's recursion
    limit is passed). At scale the job dies at import on every rank, after waiting in the queue;
    the scan reports it before submission (the scan parses with ``ast.parse``,
    https://docs.python.org/3/library/ast.html#ast.parse)."""

    id = "syntax"
    title = "the file does not parse"
    sources = ("https://docs.python.org/3/library/ast.html#ast.parse",)
    order = 0
    fires_on = ("def train(:\n    pass\n",)
    quiet_on = ("def train():\n    pass\n",)

    def check(self, prog: Program) -> None:
        """Nothing: the parser reported the file when it was read."""
