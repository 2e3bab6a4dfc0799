"""Analyses the issue-42 rules share (not a rule): the epoch loop a fix goes into, the name a call's
value is bound to, and the frameworks that do a rank's data work themselves."""
from __future__ import annotations

import ast
from typing import List, Optional, Set, Tuple

from envtool.checks.scan.astutil import last_name
from envtool.checks.scan.facts import CallSite, FuncFacts, ModuleFacts
from envtool.checks.scan.program import Program

#: callables that run the training loop themselves and handle samplers, seeds and rank-0 writes
#: (Lightning's Trainer, https://lightning.ai/docs/pytorch/stable/common/trainer.html; Accelerate's
#: prepare(); Hugging Face's Trainer).
FRAMEWORK_LOOPS = ("Trainer", "prepare", "prepare_data_loader", "Fabric", "setup_dataloaders")
#: the packages those come from.
FRAMEWORK_PACKAGES = ("pytorch_lightning", "lightning", "lightning_fabric", "transformers", "accelerate")


def own_classes(prog: Program) -> Set[str]:
    """Names of the classes the program's modules define at their top level that derive from no
    framework loop class (a project's own ``class Trainer:`` runs its own loop)."""
    got = prog.memo.get("own_classes")
    if isinstance(got, set):
        return got
    out: Set[str] = set()
    for m in prog.modules:
        for stmt in m.tree.body if m.tree is not None else ():
            if isinstance(stmt, ast.ClassDef) and not any(last_name(b) in FRAMEWORK_LOOPS for b in stmt.bases):
                out.add(stmt.name)
    prog.memo["own_classes"] = out
    return out


def framework_loop(prog: Program) -> Optional[CallSite]:
    """The first reached call of a framework that runs the loop (Lightning/HF ``Trainer``,
    Accelerate ``prepare``, Lightning ``Fabric``), else None; ``Trainer(...)`` of a class the
    project defines itself (not derived from a framework's) does not count."""
    for c in prog.calls:
        name = last_name(c.node.func)
        if name in FRAMEWORK_LOOPS:
            origin = c.module.from_imports.get(name, "").lstrip(".").split(".")[0]
            if isinstance(c.node.func, ast.Name) and name in own_classes(prog) and origin not in FRAMEWORK_PACKAGES:
                continue  # the project's own Trainer class (defined beside the call or imported from the project)
            return c
    return None


def bound_name(prog: Program, call: CallSite) -> Optional[str]:
    """The name (``sampler``, ``self.sampler``) that the value of ``call`` is assigned to, else None."""
    for fn, target, value, _ in call.module.assigns:
        if value is call.node and isinstance(target, (ast.Name, ast.Attribute)):
            return ast.unparse(target)
    return None


def epoch_loops(prog: Program) -> List[Tuple[ModuleFacts, Optional[FuncFacts], ast.For]]:
    """``for`` loops whose target or iterable names an epoch (``for epoch in range(n)``,
    ``for i in range(args.epochs)``) in code the entry point reaches, the entry module's first (walked once per program, only when a rule asks)."""
    got = prog.memo.get("epoch_loops")
    if isinstance(got, list):
        return got
    out: List[Tuple[ModuleFacts, Optional[FuncFacts], ast.For]] = []
    for m in prog.modules:
        scopes: List[Tuple[Optional[FuncFacts], ast.AST]] = [(f, f.node) for f in m.funcs if id(f) in prog.reached]
        if m.tree is not None:
            scopes.append((None, m.tree))
        for f, root in scopes:
            stack = list(ast.iter_child_nodes(root))
            while stack:
                node = stack.pop()
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                    continue  # judged as its own scope
                if isinstance(node, ast.For) and "epoch" in (ast.unparse(node.target) + ast.unparse(node.iter)).lower():
                    out.append((m, f, node))
                stack.extend(ast.iter_child_nodes(node))
    out.sort(key=lambda t: (t[0] is not prog.entry, t[2].lineno))
    prog.memo["epoch_loops"] = out
    return out


def epoch_var(loop: ast.For) -> str:
    """The name in an epoch loop's target that holds the epoch (``epoch`` of ``for i, epoch in ...``)."""
    names = [n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)]
    for n in names:
        if "epoch" in n.lower():
            return n
    return names[0] if names else "epoch"
