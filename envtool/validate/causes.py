"""Name the cause of a rank's failure from a line of job output (validate layer).

Each :data:`PATTERNS` entry is a regular expression over one line of output, the public source
whose message it reads, and a function making the short cause that ``validate --submit``'s
``FAILED:`` line carries. Output is read as bytes and decoded by :func:`envtool.core.external.decode`
before it reaches here (a rank's path may not be UTF-8).

Sources (where the message text was read; ``@commit`` is the stored version read this session):

- Horovod's Gloo rendezvous store: horovod/horovod@1470403c22d1:horovod/common/gloo/http_store.cc
  (``Wait timeout after N seconds for key(s): K``, thrown by ``HTTPStore::wait``).
- Open MPI's TCP BTL help text: open-mpi/ompi@023a4a82d305:opal/mca/btl/tcp/help-mpi-btl-tcp.txt
  (``[client connect fail]``: ``Open MPI failed to TCP connect to a peer MPI process``); the
  ``connect() to ADDR failed: ERR`` line is its BTL_ERROR in opal/mca/btl/tcp/btl_tcp_endpoint.c
  (not re-read this session).
- PyTorch's c10d TCPStore client (pytorch/pytorch:torch/csrc/distributed/c10d/socket.cpp and
  TCPStore.cpp; messages as PyTorch 2.x prints them, not re-read this session):
  ``The client socket has timed out after Nms while trying to connect to (HOST, PORT)``,
  ``Timed out after N seconds waiting for clients. M/N clients joined``.
- srun's task exit report, ``error: NODE: task N: TEXT`` with TEXT from strsignal(3)
  (SchedMD/slurm's own test of it: testsuite/python/tests, ``test_task_signal_abort_message``
  expects ``Segmentation fault`` after ``kill -11``).
- ENOSPC: ``[Errno 28] No space left on device`` (Python's ``OSError`` text for errno 28).
"""
from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

from envtool.core import external

#: strsignal(3) text (glibc) → signal name, for srun's "task N: TEXT" lines.
SIGNAL_TEXT = {
    "segmentation fault": "SIGSEGV", "killed": "SIGKILL", "aborted": "SIGABRT", "bus error": "SIGBUS",
    "terminated": "SIGTERM", "floating point exception": "SIGFPE", "illegal instruction": "SIGILL",
    "hangup": "SIGHUP", "interrupt": "SIGINT",
}


@dataclass(frozen=True)
class Cause:
    """What one line of output says went wrong.

    Attributes:
        kind: ``rendezvous-timeout``, ``connect-failed``, ``shm-full``, ``signal``.
        text: the cause in words, for the ``FAILED:`` line.
        node: the node the line names, or None.
        task: the launcher's task (rank) the line names, or None.
        start: where in the line the matched message starts (the excerpt keeps it).
    """

    kind: str
    text: str
    node: Optional[str] = None
    task: Optional[int] = None
    start: int = 0


def _signal_name(text: str) -> str:
    """``died of SIGNAME`` for srun's strsignal text, ``died of SIGNAME (exit N)`` for an exit
    status above 128 (a shell's report of a signal), ``exited with code N`` otherwise."""
    low = text.lower().replace("(core dumped)", "").strip()
    m = re.fullmatch(r"exited with exit code (\d+)", low)
    if m:
        sig = _exit_signal(int(m.group(1)))
        return f"died of {sig} (exit {m.group(1)})" if sig else f"exited with code {m.group(1)}"
    return "died of " + SIGNAL_TEXT.get(low, text.strip())


def _exit_signal(code: int) -> Optional[str]:
    if code > 128:
        try:
            return signal.Signals(code - 128).name
        except ValueError:
            return None
    return None


def _port_in(line: str) -> str:
    m = re.search(r"(?:https?://)?\[?([\w.\-:]+?)\]?:(\d{2,5})(?:/|\b)", line)
    return f", port {m.group(2)} on {m.group(1)}" if m else ""


_Make = Callable[[re.Match, str], Cause]

