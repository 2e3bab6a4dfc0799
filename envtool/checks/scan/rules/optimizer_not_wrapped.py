"""Rule ``optimizer-not-wrapped``: nothing averages the gradients across ranks."""
from __future__ import annotations


from envtool.checks.scan.astutil import last_name
from envtool.checks.scan.program import Program
from envtool.checks.scan.registry import rule
from envtool.checks.scan.rule import Rule
from envtool.checks.scan.rules._examples import ALCF_TUTORIAL, HOROVOD_USAGE, horovod_script

#: what averages gradients under Horovod (a wrapped optimizer/tape, or allreduce by hand).
WRAPS = {"DistributedOptimizer", "DistributedGradientTape", "PartialDistributedGradientTape", "DistributedTrainer",
         "allreduce", "allreduce_", "grouped_allreduce", "grouped_allreduce_", "allreduce_async",
         "allreduce_async_", "grouped_allreduce_async", "grouped_allreduce_async_"}
#: what averages gradients under torch.distributed.
DDP_WRAPS = {"DistributedDataParallel", "DDP", "FullyShardedDataParallel", "FSDP", "fully_shard", "all_reduce",
             "Accelerator", "prepare", "all_reduce_coalesced", "reduce_scatter"}


@rule
class OptimizerNotWrapped(Rule):
    """An optimizer is made and nothing in the program averages gradients across ranks: no
    ``hvd.DistributedOptimizer``/``DistributedGradientTape``, no DistributedDataParallel/FSDP/DeepSpeed, no
    allreduce by hand.

    Why it matters at scale: every rank then trains its own model on its share of the data and the job computes
    N unrelated models (Horovod usage step 4, https://horovod.readthedocs.io/en/v0.28.1/pytorch.html; ALCF
    tutorial step 4, https://github.com/argonne-lcf/sdl_ai_workshop).
    """

    id = "optimizer-not-wrapped"
    title = "optimizer never wrapped: gradients are not averaged across ranks"
    sources = (HOROVOD_USAGE, ALCF_TUTORIAL)
    mechanisms = ("hvd.DistributedOptimizer (torch, Keras, TensorFlow), hvd.DistributedGradientTape, "
                  "hvd.DistributedTrainer (MXNet)",
                  "gradients averaged by hand: hvd.allreduce / grouped_allreduce (and their _async forms)",
                  "torch.distributed: DistributedDataParallel, FullyShardedDataParallel, DeepSpeed, "
                  "Accelerate, dist.all_reduce",
                  "Lightning's Horovod strategy, horovod.spark estimators")
    order = 100
    fires_on = (horovod_script(
        'hvd.init()',
        'model = torch.nn.Linear(2, 2)',
        'opt = torch.optim.SGD(model.parameters(), lr=0.1 * hvd.size())',
        'hvd.broadcast_parameters(model.state_dict(), root_rank=0)'),)
    quiet_on = (horovod_script(
        'hvd.init()',
        'model = torch.nn.Linear(2, 2)',
        'opt = torch.optim.SGD(model.parameters(), lr=0.1 * hvd.size())',
        'opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())',
        'hvd.broadcast_parameters(model.state_dict(), root_rank=0)'),)

    def applies(self, prog: Program) -> bool:
        """Programs that run as ranks (Horovod with hvd.init(), or torch.distributed)."""
        return prog.ranks

    def check(self, prog: Program) -> None:
        """``optimizer-not-wrapped``: an optimizer with nothing averaging the gradients across ranks."""
        if prog.lightning_hvd or prog.estimator_scales or prog.spark_or_ray():
            return
        opts = [c for c in prog.calls if prog.optimizer_name(c)]
        if not opts:
            return
        for c in prog.calls:
            last = last_name(c.node.func)
            if prog.launch == "horovod" and (prog.is_hvd_call(c, WRAPS) or last in WRAPS):
                return
            if last in DDP_WRAPS or prog.qualname(c).startswith("deepspeed."):
                return
        first = prog.first(opts)
        if first is None:
            return
        c = first
        if prog.launch == "horovod":
            fix = ("optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters()) "
                   "(TensorFlow: tape = hvd.DistributedGradientTape(tape); Keras: "
                   "opt = hvd.DistributedOptimizer(opt))")
            what = "hvd.DistributedOptimizer (or DistributedGradientTape), and no hvd.allreduce of the gradients"
        else:
            fix = "wrap the model: model = DistributedDataParallel(model, device_ids=[local_rank])"
            what = "DistributedDataParallel/FSDP, and no dist.all_reduce of the gradients"
        prog.add(c.module, c.node.lineno, "optimizer-not-wrapped",
                 f"{prog.optimizer_name(c)}(...) is never wrapped: nothing in the program uses {what}, so the "
                 "gradients are never averaged and every rank trains its own model (Horovod usage step 4, "
                 "horovod.readthedocs.io/en/v0.28.1/pytorch.html; ALCF tutorial step 4)" + prog.assumed(), fix)
