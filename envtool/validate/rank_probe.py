"""Run by every rank of a validation job with the environment's own interpreter; not imported by envtool.

    python rank_probe.py OUT_DIR PHASE [--framework F] [--method M] [--batch-size B] [--steps S]
                         [--import-trace yes] [--controller C] [--backend B] [--sweep MAX]

``--framework pytorch`` (the default) checks ``horovod.torch``; ``--framework tensorflow`` checks
``horovod.tensorflow`` and ``horovod.tensorflow.keras`` with the helpers of ``tf_checks.py``
(copied beside this file): the allreduce, a Keras ``model.fit`` whose weights must agree on every
rank, the sweep, and in a ``bench`` phase a synthetic Keras step; each rank sees one GPU (its
local rank's) where there are GPUs. The DataLoader check is PyTorch's.

PHASE ``probe``: Horovod initialises (whatever controller the launcher gives it: MPI under
srun/jsrun/mpiexec, Gloo under ``horovodrun --gloo``), an allreduce of ``rank + 1`` must average
to ``(size + 1) / 2`` on CPU tensors (and on the rank's GPU when CUDA is there), then a real
DataLoader with 2 workers runs under start method M (after MPI is up, where fork-unsafe stacks
break). PHASE ``bench-<N>``: a synthetic data-parallel training step (Horovod's synthetic
benchmark pattern: fixed random batch, DistributedOptimizer, warm-up, timed iterations) and the
samples/s of this rank.

Every phase times this rank's first import of the framework and Horovod's binding (``torch`` and
``horovod.torch``, or ``tensorflow``, ``horovod.tensorflow`` and ``horovod.tensorflow.keras``; record field
``import``: seconds of each and their total, the prefix, and the file system type it is on). With
``--import-trace yes`` the rank then runs one more interpreter under ``strace`` that imports the
same modules, and counts the file system metadata calls it made under the prefix
(:func:`count_metadata_calls`); the traced import is not the timed one (``strace`` slows every
system call), and it runs before Horovod starts (no fork after ``MPI_Init``).

Each rank writes ``OUT_DIR/PHASE/rank-<r>.json`` (host, rank, local rank, size, controller, each
check's outcome, or the error and its traceback) and exits 1 when a check failed. The rank is
known from the launcher's variables before Horovod starts, so a rank that cannot start Horovod
still reports.

``--controller gloo``: Horovod's Gloo controller under a launcher that does not set it up
(``srun --mpi=none``): the rank takes its slot from ``ENVTOOL_GLOO_PLAN`` (the host plan
``rendezvous.py`` gave Horovod's rendezvous server) by its launcher rank, checks the launcher put
it on that node, and sets ``HOROVOD_RANK``/``SIZE``/``LOCAL_*``/``CROSS_*``/``HOSTNAME`` and
``HOROVOD_GLOO_IFACE`` (the site's, or the interface that routes to the rendezvous address).
``--controller torch``: ``torch.distributed`` through the c10d TCPStore ``rendezvous.py`` serves
(``ENVTOOL_TORCH_STORE``), with ``--backend B`` (``auto``: NCCL where the rank sees a GPU and torch
has NCCL, else gloo; ``nccl``, ``gloo``, ``mpi``: that one, or a failed ``backend`` check naming
what this torch lacks); ``GLOO_SOCKET_IFNAME`` (or ``NCCL_SOCKET_IFNAME``) chosen the same way.
Under NCCL the allreduce and the sweep run on the rank's GPU (``allreduce_gpu``; the sweep stays
under ``sweep`` with ``device: cuda``).

``--sweep MAX``: after the checks, an allreduce (sum) of float32 tensors of every power of two
from 8 bytes to MAX bytes, each element a small integer that depends on rank and position, so
the sum is exact in float32 and checked bit-exact; the mean seconds per allreduce of each size.
"""
import ast
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import struct
import sys
import tempfile
import threading
import time
import traceback
import warnings
from typing import Dict, Optional, Tuple

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


def iface_of(addr):
    """The name of the interface that holds IPv4 address ``addr``, or None (SIOCGIFADDR, netdevice(7))."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _, name in socket.if_nameindex():
            try:
                got = fcntl.ioctl(probe.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))
            except OSError:
                continue
            if socket.inet_ntoa(got[20:24]) == addr:
                return name
    finally:
        probe.close()
    return None


def route_iface(peer):
    """``(interface, local address)`` this host would use to reach ``peer`` (a connected UDP
    socket sends nothing; the kernel picks the route), or ``(None, None)``."""
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.connect((socket.gethostbyname(peer), 9))
            local = s.getsockname()[0]
        finally:
            s.close()
    except OSError:
        return None, None
    return iface_of(local), local


def choose_iface(var, peer, export=True):
    """The interface a controller uses: ``$var`` when the site or the job sets it, else the one
    that routes to ``peer``; returns ``(name, how it was chosen)`` and exports ``var`` (when
    ``export``: before the controller starts)."""
    if os.environ.get(var):
        return os.environ[var], f"{var} from the job's environment"
    name, _ = route_iface(peer) if peer else (None, None)
    if name:
        if export:
            os.environ[var] = name
        return name, f"route to {peer}"
    return None, "unknown"


def gloo_slot(rec):
    """Set Horovod's Gloo variables for this rank from ``ENVTOOL_GLOO_PLAN`` (see the module docstring)."""
    plan = json.loads(os.environ["ENVTOOL_GLOO_PLAN"])
    rank = rec["launcher_rank"]
    if rank is None or not 0 <= rank < len(plan):
        raise RuntimeError(f"launcher rank {rank} is not in the rendezvous plan of {len(plan)} ranks")
    slot = plan[rank]
    node_id = os.environ.get("SLURM_NODEID")
    if node_id is not None and int(node_id) != slot["cross_rank"]:
        raise RuntimeError(f"the launcher put rank {rank} on node index {node_id} ({rec['host']}), the rendezvous "
                           f"plan on {slot['hostname']} (index {slot['cross_rank']})")
    os.environ.update(HOROVOD_RANK=str(rank), HOROVOD_SIZE=str(len(plan)), HOROVOD_LOCAL_RANK=str(slot["local_rank"]),
                      HOROVOD_LOCAL_SIZE=str(slot["local_size"]), HOROVOD_CROSS_RANK=str(slot["cross_rank"]),
                      HOROVOD_CROSS_SIZE=str(slot["cross_size"]), HOROVOD_HOSTNAME=slot["hostname"],
                      HOROVOD_CONTROLLER="gloo", HOROVOD_CPU_OPERATIONS="gloo")
    rec["iface"], rec["iface_source"] = choose_iface("HOROVOD_GLOO_IFACE",
                                                     os.environ.get("HOROVOD_GLOO_RENDEZVOUS_ADDR"))