#: (regular expression, source, maker) read in order; the first that matches names the cause.
PATTERNS: Sequence[Tuple[re.Pattern, str, _Make]] = (
    (re.compile(r"Wait timeout after (\d+) seconds for key\(s\): ?(.*)$"),
     "horovod/horovod@1470403c22d1:horovod/common/gloo/http_store.cc",
     lambda m, line: Cause("rendezvous-timeout",
                           f"Gloo rendezvous timed out after {m.group(1)} s waiting for key(s) "
                           f"{m.group(2).strip() or '?'}{_port_in(line[:m.start()])}", start=m.start())),
    (re.compile(r"timed out after (\d+) ?ms while trying to connect to \(([^,]+), (\d+)\)"),
     "pytorch/pytorch@8cf1b8e39425:torch/csrc/distributed/c10d/socket.cpp",
     lambda m, line: Cause("rendezvous-timeout",
                           f"torch TCPStore timed out after {int(m.group(1)) // 1000} s connecting to "
                           f"{m.group(2)}, port {m.group(3)}", start=m.start())),
    (re.compile(r"Timed out after (\d+) seconds waiting for clients\. ?(\d+/\d+) clients joined"),
     "pytorch/pytorch@b874478480be:torch/csrc/distributed/c10d/TCPStore.cpp",
     lambda m, line: Cause("rendezvous-timeout",
                           f"torch TCPStore timed out after {m.group(1)} s waiting for clients "
                           f"({m.group(2)} joined){_port_in(line)}", start=m.start())),
    (re.compile(r"connect\(\) to ([\w.:\-]+) failed: (.+?)\s*$"),
     "open-mpi/ompi@06cd6b11343e:opal/mca/btl/tcp/btl_tcp_endpoint.c",
     lambda m, line: Cause("connect-failed", f"Open MPI could not connect to {m.group(1)}: {m.group(2)}",
                           start=m.start())),
    (re.compile(r"Open MPI failed to TCP connect to a peer MPI process"),
     "open-mpi/ompi@023a4a82d305:opal/mca/btl/tcp/help-mpi-btl-tcp.txt",
     lambda m, line: Cause("connect-failed", "Open MPI failed to TCP connect to a peer MPI process (a firewall "
                           "or route between the nodes)", start=m.start())),
    (re.compile(r"(?i)(?:\[Errno 28\]|No space left on device|ENOSPC).*"),
     "errno 28 (ENOSPC) naming /dev/shm or shared memory (shm_open, NCCL, Gloo)",
     lambda m, line: Cause("shm-full", "/dev/shm full", start=m.start())),
    (re.compile(r"error: (\S+): tasks? ([\d\-,]+): (.+?)\s*$"),
     "SchedMD/slurm@master:testsuite/python/tests (test_task_signal_abort_message)",
     lambda m, line: Cause("signal", _signal_name(m.group(3)), node=m.group(1),
                           task=external.small_int(m.group(2).split("-")[0].split(",")[0]), start=m.start())),
    (re.compile(r"exited with exit code (\d+)"),
     "SchedMD/slurm@master:src/srun (task exit report)",
     lambda m, line: Cause("signal", f"died of {_exit_signal(int(m.group(1)))} (exit {m.group(1)})",
                           start=m.start())),
)

_SHM = re.compile(r"(?i)/dev/shm|shm_open|shared memory|\bnccl|\bgloo|\bshm\b")


def read(line: str, shm_free_mib: Optional[float] = None) -> Optional[Cause]:
    """The cause one line of output names, or None.

    Args:
        line: one line (already decoded text; bytes are decoded by ``external.decode``).
        shm_free_mib: free MiB on ``/dev/shm`` from the pre-flight, added to a ``/dev/shm full``
            cause when known.
    """
    line = external.decode(line) if isinstance(line, bytes) else line
    for rx, _source, make in PATTERNS:
        m = rx.search(line)
        if not m:
            continue
        cause = make(m, line)
        if cause.kind == "shm-full":
            if not _SHM.search(line):
                continue
            if shm_free_mib is not None:
                cause = Cause("shm-full", f"/dev/shm full ({shm_free_mib:.0f} MiB free)", start=cause.start)
        if cause.kind == "signal" and "None" in cause.text:
            continue
        return cause
    return None


def excerpt(line: str, limit: int = 200) -> str:
    """At most ``limit`` characters of ``line``, keeping the message that names a cause: when the
    line is longer and a cause is found, the excerpt starts a little before it (``…`` marks what
    was cut), so a long build path in front does not push the cause out."""
    if len(line) <= limit:
        return line
    cause = read(line)
    if cause is None or cause.start < limit // 2:
        return line[:limit]
    start = max(0, cause.start - 20)
    return "…" + line[start:start + limit - 1]


def causes(lines: List[str], shm_free_mib: Optional[float] = None) -> List[Cause]:
    """The distinct causes in ``lines`` (by text, first first)."""
    out: List[Cause] = []
    seen = set()
    for line in lines:
        c = read(line, shm_free_mib)
        if c is not None and (c.text, c.node, c.task) not in seen:
            seen.add((c.text, c.node, c.task))
            out.append(c)
    return out
