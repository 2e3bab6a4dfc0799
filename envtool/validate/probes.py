"""Probes run with an environment's own interpreter: check-build, DataLoader start method, allreduce.

Each probe is a fresh subprocess with a timeout, so a hang (a fork-unsafe MPI stack) or a crash
cannot take envtool down with it. Results are plain dataclasses. The scripts themselves are the
standalone modules of :mod:`envtool.probes` (``dataloader.py``, ``allreduce.py``); this module
runs them and reads what they print.
"""
from __future__ import annotations

import json
import os
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from envtool import probes as _probes
from envtool.core import external, procs
from envtool.core.prefix import PrefixData
from envtool.probes import allreduce as allreduce_probe
from envtool.probes import dataloader as dataloader_probe

#: Expected sum of squares 0..7 returned by the probe's DataLoader (140).
DATALOADER_TOTAL = dataloader_probe.expected_total()


@dataclass(frozen=True)
class DataLoaderResult:
    """Outcome of the DataLoader probe.

    Attributes:
        method: the start method tried.
        ok: the loader returned every item within the timeout.
        default_method: the env's default start method (``fork`` on Linux before Python 3.14).
        seconds: wall time of the iteration (s), when it finished.
        error: the failure in one line, when not ok.
    """

    method: str
    ok: bool
    default_method: Optional[str] = None
    seconds: Optional[float] = None
    error: Optional[str] = None

    def to_dict(self) -> dict:
        return asdict(self)


def _clean_env(extra: Optional[dict] = None) -> dict:
    return _probes.clean_env(extra)


@dataclass(frozen=True)
class DataLoaderProbe:
    """One run of the DataLoader probe (``envtool/probes/dataloader.py``) over several start methods.

    Attributes:
        default: the env's default start method (None if the probe died first).
        hvd_init: True when ``hvd.init()`` succeeded, False when it failed, None when not tried.
        controller: ``gloo`` / ``mpi`` after init, or None.
        init_error: why ``hvd.init()`` failed.
        results: a :class:`DataLoaderResult` per distinct method asked for (once the default is known).
        error: the probe as a whole failed (``torch is not installed``, ``cannot import torch: …``,
            timed out or died before reporting the default), or None.
        seconds: wall time (s).
    """

    default: Optional[str] = None
    hvd_init: Optional[bool] = None
    controller: Optional[str] = None
    init_error: Optional[str] = None
    results: Tuple[DataLoaderResult, ...] = ()
    error: Optional[str] = None
    seconds: float = 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["results"] = [r.to_dict() for r in self.results]
        return d


def read_dataloader(run: _probes.ProbeRun, methods: Sequence[str], timeout: float) -> DataLoaderProbe:
    """Judge what the DataLoader probe printed.

    Args:
        run: the finished probe (:func:`envtool.probes.run_probe`).
        methods: the methods it was asked for (``"default"`` allowed), in order.
        timeout: the timeout it ran under (s), for the message of a method it never reached.
    Returns:
        a :class:`DataLoaderProbe`. A method is ok when its ``total`` is :data:`DATALOADER_TOTAL`;
        a method without a record failed with "no result within N s (hung workers?)" when the
        probe timed out, else "probe died: <last line>".
    """
    default = hvd_init = controller = init_error = None
    torch_error = None
    results = []
    seen = set()
    for rec in run.records:
        if "default" in rec:
            default = rec["default"]
        elif "torch" in rec:
            torch_error = ("torch is not installed" if not rec.get("installed")
                           else f"cannot import torch: {rec.get('error')}")
        elif "hvd_init" in rec:
            hvd_init = rec["hvd_init"]
            controller = rec.get("controller")
            init_error = rec.get("error")
        elif "method" in rec:
            if rec["method"] in seen:
                continue
            seen.add(rec["method"])
            ok = rec.get("total") == DATALOADER_TOTAL
            err = rec.get("error") or (None if ok else
                                       f"wrong total {rec.get('total')} (expected {DATALOADER_TOTAL})")
            results.append(DataLoaderResult(rec["method"], ok, default, rec.get("seconds"), err))
    if torch_error:
        return DataLoaderProbe(default, error=torch_error, seconds=run.seconds)
    if default is not None:
        for m in dataloader_probe.resolve_methods(methods, default):
            if m not in seen:
                why = (f"no result within {timeout:.0f} s (hung workers?)" if run.timed_out
                       else "probe died: " + (run.error or (run.output_tail.splitlines() or ["no output"])[-1]))
                results.append(DataLoaderResult(m, False, default, None, why))
    error = None
    if default is None:
        error = run.error or "probe printed nothing"
    return DataLoaderProbe(default, hvd_init, controller, init_error, tuple(results), error, run.seconds)