def pattern(ops, rank, count):
    """float32 ``count`` elements: ``(rank % 7 + 1) * (i % 251 + 1)``; summed over n ranks at most
    7 * 251 * n, exact in float32 (24-bit significand) for n up to 9000 ranks. ``ops``: a
    :class:`TorchOps` or ``tf_checks.NumpyOps``."""
    i = ops.arange(count)
    return ops.float32((rank % 7 + 1) * (i % 251 + 1))


def expected_sum(ops, size, count):
    """The exact sum of :func:`pattern` over ``size`` ranks."""
    i = ops.arange(count)
    return ops.float32(sum(r % 7 + 1 for r in range(size)) * (i % 251 + 1))


class TorchOps(object):
    """The array operations :func:`sweep` needs, with torch tensors on ``device`` (None: the CPU)."""

    def __init__(self, torch, device=None):
        self.torch, self.device = torch, device

    def arange(self, count):
        """``0 … count-1`` as int64."""
        return self.torch.arange(count, dtype=self.torch.int64)

    def float32(self, a):
        """``a`` as float32, on the device."""
        a = a.to(self.torch.float32)
        return a.to(self.device) if self.device is not None else a

    def equal(self, a, b):
        """Bit-exact equality (bool)."""
        return bool(self.torch.equal(a, b))

    def wrong(self, a, b):
        """How many elements differ (int)."""
        return int((a != b).sum())

    def scalar(self, value):
        """A 1-element float32 tensor on the CPU."""
        return self.torch.tensor([value])

    def first(self, a):
        """The first element as float."""
        return float(a[0])

    def sync(self):
        """Wait for the device's queued work (nothing on the CPU)."""
        if self.device is not None:
            self.torch.cuda.synchronize(self.device)


#: Seconds of timed allreduces per size of the sweep (after the verified one and one to measure).
SECONDS_PER_SIZE = 0.25
#: Most timed allreduces per size.
MAX_ITERATIONS = 20


