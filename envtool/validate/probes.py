"""Probes run with an environment's own interpreter: check-build, DataLoader start method, allreduce.

Each probe is a fresh subprocess with a timeout, so a hang (a fork-unsafe MPI stack) or a crash
cannot take envtool down with it. Results are plain dataclasses.
"""
from __future__ import annotations

import json
import os
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

#: Run in the env: a real DataLoader with 2 workers under the start method given in argv[1].
#: multiprocessing.get_start_method(allow_none=True) does not fix the context as a side effect
#: (horovod.md, "DataLoader start method").
DATALOADER_PROBE = r"""
import json, multiprocessing as mp, sys, time
method = sys.argv[1]
default = mp.get_start_method(allow_none=True) or mp.get_context().get_start_method()
import torch
from torch.utils.data import DataLoader, Dataset

class Squares(Dataset):
    def __len__(self):
        return 8
    def __getitem__(self, i):
        return torch.tensor([i * i])

if __name__ == "__main__":
    started = time.monotonic()
    loader = DataLoader(Squares(), batch_size=2, num_workers=2, multiprocessing_context=method)
    total = int(sum(int(b.sum()) for b in loader))
    print(json.dumps({"method": method, "default": default, "total": total,
                      "seconds": round(time.monotonic() - started, 3)}))
"""

#: Expected sum of squares 0..7 returned by the probe's DataLoader.
DATALOADER_TOTAL = sum(i * i for i in range(8))

#: A 2-rank allreduce: each rank contributes its rank + 1; the average is 1.5 for 2 ranks.
ALLREDUCE_PROBE = r"""
import horovod.torch as hvd, torch, json
hvd.init()
t = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), name="envtool.probe")
print(json.dumps({"rank": hvd.rank(), "size": hvd.size(), "value": float(t[0])}), flush=True)
"""


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
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONHOME", None)
    if extra:
        env.update(extra)
    return env


def dataloader(python: Path, method: str, timeout: float = 120.0) -> DataLoaderResult:
    """Iterate a real ``torch.utils.data.DataLoader`` (2 workers) under ``method`` in the env.

    Args:
        python: the env's interpreter.
        method: ``fork``, ``spawn`` or ``forkserver``.
        timeout: seconds before the probe counts as hung.
    Returns:
        a :class:`DataLoaderResult` (never raises for a failing probe).
    """
    import tempfile

    with tempfile.TemporaryDirectory(prefix="envtool-dl-") as tmp:
        script = Path(tmp) / "dataloader_probe.py"  # spawn/forkserver re-import __main__ from a file
        script.write_text(DATALOADER_PROBE)
        try:
            proc = subprocess.run([str(python), str(script), method], capture_output=True, text=True,
                                  timeout=timeout, env=_clean_env(), cwd=tmp)
        except subprocess.TimeoutExpired:
            return DataLoaderResult(method, False, error=f"no result within {timeout:.0f} s (hung workers?)")
        except OSError as exc:
            return DataLoaderResult(method, False, error=f"cannot run {python}: {exc.strerror}")
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout).strip().splitlines()
        return DataLoaderResult(method, False, error=last[-1] if last else f"exit status {proc.returncode}")
    try:
        data = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return DataLoaderResult(method, False, error="unreadable probe output: " + proc.stdout[-200:])
    ok = data.get("total") == DATALOADER_TOTAL
    return DataLoaderResult(method, ok, default_method=data.get("default"), seconds=data.get("seconds"),
                            error=None if ok else f"wrong total {data.get('total')} (expected {DATALOADER_TOTAL})")


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
    proc = subprocess.run([str(Path(prefix) / "bin" / "python"), str(horovodrun), "--check-build"],
                          capture_output=True, text=True, timeout=timeout, env=env)
    return proc.stdout + (("\n" + proc.stderr) if proc.stderr.strip() else "")


def allreduce_command(prefix: Path, ranks: int = 2, controller: str = "gloo") -> list:
    """``horovodrun -np N -H localhost:N --gloo python -c PROBE`` for the env (argv list).

    The launcher words come from the launcher model (:func:`envtool.scheduler.launcher.horovodrun_argv`).
    """
    from envtool.scheduler import launcher

    bin_dir = Path(prefix) / "bin"
    argv = launcher.horovodrun_argv(Path(prefix), ranks, "gloo" if controller == "gloo" else "mpi")
    return argv + [str(bin_dir / "python"), "-c", ALLREDUCE_PROBE]


def parse_allreduce(output: str, ranks: int = 2) -> bool:
    """True when every rank printed the expected average ((1 + … + N) / N).

    Each rank prints one JSON object (``{"rank": 0, "size": 2, "value": 1.5}``). Launchers tag
    and interleave output — Open MPI's ``--tag-output`` can glue a rank's empty tagged line to
    the end of another (``…1.5}[1,1]<stdout>:``) — so the objects are found with a JSON decoder
    at each ``{`` rather than line by line.
    """
    expected = sum(range(1, ranks + 1)) / ranks
    seen = set()
    decoder = json.JSONDecoder()
    pos = output.find("{")
    while pos >= 0:
        try:
            data, end = decoder.raw_decode(output, pos)
        except ValueError:
            pos = output.find("{", pos + 1)
            continue
        if isinstance(data, dict) and data.get("size") == ranks:
            try:
                if abs(float(data.get("value", -1)) - expected) < 1e-6:
                    seen.add(data.get("rank"))
            except (TypeError, ValueError):
                pass
        pos = output.find("{", end)
    return seen == set(range(ranks))
