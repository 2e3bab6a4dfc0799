"""The resolver: what a name in a program refers to, and the values the rules judge.

A *program* is an entry point and the modules its imports reach (:class:`Program`). The
resolver answers, for the rules: which project functions a call reaches (``f()``, ``self.f()``,
``module.f()``) and which functions the entry point can reach at all; the called name with import
aliases replaced (:meth:`Program.qualname`); whether a call is a Horovod call through any alias
(:meth:`Program.is_hvd_call`); whether a call runs on some ranks only (:meth:`Program.covered`,
followed through call sites); constant values through assignments, enclosing scopes and class
constants (:meth:`Program.const_value`); dicts splatted with ``**`` (:meth:`Program.dict_values`,
:meth:`Program.returned_dicts`); the argument a call site binds to a parameter
(:meth:`Program.bound_argument`); whether a learning rate involves ``hvd.size()``
(:meth:`Program.judge`); and the launch the program is assumed to use. It reports nothing itself.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Set, Tuple

from envtool.checks.scan.astutil import const_str, dotted, kwarg, last_name
from envtool.checks.scan.facts import CallSite, DictIndex, FuncFacts, ModuleFacts
from envtool.checks.scan.model import assumed_text
from envtool.checks.scan.levels import shipped_level

#: optimizer constructors by dotted name (``torch.optim.SGD``, ``keras.optimizers.Adam``, ``tf.train.*Optimizer``).
OPTIMIZER_RE = re.compile(r"(^|\.)(optim\.(?!lr_scheduler)[A-Z]\w*|optimizers\.[A-Z]\w*|train\.\w+Optimizer)$")
#: modules whose capitalised names are optimizers.
OPTIMIZER_MODULES = ("torch.optim", "tensorflow.keras.optimizers", "keras.optimizers", "tensorflow.optimizers")
#: horovod.spark estimators that scale the learning rate by hvd.size() and broadcast themselves
#: (horovod@v0.28.1:horovod/spark/keras/remote.py, horovod/spark/torch/remote.py).
ESTIMATORS_SCALING = {"horovod.spark.keras.KerasEstimator", "horovod.spark.keras.estimator.KerasEstimator",
                      "horovod.spark.lightning.TorchEstimator", "horovod.spark.lightning.estimator.TorchEstimator",
                      "horovod.spark.torch.TorchEstimator", "horovod.spark.torch.estimator.TorchEstimator"}
#: Horovod calls that make a function part of the training itself (not a checkpoint helper).
HVD_WORK = {"init", "DistributedOptimizer", "DistributedGradientTape", "broadcast_parameters",
            "broadcast_optimizer_state", "broadcast_variables", "allreduce", "allgather", "run"}
SIZE_CALLS = {"size"}
#: torch.distributed calls that make a function part of the training itself.
DIST_WORK = {"init_process_group", "DistributedDataParallel", "DDP", "FullyShardedDataParallel", "spawn",
             "all_reduce", "barrier"}

#: TensorFlow strategies that run one process per worker (TF_CONFIG names them,
#: https://www.tensorflow.org/api_docs/python/tf/distribute/MultiWorkerMirroredStrategy).
MULTIWORKER = {"MultiWorkerMirroredStrategy", "CollectiveAllReduceStrategy"}
#: DeepSpeed calls that start the process group (https://deepspeed.readthedocs.io/en/latest/initialize.html).
DEEPSPEED_INIT = ("deepspeed.initialize", "deepspeed.init_distributed")

#: methods a framework calls by name (torch.nn.Module, Lightning, Keras, threading, Dataset).
HOOKS = {"forward", "setup", "prepare_data", "train_dataloader", "val_dataloader", "test_dataloader", "run",
         "call", "build", "fit", "train", "main"}

#: ``add(module, line, rule, message, fix, level)``: where a program's findings go (the project's collector).
Sink = Callable[[ModuleFacts, int, str, str, str, str, Optional["Edit"]], None]

#: what a value stands for (:meth:`Program.dict_values`): ``(dict literals or dict() calls, [(key, value,
#: the dead-guard ``if`` it is assigned under, or None)])``.
DictValues = Tuple[List[ast.AST], List[Tuple[str, ast.AST, Optional[ast.AST]]]]


#: in an :class:`Edit`'s ``span`` text: the source it replaces (``SAME + " * hvd.size()"``).
SAME = "\x00"


@dataclass(frozen=True)
class Edit:
    """A fix as a one-line edit, made concrete against the file's text by :func:`edit_dict`.

    Attributes:
        module: the file to change; ``line``: its 1-based line.
        kind: ``insert`` (``text`` becomes a new line after ``line``, indented like the block that
            follows a line ending in ``:``, else like ``line``), ``span`` (the characters
            ``col``..``end_col`` of ``line``, as :mod:`ast` counts them in UTF-8 bytes, become
            ``text``, where :data:`SAME` stands for the characters replaced), ``arg`` (``text``
            becomes the last argument of the one-line call at ``col``..``end_col``) or ``guard`` (the one-line statement on ``line`` runs only ``if text:``).
    """

    module: ModuleFacts
    line: int
    kind: str
    text: str
    col: int = 0
    end_col: int = 0

    @staticmethod
    def insert(module: ModuleFacts, line: int, text: str) -> "Edit":
        """An edit adding ``text`` as a new line after ``line``."""
        return Edit(module, line, "insert", text)

    @staticmethod
    def replace(module: ModuleFacts, node: ast.AST, text: str) -> "Edit":
        """An edit replacing the source of ``node`` (one line) with ``text``."""
        return Edit(module, getattr(node, "lineno", 0), "span", text, getattr(node, "col_offset", 0),
                    getattr(node, "end_col_offset", -1) if getattr(node, "end_lineno", -1) == getattr(
                        node, "lineno", 0) else -1)

    @staticmethod
    def add_arg(module: ModuleFacts, call: ast.AST, text: str) -> "Edit":
        """An edit adding ``text`` (``seed=0``) as the last argument of the one-line ``call``."""
        e = Edit.guard(module, call, text)
        return Edit(module, e.line, "arg", text, e.col, e.end_col)

    @staticmethod
    def guard(module: ModuleFacts, call: ast.AST, condition: str) -> "Edit":
        """An edit putting the one-line statement made of ``call`` under ``if condition:``."""
        return Edit(module, getattr(call, "lineno", 0), "guard", condition, getattr(call, "col_offset", 0),
                    getattr(call, "end_col_offset", -1) if getattr(call, "end_lineno", -1) == getattr(
                        call, "lineno", 0) else -1)


def edit_dict(edit: Edit) -> Optional[Dict[str, object]]:
    """``{"path", "line", "old", "new"}``: the whole line ``line`` as it is and as the fix leaves it
    (``new`` holds two lines for an insertion), or None when the file's text does not allow the edit
    (unreadable, or the construct spans several lines or shares its line)."""
    mod, line = edit.module, edit.line
    old = mod.line_text(line)
    if not old.strip():
        return None
    indent = old[:len(old) - len(old.lstrip())]
    raw = old.encode("utf-8")
    if edit.kind == "insert":
        inner = indent
        if old.rstrip().endswith(":"):
            nxt = mod.line_text(line + 1)
            inner = nxt[:len(nxt) - len(nxt.lstrip())] if nxt.strip() else indent + "    "
            if len(inner) <= len(indent):
                inner = indent + "    "
        new = f"{old}\n{inner}{edit.text}"
    elif edit.kind == "span":
        if edit.end_col < 0 or edit.end_col > len(raw):
            return None
        text = edit.text.replace(SAME, raw[edit.col:edit.end_col].decode("utf-8", "replace"))
        new = (raw[:edit.col] + text.encode("utf-8") + raw[edit.end_col:]).decode("utf-8", "replace")
    elif edit.kind == "arg":
        if edit.end_col < 0 or edit.end_col > len(raw) or raw[edit.end_col - 1:edit.end_col] != b")":
            return None
        inner = raw[edit.col:edit.end_col - 1].decode("utf-8", "replace").rstrip()
        sep = "" if inner.endswith("(") else ", "
        new = (raw[:edit.col].decode("utf-8", "replace") + inner + sep + edit.text + ")" +
               raw[edit.end_col:].decode("utf-8", "replace"))
    elif edit.kind == "guard":
        # only a statement that is the call alone on its line
        if edit.end_col < 0 or edit.col != len(indent.encode("utf-8")) or raw[edit.end_col:].strip() not in (b"", b";"):
            return None
        new = f"{indent}if {edit.text}: {old.strip()}"
    else:
        return None
    return {"path": mod.shown, "line": line, "old": old, "new": new}


def _str_items(lit: ast.Dict, dead_if: Optional[ast.AST]) -> List[Tuple[str, ast.AST, Optional[ast.AST]]]:
    """``(key, value, dead_if)`` for each item of a dict literal whose key is a string literal."""
    out: List[Tuple[str, ast.AST, Optional[ast.AST]]] = []
    for k, v in zip(lit.keys, lit.values):
        key = const_str(k)
        if key:
            out.append((key, v, dead_if))
    return out


class Program:
    """The modules joined by imports: one program, judged together."""

    def __init__(self, modules: List[ModuleFacts], entry: ModuleFacts, sink: Sink, imported: Set[Path],
                 forced_launch: Optional[str] = None):
        """Resolve a program.

        Args:
            modules: the program's modules (the entry point's first), parsed.
            entry: the entry point's module.
            sink: where :meth:`add` sends findings.
            imported: resolved paths of the project's modules that another module imports (not run
                as a script).
            forced_launch: a key of :data:`LAUNCHES` given with ``--launch``, or None to decide.
        """
        self._sink = sink
        self.imported = imported
        self.forced_launch = forced_launch
        self.modules = modules
        self.entry = entry
        self.funcs: Dict[str, List[FuncFacts]] = {}
        for m in modules:
            last_def: Dict[Tuple[Optional[str], int, str], FuncFacts] = {}
            for f in m.funcs:  # a later def of the same name in the same scope replaces the earlier one
                if isinstance(f.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    key = (f.cls, id(f.parent), f.name)
                    old = last_def.get(key)
                    if old is None or old.node.lineno < f.node.lineno:
                        last_def[key] = f
            live = {id(f) for f in last_def.values()}
            for f in m.funcs:
                f.sites.clear()  # a module shared by two programs: its call sites are per program
                if isinstance(f.node, ast.Lambda) or id(f) in live:
                    self.funcs.setdefault(f.name, []).append(f)
        self.shadowed = {id(f) for m in modules for f in m.funcs
                         if not isinstance(f.node, ast.Lambda) and f not in self.funcs.get(f.name, ())}
        self.all_calls = [c for m in modules for c in m.calls]
        # a pure library (no code runs at its top level): every function may be called
        self.library = not self.entry.main_guard and self.entry.first_toplevel_call is None
        self.reached = self._reachable()
        self.calls = [c for c in self.all_calls if c.func is None or id(c.func) in self.reached]
        for c in self.calls:
            for f in self.resolve(c):
                f.sites.append(c)
        self.uses_hvd = any(m.hvd_binding for m in modules)
        self.lightning_hvd = any(self._lightning_horovod(c) for c in self.calls)
        self.estimator_scales = any(self.qualname(c) in ESTIMATORS_SCALING for c in self.calls)
        self.has_init = any(self.is_hvd_call(c, ("init",)) or last_name(c.node.func) == "run" and
                            self.is_hvd_call(c, ("run",)) and "elastic" in ast.unparse(c.node.func)
                            for c in self.calls) or any(
            "elastic.run" in ast.unparse(d) for m in modules for f in m.funcs if id(f) in self.reached
            for d in getattr(f.node, "decorator_list", ()))
        self.hvd_work = {id(c.func) for c in self.calls if c.func is not None and (
            self.is_hvd_call(c, HVD_WORK) or last_name(c.node.func) in DIST_WORK)}
        self.in_memory = {id(c.func) for c in self.calls if c.func is not None and last_name(c.node.func) == "BytesIO"}
        self._covered: Dict[int, Optional[str]] = {}
        self._scaled_names: Dict[int, Set[str]] = {}
        self._size_funcs: Optional[Set[int]] = None
        self._argparse: Optional[Dict[str, ast.AST]] = None
        self._definite_cache: Dict[int, Set[str]] = {}
        #: analyses shared by several rules, made once per program (key: the analysis's name).
        self.memo: Dict[str, object] = {}
        self.launch, self.launch_reason = self._decide_launch()
        #: torch.distributed's rank is 0 on every rank: a Horovod launch that never calls
        #: init_process_group (a test of dist.get_rank() holds everywhere, or raises)
        self.dist_rank_zero = self.launch == "horovod" and not any(
            last_name(c.node.func) == "init_process_group" for c in self.calls)

    def _reachable(self) -> Set[int]:
        """ids of the functions the entry point can reach: called (by name, ``self.f``, ``module.f``)
        or referred to (passed as a callback, a class instantiated: all its methods) from code that
        runs (module level of every module of the program, then reached functions); nested
        functions of a reached function. A pure library reaches every function."""
        funcs = [f for m in self.modules for f in m.funcs if id(f) not in self.shadowed]
        if self.library:
            return {id(f) for f in funcs}
        by_name: Dict[str, List[FuncFacts]] = {}
        by_class: Dict[str, List[FuncFacts]] = {}
        methods: Dict[str, List[FuncFacts]] = {}
        children: Dict[int, List[FuncFacts]] = {}
        for f in funcs:
            if f.cls is None:
                by_name.setdefault(f.name, []).append(f)
            else:
                by_class.setdefault(f.cls, []).append(f)
                methods.setdefault(f.name, []).append(f)
            if f.parent is not None:
                children.setdefault(id(f.parent), []).append(f)
        reached: Set[int] = set()
        work: List[Tuple[ModuleFacts, Optional[FuncFacts]]] = [(m, None) for m in self.modules]
        while work:
            mod, scope = work.pop()
            names = mod.refs.get(id(scope), ())
            new: List[FuncFacts] = []
            for n in names:
                if n.startswith("."):  # self.f / cls.f
                    new.extend(methods.get(n[1:], ()))
                elif "." in n:  # module.f of a project module; obj.method of a project class
                    base, attr = n.split(".", 1)
                    if base in mod.project_aliases:
                        new.extend(by_name.get(attr, ()))
                        new.extend(by_class.get(attr, ()))
                    new.extend(methods.get(attr, ()))
                else:
                    new.extend(by_name.get(n, ()))
                    new.extend(by_class.get(n, ()))
            if scope is not None:
                new.extend(children.get(id(scope), ()))
            for f in new:
                if id(f) not in reached:
                    reached.add(id(f))
                    work.append((f.module, f))
        return reached

    def _decide_launch(self) -> Tuple[str, str]:
        """(a key of :data:`LAUNCHES`, the reason in words) for this program; ``--launch`` wins."""
        forced = self.forced_launch
        if forced:
            return forced, "--launch " + forced
        for m in self.modules:
            # the entry point importing a binding, or a Horovod call the entry point reaches: a helper
            # module that imports horovod.torch but whose Horovod code never runs does not decide
            if m.hvd_binding and (m is self.entry or self.library):
                return "horovod", f"imports {m.hvd_binding_name} ({m.shown}:{m.hvd_import_line})"
        for c in self.calls:
            if c.module.hvd_binding and self.any_hvd_call(c):
                return "horovod", (f"calls {ast.unparse(c.node.func)}() of {c.module.hvd_binding_name} "
                                   f"({c.module.shown}:{c.node.lineno})")
        for c in self.calls:
            if self._lightning_horovod(c):
                return "horovod", f"Lightning's Horovod strategy ({c.module.shown}:{c.node.lineno})"
        for m in self.modules:
            if any(v.split(".")[0] == "mpi4py" for v in list(m.module_aliases.values()) +
                   list(m.from_imports.values())):
                return "mpi", f"imports mpi4py, which initialises MPI in the process ({m.shown})"
        for c in self.calls:
            last = last_name(c.node.func)
            if last == "init_process_group":
                backend = const_str(c.node.args[0]) if c.node.args else const_str(kwarg(c.node, "backend"))
                if backend == "mpi":
                    return "mpi", f"init_process_group(backend='mpi') ({c.module.shown}:{c.node.lineno})"
                return "torchrun", (f"init_process_group({'backend=' + repr(backend) if backend else ''}) "
                                    f"({c.module.shown}:{c.node.lineno})")
        for c in self.calls:
            last = last_name(c.node.func)
            q = self.qualname(c)
            if last in ("DistributedDataParallel", "FullyShardedDataParallel") or q.startswith("deepspeed.") or \
                    (last == "spawn" and "multiprocessing" in q) or last == "Accelerator":
                return "torchrun", f"{last}() ({c.module.shown}:{c.node.lineno})"
        for c in self.calls:
            if last_name(c.node.func) in MULTIWORKER:
                return "tf-multiworker", f"{last_name(c.node.func)}() ({c.module.shown}:{c.node.lineno})"
        for c in self.calls:
            if last_name(c.node.func) == "Trainer" and c.module.lightning:
                return "lightning", f"a Lightning Trainer ({c.module.shown}:{c.node.lineno})"
        for m in self.modules:
            if any(v.split(".")[0] == "mpi4py" for v in list(m.module_aliases.values()) +
                   list(m.from_imports.values())):
                return "mpi", f"imports mpi4py ({m.shown})"
        return "single", "no distributed framework is imported or called"

    @property
    def multinode_job(self) -> bool:
        """Whether the program is meant for several nodes: a Horovod/MPI launch (horovodrun/mpirun
        spread ranks over hosts), or code that names nodes (``node_rank``, ``nnodes``, ``ngpus_per_node``,
        ``SLURM_PROCID`` ...)."""
        return self.mpi or any(m.multinode for m in self.modules)

    @property
    def mpi(self) -> bool:
        """Whether the launch puts MPI (or Horovod's controller over InfiniBand) in the process."""
        return self.launch in ("horovod", "mpi")

    def assumed(self) -> str:
        """`` [launch: …, because …]``: appended to every launch-specific message."""
        return assumed_text(self.launch, self.launch_reason)

    def add(self, mod: ModuleFacts, line: int, rule: str, message: str, fix: str, level: str = "warn",
            edit: Optional["Edit"] = None) -> None:
        """Report a finding of rule ``rule`` at ``mod``:``line`` (``level`` ``warn`` or ``info``); the
        project keeps the first finding per file, line and rule (a ``warn`` replaces an ``info``).
        ``edit``: the fix as a one-line edit (:class:`Edit`), or None where none exists. A rule whose
        held-out precision is below 0.9 ships its ``warn`` findings at ``info`` (:mod:`.levels`)."""
        self._sink(mod, line, rule, message, fix, shipped_level(rule, level), edit)

    # -- which rules judge the program ---------------------------------------------------------
    @property
    def horovod(self) -> bool:
        """A Horovod launch and a Horovod framework binding imported: the Horovod rules apply."""
        return self.launch == "horovod" and self.uses_hvd

    @property
    def horovod_ranks(self) -> bool:
        """:attr:`horovod` and ``hvd.init()`` reached: the code runs as ranks (not a library, nor a
        Spark/Ray driver), so the rank rules (broadcast, checkpoint, pinning, wrapping, sharding) apply."""
        return self.horovod and self.has_init

    @property
    def deepspeed(self) -> bool:
        """Whether the program starts DeepSpeed (``deepspeed.initialize``/``init_distributed`` reached):
        its engine joins the process group, pins the local GPU and averages the gradients."""
        got = self.memo.get("deepspeed")
        if not isinstance(got, bool):
            got = self.memo["deepspeed"] = any(self.qualname(c).startswith(DEEPSPEED_INIT) for c in self.calls)
        return got

    @property
    def torch_distributed(self) -> bool:
        """A torch.distributed or MPI launch (not Horovod) that calls ``init_process_group`` or starts
        DeepSpeed: the rank rules apply (checkpoint, pinning, wrapping, sharding)."""
        return not self.horovod and self.launch in ("torchrun", "mpi") and (any(
            last_name(c.node.func) == "init_process_group" for c in self.calls) or self.deepspeed)

    @property
    def multi_process(self) -> bool:
        """:attr:`ranks`, or a TensorFlow multi-worker strategy: several processes run the same code
        (the rules about files every process writes apply)."""
        return self.ranks or self.launch == "tf-multiworker"

    @property
    def ranks(self) -> bool:
        """:attr:`horovod_ranks` or :attr:`torch_distributed`."""
        return self.horovod_ranks or self.torch_distributed

    # -- resolution ------------------------------------------------------------------------
    def resolve(self, call: CallSite) -> List[FuncFacts]:
        """Project functions a call may reach (by name; ``self.f``/``module.f`` for attributes)."""
        f = call.node.func
        if isinstance(f, ast.Name):
            return [g for g in self.funcs.get(f.id, ()) if g.cls is None]
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
            if f.value.id in ("self", "cls"):
                return [g for g in self.funcs.get(f.attr, ()) if g.cls is not None]
            if f.value.id in call.module.project_aliases:
                return [g for g in self.funcs.get(f.attr, ()) if g.cls is None]
        return []

    @staticmethod
    def qualname(call: CallSite) -> str:
        """The called name with import aliases replaced (``hvd.TorchEstimator`` →
        ``horovod.spark.lightning.TorchEstimator``); '' for calls of other expressions."""
        name = dotted(call.node.func) or ""
        head, _, rest = name.partition(".")
        mod = call.module
        if head in mod.from_imports:
            head = mod.from_imports[head]
        elif head in mod.module_aliases:
            head = mod.module_aliases[head] if head != mod.module_aliases[head].split(".")[0] else head
        return f"{head}.{rest}" if rest else head

    def is_hvd_call(self, call: CallSite, names: Iterable[str]) -> bool:
        """Whether ``call`` calls one of ``names`` of Horovod, through any alias its module binds
        (``hvd.init()``, ``horovod.torch.init()``, ``from horovod.torch import init as i; i()``)."""
        f = call.node.func
        mod = call.module
        names = set(names)
        if isinstance(f, ast.Attribute) and f.attr in names:
            base = dotted(f.value) or ""
            return base in mod.hvd_aliases or base.split(".")[0] in mod.hvd_aliases or \
                mod.module_aliases.get(base.split(".")[0], "").startswith("horovod")
        if isinstance(f, ast.Name):
            if mod.hvd_names.get(f.id) in names:
                return True
            return f.id in names and mod.from_imports.get(f.id, "").startswith("horovod")
        return False

    @staticmethod
    def any_hvd_call(call: CallSite) -> bool:
        """Whether ``call`` calls anything of Horovod through an alias its module binds (``hvd.init()``,
        ``hvd.rank()``, ``from horovod.torch import rank; rank()``)."""
        f = call.node.func
        mod = call.module
        if isinstance(f, ast.Attribute):
            base = (dotted(f.value) or "").split(".")[0]
            return base in mod.hvd_aliases or mod.module_aliases.get(base, "").startswith("horovod")
        if isinstance(f, ast.Name):
            return f.id in mod.hvd_names or mod.from_imports.get(f.id, "").startswith("horovod")
        return False

    def runs(self, f: Optional[FuncFacts]) -> bool:
        """Whether code in ``f`` runs when the entry point does: module level, a plain function the
        entry point reaches, a method with a call site in the program, a special method
        (``__init__`` ...) or a framework hook (``forward``, ``setup``, ``on_*``, ``*_step``,
        ``configure_*``). A method reached only because its class is instantiated, and never called,
        does not run (nested functions are judged by the function that holds them)."""
        while f is not None and f.parent is not None:
            f = f.parent
        if f is None or f.cls is None or f.sites or self.library:
            return True
        n = f.name
        got = self.memo.get("attr_refs")
        if not isinstance(got, set):  # method names read as attributes (obj.setup()) where code runs
            attrs: Set[str] = set()
            for m in self.modules:
                for scope in [None] + [g for g in m.funcs if id(g) in self.reached]:
                    attrs.update(r.rsplit(".", 1)[1] for r in m.refs.get(id(scope), ()) if "." in r)
            self.memo["attr_refs"] = got = attrs
        if n in got:
            return True
        return (n.startswith("__") and n.endswith("__")) or n in HOOKS or n.startswith(("on_", "configure_")) \
            or n.endswith("_step")

    def _lightning_horovod(self, call: CallSite) -> bool:
        """Whether ``call`` selects PyTorch Lightning's Horovod strategy."""
        last = last_name(call.node.func)
        if last in ("HorovodStrategy", "HorovodPlugin"):
            return True
        if call.module.lightning and any(k.arg in ("strategy", "accelerator", "distributed_backend") and
                                         const_str(k.value) == "horovod" for k in call.node.keywords):
            return True  # train(strategy="horovod") handing it on to a Trainer
        if last == "Trainer" and call.module.lightning:
            for k in ("strategy", "accelerator", "distributed_backend"):
                v = kwarg(call.node, k)
                if const_str(v) == "horovod":
                    return True
                if v is not None and last_name(v) in ("HorovodStrategy", "HorovodPlugin"):
                    return True
        return False

    def covered(self, call: CallSite) -> Optional[str]:
        """Whether ``call`` runs only on some ranks: under a rank test, or every caller of its
        function is (followed across the program; a cycle counts as not covered).

        Returns:
            ``"global"`` (a test of the global rank), ``"local"`` (only of the rank within a node,
            so once per node), or None (every rank).
        """
        if call.guarded and not (call.dist_guard and self.dist_rank_zero):
            return call.guarded
        f = call.func
        if f is None or not f.sites:
            return None
        key = id(f)
        if key in self._covered:
            return self._covered[key]
        self._covered[key] = None  # in progress: a recursive call is not a guard
        kinds = [self.covered(s) for s in f.sites]
        result = None if not all(kinds) else ("local" if "local" in kinds else "global")
        self._covered[key] = result
        return result

    # -- values ----------------------------------------------------------------------------
    def size_funcs(self) -> Set[int]:
        """ids of project functions whose return value involves hvd.size() (fixpoint, 3 rounds)."""
        if self._size_funcs is None:
            out: Set[int] = set()
            for _ in range(3):
                before = len(out)
                for fs in self.funcs.values():
                    for f in fs:
                        if id(f) not in out and any(self.mentions_size(r, f.module, set(), out) for r in f.returns):
                            out.add(id(f))
                if len(out) == before:
                    break
            self._size_funcs = out
        return self._size_funcs

    def mentions_size(self, node: ast.AST, mod: ModuleFacts, scaled: Set[str], size_funcs: Set[int]) -> bool:
        """Whether ``node`` involves ``hvd.size()``: the call itself, a project function in ``size_funcs``
        (ids) or a dotted name in ``scaled``."""
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                c = CallSite(sub, mod, None, None, None)
                if self.is_hvd_call(c, SIZE_CALLS):
                    return True
                if any(id(g) in size_funcs for g in self.resolve(c)):
                    return True
            if isinstance(sub, (ast.Name, ast.Attribute)):
                d = dotted(sub)
                if d and d in scaled:
                    return True
        return False

    def scaled_names(self, mod: ModuleFacts) -> Set[str]:
        """Dotted names assigned (anywhere in ``mod``) a value involving hvd.size()."""
        if id(mod) not in self._scaled_names:
            sf = self.size_funcs()
            scaled: Set[str] = set()
            pending = [(name, v) for _, t, v, _ in mod.assigns for name in [dotted(t)] if name]
            for _ in range(3):
                rest = []
                for name, value in pending:
                    if name in scaled:
                        continue
                    if self.mentions_size(value, mod, scaled, sf):
                        scaled.add(name)
                    else:
                        rest.append((name, value))
                if len(rest) == len(pending):
                    break
                pending = rest
            self._scaled_names[id(mod)] = scaled
        return self._scaled_names[id(mod)]

    def argparse_defaults(self) -> Dict[str, ast.AST]:
        """``dest`` → default node of every ``add_argument`` in the component."""
        if self._argparse is None:
            out: Dict[str, ast.AST] = {}
            for c in self.calls:
                n = c.node
                if last_name(n.func) != "add_argument":
                    continue
                dest = const_str(kwarg(n, "dest"))
                if dest is None:
                    strs = [s for s in (const_str(a) for a in n.args) if s]
                    names = [s for s in strs if s.startswith("--")] or strs
                    if not names:
                        continue
                    dest = names[0].lstrip("-").replace("-", "_")
                default = kwarg(n, "default")
                out[dest] = default if default is not None else ast.Constant(None)
            self._argparse = out
        return self._argparse

    def judge(self, value: ast.AST, call: CallSite, depth: int = 0) -> List[Tuple[str, CallSite, str]]:
        """Judge a learning-rate value seen at ``call``.

        Returns:
            ``[(verdict, where, shown)]``: ``verdict`` is ``scaled``, ``unscaled`` or ``unknown``;
            ``where`` is the call the verdict is about (the optimizer's, or a caller passing it).
        """
        mod = call.module
        if self.mentions_size(value, mod, self.scaled_names(mod), self.size_funcs()):
            return [("scaled", call, ast.unparse(value))]
        shown = ast.unparse(value)
        f = call.func
        if isinstance(value, ast.Name) and f is not None and value.id in f.params and depth < 4:
            if not f.sites:
                return [("unknown", call, f"{shown} (a parameter of {f.name}() with no call site in the project)")]
            out = []
            for site in f.sites:
                arg = self.bound_argument(f, site, value.id)
                if arg is None:
                    out.append(("unknown", site, f"{shown} (not resolved at this call of {f.name}())"))
                else:
                    out.extend(self.judge(arg, site, depth + 1))
            return out
        if self._definite(value, mod):
            return [("unscaled", call, shown)]
        return [("unknown", call, shown)]

    def _definite_names(self, mod: ModuleFacts) -> Set[str]:
        """Plain names of ``mod`` whose every assigned value is definite (see :meth:`_definite`);
        computed once per module, 3 rounds of propagation (``lr = base``; ``base = 0.1``)."""
        got = self._definite_cache.get(id(mod))
        if got is None:
            values: Dict[str, List[ast.AST]] = {}
            for _, t, v, _ in mod.assigns:
                if isinstance(t, ast.Name):
                    values.setdefault(t.id, []).append(v)
            got = set()
            for _ in range(3):
                new = {n for n, vs in values.items() if n not in got and all(self._definite(v, mod, got) for v in vs)}
                if not new:
                    break
                got |= new
            self._definite_cache[id(mod)] = got
        return got

    def _definite(self, value: ast.AST, mod: ModuleFacts, names: Optional[Set[str]] = None) -> bool:
        """A value built only from literals, command-line options (``args.X`` with an
        ``add_argument``) and names assigned only such values: nothing in the code scales it."""
        if names is None:
            names = self._definite_names(mod)
        defaults = self.argparse_defaults()
        leaves = 0
        stack = [value]
        while stack:
            sub = stack.pop()
            if isinstance(sub, ast.Constant):
                leaves += 1
                continue
            if isinstance(sub, ast.Attribute) and sub.attr in defaults and isinstance(sub.value, ast.Name):
                leaves += 1  # args.lr: a command-line option (the code never scales it)
                continue
            if isinstance(sub, ast.Name):
                if sub.id in names:
                    leaves += 1
                    continue
                return False
            if isinstance(sub, (ast.Attribute, ast.Call, ast.Subscript)):
                return False
            stack.extend(ast.iter_child_nodes(sub))
        return leaves > 0

    def bound_argument(self, f: FuncFacts, site: CallSite, param: str) -> Optional[ast.AST]:
        """The argument ``site`` binds to ``param`` of ``f`` (keyword, position, ``**`` of a dict literal
        or of a name assigned dict literals in the caller's scope, or the default); None: not resolved."""
        n = site.node
        v = kwarg(n, param)
        if v is not None:
            return v
        for k in n.keywords:
            if k.arg is None:
                lits: List[ast.AST] = [k.value] if isinstance(k.value, ast.Dict) else []
                if isinstance(k.value, ast.Name):
                    got = self.dict_values(site, k.value.id)
                    if got is not None:
                        lits = list(got[0])
                        for key, val, _ in got[1]:
                            if key == param:
                                return val
                for lit in lits:
                    _, found = self.dict_get(lit, param)
                    if found is not None:
                        return found
        params = f.params
        if f.cls is not None and params and params[0] in ("self", "cls") and isinstance(n.func, ast.Attribute):
            params = params[1:]
        if param in params:
            i = params.index(param)
            if i < len(n.args) and not any(isinstance(a, ast.Starred) for a in n.args[:i + 1]):
                return n.args[i]
        if any(k.arg is None for k in n.keywords):
            return None
        return f.defaults.get(param)

    def first(self, calls: List[CallSite]) -> Optional[CallSite]:
        """The first of ``calls`` in the entry module, else the first overall."""
        here = [c for c in calls if c.module is self.entry]
        some = here or calls
        return some[0] if some else None

    def spark_or_ray(self) -> bool:
        """Whether the program drives Horovod through ``horovod.spark`` or ``horovod.ray`` (they
        initialise the ranks themselves)."""
        return any(self.qualname(c).startswith(("horovod.spark", "horovod.ray")) for c in self.calls) or \
            any(m.hvd_binding_name.startswith(("horovod.spark", "horovod.ray")) for m in self.modules)

    def optimizer_name(self, c: CallSite) -> Optional[str]:
        """The dotted name called when ``c`` makes an optimizer (``torch.optim.SGD``, ``Adam`` imported
        from ``keras.optimizers`` ...), else None."""
        name = dotted(c.node.func) or ""
        if OPTIMIZER_RE.search(name):
            return name
        if isinstance(c.node.func, ast.Name):
            src = c.module.from_imports.get(name, "")
            if src.rsplit(".", 1)[0] in OPTIMIZER_MODULES and name[:1].isupper():
                return name
        base = name.split(".")[0]
        if "." in name and c.module.module_aliases.get(base, "") in OPTIMIZER_MODULES and \
                name.rsplit(".", 1)[1][:1].isupper():
            return name
        return None


    def dict_index(self, mod: ModuleFacts) -> DictIndex:
        """Per module, built once: ``(id(scope), name)`` → values assigned to that plain name, and
        → the ``name.update(...)`` calls (so that each lookup is a dict access: linear overall)."""
        idx = mod._dict_idx
        if idx is None:
            assigned: Dict[Tuple[int, str], List[ast.AST]] = {}
            for fn, t, v, _ in mod.assigns:
                if isinstance(t, ast.Name):
                    assigned.setdefault((id(fn), t.id), []).append(v)
            updates: Dict[Tuple[int, str], List[CallSite]] = {}
            for c in mod.calls:
                callee = c.node.func
                if isinstance(callee, ast.Attribute) and callee.attr == "update" and isinstance(callee.value, ast.Name):
                    updates.setdefault((id(c.func), callee.value.id), []).append(c)
            idx = mod._dict_idx = (assigned, updates)
        return idx

    def dict_values(self, call: CallSite, name: str, depth: int = 0) -> Optional[DictValues]:
        """The dict literals assigned to ``name`` in the call's scope (or module), and its item assignments.

        Returns:
            ``(literals, [(key, value, dead guard if or None)])``, or None when ``name`` is also assigned
            something that is not a dict literal (not resolved) or is not assigned at all.
        """
        mod = call.module
        assigned, updates = self.dict_index(mod)
        for scope in ((call.func, None) if call.func is not None else (None,)):
            values = assigned.get((id(scope), name))
            if not values:
                continue
            lits: List[ast.AST] = []
            for v in values:
                for alt in ([v.body, v.orelse] if isinstance(v, ast.IfExp) else [v]):
                    if isinstance(alt, ast.Dict) or (isinstance(alt, ast.Call) and last_name(alt.func) == "dict"
                                                     and not alt.args):
                        lits.append(alt)
                    else:
                        return None
            items = list(mod.dict_items.get((id(scope), name), []))
            for c in updates.get((id(scope), name), []):  # name.update({...}) / name.update(k=v)
                for k in c.node.keywords:
                    if k.arg:
                        items.append((k.arg, k.value, c.dead_if))
                for a in c.node.args:
                    if isinstance(a, ast.Dict):
                        items.extend(_str_items(a, c.dead_if))
                    elif isinstance(a, ast.Name) and a.id != name and depth < 3:
                        got = self.dict_values(c, a.id, depth + 1)  # kwargs.update(cuda_kwargs)
                        if got is not None:
                            for lit in got[0]:
                                if isinstance(lit, ast.Dict):
                                    items.extend(_str_items(lit, c.dead_if))
                                elif isinstance(lit, ast.Call):
                                    items.extend((k.arg, k.value, c.dead_if) for k in lit.keywords if k.arg)
                            items.extend(got[1])
            return lits, items
        return None

    def returned_dicts(self, call: CallSite) -> Optional[DictValues]:
        """The dicts a project function returns (``**options()``): dict literals, or a local name
        assigned dict literals (with its item assignments and updates), as ``(literals, items)``;
        None when any return is something else."""
        funcs = self.resolve(call)
        lits: List[ast.AST] = []
        items: List[Tuple[str, ast.AST, Optional[ast.AST]]] = []
        if not funcs:
            return None
        for f in funcs:
            if not f.returns:
                return None
            for r in f.returns:
                if isinstance(r, ast.Dict):
                    lits.append(r)
                elif isinstance(r, ast.Name):
                    got = self.dict_values(CallSite(call.node, f.module, f, None, None), r.id)
                    if got is None:
                        return None
                    lits.extend(got[0])
                    items.extend(got[1])
                else:
                    return None
        return lits, items

    @staticmethod
    def dict_get(lit: ast.AST, key: str) -> Tuple[bool, Optional[ast.AST]]:
        """``(resolved, value)`` of ``key`` in a dict literal or ``dict(...)`` call: ``resolved`` is
        False when the dict has ``**`` items (the key may come from them); value None when absent."""
        if isinstance(lit, ast.Dict):
            if any(k is None for k in lit.keys):
                return False, None
            for k, item in zip(lit.keys, lit.values):
                if const_str(k) == key:
                    return True, item
            return True, None
        if not isinstance(lit, ast.Call):  # only dict literals and dict(...) calls are passed
            return False, None
        return not any(k.arg is None for k in lit.keywords), kwarg(lit, key)

    def const_value(self, node: Optional[ast.AST], call: CallSite, depth: int = 0) -> object:
        """The constant a value stands for, or None: a literal; a name assigned one constant (every
        assignment the same) in the call's function, an enclosing function or the module; an
        enum-like ``Class.NAME`` (or ``Class.NAME.value``) whose class body assigns a constant;
        ``int(x)``/``str(x)`` of one of these."""
        if node is None or depth > 4:
            return None
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("int", "str") \
                and len(node.args) == 1:
            return self.const_value(node.args[0], call, depth + 1)
        mod = call.module
        if isinstance(node, ast.Name):
            assigned, _ = self.dict_index(mod)
            scope = call.func
            while True:
                values = assigned.get((id(scope), node.id))
                if values:
                    got = {repr(self.const_value(v, CallSite(call.node, mod, scope, None, None), depth + 1))
                           for v in values}
                    if len(got) == 1:
                        return self.const_value(values[0], CallSite(call.node, mod, scope, None, None), depth + 1)
                    return None
                if scope is None:
                    break
                scope = scope.parent
            return None
        if isinstance(node, ast.Attribute):
            base = node.value
            if node.attr == "value" and isinstance(base, ast.Attribute):
                node, base = base, base.value
            if isinstance(base, ast.Name):
                for m in self.modules:
                    v = m.class_consts.get((base.id, node.attr))
                    if v is not None:
                        return self.const_value(v, CallSite(call.node, m, None, None, None), depth + 1)
        return None

    def resolved_str(self, node: Optional[ast.AST], call: CallSite) -> Optional[str]:
        """:meth:`const_value` when it is a string."""
        v = self.const_value(node, call)
        return v if isinstance(v, str) else None
