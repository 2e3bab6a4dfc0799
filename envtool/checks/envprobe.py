"""The environment probes ``doctor`` shares between checks.

Each probe is one subprocess of the environment's own interpreter (or its ``horovodrun``)
with a timeout, run in its own process group so that a hung DataLoader worker is killed with
it. They run concurrently; results are plain data and never raise for a failing environment.

* ``check_build``: :func:`envtool.validate.probes.check_build_output`, parsed with
  :func:`envtool.horovod.checkbuild.parse`.
* ``info``: one fresh interpreter that reports, in this order, the default start method
  (before anything could fix it: ``get_start_method(allow_none=True)``, horovod.md), the
  interpreter, user-site settings and ``sys.path``, then imports the frameworks and Horovod's
  framework extensions (stdout captured, to catch "Extension horovod.torch has not been
  built"), calls the Python API capability probes (``nccl_built`` … ``ccl_built``,
  horovod/common/basics.py@v0.28.1), reads ``horovod/metadata.json``, the MPI library that
  the extension loaded (``MPI_Get_library_version`` through ctypes, callable before
  ``MPI_Init`` by the MPI standard) and torch's CUDA/NCCL view.
* ``dataloader``: ``hvd.init()`` (Gloo when built, in one process), then a
  ``DataLoader`` with 2 workers under the env's default start method and, if different, the
  spec's ``expect.dataloader_start_method``; one JSON line per method, so a hang still
  reports the methods that finished.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from envtool.validate import probes as vprobes

#: Frameworks the info probe imports when installed: module → Horovod extension module.
FRAMEWORKS: Tuple[Tuple[str, str], ...] = (("torch", "horovod.torch"), ("tensorflow", "horovod.tensorflow"),
                                           ("mxnet", "horovod.mxnet"))

#: Horovod's Python API capability probes (horovod/common/basics.py@v0.28.1; cuda/rocm from 0.20).
API_PROBES = ("nccl_built", "mpi_built", "gloo_built", "cuda_built", "rocm_built", "ddl_built", "ccl_built")

INFO_PROBE = r"""
import json, sys
out = {}
import multiprocessing as mp
out["start_method_default"] = mp.get_start_method(allow_none=True) or mp.get_context().get_start_method()
import contextlib, io, importlib, importlib.util, os, platform, site, traceback
out["python"] = platform.python_version()
out["implementation"] = platform.python_implementation()
out["prefix"] = sys.prefix
out["base_prefix"] = sys.base_prefix
out["executable"] = sys.executable
out["enable_user_site"] = bool(site.ENABLE_USER_SITE)
out["user_site"] = site.getusersitepackages()
out["sys_path"] = [p for p in sys.path if p]
frameworks = json.loads(sys.argv[1])
api = json.loads(sys.argv[2])
mods = {}
def version_of(mod):
    v = getattr(mod, "__version__", None)
    return str(v) if v is not None else None
def try_import(name, capture=False):
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf) if capture else contextlib.nullcontext():
            mod = importlib.import_module(name)
        return mod, {"ok": True, "version": version_of(mod), "file": getattr(mod, "__file__", None),
                     "printed": buf.getvalue().strip()}
    except BaseException as exc:
        return None, {"ok": False, "error": f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:500],
                      "error_full": str(exc)[:2000], "printed": buf.getvalue().strip()}
present = {}
for fw, ext in frameworks:
    present[fw] = importlib.util.find_spec(fw) is not None
    if present[fw]:
        mod, mods[fw] = try_import(fw)
hvd_present = importlib.util.find_spec("horovod") is not None
out["horovod_present"] = hvd_present
caps = None
if hvd_present:
    mod, mods["horovod"] = try_import("horovod")
    if mod is not None:
        meta = os.path.join(os.path.dirname(mod.__file__), "metadata.json")
        try:
            with open(meta) as f:
                out["horovod_metadata"] = json.load(f)
        except (OSError, ValueError) as exc:
            out["horovod_metadata"] = None
        out["horovod_metadata_path"] = meta
        for fw, ext in frameworks:
            if not present.get(fw) or not mods.get(fw, {}).get("ok"):
                continue
            emod, info = try_import(ext, capture=True)
            info["built"] = bool(emod is not None and "has not been built" not in info["printed"]
                                 and hasattr(emod, "init"))
            mods[ext] = info
            if info["built"] and caps is None:
                caps = {"from": ext}
                for name in api:
                    fn = getattr(emod, name, None)
                    try:
                        caps[name] = fn() if fn is not None else None
                    except Exception as exc:
                        caps[name] = None