def sweep(ops, allreduce, barrier, rank, size, max_bytes):
    """Allreduce every power-of-two size from 8 B to ``max_bytes``.

    Per size: one allreduce checked bit-exact against :func:`expected_sum`; one timed allreduce
    whose mean time over the ranks (whole microseconds, summed exactly, so every rank computes
    the same count) sets how many more fit in :data:`SECONDS_PER_SIZE` (1 to
    :data:`MAX_ITERATIONS`); those are timed together. The run time is bounded whatever the speed.
    ``ops``: the framework's array operations (:class:`TorchOps`, ``tf_checks.NumpyOps``);
    ``allreduce(tensor, name)`` returns the sum; ``barrier()`` syncs the ranks.
    """
    out = []
    nbytes = 8
    while nbytes <= max_bytes:
        count = nbytes // 4
        src = pattern(ops, rank, count)
        want = expected_sum(ops, size, count)
        got = allreduce(src, f"envtool.sweep.{nbytes}.check")
        exact = ops.equal(got, want)
        bad = None if exact else ops.wrong(got, want)
        barrier()
        started = time.perf_counter()
        allreduce(src, f"envtool.sweep.{nbytes}.probe")
        ops.sync()
        one_us = float(max(1, round((time.perf_counter() - started) * 1e6)))
        mean_us = ops.first(allreduce(ops.scalar(one_us), f"envtool.sweep.{nbytes}.time")) / size
        iters = int(max(1, min(MAX_ITERATIONS, SECONDS_PER_SIZE * 1e6 // mean_us)))
        barrier()
        started = time.perf_counter()
        for k in range(iters):
            allreduce(src, f"envtool.sweep.{nbytes}.{k}")
        ops.sync()
        seconds = (time.perf_counter() - started) / iters
        out.append({"bytes": nbytes, "iterations": iters, "seconds": seconds, "exact": exact,
                    "wrong_elements": bad})
        nbytes *= 2
    return {"ok": all(s["exact"] for s in out), "sizes": out,
            "error": None if all(s["exact"] for s in out) else
            "results not bit-exact at " + ", ".join(str(s["bytes"]) + " B" for s in out if not s["exact"])}


#: seconds the DataLoader check waits for one batch from its workers (DataLoader's ``timeout``,
#: https://pytorch.org/docs/stable/data.html#torch.utils.data.DataLoader) before it reports them
#: stuck: the first batch includes starting a worker and its ``import torch``, which a loaded
#: node's shared file system can stretch to minutes
DATALOADER_TIMEOUT_S = 300


def dataloader_check(method, timeout=DATALOADER_TIMEOUT_S):
    """Iterate a DataLoader with one worker under start ``method``; returns ok/method/seconds/error.

    One worker, as ``envtool/probes/dataloader.py`` (its ``WORKERS`` says why): the method starts
    it, and it sends every batch; a second would only repeat its start on every rank.

    A batch that does not come within ``timeout`` seconds fails the check (naming the method and the
    wait) instead of hanging the rank until the job's limit."""
    from torch.utils.data import DataLoader

    started = time.monotonic()
    loader = DataLoader(Squares(), batch_size=2, num_workers=1, multiprocessing_context=method, timeout=timeout)
    try:
        total = int(sum(int(b.sum()) for b in loader))
    except RuntimeError as exc:
        if "timed out" not in str(exc):
            raise
        return {"ok": False, "method": method or "(default)", "seconds": round(time.monotonic() - started, 3),
                "error": f"the DataLoader's workers (start method {method or 'the default'}) sent no batch "
                         f"within {timeout} s: {exc}"}
    ok = total == sum(i * i for i in range(8))
    return {"ok": ok, "method": method or "(default)", "seconds": round(time.monotonic() - started, 3),
            "error": None if ok else f"wrong total {total}"}


# System calls strace's ``%file`` class traces (those that take a file name), plus getdents64,
# which reads a directory (Python's import system lists every directory on sys.path it searches).
# strace(1), "-e trace=%file": https://man7.org/linux/man-pages/man1/strace.1.html
TRACE_SET = "%file,getdents64"
# In %file but not a lookup of a file name: getcwd writes the current directory into a buffer.
NOT_LOOKUPS = frozenset({"getcwd"})

_LINE = re.compile(r"^(?:\[pid\s+)?(?P<pid>\d+)?\]?\s*(?:(?P<name>\w+)\((?P<args>.*)"
                   r"|<\.\.\. (?P<rname>\w+) resumed>(?P<rest>.*))$")
_PATH_ARGS = re.compile(r'^(?:(?P<dirfd>AT_FDCWD|-?\d+)(?:<(?P<dirpath>.*?)>)?,\s*)?'
                        r'"(?P<path>(?:[^"\\]|\\.)*)"')
_FD_ARG = re.compile(r"^(?P<fd>\d+)<(?P<fdpath>.*?)>")
_RESULT = re.compile(r"\)\s*=\s*(?P<ret>-?\d+|\?)(?:<.*?>)?(?:\s+(?P<errno>E[A-Z0-9]+)(?:\s.*)?)?$")


def _unescape(text):
    """A string as strace prints it (C escapes, octal bytes) back to the file name it stands for."""
    try:
        return os.fsdecode(ast.literal_eval('b"' + text + '"'))
    except (ValueError, SyntaxError):
        return text


def _under(path, roots):
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def count_metadata_calls(lines, prefix):
    """Count the file system metadata calls under ``prefix`` in strace output.

    ``lines`` is what ``strace -f -qq -y -e trace=%file,getdents64 -o FILE`` wrote (one call a
    line, each starting with the pid; a call interrupted by another thread is split into an
    ``<unfinished ...>`` line, which carries the arguments, and a ``<... NAME resumed>`` line,
    which carries the result). A call counts when the file name it looks up (made absolute
    against the directory descriptor that ``-y`` prints), or the directory that a getdents64
    reads, is ``prefix`` or below it; names are compared as
    written (``prefix`` given both as written and resolved counts both). Calls that failed
    (``ENOENT`` of a search along sys.path, the dominant cost on a parallel file system) count
    too and are also counted apart. A stat of an open descriptor (``newfstatat(fd, "",
    AT_EMPTY_PATH)``, glibc's fstat) looks up no name and is counted apart as ``fd_stat``. A
    relative name with no directory that ``-y`` can print (``readlink("x")``: the process's
    current directory, which strace does not show and a process can change) cannot be placed
    and is counted apart as ``unplaced`` (the import system looks up absolute names).

    Args:
        lines: iterable of str (the trace file's lines).
        prefix: str, or a list of str (several spellings of the same directory).
    Returns:
        ``{"calls": int, "failed": int, "fd_stat": int, "unplaced": int, "by_syscall": {name: int}}``.
    Source of the line format: strace(1), options -f, -y, -o
    (https://man7.org/linux/man-pages/man1/strace.1.html).
    """
    roots = [os.path.normpath(p) for p in ([prefix] if isinstance(prefix, str) else prefix)]
    calls = failed = fd_stat = unplaced = 0
    by_syscall: Dict[str, int] = {}
    pending: Dict[str, bool] = {}  # pid -> counted call waiting for its result
    for raw in lines:
        line = raw.rstrip("\n")
        m = _LINE.match(line)
        if not m:
            continue
        pid = m.group("pid")
        if m.group("rname"):
            if pending.pop(pid, None):
                r = _RESULT.search(m.group("rest"))
                if r and r.group("ret") == "-1":
                    failed += 1
            continue
        name, args = m.group("name"), m.group("args")
        if name in NOT_LOOKUPS:
            continue
        path = None
        if name.startswith("getdents"):
            f = _FD_ARG.match(args)
            path = _unescape(f.group("fdpath")) if f else None
        else:
            a = _PATH_ARGS.match(args)
            if a:
                path = _unescape(a.group("path"))
                base = a.group("dirpath")
                if path == "" and base is not None:
                    if _under(os.path.normpath(_unescape(base)), roots):
                        fd_stat += 1
                    continue
                if not path.startswith("/"):
                    if base is None:
                        unplaced += 1
                        continue
                    path = os.path.join(_unescape(base), path)
        if path is None or not _under(os.path.normpath(path), roots):
            continue
        calls += 1
        by_syscall[name] = by_syscall.get(name, 0) + 1
        if line.endswith("<unfinished ...>"):
            pending[pid] = True
            continue
        r = _RESULT.search(args)
        if r and r.group("ret") == "-1":
            failed += 1
    return {"calls": calls, "failed": failed, "fd_stat": fd_stat, "unplaced": unplaced, "by_syscall": by_syscall}


def mount_of(path, mountinfo_lines):
    """The mount point and file system type holding ``path`` (the longest mount point above it).

    Args:
        path: an absolute path (resolved by the caller).
        mountinfo_lines: the lines of ``/proc/self/mountinfo`` (proc(5): field 5 is the mount
            point with spaces as ``\\040``, the type follows the ``-`` separator;
            https://man7.org/linux/man-pages/man5/proc_pid_mountinfo.5.html).
    Returns:
        ``(mount_point, fs_type)``, or ``(None, None)`` when no line parses.
    """
    best: Tuple[Optional[str], Optional[str]] = (None, None)
    for line in mountinfo_lines:
        parts = line.split()
        if len(parts) < 7 or "-" not in parts[6:]:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda g: chr(int(g.group(1), 8)), parts[4])
        fstype = parts[parts.index("-", 6) + 1] if len(parts) > parts.index("-", 6) + 1 else None
        if _under(path, [point]) and (best[0] is None or len(point) >= len(best[0])):
            best = (point, fstype)
    return best


def trace_import(modules, prefixes, timeout=600):
    """Import ``modules`` in a new interpreter (this one) under strace and count its metadata
    calls under ``prefixes`` (:func:`count_metadata_calls`); the trace is written to node-local
    ``$TMPDIR`` and removed. Returns the counts plus ``seconds`` (traced, slower than untraced),
    or ``{"error": why}`` (no strace on this node, ptrace not permitted, the import failed)."""
    strace = shutil.which("strace") or next((p for p in ("/usr/bin/strace", "/bin/strace")
                                             if os.access(p, os.X_OK)), None)
    if strace is None:
        return {"error": "strace not found on %s (Debian/Ubuntu: apt-get install strace)" % socket.gethostname()}
    fd, out = tempfile.mkstemp(prefix="envtool-import-trace-", suffix=".txt")
    os.close(fd)
    proc = None

    def _terminated(signum, frame):
        raise KeyboardInterrupt("signal %d" % signum)

    # SIGTERM (scancel, a cancelled validation) must not leave strace, its child or the trace file
    old_term = signal.signal(signal.SIGTERM, _terminated) if _main_thread() else None
    try:
        started = time.monotonic()
        code = "import " + ", ".join(modules)
        try:
            # its own session: on a timeout or a signal the whole group (strace and the traced
            # interpreter) is killed; run from this file's directory, as the timed rank's sys.path[0]
            proc = subprocess.Popen([strace, "-f", "-qq", "-y", "-e", "trace=" + TRACE_SET, "-e", "signal=none",
                                     "-o", out, sys.executable, "-c", code], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, start_new_session=True,
                                    cwd=os.path.dirname(os.path.abspath(__file__)))
            _, err_bytes = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": "the traced import did not finish within %d s" % timeout}
        except OSError as exc:
            return {"error": "cannot run %s on %s: %s" % (strace, socket.gethostname(), exc)}
        seconds = time.monotonic() - started
        if proc.returncode != 0:
            err = err_bytes.decode(errors="replace").strip().splitlines()
            return {"error": "strace %s exited %d: %s" % (code, proc.returncode, (err or ["?"])[-1][:300])}
        with open(out, errors="replace") as f:
            counts = count_metadata_calls(f, prefixes)
        counts["traced_seconds"] = round(seconds, 3)
        return counts
    finally:
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.wait()
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
        os.unlink(out)


def _main_thread():
    """True in the main thread (where signal handlers can be set)."""
    import threading

    return threading.current_thread() is threading.main_thread()


#: What a rank of each framework imports (``--framework``), framework first, then Horovod's binding.
FRAMEWORK_MODULES = {"pytorch": ("torch", "horovod.torch"),
                     "tensorflow": ("tensorflow", "horovod.tensorflow", "horovod.tensorflow.keras")}


def time_imports(modules=("torch", "horovod.torch")):
    """Import ``modules`` in order, in this process; seconds of each (wall clock, keyed by module
    name, and ``total``), the modules, and the prefix (``sys.prefix``) with its mount point and
    file system type."""
    import importlib

    started = time.monotonic()
    seconds = {}
    for name in modules:
        t0 = time.monotonic()
        importlib.import_module(name)
        seconds[name] = round(time.monotonic() - t0, 4)
    seconds["total"] = round(time.monotonic() - started, 4)
    prefix = sys.prefix
    try:
        with open("/proc/self/mountinfo") as f:
            point, fstype = mount_of(os.path.realpath(prefix), f.readlines())
    except OSError:
        point, fstype = None, None
    return {"seconds": seconds, "modules": list(modules), "prefix": prefix, "mount": point, "fs_type": fstype}


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


def _say(phase, what):
    """One progress line (srun labels it with the task number): a hang names the last one."""
    print("envtool-probe %s on %s: %s" % (phase, socket.gethostname(), what), flush=True)


class BackendUnavailable(RuntimeError):
    """The torch.distributed backend asked for cannot run on this rank (the message says why)."""


def choose_backend(torch, dist, want):
    """The torch.distributed backend of this rank and why: ``(backend, reason)``.

    ``want`` ``auto`` (or empty): NCCL when this rank sees a GPU and torch has NCCL, else gloo.
    ``nccl``, ``gloo``, ``mpi``: that one, when this torch has it (``dist.is_<name>_available()``)
    and, for NCCL, a GPU is visible; else :class:`BackendUnavailable` naming what is missing
    (PyTorch's own wheels have no MPI backend: https://pytorch.org/docs/stable/distributed.html,
    "MPI ... only included if you build PyTorch from source on a host that has MPI installed").
    """
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    nccl = bool(dist.is_nccl_available())
    if want in ("", "auto"):
        if gpus and nccl:
            return "nccl", "auto: this rank sees %d GPU(s) and torch has NCCL" % gpus
        return "gloo", "auto: " + ("torch has no NCCL" if gpus else "no GPU on this rank")
    if want == "nccl":
        if not nccl:
            raise BackendUnavailable("torch.distributed has no NCCL backend in this build "
                                     "(torch.distributed.is_nccl_available() is False: a CPU build of torch?)")
        if not gpus:
            raise BackendUnavailable("the NCCL backend needs a GPU on each rank; this rank sees none "
                                     "(torch.cuda.is_available() is False, CUDA_VISIBLE_DEVICES=%r)"
                                     % os.environ.get("CUDA_VISIBLE_DEVICES"))
        return "nccl", "asked for; this rank sees %d GPU(s)" % gpus
    if want == "mpi":
        if not dist.is_mpi_available():
            raise BackendUnavailable("torch.distributed has no MPI backend in this build "
                                     "(torch.distributed.is_mpi_available() is False): PyTorch's wheels are built "
                                     "without MPI; build torch from source against the site's MPI, or use nccl or gloo")
        return "mpi", "asked for"
    if want == "gloo":
        if not dist.is_gloo_available():
            raise BackendUnavailable("torch.distributed has no gloo backend in this build "
                                     "(torch.distributed.is_gloo_available() is False)")
        return "gloo", "asked for"
    raise BackendUnavailable("unknown torch.distributed backend %r (auto, nccl, gloo or mpi)" % want)


def torch_probe(rec, method, sweep_max, want_backend=""):
    """``torch.distributed`` through the job's c10d store (the MPI backend: MPI's own ranks): the
    backend :func:`choose_backend` picks, the allreduce check (on the rank's GPU under NCCL), the
    DataLoader, and the sweep (see the module docstring)."""
    import datetime

    with warnings.catch_warnings(record=True) as caught:
        import torch
        import torch.distributed as dist
    rec["import_warnings"] = ["%s: %s" % (w.category.__name__, w.message) for w in caught]
    try:
        backend, why = choose_backend(torch, dist, want_backend)
    except BackendUnavailable as exc:
        rec.update(controller="torch", backend=want_backend or "?", error=str(exc))
        rec["checks"]["backend"] = {"ok": False, "error": str(exc)}
        return
    rec.update(backend_wanted=want_backend or "auto", backend_reason=why)
    timeout = datetime.timedelta(seconds=float(os.environ.get("ENVTOOL_RENDEZVOUS_TIMEOUT", "300")))
    if backend == "mpi":
        dist.init_process_group("mpi", timeout=timeout)
        rank, size = dist.get_rank(), dist.get_world_size()
    elif "ENVTOOL_TORCH_STORE" not in os.environ and os.environ.get("MASTER_ADDR"):
        # torchrun, or srun with RANK/WORLD_SIZE/MASTER_ADDR exported: env:// as a DDP script does
        addr = os.environ["MASTER_ADDR"]
        rec["iface"], rec["iface_source"] = choose_iface("GLOO_SOCKET_IFNAME" if backend == "gloo"
                                                         else "NCCL_SOCKET_IFNAME", addr)
        rec["init_method"] = "env://"
        dist.init_process_group(backend, init_method="env://", timeout=timeout)
        rank, size = dist.get_rank(), dist.get_world_size()
    else:
        addr, port = os.environ["ENVTOOL_TORCH_STORE"].rsplit(":", 1)
        rank, size = rec["launcher_rank"], int(os.environ.get("SLURM_NTASKS") or os.environ["ENVTOOL_TORCH_SIZE"])
        if backend == "gloo":
            rec["iface"], rec["iface_source"] = choose_iface("GLOO_SOCKET_IFNAME", addr)
        else:
            rec["iface"], rec["iface_source"] = choose_iface("NCCL_SOCKET_IFNAME", addr)
        store = dist.TCPStore(addr, int(port), size, False, timeout)
        dist.init_process_group(backend, store=store, rank=rank, world_size=size, timeout=timeout)
    rec.update(rank=dist.get_rank(), size=dist.get_world_size(), local_rank=rec["launcher_local_rank"],
               controller="torch", backend=dist.get_backend())
    dev = None
    if backend == "nccl":
        dev = torch.device("cuda", (rec["launcher_local_rank"] or 0) % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        try:
            rec["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # noqa: BLE001 - an old torch's nccl.version() is an int
            pass

    def allreduce(t, name):
        # all_reduce works in place; the copy is timed with it. NCCL takes GPU tensors only, and the
        # sweep's timing scalar is made on the CPU (TorchOps.scalar, for Horovod): move it
        out = t.to(dev, copy=True) if dev is not None else t.clone()
        dist.all_reduce(out)
        if dev is not None:
            torch.cuda.synchronize()  # NCCL's all_reduce is queued on the GPU: time it to completion
        return out

    try:
        one = torch.tensor([float(rank + 1)])
        got = allreduce(one.to(dev) if dev is not None else one, "check")
        expected = (size + 1) * size / 2.0
        ok = float(got[0]) == expected
        key = "allreduce_gpu" if dev is not None else "allreduce_cpu"
        rec["checks"][key] = {"ok": ok, "value": float(got[0]) / size, "expected": (size + 1) / 2.0,
                              "error": None if ok else f"sum {float(got[0])}, expected {expected}"}
        rec["checks"]["dataloader"] = dataloader_check(method)
        if sweep_max:
            # under "sweep" whatever the device: the check (torch-nccl) says which backend it is
            rec["checks"]["sweep"] = sweep(TorchOps(torch, dev), allreduce, dist.barrier, rank, size, sweep_max)
            rec["checks"]["sweep"]["device"] = "cuda" if dev is not None else "cpu"
    finally:
        dist.destroy_process_group()


def _hvd_sweep(hvd, ops, make, sweep_max):
    """The sweep through Horovod (sum), with ``make(array) -> tensor`` for the framework's tensors."""

    def allreduce(t, name):
        return hvd.allreduce(make(t), name=name, op=hvd.Sum)

    def barrier():
        hvd.allreduce(make(ops.scalar(0.0)), name="envtool.sweep.barrier")

    return sweep(ops, allreduce, barrier, hvd.rank(), hvd.size(), sweep_max)


def torch_checks(rec, hvd, phase, method, sweep_max):
    """``horovod.torch``: the allreduce on the CPU (and the rank's GPU), the DataLoader under
    ``method``, the sweep (see the module docstring)."""
    import torch

    _say(phase, "allreduce on the CPU")
    rec["checks"]["allreduce_cpu"] = allreduce_check(hvd, torch)
    dev = None
    if torch.cuda.is_available():
        dev = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        rec["checks"]["allreduce_gpu"] = allreduce_check(hvd, torch, dev)
    _say(phase, "DataLoader")
    rec["checks"]["dataloader"] = dataloader_check(method)
    if sweep_max:
        _say(phase, "allreduce sweep")
        rec["checks"]["sweep"] = _hvd_sweep(hvd, TorchOps(torch), lambda t: t, sweep_max)
        if dev is not None:
            rec["checks"]["sweep_gpu"] = _hvd_sweep(hvd, TorchOps(torch, dev), lambda t: t, sweep_max)
            rec["checks"]["sweep_gpu"]["nccl"] = bool(hvd.nccl_built())


def tensorflow_checks(rec, hvd, phase, opts, sweep_max):
    """``horovod.tensorflow`` and ``horovod.tensorflow.keras`` (``tf_checks.py`` beside this file):
    in a ``probe`` phase the allreduce on the CPU, a 2-epoch ``model.fit`` whose weights must agree
    on every rank, the sweep; in a ``bench`` phase the synthetic Keras step. The PyTorch
    DataLoader check does not apply (``dataloader`` is not in the record)."""
    import numpy as np
    import tensorflow as tf
    import tf_checks

    hvdk = sys.modules["horovod.tensorflow.keras"]
    rec["gpu"] = tf_checks.pin_gpu(tf, hvd.local_rank())
    if not phase.startswith("probe"):
        rec["checks"]["benchmark"] = tf_checks.keras_benchmark(hvdk, tf, int(opts["--batch-size"]),
                                                               int(opts["--steps"]))
        return
    _say(phase, "allreduce on the CPU (horovod.tensorflow)")
    rec["checks"]["allreduce_cpu"] = tf_checks.allreduce_check(hvd, tf)
    _say(phase, "Keras model.fit (horovod.tensorflow.keras)")
    if int(tf.__version__.split(".")[0]) >= 2:
        rec["checks"]["keras_fit"] = tf_checks.keras_fit_check(hvdk, tf, np)
    else:  # tf.keras's fit under TensorFlow 1.x eager execution is not what Horovod's Keras binding supports
        rec["skipped"] = {"keras_fit": "the Keras check needs TensorFlow 2 (this is %s)" % tf.__version__}
    if sweep_max:
        _say(phase, "allreduce sweep")
        rec["checks"]["sweep"] = _hvd_sweep(hvd, tf_checks.NumpyOps(np), tf.constant, sweep_max)


def main(argv):
    """Run PHASE, write this rank's record, exit 1 when a check failed (see the module docstring)."""
    out_dir, phase = argv[1], argv[2]
    opts = {"--method": "", "--batch-size": "32", "--steps": "20", "--import-trace": "no", "--controller": "",
            "--sweep": "0", "--framework": "", "--backend": ""}
    rest = argv[3:]
    for i in range(0, len(rest) - 1, 2):
        if rest[i] in opts:
            opts[rest[i]] = rest[i + 1]
    method = opts["--method"] or os.environ.get("ENVTOOL_START_METHOD") or None
    controller = opts["--controller"] or None
    sweep_max = int(opts["--sweep"])
    rec = {"phase": phase, "host": socket.gethostname(), "pid": os.getpid(), "launcher_rank": _first(RANK_VARS),
           "launcher_local_rank": _first(LOCAL_RANK_VARS), "ok": False, "checks": {}}
    if os.environ.get("TORCHELASTIC_RUN_ID") is not None:
        # started by torchrun: the srun task that started torchrun is one per node, so its
        # SLURM_PROCID is the node's; torchrun's RANK and LOCAL_RANK are the rank's
        rec.update(launcher_rank=_first(("RANK",)), launcher_local_rank=_first(("LOCAL_RANK",)), launch="torchrun")
    shutdown = None  # Horovod's, once it is up
    framework = opts["--framework"] or "pytorch"
    rec["framework"] = framework
    try:
        if controller == "torch":
            torch_probe(rec, method, sweep_max, opts["--backend"])
            rec["ok"] = all(c.get("ok") for c in rec["checks"].values())
            return _write(rec, out_dir, phase)
        if controller == "gloo":
            gloo_slot(rec)
        modules = FRAMEWORK_MODULES[framework]
        # What importing the framework and Horovod prints is printed once per rank in every job:
        # record it (the filters decide what counts, as for a user) instead of printing it.
        _say(phase, "importing " + " and ".join(modules))
        with warnings.catch_warnings(record=True) as caught:
            rec["import"] = time_imports(modules)
        rec["import_warnings"] = ["%s: %s" % (w.category.__name__, w.message) for w in caught]
        if opts["--import-trace"] == "yes":
            prefixes = sorted({sys.prefix, os.path.realpath(sys.prefix)})
            rec["import"]["metadata"] = trace_import(modules, prefixes)
        hvd = sys.modules[modules[1]]
        if framework == "tensorflow":
            import tf_checks

            why = tf_checks.eager(sys.modules["tensorflow"])  # TensorFlow 1.x: before any operation
            if why:
                raise RuntimeError(why)

        _say(phase, "hvd.init()")
        mark = init_mark(out_dir, phase, rec)
        try:
            hvd.init()
        finally:
            init_unmark(mark)
        shutdown = hvd.shutdown
        _say(phase, "rank %d of %d" % (hvd.rank(), hvd.size()))
        rec.update(rank=hvd.rank(), local_rank=hvd.local_rank(), size=hvd.size(),
                   controller="mpi" if hvd.mpi_enabled() else ("gloo" if hvd.gloo_enabled() else "?"))
        if rec["controller"] == "mpi" and "iface" not in rec:
            # Open MPI's TCP transport between nodes: the site's interface, or the route to the
            # node srun was started from (SLURM_LAUNCH_NODE_IPADDR)
            rec["iface"], rec["iface_source"] = choose_iface("OMPI_MCA_btl_tcp_if_include",
                                                             os.environ.get("SLURM_LAUNCH_NODE_IPADDR"), export=False)
        if framework == "tensorflow":
            tensorflow_checks(rec, hvd, phase, opts, sweep_max)
        elif phase.startswith("probe"):
            torch_checks(rec, hvd, phase, method, sweep_max)
        else:
            import torch

            rec["checks"]["benchmark"] = benchmark(hvd, torch, int(opts["--batch-size"]), int(opts["--steps"]))
        rec["ok"] = all(c.get("ok") for c in rec["checks"].values())
    except BaseException as exc:  # report anything, including SystemExit from a library
        rec["error"] = f"{type(exc).__name__}: {exc}".strip()
        rec["traceback"] = traceback.format_exc()[-4000:]
    code = _write(rec, out_dir, phase)
    if shutdown is not None:
        bounded_shutdown(rec, out_dir, phase, shutdown)
    return code


#: seconds Horovod's shutdown may take once the rank has written its record (under MPI it ends in
#: ``MPI_Finalize``, which waits for every rank)
SHUTDOWN_TIMEOUT_S = 120


def bounded_shutdown(rec, out_dir, phase, shutdown, timeout=SHUTDOWN_TIMEOUT_S):
    """Run ``shutdown()`` (``hvd.shutdown``) in a thread and wait at most ``timeout`` seconds.

    Past that, the rank adds ``shutdown: {ok: false, seconds, error}`` to its record and leaves at
    once (exit 0: its checks are in), so a job whose MPI hangs in ``MPI_Finalize`` ends and says so
    instead of holding the nodes until the job's limit; ``validate`` reports it as a warning. Seen
    with Debian bookworm's MPICH 4.0.2 (ch4:ucx) over UCX's TCP transport, 2-6 % of 2-rank runs here:
    one rank enters the PMI barrier of its finalize while the other still waits for its UCX
    disconnect to be flushed (fixed in MPICH 4.2.0: https://github.com/pmodels/mpich/pull/6596)."""
    done = threading.Event()

    def run():
        try:
            shutdown()
        finally:
            done.set()

    started = time.monotonic()
    threading.Thread(target=run, name="horovod shutdown", daemon=True).start()
    if done.wait(timeout):
        return
    rec["shutdown"] = {"ok": False, "seconds": round(time.monotonic() - started, 3),
                       "error": f"Horovod's shutdown (MPI_Finalize under MPI) did not return within {timeout} s"}
    _write(rec, out_dir, phase)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


#: Signals that mean the rank crashed (not that something ended it: SIGTERM, SIGKILL from the
#: launcher's kill-on-bad-exit), with the text strsignal(3) gives them (srun's and Open MPI's reports).
CRASH_SIGNALS = {"SIGSEGV": "Segmentation fault", "SIGBUS": "Bus error", "SIGABRT": "Aborted",
                 "SIGILL": "Illegal instruction", "SIGFPE": "Floating point exception"}


def init_mark(out_dir, phase, rec):
    """Before ``hvd.init()``: write ``OUT_DIR/PHASE/rank-<r>.init`` (``host pid`` on its first line)
    and point Python's faulthandler at it, so that a rank a crash signal kills inside ``hvd.init()``
    leaves the file with ``Fatal Python error: <signal>`` and its stack (where Open MPI's own handler,
    installed in ``MPI_Init``, catches the signal first, the launcher's report names it instead).
    Returns ``(file, path, faulthandler was enabled)``; :func:`init_unmark` removes it."""
    import faulthandler

    rank = rec["launcher_rank"] if rec["launcher_rank"] is not None else os.getpid()
    d = os.path.join(out_dir, phase)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "rank-%s.init" % rank)
    f = open(path, "w")
    f.write("%s %d\n" % (rec["host"], os.getpid()))
    f.flush()
    was = faulthandler.is_enabled()
    faulthandler.enable(file=f, all_threads=True)
    return f, path, was


def init_unmark(mark):
    """After ``hvd.init()`` returned or raised: faulthandler as it was, the mark removed."""
    import faulthandler

    f, path, was = mark
    faulthandler.disable()
    if was:
        faulthandler.enable()
    f.close()
    try:
        os.remove(path)
    except OSError:
        pass


def _task_list(text):
    """srun's task list (``0``, ``0-3``, ``0,2-3``) as a set of numbers."""
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit() and (not hi or hi.isdigit()):
            for n in range(int(lo), int(hi or lo) + 1):
                out.append(n)
    return set(out)


def _crash_in(text, rank, host, pid):
    """The crash signal that ``text`` (job output) reports for launcher rank ``rank`` (pid ``pid`` on
    ``host``), with the line that says it, or None. Reports read: srun's ``error: NODE: task R: TEXT``
    (SchedMD/slurm's testsuite expects ``Segmentation fault`` after ``kill -11``), Open MPI's mpirun
    ``process rank R with PID P on node N exited on signal S (TEXT)`` and Open MPI's signal handler
    ``[HOST:PID] Signal: TEXT (S)`` (open-mpi/ompi@v4.1.4:opal/util/stacktrace.c)."""
    by_text = {v.lower(): k for k, v in CRASH_SIGNALS.items()}
    for line in text.splitlines():
        m = re.search(r"error: (\S+): tasks? ([\d,\-]+): (.+?)\s*$", line)
        if m and rank in _task_list(m.group(2)):
            sig = by_text.get(m.group(3).lower().replace("(core dumped)", "").strip())
            if sig:
                return sig, line.strip()
        m = re.search(r"process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+)", line)
        if m and int(m.group(1)) == rank:
            try:
                sig = signal.Signals(int(m.group(2))).name
            except ValueError:
                sig = None
            if sig in CRASH_SIGNALS:
                return sig, line.strip()
        m = re.search(r"\[([^\]:]+):(\d+)\] Signal: (.+?) \((\d+)\)", line)
        if m and int(m.group(2)) == pid and m.group(1).split(".")[0] == host.split(".")[0]:
            sig = by_text.get(m.group(3).lower())
            if sig:
                return sig, line.strip()
    return None


def died_in_init(out_dir, phase, output="", offset=0):
    """The ranks of ``OUT_DIR/PHASE`` that a crash signal killed inside ``hvd.init()``: a rank whose
    ``rank-<r>.init`` mark is still there (it entered ``hvd.init()`` and neither returned nor raised)
    and whose crash is named, by faulthandler in the mark (``Fatal Python error: Segmentation
    fault``) or by the launcher in the job output ``output`` after byte ``offset`` (where the step
    began). A rank ended by SIGTERM or SIGKILL (the launcher ending the step for another rank) is
    not one. Returns ``[{rank, host, pid, signal, said}]``."""
    d = os.path.join(out_dir, phase)
    text = ""
    if output:
        try:
            with open(output, "rb") as f:
                f.seek(int(offset or 0))
                text = f.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            text = ""
    found = []
    for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        m = re.fullmatch(r"rank-(\d+)\.init", name)
        if not m:
            continue
        with open(os.path.join(d, name), errors="replace") as f:
            lines = f.read().splitlines()
        host, _, pid_text = (lines[0] if lines else "? 0").partition(" ")
        pid = int(pid_text) if pid_text.strip().isdigit() else 0
        rank = int(m.group(1))
        hit = None
        for line in lines[1:]:
            fm = re.match(r"Fatal Python error: (.+?)\s*$", line)
            sig = {v: k for k, v in CRASH_SIGNALS.items()}.get(fm.group(1)) if fm else None
            if sig:
                hit = (sig, line.strip() + " (faulthandler: " + " | ".join(x.strip() for x in lines[2:8]) + ")")
                break
        hit = hit or _crash_in(text, rank, host, pid)
        if hit:
            found.append({"rank": rank, "host": host, "pid": pid, "signal": hit[0], "said": hit[1][:400]})
    return found


def retry_verdict(argv):
    """``rank_probe.py --died-in-init OUT_DIR PHASE OUTPUT OFFSET``, run by the job script after a
    check's step failed: when a rank died of a crash signal inside ``hvd.init()``
    (:func:`died_in_init`), move ``OUT_DIR/PHASE`` to ``OUT_DIR/retried/PHASE``, write
    ``OUT_DIR/retried/PHASE.json`` (the ranks, their signal and what said it), print one line and
    exit 0 (the script runs the step once more); else exit 1 (the step's failure stands)."""
    out_dir, phase, output, offset = (list(argv) + ["", "", "", "0"])[:4]
    ranks = died_in_init(out_dir, phase, output, offset)
    if not ranks:
        return 1
    dest = os.path.join(out_dir, "retried")
    os.makedirs(dest, exist_ok=True)
    if os.path.isdir(os.path.join(out_dir, phase)):
        shutil.rmtree(os.path.join(dest, phase), ignore_errors=True)
        os.replace(os.path.join(out_dir, phase), os.path.join(dest, phase))
    with open(os.path.join(dest, phase + ".json"), "w") as f:
        json.dump({"phase": phase, "ranks": ranks}, f)
    print("envtool: %s: %s in hvd.init(); retrying the step once" % (
        phase, "; ".join("rank %d on %s died of %s" % (r["rank"], r["host"], r["signal"]) for r in ranks)),
        flush=True)
    return 0


def _write(rec, out_dir, phase):
    """Write ``rec`` to ``OUT_DIR/PHASE/rank-<r>.json``; exit 1 at once when it failed."""
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
    if sys.argv[1:2] == ["--died-in-init"]:
        sys.exit(retry_verdict(sys.argv[2:]))
    sys.exit(main(sys.argv))
