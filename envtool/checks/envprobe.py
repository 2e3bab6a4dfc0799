"""The environment probes ``doctor`` shares between checks.

Each probe is one subprocess of the environment's own interpreter (or its ``horovodrun``)
with a timeout, run in its own process group so that a hung DataLoader worker is killed with
it (:func:`envtool.probes.run_probe`). The scripts are the standalone modules of
:mod:`envtool.probes`. They run concurrently; results are plain data and never raise for a
failing environment.

* ``check_build``: what ``horovodrun --check-build`` reports, taken from Horovod's Python API
  inside the ``info`` probe's interpreter (:func:`envtool.horovod.checkbuild.from_api`: one
  import of each framework for every probe there) and, only where the API cannot answer (the
  ``info`` probe failed or timed out, ``horovod`` did not import there, an extension failed in a
  way a lone import might not), from a real ``<prefix>/bin/horovodrun --check-build``
  (:func:`envtool.validate.probes.check_build_output`, parsed with
  :func:`envtool.horovod.checkbuild.parse`). ``horovodrun`` imports each framework again in a
  forked child per extension and per capability (horovod/horovod@v0.28.1:horovod/common/util.py
  ``_check_extension_lambda``): ~8 s for a PyTorch-only env on 2 cores, against ~2 s for the
  ``info`` probe that doctor runs anyway. ``envtool check-build`` and ``create``'s validation
  still run the real ``horovodrun --check-build``.
* ``info`` (``envtool/probes/env_info.py``): one fresh interpreter that reports, in this
  order, the default start method (before anything could fix it:
  ``get_start_method(allow_none=True)``, horovod.md), the interpreter, user-site settings
  and ``sys.path``, then imports the frameworks and Horovod's framework extensions (stdout
  captured, to catch "Extension horovod.torch has not been built"), calls the Python API
  capability probes (``nccl_built`` … ``ccl_built``, horovod/common/basics.py@v0.28.1),
  reads ``horovod/metadata.json``, the MPI library that the extension loaded
  (``MPI_Get_library_version`` through ctypes, callable before ``MPI_Init`` by the MPI
  standard) and torch's CUDA/NCCL view.
* ``dataloader`` (``envtool/probes/dataloader.py --hvd-init``, the probe ``create``'s
  validation runs without ``--hvd-init``): ``hvd.init()`` (Gloo when built, in one process),
  then a ``DataLoader`` with 2 workers under the env's default start method and, if different, the
  spec's ``expect.dataloader_start_method``; one JSON line per method, so a hang still
  reports the methods that finished.
"""
from __future__ import annotations

import json
import subprocess
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from envtool import probes as _probes
from envtool.core import frameworks, procs
from envtool.validate import probes as vprobes

#: Frameworks the info probe imports when installed: module → Horovod extension module.
FRAMEWORKS: Tuple[Tuple[str, str], ...] = tuple((f.module, f.binding) for f in frameworks.FRAMEWORKS)

#: Horovod's Python API capability probes (horovod/common/basics.py@v0.28.1; cuda/rocm from 0.20).
API_PROBES = ("nccl_built", "mpi_built", "gloo_built", "cuda_built", "rocm_built", "ddl_built", "ccl_built")


#: The ``ENVTOOL-PROBE`` record format, the run in a new session and its timeout handling.
ProbeRun = _probes.ProbeRun


def run_script(python: Path, script: str, args: List[str], timeout: float, env: Optional[dict] = None) -> ProbeRun:
    """Run Python source ``script`` (written to a temporary file, so spawn/forkserver children
    can re-import it) with ``python`` in a new session; kill the whole group after ``timeout``
    seconds. The probes of this module are files (:func:`envtool.probes.run_probe`); this is
    for a one-off script.

    Returns:
        a :class:`ProbeRun` (never raises for a failing or hanging probe).
    """
    with tempfile.TemporaryDirectory(prefix="envtool-doctor-") as tmp:
        path = Path(tmp) / "envtool_doctor_probe.py"
        path.write_text(script)
        return _probes.run_file(python, path, args, timeout, env, preexec_fn=procs.die_with_parent)


@dataclass(frozen=True)
class CheckBuildResult:
    """What ``horovodrun --check-build`` reports for the env, and where the answer came from.

    Attributes:
        text: ``horovodrun``'s output ('' when it did not run: the API answered, or it could not run).
        parsed: the :class:`envtool.horovod.checkbuild.CheckBuild`, or None.
        error: why there is no ``parsed``, or None.
        seconds: wall time (s) until the answer was there (the ``info`` probe's, plus
            ``horovodrun``'s when it ran).
        source: ``"api"`` (Horovod's Python API in the ``info`` probe) or ``"horovodrun"`` (a real
            ``horovodrun --check-build``).
        fallback_reason: why the API could not answer (so ``horovodrun`` ran), or None.
    """

    text: str = ""
    parsed: Any = None
    error: Optional[str] = None
    seconds: float = 0.0
    source: str = "horovodrun"
    fallback_reason: Optional[str] = None


