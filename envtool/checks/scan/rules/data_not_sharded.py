"""Rule ``data-not-sharded``: every rank reads the whole dataset."""
from __future__ import annotations

import ast

from envtool.checks.scan.astutil import dotted, kwarg, last_name, rank_kind
from envtool.checks.scan.program import Program
from envtool.checks.scan.registry import rule
from envtool.checks.scan.rule import Rule
from envtool.checks.scan.rules._examples import ALCF_TUTORIAL, HOROVOD_USAGE, horovod_script

#: samplers that do not split data between ranks.
LOCAL_SAMPLERS = {"RandomSampler", "SequentialSampler", "SubsetRandomSampler", "WeightedRandomSampler"}
#: calls that shard data by rank (torch, tf.data, HF datasets, Petastorm, Horovod elastic, Accelerate).
SHARDERS = {"DistributedSampler", "ElasticSampler", "DistributedBatchSampler", "shard", "split_dataset_by_node",
            "prepare", "prepare_data_loader", "make_reader", "make_batch_reader", "experimental_distribute_dataset",
            "distribute_datasets_from_function"}
#: keywords that pass a shard of the data to a reader.
SHARD_KWARGS = {"num_replicas", "num_shards", "shard_count", "cur_shard", "shard_id", "shard_index",
                "training_data"}


