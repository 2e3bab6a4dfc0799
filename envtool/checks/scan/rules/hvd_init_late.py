"""Rule ``hvd-init-late``: a Horovod call before hvd.init()."""
from __future__ import annotations

import ast

from envtool.checks.scan.program import Program
from envtool.checks.scan.registry import rule
from envtool.checks.scan.rule import Rule
from envtool.checks.scan.rules._examples import ALCF_TUTORIAL, HOROVOD_USAGE, horovod_script
from envtool.checks.scan.rules.hvd_init_missing import SRC, init_uses


@rule
class HvdInitLate(Rule):
    """A Horovod call that needs initialisation runs before ``hvd.init()`` of the same function or module level (or
    at module level of an imported module, when init happens in a function).

    Why it matters at scale: Horovod is not initialised yet and the call raises ValueError on every rank
    (Horovod usage step 1, https://horovod.readthedocs.io/en/v0.28.1/pytorch.html; ALCF tutorial step 1,
    https://github.com/argonne-lcf/sdl_ai_workshop).
    """

    id = "hvd-init-late"
    title = "hvd.init() called after the first Horovod call that needs it"
    sources = (HOROVOD_USAGE, ALCF_TUTORIAL)
    mechanisms = ("hvd.init() before the first hvd.rank()/size()/DistributedOptimizer/broadcast call of the "
                  "same function or module level",)
    order = 55
    fires_on = (horovod_script(
        'print(hvd.rank())',
        'hvd.init()'),)
    quiet_on = (horovod_script(
        'hvd.init()',
        'print(hvd.rank())'),)

    def applies(self, prog: Program) -> bool:
        """Horovod programs."""
        return prog.horovod

    def check(self, prog: Program) -> None:
        """Report each Horovod call that runs before hvd.init() in the same scope."""
        uses = init_uses(prog)
        if not uses or not prog.has_init:
            return
        src = SRC
        inits = [c for c in prog.calls if prog.is_hvd_call(c, ("init",))]
        module_level_init = any(i.func is None for i in inits)
        for c in uses:
            before = [i for i in inits if i.module is c.module and i.func is c.func and
                      (i.node.lineno, i.node.col_offset) > (c.node.lineno, c.node.col_offset)]
            same_scope = [i for i in inits if i.module is c.module and i.func is c.func]
            early = (before and len(before) == len(same_scope)) or (
                c.func is None and c.module is not prog.entry and inits and not module_level_init)
            if early:
                where = f"line {before[0].node.lineno}" if before else "a function called later"
                prog.add(c.module, c.node.lineno, "hvd-init-late",
                         f"{ast.unparse(c.node.func)}() runs before hvd.init() ({where}): Horovod is not "
                         f"initialised yet, the call raises ValueError {src}" + prog.assumed(),
                         "move hvd.init() before the first Horovod call")
