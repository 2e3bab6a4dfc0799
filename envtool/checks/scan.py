"""Static scan of training scripts (``doctor --script``): Python ``ast``, nothing is executed.

The scan reads a *project*, not one file: the files and directories given, plus the local
modules they import (modules beside a script, the package it belongs to, relative imports).
Files joined by imports form one *component*; facts are gathered across a component (a
broadcast in ``train.py`` satisfies ``main.py``). Calls between functions of a component are
followed: a checkpoint write inside a helper is judged at the helper's call sites, a learning
rate that arrives as a parameter is judged at the call that passes it, and ``**kwargs`` built
from dict literals are resolved.

Rules (ids in :data:`RULES`), from OLCF's Summit WML-CE page ("Problems Distributing Pytorch with
Multiple Data Loader Workers", https://docs.olcf.ornl.gov/software/analytics/ibm-wml-ce.html),
Horovod's usage steps (https://horovod.readthedocs.io/en/v0.28.1/pytorch.html) and the seven steps
of ALCF's "Distributed Deep Learning" tutorial (https://github.com/argonne-lcf/sdl_ai_workshop:
init, pin GPU, scale the learning rate, distributed optimizer, broadcast,
checkpoint on rank 0, shard the data); the mechanisms that satisfy each rule are listed in
:data:`MECHANISMS`:

* ``dataloader-workers``: ``DataLoader(…)`` with ``num_workers`` > 0 and no
  ``multiprocessing_context`` (and no ``set_start_method("forkserver"|"spawn")``): workers
  are forked, the Linux default before Python 3.14. When the context is set only under the
  ``mp._supports_context`` guard of Horovod's examples (PR #1824), the guard is named as the
  reason: ``torch.multiprocessing`` has no ``_supports_context`` any more, the guard is
  always false;
* ``dead-supports-context``: that guard where no ``DataLoader`` of the project depends on it;
* ``fork-start-method``: ``set_start_method("fork")``, ``get_context("fork")`` or
  ``multiprocessing_context="fork"``;
* ``no-main-guard``: spawn/forkserver is used and an entry script runs code at module level
  without ``if __name__ == "__main__":`` (workers re-import the main module);
* ``lr-not-scaled``: an optimizer's learning rate does not involve ``hvd.size()`` (step 3);
  ``hvd.local_size()`` is reported; Adam-family optimizers give ``info``; ``OneCycleLR``/``CyclicLR``
  ``max_lr`` is judged too;
* ``no-broadcast``: Horovod is used and nothing broadcasts the initial state (step 5);
* ``checkpoint-all-ranks``: a checkpoint write reached without a rank test (step 6);
* ``checkpoint-local-rank``: a checkpoint or log write under a local-rank test only (once per node);
* ``hvd-init-missing`` / ``hvd-init-late``: no ``hvd.init()``, or a Horovod call before it (step 1);
* ``no-gpu-pinning``: CUDA used and no GPU chosen from the local rank (step 2);
* ``optimizer-not-wrapped``: no DistributedOptimizer/DistributedGradientTape/DDP (step 4);
* ``data-not-sharded``: no sampler and nothing sharding the data by rank (ALCF step 7).

Program scope: the scan starts from entry points (files named, ``--entry``, files with a
``__main__`` guard, then modules nothing else reaches), follows imports from each, and judges
each program alone with only the functions its entry point can reach. Launch: each program's
launch (a key of :data:`LAUNCHES`) is decided from its code (or ``--launch``); the MPI rules
(forked workers, fork, the dead guard) hold for Horovod/MPI only, the Horovod rules for Horovod,
and a subset (checkpoint, pinning, wrapping, sharding) for torch.distributed programs that call
``init_process_group``. Documentation: ``docs/script-checks.md``.

Every issue has a ``level``: ``warn`` when the scan resolved the values it judged,
``info`` when it could not (a value it cannot see, such as a parameter with no call site).
The Horovod rules apply to components that import a Horovod framework binding
(``horovod.torch``, ``horovod.tensorflow``, ``horovod.keras``, ``horovod.mxnet``,
``horovod.spark.*``, ``horovod.ray``). Time and memory are linear in the size of the sources.
"""
from __future__ import annotations

import ast
import gc
import os
import re
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple

#: rule id → one-line description.
RULES: Dict[str, str] = {
    "dataloader-workers": "DataLoader with worker processes and no multiprocessing_context",
    "dead-supports-context": "the dead mp._supports_context guard from Horovod's examples",
    "fork-start-method": "the fork start method chosen explicitly",
    "no-main-guard": "spawn/forkserver without an if __name__ == \"__main__\": guard",
    "lr-not-scaled": "learning rate not scaled by hvd.size()",
    "no-broadcast": "no broadcast of the initial model/optimizer state",
    "checkpoint-all-ranks": "checkpoint written on every rank",
    "checkpoint-local-rank": "checkpoint or log file written once per node (local rank 0) on a multi-node job",
    "hvd-init-missing": "Horovod used and hvd.init() never called",
    "hvd-init-late": "hvd.init() called after the first Horovod call that needs it",
    "no-gpu-pinning": "CUDA used without pinning a GPU to the local rank",
    "optimizer-not-wrapped": "optimizer never wrapped: gradients are not averaged across ranks",
    "data-not-sharded": "every rank reads the whole dataset (no DistributedSampler or shard)",
    "syntax": "the file does not parse",
}

#: rule id → the mechanisms that satisfy it (what the scan recognises), with their sources.
MECHANISMS: Dict[str, Tuple[str, ...]] = {
    "dataloader-workers": (
        "multiprocessing_context= on the DataLoader (literal, or a dict splatted with **)",
        "torch.multiprocessing/multiprocessing set_start_method('forkserver'|'spawn') in the project",
        "num_workers=0"),
    "no-broadcast": (
        "hvd.broadcast_parameters / broadcast_optimizer_state / broadcast_variables / "
        "broadcast_global_variables / broadcast_object",
        "Keras hvd.callbacks.BroadcastGlobalVariablesCallback, TF1 hvd.BroadcastGlobalVariablesHook",
        "hvd.elastic state objects (TorchState, TensorFlowKerasState, TensorFlowState, KerasState, "
        "ObjectState): @hvd.elastic.run syncs them from rank 0 (horovod@v0.28.1:horovod/common/elastic.py)",
        "PyTorch Lightning's Horovod strategy (Trainer(strategy|accelerator|distributed_backend='horovod'), "
        "HorovodStrategy): broadcasts parameters and optimizer state "
        "(Lightning-Universe/lightning-Horovod:src/pl_horovod/strategy.py)",
        "horovod.spark estimators (KerasEstimator, TorchEstimator): their remote trainers broadcast "
        "(horovod@v0.28.1:horovod/spark/keras/remote.py, horovod/spark/torch/remote.py)"),
    "lr-not-scaled": (
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
        "OneCycleLR/CyclicLR: their max_lr replaces the optimizer's learning rate and is judged instead"),
    "hvd-init-missing": ("hvd.init() reached from the entry point (or @hvd.elastic.run / hvd.elastic.run)",
                         "Horovod Spark/Ray drivers, estimators and Lightning's Horovod strategy initialise "
                         "Horovod themselves"),
    "hvd-init-late": ("hvd.init() before the first hvd.rank()/size()/DistributedOptimizer/broadcast call of the "
                      "same function or module level",),
    "no-gpu-pinning": ("torch.cuda.set_device(...) / tf.config.experimental.set_visible_devices(...) / "
                       "config.gpu_options.visible_device_list / CUDA_VISIBLE_DEVICES",
                       ".cuda(i), .to(<local rank>), torch.device(f'cuda:{i}'), DistributedDataParallel(device_ids=)",
                       "Accelerate and Lightning's Horovod strategy pin themselves"),
    "optimizer-not-wrapped": ("hvd.DistributedOptimizer (torch, Keras, TensorFlow), hvd.DistributedGradientTape, "
                              "hvd.DistributedTrainer (MXNet)",
                              "gradients averaged by hand: hvd.allreduce / grouped_allreduce (and their _async forms)",
                              "torch.distributed: DistributedDataParallel, FullyShardedDataParallel, DeepSpeed, "
                              "Accelerate, dist.all_reduce",
                              "Lightning's Horovod strategy, horovod.spark estimators"),
    "data-not-sharded": ("a sampler on a DataLoader (DistributedSampler, ElasticSampler or a custom one; not "
                         "RandomSampler/SequentialSampler/SubsetRandomSampler/WeightedRandomSampler)",
                         "Dataset.shard(...), datasets.distributed.split_dataset_by_node, Petastorm "
                         "cur_shard/shard_count, num_shards/num_replicas keywords, Accelerate prepare()",
                         "a slice or index by rank (files[hvd.rank()::hvd.size()]); a data call given the rank",
                         "steps divided by hvd.size() (each rank draws its share of shuffled data)",
                         "Lightning (adds a DistributedSampler itself)"),
    "checkpoint-local-rank": ("a test of the global rank (hvd.rank() == 0, dist.get_rank() == 0, RANK)",
                              "level warn on Horovod/MPI launches and programs that name nodes (node_rank, nnodes, "
                              "ngpus_per_node, SLURM_PROCID, both RANK and LOCAL_RANK); info otherwise; log files "
                              "(open(..., 'w'), logging.FileHandler) are info"),
    "checkpoint-all-ranks": (
        "an enclosing if/conditional expression testing a rank (hvd.rank(), local_rank, is_root, ...)",
        "an earlier 'if <rank test>: return' in the enclosing function",
        "a helper whose every call site in the project is itself under a rank test",
        "PyTorch Lightning's ModelCheckpoint and trainer.save_checkpoint (Lightning writes on global "
        "rank 0 only)"),
}

#: launch → words (``--launch`` takes the keys).
LAUNCHES: Dict[str, str] = {
    "horovod": "Horovod (horovodrun/mpirun: MPI or Gloo controller)",
    "mpi": "MPI (mpirun/srun with mpi4py or torch.distributed's MPI backend)",
    "torchrun": "torch.distributed (torchrun, mp.spawn or srun; NCCL or Gloo, no MPI)",
    "lightning": "PyTorch Lightning (its own strategy; no MPI)",
    "single": "a single process (no distributed launch)",
}

FORKSERVER = 'multiprocessing_context="forkserver"'
_OPTIMIZER = re.compile(r"(^|\.)(optim\.(?!lr_scheduler)[A-Z]\w*|optimizers\.[A-Z]\w*|train\.\w+Optimizer)$")
_OPTIMIZER_MODULES = ("torch.optim", "tensorflow.keras.optimizers", "keras.optimizers", "tensorflow.optimizers")
_SAVE_LAST = {"save_weights", "save_checkpoint", "save_pretrained", "ModelCheckpoint"}
_BROADCAST = {"broadcast_parameters", "broadcast_optimizer_state", "broadcast_variables",
              "broadcast_global_variables", "BroadcastGlobalVariablesCallback", "BroadcastGlobalVariablesHook",
              "broadcast_object"}
_ELASTIC_STATES = {"TorchState", "TensorFlowKerasState", "TensorFlowState", "KerasState", "ObjectState"}
_ESTIMATORS_SCALING = {"horovod.spark.keras.KerasEstimator", "horovod.spark.keras.estimator.KerasEstimator",
                       "horovod.spark.lightning.TorchEstimator", "horovod.spark.lightning.estimator.TorchEstimator",
                       "horovod.spark.torch.TorchEstimator", "horovod.spark.torch.estimator.TorchEstimator"}