def dataloader_methods(python: Path, methods: Sequence[str], timeout: float = 120.0,
                       hvd_init: bool = False) -> DataLoaderProbe:
    """Run the DataLoader probe once for several start methods (one subprocess, one JSON line each).

    Args:
        python: the env's interpreter.
        methods: ``fork``, ``spawn``, ``forkserver`` or ``default`` (the env's default), in order.
        timeout: seconds for the whole probe before it counts as hung (its process group is killed).
        hvd_init: run ``hvd.init()`` (Gloo when built) before the DataLoaders, as ``doctor`` does.
    Returns:
        a :class:`DataLoaderProbe` (never raises for a failing, crashing or hanging probe).
    """
    args = (["--hvd-init"] if hvd_init else []) + list(methods)
    run = _probes.run_probe(python, "dataloader", args, timeout, preexec_fn=procs.die_with_parent)
    return read_dataloader(run, methods, timeout)


def dataloader(python: Path, method: str, timeout: float = 120.0) -> DataLoaderResult:
    """Iterate a real ``torch.utils.data.DataLoader`` (2 workers) under ``method`` in the env.

    Args:
        python: the env's interpreter.
        method: ``fork``, ``spawn`` or ``forkserver``.
        timeout: seconds before the probe counts as hung.
    Returns:
        a :class:`DataLoaderResult` (never raises for a failing probe).
    """
    probe = dataloader_methods(python, [method], timeout)
    if probe.error:
        return DataLoaderResult(method, False, default_method=probe.default, error=probe.error)
    return probe.results[0]


def check_build_output(prefix: Path, timeout: float = 180.0) -> str:
    """Run ``P/bin/horovodrun --check-build`` with ``PYTHONUNBUFFERED=1`` and return its output.

    Before 0.25.0 the process ends with ``os._exit(0)`` and piped output is lost unless
    unbuffered (horovod.md). The exit status says nothing about capabilities, so it is ignored.

    Raises:
        FileNotFoundError: the env has no ``bin/horovodrun``.
        subprocess.TimeoutExpired: no answer within ``timeout`` seconds.
    """
    horovodrun = Path(prefix) / "bin" / "horovodrun"
    if not horovodrun.exists():
        raise FileNotFoundError(str(horovodrun))
    env = _clean_env({"PATH": f"{Path(prefix) / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"})
    proc = external.run([str(PrefixData(Path(prefix)).python), str(horovodrun), "--check-build"],
                        timeout=timeout, env=env, preexec_fn=procs.die_with_parent)
    return proc.stdout + (("\n" + proc.stderr) if proc.stderr.strip() else "")


def allreduce_command(prefix: Path, ranks: int = 2, controller: str = "gloo", framework: str = "pytorch") -> list:
    """``horovodrun -np N -H localhost:N --gloo <prefix>/bin/python …/envtool/probes/allreduce.py
    [--framework tensorflow]`` for the env (argv list). The launcher words come from the launcher
    model (:func:`envtool.scheduler.launcher.horovodrun_argv`)."""
    from envtool.scheduler import launcher

    bin_dir = Path(prefix) / "bin"
    argv = launcher.horovodrun_argv(Path(prefix), ranks, "gloo" if controller == "gloo" else "mpi")
    argv += [str(bin_dir / "python"), str(_probes.probe_path("allreduce"))]
    return argv + (["--framework", framework] if framework != "pytorch" else [])


def _records(output: str):
    """Every JSON object in launcher output (tagged, interleaved; see :func:`parse_allreduce`)."""
    decoder = json.JSONDecoder()
    pos = output.find("{")
    while pos >= 0:
        try:
            data, end = decoder.raw_decode(output, pos)
        except ValueError:
            pos = output.find("{", pos + 1)
            continue
        if isinstance(data, dict):
            yield data
        pos = output.find("{", end)


def parse_keras(output: str) -> List[dict]:
    """The ``keras_fit`` record of each rank in the allreduce probe's output (TensorFlow), each with
    its ``rank``; [] when there is none."""
    return [dict(d["keras_fit"], rank=d.get("rank")) for d in _records(output)
            if isinstance(d.get("keras_fit"), dict)]


