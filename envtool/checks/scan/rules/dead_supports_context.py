"""Rule ``dead-supports-context``: the always-false ``mp._supports_context`` guard of Horovod's examples."""
from __future__ import annotations

from envtool.checks.scan.program import Program
from envtool.checks.scan.registry import rule
from envtool.checks.scan.rule import Rule
from envtool.checks.scan.rules._loaders import FORKSERVER, start_methods


@rule
class DeadSupportsContext(Rule):
    """An ``if`` testing ``mp._supports_context`` (copied from Horovod's examples, horovod/horovod
    PR #1824) in an MPI/Horovod program where no reported DataLoader depends on it (a DataLoader
    that does is reported by ``dataloader-workers``, naming the guard).

    Why it matters at scale: ``torch.multiprocessing`` no longer has ``_supports_context``, so the
    guard is always false and the forkserver context it was meant to set is never set: the
    DataLoader workers are forked under MPI (OLCF's Summit page,
    https://docs.olcf.ornl.gov/software/analytics/ibm-wml-ce.html).
    """

    id = "dead-supports-context"
    title = "the dead mp._supports_context guard from Horovod's examples"
    sources = ("https://github.com/horovod/horovod/pull/1824",
               "https://docs.olcf.ornl.gov/software/analytics/ibm-wml-ce.html")
    order = 40
    fires_on = ("import torch.multiprocessing as mp\nimport horovod.torch as hvd\n\ndef main():\n    hvd.init()\n"
                "    kwargs = {}\n    if hasattr(mp, '_supports_context') and mp._supports_context:\n"
                "        kwargs['multiprocessing_context'] = 'forkserver'\n    return kwargs\n\n"
                "if __name__ == '__main__':\n    main()\n",)
    quiet_on = ("import torch.multiprocessing as mp\nimport horovod.torch as hvd\n\ndef main():\n    hvd.init()\n"
                "    kwargs = {'multiprocessing_context': 'forkserver'}\n    return kwargs\n\n"
                "if __name__ == '__main__':\n    main()\n",)

    def check(self, prog: Program) -> None:
        """Report each dead guard no reported DataLoader names."""
        if not prog.mpi:
            return
        used = set(start_methods(prog).used_guards)
        for m in prog.modules:
            for g in m.dead_ifs:
                if id(g) in used:
                    continue
                prog.add(m, getattr(g, "lineno", 1), self.id,
                         "the mp._supports_context guard (Horovod examples, PR #1824) is always false on current "
                         "torch (torch.multiprocessing has no _supports_context): the branch it guards never runs",
                         f"drop the guard; pass {FORKSERVER} to DataLoaders with num_workers > 0")
                used.add(id(g))
