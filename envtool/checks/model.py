"""Plain data for ``doctor``: findings, checks, and the context checks read.

A :class:`Finding` is what one check concluded; a :class:`Check` is one unit (id, title,
run, fix hint, the probes it needs); a :class:`Context` holds the inputs (prefix, spec, site,
lock, scripts) and memoizes the environment probes so that checks sharing one wait on the
same subprocess instead of starting their own.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Tuple

#: The statuses a finding can have, from best to worst (``skipped`` means not applicable here).
STATUSES = ("ok", "skipped", "warn", "fail")


@dataclass(frozen=True)
class Finding:
    """What one check found.

    Attributes:
        id: the check's id (``horovod-build``).
        status: ``ok``, ``warn``, ``fail`` or ``skipped`` (see :data:`STATUSES`).
        summary: one line for people.
        fix: a command to paste or a change to make ('' when nothing is to be done).
        details: JSON-ready extra data; the list under ``items`` (strings) is printed under
            the summary line, everything else only with ``-v`` and in ``--json``.
        title: the check's title.
        seconds: wall time the check took (s), including waiting for shared probes.
    """

    id: str
    status: str
    summary: str
    fix: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)
    title: str = ""
    seconds: float = 0.0

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"finding {self.id!r}: status must be one of {STATUSES}, got {self.status!r}")

    def to_dict(self) -> dict:
        """JSON-ready form (every field)."""
        return {"id": self.id, "title": self.title, "status": self.status, "summary": self.summary,
                "fix": self.fix, "details": dict(self.details), "seconds": round(self.seconds, 3)}


@dataclass(frozen=True)
class Check:
    """One doctor check.

    Attributes:
        id: stable id used by ``--only`` and in ``--json``.
        title: what is checked, in a few words.
        run: ``(Context) -> Finding``; must not raise for a problem it finds (the runner turns
            an unexpected exception into a ``fail`` finding).
        fix: the generic fix hint (a finding's own ``fix`` is more specific).
        needs: names of the shared probes it reads (``info``, ``check_build``,
            ``dataloader``), started before any check runs.
        order: display order (the issue's numbering).
    """

    id: str
    title: str
    run: Callable[["Context"], Finding]
    fix: str = ""
    needs: Tuple[str, ...] = ()
    order: int = 0


@dataclass
class Context:
    """Inputs of one ``doctor`` run and the shared probe results.

    Attributes:
        prefix: the environment examined; None when doctor only scans scripts.
        spec: the spec it should match (resolved for ``site`` when given), or None.
        site: the site (from the spec or ``--site``), or None.
        lock: a lockfile to compare with, or None.
        scripts: training scripts to scan.
        environ: the environment variables doctor judges (a copy of ``os.environ``).
        timeout: seconds each probe subprocess may take.
        infiniband_dir: where InfiniBand devices show (``/sys/class/infiniband``).
        script_options: ``entries``, ``launch`` and ``limits`` of the script scan (``--entry``,
            ``--launch``, ``--max-source-mb``/``--max-files``), or None for the defaults.
        script_report: the :class:`envtool.checks.scan.ScanReport` of ``scripts``, made by
            ``doctor`` before the checks run (so that a scan limit is an input error), or None.
    """

    prefix: Optional[Path]
    spec: Any = None
    site: Any = None
    lock: Optional[Path] = None
    scripts: Tuple[Path, ...] = ()
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    timeout: float = 120.0
    infiniband_dir: Path = Path("/sys/class/infiniband")
    script_report: Any = None
    script_options: Optional[Dict[str, Any]] = None
    _futures: Dict[str, Future] = field(default_factory=dict, repr=False)
    _lock: Any = field(default_factory=threading.Lock, repr=False)
    _pool: Optional[ThreadPoolExecutor] = field(default=None, repr=False)

    @property
    def python(self) -> Path:
        """The environment's interpreter (:attr:`envtool.core.prefix.PrefixData.python`).

        Raises:
            ValueError: there is no environment (a script scan only); no check that needs one runs then.
        """
        from envtool.core.prefix import PrefixData

        if self.prefix is None:
            raise ValueError("doctor examines no environment here (no prefix): no interpreter to run")
        return PrefixData(Path(self.prefix)).python

    def start(self, names: Iterable[str]) -> None:
        """Start the named probes in the background (idempotent)."""
        from envtool.checks import envprobe

        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=len(envprobe.PROBES), thread_name_prefix="probe")
            for name in names:
                if name not in self._futures:
                    self._futures[name] = self._pool.submit(envprobe.PROBES[name], self)

    def probe(self, name: str) -> Any:
        """The result of probe ``name`` (started now if it was not), waiting for it.

        Raises:
            KeyError: unknown probe name.
        """
        self.start([name])
        return self._futures[name].result()

    def close(self) -> None:
        """Wait for the probe threads and release them."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
