"""The scan's result types and vocabulary: :class:`ScanIssue`, :class:`ScanReport`, :class:`Limits`
and the launches a program can be assumed to use (:data:`LAUNCHES`). No analysis here."""
from __future__ import annotations

import gc
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterator, List, Optional

#: launch → words (``--launch`` takes the keys).
LAUNCHES: Dict[str, str] = {
    "horovod": "Horovod (horovodrun/mpirun: MPI or Gloo controller)",
    "mpi": "MPI (mpirun/srun with mpi4py or torch.distributed's MPI backend)",
    "torchrun": "torch.distributed (torchrun, mp.spawn or srun; NCCL or Gloo, no MPI)",
    "lightning": "PyTorch Lightning (its own strategy; no MPI)",
    "tf-multiworker": "TensorFlow MultiWorkerMirroredStrategy (one process per worker, TF_CONFIG; no MPI)",
    "single": "a single process (no distributed launch)",
}


def assumed_text(launch: str, reason: str) -> str:
    """The note a launch-specific message carries (`` [launch assumed: …, because: …]``), and the
    one line ``doctor`` prints once per program instead of on each of its findings.

    Args:
        launch: a key of :data:`LAUNCHES`.
        reason: why that launch was assumed, in words.
    Returns:
        the note, with its leading space.
    """
    return f" [launch assumed: {LAUNCHES[launch]}, because: {reason}]"


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
        edit: the fix as a one-line edit where one exists: ``{"path", "line", "old", "new"}``, the
            line as it is and as the fix leaves it (``new`` may hold two lines: a line inserted
            after it); None where the fix is not one line.
    """

    path: str
    line: int
    rule: str
    message: str
    fix: str
    level: str = "warn"
    entry: str = ""
    launch: str = ""
    edit: Optional[Dict[str, Any]] = None

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready form (every field)."""
        return asdict(self)


@contextmanager
def no_gc() -> Iterator[None]:
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
    """Bounds of one scan (time and memory grow with the source read: a peak of about 36 MiB of
    memory per MiB of a real project's source (envtool's own tree), about 72 for dense generated code
    in many functions and up to about 131 for one file that is a single huge function; issue 42).

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
    programs: List[Dict[str, Any]] = field(default_factory=list)
    files: int = 0
    bytes: int = 0
