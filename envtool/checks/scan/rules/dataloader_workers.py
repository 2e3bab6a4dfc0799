"""Rule ``dataloader-workers``: DataLoader workers forked in an MPI/Horovod program."""
from __future__ import annotations

from envtool.checks.scan.program import Program
from envtool.checks.scan.registry import rule
from envtool.checks.scan.rule import Rule
from envtool.checks.scan.rules._loaders import FORKSERVER, start_methods

OLCF = "https://docs.olcf.ornl.gov/software/analytics/ibm-wml-ce.html"

_HVD_LOADER = ("import torch\nimport horovod.torch as hvd\n\ndef main():\n    hvd.init()\n"
               "    loader = torch.utils.data.DataLoader(range(10), batch_size=2, num_workers=4{extra})\n"
               "    return loader\n\nif __name__ == '__main__':\n    main()\n")


@rule
class DataloaderWorkers(Rule):
    """``DataLoader(...)`` with ``num_workers`` > 0 and no ``multiprocessing_context`` (and no
    ``set_start_method("forkserver"|"spawn")`` in the project) in an MPI/Horovod program: the
    workers are forked, the Linux default before Python 3.14. When the context is set only under
    the ``mp._supports_context`` guard of Horovod's examples (horovod/horovod PR #1824), the guard
    is named as the reason: ``torch.multiprocessing`` has no ``_supports_context`` any more.

    Why it matters at scale: workers forked after MPI/Horovod initialisation can segfault or
    deadlock on InfiniBand stacks (OLCF's Summit page, "Problems Distributing Pytorch with Multiple
    Data Loader Workers", https://docs.olcf.ornl.gov/software/analytics/ibm-wml-ce.html). A value
    the scan cannot resolve (``num_workers=args.workers`` with no default) is ``info``.
    """

    id = "dataloader-workers"
    title = "DataLoader with worker processes and no multiprocessing_context"
    sources = (OLCF, "https://github.com/horovod/horovod/pull/1824")
    mechanisms = ("multiprocessing_context= on the DataLoader (literal, or a dict splatted with **)",
                  "torch.multiprocessing/multiprocessing set_start_method('forkserver'|'spawn') in the project",
                  "num_workers=0")
    order = 30
    fires_on = (_HVD_LOADER.format(extra=""),)
    quiet_on = (_HVD_LOADER.format(extra=", multiprocessing_context='forkserver'"),
                _HVD_LOADER.format(extra="").replace("num_workers=4", "num_workers=0"))

    def check(self, prog: Program) -> None:
        """Report each DataLoader whose workers are forked."""
        for v in start_methods(prog).loaders:
            if v.workers is None:
                continue
            what, level, dead = v.workers
            c = v.call
            reason = (f"multiprocessing_context is set only under the mp._supports_context guard at line "
                      f"{getattr(dead, 'lineno', 0)}, which is always false on current torch (torch.multiprocessing "
                      "has no _supports_context, Horovod examples PR #1824), so " if dead is not None
                      else "no multiprocessing_context: ")
            prog.add(c.module, c.node.lineno, self.id,
                     f"DataLoader({what}): {reason}workers are forked (Linux default before Python 3.14), which can "
                     "segfault or deadlock under MPI/InfiniBand (OLCF Summit docs, DataLoader note: "
                     "docs.olcf.ornl.gov/software/analytics/ibm-wml-ce.html)",
                     f"pass {FORKSERVER} to this DataLoader" + (" and drop the guard" if dead is not None else ""),
                     level)
