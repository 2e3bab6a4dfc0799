"""Rule ``no-broadcast``: nothing broadcasts the initial model/optimizer state."""
from __future__ import annotations


from envtool.checks.scan.astutil import last_name
from envtool.checks.scan.program import Program
from envtool.checks.scan.registry import rule
from envtool.checks.scan.rule import Rule
from envtool.checks.scan.rules._examples import ALCF_TUTORIAL, HOROVOD_USAGE, horovod_script

#: calls and callbacks that broadcast the initial state from rank 0.
BROADCAST = {"broadcast_parameters", "broadcast_optimizer_state", "broadcast_variables",
             "broadcast_global_variables", "BroadcastGlobalVariablesCallback", "BroadcastGlobalVariablesHook",
             "broadcast_object"}
#: hvd.elastic state objects: @hvd.elastic.run syncs them from rank 0.
ELASTIC_STATES = {"TorchState", "TensorFlowKerasState", "TensorFlowState", "KerasState", "ObjectState"}


@rule
class NoBroadcast(Rule):
    """A Horovod program (``hvd.init()`` reached) in which nothing broadcasts the initial model/optimizer state
    from rank 0 (no ``broadcast_parameters``/``broadcast_variables``, no Keras broadcast callback, no elastic
    state, no Spark estimator). ``info`` when the gradients are averaged by hand (the scan cannot tell how the
    ranks' initial state is made equal).

    Why it matters at scale: ranks start from different random weights and the averaged model is a blend of N
    different starts (Horovod usage step 5, https://horovod.readthedocs.io/en/v0.28.1/pytorch.html; ALCF
    tutorial step 5, https://github.com/argonne-lcf/sdl_ai_workshop).
    """

    id = "no-broadcast"
    title = "no broadcast of the initial model/optimizer state"
    sources = (HOROVOD_USAGE, ALCF_TUTORIAL, "horovod@v0.28.1:horovod/common/elastic.py")
    mechanisms = (
        "hvd.broadcast_parameters / broadcast_optimizer_state / broadcast_variables / "
        "broadcast_global_variables / broadcast_object",
        "Keras hvd.callbacks.BroadcastGlobalVariablesCallback, TF1 hvd.BroadcastGlobalVariablesHook",
        "hvd.elastic state objects (TorchState, TensorFlowKerasState, TensorFlowState, KerasState, "
        "ObjectState): @hvd.elastic.run syncs them from rank 0 (horovod@v0.28.1:horovod/common/elastic.py)",
        "PyTorch Lightning's Horovod strategy (Trainer(strategy|accelerator|distributed_backend='horovod'), "
        "HorovodStrategy): broadcasts parameters and optimizer state "
        "(Lightning-Universe/lightning-Horovod:src/pl_horovod/strategy.py)",
        "horovod.spark estimators (KerasEstimator, TorchEstimator): their remote trainers broadcast "
        "(horovod@v0.28.1:horovod/spark/keras/remote.py, horovod/spark/torch/remote.py)")
    order = 70
    fires_on = (horovod_script(
        'hvd.init()',
        'model = torch.nn.Linear(2, 2)',
        'opt = torch.optim.SGD(model.parameters(), lr=0.1 * hvd.size())',
        'opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())'),)
    quiet_on = (horovod_script(
        'hvd.init()',
        'model = torch.nn.Linear(2, 2)',
        'opt = torch.optim.SGD(model.parameters(), lr=0.1 * hvd.size())',
        'opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())',
        'hvd.broadcast_parameters(model.state_dict(), root_rank=0)'),)

    def applies(self, prog: Program) -> bool:
        """Horovod programs that reach hvd.init()."""
        return prog.horovod_ranks

    def check(self, prog: Program) -> None:
        """Report a Horovod program in which nothing broadcasts the initial state."""
        for c in prog.calls:
            last = last_name(c.node.func)
            if last in BROADCAST or (last in ELASTIC_STATES and prog.is_hvd_call(c, ELASTIC_STATES)):
                return
            if last.endswith("Estimator") and prog.qualname(c).startswith("horovod.spark."):
                return
        if prog.lightning_hvd:
            return
        inits = [c for c in prog.calls if prog.is_hvd_call(c, ("init",))]
        mods = [m for m in prog.modules if m.hvd_binding]
        if inits:
            where, line = inits[0].module, inits[0].node.lineno
        elif mods:
            where, line = mods[0], mods[0].hvd_import_line or 1
        else:
            return
        fix = ("hvd.broadcast_parameters(model.state_dict(), root_rank=0) and "
               "hvd.broadcast_optimizer_state(optimizer, root_rank=0) after creating them")
        if any(m.hvd_framework == "tensorflow" for m in prog.modules if m.hvd_binding):
            fix = ("hvd.broadcast_variables(model.variables, root_rank=0) (or the Keras callback "
                   "hvd.callbacks.BroadcastGlobalVariablesCallback(0))")
        wrapped = any(prog.is_hvd_call(c, ("DistributedOptimizer", "DistributedGradientTape", "DistributedTrainer"))
                      for c in prog.calls)
        if wrapped:
            prog.add(where, line, "no-broadcast",
                     "Horovod is used but nothing in the project broadcasts the initial model/optimizer state from "
                     "rank 0: ranks start from different weights (Horovod usage step 5; ALCF tutorial step 5)", fix)
        else:  # gradients averaged by hand: the scan cannot tell how the ranks' initial state is made equal
            prog.add(where, line, "no-broadcast",
                     "Horovod is used without a distributed optimizer and nothing broadcasts the initial state "
                     "from rank 0: unless every rank builds identical weights, ranks start apart "
                     "(Horovod usage step 5; ALCF tutorial step 5)", fix, "info")
