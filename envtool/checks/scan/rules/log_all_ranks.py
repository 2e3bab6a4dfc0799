"""Rule ``log-all-ranks``: a log, plot or results file written by every rank, or named by the local rank."""
from __future__ import annotations

import ast
from typing import Optional

from envtool.checks.scan.astutil import const_str, kwarg, last_name, rank_kind
from envtool.checks.scan.facts import CallSite
from envtool.checks.scan.program import Edit, Program
from envtool.checks.scan.registry import rule
from envtool.checks.scan.rule import Rule
from envtool.checks.scan.rules._examples import HOROVOD_USAGE

#: torch.distributed's note that files written by several processes must be told apart (the rank in
#: TensorBoard's log_dir, https://pytorch.org/tutorials/intermediate/ddp_tutorial.html: "save it in one
#: process"); Horovod's usage step 6 (only rank 0 writes).
DDP_TUTORIAL = "https://pytorch.org/tutorials/intermediate/ddp_tutorial.html"
#: writes of logs, plots and results (not checkpoints: their own rules judge them).
OUTPUT_CALLS = {"savefig": "savefig", "SummaryWriter": "SummaryWriter", "create_file_writer": "create_file_writer",
                "FileHandler": "logging.FileHandler", "to_csv": "to_csv", "to_json": "to_json",
                "savetxt": "numpy.savetxt", "imsave": "imsave", "save_image": "save_image"}


def output_write(prog: Program, c: CallSite) -> Optional[str]:
    """What ``c`` writes a log/plot/results file with, else None (``open(p, "w")`` of a text file,
    ``json.dump`` to a file, ``plt.savefig``, ``SummaryWriter``, ``logging.FileHandler``/``basicConfig(filename=)``,
    ``DataFrame.to_csv``)."""
    n = c.node
    last = last_name(n.func)
    if prog.resolve(c):
        return None
    if last in OUTPUT_CALLS:
        return OUTPUT_CALLS[last]
    if last == "basicConfig" and kwarg(n, "filename") is not None:
        return "logging.basicConfig(filename=...)"
    if isinstance(n.func, ast.Name) and last == "open" and n.args:
        mode = const_str(n.args[1]) if len(n.args) > 1 else const_str(kwarg(n, "mode"))
        if mode and any(ch in mode for ch in "wax") and "b" not in mode:
            return f"open(..., {mode!r})"
    return None


@rule
class LogAllRanks(Rule):
    """A log, plot or results file (``open(p, "w")``, ``savefig``, ``SummaryWriter``, ``logging.FileHandler``,
    ``to_csv``) written on every rank under one name, or under a name built from the local rank.

    Why it matters at scale: N ranks write the same file at once (lines interleaved or lost, a plot or JSON
    half-written) and a name built from the local rank is the same on every node, so ranks of different
    nodes still collide on a shared file system (PyTorch DDP tutorial, https://pytorch.org/tutorials/intermediate/ddp_tutorial.html; Horovod usage
    step 6, https://horovod.readthedocs.io/en/v0.28.1/pytorch.html). Ships at ``info``: its two held-out findings were judged ``info`` risks (docs/reference/scan-rules.md).
    """

    id = "log-all-ranks"
    title = "log, plot or results file written by every rank (or named by the local rank)"
    severity = "info"
    sources = (DDP_TUTORIAL, HOROVOD_USAGE)
    mechanisms = ("the write under a global-rank test (if rank == 0:), or in a helper whose every call is",
                  "a file name built from the global rank (one file per rank)",
                  "Lightning and Accelerate loggers (they log on rank 0 themselves)")
    order = 125
    fires_on = ("import json\nimport torch.distributed as dist\n\n\ndef main():\n    dist.init_process_group('gloo')\n"
                "    with open('metrics.json', 'w') as f:\n        json.dump({'loss': 1.0}, f)\n\n\n"
                "if __name__ == '__main__':\n    main()\n",)
    quiet_on = (fires_on[0].replace("    with open", "    if dist.get_rank() == 0:\n        with open").replace(
        "        json.dump", "            json.dump"),
                fires_on[0].replace("'metrics.json'", "f'metrics{dist.get_rank()}.json'"))

    def applies(self, prog: Program) -> bool:
        """Programs that run as several processes (ranks, TensorFlow workers)."""
        return prog.multi_process

    def check(self, prog: Program) -> None:
        """``log-all-ranks``: each output write reached on every rank, or named by the local rank."""
        rank0 = "hvd.rank() == 0" if prog.launch == "horovod" else (
            "strategy.cluster_resolver.task_id == 0" if prog.launch == "tf-multiworker" else "dist.get_rank() == 0")
        for c in prog.calls:
            what = output_write(prog, c)
            if what is None:
                continue
            args = list(c.node.args[:1]) + [k.value for k in c.node.keywords if k.arg in (
                "log_dir", "logdir", "filename", "fname", "path", "file", "path_or_buf")]
            named = [rank_kind(a, c.module.rank_aliases) for a in args]
            if "global" in named:
                continue  # one file per rank
            kind = prog.covered(c)
            if kind == "global":
                continue
            if "local" in named or kind == "local":
                if not prog.multinode_job:
                    continue
                prog.add(c.module, c.node.lineno, self.id,
                         f"{what} writes a file named by (or guarded by) the local rank: ranks of the same local "
                         "rank on different nodes write the same file on a shared file system",
                         "name the file by the global rank, or write it on global rank 0 only", self.severity)
                continue
            if c.func is not None and c.func.sites and not any(s.func is None for s in c.func.sites) and \
                    all(prog.covered(s) == "global" for s in c.func.sites):
                continue
            prog.add(c.module, c.node.lineno, self.id,
                     f"{what} writes the same file on every rank: N ranks write it at once (lines interleaved or "
                     "lost, a plot or JSON half-written)",
                     f"write it on one rank: if {rank0}: ... (or put the global rank in the file name)", self.severity,
                     Edit.guard(c.module, c.node, rank0))
