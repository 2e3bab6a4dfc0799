"""Shared analysis of file writes (checkpoints and logs) and the rank tests around them, made
once per program in one pass and read by the rules ``checkpoint-all-ranks`` and
``checkpoint-local-rank`` (one pass keeps the order in which call sites are judged, which the
resolver's memo of :meth:`Program.covered <envtool.checks.scan.program.Program.covered>` depends on
where call sites recurse). Not a rule itself."""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import List, Optional

from envtool.checks.scan.astutil import const_str, dotted, kwarg, last_name, rank_kind
from envtool.checks.scan.facts import LIGHTNING, CallSite, FuncFacts
from envtool.checks.scan.program import Program

#: calls that write a checkpoint whatever their receiver.
SAVE_LAST = {"save_weights", "save_checkpoint", "save_pretrained", "ModelCheckpoint"}


@dataclass
class Write:
    """One finding about a write.

    Attributes:
        kind: ``local`` (the write itself, or a helper's site, under a local-rank test only, reported
            at ``where``), ``local-site`` (a checkpoint helper called under a local-rank test only),
            ``all`` (a checkpoint written on every rank at ``where`` = the write) or ``all-site``
            (a checkpoint helper called on every rank at ``where``).
        where: the call site to report.
        call: the write itself.
        what: the checkpoint call's name, or None for a log write.
        log: the log write's description (``open(..., 'w')``, ``logging.FileHandler``), or None.
        func: the function holding the write (the helper), or None at module level.
    """

    kind: str
    where: CallSite
    call: CallSite
    what: Optional[str]
    log: Optional[str]
    func: Optional[FuncFacts]


def writes(prog: Program) -> List[Write]:
    """The :class:`Write` findings of ``prog`` in the order the call sites are judged (made once per program)."""
    got = prog.memo.get("writes")
    if isinstance(got, list):
        return got
    out: List[Write] = []
    for c in prog.calls:
        what = is_write(prog, c)
        log = log_write(prog, c) if what is None else None
        if what is None and log is None:
            continue
        paths = list(c.node.args[1:] if last_name(c.node.func) in ("save", "save_file", "save_model") and
                     len(c.node.args) > 1 else c.node.args) + [k.value for k in c.node.keywords]
        if any(rank_kind(a, c.module.rank_aliases) for a in paths):
            continue  # the file name carries the rank: one file per rank, meant so (sharded checkpoints)
        kind = prog.covered(c)
        f = c.func
        if kind == "local":
            sites = [c] if c.guarded == "local" or f is None else \
                climb_local(prog, [x for x in f.sites if prog.covered(x) == "local"])
            out.extend(Write("local", where, c, what, log, f) for where in sites)
            continue
        if what is None or kind:
            continue
        helper = f is not None and f.sites and not f.loops and id(f) not in prog.hvd_work
        if f is None or not helper:  # module level, an entry/training function, or no call site: change the write
            out.append(Write("all", c, c, what, log, f))
            continue
        for site in climb(prog, f.sites):
            kind = prog.covered(site)
            if kind == "local":
                out.append(Write("local-site", site, c, what, log, f))
            if kind:
                continue
            out.append(Write("all-site", site, c, what, log, f))
    prog.memo["writes"] = out
    return out


def is_write(prog: Program, c: CallSite) -> Optional[str]:
    """The name of the checkpoint write ``c`` makes (``torch.save``, ``model.save_weights``,
    safetensors ``save_file`` ...), or None when ``c`` writes no checkpoint file."""
    n = c.node
    name = dotted(n.func) or ""
    last = last_name(n.func)
    if prog.resolve(c):
        return None  # a project function: judged inside
    if c.func is not None and id(c.func) in prog.in_memory:
        return None  # serialising into an io.BytesIO in the same function: no file is written
    if c.module.lightning and (last == "ModelCheckpoint" and c.module.from_imports.get(last, "").split(".")[0]
                               in LIGHTNING or "trainer" in name.lower() and last == "save_checkpoint"):
        return None
    receiver = (dotted(n.func.value) or "").lower() if isinstance(n.func, ast.Attribute) else ""
    if last in ("save_file", "save_model") and (prog.qualname(c).startswith("safetensors") or
                                                 "safetensors" in receiver):
        return name or last  # safetensors.torch.save_file / save_model: a checkpoint too
    if last == "save_checkpoint" and prog.deepspeed and "trainer" not in receiver:
        return None  # DeepSpeed's engine.save_checkpoint: a collective every rank must call
    if name == "torch.save" or last in SAVE_LAST or (
            last == "save" and any(w in receiver for w in ("checkpoint", "ckpt", "model", "saver"))):
        return name or last
    return None


def climb(prog: Program, sites: List[CallSite], depth: int = 0) -> List[CallSite]:
    """The call sites to report for a write inside a helper: a site that is itself inside a
    helper (a function with call sites, no loop, no Horovod work) and not under a rank test
    is replaced by that helper's own sites (up to 4 levels)."""
    out: List[CallSite] = []
    for site in sites:
        g = site.func
        if depth < 4 and not site.guarded and g is not None and g.sites and not g.loops and \
                id(g) not in prog.hvd_work and prog.covered(site) is None:
            out.extend(climb(prog, g.sites, depth + 1))
        else:
            out.append(site)
    return out


def climb_local(prog: Program, sites: List[CallSite], depth: int = 0) -> List[CallSite]:
    """As :func:`climb` for writes under a local-rank test: a site inside a helper that is not
    itself under the test is replaced by the helper's call sites (the test is there)."""
    out: List[CallSite] = []
    for site in sites:
        g = site.func
        if depth < 4 and not site.guarded and g is not None and g.sites and not g.loops and \
                id(g) not in prog.hvd_work:
            out.extend(climb_local(prog, [x for x in g.sites if prog.covered(x) == "local"], depth + 1))
        else:
            out.append(site)
    return out


def log_write(prog: Program, c: CallSite) -> Optional[str]:
    """``open(path, "w"|"a"|"x")`` or ``logging.FileHandler(path)``: a log or result file."""
    n = c.node
    last = last_name(n.func)
    if last == "FileHandler":
        return "logging.FileHandler"
    if isinstance(n.func, ast.Name) and last == "open":
        mode = const_str(n.args[1]) if len(n.args) > 1 else const_str(kwarg(n, "mode"))
        if mode and any(ch in mode for ch in "wax"):
            return f"open(..., {mode!r})"
    return None