def allreduce_failure(output: str) -> str:
    """Why a 2-rank allreduce failed, in one line naming the rank where a rank said so: a Keras
    check's error (``rank 1: after model.fit the weights differ …``), else the last line of a
    Python traceback with its launcher tag (``[1,0]<stderr>:ImportError: …`` or ``[0]: …``), else ``""``."""
    import re

    for k in parse_keras(output):
        if not k.get("ok"):
            return f"rank {k.get('rank')}: {k.get('error')}"
    last = ""
    for line in output.splitlines():
        m = re.match(r"^\[(\d+)(?:,(\d+))?\](?:<std(?:err|out)>)?:\s*(\w+(?:\.\w+)*(?:Error|Exception)\b.*)$", line)
        if m:
            rank = m.group(2) if m.group(2) is not None else m.group(1)
            last = f"rank {rank}: {m.group(3).strip()[:300]}"
    return last


def parse_allreduce(output: str, ranks: int = 2) -> bool:
    """True when every rank printed the expected average ((1 + … + N) / N).

    Each rank of ``envtool/probes/allreduce.py`` prints one JSON object
    (``ENVTOOL-PROBE {"rank": 0, "size": 2, "value": 1.5}``). Launchers tag
    and interleave output — Open MPI's ``--tag-output`` can glue a rank's empty tagged line to
    the end of another (``…1.5}[1,1]<stdout>:``) — so the objects are found with a JSON decoder
    at each ``{`` rather than line by line.
    """
    expected = allreduce_probe.expected_average(ranks)
    seen = set()
    for data in _records(output):
        if data.get("size") == ranks:
            if isinstance(data.get("keras_fit"), dict) and not data["keras_fit"].get("ok"):
                continue
            try:
                if abs(float(data.get("value", -1)) - expected) < 1e-6:
                    seen.add(data.get("rank"))
            except (TypeError, ValueError):
                pass
    return seen == set(range(ranks))


@dataclass(frozen=True)
class ImportResult:
    """What importing one module printed (the ``imports`` probe, ``envtool/probes/imports.py``).

    Attributes:
        module: the module imported (``torch``, ``horovod.torch``).
        ok: the import succeeded.
        error: ``ExceptionType: first line`` when it failed, else None.
        warnings: each Python warning it printed, as ``Category: message``.
        stderr: what it wrote straight to file descriptor 2 (C/C++ libraries), stripped.
        seconds: how long the import took (s).
    """

    module: str
    ok: bool
    error: Optional[str] = None
    warnings: Tuple[str, ...] = ()
    stderr: str = ""
    seconds: float = 0.0

    def printed(self) -> Tuple[str, ...]:
        """Every warning line a user would see: the Python warnings, then each non-blank stderr line."""
        return self.warnings + tuple(ln.strip() for ln in self.stderr.splitlines() if ln.strip())

    def to_dict(self) -> dict:
        return asdict(self)


def import_modules(python: Path, modules: Sequence[str], timeout: float = 300.0) -> Tuple[Tuple[ImportResult, ...], Optional[str]]:
    """Import ``modules`` in order, in one fresh process of ``python``; what each printed.

    Args:
        python: the environment's interpreter.
        modules: module names (``torch``, ``horovod.torch``).
        timeout: seconds before the probe counts as hung (its process group is killed).
    Returns:
        ``(results, error)``: one :class:`ImportResult` per module, and None; or ``()`` and why
        the probe gave no answer (it hung or died).
    """
    run = _probes.run_probe(python, "imports", list(modules), timeout, env=_clean_env({"PYTHONUNBUFFERED": "1"}),
                            preexec_fn=procs.die_with_parent)
    record = next((r for r in run.records if "modules" in r), None)
    if record is None:
        return (), run.error or "the import probe printed no result"
    out = []
    for m in record["modules"]:
        out.append(ImportResult(module=str(m.get("module")), ok=bool(m.get("ok")), error=m.get("error"),
                                warnings=tuple(f"{w.get('category')}: {w.get('message')}" for w in m.get("warnings", ())),
                                stderr=str(m.get("stderr") or "").strip(), seconds=float(m.get("seconds") or 0.0)))
    return tuple(out), None


def unexpected_warnings(results: Sequence[ImportResult], expected: Sequence[str]) -> Tuple[Tuple[str, str], ...]:
    """The printed warning lines that no pattern of ``expected`` matches (``re.search``).

    Args:
        results: :func:`import_modules`'s results.
        expected: the spec's ``expect.import_warnings`` patterns.
    Returns:
        ``(module, line)`` pairs, in import order.
    """
    import re

    patterns = [re.compile(p) for p in expected]
    return tuple((r.module, line) for r in results for line in r.printed()
                 if not any(p.search(line) for p in patterns))
