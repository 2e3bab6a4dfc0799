"""A toy scan rule kept in the tests: the whole of what a new rule takes is this one file (the
rule class, decorated with :func:`envtool.checks.scan.registry.rule`) plus one registration (its
module name in :data:`envtool.checks.scan.registry.MODULES` for a rule of envtool; importing this
module here, in ``tests/test_scan_rules.py``)."""
from __future__ import annotations

from envtool.checks.scan.astutil import last_name
from envtool.checks.scan.program import Program
from envtool.checks.scan.registry import rule
from envtool.checks.scan.rule import Rule


@rule
class StrayBreakpoint(Rule):
    """A ``breakpoint()`` call reached from the entry point.

    Why it matters at scale: under a batch launcher there is no terminal, so the debugger it
    starts (``pdb`` by default, PEP 553) waits for input that never comes and every rank hangs
    until the job's time limit (https://docs.python.org/3/library/functions.html#breakpoint,
    https://peps.python.org/pep-0553/).
    """

    id = "toy-stray-breakpoint"
    title = "breakpoint() left in a training script"
    severity = "warn"
    sources = ("https://docs.python.org/3/library/functions.html#breakpoint", "https://peps.python.org/pep-0553/")
    order = 1000
    fires_on = ("def main():\n    breakpoint()\n\nif __name__ == '__main__':\n    main()\n",)
    quiet_on = ("def main():\n    pass\n\nif __name__ == '__main__':\n    main()\n",
                "def unused():\n    breakpoint()\n\nif __name__ == '__main__':\n    print('no call of unused()')\n")

    def check(self, prog: Program) -> None:
        """Report each reachable ``breakpoint()`` call."""
        for c in prog.calls:
            if last_name(c.node.func) == "breakpoint":
                prog.add(c.module, c.node.lineno, self.id, "breakpoint() waits for a terminal that batch jobs do "
                         "not have: every rank hangs", "remove the breakpoint() call")