_CONTEXT_CALLS = {"set_start_method", "get_context"}
#: adaptive optimizers: linear LR scaling with the number of ranks is a judgement for them.
_ADAPTIVE = {"Adam", "AdamW", "Adamax", "NAdam", "Nadam", "RAdam", "SparseAdam", "Adagrad", "Adadelta", "RMSprop",
             "Lamb", "LAMB", "Adafactor", "Ftrl", "FusedAdam", "FusedLAMB", "Lion"}
#: Horovod calls that make a function part of the training itself (not a checkpoint helper).
_HVD_WORK = {"init", "DistributedOptimizer", "DistributedGradientTape", "broadcast_parameters",
             "broadcast_optimizer_state", "broadcast_variables", "allreduce", "allgather", "run"}
_SIZE = {"size"}
#: torch.distributed calls that make a function part of the training itself.
_DIST_WORK = {"init_process_group", "DistributedDataParallel", "DDP", "FullyShardedDataParallel", "spawn",
              "all_reduce", "barrier"}
#: Horovod calls that need hvd.init() first.
_NEEDS_INIT = {"rank", "local_rank", "size", "local_size", "cross_rank", "cross_size", "DistributedOptimizer",
               "DistributedGradientTape", "broadcast_parameters", "broadcast_optimizer_state", "broadcast_variables",
               "broadcast_object", "allreduce", "allgather", "grouped_allreduce", "alltoall", "barrier", "join",
               "is_homogeneous"}
#: what averages gradients under Horovod (a wrapped optimizer/tape, or allreduce by hand).
_WRAPS = {"DistributedOptimizer", "DistributedGradientTape", "PartialDistributedGradientTape", "DistributedTrainer",
          "allreduce", "allreduce_", "grouped_allreduce", "grouped_allreduce_", "allreduce_async",
          "allreduce_async_", "grouped_allreduce_async", "grouped_allreduce_async_"}
#: what averages gradients under torch.distributed.
_DDP_WRAPS = {"DistributedDataParallel", "DDP", "FullyShardedDataParallel", "FSDP", "fully_shard", "all_reduce",
              "Accelerator", "prepare", "all_reduce_coalesced", "reduce_scatter"}
#: samplers that do not split data between ranks.
_LOCAL_SAMPLERS = {"RandomSampler", "SequentialSampler", "SubsetRandomSampler", "WeightedRandomSampler"}
#: calls that shard data by rank (torch, tf.data, HF datasets, Petastorm, Horovod elastic, Accelerate).
_SHARDERS = {"DistributedSampler", "ElasticSampler", "DistributedBatchSampler", "shard", "split_dataset_by_node",
             "prepare", "prepare_data_loader", "make_reader", "make_batch_reader", "experimental_distribute_dataset",
             "distribute_datasets_from_function"}
_SHARD_KWARGS = {"num_replicas", "num_shards", "shard_count", "cur_shard", "shard_id", "shard_index",
                 "training_data"}
_HVD_BINDINGS = ("horovod.torch", "horovod.tensorflow", "horovod.keras", "horovod.mxnet", "horovod.spark",
                 "horovod.ray")
_LIGHTNING = ("pytorch_lightning", "lightning")
_SKIP_DIRS = {"__pycache__", "site-packages", "node_modules", ".git", ".hg", ".svn", ".tox", ".venv", "venv"}


@dataclass(frozen=True)
class ScanIssue:
    """One risky pattern.

    Attributes:
        path: the file (as given, or as found beside/under a given path).
        line: 1-based line of the construct to change.
        rule: a key of :data:`RULES`.
        message: what is wrong, in one line.
        fix: the change to make.
        level: ``warn`` (values resolved: the scan can show the risk) or ``info`` (a value the
            scan could not resolve, or a judgement call; the risk is possible, not shown).
        entry: the entry point (file) of the program in which the risk was found.
        launch: the launch assumed for that program (a key of :data:`LAUNCHES`).
    """

    path: str
    line: int
    rule: str
    message: str
    fix: str
    level: str = "warn"
    entry: str = ""
    launch: str = ""

    def to_dict(self) -> dict:
        """JSON-ready form (every field)."""
        return asdict(self)


def dotted(node: ast.AST) -> Optional[str]:
    """``a.b.c`` for a Name/Attribute chain, None for anything else (iterative: no recursion)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


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


_LOCAL_NAMES = {"gpu", "gpu_id", "local_gpu", "device_id", "gpu_index", "local_process_index", "localrank"}
_MULTINODE_WORDS = ("nnodes", "node_rank", "num_nodes", "n_nodes", "nodeid", "ngpus_per_node", "gpus_per_node",
                    "slurm_procid", "slurm_ntasks", "node_id", "num_machines", "machine_rank")


def _rank_kind(test: ast.AST, aliases: Optional[Dict[str, str]] = None) -> Optional[str]:
    """Which rank an ``if`` test depends on: ``"global"`` (``hvd.rank()``, ``dist.get_rank()``,
    ``is_root`` ...), ``"local"`` (only the rank within a node: ``hvd.local_rank()``,
    ``args.local_rank``, ``os.environ["LOCAL_RANK"]``, ``args.gpu``, ``rank % ngpus_per_node``),
    or None (no rank at all). ``aliases``: names assigned a rank earlier (name → kind)."""
    kind: Optional[str] = None
    modded: Set[int] = set()
    for sub in ast.walk(test):
        if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Mod) and _rank_kind(sub.left, aliases):
            modded.update(id(x) for x in ast.walk(sub.left))  # rank % gpus_per_node: the GPU within a node
            kind = kind or "local"
    for sub in ast.walk(test):
        if id(sub) in modded:
            continue
        text = ""
        if isinstance(sub, ast.Call) and _last(sub.func) in ("rank", "local_rank", "cross_rank", "get_rank",
                                                            "get_local_rank", "get_node_local_rank"):
            text = _last(sub.func)
        elif isinstance(sub, (ast.Name, ast.Attribute)):
            last = _last(sub).lower()
            if "rank" in last or last in ("is_root", "is_master", "is_main", "is_main_process", "master",
                                          "is_global_zero", "is_local_main_process", "is_local_master"):
                text = last
            elif last in _LOCAL_NAMES:
                text = "local"
            elif aliases and _last(sub) in aliases:
                text = "local" if aliases[_last(sub)] == "local" else "rank"
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


def _is_rank_test(test: ast.AST) -> bool:
    """Whether an ``if`` test depends on the rank (``hvd.rank()``, ``local_rank``, ``is_root`` ...)."""
    return _rank_kind(test) is not None


def _stronger(a: Optional[str], b: Optional[str]) -> Optional[str]:
    """The combined guard of nested rank tests: a global-rank test anywhere wins."""
    if a == "global" or b == "global":
        return "global"
    return a or b


def _has_dead_guard(test: ast.AST) -> bool:
    for sub in ast.walk(test):
        if isinstance(sub, ast.Attribute) and sub.attr == "_supports_context":
            return True
        if isinstance(sub, ast.Call) and _last(sub.func) == "hasattr" and len(sub.args) > 1 \
                and _const_str(sub.args[1]) == "_supports_context":
            return True
    return False


# -- per-file facts ------------------------------------------------------------------------------
@dataclass(eq=False)
class _Func:
    node: ast.AST
    name: str
    module: "_Module"
    cls: Optional[str]
    params: List[str]
    defaults: Dict[str, ast.AST]
    returns: List[ast.AST] = field(default_factory=list)
    sites: List["_Call"] = field(default_factory=list)
    loops: bool = False
    parent: Optional["_Func"] = None


@dataclass(eq=False)
class _Call:
    node: ast.Call
    module: "_Module"
    func: Optional[_Func]          # enclosing function (None: module level)
    guarded: Optional[str]         # under a rank test: "global"/"local" (if / conditional / early return)
    dead_if: Optional[ast.AST]     # innermost enclosing if whose test is the dead guard


@dataclass(eq=False)
class _Module:
    path: Path
    shown: str
    tree: Optional[ast.Module]
    syntax: Optional[ScanIssue] = None
    hvd_aliases: Set[str] = field(default_factory=set)     # names bound to a horovod framework module
    hvd_names: Dict[str, str] = field(default_factory=dict)  # from horovod.x import y as z: z -> y
    hvd_binding: bool = False
    hvd_framework: str = "torch"
    hvd_import_line: Optional[int] = None
    from_imports: Dict[str, str] = field(default_factory=dict)  # local name -> "module.attr"
    module_aliases: Dict[str, str] = field(default_factory=dict)  # local name -> module
    local_imports: Set[Path] = field(default_factory=set)
    project_aliases: Set[str] = field(default_factory=set)  # names bound to project modules
    funcs: List[_Func] = field(default_factory=list)
    calls: List[_Call] = field(default_factory=list)
    assigns: List[Tuple[Optional[_Func], ast.AST, ast.AST, Optional[ast.AST]]] = field(default_factory=list)
    dict_items: Dict[Tuple[int, str], List[Tuple[str, ast.AST, Optional[ast.AST]]]] = field(default_factory=dict)
    dead_ifs: List[ast.AST] = field(default_factory=list)
    main_guard: bool = False
    first_toplevel_call: Optional[int] = None
    mentions_adasum: bool = False
    hvd_binding_name: str = ""
    refs: Dict[int, Set[str]] = field(default_factory=dict)   # id(scope) -> names read there
    class_consts: Dict[Tuple[str, str], ast.AST] = field(default_factory=dict)  # (class, attr) -> value
    ignores: Dict[int, Set[str]] = field(default_factory=dict)  # line -> rules ("*": all) suppressed
    cuda_visible: bool = False   # CUDA_VISIBLE_DEVICES / visible_device_list set somewhere
    rank_aliases: Dict[str, str] = field(default_factory=dict)  # name -> "global"/"local"
    multinode: bool = False      # the code names nodes (nnodes, node_rank, ngpus_per_node, SLURM_PROCID ...)
    rank_slices: bool = False    # a subscript indexed or sliced by a rank (x[rank::size])
    size_divs: bool = False      # something divided by hvd.size()/world size (steps per rank)
    size: int = 0
    _dict_idx: Optional[tuple] = None

    @property
    def lightning(self) -> bool:
        return any(v.split(".")[0] in _LIGHTNING for v in list(self.from_imports.values())
                   + list(self.module_aliases.values()))


def _is_main_guard(stmt: ast.AST) -> bool:
    if isinstance(stmt, ast.If) and isinstance(stmt.test, ast.Compare):
        names = [stmt.test.left] + list(stmt.test.comparators)
        return any(isinstance(n, ast.Name) and n.id == "__name__" for n in names) and \
            any(_const_str(n) == "__main__" for n in names)
    return False


def _early_return_index(body: Sequence[ast.stmt], aliases: Optional[Dict[str, str]] = None
                        ) -> Tuple[Optional[int], Optional[str]]:
    """Index and rank kind of the first ``if <rank test>: return|raise`` statement of a function body."""
    for i, stmt in enumerate(body):
        if isinstance(stmt, ast.If) and not stmt.orelse and \
                any(isinstance(s, (ast.Return, ast.Raise)) for s in stmt.body):
            kind = _rank_kind(stmt.test, aliases)
            if kind is not None:
                return i, kind
    return None, None


def _collect(mod: _Module) -> None:
    """One iterative pass over ``mod.tree`` filling the module's facts (linear in its size)."""
    tree = mod.tree
    for stmt in tree.body:
        if _is_main_guard(stmt):
            mod.main_guard = True
        elif mod.first_toplevel_call is None and not isinstance(
                stmt, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                and any(isinstance(n, ast.Call) for n in ast.walk(stmt)):
            mod.first_toplevel_call = stmt.lineno
    # names (or self.attributes) assigned a rank: gpu_id = int(os.environ["LOCAL_RANK"]); self.rank = rank
    # (statements only: the expressions are walked once, below)
    stmts: List[ast.AST] = list(tree.body)
    while stmts:
        node = stmts.pop()
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], (ast.Name, ast.Attribute)):
            kind = _rank_kind(node.value)
            if kind:
                name = _last(node.targets[0])
                if mod.rank_aliases.get(name) != "global":
                    mod.rank_aliases[name] = kind
        for attr in ("body", "orelse", "finalbody", "handlers"):
            more = getattr(node, attr, None)
            if isinstance(more, list):
                stmts.extend(more)
    # stack items: (node, enclosing function, guarded, dead_if, class name)
    stack: List[Tuple[ast.AST, Optional[_Func], bool, Optional[ast.AST], Optional[str]]] = [
        (tree, None, None, None, None)]
    while stack:
        node, func, guarded, dead_if, cls = stack.pop()
        children: Iterable[ast.AST]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            params = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
            pos = a.posonlyargs + a.args
            defaults = {p.arg: d for p, d in zip(pos[len(pos) - len(a.defaults):], a.defaults)}
            defaults.update({p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None})
            name = getattr(node, "name", "<lambda>")
            new = _Func(node, name, mod, cls, params, defaults, parent=func)
            mod.funcs.append(new)
            for d in list(a.defaults) + [d for d in a.kw_defaults if d is not None] + \
                    list(getattr(node, "decorator_list", [])):
                stack.append((d, func, guarded, dead_if, cls))
            if isinstance(node, ast.Lambda):
                new.returns.append(node.body)
                stack.append((node.body, new, None, None, None))
                continue
            body = node.body
            cut, cut_kind = _early_return_index(body, mod.rank_aliases)
            for i, stmt in enumerate(body):
                stack.append((stmt, new, cut_kind if cut is not None and i > cut else None, None, None))
            continue
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                    mod.class_consts[(node.name, stmt.targets[0].id)] = stmt.value
                stack.append((stmt, func, guarded, dead_if, node.name))
            for d in node.bases + node.decorator_list + [k.value for k in node.keywords]:
                stack.append((d, func, guarded, dead_if, cls))
            continue
        if isinstance(node, (ast.If, ast.IfExp)):
            rank = _rank_kind(node.test, mod.rank_aliases)
            dead = _has_dead_guard(node.test)
            if dead and isinstance(node, ast.If):
                mod.dead_ifs.append(node)
            inner_dead = node if dead else dead_if
            stack.append((node.test, func, guarded, dead_if, cls))
            body = node.body if isinstance(node.body, list) else [node.body]
            orelse = node.orelse if isinstance(node.orelse, list) else [node.orelse]
            for child in body + orelse:
                stack.append((child, func, _stronger(guarded, rank), inner_dead, cls))
            continue
        if isinstance(node, ast.Call):
            mod.calls.append(_Call(node, mod, func, guarded, dead_if))
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.While)) and func is not None:
            func.loops = True
        if isinstance(node, ast.Return) and func is not None and node.value is not None:
            func.returns.append(node.value)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                mod.assigns.append((func, t, node.value, dead_if))
                if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and _const_str(t.slice):
                    mod.dict_items.setdefault((id(func), t.value.id), []).append(
                        (_const_str(t.slice), node.value, dead_if))
        elif isinstance(node, ast.Import):
            for a in node.names:
                _note_import(mod, a.name, a.asname or a.name.split(".")[0], node.lineno, a.asname is not None)
        elif isinstance(node, ast.ImportFrom):
            _note_from_import(mod, node)
        elif isinstance(node, ast.Attribute) and node.attr == "Adasum":
            mod.mentions_adasum = True
        if isinstance(node, ast.Constant) and node.value in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
            mod.cuda_visible = True
        elif isinstance(node, ast.Attribute) and node.attr == "visible_device_list":
            mod.cuda_visible = True
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice) and \
                _rank_kind(node.slice) is not None:
            mod.rank_slices = True
        elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.FloorDiv)) and (
                isinstance(node.right, ast.Call) and _last(node.right.func) in ("size", "get_world_size")
                or _last(node.right).lower() in ("world_size", "num_replicas", "num_workers_total")):
            mod.size_divs = True
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            mod.refs.setdefault(id(func), set()).add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and isinstance(node.value, ast.Name):
            base = node.value.id
            mod.refs.setdefault(id(func), set()).add(("." if base in ("self", "cls") else base + ".") + node.attr)
        for child in ast.iter_child_nodes(node):
            stack.append((child, func, guarded, dead_if, cls))
    mod.calls.sort(key=lambda c: (c.node.lineno, c.node.col_offset))


