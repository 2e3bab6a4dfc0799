"""Rule ``checkpoint-local-rank``: a checkpoint or log written once per node."""
from __future__ import annotations

from envtool.checks.scan.program import Program
from envtool.checks.scan.registry import rule
from envtool.checks.scan.rule import Rule
from envtool.checks.scan.rules._examples import ALCF_TUTORIAL, HOROVOD_USAGE, horovod_script
from envtool.checks.scan.rules._writes import writes


@rule
class CheckpointLocalRank(Rule):
    """A checkpoint or log write (``open(..., "w")``, ``logging.FileHandler``) guarded only by a test of the local
    rank (``hvd.local_rank() == 0``, ``LOCAL_RANK``, ``args.gpu == 0`` ...), or a checkpoint helper called only
    under such a test. ``warn`` for checkpoints in programs meant for several nodes (a Horovod/MPI launch, or
    code naming nodes); ``info`` otherwise and for logs.

    Why it matters at scale: local rank 0 exists on every node, so on a multi-node job each node writes the same
    file on the shared file system: N concurrent writers and a torn file (Horovod usage step 6: save on rank 0
    only, https://horovod.readthedocs.io/en/v0.28.1/pytorch.html; ALCF tutorial step 6,
    https://github.com/argonne-lcf/sdl_ai_workshop).
    """

    id = "checkpoint-local-rank"
    title = "checkpoint or log file written once per node (local rank 0) on a multi-node job"
    sources = (HOROVOD_USAGE, ALCF_TUTORIAL)
    mechanisms = ("a test of the global rank (hvd.rank() == 0, dist.get_rank() == 0, RANK)",
                  "level warn on Horovod/MPI launches and programs that name nodes (node_rank, nnodes, "
                  "ngpus_per_node, SLURM_PROCID, both RANK and LOCAL_RANK); info otherwise; log files "
                  "(open(..., 'w'), logging.FileHandler) are info")
    order = 85
    fires_on = (horovod_script(
        'hvd.init()',
        'model = torch.nn.Linear(2, 2)',
        'if hvd.local_rank() == 0:',
        "    torch.save(model.state_dict(), 'model.pt')"),)
    quiet_on = (horovod_script(
        'hvd.init()',
        'model = torch.nn.Linear(2, 2)',
        'if hvd.rank() == 0:',
        "    torch.save(model.state_dict(), 'model.pt')"),)

    def applies(self, prog: Program) -> bool:
        """Programs that run as ranks (Horovod with hvd.init(), or torch.distributed)."""
        return prog.ranks

    def check(self, prog: Program) -> None:
        """Report each write (or checkpoint helper's call site) under a local-rank test only."""
        rank0 = "hvd.rank() == 0" if prog.launch == "horovod" else "torch.distributed.get_rank() == 0"
        for w in writes(prog):
            c, f, what, log, where = w.call, w.func, w.what, w.log, w.where
            if w.kind == "local":
                via = "" if where is c or f is None else (f" (through {f.name}(), which writes with {what or log} at "
                                                          f"{c.module.shown}:{c.node.lineno})")
                prog.add(where.module, where.node.lineno, self.id,
                         f"{what or log}{via} is guarded by a local-rank test only: on a multi-node job local "
                         "rank 0 exists on every node, so each node writes the same file (a shared file "
                         "system sees N concurrent writers and a torn file) (Horovod usage step 6: save on "
                         "rank 0 only, horovod.readthedocs.io/en/v0.28.1/pytorch.html; ALCF tutorial step 6)"
                         + ("" if prog.multinode_job else "; nothing shows this program runs on several "
                            "nodes, so it may be fine where it runs") + ("; a log file may be meant per node"
                                                                        if what is None else ""),
                         f"test the global rank instead: if {rank0}:",
                         "warn" if prog.multinode_job and what is not None else "info")
            elif w.kind == "local-site" and f is not None:
                prog.add(where.module, where.node.lineno, self.id,
                         f"{f.name}() writes a checkpoint ({what}(...) at {c.module.shown}:{c.node.lineno}) and "
                         "is called here under a local-rank test only: on a multi-node job each node writes "
                         "the same file (Horovod usage step 6; ALCF tutorial step 6)" +
                         ("" if prog.multinode_job else "; nothing shows this program runs on several nodes"),
                         f"test the global rank instead: if {rank0}:", "warn" if prog.multinode_job else "info")
