"""Rule ``checkpoint-all-ranks``: a checkpoint written on every rank."""
from __future__ import annotations

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
        """Programs that run as ranks (Horovod with hvd.init(), or torch.distributed)."""
        return prog.ranks

    def check(self, prog: Program) -> None:
        """Report each checkpoint write (or checkpoint helper's call site) reached on every rank."""
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