def _note_import(mod: _Module, name: str, bound: str, line: int, aliased: bool) -> None:
    mod.module_aliases[bound] = name if aliased else name.split(".")[0]
    if name == "horovod" or name.startswith("horovod."):
        if mod.hvd_import_line is None or line < mod.hvd_import_line:
            mod.hvd_import_line = line
        if name.startswith(_HVD_BINDINGS):
            mod.hvd_binding = True
            mod.hvd_binding_name = mod.hvd_binding_name or name
            if "tensorflow" in name or "keras" in name:
                mod.hvd_framework = "tensorflow"
        mod.hvd_aliases.add(bound if aliased else name)


def _note_from_import(mod: _Module, node: ast.ImportFrom) -> None:
    module = node.module or ""
    for a in node.names:
        local = a.asname or a.name
        mod.from_imports[local] = f"{'.' * node.level}{module}.{a.name}" if module else f"{'.' * node.level}{a.name}"
    if node.level or not (module == "horovod" or module.startswith("horovod.")):
        return
    if mod.hvd_import_line is None or node.lineno < mod.hvd_import_line:
        mod.hvd_import_line = node.lineno
    for a in node.names:
        full = f"{module}.{a.name}"
        if module == "horovod":
            mod.hvd_aliases.add(a.asname or a.name)  # from horovod import torch as hvd
            if full.startswith(_HVD_BINDINGS):
                mod.hvd_binding = True
                mod.hvd_binding_name = mod.hvd_binding_name or full
        else:
            mod.hvd_names[a.asname or a.name] = a.name
            if module.startswith(_HVD_BINDINGS):
                mod.hvd_binding = True
                mod.hvd_binding_name = mod.hvd_binding_name or module
        if "tensorflow" in full or "keras" in full:
            mod.hvd_framework = "tensorflow"


# -- reading a project ---------------------------------------------------------------------------
def _package_root(path: Path) -> Path:
    """The directory imports of ``path`` resolve against: above the topmost package holding it."""
    d = path.parent
    while (d / "__init__.py").is_file() and d.parent != d:
        d = d.parent
    return d


def _module_file(base: Path, dotted_name: str) -> Optional[Path]:
    p = base.joinpath(*dotted_name.split(".")) if dotted_name else base
    if dotted_name and p.with_suffix(".py").is_file():
        return p.with_suffix(".py")
    if (p / "__init__.py").is_file():
        return p / "__init__.py"
    return None


def _local_imports(mod: _Module) -> Iterator[Tuple[Path, Optional[str]]]:
    """``(file, local name bound to it or None)`` for each import of ``mod`` found in the project."""
    roots = [mod.path.parent]
    root = _package_root(mod.path)
    if root != mod.path.parent:
        roots.append(root)
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                for r in roots:
                    f = _module_file(r, a.name)
                    if f:
                        yield f, (a.asname or a.name.split(".")[0]) if a.asname or "." not in a.name else None
                        break
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.path.parent
                for _ in range(node.level - 1):
                    base = base.parent
                bases = [base]
            else:
                bases = roots
            for b in bases:
                f = _module_file(b, node.module or "")
                found = False
                if f is not None:
                    yield f, None
                    found = True
                for a in node.names:  # from pkg import submodule
                    sub = _module_file(b, f"{node.module}.{a.name}" if node.module else a.name)
                    if sub is not None:
                        yield sub, a.asname or a.name
                        found = True
                if found:
                    break


