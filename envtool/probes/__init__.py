"""Probes: small standalone scripts run with an environment's own interpreter.

envtool is not installed in the environments it examines, so a probe cannot import envtool
there. Each module in this package (except this one) is therefore a self-contained script:

* it imports only the standard library at module level, and what it probes (``torch``,
  ``horovod.torch``) inside functions, so envtool (and the tests) can import it for its
  constants and pure helpers without those frameworks;
* it takes its inputs as command-line arguments (JSON where structured);
* it prints its results as JSON objects, one per line, each prefixed with :data:`MARKER`, so
  launcher noise, framework banners and a run cut short by a timeout still leave readable
  records;
* it has a ``main(argv=None) -> int`` and runs when executed by path::

      <prefix>/bin/python /abs/path/to/envtool/probes/dataloader.py --hvd-init default forkserver

  (``python -m envtool.probes.x`` cannot work in the target env: envtool is not importable there).
* it stays runnable by Python 3.6, the oldest interpreter a bundled spec names
  (``specs/ibm-wml-ce-1.6.1.yaml``): no ``from __future__ import annotations``, no ``:=``.

Probes: :data:`NAMES`. This module holds the envtool side: where the scripts are
(:func:`probe_path`), how they are run (:func:`run_probe`: a new session, killed as a whole
process group at the timeout) and how their output is read (:func:`parse_records`).
It imports nothing from envtool, so every layer may use it.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

#: The probe scripts in this package (file name without ``.py``).
NAMES: Tuple[str, ...] = ("env_info", "dataloader", "allreduce", "framework_versions", "bytecode", "imports",
                          "site_dirs")
#: Standalone helper modules the probes (and the rank probe, beside which they are copied) import
#: from their own directory; they have no ``main``.
HELPERS: Tuple[str, ...] = ("tf_checks",)

#: Prefix of every line a probe prints a JSON record on (each probe module repeats it; a test
#: checks they agree).
MARKER = "ENVTOOL-PROBE "


def probe_path(name: str) -> Path:
    """The absolute path of probe ``name``'s script, to run as ``<python> PATH ARGS``.

    Args:
        name: one of :data:`NAMES` (``"dataloader"``, not ``"dataloader.py"``).
    Returns:
        the ``.py`` file inside this installed package (absolute).
    Raises:
        ValueError: ``name`` is not a probe.
        FileNotFoundError: the script is missing (envtool installed without its data files).
    """
    if name not in NAMES:
        raise ValueError(f"unknown probe {name!r} (expected one of: {', '.join(NAMES)})")
    path = Path(__file__).resolve().parent / f"{name}.py"
    if not path.is_file():
        raise FileNotFoundError(f"probe script {path} is missing from this envtool installation")
    return path


def parse_records(text: str) -> List[Dict[str, Any]]:
    """The JSON objects printed on :data:`MARKER` lines of ``text``, in order.

    A line whose JSON does not decode to an object (cut off by a kill) is skipped.

    Args:
        text: a probe's stdout (or stdout and stderr together).
    Returns:
        a list of dicts (empty when there is none).
    """
    records = []
    for line in text.splitlines():
        if not line.startswith(MARKER):
            continue
        try:
            data = json.loads(line[len(MARKER):])
        except ValueError:
            continue
        if isinstance(data, dict):
            records.append(data)
    return records


def clean_env(extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """``os.environ`` for a probe: unbuffered output, without ``PYTHONPATH``/``PYTHONHOME``
    (which would make the env's interpreter read another Python's modules).

    Args:
        extra: variables to add or replace.
    Returns:
        a new dict.
    """
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONHOME", None)
    if extra:
        env.update(extra)
    return env


@dataclass(frozen=True)
class ProbeRun:
    """A finished probe subprocess.

    Attributes:
        records: the JSON objects it printed on :data:`MARKER` lines, in order.
        returncode: its exit status (None when it timed out or could not start).
        timed_out: it ran past the timeout and was killed with its process group.
        output_tail: the last 15 lines of stdout+stderr (for error messages).
        seconds: wall time (s).
        error: why it produced no record (cannot start, timed out, the last stderr line), or None.
    """

    records: Tuple[Dict[str, Any], ...] = ()
    returncode: Optional[int] = None
    timed_out: bool = False
    output_tail: str = ""
    seconds: float = 0.0
    error: Optional[str] = None


def run_file(python: Path, script: Path, args: Sequence[str], timeout: float,
             env: Optional[Mapping[str, str]] = None, preexec_fn=None) -> ProbeRun:
    """Run ``python script ARGS`` in a new session from an empty temporary directory; kill the
    whole process group (DataLoader workers, a launcher's children) after ``timeout`` seconds.

    Args:
        python: the environment's interpreter.
        script: the script file (a file, so spawn/forkserver children can re-import it).
        args: its arguments.
        timeout: seconds before the probe counts as hung.
        env: its environment (default :func:`clean_env`).
        preexec_fn: run in the child before ``exec`` (the caller's "die with me":
            ``envtool.core.procs.die_with_parent``), or None.
    Returns:
        a :class:`ProbeRun`; never raises for a failing, crashing or hanging probe.
    """
    import tempfile

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="envtool-probe-") as tmp:
        try:
            proc = subprocess.Popen([str(python), str(script), *[str(a) for a in args]], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=tmp,
                                    env=dict(env) if env is not None else clean_env(), start_new_session=True,
                                    preexec_fn=preexec_fn)
        except OSError as exc:
            return ProbeRun(error=f"cannot run {python}: {exc.strerror}", seconds=time.monotonic() - started)
        timed_out = False
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            out, err = proc.communicate()
    text = out.decode(errors="replace")
    errtext = err.decode(errors="replace")
    records = parse_records(text)
    tail = "\n".join((text + "\n" + errtext).strip().splitlines()[-15:])
    error = None
    if timed_out:
        error = f"no answer within {timeout:.0f} s"
    elif not records:
        last = [ln for ln in errtext.strip().splitlines() if ln.strip()]
        error = last[-1] if last else f"exit status {proc.returncode}, no output"
    return ProbeRun(tuple(records), None if timed_out else proc.returncode, timed_out, tail,
                    time.monotonic() - started, error)


def run_probe(python: Path, name: str, args: Sequence[str], timeout: float,
              env: Optional[Mapping[str, str]] = None, preexec_fn=None) -> ProbeRun:
    """Run probe ``name`` (:func:`probe_path`) with ``python``; see :func:`run_file`.

    Raises:
        ValueError, FileNotFoundError: from :func:`probe_path` (a bug or a broken install,
            not a problem of the environment probed).
    """
    return run_file(python, probe_path(name), args, timeout, env, preexec_fn=preexec_fn)
