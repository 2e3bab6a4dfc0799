"""Small, pure helpers over :mod:`ast` nodes shared by the resolver and the rules (no state)."""
from __future__ import annotations

import ast
from typing import Dict, List, Optional, Sequence, Set, Tuple


def dotted(node: ast.AST) -> Optional[str]:
    """``a.b.c`` for a Name/Attribute chain, None for anything else (iterative: no recursion)."""
    parts: List[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def last_name(node: ast.AST) -> str:
    """The last part of a Name/Attribute (``c`` of ``a.b.c``); '' for any other node."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def const_str(node: Optional[ast.AST]) -> Optional[str]:
    """The value of a string literal; None for anything else."""
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def kwarg(call: ast.Call, name: str) -> Optional[ast.AST]:
    """The value passed as keyword ``name`` in ``call``; None when it is not passed by name."""
    for k in call.keywords:
        if k.arg == name:
            return k.value
    return None


#: names that stand for the rank within a node (a GPU index chosen per node).
LOCAL_NAMES = {"gpu", "gpu_id", "local_gpu", "device_id", "gpu_index", "local_process_index", "localrank"}
#: words that show code written for several nodes (matched case-insensitively in the source).
MULTINODE_WORDS = ("nnodes", "node_rank", "num_nodes", "n_nodes", "nodeid", "ngpus_per_node", "gpus_per_node",
                    "slurm_procid", "slurm_ntasks", "node_id", "num_machines", "machine_rank")


def rank_kind(test: ast.AST, aliases: Optional[Dict[str, str]] = None) -> Optional[str]:
    """Which rank an ``if`` test depends on: ``"global"`` (``hvd.rank()``, ``dist.get_rank()``,
    ``is_root`` ...), ``"local"`` (only the rank within a node: ``hvd.local_rank()``,
    ``args.local_rank``, ``os.environ["LOCAL_RANK"]``, ``args.gpu``, ``rank % ngpus_per_node``),
    or None (no rank at all). ``aliases``: names assigned a rank earlier (name → kind)."""
    kind: Optional[str] = None
    modded: Set[int] = set()
    for sub in ast.walk(test):
        if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Mod) and rank_kind(sub.left, aliases):
            modded.update(id(x) for x in ast.walk(sub.left))  # rank % gpus_per_node: the GPU within a node
            kind = kind or "local"
    for sub in ast.walk(test):
        if id(sub) in modded:
            continue
        text = ""
        if isinstance(sub, ast.Call) and last_name(sub.func) in ("rank", "local_rank", "cross_rank", "get_rank",
                                                            "get_local_rank", "get_node_local_rank"):
            text = last_name(sub.func)
        elif isinstance(sub, (ast.Name, ast.Attribute)):
            last = last_name(sub).lower()
            if "rank" in last or last in ("is_root", "is_master", "is_main", "is_main_process", "master",
                                          "is_global_zero", "is_local_main_process", "is_local_master",
                                          "is_chief", "task_id"):
                text = last
            elif last in LOCAL_NAMES:
                text = "local"
            elif aliases and last_name(sub) in aliases:
                text = "local" if aliases[last_name(sub)] == "local" else "rank"
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str) and sub.value in (
                "RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_PROCID",
                "SLURM_LOCALID", "PMI_RANK", "MV2_COMM_WORLD_RANK", "PMIX_RANK"):
            text = sub.value
        if not text:
            continue
        t = text.lower()
        if "local" in t or t == "slurm_localid":
            kind = kind or "local"
        else:
            return "global"
    return kind


def stronger(a: Optional[str], b: Optional[str]) -> Optional[str]:
    """The combined guard of nested rank tests: a global-rank test anywhere wins."""
    if a == "global" or b == "global":
        return "global"
    return a or b


def has_dead_guard(test: ast.AST) -> bool:
    """Whether a test reads ``_supports_context`` (the guard of Horovod's examples, PR #1824,
    https://github.com/horovod/horovod/pull/1824: always false on current torch)."""
    for sub in ast.walk(test):
        if isinstance(sub, ast.Attribute) and sub.attr == "_supports_context":
            return True
        if isinstance(sub, ast.Call) and last_name(sub.func) == "hasattr" and len(sub.args) > 1 \
                and const_str(sub.args[1]) == "_supports_context":
            return True
    return False


def is_main_guard(stmt: ast.AST) -> bool:
    """Whether ``stmt`` is ``if __name__ == "__main__":``."""
    if isinstance(stmt, ast.If) and isinstance(stmt.test, ast.Compare):
        names = [stmt.test.left] + list(stmt.test.comparators)
        return any(isinstance(n, ast.Name) and n.id == "__name__" for n in names) and \
            any(const_str(n) == "__main__" for n in names)
    return False


def early_return_index(body: Sequence[ast.stmt], aliases: Optional[Dict[str, str]] = None
                        ) -> Tuple[Optional[int], Optional[str]]:
    """Index and rank kind of the first ``if <rank test>: return|raise`` statement of a function body."""
    for i, stmt in enumerate(body):
        if isinstance(stmt, ast.If) and not stmt.orelse and \
                any(isinstance(s, (ast.Return, ast.Raise)) for s in stmt.body):
            kind = rank_kind(stmt.test, aliases)
            if kind is not None:
                return i, kind
    return None, None
