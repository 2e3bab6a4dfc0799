"""A site file's ``batch`` section: what ``envtool jobscript`` needs beyond ``scheduler`` and
``gpus_per_node`` (:class:`BatchSection`)."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import List, Optional, Tuple

from envtool.spec import registry
from envtool.spec.sites.reader import check_source, section

BATCH_KEYS = ("source", "cpus_per_node", "queue", "queue_by_nodes", "queue_option", "constraint", "gpu_option",
              "mpi", "account_required", "directives", "env", "module_use", "shell", "interface", "launcher", "time")
#: A wall-clock limit as every scheduler here reads it: ``H:MM:SS`` or ``D-H:MM:SS``.
BATCH_TIME_RE = re.compile(r"(?:\d+-)?\d+:[0-5]\d:[0-5]\d")
#: A network interface name as Linux allows it (IFNAMSIZ 16 with the NUL, no '/', ':' or space:
#: dev_valid_name() in torvalds/linux@v6.6:net/core/dev.c), narrowed to the characters real NICs use.
INTERFACE_RE = re.compile(r"[A-Za-z0-9_.@-]{1,15}")
#: Slurm options a site's queue name goes to (``-q`` is ``--qos``, ``-p`` is ``--partition``).
QUEUE_OPTIONS = ("partition", "qos")
#: How a Slurm site wants GPUs asked for: ``--gpus-per-node=N`` or ``--gres=gpu:N``.
GPU_OPTIONS = ("gpus-per-node", "gres")


@dataclass(frozen=True)
class BatchSection:
    """A site file's ``batch`` section: what its job scripts need beyond ``scheduler``/``gpus_per_node``.

    Every field is optional; a job-script flag that needs a missing one stops with an error
    naming ``batch.<field>`` (see :mod:`envtool.scheduler`).

    Attributes:
        source: id in the site file's ``sources`` the layout comes from, or None.
        cpus_per_node: CPUs one job may use on a node (Slurm CPUs, LSF cores per resource set,
            PBS/ALPS depth units); divided among the ranks of a node for ``-c``/``-c``/``--depth``/
            ``-d`` and ``OMP_NUM_THREADS``. 0 when unknown (a job script then stops with an error
            naming ``batch.cpus_per_node``). ``auto`` in the file: this machine's CPUs
            (``os.sched_getaffinity``), for the ``local`` site, whose jobs run here.
        queue: the queue (partition, QOS) used when ``--queue`` is not given, or None.
        queue_option: Slurm only: ``partition`` (``-p``, the default) or ``qos`` (``-q``).
        constraint: Slurm ``-C`` node feature (Perlmutter's ``gpu``), or None.
        gpu_option: Slurm only: ``gpus-per-node`` (the default) or ``gres`` (``--gres=gpu:N``).
        mpi: Slurm only: the ``srun --mpi=`` plugin (``pmix``), or None (the site's default).
        account_required: the site refuses jobs without an account (``--account``).
        directives: further directive arguments written as they are (``-l filesystems=home:eagle``).
        env: variables exported in job scripts only (``SLURM_CPU_BIND: cores``).
        module_use: directories ``module use`` adds before any ``module load``.
        shell: the script's interpreter line after ``#!`` (default ``/bin/bash``).
        env_paths: search-path entries added in job scripts, ``(VAR, "prepend"|"append", entry)``.
        interface: the network interface ranks use between nodes (``hsn0``, ``ib0``), or None;
            job scripts export it to Horovod's Gloo (``HOROVOD_GLOO_IFACE``), torch.distributed's
            Gloo (``GLOO_SOCKET_IFNAME``), NCCL (``NCCL_SOCKET_IFNAME``) and Open MPI's TCP BTL
            (``OMPI_MCA_btl_tcp_if_include``), and the pre-flight checks it on every node.
        launcher: the registered launcher (:func:`envtool.spec.registry.launcher_names`: ``srun``,
            ``jsrun``, ``mpiexec``, ``aprun``, ``mpirun``) whose words job scripts build from the job's
            layout, chosen apart from the scheduler; None: the scheduler's default launcher.
        time: the wall-clock limit (``H:MM:SS`` or ``D-H:MM:SS``) job scripts ask for when
            ``--time`` is not given, or None (the scheduler's own default then applies).
        queue_by_nodes: ``(max_nodes, queue)`` pairs, ascending: without ``--queue`` a job of N nodes
            goes to the first queue whose ``max_nodes`` is at least N (a site whose queues take
            different node counts, such as Polaris's ``debug-scaling`` and ``prod``); before ``queue``.
    """

    source: Optional[str] = None
    cpus_per_node: int = 0
    queue: Optional[str] = None
    queue_option: str = "partition"
    constraint: Optional[str] = None
    gpu_option: str = "gpus-per-node"
    mpi: Optional[str] = None
    account_required: bool = False
    directives: Tuple[str, ...] = ()
    env: Tuple[Tuple[str, str], ...] = ()
    module_use: Tuple[str, ...] = ()
    shell: str = "/bin/bash"
    env_paths: Tuple[Tuple[str, str, str], ...] = ()
    interface: Optional[str] = None
    launcher: Optional[str] = None
    time: Optional[str] = None
    queue_by_nodes: Tuple[Tuple[int, str], ...] = ()

    def queue_for(self, nodes: int) -> Optional[str]:
        """The queue a job of ``nodes`` nodes goes to without ``--queue``: the first of
        ``queue_by_nodes`` that takes that many nodes, else ``queue`` (None when neither says)."""
        for most, name in self.queue_by_nodes:
            if nodes <= most:
                return name
        return self.queue


def parse_batch(spath: str, raw, source_ids) -> BatchSection:
    """Parse the ``batch`` section (SpecError naming ``batch.<field>`` on a bad value)."""
    b = section(spath, raw, "batch", BATCH_KEYS,
                "a mapping of job-script settings (" + ", ".join(BATCH_KEYS) + ")")
    if b is None:
        return BatchSection()
    source = b.str("source")
    check_source(b, "source", source, source_ids)
    mpi, interface = _mpi(b), _interface(b)
    env, env_paths = b.env_map("env")
    cpus_per_node = _cpus_per_node(b)
    time = b.str("time")
    if time is not None and not BATCH_TIME_RE.fullmatch(time):
        raise b.error("time", "a wall-clock limit H:MM:SS or D-H:MM:SS (quoted: \"00:30:00\")", got=time)
    return BatchSection(interface=interface, time=time, queue_by_nodes=_queue_by_nodes(b),
                        source=source, cpus_per_node=cpus_per_node, queue=b.str("queue"),
                        queue_option=b.one_of("queue_option", QUEUE_OPTIONS, default="partition"),
                        constraint=b.str("constraint"),
                        gpu_option=b.one_of("gpu_option", GPU_OPTIONS, default="gpus-per-node"),
                        mpi=mpi, account_required=b.bool("account_required", False),
                        directives=b.str_list("directives"), env=env, env_paths=env_paths,
                        module_use=b.str_list("module_use"), shell=b.str("shell") or "/bin/bash",
                        launcher=b.choice("launcher", registry.launcher_names()))


def _mpi(b) -> Optional[str]:
    """``mpi``: an ``srun --mpi`` plugin name, or None."""
    mpi = b.str("mpi")
    if mpi is not None and not mpi.replace("_", "").isalnum():
        raise b.error("mpi", "an srun --mpi plugin name (pmix, pmi2, cray_shasta)", got=mpi)
    return mpi


def _interface(b) -> Optional[str]:
    """``interface``: a network interface name (:data:`INTERFACE_RE`), or None."""
    interface = b.str("interface")
    if interface is not None and not INTERFACE_RE.fullmatch(interface):
        raise b.error("interface", "a network interface name (1 to 15 letters, digits, '_', '.', '@', '-'; "
                      "e.g. ib0, hsn0, eth0)", got=interface)
    return interface


def _cpus_per_node(b) -> int:
    """``cpus_per_node``; ``auto``: this machine's CPUs (the ``local`` site: the job runs here)."""
    if b.data.get("cpus_per_node") == "auto":
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return b.int("cpus_per_node", 0)


def _queue_name(name: object) -> bool:
    return isinstance(name, str) and bool(name) and name.replace("-", "").replace("_", "").replace(".", "").isalnum()


def _queue_by_nodes(b) -> Tuple[Tuple[int, str], ...]:
    """``queue_by_nodes`` as ascending ``(max_nodes, queue)`` pairs (empty when not given)."""
    by_nodes = b.data.get("queue_by_nodes")
    pairs: List[Tuple[int, str]] = []
    if by_nodes is None:
        return ()
    if not isinstance(by_nodes, dict) or not by_nodes:
        raise b.error("queue_by_nodes", "a mapping MAX_NODES: QUEUE (10: debug-scaling)", got=by_nodes)
    for most, name in by_nodes.items():
        if isinstance(most, bool) or not isinstance(most, int) or most < 1 or not _queue_name(name):
            raise b.error("queue_by_nodes", "MAX_NODES (a positive integer): QUEUE (a queue name)",
                          got={most: name})
        pairs.append((most, name))
    return tuple(sorted(pairs))