out["capabilities"] = caps
mpi = None
def _is_mpi(path):
    base = os.path.basename(path)
    return base.startswith("libmpi") and not base.startswith(("libmpi_cxx", "libmpi_mpifh", "libmpi_usempi"))
try:
    with open("/proc/self/maps") as f:
        libs = sorted({l.split()[-1] for l in f if "/libmpi" in l and _is_mpi(l.split()[-1])})
except OSError:
    libs = []
if libs:
    mpi = {"library": libs[0]}
    try:
        import ctypes
        lib = ctypes.CDLL(libs[0])
        buf = ctypes.create_string_buffer(8192)
        n = ctypes.c_int(0)
        if lib.MPI_Get_library_version(buf, ctypes.byref(n)) == 0:
            mpi["version"] = buf.value[: n.value].decode(errors="replace").strip()
    except Exception as exc:
        mpi["error"] = f"{type(exc).__name__}: {exc}"
out["mpi"] = mpi
cuda = None
if mods.get("torch", {}).get("ok"):
    import torch
    cuda = {"torch_cuda": getattr(getattr(torch, "version", None), "cuda", None)}
    try:
        cuda["available"] = bool(torch.cuda.is_available())
        cuda["device_count"] = int(torch.cuda.device_count())
        if cuda["available"]:
            cuda["devices"] = [torch.cuda.get_device_name(i) for i in range(cuda["device_count"])]
            v = torch.cuda.nccl.version()
            cuda["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception as exc:
        cuda["error"] = f"{type(exc).__name__}: {exc}"
out["cuda"] = cuda
out["modules"] = mods
print("ENVTOOL-PROBE " + json.dumps(out, default=str), flush=True)
"""

#: hvd.init() with Gloo (MPI when Gloo is not built) in this one process, then a DataLoader
#: with 2 workers for each start method in argv[1] ("default" = the env's default).
DATALOADER_HVD_PROBE = r"""
import json, multiprocessing as mp, os, sys, time
try:
    import torch
    from torch.utils.data import DataLoader, Dataset
except BaseException as exc:  # report why torch does not import, then stop
    missing = isinstance(exc, ModuleNotFoundError) and exc.name == "torch"
    print("ENVTOOL-PROBE " + json.dumps({"torch_import_error": f"{type(exc).__name__}: {exc}"[:500],
                                         "missing": missing}), flush=True)
    sys.exit(3)

class Squares(Dataset):
    def __len__(self):
        return 8
    def __getitem__(self, i):
        return torch.tensor([i * i])

def say(obj):
    print("ENVTOOL-PROBE " + json.dumps(obj), flush=True)

if __name__ == "__main__":
    default = mp.get_start_method(allow_none=True) or mp.get_context().get_start_method()
    say({"default": default})
    controller = None
    try:
        import horovod.torch as hvd
        if not hasattr(hvd, "init"):
            raise ImportError("horovod.torch has no init (extension not built)")
        if hvd.gloo_built():
            os.environ["HOROVOD_CONTROLLER"] = "gloo"
            os.environ["HOROVOD_CPU_OPERATIONS"] = "gloo"
        hvd.init()
        controller = "gloo" if hvd.gloo_enabled() else ("mpi" if hvd.mpi_enabled() else "unknown")
        say({"hvd_init": True, "controller": controller, "size": hvd.size()})
    except Exception as exc:
        say({"hvd_init": False, "error": f"{type(exc).__name__}: {exc}"[:300]})
    for method in json.loads(sys.argv[1]):
        method = default if method == "default" else method
        started = time.monotonic()
        try:
            loader = DataLoader(Squares(), batch_size=2, num_workers=2, multiprocessing_context=method)
            total = int(sum(int(b.sum()) for b in loader))
            say({"method": method, "total": total, "seconds": round(time.monotonic() - started, 3)})
        except Exception as exc:
            say({"method": method, "error": f"{type(exc).__name__}: {exc}"[:300],
                 "seconds": round(time.monotonic() - started, 3)})
"""


@dataclass(frozen=True)
class ProbeRun:
    """A finished probe subprocess.

    Attributes:
        records: the JSON objects it printed on ``ENVTOOL-PROBE`` lines, in order.
        returncode: its exit status (None when it timed out or could not start).
        timed_out: it ran past the timeout and was killed with its process group.
        output_tail: the last lines of stdout+stderr (for error messages).
        seconds: wall time (s).
        error: why it produced nothing usable, or None.
    """

    records: Tuple[Dict[str, Any], ...] = ()
    returncode: Optional[int] = None
    timed_out: bool = False
    output_tail: str = ""
    seconds: float = 0.0
    error: Optional[str] = None


def run_script(python: Path, script: str, args: List[str], timeout: float, env: Optional[dict] = None) -> ProbeRun:
    """Run ``script`` (written to a temporary file, so spawn/forkserver children can re-import it)
    with ``python`` in a new session; kill the whole group after ``timeout`` seconds.

    Returns:
        a :class:`ProbeRun` (never raises for a failing or hanging probe).
    """
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="envtool-doctor-") as tmp:
        path = Path(tmp) / "envtool_doctor_probe.py"
        path.write_text(script)
        try:
            proc = subprocess.Popen([str(python), str(path), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    cwd=tmp, env=env or vprobes._clean_env(), start_new_session=True)
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
    records = []
    for line in text.splitlines():
        if line.startswith("ENVTOOL-PROBE "):
            try:
                records.append(json.loads(line[len("ENVTOOL-PROBE "):]))
            except ValueError:
                pass
    tail = "\n".join((text + "\n" + errtext).strip().splitlines()[-15:])
    error = None
    if timed_out:
        error = f"no answer within {timeout:.0f} s"
    elif not records:
        last = [ln for ln in errtext.strip().splitlines() if ln.strip()]
        error = last[-1] if last else f"exit status {proc.returncode}, no output"
    return ProbeRun(tuple(records), None if timed_out else proc.returncode, timed_out, tail,
                    time.monotonic() - started, error)


@dataclass(frozen=True)
class CheckBuildResult:
    """``horovodrun --check-build`` in the env.

    Attributes:
        text: its output ('' when it could not run).
        parsed: the :class:`envtool.horovod.checkbuild.CheckBuild`, or None.
        error: why there is no parse, or None.
        seconds: wall time (s).
    """

    text: str = ""
    parsed: Any = None
    error: Optional[str] = None
    seconds: float = 0.0


def probe_check_build(ctx) -> CheckBuildResult:
    """Run and parse ``<prefix>/bin/horovodrun --check-build`` (``ctx.timeout`` seconds)."""
    from envtool.horovod import checkbuild

    started = time.monotonic()
    try:
        text = vprobes.check_build_output(Path(ctx.prefix), timeout=ctx.timeout)
    except FileNotFoundError as exc:
        return CheckBuildResult(error=f"no horovodrun in the environment ({exc})")
    except subprocess.TimeoutExpired:
        return CheckBuildResult(error=f"horovodrun --check-build gave no answer within {ctx.timeout:.0f} s",
                                seconds=time.monotonic() - started)
    except OSError as exc:
        return CheckBuildResult(error=f"cannot run horovodrun: {exc.strerror}")
    seconds = time.monotonic() - started
    try:
        return CheckBuildResult(text, checkbuild.parse(text), None, seconds)
    except checkbuild.CheckBuildParseError as exc:
        return CheckBuildResult(text, None, str(exc), seconds)


@dataclass(frozen=True)
class InfoResult:
    """The ``info`` probe: ``data`` is the JSON the env's interpreter printed (see
    :data:`INFO_PROBE`), empty with ``error`` set when it did not answer."""

    data: Dict[str, Any] = field(default_factory=dict)
    error: Optional[str] = None
    seconds: float = 0.0
    output_tail: str = ""

    def module(self, name: str) -> Dict[str, Any]:
        """The import record of ``name`` (``{}`` when it was not tried)."""
        return (self.data.get("modules") or {}).get(name) or {}


def probe_info(ctx) -> InfoResult:
    """Run :data:`INFO_PROBE` with the env's interpreter."""
    if not ctx.python.exists():
        return InfoResult(error=f"{ctx.python} does not exist")
    run = run_script(ctx.python, INFO_PROBE, [json.dumps([list(f) for f in FRAMEWORKS]), json.dumps(API_PROBES)],
                     ctx.timeout)
    if run.error or not run.records:
        return InfoResult(error=run.error or "no output", seconds=run.seconds, output_tail=run.output_tail)
    return InfoResult(run.records[-1], None, run.seconds, run.output_tail)