@rule
class DataNotSharded(Rule):
    """The program's DataLoaders have no sampler (or only a single-process one) and nothing shards the data by rank
    (DistributedSampler, ``Dataset.shard``, a rank-indexed slice, a reader given the rank); or a Keras generator
    is seeded alike on every rank.

    Why it matters at scale: every rank reads the whole dataset, so an epoch processes it once per rank, N times
    the work for the same result (the DistributedSampler of Horovod's PyTorch example,
    https://horovod.readthedocs.io/en/v0.28.1/pytorch.html; ALCF tutorial step 7,
    https://github.com/argonne-lcf/sdl_ai_workshop).
    """

    id = "data-not-sharded"
    title = "every rank reads the whole dataset (no DistributedSampler or shard)"
    sources = (HOROVOD_USAGE, ALCF_TUTORIAL)
    mechanisms = ("a sampler on a DataLoader (DistributedSampler, ElasticSampler or a custom one; not "
                  "RandomSampler/SequentialSampler/SubsetRandomSampler/WeightedRandomSampler)",
                  "Dataset.shard(...), datasets.distributed.split_dataset_by_node, Petastorm "
                  "cur_shard/shard_count, num_shards/num_replicas keywords, Accelerate prepare()",
                  "a slice or index by rank (files[hvd.rank()::hvd.size()]); a data call given the rank",
                  "steps divided by hvd.size() (each rank draws its share of shuffled data)",
                  "Lightning (adds a DistributedSampler itself)")
    order = 110
    fires_on = (horovod_script(
        'hvd.init()',
        'train_loader = torch.utils.data.DataLoader(range(10), batch_size=2)',
        'return train_loader'),)
    quiet_on = (horovod_script(
        'hvd.init()',
        'ds = range(10)',
        'sampler = torch.utils.data.distributed.DistributedSampler(ds, num_replicas=hvd.size(), rank=hvd.rank())',
        'train_loader = torch.utils.data.DataLoader(ds, batch_size=2, sampler=sampler)',
        'return train_loader'),)

    def applies(self, prog: Program) -> bool:
        """Programs that run as ranks (Horovod with hvd.init(), or torch.distributed)."""
        return prog.ranks

    def check(self, prog: Program) -> None:
        """``data-not-sharded``: DataLoaders with no sampler and nothing sharding the data by rank."""
        if prog.lightning_hvd or any(last_name(c.node.func) == "Trainer" and c.module.lightning for c in prog.calls):
            return  # Lightning adds a DistributedSampler itself
        loaders = [c for c in prog.calls if last_name(c.node.func) == "DataLoader"]
        tfdata = [c for c in prog.calls if (dotted(c.node.func) or "").startswith(("tf.data.", "tensorflow.data."))
                  and last_name(c.node.func) in ("from_tensor_slices", "TFRecordDataset", "list_files",
                                             "from_generator", "TextLineDataset")]
        seeded = [c for c in prog.calls if last_name(c.node.func) in ("flow_from_directory", "flow_from_dataframe", "flow")
                  and kwarg(c.node, "seed") is not None and not rank_kind(kwarg(c.node, "seed") or ast.Constant(None))]
        # Keras fit(x, y) on arrays held whole in memory by every rank (a y: not a dataset or generator)
        arrays = [c for c in prog.calls if last_name(c.node.func) == "fit" and isinstance(c.node.func, ast.Attribute)
                  and (len(c.node.args) > 1 or kwarg(c.node, "y") is not None)] \
            if prog.launch == "horovod" and not loaders and not tfdata and not seeded else []
        if not loaders and not tfdata and not seeded and not arrays:
            return
        for c in loaders:
            sampler = kwarg(c.node, "sampler") or kwarg(c.node, "batch_sampler")
            if sampler is None and len(c.node.args) > 3:
                sampler = c.node.args[3]
            for k in c.node.keywords:
                if k.arg is None and isinstance(k.value, ast.Name):
                    got = prog.dict_values(c, k.value.id)
                    if got is not None and (any(key in ("sampler", "batch_sampler") for key, _, _ in got[1]) or any(
                            prog.dict_get(lit, "sampler")[1] is not None for lit in got[0])):
                        return
            if sampler is None or isinstance(sampler, ast.Constant) and sampler.value is None:
                continue
            if isinstance(sampler, ast.Call) and last_name(sampler.func) in LOCAL_SAMPLERS:
                continue
            if isinstance(sampler, ast.IfExp) and any(isinstance(x, ast.Constant) and x.value is None
                                                      for x in (sampler.body, sampler.orelse)):
                pass  # sampler=DistributedSampler(...) if distributed else None: still a sampler
            return
        for c in prog.calls:
            last = last_name(c.node.func)
            if last in SHARDERS or any(k.arg in SHARD_KWARGS for k in c.node.keywords):
                return
            low = last.lower()
            if (any(w in low for w in ("data", "loader", "sampl", "read", "shard", "split", "file", "record",
                                       "pipeline", "input", "iter", "batch", "partition", "chunk", "subset",
                                       "select")) or low == "use") and \
                    not any(w in low for w in ("device", "seed", "epoch", "log", "print")) and \
                    any(rank_kind(a) for a in list(c.node.args) + [k.value for k in c.node.keywords]):
                return
        for c in prog.calls:  # a project Dataset/Sampler class that asks for the rank shards by itself
            if c.func is not None and c.func.cls and any(w in c.func.cls.lower() for w in (
                    "data", "loader", "sampler", "reader", "stream", "shard")) and \
                    last_name(c.node.func) in ("rank", "get_rank", "local_rank", "size", "get_world_size",
                                           "get_worker_info"):
                return
        for m in prog.modules:
            if m.rank_slices:
                return
        fits = [c for c in prog.calls if last_name(c.node.func) in ("fit", "fit_generator")]
        for c in (fits or seeded[:1]) if seeded else ():
            g = seeded[0]  # the same seed on every rank: identical batches, whatever the step count
            prog.add(c.module, c.node.lineno, "data-not-sharded",
                     f"trains on {last_name(g.node.func)}(seed="
                     f"{ast.unparse(kwarg(g.node, 'seed') or ast.Constant(None))}) ({g.module.shown}:{g.node.lineno}), which draws the same "
                     "shuffled batches on every rank (one seed everywhere, nothing shards the data): N ranks train "
                     "on identical data (ALCF tutorial step 7)",
                     "seed with the rank (seed=base_seed + hvd.rank()) or shard the file list by rank")
        if seeded and not loaders and not tfdata:
            return
        for m in prog.modules:
            if m.size_divs:
                return
        first = prog.first([x for x in loaders + tfdata if "train" in ast.unparse(x.node).lower()] or loaders + tfdata)
        if first is None and arrays:
            c = prog.first(arrays) or arrays[0]
            prog.add(c.module, c.node.lineno, "data-not-sharded",
                     f"{ast.unparse(c.node.func)}({', '.join(ast.unparse(a) for a in c.node.args[:2])}, ...) trains on "
                     "arrays every rank holds whole, and nothing shards them or divides the steps by hvd.size(): "
                     "each epoch processes the dataset once per rank (ALCF tutorial step 7)" + prog.assumed(),
                     "shard the arrays by rank (x[hvd.rank()::hvd.size()], y[hvd.rank()::hvd.size()]) or pass "
                     "steps_per_epoch=len(x) // (batch_size * hvd.size())", "info")
            return
        if first is None:
            return
        c = first
        fix = ("sampler = torch.utils.data.distributed.DistributedSampler(dataset, num_replicas=hvd.size(), "
               "rank=hvd.rank()); DataLoader(dataset, sampler=sampler, ...) and sampler.set_epoch(epoch) each epoch"
               if loaders else "dataset = dataset.shard(hvd.size(), hvd.rank())")
        if prog.launch == "torchrun":
            fix = fix.replace("num_replicas=hvd.size(), rank=hvd.rank()", "")
        prog.add(c.module, c.node.lineno, "data-not-sharded",
                 "no loader of the program has a sampler and nothing shards the data by rank "
                 "(DistributedSampler, Dataset.shard, a rank-indexed slice): every rank reads the whole dataset, "
                 "so each epoch processes it once per rank (the DistributedSampler of Horovod's PyTorch example, "
                 "horovod.readthedocs.io/en/v0.28.1/pytorch.html; ALCF tutorial step 7)" + prog.assumed(), fix)
