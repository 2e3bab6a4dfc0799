"""Run by every rank of a validation job with the environment's own interpreter; not imported by envtool.

    python rank_probe.py OUT_DIR PHASE [--method M] [--batch-size B] [--steps S]

PHASE ``probe``: Horovod initialises (whatever controller the launcher gives it: MPI under
srun/jsrun/mpiexec, Gloo under ``horovodrun --gloo``), an allreduce of ``rank + 1`` must average
to ``(size + 1) / 2`` on CPU tensors (and on the rank's GPU when CUDA is there), then a real
DataLoader with 2 workers runs under start method M (after MPI is up, where fork-unsafe stacks
break). PHASE ``bench-<N>``: a synthetic data-parallel training step (Horovod's synthetic
benchmark pattern: fixed random batch, DistributedOptimizer, warm-up, timed iterations) and the
samples/s of this rank.

Each rank writes ``OUT_DIR/PHASE/rank-<r>.json`` (host, rank, local rank, size, controller, each
check's outcome, or the error and its traceback) and exits 1 when a check failed. The rank is
known from the launcher's variables before Horovod starts, so a rank that cannot start Horovod
still reports.
"""
import json
import os
import socket
import sys
import time
import traceback
import warnings

RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID", "PMI_RANK", "JSM_NAMESPACE_RANK", "PALS_RANKID",
             "ALPS_APP_PE", "HOROVOD_RANK")
LOCAL_RANK_VARS = ("OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "JSM_NAMESPACE_LOCAL_RANK",
                   "PALS_LOCAL_RANKID", "HOROVOD_LOCAL_RANK")
#: timed repetitions of the 4-byte allreduce (``latency_us``)
LATENCY_REPS = 20


def _first(names):
    for n in names:
        v = os.environ.get(n)
        if v is not None and v.strip().isdigit():
            return int(v)
    return None


class Squares:
    """8 items, i*i each (the same dataset as envtool's DataLoader probe)."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        import torch

        return torch.tensor([i * i])


def dataloader_check(method):
    """Iterate a DataLoader with 2 workers under start ``method``; returns ok/method/seconds/error."""
    from torch.utils.data import DataLoader

    started = time.monotonic()
    loader = DataLoader(Squares(), batch_size=2, num_workers=2, multiprocessing_context=method)
    total = int(sum(int(b.sum()) for b in loader))
    ok = total == sum(i * i for i in range(8))
    return {"ok": ok, "method": method or "(default)", "seconds": round(time.monotonic() - started, 3),
            "error": None if ok else f"wrong total {total}"}


def allreduce_check(hvd, torch, device=None):
    """Average ``rank + 1`` over all ranks (on ``device``); must be ``(size + 1) / 2``. When it is,
    ``latency_us`` is the mean time of one such 4-byte (one float32) allreduce, in microseconds."""
    t = torch.tensor([float(hvd.rank() + 1)])
    if device is not None:
        t = t.to(device)
    got = float(hvd.allreduce(t, name=f"envtool.probe.{device or 'cpu'}")[0])
    expected = (hvd.size() + 1) / 2.0
    ok = abs(got - expected) < 1e-6
    out = {"ok": ok, "value": got, "expected": expected, "error": None if ok else f"got {got}, expected {expected}"}
    if ok:
        # latency of the same 4-byte allreduce: mean over LATENCY_REPS after one warm-up (each a
        # new name, so Horovod's response cache is not what is timed)
        hvd.allreduce(t, name=f"envtool.probe.{device or 'cpu'}.warm")
        started = time.perf_counter()
        for i in range(LATENCY_REPS):
            hvd.allreduce(t, name=f"envtool.probe.{device or 'cpu'}.lat{i}")
        if device is not None:
            torch.cuda.synchronize()
        out["latency_us"] = round((time.perf_counter() - started) / LATENCY_REPS * 1e6, 3)
    return out


def benchmark(hvd, torch, batch_size, steps):
    """Samples/s of this rank for a small CNN on a fixed random batch (3x32x32, 10 classes)."""
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(32 * 8 * 8, 10))
    device = None
    if torch.cuda.is_available():
        device = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
        model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    data = torch.randn(batch_size, 3, 32, 32)
    target = torch.randint(0, 10, (batch_size,))
    if device is not None:
        data, target = data.to(device), target.to(device)

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        opt.step()

    for _ in range(max(2, steps // 5)):  # warm-up
        step()
    if device is not None:
        torch.cuda.synchronize()
    started = time.monotonic()
    for _ in range(steps):
        step()
    if device is not None:
        torch.cuda.synchronize()
    seconds = time.monotonic() - started
    return {"ok": True, "batch_size": batch_size, "steps": steps, "seconds": round(seconds, 4),
            "samples_per_sec": batch_size * steps / seconds, "device": str(device or "cpu")}


def main(argv):
    """Run PHASE, write this rank's record, exit 1 when a check failed (see the module docstring)."""
    out_dir, phase = argv[1], argv[2]
    opts = {"--method": None, "--batch-size": "32", "--steps": "20"}
    rest = argv[3:]
    for i in range(0, len(rest) - 1, 2):
        if rest[i] in opts:
            opts[rest[i]] = rest[i + 1]
    method = opts["--method"] or os.environ.get("ENVTOOL_START_METHOD") or None
    rec = {"phase": phase, "host": socket.gethostname(), "pid": os.getpid(), "launcher_rank": _first(RANK_VARS),
           "launcher_local_rank": _first(LOCAL_RANK_VARS), "ok": False, "checks": {}}
    hvd = None
    try:
        # What importing the framework and Horovod prints is printed once per rank in every job:
        # record it (the filters decide what counts, as for a user) instead of printing it.
        with warnings.catch_warnings(record=True) as caught:
            import torch
            import horovod.torch as hvd
        rec["import_warnings"] = ["%s: %s" % (w.category.__name__, w.message) for w in caught]

        hvd.init()
        rec.update(rank=hvd.rank(), local_rank=hvd.local_rank(), size=hvd.size(),
                   controller="mpi" if hvd.mpi_enabled() else ("gloo" if hvd.gloo_enabled() else "?"))
        if phase.startswith("probe"):
            rec["checks"]["allreduce_cpu"] = allreduce_check(hvd, torch)
            if torch.cuda.is_available():
                dev = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
                torch.cuda.set_device(dev)
                rec["checks"]["allreduce_gpu"] = allreduce_check(hvd, torch, dev)
            rec["checks"]["dataloader"] = dataloader_check(method)
        else:
            rec["checks"]["benchmark"] = benchmark(hvd, torch, int(opts["--batch-size"]), int(opts["--steps"]))
        rec["ok"] = all(c.get("ok") for c in rec["checks"].values())
    except BaseException as exc:  # report anything, including SystemExit from a library
        rec["error"] = f"{type(exc).__name__}: {exc}".strip()
        rec["traceback"] = traceback.format_exc()[-4000:]
    # The launcher's rank names the file: two processes that both think they are Horovod's rank 0
    # (MPI not initialised through the launcher's PMI) must not overwrite each other.
    rank = rec["launcher_rank"] if rec["launcher_rank"] is not None else rec.get("rank")
    name = f"rank-{rank}.json" if rank is not None else f"pid-{os.getpid()}.json"
    d = os.path.join(out_dir, phase)
    os.makedirs(d, exist_ok=True)
    tmp = os.path.join(d, f".{name}.{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump(rec, f)
    os.replace(tmp, os.path.join(d, name))
    sys.stdout.flush()
    if not rec["ok"]:
        os._exit(1)  # do not wait in Horovod's shutdown for ranks that never came up
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
