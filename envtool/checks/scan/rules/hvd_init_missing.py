"""Rule ``hvd-init-missing``: Horovod used and hvd.init() never called; also the shared
precondition of the init rules (:func:`init_uses`)."""
from __future__ import annotations

import ast
from typing import List

from envtool.checks.scan.facts import CallSite
from envtool.checks.scan.program import Program
from envtool.checks.scan.registry import rule
from envtool.checks.scan.rule import Rule
from envtool.checks.scan.rules._examples import ALCF_TUTORIAL, HOROVOD_USAGE, horovod_script

#: Horovod calls that need hvd.init() first.
NEEDS_INIT = {"rank", "local_rank", "size", "local_size", "cross_rank", "cross_size", "DistributedOptimizer",
              "DistributedGradientTape", "broadcast_parameters", "broadcast_optimizer_state", "broadcast_variables",
              "broadcast_object", "allreduce", "allgather", "grouped_allreduce", "alltoall", "barrier", "join",
              "is_homogeneous"}
SRC = "(Horovod usage step 1, horovod.readthedocs.io/en/v0.28.1/pytorch.html; ALCF tutorial step 1)"


def init_uses(prog: Program) -> List[CallSite]:
    """The Horovod calls that need hvd.init(), in a program the init rules judge (else [])."""
    if prog.library or prog.lightning_hvd or prog.estimator_scales or prog.spark_or_ray():
        return []
    return [c for c in prog.calls if prog.is_hvd_call(c, NEEDS_INIT)]


@rule
class HvdInitMissing(Rule):
    """A Horovod call that needs initialisation (``hvd.rank()``, ``DistributedOptimizer``, ``broadcast_parameters``
    ...) and no ``hvd.init()`` reached from the entry point.

    Why it matters at scale: the call raises, or, where it does not, every rank trains alone (Horovod usage step
    1, https://horovod.readthedocs.io/en/v0.28.1/pytorch.html; ALCF tutorial step 1,
    https://github.com/argonne-lcf/sdl_ai_workshop).
    """

    id = "hvd-init-missing"
    title = "Horovod used and hvd.init() never called"
    sources = (HOROVOD_USAGE, ALCF_TUTORIAL)
    mechanisms = ("hvd.init() reached from the entry point (or @hvd.elastic.run / hvd.elastic.run)",
                  "Horovod Spark/Ray drivers, estimators and Lightning's Horovod strategy initialise "
                  "Horovod themselves")
    order = 50
    fires_on = (horovod_script(
        'print(hvd.rank())'),)
    quiet_on = (horovod_script(
        'hvd.init()',
        'print(hvd.rank())'),)

    def applies(self, prog: Program) -> bool:
        """Horovod programs."""
        return prog.horovod

    def check(self, prog: Program) -> None:
        """Report the first Horovod call when nothing the entry point reaches calls hvd.init()."""
        uses = init_uses(prog)
        if not uses or prog.has_init:
            return
        src = SRC
        c = prog.first(uses)
        if c is None:
            return
        prog.add(c.module, c.node.lineno, "hvd-init-missing",
                   f"{ast.unparse(c.node.func)}() is called but nothing the entry point {prog.entry.shown} "
                   f"reaches calls hvd.init(): Horovod is not initialised, the call raises or every rank "
                   f"trains alone {src}" + prog.assumed(),
                   "call hvd.init() once at the start of the entry point, before any other Horovod call")
