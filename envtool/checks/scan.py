"""Static scan of training scripts (``doctor --script``): Python ``ast``, nothing is executed.

Rules (ids in :data:`RULES`), from seed ``000_…txt`` ("Problems Distributing Pytorch with
Multiple Data Loader Workers"), horovod.md ("DataLoader start method") and the seven steps of
seed ``004_…txt`` (init, pin GPU, scale the learning rate, distributed optimizer, broadcast,
checkpoint on rank 0, shard the data):

* ``dataloader-workers``: ``DataLoader(…)`` with ``num_workers`` > 0 or not a literal and no
  ``multiprocessing_context`` (and no ``set_start_method("forkserver"|"spawn")`` in the file):
  workers are forked, the Linux default before Python 3.14;
* ``dead-supports-context``: the ``mp._supports_context`` guard of Horovod's examples
  (PR #1824): torch no longer has that attribute, the guard is always false;
* ``fork-start-method``: ``set_start_method("fork")``, ``get_context("fork")`` or
  ``multiprocessing_context="fork"``;
* ``no-main-guard``: spawn/forkserver is used and there is no module-level
  ``if __name__ == "__main__":`` (workers re-import the main module);
* ``lr-not-scaled``: an optimizer's learning rate does not involve ``hvd.size()`` (step 3);
* ``no-broadcast``: Horovod is used and nothing broadcasts the initial state (step 5);
* ``checkpoint-all-ranks``: a checkpoint write not under a rank test (step 6).

The Horovod rules only apply to files that import Horovod.
"""
from __future__ import annotations

import ast
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set

#: rule id → one-line description.
RULES: Dict[str, str] = {
    "dataloader-workers": "DataLoader with worker processes and no multiprocessing_context",
    "dead-supports-context": "the dead mp._supports_context guard from Horovod's examples",
    "fork-start-method": "the fork start method chosen explicitly",
    "no-main-guard": "spawn/forkserver without an if __name__ == \"__main__\": guard",
    "lr-not-scaled": "learning rate not scaled by hvd.size()",
    "no-broadcast": "no broadcast of the initial model/optimizer state",
    "checkpoint-all-ranks": "checkpoint written on every rank",
    "syntax": "the file does not parse",
}

FORKSERVER = 'multiprocessing_context="forkserver"'
_OPTIMIZER = re.compile(r"(^|\.)(optim\.(?!lr_scheduler)[A-Z]\w*|optimizers\.[A-Z]\w*|train\.\w+Optimizer)$")
_SAVE_LAST = {"save_weights", "save_checkpoint", "save_pretrained", "ModelCheckpoint"}
_BROADCAST = {"broadcast_parameters", "broadcast_optimizer_state", "broadcast_variables",
              "broadcast_global_variables", "BroadcastGlobalVariablesCallback", "BroadcastGlobalVariablesHook",
              "broadcast_object"}
_CONTEXT_CALLS = {"set_start_method", "get_context"}


@dataclass(frozen=True)
class ScanIssue:
    """One risky pattern.

    Attributes:
        path: the file (as given).
        line: 1-based line of the construct.
        rule: a key of :data:`RULES`.
        message: what is wrong, in one line.
        fix: the change to make.
    """

    path: str
    line: int
    rule: str
    message: str
    fix: str

    def to_dict(self) -> dict:
        return asdict(self)