def run_horovodrun_check_build(prefix: Path, timeout: float) -> CheckBuildResult:
    """Run and parse a real ``<prefix>/bin/horovodrun --check-build``.

    Args:
        prefix: the environment.
        timeout: seconds before it counts as hung.
    Returns:
        a :class:`CheckBuildResult` with ``source="horovodrun"``; never raises for a missing,
        failing or hanging ``horovodrun`` (``error`` says what happened).
    """
    from envtool.horovod import checkbuild

    started = time.monotonic()
    try:
        text = vprobes.check_build_output(Path(prefix), timeout=timeout)
    except FileNotFoundError as exc:
        return CheckBuildResult(error=f"no horovodrun in the environment ({exc})")
    except subprocess.TimeoutExpired:
        return CheckBuildResult(error=f"horovodrun --check-build gave no answer within {timeout:.0f} s",
                                seconds=time.monotonic() - started)
    except OSError as exc:
        return CheckBuildResult(error=f"cannot run horovodrun: {exc.strerror}")
    seconds = time.monotonic() - started
    try:
        return CheckBuildResult(text, checkbuild.parse(text), None, seconds)
    except checkbuild.CheckBuildParseError as exc:
        return CheckBuildResult(text, None, str(exc), seconds)


def probe_check_build(ctx) -> CheckBuildResult:
    """What ``horovodrun --check-build`` reports: from the ``info`` probe's API record when it can
    answer (:func:`envtool.horovod.checkbuild.from_api`), else from a real ``horovodrun
    --check-build`` (:func:`run_horovodrun_check_build`, ``ctx.timeout`` seconds).

    Args:
        ctx: the :class:`envtool.checks.model.Context` (waits for its ``info`` probe).
    Returns:
        a :class:`CheckBuildResult`; ``source`` says which answered and ``fallback_reason`` why
        the API did not.
    """
    from envtool.horovod import checkbuild

    info = ctx.probe("info")
    if info.error:
        reason = f"the info probe gave no answer ({info.error})"
    elif not info.data.get("horovod_present"):
        reason = "horovod is not on the interpreter's sys.path"
    else:
        try:
            parsed = checkbuild.from_api(info.data.get("check_build_api"))
            return CheckBuildResult(parsed=parsed, seconds=info.seconds, source="api")
        except checkbuild.ApiUnanswered as exc:
            reason = str(exc)
    result = run_horovodrun_check_build(Path(ctx.prefix), ctx.timeout)
    return replace(result, seconds=info.seconds + result.seconds, fallback_reason=reason)


@dataclass(frozen=True)
class InfoResult:
    """The ``info`` probe: ``data`` is the JSON the env's interpreter printed (see
    :mod:`envtool.probes.env_info`), empty with ``error`` set when it did not answer."""

    data: Dict[str, Any] = field(default_factory=dict)
    error: Optional[str] = None
    seconds: float = 0.0
    output_tail: str = ""

    def module(self, name: str) -> Dict[str, Any]:
        """The import record of ``name`` (``{}`` when it was not tried)."""
        return (self.data.get("modules") or {}).get(name) or {}


def probe_info(ctx) -> InfoResult:
    """Run ``envtool/probes/env_info.py`` with the env's interpreter (``ctx.timeout`` seconds)."""
    if not ctx.python.exists():
        return InfoResult(error=f"{ctx.python} does not exist")
    run = _probes.run_probe(ctx.python, "env_info",
                            [json.dumps([list(f) for f in FRAMEWORKS]), json.dumps(API_PROBES)], ctx.timeout,
                            preexec_fn=procs.die_with_parent)
    if run.error or not run.records:
        return InfoResult(error=run.error or "no output", seconds=run.seconds, output_tail=run.output_tail)
    return InfoResult(run.records[-1], None, run.seconds, run.output_tail)


#: The ``dataloader`` probe's result (one class for ``doctor`` and ``create``'s validation).
DataLoaderProbe = vprobes.DataLoaderProbe


def probe_dataloader(ctx) -> DataLoaderProbe:
    """Run ``envtool/probes/dataloader.py --hvd-init``: the default start method, plus the spec's
    ``expect.dataloader_start_method`` when it is another one (``ctx.timeout`` seconds)."""
    if not ctx.python.exists():
        return DataLoaderProbe(error=f"{ctx.python} does not exist")
    methods = ["default"]
    expected = getattr(getattr(ctx.spec, "expect", None), "dataloader_start_method", None)
    if expected:
        methods.append(expected)
    return vprobes.dataloader_methods(ctx.python, methods, ctx.timeout, hvd_init=True)


#: name → function(ctx) for :meth:`envtool.checks.model.Context.probe`.
PROBES = {"check_build": probe_check_build, "info": probe_info, "dataloader": probe_dataloader}