def _iter_dir(d: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(d):
        dirnames[:] = sorted(n for n in dirnames if n not in _SKIP_DIRS and not n.startswith(".")
                             and not (Path(dirpath, n, "pyvenv.cfg").exists()
                                      or Path(dirpath, n, "conda-meta").is_dir()))
        for n in sorted(filenames):
            if n.endswith(".py") and os.path.isfile(os.path.join(dirpath, n)):  # not a FIFO or a device
                yield Path(dirpath, n)


def _read(path: Path, shown: str) -> _Module:
    from envtool.core.errors import UsageError
    from envtool.core.inputs import read_input

    try:
        text = read_input(path, "--script").decode("utf-8", errors="replace")  # a FIFO: exit 2, never a hang
    except OSError as exc:
        raise UsageError(f"--script {shown}: cannot read it ({exc.strerror})") from None
    return _parse(text, shown, path)


def _parse(text: str, shown: str, path: Path) -> _Module:
    try:
        tree = ast.parse(text, filename=shown)
    except SyntaxError as exc:
        return _Module(path, shown, None, ScanIssue(shown, exc.lineno or 1, "syntax", f"does not parse: {exc.msg}",
                                                    "fix the syntax error (nothing else was checked)"))
    except (RecursionError, MemoryError):
        return _Module(path, shown, None, ScanIssue(shown, 1, "syntax", "too deeply nested for Python's parser",
                                                    "fix the syntax error (nothing else was checked)"))
    mod = _Module(path, shown, tree)
    mod.size = len(text)
    # code that names nodes, or reads both the global and the node-local rank: written for several nodes
    mod.multinode = bool(_MULTINODE_RE.search(text)) or bool(
        _GLOBAL_RANK_RE.search(text) and _LOCAL_RANK_RE.search(text))
    if "envtool:" in text:
        mod.ignores = _ignores(text)
    _collect(mod)
    return mod


_MULTINODE_RE = re.compile("|".join(_MULTINODE_WORDS), re.IGNORECASE)
_GLOBAL_RANK_RE = re.compile(r"""["']RANK["']|\bglobal_rank\b""")
_LOCAL_RANK_RE = re.compile(r"""["']LOCAL_RANK["']""")
_IGNORE = re.compile(r"envtool:\s*ignore(?:\[([\w\-, ]*)\])?")


def _ignores(text: str) -> Dict[int, Set[str]]:
    """line → rules silenced by a ``# envtool: ignore[rule, …]`` comment on it (``ignore`` alone:
    every rule). Comments are found with :mod:`tokenize`, so the text inside a string never counts."""
    import io
    import tokenize

    out: Dict[int, Set[str]] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type != tokenize.COMMENT:
                continue
            m = _IGNORE.search(tok.string)
            if m:
                rules = {r.strip() for r in (m.group(1) or "*").split(",") if r.strip()} or {"*"}
                out.setdefault(tok.start[0], set()).update(rules)
    except (tokenize.TokenError, SyntaxError):
        pass
    return out


# -- the project analysis ------------------------------------------------------------------------
class _Project:
    """Every module read for one scan, and the programs (an entry point and the modules its
    imports reach) judged one by one."""

    def __init__(self, modules: List[_Module], entries: Set[Path], launch: Optional[str] = None,
                 explicit: Optional[Set[Path]] = None):
        self.modules = [m for m in modules if m.tree is not None]
        self.syntax = [m.syntax for m in modules if m.syntax is not None]
        self.entries = entries
        self.launch = launch
        self.issues: Dict[Tuple[str, int, str], ScanIssue] = {}
        self.suppressed: List[ScanIssue] = []
        self.launches: Dict[str, str] = {}
        self.reasons: Dict[str, str] = {}
        by_path = {m.path: m for m in self.modules}
        self.imported: Set[Path] = set()
        for m in self.modules:
            for f in m.local_imports:
                if f in by_path and f != m.path:
                    self.imported.add(f)

        def closure(start: _Module) -> List[_Module]:
            seen = {start.path}
            order = [start]
            i = 0
            while i < len(order):
                for f in sorted(order[i].local_imports):
                    if f in by_path and f not in seen:
                        seen.add(f)
                        order.append(by_path[f])
                i += 1
            return order

        # entry points: files named (or --entry), files with a __main__ guard; then each module no
        # entry reaches and no other module imports (a library or a script run as it is)
        explicit = explicit if explicit is not None else set(entries)
        starts = [m for m in self.modules if m.path in explicit or m.main_guard]
        self.programs: List[Tuple[_Module, List[_Module]]] = []
        reached: Set[Path] = set()
        for m in starts:
            mods = closure(m)
            reached.update(x.path for x in mods)
            self.programs.append((m, mods))
        rest = [m for m in self.modules if m.path not in reached]
        rest_paths = {m.path for m in rest}
        imported_in_rest = {f for m in rest for f in m.local_imports if f in rest_paths and f != m.path}
        for m in [m for m in rest if m.path not in imported_in_rest] + rest:
            if m.path in reached:
                continue
            mods = closure(m)
            reached.update(x.path for x in mods)
            self.programs.append((m, mods))
        self.components = [mods for _, mods in self.programs]

    def add(self, mod: _Module, line: int, rule: str, message: str, fix: str, level: str = "warn") -> None:
        key = (mod.shown, line, rule)
        old = self.issues.get(key)
        if old is None or (old.level == "info" and level == "warn"):
            if rule not in ("syntax", "no-main-guard") and "[launch assumed" not in message:
                message += self.current_assumed
            issue = ScanIssue(mod.shown, line, rule, message, fix, level, self.current_entry, self.current_launch)
            ignored = mod.ignores.get(line, ())
            if rule in ignored or "*" in ignored:
                self.suppressed.append(issue)
                return
            self.issues[key] = issue

    current_entry = ""
    current_launch = ""
    current_assumed = ""
    files = 0
    bytes = 0

    def run(self) -> List[ScanIssue]:
        for entry, mods in self.programs:
            self.current_entry = entry.shown
            prog = _Component(self, mods, entry)
            self.launches[entry.shown], self.reasons[entry.shown] = prog.launch, prog.launch_reason
            prog.run()
        self.close()
        return sorted(list(self.issues.values()) + self.syntax, key=lambda i: (i.path, i.line, i.rule))

    def close(self) -> None:
        """Break the module ↔ function ↔ call reference cycles so that reference counting frees
        the trees at once (the scan runs with the cyclic collector paused)."""
        for m in self.modules:
            for f in m.funcs:
                f.sites.clear()
                f.parent = None
            m.funcs.clear()
            m.calls.clear()
            m._dict_idx = None


class _Component:
    """The modules joined by imports: one program, judged together."""

    def __init__(self, project: _Project, modules: List[_Module], entry: Optional[_Module] = None):
        self.p = project
        self.modules = modules
        self.entry = entry or modules[0]
        self.funcs: Dict[str, List[_Func]] = {}
        for m in modules:
            last_def: Dict[Tuple[Optional[str], int, str], _Func] = {}
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
        self.estimator_scales = any(self.qualname(c) in _ESTIMATORS_SCALING for c in self.calls)
        self.has_init = any(self.is_hvd_call(c, ("init",)) or _last(c.node.func) == "run" and
                            self.is_hvd_call(c, ("run",)) and "elastic" in ast.unparse(c.node.func)
                            for c in self.calls) or any(
            "elastic.run" in ast.unparse(d) for m in modules for f in m.funcs if id(f) in self.reached
            for d in getattr(f.node, "decorator_list", ()))
        self.hvd_work = {id(c.func) for c in self.calls if c.func is not None and (
            self.is_hvd_call(c, _HVD_WORK) or _last(c.node.func) in _DIST_WORK)}
        self.in_memory = {id(c.func) for c in self.calls if c.func is not None and _last(c.node.func) == "BytesIO"}
        self._covered: Dict[int, Optional[str]] = {}
        self._scaled_names: Dict[int, Set[str]] = {}
        self._size_funcs: Optional[Set[int]] = None
        self._argparse: Optional[Dict[str, ast.AST]] = None
        self._definite_cache: Dict[int, Set[str]] = {}
        self.launch, self.launch_reason = self._decide_launch()
        self.p.current_launch = self.launch
        self.p.current_assumed = self.assumed()

    def _reachable(self) -> Set[int]:
        """ids of the functions the entry point can reach: called (by name, ``self.f``, ``module.f``)
        or referred to (passed as a callback, a class instantiated: all its methods) from code that
        runs (module level of every module of the program, then reached functions); nested
        functions of a reached function. A pure library reaches every function."""
        funcs = [f for m in self.modules for f in m.funcs if id(f) not in self.shadowed]
        if self.library:
            return {id(f) for f in funcs}
        by_name: Dict[str, List[_Func]] = {}
        by_class: Dict[str, List[_Func]] = {}
        methods: Dict[str, List[_Func]] = {}
        children: Dict[int, List[_Func]] = {}
        for f in funcs:
            if f.cls is None:
                by_name.setdefault(f.name, []).append(f)
            else:
                by_class.setdefault(f.cls, []).append(f)
                methods.setdefault(f.name, []).append(f)
            if f.parent is not None:
                children.setdefault(id(f.parent), []).append(f)
        reached: Set[int] = set()
        work: List[Tuple[_Module, Optional[_Func]]] = [(m, None) for m in self.modules]
        while work:
            mod, scope = work.pop()
            names = mod.refs.get(id(scope), ())
            new: List[_Func] = []
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
        forced = self.p.launch
        if forced:
            return forced, "--launch " + forced
        for m in self.modules:
            if m.hvd_binding:
                return "horovod", f"imports {m.hvd_binding_name} ({m.shown}:{m.hvd_import_line})"
        for c in self.calls:
            if self._lightning_horovod(c):
                return "horovod", f"Lightning's Horovod strategy ({c.module.shown}:{c.node.lineno})"
        for m in self.modules:
            if any(v.split(".")[0] == "mpi4py" for v in list(m.module_aliases.values()) +
                   list(m.from_imports.values())):
                return "mpi", f"imports mpi4py, which initialises MPI in the process ({m.shown})"
        for c in self.calls:
            last = _last(c.node.func)
            if last == "init_process_group":
                backend = _const_str(c.node.args[0]) if c.node.args else _const_str(_kw(c.node, "backend"))
                if backend == "mpi":
                    return "mpi", f"init_process_group(backend='mpi') ({c.module.shown}:{c.node.lineno})"
                return "torchrun", (f"init_process_group({'backend=' + repr(backend) if backend else ''}) "
                                    f"({c.module.shown}:{c.node.lineno})")
        for c in self.calls:
            last = _last(c.node.func)
            q = self.qualname(c)
            if last in ("DistributedDataParallel", "FullyShardedDataParallel") or q.startswith("deepspeed.") or \
                    (last == "spawn" and "multiprocessing" in q) or last == "Accelerator":
                return "torchrun", f"{last}() ({c.module.shown}:{c.node.lineno})"
        for c in self.calls:
            if _last(c.node.func) == "Trainer" and c.module.lightning:
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
        return f" [launch assumed: {LAUNCHES[self.launch]}, because: {self.launch_reason}]"

    # -- resolution ------------------------------------------------------------------------
    def resolve(self, call: _Call) -> List[_Func]:
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
    def qualname(call: _Call) -> str:
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

    def is_hvd_call(self, call: _Call, names: Iterable[str]) -> bool:
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

    def _lightning_horovod(self, call: _Call) -> bool:
        last = _last(call.node.func)
        if last in ("HorovodStrategy", "HorovodPlugin"):
            return True
        if call.module.lightning and any(k.arg in ("strategy", "accelerator", "distributed_backend") and
                                         _const_str(k.value) == "horovod" for k in call.node.keywords):
            return True  # train(strategy="horovod") handing it on to a Trainer
        if last == "Trainer" and call.module.lightning:
            for k in ("strategy", "accelerator", "distributed_backend"):
                v = _kw(call.node, k)
                if _const_str(v) == "horovod":
                    return True
                if v is not None and _last(v) in ("HorovodStrategy", "HorovodPlugin"):
                    return True
        return False

    def covered(self, call: _Call) -> Optional[str]:
        """Whether ``call`` runs only on some ranks: under a rank test, or every caller of its
        function is (followed across the program; a cycle counts as not covered).

        Returns:
            ``"global"`` (a test of the global rank), ``"local"`` (only of the rank within a node,
            so once per node), or None (every rank).
        """
        if call.guarded:
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
                        if id(f) not in out and any(self._mentions_size(r, f.module, set(), out) for r in f.returns):
                            out.add(id(f))
                if len(out) == before:
                    break
            self._size_funcs = out
        return self._size_funcs

    def _mentions_size(self, node: ast.AST, mod: _Module, scaled: Set[str], size_funcs: Set[int]) -> bool:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                c = _Call(sub, mod, None, False, None)
                if self.is_hvd_call(c, _SIZE):
                    return True
                if any(id(g) in size_funcs for g in self.resolve(c)):
                    return True
            if isinstance(sub, (ast.Name, ast.Attribute)):
                d = dotted(sub)
                if d and d in scaled:
                    return True
        return False

    def scaled_names(self, mod: _Module) -> Set[str]:
        """Dotted names assigned (anywhere in ``mod``) a value involving hvd.size()."""
        if id(mod) not in self._scaled_names:
            sf = self.size_funcs()
            scaled: Set[str] = set()
            pending = [(dotted(t), v) for _, t, v, _ in mod.assigns if dotted(t)]
            for _ in range(3):
                rest = []
                for name, value in pending:
                    if name in scaled:
                        continue
                    if self._mentions_size(value, mod, scaled, sf):
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
                if _last(n.func) != "add_argument":
                    continue
                dest = _const_str(_kw(n, "dest"))
                if dest is None:
                    longs = [_const_str(a) for a in n.args if (_const_str(a) or "").startswith("--")]
                    names = longs or [_const_str(a) for a in n.args if _const_str(a)]
                    if not names:
                        continue
                    dest = names[0].lstrip("-").replace("-", "_")
                default = _kw(n, "default")
                out[dest] = default if default is not None else ast.Constant(None)
            self._argparse = out
        return self._argparse

    def judge(self, value: ast.AST, call: _Call, depth: int = 0) -> List[Tuple[str, _Call, str]]:
        """Judge a learning-rate value seen at ``call``.

        Returns:
            ``[(verdict, where, shown)]``: ``verdict`` is ``scaled``, ``unscaled`` or ``unknown``;
            ``where`` is the call the verdict is about (the optimizer's, or a caller passing it).
        """
        mod = call.module
        if self._mentions_size(value, mod, self.scaled_names(mod), self.size_funcs()):
            return [("scaled", call, ast.unparse(value))]
        shown = ast.unparse(value)
        f = call.func
        if isinstance(value, ast.Name) and f is not None and value.id in f.params and depth < 4:
            if not f.sites:
                return [("unknown", call, f"{shown} (a parameter of {f.name}() with no call site in the project)")]
            out = []
            for site in f.sites:
                arg = self._bound(f, site, value.id)
                if arg is None:
                    out.append(("unknown", site, f"{shown} (not resolved at this call of {f.name}())"))
                else:
                    out.extend(self.judge(arg, site, depth + 1))
            return out
        if self._definite(value, mod):
            return [("unscaled", call, shown)]
        return [("unknown", call, shown)]

    def _definite_names(self, mod: _Module) -> Set[str]:
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

    def _definite(self, value: ast.AST, mod: _Module, names: Optional[Set[str]] = None) -> bool:
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

    def _bound(self, f: _Func, site: _Call, param: str) -> Optional[ast.AST]:
        """The argument ``site`` binds to ``param`` of ``f`` (keyword, position, ``**`` of a dict literal
        or of a name assigned dict literals in the caller's scope, or the default); None: not resolved."""
        n = site.node
        v = _kw(n, param)
        if v is not None:
            return v
        for k in n.keywords:
            if k.arg is None:
                lits: List[ast.AST] = [k.value] if isinstance(k.value, ast.Dict) else []
                if isinstance(k.value, ast.Name):
                    got = self._dict_values(site, k.value.id)
                    if got is not None:
                        lits = list(got[0])
                        for key, val, _ in got[1]:
                            if key == param:
                                return val
                for lit in lits:
                    ok, val = self._dict_get(lit, param)
                    if val is not None:
                        return val
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

    # -- rules -----------------------------------------------------------------------------
    def run(self) -> None:
        self.rule_start_methods()
        if self.launch == "horovod" and self.uses_hvd:
            self.rule_init()
            self.rule_lr()
            if self.has_init:  # without hvd.init() nothing here runs as a rank (a library, a Spark/Ray driver)
                self.rule_broadcast()
                self.rule_checkpoint()
                if True:  # hvd.init() reached: a program (a library entry calls it in the function run)
                    self.rule_pin()
                    self.rule_wrap()
                    self.rule_shard()
        elif self.launch in ("torchrun", "mpi") and any(
                _last(c.node.func) == "init_process_group" for c in self.calls):
            self.rule_checkpoint()
            self.rule_pin()
            self.rule_wrap()
            self.rule_shard()

    # -- the rules of issue 26 ---------------------------------------------------------------
    def _first(self, calls: List[_Call]) -> Optional[_Call]:
        """The first of ``calls`` in the entry module, else the first overall."""
        here = [c for c in calls if c.module is self.entry]
        return (here or calls or [None])[0]

    def _spark_or_ray(self) -> bool:
        return any(self.qualname(c).startswith(("horovod.spark", "horovod.ray")) for c in self.calls) or \
            any(m.hvd_binding_name.startswith(("horovod.spark", "horovod.ray")) for m in self.modules)

    def rule_init(self) -> None:
        """``hvd-init-missing``/``hvd-init-late``: Horovod calls that need ``hvd.init()`` with no reachable init, or before it."""
        if self.library or self.lightning_hvd or self.estimator_scales or self._spark_or_ray():
            return
        uses = [c for c in self.calls if self.is_hvd_call(c, _NEEDS_INIT)]
        if not uses:
            return
        src = "(Horovod usage step 1, horovod.readthedocs.io/en/v0.28.1/pytorch.html; ALCF tutorial step 1)"
        if not self.has_init:
            c = self._first(uses)
            self.p.add(c.module, c.node.lineno, "hvd-init-missing",
                       f"{ast.unparse(c.node.func)}() is called but nothing the entry point {self.entry.shown} "
                       f"reaches calls hvd.init(): Horovod is not initialised, the call raises or every rank "
                       f"trains alone {src}" + self.assumed(),
                       "call hvd.init() once at the start of the entry point, before any other Horovod call")
            return
        inits = [c for c in self.calls if self.is_hvd_call(c, ("init",))]
        module_level_init = any(i.func is None for i in inits)
        for c in uses:
            before = [i for i in inits if i.module is c.module and i.func is c.func and
                      (i.node.lineno, i.node.col_offset) > (c.node.lineno, c.node.col_offset)]
            same_scope = [i for i in inits if i.module is c.module and i.func is c.func]
            early = (before and len(before) == len(same_scope)) or (
                c.func is None and c.module is not self.entry and inits and not module_level_init)
            if early:
                where = f"line {before[0].node.lineno}" if before else "a function called later"
                self.p.add(c.module, c.node.lineno, "hvd-init-late",
                           f"{ast.unparse(c.node.func)}() runs before hvd.init() ({where}): Horovod is not "
                           f"initialised yet, the call raises ValueError {src}" + self.assumed(),
                           "move hvd.init() before the first Horovod call")

    def _cuda_use(self) -> Optional[_Call]:
        for c in self.calls:
            n = c.node
            last = _last(n.func)
            q = dotted(n.func) or ""
            if last == "cuda" and isinstance(n.func, ast.Attribute) and q != "torch.cuda":
                return c
            if last in ("to", "device") and any(_const_str(a) and _const_str(a).startswith("cuda")
                                                for a in list(n.args) + [k.value for k in n.keywords]):
                return c
            if last in ("list_physical_devices", "list_logical_devices") and any(
                    _const_str(a) == "GPU" for a in n.args) and self.uses_hvd:
                return c
        if self.launch == "horovod" and any(m.hvd_framework == "tensorflow" for m in self.modules if m.hvd_binding):
            # TensorFlow takes every visible GPU of the node unless told otherwise
            inits = [c for c in self.calls if self.is_hvd_call(c, ("init",))]
            return inits[0] if inits else None
        return None

    def rule_pin(self) -> None:
        """``no-gpu-pinning``: CUDA used and no device chosen from the local rank."""
        if self.lightning_hvd or self.estimator_scales or self._spark_or_ray():
            return
        cuda = self._cuda_use()
        if cuda is None:
            return
        for m in self.modules:
            if m.cuda_visible:
                return
        calls = sorted(self.calls, key=lambda x: _last(x.node.func) != "set_device")  # set_device judged first
        for c in calls:
            n = c.node
            last = _last(n.func)
            args = list(n.args) + [k.value for k in n.keywords if k.arg not in ("non_blocking",)]
            if last in ("set_device", "set_visible_devices", "Accelerator", "init_distributed") or \
                    _kw(n, "device_ids") is not None or _kw(n, "local_rank") is not None:
                arg = n.args[0] if n.args else None
                if last == "set_device" and arg is not None and (
                        isinstance(arg, ast.Call) and _rank_kind(arg) == "global" or
                        isinstance(arg, (ast.Name, ast.Attribute)) and c.module.rank_aliases.get(_last(arg)) == "global"):
                    self.p.add(c.module, n.lineno, "no-gpu-pinning",
                               f"{ast.unparse(n)} pins the GPU to the global rank: on a second node it names a GPU "
                               "that does not exist (Horovod usage step 2: pin to the local rank)" +
                               ("" if self.multinode_job else "; nothing shows this program runs on several nodes, "
                                "where global and local rank are the same"),
                               "pin to the local rank: torch.cuda.set_device(hvd.local_rank())",
                               "warn" if self.multinode_job else "info")
                return
            if last in ("cuda", "to", "device") and args and any(
                    not isinstance(a, ast.Constant) for a in args):
                if last == "to" and not any(_rank_kind(a) or isinstance(a, ast.JoinedStr) or
                                            any(isinstance(x, ast.BinOp) for x in ast.walk(a)) for a in args):
                    continue
                return
        init = self._first([c for c in self.calls if self.is_hvd_call(c, ("init",)) or
                            _last(c.node.func) == "init_process_group"]) or cuda
        fix = ("torch.cuda.set_device(hvd.local_rank()) right after hvd.init()" if self.launch == "horovod" and
               any(m.hvd_framework == "torch" for m in self.modules if m.hvd_binding) else
               "tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], 'GPU')"
               if self.launch == "horovod" else
               "torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) after init_process_group")
        self.p.add(init.module, init.node.lineno, "no-gpu-pinning",
                   f"the program uses CUDA ({cuda.module.shown}:{cuda.node.lineno}) but never pins a GPU to the "
                   "local rank: every rank of a node runs on GPU 0 (out of memory, or N times slower) (Horovod usage "
                   "step 2, horovod.readthedocs.io/en/v0.28.1/pytorch.html; ALCF tutorial step 2)" + self.assumed(),
                   fix)

    def rule_wrap(self) -> None:
        """``optimizer-not-wrapped``: an optimizer with nothing averaging the gradients across ranks."""
        if self.lightning_hvd or self.estimator_scales or self._spark_or_ray():
            return
        opts = [c for c in self.calls if self._optimizer_name(c)]
        if not opts:
            return
        for c in self.calls:
            last = _last(c.node.func)
            if self.launch == "horovod" and (self.is_hvd_call(c, _WRAPS) or last in _WRAPS):
                return
            if last in _DDP_WRAPS or self.qualname(c).startswith("deepspeed."):
                return
        c = self._first(opts)
        if self.launch == "horovod":
            fix = ("optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters()) "
                   "(TensorFlow: tape = hvd.DistributedGradientTape(tape); Keras: "
                   "opt = hvd.DistributedOptimizer(opt))")
            what = "hvd.DistributedOptimizer (or DistributedGradientTape), and no hvd.allreduce of the gradients"
        else:
            fix = "wrap the model: model = DistributedDataParallel(model, device_ids=[local_rank])"
            what = "DistributedDataParallel/FSDP, and no dist.all_reduce of the gradients"
        self.p.add(c.module, c.node.lineno, "optimizer-not-wrapped",
                   f"{self._optimizer_name(c)}(...) is never wrapped: nothing in the program uses {what}, so the "
                   "gradients are never averaged and every rank trains its own model (Horovod usage step 4, "
                   "horovod.readthedocs.io/en/v0.28.1/pytorch.html; ALCF tutorial step 4)" + self.assumed(), fix)

    def rule_shard(self) -> None:
        """``data-not-sharded``: DataLoaders with no sampler and nothing sharding the data by rank."""
        if self.lightning_hvd or any(_last(c.node.func) == "Trainer" and c.module.lightning for c in self.calls):
            return  # Lightning adds a DistributedSampler itself
        loaders = [c for c in self.calls if _last(c.node.func) == "DataLoader"]
        tfdata = [c for c in self.calls if (dotted(c.node.func) or "").startswith(("tf.data.", "tensorflow.data."))
                  and _last(c.node.func) in ("from_tensor_slices", "TFRecordDataset", "list_files",
                                             "from_generator", "TextLineDataset")]
        seeded = [c for c in self.calls if _last(c.node.func) in ("flow_from_directory", "flow_from_dataframe", "flow")
                  and _kw(c.node, "seed") is not None and not _rank_kind(_kw(c.node, "seed"))]
        if not loaders and not tfdata and not seeded:
            return
        for c in loaders:
            sampler = _kw(c.node, "sampler") or _kw(c.node, "batch_sampler")
            if sampler is None and len(c.node.args) > 3:
                sampler = c.node.args[3]
            for k in c.node.keywords:
                if k.arg is None and isinstance(k.value, ast.Name):
                    got = self._dict_values(c, k.value.id)
                    if got is not None and (any(key in ("sampler", "batch_sampler") for key, _, _ in got[1]) or any(
                            self._dict_get(lit, "sampler")[1] is not None for lit in got[0])):
                        return
            if sampler is None or isinstance(sampler, ast.Constant) and sampler.value is None:
                continue
            if isinstance(sampler, ast.Call) and _last(sampler.func) in _LOCAL_SAMPLERS:
                continue
            if isinstance(sampler, ast.IfExp) and any(isinstance(x, ast.Constant) and x.value is None
                                                      for x in (sampler.body, sampler.orelse)):
                pass  # sampler=DistributedSampler(...) if distributed else None: still a sampler
            return
        for c in self.calls:
            last = _last(c.node.func)
            if last in _SHARDERS or any(k.arg in _SHARD_KWARGS for k in c.node.keywords):
                return
            low = last.lower()
            if any(w in low for w in ("data", "loader", "sampl", "read", "shard", "split", "file", "record",
                                      "pipeline", "input", "iter", "batch")) and \
                    not any(w in low for w in ("device", "seed", "epoch", "log", "print")) and \
                    any(_rank_kind(a) for a in list(c.node.args) + [k.value for k in c.node.keywords]):
                return
        for c in self.calls:  # a project Dataset/Sampler class that asks for the rank shards by itself
            if c.func is not None and c.func.cls and any(w in c.func.cls.lower() for w in (
                    "data", "loader", "sampler", "reader", "stream", "shard")) and \
                    _last(c.node.func) in ("rank", "get_rank", "local_rank", "size", "get_world_size",
                                           "get_worker_info"):
                return
        for m in self.modules:
            if m.rank_slices:
                return
        fits = [c for c in self.calls if _last(c.node.func) in ("fit", "fit_generator")]
        for c in (fits or seeded[:1]) if seeded else ():
            g = seeded[0]  # the same seed on every rank: identical batches, whatever the step count
            self.p.add(c.module, c.node.lineno, "data-not-sharded",
                       f"trains on {_last(g.node.func)}(seed="
                       f"{ast.unparse(_kw(g.node, 'seed'))}) ({g.module.shown}:{g.node.lineno}), which draws the same "
                       "shuffled batches on every rank (one seed everywhere, nothing shards the data): N ranks train "
                       "on identical data (ALCF tutorial step 7)",
                       "seed with the rank (seed=base_seed + hvd.rank()) or shard the file list by rank")
        if seeded and not loaders and not tfdata:
            return
        for m in self.modules:
            if m.size_divs:
                return
        c = self._first([x for x in loaders + tfdata if "train" in ast.unparse(x.node).lower()] or loaders + tfdata)
        fix = ("sampler = torch.utils.data.distributed.DistributedSampler(dataset, num_replicas=hvd.size(), "
               "rank=hvd.rank()); DataLoader(dataset, sampler=sampler, ...) and sampler.set_epoch(epoch) each epoch"
               if loaders else "dataset = dataset.shard(hvd.size(), hvd.rank())")
        if self.launch == "torchrun":
            fix = fix.replace("num_replicas=hvd.size(), rank=hvd.rank()", "")
        self.p.add(c.module, c.node.lineno, "data-not-sharded",
                   "no loader of the program has a sampler and nothing shards the data by rank "
                   "(DistributedSampler, Dataset.shard, a rank-indexed slice): every rank reads the whole dataset, "
                   "so each epoch processes it once per rank (the DistributedSampler of Horovod's PyTorch example, "
                   "horovod.readthedocs.io/en/v0.28.1/pytorch.html; ALCF tutorial step 7)" + self.assumed(), fix)

    def _dict_index(self, mod: _Module):
        """Per module, built once: ``(id(scope), name)`` → values assigned to that plain name, and
        → the ``name.update(...)`` calls (so that each lookup is a dict access: linear overall)."""
        idx = getattr(mod, "_dict_idx", None)
        if idx is None:
            assigned: Dict[Tuple[int, str], List[ast.AST]] = {}
            for fn, t, v, _ in mod.assigns:
                if isinstance(t, ast.Name):
                    assigned.setdefault((id(fn), t.id), []).append(v)
            updates: Dict[Tuple[int, str], List[_Call]] = {}
            for c in mod.calls:
                fn = c.node.func
                if isinstance(fn, ast.Attribute) and fn.attr == "update" and isinstance(fn.value, ast.Name):
                    updates.setdefault((id(c.func), fn.value.id), []).append(c)
            idx = mod._dict_idx = (assigned, updates)
        return idx

    def _dict_values(self, call: _Call, name: str, depth: int = 0) -> Optional[Tuple[List[ast.AST], List[Tuple[str, ast.AST,
                                                                                                  Optional[ast.AST]]]]]:
        """The dict literals assigned to ``name`` in the call's scope (or module), and its item assignments.

        Returns:
            ``(literals, [(key, value, dead guard if or None)])``, or None when ``name`` is also assigned
            something that is not a dict literal (not resolved) or is not assigned at all.
        """
        mod = call.module
        assigned, updates = self._dict_index(mod)
        for scope in ((call.func, None) if call.func is not None else (None,)):
            values = assigned.get((id(scope), name))
            if not values:
                continue
            lits: List[ast.AST] = []
            for v in values:
                for alt in ([v.body, v.orelse] if isinstance(v, ast.IfExp) else [v]):
                    if isinstance(alt, ast.Dict) or (isinstance(alt, ast.Call) and _last(alt.func) == "dict"
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
                        items.extend((_const_str(k), v, c.dead_if) for k, v in zip(a.keys, a.values) if _const_str(k))
                    elif isinstance(a, ast.Name) and a.id != name and depth < 3:
                        got = self._dict_values(c, a.id, depth + 1)  # kwargs.update(cuda_kwargs)
                        if got is not None:
                            for lit in got[0]:
                                if isinstance(lit, ast.Dict):
                                    items.extend((_const_str(k), v, c.dead_if) for k, v in zip(lit.keys, lit.values)
                                                 if _const_str(k))
                                else:
                                    items.extend((k.arg, k.value, c.dead_if) for k in lit.keywords if k.arg)
                            items.extend(got[1])
            return lits, items
        return None

    def _returned_dicts(self, call: _Call) -> Optional[Tuple[List[ast.AST], List[Tuple[str, ast.AST,
                                                                                    Optional[ast.AST]]]]]:
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
                    got = self._dict_values(_Call(call.node, f.module, f, None, None), r.id)
                    if got is None:
                        return None
                    lits.extend(got[0])
                    items.extend(got[1])
                else:
                    return None
        return lits, items

    @staticmethod
    def _dict_get(lit: ast.AST, key: str) -> Tuple[bool, Optional[ast.AST]]:
        if isinstance(lit, ast.Dict):
            if any(k is None for k in lit.keys):
                return False, None
            for k, v in zip(lit.keys, lit.values):
                if _const_str(k) == key:
                    return True, v
            return True, None
        v = _kw(lit, key)
        return not any(k.arg is None for k in lit.keywords), v

    def const_value(self, node: Optional[ast.AST], call: _Call, depth: int = 0):
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
            assigned, _ = self._dict_index(mod)
            scope = call.func
            while True:
                values = assigned.get((id(scope), node.id))
                if values:
                    got = {repr(self.const_value(v, _Call(call.node, mod, scope, None, None), depth + 1))
                           for v in values}
                    if len(got) == 1:
                        return self.const_value(values[0], _Call(call.node, mod, scope, None, None), depth + 1)
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
                        return self.const_value(v, _Call(call.node, m, None, None, None), depth + 1)
        return None

    def const_str(self, node: Optional[ast.AST], call: _Call) -> Optional[str]:
        """:meth:`const_value` when it is a string."""
        v = self.const_value(node, call)
        return v if isinstance(v, str) else None

    def _workers(self, node: Optional[ast.AST], call: Optional[_Call] = None) -> Tuple[str, str]:
        """(``yes``|``no``|``unknown``, shown) for a num_workers value."""
        if node is None:
            return "no", "0"
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return ("yes" if node.value > 0 else "no"), str(node.value)
        const = self.const_value(node, call) if call is not None else None
        if isinstance(const, int) and not isinstance(const, bool):
            return ("yes" if const > 0 else "no"), f"{ast.unparse(node)} (= {const})"
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            d = self.argparse_defaults().get(node.attr)
            if isinstance(d, ast.Constant) and isinstance(d.value, int):
                return ("yes" if d.value > 0 else "unknown"), f"{ast.unparse(node)} (default {d.value})"
        return "unknown", ast.unparse(node)

    def rule_start_methods(self) -> None:
        uses = []
        for c in self.calls:
            if _last(c.node.func) in _CONTEXT_CALLS:
                arg = c.node.args[0] if c.node.args else _kw(c.node, "method")
                method = self.const_str(arg, c) if arg is not None else None
                if method:
                    uses.append((c, method, _last(c.node.func) == "set_start_method"))
            ctx_node = _kw(c.node, "multiprocessing_context")
            ctx = self.const_str(ctx_node, c) if ctx_node is not None else None
            if ctx:
                uses.append((c, ctx, False))
        global_safe = any(m in ("spawn", "forkserver") and is_set and c.dead_if is None for c, m, is_set in uses)
        for c, method, _ in uses:
            if method == "fork" and self.mpi:
                self.p.add(c.module, c.node.lineno, "fork-start-method",
                           "start method 'fork' chosen explicitly: workers forked after MPI/Horovod init can "
                           "segfault or deadlock on InfiniBand stacks (OLCF Summit docs, DataLoader note: docs.olcf.ornl.gov/software/analytics/ibm-wml-ce.html)", 'use "forkserver" instead of "fork"')
        spawnish = [(c, m) for c, m, _ in uses if m in ("spawn", "forkserver") and c.dead_if is None]
        if spawnish:
            for m in self.modules:
                if m.path in self.p.imported or m.main_guard or m.first_toplevel_call is None:
                    continue
                here = [c for c, _ in spawnish if c.module is m and c.func is None]
                line = here[0].node.lineno if here else m.first_toplevel_call
                c, method = spawnish[0]
                self.p.add(m, line, "no-main-guard",
                           f"start method {method!r} ({c.module.shown}:{c.node.lineno}) re-imports the main module "
                           "in every worker, and this script runs code at module level without an "
                           "if __name__ == \"__main__\": guard", 'move the entry point under '
                           'if __name__ == "__main__":')
        if not self.mpi:
            return  # forked workers are a risk where MPI (or Horovod over InfiniBand) is in the process
        used_guards: Set[int] = set()
        for c in self.calls:
            if _last(c.node.func) != "DataLoader":
                continue
            self._dataloader(c, global_safe, used_guards)
        for m in self.modules:
            for g in m.dead_ifs:
                if id(g) in used_guards:
                    continue
                self.p.add(m, g.lineno, "dead-supports-context",
                           "the mp._supports_context guard (Horovod examples, PR #1824) is always false on current "
                           "torch (torch.multiprocessing has no _supports_context): the branch it guards never runs",
                           f"drop the guard; pass {FORKSERVER} to DataLoaders with num_workers > 0")
                used_guards.add(id(g))

    def _dataloader(self, c: _Call, global_safe: bool, used_guards: Set[int]) -> None:
        n = c.node
        workers_node = _kw(n, "num_workers")
        if workers_node is None and len(n.args) > 5:
            workers_node = n.args[5]
        context = _kw(n, "multiprocessing_context")
        if context is not None and self.const_str(context, c) == "fork":
            return  # the fork-start-method rule names it
        if context is not None:
            return  # a literal "fork" is the fork-start-method rule; anything else is a choice made
        verdicts: List[Tuple[str, str]] = []
        dead: Optional[ast.AST] = None
        splats = [k.value for k in n.keywords if k.arg is None]
        unresolved_splat = None
        for s in splats:
            returned = self._returned_dicts(_Call(s, c.module, c.func, c.guarded, c.dead_if)) \
                if isinstance(s, ast.Call) else None
            if not isinstance(s, (ast.Name, ast.Dict)) and returned is None:
                unresolved_splat = ast.unparse(s)
                continue
            if returned is not None:
                lits, items = returned
            elif isinstance(s, ast.Dict):
                lits, items = [s], []
            else:
                got = self._dict_values(c, s.id)
                f = c.func
                if got is None and f is not None and s.id in f.params:  # **kwargs: a parameter
                    for site in f.sites:
                        arg = self._bound(f, site, s.id)
                        if isinstance(arg, ast.Name):
                            got = self._dict_values(site, arg.id)
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
                    elif _const_str(val) == "fork":
                        self.p.add(c.module, val.lineno, "fork-start-method",
                                   "start method 'fork' chosen explicitly: workers forked after MPI/Horovod init can "
                                   "segfault or deadlock on InfiniBand stacks (OLCF Summit docs, DataLoader note: docs.olcf.ornl.gov/software/analytics/ibm-wml-ce.html)",
                                   'use "forkserver" instead of "fork"')
                        return
                    else:
                        ctx_set = True
                elif key == "num_workers" and workers_node is None:
                    verdicts.append(self._workers(val, c))
            for lit in lits:
                ok, v = self._dict_get(lit, "multiprocessing_context")
                if not ok:
                    unresolved_splat = ast.unparse(lit)
                    continue
                if v is not None:
                    ctx_set = True
                if workers_node is None:
                    ok, w = self._dict_get(lit, "num_workers")
                    verdicts.append(self._workers(w, c))
            if ctx_set:
                return
        if workers_node is not None:
            verdicts.append(self._workers(workers_node, c))
        if dead is not None:
            used_guards.add(id(dead))
        if global_safe:
            return
        yes = [s for v, s in verdicts if v == "yes"]
        unknown = [s for v, s in verdicts if v == "unknown"]
        if not yes and not unknown and unresolved_splat is None:
            return
        reason = (f"multiprocessing_context is set only under the mp._supports_context guard at line "
                  f"{dead.lineno}, which is always false on current torch (torch.multiprocessing has no "
                  "_supports_context, Horovod examples PR #1824), so " if dead is not None
                  else "no multiprocessing_context: ")
        if yes:
            what, level = f"num_workers={yes[0]}", "warn"
        elif unknown:
            what, level = f"num_workers={unknown[0]}, not resolved", "info"
        else:
            what, level = f"**{unresolved_splat} not resolved", "info"
        self.p.add(c.module, n.lineno, "dataloader-workers",
                   f"DataLoader({what}): {reason}workers are forked (Linux default before Python 3.14), which can "
                   "segfault or deadlock under MPI/InfiniBand (OLCF Summit docs, DataLoader note: docs.olcf.ornl.gov/software/analytics/ibm-wml-ce.html)",
                   f"pass {FORKSERVER} to this DataLoader" + (" and drop the guard" if dead is not None else ""),
                   level)

    def _optimizer_name(self, c: _Call) -> Optional[str]:
        name = dotted(c.node.func) or ""
        if _OPTIMIZER.search(name):
            return name
        if isinstance(c.node.func, ast.Name):
            src = c.module.from_imports.get(name, "")
            if src.rsplit(".", 1)[0] in _OPTIMIZER_MODULES and name[:1].isupper():
                return name
        base = name.split(".")[0]
        if "." in name and c.module.module_aliases.get(base, "") in _OPTIMIZER_MODULES and \
                name.rsplit(".", 1)[1][:1].isupper():
            return name
        return None

    def _scaled_after(self) -> bool:
        """An lr scaled after the optimizer is made: ``param_group['lr'] = … hvd.size()``,
        ``K.set_value(opt.lr, … )`` with a scaled value."""
        sf = self.size_funcs()
        for m in self.modules:
            scaled = self.scaled_names(m)
            for _, t, v, _ in m.assigns:
                text = ast.unparse(t).lower()
                if ("lr" in text or "learning_rate" in text) and not isinstance(t, ast.Name) and \
                        self._mentions_size(v, m, scaled, sf):
                    return True
        for c in self.calls:
            if _last(c.node.func) == "set_value" and len(c.node.args) == 2 and \
                    "lr" in ast.unparse(c.node.args[0]).lower():
                if self._mentions_size(c.node.args[1], c.module, self.scaled_names(c.module), sf):
                    return True
        return False

    def _adasum(self) -> bool:
        """An optimizer wrapped with ``op=hvd.Adasum`` unconditionally (a conditional ``op=`` keeps the rule)."""
        for c in self.calls:
            if self.is_hvd_call(c, ("DistributedOptimizer", "DistributedGradientTape")):
                op = _kw(c.node, "op")
                if isinstance(op, (ast.Attribute, ast.Name)) and _last(op) == "Adasum":
                    return True
        return False

    def _local_scaled(self, value: ast.AST, mod: _Module) -> bool:
        """The value involves ``hvd.local_size()`` (directly or through a name assigned it in ``mod``)."""
        names = {dotted(t) for _, t, v, _ in mod.assigns if dotted(t) and any(
            isinstance(x, ast.Call) and self.is_hvd_call(_Call(x, mod, None, None, None), ("local_size",))
            for x in ast.walk(v))}
        for sub in ast.walk(value):
            if isinstance(sub, ast.Call) and self.is_hvd_call(_Call(sub, mod, None, None, None), ("local_size",)):
                return True
            if isinstance(sub, (ast.Name, ast.Attribute)) and dotted(sub) in names:
                return True
        return False

    def rule_lr(self) -> None:
        if self.lightning_hvd or self.estimator_scales or self._adasum() or self._scaled_after():
            return
        src = "(Horovod usage step 3, horovod.readthedocs.io/en/v0.28.1/pytorch.html; ALCF tutorial step 3)"
        for c in self.calls:
            if _last(c.node.func) in ("OneCycleLR", "CyclicLR"):
                mx = _kw(c.node, "max_lr")
                if mx is None and len(c.node.args) > (2 if _last(c.node.func) == "CyclicLR" else 1):
                    mx = c.node.args[2 if _last(c.node.func) == "CyclicLR" else 1]
                if mx is not None:
                    for verdict, where, shown in self.judge(mx, c):
                        if verdict == "unscaled":
                            self.p.add(where.module, where.node.lineno, "lr-not-scaled",
                                       f"{_last(c.node.func)}(max_lr={shown}) sets the learning rate itself, "
                                       f"overriding the optimizer's (scaled or not): max_lr is not scaled by "
                                       f"hvd.size() {src}", f"scale max_lr: max_lr={shown} * hvd.size()")
        for c in self.calls:
            name = self._optimizer_name(c)
            if name is None:
                continue
            n = c.node
            lr = _kw(n, "lr") or _kw(n, "learning_rate")
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
                verdicts = self.judge(lr, c)
                if not self._mentions_size(lr, c.module, self.scaled_names(c.module), self.size_funcs()) and \
                        self._local_scaled(lr, c.module):
                    verdicts = [("unscaled", c, ast.unparse(lr))]
            adaptive = name.rsplit(".", 1)[-1] in _ADAPTIVE
            for verdict, where, shown in verdicts:
                if verdict == "scaled":
                    continue
                local = lr is not None and verdict == "unscaled" and self._local_scaled(lr, c.module)
                what = (f"{name}(...) learning rate {shown}" if where is c else
                        f"passes learning rate {shown} to {where.node.func and ast.unparse(where.node.func)}(), "
                        f"which builds {name}(...) at {c.module.shown}:{n.lineno} with it:")
                if local:
                    self.p.add(where.module, where.node.lineno, "lr-not-scaled",
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
                self.p.add(where.module, where.node.lineno, "lr-not-scaled",
                           f"{what} is not scaled by hvd.size() {src}{reason}",
                           f"multiply the learning rate by hvd.size(), e.g. {shown.split(' (')[0]} * hvd.size()"
                           + (" (or keep it, with warm-up, if tuned for this optimizer)" if adaptive else ""),
                           level)

    def rule_broadcast(self) -> None:
        for c in self.calls:
            last = _last(c.node.func)
            if last in _BROADCAST or (last in _ELASTIC_STATES and self.is_hvd_call(c, _ELASTIC_STATES)):
                return
            if last.endswith("Estimator") and self.qualname(c).startswith("horovod.spark."):
                return
        if self.lightning_hvd:
            return
        inits = [c for c in self.calls if self.is_hvd_call(c, ("init",))]
        mods = [m for m in self.modules if m.hvd_binding]
        if inits:
            where, line = inits[0].module, inits[0].node.lineno
        elif mods:
            where, line = mods[0], mods[0].hvd_import_line or 1
        else:
            return
        fix = ("hvd.broadcast_parameters(model.state_dict(), root_rank=0) and "
               "hvd.broadcast_optimizer_state(optimizer, root_rank=0) after creating them")
        if any(m.hvd_framework == "tensorflow" for m in self.modules if m.hvd_binding):
            fix = ("hvd.broadcast_variables(model.variables, root_rank=0) (or the Keras callback "
                   "hvd.callbacks.BroadcastGlobalVariablesCallback(0))")
        wrapped = any(self.is_hvd_call(c, ("DistributedOptimizer", "DistributedGradientTape", "DistributedTrainer"))
                      for c in self.calls)
        if wrapped:
            self.p.add(where, line, "no-broadcast",
                       "Horovod is used but nothing in the project broadcasts the initial model/optimizer state from "
                       "rank 0: ranks start from different weights (Horovod usage step 5; ALCF tutorial step 5)", fix)
        else:  # gradients averaged by hand: the scan cannot tell how the ranks' initial state is made equal
            self.p.add(where, line, "no-broadcast",
                       "Horovod is used without a distributed optimizer and nothing broadcasts the initial state "
                       "from rank 0: unless every rank builds identical weights, ranks start apart "
                       "(Horovod usage step 5; ALCF tutorial step 5)", fix, "info")

    def _is_write(self, c: _Call) -> Optional[str]:
        n = c.node
        name = dotted(n.func) or ""
        last = _last(n.func)
        if self.resolve(c):
            return None  # a project function: judged inside
        if c.func is not None and id(c.func) in self.in_memory:
            return None  # serialising into an io.BytesIO in the same function: no file is written
        if c.module.lightning and (last == "ModelCheckpoint" and c.module.from_imports.get(last, "").split(".")[0]
                                   in _LIGHTNING or "trainer" in name.lower() and last == "save_checkpoint"):
            return None
        receiver = (dotted(n.func.value) or "").lower() if isinstance(n.func, ast.Attribute) else ""
        if last in ("save_file", "save_model") and (self.qualname(c).startswith("safetensors") or
                                                     "safetensors" in receiver):
            return name or last  # safetensors.torch.save_file / save_model: a checkpoint too
        if name == "torch.save" or last in _SAVE_LAST or (
                last == "save" and any(w in receiver for w in ("checkpoint", "ckpt", "model", "saver"))):
            return name or last
        return None

    def _climb(self, sites: List[_Call], depth: int = 0) -> List[_Call]:
        """The call sites to report for a write inside a helper: a site that is itself inside a
        helper (a function with call sites, no loop, no Horovod work) and not under a rank test
        is replaced by that helper's own sites (up to 4 levels)."""
        out: List[_Call] = []
        for site in sites:
            g = site.func
            if depth < 4 and not site.guarded and g is not None and g.sites and not g.loops and \
                    id(g) not in self.hvd_work and self.covered(site) is None:
                out.extend(self._climb(g.sites, depth + 1))
            else:
                out.append(site)
        return out

    def _climb_local(self, sites: List[_Call], depth: int = 0) -> List[_Call]:
        """As :meth:`_climb` for writes under a local-rank test: a site inside a helper that is not
        itself under the test is replaced by the helper's call sites (the test is there)."""
        out: List[_Call] = []
        for site in sites:
            g = site.func
            if depth < 4 and not site.guarded and g is not None and g.sites and not g.loops and \
                    id(g) not in self.hvd_work:
                out.extend(self._climb_local([x for x in g.sites if self.covered(x) == "local"], depth + 1))
            else:
                out.append(site)
        return out

    def _log_write(self, c: _Call) -> Optional[str]:
        """``open(path, "w"|"a"|"x")`` or ``logging.FileHandler(path)``: a log or result file."""
        n = c.node
        last = _last(n.func)
        if last == "FileHandler":
            return "logging.FileHandler"
        if isinstance(n.func, ast.Name) and last == "open":
            mode = _const_str(n.args[1]) if len(n.args) > 1 else _const_str(_kw(n, "mode"))
            if mode and any(ch in mode for ch in "wax"):
                return f"open(..., {mode!r})"
        return None

    def rule_checkpoint(self) -> None:
        rank0 = "hvd.rank() == 0" if self.launch == "horovod" else "torch.distributed.get_rank() == 0"
        for c in self.calls:
            what = self._is_write(c)
            log = self._log_write(c) if what is None else None
            if what is None and log is None:
                continue
            paths = list(c.node.args[1:] if _last(c.node.func) in ("save", "save_file", "save_model") and
                         len(c.node.args) > 1 else c.node.args) + [k.value for k in c.node.keywords]
            if any(_rank_kind(a, c.module.rank_aliases) for a in paths):
                continue  # the file name carries the rank: one file per rank, meant so (sharded checkpoints)
            kind = self.covered(c)
            if kind == "local":
                f = c.func
                sites = [c] if c.guarded == "local" or f is None else \
                    self._climb_local([x for x in f.sites if self.covered(x) == "local"])
                for where in sites:
                    via = "" if where is c else f" (through {f.name}(), which writes with {what or log} at " \
                                                f"{c.module.shown}:{c.node.lineno})"
                    self.p.add(where.module, where.node.lineno, "checkpoint-local-rank",
                               f"{what or log}{via} is guarded by a local-rank test only: on a multi-node job local "
                               "rank 0 exists on every node, so each node writes the same file (a shared file "
                               "system sees N concurrent writers and a torn file) (Horovod usage step 6: save on "
                               "rank 0 only, horovod.readthedocs.io/en/v0.28.1/pytorch.html; ALCF tutorial step 6)"
                               + ("" if self.multinode_job else "; nothing shows this program runs on several "
                                  "nodes, so it may be fine where it runs") + ("; a log file may be meant per node"
                                                                              if what is None else ""),
                               f"test the global rank instead: if {rank0}:",
                               "warn" if self.multinode_job and what is not None else "info")
                continue
            if what is None or kind:
                continue
            f = c.func
            helper = f is not None and f.sites and not f.loops and id(f) not in self.hvd_work
            if not helper:  # module level, an entry/training function, or no call site: change the write
                self.p.add(c.module, c.node.lineno, "checkpoint-all-ranks",
                           f"{what}(...) writes a checkpoint on every rank (Horovod usage step 6; ALCF tutorial step 6)",
                           f"write checkpoints only under if {rank0}:")
                continue
            for site in self._climb(f.sites):
                kind = self.covered(site)
                if kind == "local":
                    self.p.add(site.module, site.node.lineno, "checkpoint-local-rank",
                               f"{f.name}() writes a checkpoint ({what}(...) at {c.module.shown}:{c.node.lineno}) and "
                               "is called here under a local-rank test only: on a multi-node job each node writes "
                               "the same file (Horovod usage step 6; ALCF tutorial step 6)" +
                               ("" if self.multinode_job else "; nothing shows this program runs on several nodes"),
                               f"test the global rank instead: if {rank0}:", "warn" if self.multinode_job else "info")
                if kind:
                    continue
                self.p.add(site.module, site.node.lineno, "checkpoint-all-ranks",
                           f"{f.name}() writes a checkpoint ({what}(...) at {c.module.shown}:{c.node.lineno}) and is "
                           "called here on every rank (Horovod usage step 6; ALCF tutorial step 6)",
                           f"call {f.name}() only under if {rank0}: (or return early in it on other ranks)")


# -- public API ----------------------------------------------------------------------------------
@contextmanager
def _no_gc():
    """Pause the cyclic garbage collector while a scan runs: its passes over a heap of millions
    of AST nodes made the scan's time grow faster than the input. The few cycles a scan makes
    (module ↔ function records) are collected once the collector runs again."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@dataclass(frozen=True)
class Limits:
    """Bounds of one scan (time and memory grow with the source read: about 40 MiB of memory per
    MiB of Python source, measured on issue 26's trees).

    Attributes:
        max_bytes: bytes of Python source read at most (default 8 MiB); past it the scan stops.
        max_files: ``*.py`` files read at most (default 20,000); past it the scan stops.
        max_issues: issues kept in a report (default 500); the rest are counted, not listed.
    """

    max_bytes: int = 8 * 1024 * 1024
    max_files: int = 20000
    max_issues: int = 500


@dataclass
class ScanReport:
    """The result of :func:`scan_project`.

    Attributes:
        issues: the issues kept (at most ``Limits.max_issues``), ordered by path, line and rule.
        omitted: issues found beyond ``Limits.max_issues`` (not listed).
        suppressed: issues silenced by a ``# envtool: ignore[rule]`` comment on their line.
        programs: one dict per entry point: ``entry``, ``launch``, ``reason``, ``modules``.
        files: Python files read; ``bytes``: their total size.
    """

    issues: List[ScanIssue]
    omitted: int = 0
    suppressed: List[ScanIssue] = field(default_factory=list)
    programs: List[dict] = field(default_factory=list)
    files: int = 0
    bytes: int = 0


def _limit_error(what: str, limits: Limits, files: int, size: int):
    from envtool.core.errors import UsageError

    return UsageError(
        f"--script: {what}; the scan stopped after {files} file(s), {size / 1048576:.1f} MiB, to bound its memory "
        f"(limits: {limits.max_files} files, {limits.max_bytes / 1048576:.4g} MiB of source). Name the entry "
        "script(s) with --entry (only their imports are read), pass a smaller directory, or raise "
        "--max-source-mb / --max-files")


def _load_project(paths: Sequence[Path], entries: Sequence[Path] = (), launch: Optional[str] = None,
                  limits: Optional[Limits] = None) -> _Project:
    """Read the files (streamed: one directory entry at a time) and the local modules they import.

    Raises:
        UsageError: a file cannot be read, or a limit of ``limits`` is passed (exit status 2).
    """
    limits = limits or Limits()
    explicit: Set[Path] = set()
    budget = {"files": 0, "bytes": 0}

    def given() -> Iterator[Path]:
        if entries:
            for e in entries:
                explicit.add(Path(e).resolve())
                yield Path(e)
            return
        for p in paths:
            p = Path(p)
            if p.is_dir():
                yield from _iter_dir(p)
            else:
                explicit.add(p.resolve())
                yield p

    modules: Dict[Path, _Module] = {}

    def load(path: Path) -> Optional[_Module]:
        key = path.resolve()
        if key in modules:
            return None
        budget["files"] += 1
        if budget["files"] > limits.max_files:
            raise _limit_error(f"more than {limits.max_files} Python files", limits, budget["files"] - 1,
                               budget["bytes"])
        try:
            size = path.stat().st_size
        except OSError:
            size = 0
        if budget["bytes"] + size > limits.max_bytes:
            raise _limit_error(f"more than {limits.max_bytes / 1048576:.4g} MiB of Python source (next: {path})",
                               limits, budget["files"] - 1, budget["bytes"])
        mod = _read(path, str(path))
        budget["bytes"] += mod.size or size
        mod.path = key
        modules[key] = mod
        return mod

    files: List[Path] = []
    for path in given():  # names only, streamed: the file cap stops a huge tree before any is read
        files.append(path)
        if len(files) > limits.max_files:
            raise _limit_error(f"more than {limits.max_files} Python files", limits, 0, 0)
    given_set = set(files)
    for path in files:
        load(path)
    queue: List[Path] = list(files)
    if queue:
        while queue:
            path = queue.pop(0)
            mod = modules.get(path.resolve()) if path in given_set else load(path)
            if mod is None or mod.tree is None or mod.local_imports:
                continue
            for f, alias in _local_imports(mod):
                rf = f.resolve()
                mod.local_imports.add(rf)
                if alias:
                    mod.project_aliases.add(alias)
                if rf not in modules:
                    queue.append(f)
    proj = _Project(list(modules.values()), explicit, launch, explicit)
    proj.files, proj.bytes = budget["files"], budget["bytes"]
    return proj


def scan_project(paths: Sequence, entries: Sequence = (), launch: Optional[str] = None,
                 limits: Optional[Limits] = None) -> ScanReport:
    """Scan a project program by program (see the module docstring).

    Args:
        paths: files or directories (``str`` or :class:`~pathlib.Path`); a directory means every
            ``*.py`` under it (hidden directories, ``__pycache__`` and environments skipped).
        entries: entry-point files (``--entry``); when given, only they and their imports are read.
        launch: a key of :data:`LAUNCHES` that every program is assumed to use (``--launch``),
            or None to decide per program.
        limits: the bounds (:class:`Limits`; default ``Limits()``).
    Returns:
        a :class:`ScanReport`.
    Raises:
        UsageError: a file cannot be read, an unknown ``launch``, or a limit passed (exit status 2).
    """
    from envtool.core.errors import UsageError

    if launch is not None and launch not in LAUNCHES:
        raise UsageError(f"--launch {launch}: expected one of {', '.join(LAUNCHES)}")
    limits = limits or Limits()
    with _no_gc():
        proj = _load_project([Path(p) for p in paths], [Path(e) for e in entries], launch, limits)
        programs = []
        issues = proj.run()
        for entry, mods in proj.programs:
            programs.append({"entry": entry.shown, "launch": proj.launches.get(entry.shown, ""),
                             "reason": proj.reasons.get(entry.shown, ""), "modules": [m.shown for m in mods]})
        seen: Set[Tuple[str, int, str]] = set()
        suppressed = []
        for i in proj.suppressed:
            if (i.path, i.line, i.rule) not in seen:
                seen.add((i.path, i.line, i.rule))
                suppressed.append(i)
        return ScanReport(issues[:limits.max_issues], max(0, len(issues) - limits.max_issues), suppressed,
                          programs, proj.files, proj.bytes)


def scan_paths(paths: Sequence, entries: Sequence = (), launch: Optional[str] = None) -> List[ScanIssue]:
    """Scan a project: the files and directories in ``paths`` and the local modules they import.

    Args:
        paths: files or directories (``str`` or :class:`~pathlib.Path`); a directory means every
            ``*.py`` under it (hidden directories, ``__pycache__`` and environments skipped).
        entries, launch: as for :func:`scan_project`.
    Returns:
        the issues (at most ``Limits().max_issues``), ordered by path and line; a file that does
        not parse gives one ``syntax`` issue and is otherwise skipped.
    Raises:
        UsageError: a file cannot be read, or a limit is passed (exit status 2).
    """
    return scan_project(paths, entries, launch).issues


def scan_source(text: str, path: str = "<string>", launch: Optional[str] = None) -> List[ScanIssue]:
    """Scan Python source ``text`` alone (reported as ``path``; its imports are not followed),
    as an entry point; ``launch`` as for :func:`scan_project`.

    Returns:
        the issues, by line; a file that does not parse gives one ``syntax`` issue.
    """
    with _no_gc():
        mod = _parse(text, path, Path(path))
        return _Project([mod], {Path(path)}, launch).run()


def scan_file(path) -> List[ScanIssue]:
    """Scan one file and the local modules it imports (see :func:`scan_paths`).

    Raises:
        UsageError: the file cannot be read (exit status 2).
    """
    return scan_paths([path])