def dotted(node: ast.AST) -> Optional[str]:
    """``a.b.c`` for a Name/Attribute chain, None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _last(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _const_str(node: Optional[ast.AST]) -> Optional[str]:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _kw(call: ast.Call, name: str) -> Optional[ast.AST]:
    for k in call.keywords:
        if k.arg == name:
            return k.value
    return None


class _Scanner:
    def __init__(self, tree: ast.Module, path: str):
        self.tree = tree
        self.path = path
        self.issues: List[ScanIssue] = []
        self.parents: Dict[ast.AST, ast.AST] = {}
        for parent in ast.walk(tree):
            for child in ast.iter_child_nodes(parent):
                self.parents[child] = parent
        self.hvd_modules: Set[str] = set()
        self.hvd_funcs: Dict[str, str] = {}
        self.hvd_framework = "torch"
        self.hvd_import_line: Optional[int] = None
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == "horovod" or a.name.startswith("horovod."):
                        self.hvd_modules.add(a.asname or a.name)
                        self._note_framework(a.name, node.lineno)
            elif isinstance(node, ast.ImportFrom) and node.module and (
                    node.module == "horovod" or node.module.startswith("horovod.")):
                self._note_framework(node.module, node.lineno)
                for a in node.names:
                    if node.module == "horovod":  # from horovod import torch as hvd
                        self.hvd_modules.add(a.asname or a.name)
                        self._note_framework(f"horovod.{a.name}", node.lineno)
                    else:
                        self.hvd_funcs[a.asname or a.name] = a.name
        self.calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
        self.calls.sort(key=lambda n: (n.lineno, n.col_offset))

    def _note_framework(self, module: str, line: int) -> None:
        if self.hvd_import_line is None or line < self.hvd_import_line:
            self.hvd_import_line = line
        if "tensorflow" in module or "keras" in module:
            self.hvd_framework = "tensorflow"

    # -- helpers -------------------------------------------------------------------------
    @property
    def uses_horovod(self) -> bool:
        return bool(self.hvd_modules or self.hvd_funcs)

    def is_hvd_call(self, node: ast.AST, names: Iterable[str]) -> bool:
        if not isinstance(node, ast.Call):
            return False
        f = node.func
        names = set(names)
        if isinstance(f, ast.Attribute) and f.attr in names and dotted(f.value) in self.hvd_modules:
            return True
        return isinstance(f, ast.Name) and self.hvd_funcs.get(f.id) in names

    def add(self, node: ast.AST, rule: str, message: str, fix: str) -> None:
        line = getattr(node, "lineno", 1)
        if not any(i.line == line and i.rule == rule for i in self.issues):
            self.issues.append(ScanIssue(self.path, line, rule, message, fix))

    def ancestors(self, node: ast.AST):
        while node in self.parents:
            node = self.parents[node]
            yield node

    def has_main_guard(self) -> bool:
        for stmt in self.tree.body:
            if isinstance(stmt, ast.If) and isinstance(stmt.test, ast.Compare):
                names = [stmt.test.left] + list(stmt.test.comparators)
                if any(isinstance(n, ast.Name) and n.id == "__name__" for n in names) and \
                        any(_const_str(n) == "__main__" for n in names):
                    return True
        return False

    def start_method_uses(self):
        """``(node, method)`` for every literal start method chosen in the file."""
        for call in self.calls:
            if _last(call.func) in _CONTEXT_CALLS:
                method = _const_str(call.args[0]) if call.args else _const_str(_kw(call, "method"))
                if method:
                    yield call, method
            ctx = _const_str(_kw(call, "multiprocessing_context"))
            if ctx:
                yield call, ctx

    # -- rules ---------------------------------------------------------------------------
    def rule_start_methods(self) -> None:
        uses = list(self.start_method_uses())
        global_safe = any(_last(c.func) == "set_start_method" and m in ("spawn", "forkserver") for c, m in uses)
        for call, method in uses:
            if method == "fork":
                self.add(call, "fork-start-method",
                         "start method 'fork' chosen explicitly: workers forked after MPI/Horovod init can segfault "
                         "or deadlock on InfiniBand stacks (seed 000)", 'use "forkserver" instead of "fork"')
        spawnish = [(c, m) for c, m in uses if m in ("spawn", "forkserver")]
        if spawnish and not self.has_main_guard():
            call, method = spawnish[0]
            self.add(call, "no-main-guard",
                     f"start method {method!r} re-imports the main module in every worker, and the file has no "
                     "module-level if __name__ == \"__main__\": guard", 'move the entry point under '
                     'if __name__ == "__main__":')
        for call in self.calls:
            if _last(call.func) != "DataLoader":
                continue
            if any(k.arg is None for k in call.keywords):  # **kwargs: cannot tell
                continue
            workers = _kw(call, "num_workers")
            if workers is None and len(call.args) > 5:
                workers = call.args[5]
            if workers is None or _kw(call, "multiprocessing_context") is not None or global_safe:
                continue
            if isinstance(workers, ast.Constant) and isinstance(workers.value, int):
                if workers.value <= 0:
                    continue
                what = f"num_workers={workers.value}"
            else:
                what = f"num_workers={ast.unparse(workers)} (not a literal, may be > 0)"
            self.add(call, "dataloader-workers",
                     f"DataLoader({what}) without multiprocessing_context: workers are forked (Linux default "
                     "before Python 3.14), which can segfault or deadlock under MPI/InfiniBand (seed 000)",
                     f"pass {FORKSERVER} to DataLoader")

    def rule_dead_guard(self) -> None:
        for node in ast.walk(self.tree):
            hit = isinstance(node, ast.Attribute) and node.attr == "_supports_context"
            hit = hit or (isinstance(node, ast.Call) and _last(node.func) == "hasattr" and len(node.args) > 1
                          and _const_str(node.args[1]) == "_supports_context")
            if hit:
                self.add(node, "dead-supports-context",
                         "the mp._supports_context guard (Horovod examples, PR #1824) is always false on current "
                         "torch: the forkserver branch never runs and workers use fork",
                         f"drop the guard and pass {FORKSERVER} when num_workers > 0")

    def _mentions_size(self, node: ast.AST, scaled: Set[str]) -> bool:
        for sub in ast.walk(node):
            if self.is_hvd_call(sub, ("size",)):
                return True
            d = dotted(sub) if isinstance(sub, (ast.Name, ast.Attribute)) else None
            if d and d in scaled:
                return True
        return False

    def rule_lr(self) -> None:
        scaled: Set[str] = set()
        for _ in range(3):  # follow a few assignments: lr = base * hvd.size(); opt(lr=lr)
            for node in ast.walk(self.tree):
                if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None \
                        and self._mentions_size(node.value, scaled):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for t in targets:
                        d = dotted(t)
                        if d:
                            scaled.add(d)
        for call in self.calls:
            name = dotted(call.func) or ""
            if not _OPTIMIZER.search(name):
                continue
            lr = _kw(call, "lr") or _kw(call, "learning_rate")
            if lr is None:
                positional = 1 if ".optim." in f".{name}" else 0
                lr = call.args[positional] if len(call.args) > positional else None
            if lr is not None and self._mentions_size(lr, scaled):
                continue
            shown = ast.unparse(lr) if lr is not None else "the default"
            self.add(call, "lr-not-scaled",
                     f"{name}(...) learning rate {shown} is not scaled by hvd.size() (seed 004, step 3)",
                     f"multiply the learning rate by hvd.size(), e.g. lr={shown if lr is not None else 'LR'} * hvd.size()")

    def rule_broadcast(self) -> None:
        if any(_last(c.func) in _BROADCAST for c in self.calls):
            return
        init = next((c for c in self.calls if self.is_hvd_call(c, ("init",))), None)
        line = init.lineno if init is not None else (self.hvd_import_line or 1)
        fix = ("hvd.broadcast_parameters(model.state_dict(), root_rank=0) and "
               "hvd.broadcast_optimizer_state(optimizer, root_rank=0) after creating them")
        if self.hvd_framework == "tensorflow":
            fix = ("hvd.broadcast_variables(model.variables, root_rank=0) (or the Keras callback "
                   "hvd.callbacks.BroadcastGlobalVariablesCallback(0))")
        self.issues.append(ScanIssue(self.path, line, "no-broadcast",
                                     "Horovod is used but nothing broadcasts the initial model/optimizer state from "
                                     "rank 0: ranks start from different weights (seed 004, step 5)", fix))

    def _rank_test(self, test: ast.AST) -> bool:
        for sub in ast.walk(test):
            if isinstance(sub, ast.Call) and _last(sub.func) in ("rank", "local_rank", "cross_rank"):
                return True
            if isinstance(sub, (ast.Name, ast.Attribute)):
                last = _last(sub).lower()
                if "rank" in last or last in ("is_root", "is_master", "is_main", "is_main_process", "master"):
                    return True
        return False

    def _early_return_guard(self, node: ast.AST) -> bool:
        """``if hvd.rank() != 0: return`` earlier in an enclosing function body."""
        for anc in self.ancestors(node):
            if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for stmt in anc.body:
                    if stmt.lineno >= node.lineno:
                        break
                    if isinstance(stmt, ast.If) and self._rank_test(stmt.test) and \
                            any(isinstance(s, (ast.Return, ast.Raise)) for s in stmt.body):
                        return True
        return False

    def rule_checkpoint(self) -> None:
        for call in self.calls:
            name = dotted(call.func) or ""
            last = _last(call.func)
            receiver = (dotted(call.func.value) or "").lower() if isinstance(call.func, ast.Attribute) else ""
            is_save = name == "torch.save" or last in _SAVE_LAST or (
                last == "save" and any(w in receiver for w in ("checkpoint", "ckpt", "model", "saver")))
            if not is_save:
                continue
            guarded = any(isinstance(a, (ast.If, ast.IfExp)) and self._rank_test(a.test)
                          for a in self.ancestors(call))
            if guarded or self._early_return_guard(call):
                continue
            self.add(call, "checkpoint-all-ranks",
                     f"{name or last}(...) writes a checkpoint on every rank (seed 004, step 6)",
                     "write checkpoints only under if hvd.rank() == 0:")

    def run(self) -> List[ScanIssue]:
        self.rule_start_methods()
        self.rule_dead_guard()
        if self.uses_horovod:
            self.rule_lr()
            self.rule_broadcast()
            self.rule_checkpoint()
        return sorted(self.issues, key=lambda i: (i.line, i.rule))


def scan_source(text: str, path: str = "<string>") -> List[ScanIssue]:
    """Scan Python source ``text`` (reported as ``path``).

    Returns:
        the issues, by line; a file that does not parse gives one ``syntax`` issue.
    """
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as exc:
        return [ScanIssue(path, exc.lineno or 1, "syntax", f"does not parse: {exc.msg}",
                          "fix the syntax error (nothing else was checked)")]
    return _Scanner(tree, path).run()


def scan_file(path) -> List[ScanIssue]:
    """Scan one file.

    Raises:
        UsageError: the file cannot be read (exit status 2).
    """
    from envtool.core.errors import UsageError

    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UsageError(f"--script {path}: cannot read it ({exc.strerror})") from None
    return scan_source(text, str(path))
