"""Shared analysis of start methods and DataLoaders, made once per program and read by the rules
``fork-start-method``, ``no-main-guard``, ``dataloader-workers`` and ``dead-supports-context``
(one DataLoader's verdict decides which of them reports it). Not a rule itself."""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import List, Optional, Set, Tuple

from envtool.checks.scan.astutil import const_str, kwarg, last_name
from envtool.checks.scan.facts import CallSite
from envtool.checks.scan.program import Program

#: the fix named for forked DataLoader workers.
FORKSERVER = 'multiprocessing_context="forkserver"'
#: calls that choose a start method (``multiprocessing`` and ``torch.multiprocessing``).
CONTEXT_CALLS = {"set_start_method", "get_context"}


@dataclass
class LoaderVerdict:
    """What one ``DataLoader(...)`` call shows.

    Attributes:
        call: the DataLoader call.
        fork_at: the ``"fork"`` value of ``multiprocessing_context`` in a dict splatted into it
            (reported by ``fork-start-method`` at that value's line), or None.
        workers: ``(what, level, dead guard if or None)`` when its workers are forked (reported by
            ``dataloader-workers``), else None.
    """

    call: CallSite
    fork_at: Optional[ast.AST] = None
    workers: Optional[Tuple[str, str, Optional[ast.AST]]] = None


@dataclass
class StartMethods:
    """The start-method facts of a program.

    Attributes:
        uses: ``(call, method, is set_start_method)`` for each start method chosen by a constant
            (``set_start_method``/``get_context``/``multiprocessing_context=``).
        loaders: the verdicts of DataLoaders with something to report (only under an MPI launch,
            where forked workers are a risk).
        used_guards: ids of the dead ``_supports_context`` ifs a reported DataLoader depends on.
    """

    uses: List[Tuple[CallSite, str, bool]]
    loaders: List[LoaderVerdict] = field(default_factory=list)
    used_guards: Set[int] = field(default_factory=set)


def start_methods(prog: Program) -> StartMethods:
    """The :class:`StartMethods` of ``prog`` (computed once per program)."""
    got = prog.memo.get("start_methods")
    if isinstance(got, StartMethods):
        return got
    uses: List[Tuple[CallSite, str, bool]] = []
    for c in prog.calls:
        if last_name(c.node.func) in CONTEXT_CALLS:
            arg = c.node.args[0] if c.node.args else kwarg(c.node, "method")
            method = prog.resolved_str(arg, c) if arg is not None else None
            if method:
                uses.append((c, method, last_name(c.node.func) == "set_start_method"))
        ctx_node = kwarg(c.node, "multiprocessing_context")
        ctx = prog.resolved_str(ctx_node, c) if ctx_node is not None else None
        if ctx:
            uses.append((c, ctx, False))
    out = StartMethods(uses)
    if prog.mpi:  # forked workers are a risk where MPI (or Horovod over InfiniBand) is in the process
        global_safe = any(m in ("spawn", "forkserver") and is_set and c.dead_if is None for c, m, is_set in uses)
        for c in prog.calls:
            if last_name(c.node.func) == "DataLoader":
                verdict = _judge_loader(prog, c, global_safe, out.used_guards)
                if verdict is not None:
                    out.loaders.append(verdict)
    prog.memo["start_methods"] = out
    return out


def workers_value(prog: Program, node: Optional[ast.AST], call: Optional[CallSite] = None) -> Tuple[str, str]:
    """(``yes``|``no``|``unknown``, shown) for a num_workers value."""
    if node is None:
        return "no", "0"
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return ("yes" if node.value > 0 else "no"), str(node.value)
    const = prog.const_value(node, call) if call is not None else None
    if isinstance(const, int) and not isinstance(const, bool):
        return ("yes" if const > 0 else "no"), f"{ast.unparse(node)} (= {const})"
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        d = prog.argparse_defaults().get(node.attr)
        if isinstance(d, ast.Constant) and isinstance(d.value, int):
            return ("yes" if d.value > 0 else "unknown"), f"{ast.unparse(node)} (default {d.value})"
    return "unknown", ast.unparse(node)


def _judge_loader(prog: Program, c: CallSite, global_safe: bool,
                  used_guards: Set[int]) -> Optional[LoaderVerdict]:
    """The verdict on DataLoader call ``c`` (None: nothing to report); adds the dead guard it depends
    on to ``used_guards``. ``global_safe``: spawn/forkserver is set for the whole program."""
    n = c.node
    workers_node = kwarg(n, "num_workers")
    if workers_node is None and len(n.args) > 5:
        workers_node = n.args[5]
    context = kwarg(n, "multiprocessing_context")
    if context is not None and prog.resolved_str(context, c) == "fork":
        return None  # the fork-start-method rule names it
    if context is not None:
        return None  # a literal "fork" is the fork-start-method rule; anything else is a choice made
    verdicts: List[Tuple[str, str]] = []
    dead: Optional[ast.AST] = None
    splats = [k.value for k in n.keywords if k.arg is None]
    unresolved_splat = None
    for s in splats:
        returned = prog.returned_dicts(CallSite(s, c.module, c.func, c.guarded, c.dead_if)) \
            if isinstance(s, ast.Call) else None
        if not isinstance(s, (ast.Name, ast.Dict)) and returned is None:
            unresolved_splat = ast.unparse(s)
            continue
        if returned is not None:
            lits, items = returned
        elif isinstance(s, ast.Dict):
            lits, items = [s], []
        else:
            if not isinstance(s, ast.Name):  # a Call with no returned dicts was skipped above
                continue
            got = prog.dict_values(c, s.id)
            f = c.func
            if got is None and f is not None and s.id in f.params:  # **kwargs: a parameter
                for site in f.sites:
                    arg = prog.bound_argument(f, site, s.id)
                    if isinstance(arg, ast.Name):
                        got = prog.dict_values(site, arg.id)
                    elif isinstance(arg, ast.Dict):
                        got = ([arg], [])
                    if got is not None:
                        break
            if got is None:
                unresolved_splat = s.id
                continue
            lits, items = got
        ctx_set = False
        for key, val, dead_if in items:
            if key == "multiprocessing_context":
                if dead_if is not None:
                    dead = dead_if
                elif const_str(val) == "fork":
                    return LoaderVerdict(c, fork_at=val)
                else:
                    ctx_set = True
            elif key == "num_workers" and workers_node is None:
                verdicts.append(workers_value(prog, val, c))
        for lit in lits:
            ok, v = prog.dict_get(lit, "multiprocessing_context")
            if not ok:
                unresolved_splat = ast.unparse(lit)
                continue
            if v is not None:
                ctx_set = True
            if workers_node is None:
                ok, w = prog.dict_get(lit, "num_workers")
                verdicts.append(workers_value(prog, w, c))
        if ctx_set:
            return None
    if workers_node is not None:
        verdicts.append(workers_value(prog, workers_node, c))
    if dead is not None:
        used_guards.add(id(dead))
    if global_safe:
        return None
    yes = [s for v, s in verdicts if v == "yes"]
    unknown = [s for v, s in verdicts if v == "unknown"]
    if not yes and not unknown and unresolved_splat is None:
        return None
    if yes:
        what, level = f"num_workers={yes[0]}", "warn"
    elif unknown:
        what, level = f"num_workers={unknown[0]}, not resolved", "info"
    else:
        what, level = f"**{unresolved_splat} not resolved", "info"
    return LoaderVerdict(c, workers=(what, level, dead))
