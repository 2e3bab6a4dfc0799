"""Rule ``lr-not-scaled``: a learning rate not scaled by the number of ranks."""
from __future__ import annotations

import ast

from envtool.checks.scan.astutil import dotted, kwarg, last_name
from envtool.checks.scan.facts import CallSite, ModuleFacts
from envtool.checks.scan.program import SAME, Edit, Program
from envtool.checks.scan.registry import rule
from envtool.checks.scan.rule import Rule
from envtool.checks.scan.rules._examples import ALCF_TUTORIAL, HOROVOD_USAGE, horovod_script

#: adaptive optimizers: linear LR scaling with the number of ranks is a judgement for them.
ADAPTIVE = {"Adam", "AdamW", "Adamax", "NAdam", "Nadam", "RAdam", "SparseAdam", "Adagrad", "Adadelta", "RMSprop",
            "Lamb", "LAMB", "Adafactor", "Ftrl", "FusedAdam", "FusedLAMB", "Lion"}


@rule
class LrNotScaled(Rule):
    """An optimizer's learning rate (or a OneCycleLR/CyclicLR ``max_lr``) that does not involve ``hvd.size()``,
    followed through variables, functions and the arguments callers pass; one scaled by ``hvd.local_size()``
    (one node's ranks) is reported too. Adam-family optimizers give ``info`` (a judgement); a value the scan
    cannot resolve gives ``info``.

    Why it matters at scale: the effective batch grows with the number of ranks, and the linear scaling rule
    keeps the learning rate in step with it; left unscaled, training on N ranks converges more slowly or to a
    worse model (Horovod usage step 3, https://horovod.readthedocs.io/en/v0.28.1/pytorch.html; ALCF tutorial
    step 3, https://github.com/argonne-lcf/sdl_ai_workshop; Goyal et al. 2017, arXiv:1706.02677).
    """

    id = "lr-not-scaled"
    title = "learning rate not scaled by hvd.size()"
    sources = (HOROVOD_USAGE, ALCF_TUTORIAL, "https://arxiv.org/abs/1706.02677")
    mechanisms = (
        "hvd.size() in the value (hvd.local_size() is reported: it counts one node's ranks), in a variable or function it comes from, or in "
        "the argument a caller passes for a learning-rate parameter",
        "scaling after creation: an assignment or K.set_value to an lr/learning_rate target whose "
        "value involves hvd.size()",
        "PyTorch Lightning's Horovod strategy multiplies every param_group's lr by hvd.size() "
        "(Lightning-Universe/lightning-Horovod:src/pl_horovod/strategy.py)",
        "horovod.spark estimators: KerasEstimator and the torch TorchEstimator scale the optimizer's lr by "
        "hvd.size() (horovod@v0.28.1:horovod/spark/keras/remote.py, horovod/spark/torch/remote.py); the "
        "Lightning TorchEstimator uses accelerator='horovod' (horovod@v0.28.1:horovod/spark/lightning/remote.py)",
        "Adasum: an optimizer wrapped with op=hvd.Adasum (unconditionally): no scaling by size is wanted "
        "(horovod@v0.28.1:docs/adasum_user_guide.rst)",
        "adaptive optimizers (Adam family, Adagrad, RMSprop, LAMB ...): reported as info, a judgement",
        "OneCycleLR/CyclicLR: their max_lr replaces the optimizer's learning rate and is judged instead")
    order = 60
    fires_on = (horovod_script(
        'hvd.init()',
        'model = torch.nn.Linear(2, 2)',
        'opt = torch.optim.SGD(model.parameters(), lr=0.1)'),)
    quiet_on = (horovod_script(
        'hvd.init()',
        'model = torch.nn.Linear(2, 2)',
        'opt = torch.optim.SGD(model.parameters(), lr=0.1 * hvd.size())'),)

    def applies(self, prog: Program) -> bool:
        """Horovod programs."""
        return prog.horovod

    def _scaled_after(self, prog: Program) -> bool:
        """An lr scaled after the optimizer is made: ``param_group['lr'] = … hvd.size()``,
        ``K.set_value(opt.lr, … )`` with a scaled value."""
        sf = prog.size_funcs()
        for m in prog.modules:
            scaled = prog.scaled_names(m)
            for _, t, v, _ in m.assigns:
                text = ast.unparse(t).lower()
                if ("lr" in text or "learning_rate" in text) and not isinstance(t, ast.Name) and \
                        prog.mentions_size(v, m, scaled, sf):
                    return True
        for c in prog.calls:
            if last_name(c.node.func) == "set_value" and len(c.node.args) == 2 and \
                    "lr" in ast.unparse(c.node.args[0]).lower():
                if prog.mentions_size(c.node.args[1], c.module, prog.scaled_names(c.module), sf):
                    return True
        return False

    def _adasum(self, prog: Program) -> bool:
        """An optimizer wrapped with ``op=hvd.Adasum`` unconditionally (a conditional ``op=`` keeps the rule)."""
        for c in prog.calls:
            if prog.is_hvd_call(c, ("DistributedOptimizer", "DistributedGradientTape")):
                op = kwarg(c.node, "op")
                if isinstance(op, (ast.Attribute, ast.Name)) and last_name(op) == "Adasum":
                    return True
        return False

    def _local_scaled(self, prog: Program, value: ast.AST, mod: ModuleFacts) -> bool:
        """The value involves ``hvd.local_size()`` (directly or through a name assigned it in ``mod``)."""
        names = {dotted(t) for _, t, v, _ in mod.assigns if dotted(t) and any(
            isinstance(x, ast.Call) and prog.is_hvd_call(CallSite(x, mod, None, None, None), ("local_size",))
            for x in ast.walk(v))}
        for sub in ast.walk(value):
            if isinstance(sub, ast.Call) and prog.is_hvd_call(CallSite(sub, mod, None, None, None), ("local_size",)):
                return True
            if isinstance(sub, (ast.Name, ast.Attribute)) and dotted(sub) in names:
                return True
        return False

    def check(self, prog: Program) -> None:
        """Report each optimizer (and OneCycleLR/CyclicLR max_lr) whose learning rate is not scaled."""
        if prog.lightning_hvd or prog.estimator_scales or self._adasum(prog) or self._scaled_after(prog):
            return
        src = "(Horovod usage step 3, horovod.readthedocs.io/en/v0.28.1/pytorch.html; ALCF tutorial step 3)"
        for c in prog.calls:
            if last_name(c.node.func) in ("OneCycleLR", "CyclicLR"):
                mx = kwarg(c.node, "max_lr")
                if mx is None and len(c.node.args) > (2 if last_name(c.node.func) == "CyclicLR" else 1):
                    mx = c.node.args[2 if last_name(c.node.func) == "CyclicLR" else 1]
                if mx is not None:
                    for verdict, where, shown in prog.judge(mx, c):
                        if verdict == "unscaled":
                            prog.add(where.module, where.node.lineno, "lr-not-scaled",
                                     f"{last_name(c.node.func)}(max_lr={shown}) sets the learning rate itself, "
                                     f"overriding the optimizer's (scaled or not): max_lr is not scaled by "
                                     f"hvd.size() {src}", f"scale max_lr: max_lr={shown} * hvd.size()")
        for c in prog.calls:
            name = prog.optimizer_name(c)
            if name is None:
                continue
            n = c.node
            lr = kwarg(n, "lr") or kwarg(n, "learning_rate")
            if lr is None:
                positional = 1 if ("optim." in f".{name}" or name[:1].isupper() and "." not in name
                                   and c.module.from_imports.get(name, "").startswith("torch")) else 0
                lr = n.args[positional] if len(n.args) > positional else None
            if lr is None:
                if any(k.arg is None for k in n.keywords):
                    verdicts = [("unknown", c, "**kwargs (not resolved)")]
                else:
                    verdicts = [("unscaled", c, "the default")]
            else:
                verdicts = prog.judge(lr, c)
                if not prog.mentions_size(lr, c.module, prog.scaled_names(c.module), prog.size_funcs()) and \
                        self._local_scaled(prog, lr, c.module):
                    verdicts = [("unscaled", c, ast.unparse(lr))]
            adaptive = name.rsplit(".", 1)[-1] in ADAPTIVE
            for verdict, where, shown in verdicts:
                if verdict == "scaled":
                    continue
                local = lr is not None and verdict == "unscaled" and self._local_scaled(prog, lr, c.module)
                what = (f"{name}(...) learning rate {shown}" if where is c else
                        f"passes learning rate {shown} to {where.node.func and ast.unparse(where.node.func)}(), "
                        f"which builds {name}(...) at {c.module.shown}:{n.lineno} with it:")
                if local:
                    prog.add(where.module, where.node.lineno, "lr-not-scaled",
                             f"{what} is scaled by hvd.local_size() (the ranks of one node), not hvd.size() "
                             f"(all ranks): on several nodes it is too small by the number of nodes {src}",
                             "use hvd.size() instead of hvd.local_size()")
                    continue
                level = "warn" if verdict == "unscaled" else "info"
                reason = ""
                if adaptive:
                    level = "info"
                    reason = (f"; {name.rsplit('.', 1)[-1]} is an adaptive optimizer: scaling its learning rate "
                              "linearly with the number of ranks is a judgement (the linear rule was shown for SGD, "
                              "Goyal et al. 2017, arXiv:1706.02677), not a rule")
                edit = None
                if where is c and lr is not None and getattr(lr, "lineno", 0) == where.node.lineno:
                    simple = isinstance(lr, (ast.Constant, ast.Name, ast.Attribute, ast.Call, ast.Subscript))
                    edit = Edit.replace(c.module, lr, (SAME if simple else f"({SAME})") + " * hvd.size()")
                prog.add(where.module, where.node.lineno, "lr-not-scaled",
                         f"{what} is not scaled by hvd.size() {src}{reason}",
                         f"multiply the learning rate by hvd.size(), e.g. {shown.split(' (')[0]} * hvd.size()"
                         + (" (or keep it, with warm-up, if tuned for this optimizer)" if adaptive else ""),
                         level, edit)
