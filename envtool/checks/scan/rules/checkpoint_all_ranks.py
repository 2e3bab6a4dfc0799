"""Rule ``checkpoint-all-ranks``: a checkpoint written on every rank."""
from __future__ import annotations

import ast
from typing import List, Optional

from envtool.checks.scan.astutil import kwarg, last_name
from envtool.checks.scan.facts import CallSite
from envtool.checks.scan.program import Edit, Program
from envtool.checks.scan.registry import rule
from envtool.checks.scan.rule import Rule
from envtool.checks.scan.rules._examples import ALCF_TUTORIAL, HOROVOD_USAGE, horovod_script
from envtool.checks.scan.rules._writes import writes


def dist_note(prog: Program, c: CallSite) -> str:
    """Why a write under a torch.distributed rank test still runs on every rank (Horovod, no process group)."""
    if c.dist_guard and prog.dist_rank_zero:
        return ("; the rank test around it reads torch.distributed's rank, which Horovod never sets (no "
                "init_process_group): it holds on every rank, or raises")
    return ""


@rule
class CheckpointAllRanks(Rule):
    """A checkpoint write (``torch.save``, ``save_weights``, ``save_checkpoint``, safetensors ...) reached without
    a rank test: not under an ``if`` on the rank, not after an early return on other ranks, and (for a helper)
    not called only under a rank test. A helper's call sites are reported rather than the write inside it.

    Why it matters at scale: N ranks write the same file at once on a shared file system (contention, a torn
    file), or N copies (Horovod usage step 6, https://horovod.readthedocs.io/en/v0.28.1/pytorch.html; ALCF
    tutorial step 6, https://github.com/argonne-lcf/sdl_ai_workshop).
    """

    id = "checkpoint-all-ranks"
    title = "checkpoint written on every rank"
    sources = (HOROVOD_USAGE, ALCF_TUTORIAL)
    mechanisms = (
        "an enclosing if/conditional expression testing a rank (hvd.rank(), local_rank, is_root, ...)",
        "an earlier 'if <rank test>: return' in the enclosing function",
        "a helper whose every call site in the project is itself under a rank test",
        "PyTorch Lightning's ModelCheckpoint and trainer.save_checkpoint (Lightning writes on global "
        "rank 0 only)")
    order = 80
    fires_on = (horovod_script(
        'hvd.init()',
        'model = torch.nn.Linear(2, 2)',
        "torch.save(model.state_dict(), 'model.pt')"),)
    quiet_on = (horovod_script(
        'hvd.init()',
        'model = torch.nn.Linear(2, 2)',
        'if hvd.rank() == 0:',
        "    torch.save(model.state_dict(), 'model.pt')"),)

    def applies(self, prog: Program) -> bool:
        """Programs that run as ranks (Horovod with hvd.init(), or torch.distributed), and Lightning programs."""
        return prog.ranks or prog.launch == "lightning"

    def check(self, prog: Program) -> None:
        """Report each checkpoint write (or checkpoint helper's call site) reached on every rank."""
        self.after_fit(prog)
        if not prog.ranks:
            return
        rank0 = "hvd.rank() == 0" if prog.launch == "horovod" else "torch.distributed.get_rank() == 0"
        for w in writes(prog):
            c, f = w.call, w.func
            if w.kind == "all":
                prog.add(c.module, c.node.lineno, self.id,
                         f"{w.what}(...) writes a checkpoint on every rank (Horovod usage step 6; ALCF tutorial step 6)"
                         + dist_note(prog, c),
                         f"write checkpoints only under if {rank0}:", "warn", Edit.guard(c.module, c.node, rank0))
            elif w.kind == "all-site" and f is not None:
                site = w.where
                prog.add(site.module, site.node.lineno, self.id,
                         f"{f.name}() writes a checkpoint ({w.what}(...) at {c.module.shown}:{c.node.lineno}) and is "
                         "called here on every rank (Horovod usage step 6; ALCF tutorial step 6)" + dist_note(prog, c),
                         f"call {f.name}() only under if {rank0}: (or return early in it on other ranks)", "warn",
                         Edit.guard(site.module, site.node, rank0))

    #: writes that Lightning does not route to global rank 0 itself (trainer.save_checkpoint does).
    PLAIN_SAVES = ("save", "save_pretrained", "save_file")

    def after_fit(self, prog: Program) -> None:
        """Lightning: a ``torch.save``/``save_pretrained`` after ``trainer.fit(...)`` in the same function,
        with no rank test around it, where the Trainer runs several processes (``num_nodes``, ``devices`` or a
        ``ddp``/``fsdp``/``deepspeed`` strategy): every process of the job runs the code after ``fit``
        (Lightning's docs on ``trainer.is_global_zero``,
        https://lightning.ai/docs/pytorch/stable/common/trainer.html)."""
        trainers = [c for c in prog.calls if last_name(c.node.func) == "Trainer" and c.module.lightning and
                    multi_process_trainer(c.node)]
        if not trainers:
            return
        fits = [c for c in prog.calls if last_name(c.node.func) == "fit" and isinstance(c.node.func, ast.Attribute)]
        for c in prog.calls:
            if last_name(c.node.func) not in self.PLAIN_SAVES or not isinstance(c.node.func, ast.Attribute) or \
                    prog.covered(c) or (last_name(c.node.func) == "save" and
                                        prog.qualname(c).split(".")[0] not in ("torch", "safetensors")):
                continue
            fit = next((f for f in fits if f.func is c.func and f.module is c.module and
                        f.node.lineno < c.node.lineno), None)
            if fit is None:
                continue
            receiver = ast.unparse(fit.node.func.value) if isinstance(fit.node.func, ast.Attribute) else "trainer"
            cond = f"{receiver}.is_global_zero"
            prog.add(c.module, c.node.lineno, self.id,
                     f"{last_name(c.node.func)}(...) after {receiver}.fit(...) (line {fit.node.lineno}) runs in every "
                     "process Lightning started: every rank writes the same file",
                     f"write it only under if {cond}:", "warn", Edit.guard(c.module, c.node, cond))


def multi_process_trainer(call: ast.Call) -> bool:
    """Whether a Lightning ``Trainer(...)`` call asks for several processes: ``num_nodes`` other than 1,
    ``devices`` other than 1 (a number, a list or an expression), a ddp/fsdp/deepspeed strategy name, or
    a strategy object (any expression that is not a constant)."""
    def const(name: str) -> Optional[ast.AST]:
        return kwarg(call, name)

    nodes, devices, strategy = const("num_nodes"), const("devices"), const("strategy")
    if nodes is not None and not (isinstance(nodes, ast.Constant) and nodes.value == 1):
        return True
    if devices is not None:
        if isinstance(devices, ast.Constant):
            if isinstance(devices.value, int) and devices.value not in (0, 1) or \
                    isinstance(devices.value, str) and devices.value not in ("1", "auto", "0"):
                return True
        elif not (isinstance(devices, (ast.List, ast.Tuple)) and len(devices.elts) <= 1):
            return True
    if strategy is None:
        return False
    if isinstance(strategy, ast.Constant):  # "ddp", "deepspeed_stage_2", "fsdp"; not "auto" or "single_device"
        words: List[str] = ["ddp", "fsdp", "deepspeed"]
        return any(w in str(strategy.value).lower() for w in words)
    return True  # a strategy object (DDPStrategy(...), DeepSpeedStrategy(...), built by a helper): several processes
