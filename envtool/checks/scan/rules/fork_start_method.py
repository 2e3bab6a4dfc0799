"""Rule ``fork-start-method``: the ``fork`` start method chosen explicitly in an MPI/Horovod program."""
from __future__ import annotations

from envtool.checks.scan.program import Program
from envtool.checks.scan.registry import rule
from envtool.checks.scan.rule import Rule
from envtool.checks.scan.rules._loaders import start_methods

OLCF = "https://docs.olcf.ornl.gov/software/analytics/ibm-wml-ce.html"
MESSAGE = ("start method 'fork' chosen explicitly: workers forked after MPI/Horovod init can "
           "segfault or deadlock on InfiniBand stacks (OLCF Summit docs, DataLoader note: "
           "docs.olcf.ornl.gov/software/analytics/ibm-wml-ce.html)")
FIX = 'use "forkserver" instead of "fork"'


@rule
class ForkStartMethod(Rule):
    """``set_start_method("fork")``, ``get_context("fork")`` or ``multiprocessing_context="fork"``
    (also in a dict splatted into a DataLoader) in a program launched with MPI or Horovod.

    Why it matters at scale: a child forked after MPI is initialised inherits the parent's
    InfiniBand/verbs state, and on such stacks the workers segfault or hang (OLCF's Summit page,
    "Problems Distributing Pytorch with Multiple Data Loader Workers",
    https://docs.olcf.ornl.gov/software/analytics/ibm-wml-ce.html).
    """

    id = "fork-start-method"
    title = "the fork start method chosen explicitly"
    sources = (OLCF,)
    order = 10
    fires_on = ("import torch.multiprocessing as mp\nimport horovod.torch as hvd\n\n"
                "def main():\n    hvd.init()\n    mp.set_start_method('fork')\n\n"
                "if __name__ == '__main__':\n    main()\n",)
    quiet_on = ("import torch.multiprocessing as mp\nimport horovod.torch as hvd\n\n"
                "def main():\n    hvd.init()\n    mp.set_start_method('forkserver')\n\n"
                "if __name__ == '__main__':\n    main()\n",
                "import multiprocessing as mp\n\nif __name__ == '__main__':\n    mp.set_start_method('fork')\n")

    def check(self, prog: Program) -> None:
        """Report each explicit ``fork`` of an MPI/Horovod program."""
        if not prog.mpi:
            return
        facts = start_methods(prog)
        for c, method, _ in facts.uses:
            if method == "fork":
                prog.add(c.module, c.node.lineno, self.id, MESSAGE, FIX)
        for v in facts.loaders:
            if v.fork_at is not None:
                prog.add(v.call.module, getattr(v.fork_at, "lineno", v.call.node.lineno), self.id, MESSAGE, FIX)