@dataclass(frozen=True)
class DataLoaderProbe:
    """The ``dataloader`` probe.

    Attributes:
        default: the env's default start method (None if the probe died first).
        hvd_init: True when ``hvd.init()`` succeeded, False when it failed, None when not reached.
        controller: ``gloo`` / ``mpi`` after init, or None.
        init_error: why ``hvd.init()`` failed.
        results: :class:`envtool.validate.probes.DataLoaderResult` per method tried.
        error: the probe as a whole failed (no torch, timed out before any method), or None.
        seconds: wall time (s).
    """

    default: Optional[str] = None
    hvd_init: Optional[bool] = None
    controller: Optional[str] = None
    init_error: Optional[str] = None
    results: Tuple[Any, ...] = ()
    error: Optional[str] = None
    seconds: float = 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["results"] = [r.to_dict() for r in self.results]
        return d


def probe_dataloader(ctx) -> DataLoaderProbe:
    """Run :data:`DATALOADER_HVD_PROBE`: the default start method, plus the spec's
    ``expect.dataloader_start_method`` when it is another one."""
    if not ctx.python.exists():
        return DataLoaderProbe(error=f"{ctx.python} does not exist")
    methods = ["default"]
    expected = getattr(getattr(ctx.spec, "expect", None), "dataloader_start_method", None)
    if expected:
        methods.append(expected)
    run = run_script(ctx.python, DATALOADER_HVD_PROBE, [json.dumps(methods)], ctx.timeout)
    default = hvd_init = controller = init_error = None
    results = []
    seen = set()
    import_error = None
    for rec in run.records:
        if "torch_import_error" in rec:
            import_error = "torch is not installed" if rec.get("missing") else \
                "torch fails to import: " + rec["torch_import_error"]
        elif "default" in rec:
            default = rec["default"]
        elif "hvd_init" in rec:
            hvd_init = rec["hvd_init"]
            controller = rec.get("controller")
            init_error = rec.get("error")
        elif "method" in rec:
            if rec["method"] in seen:
                continue
            seen.add(rec["method"])
            ok = rec.get("total") == vprobes.DATALOADER_TOTAL
            err = rec.get("error") or (None if ok else
                                       f"wrong total {rec.get('total')} (expected {vprobes.DATALOADER_TOTAL})")
            results.append(vprobes.DataLoaderResult(rec["method"], ok, default, rec.get("seconds"), err))
    wanted = [default if m == "default" else m for m in methods]
    if default is not None:
        for m in dict.fromkeys(wanted):
            if m not in seen:
                why = (f"no result within {ctx.timeout:.0f} s (hung workers?)" if run.timed_out
                       else "probe died: " + (run.error or (run.output_tail.splitlines() or ["no output"])[-1]))
                results.append(vprobes.DataLoaderResult(m, False, default, None, why))
    error = None
    if default is None:
        error = import_error or run.error or "probe printed nothing"
        if import_error is None and "No module named 'torch'" in run.output_tail:
            error = "torch is not installed"
    return DataLoaderProbe(default, hvd_init, controller, init_error, tuple(results), error, run.seconds)


#: name → function(ctx) for :meth:`envtool.checks.model.Context.probe`.
PROBES = {"check_build": probe_check_build, "info": probe_info, "dataloader": probe_dataloader}
