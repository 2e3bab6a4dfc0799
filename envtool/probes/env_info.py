"""Probe: what one fresh interpreter of the environment sees (for ``doctor``).

Run with the environment's interpreter (standalone: only the standard library at module level;
the frameworks are imported by :func:`collect`)::

    python env_info.py FRAMEWORKS_JSON API_JSON

``FRAMEWORKS_JSON``: ``[["torch", "horovod.torch"], ...]``, each framework's import name and its
Horovod extension module; ``API_JSON``: names of Horovod's capability functions to call
(``["nccl_built", "mpi_built", ...]``, ``horovod/common/basics.py@v0.28.1``). Both default to
``[]``. envtool passes its own tables (``envtool.checks.envprobe``).

Prints one JSON object after ``ENVTOOL-PROBE ``, with, gathered in this order:

* ``start_method_default``: the default start method, read first, before any import could fix
  it (``get_start_method(allow_none=True)``; ``docs/reference/horovod.md``);
* ``python``, ``implementation``, ``prefix``, ``base_prefix``, ``executable``,
  ``enable_user_site``, ``user_site``, ``sys_path`` (without this script's own directory, which
  Python puts first only because the probe runs from a file);
* ``modules``: per framework found on ``sys.path``, its import record (``ok``, ``version``,
  ``file`` or ``error``/``error_full``, ``printed``); per Horovod extension of an importable
  framework, the same plus ``built`` (imported, has ``init`` and did not print "has not been
  built": Horovod prints that instead of raising);
* ``horovod_present``, ``horovod_metadata`` (``horovod/metadata.json``) and its path;
* ``capabilities``: the API functions' results from the first built extension, or null;
* ``check_build_api`` (only when ``horovod`` imported): what ``horovodrun --check-build`` would
  ask, gathered in this process the way its ``check_build`` asks it in forked children
  (horovod/horovod@v0.28.1:horovod/runner/launch.py ``check_build``,
  horovod/horovod@v0.28.1:horovod/common/util.py ``extension_available``, ``mpi_built`` …):
  ``version`` (``horovod.__version__``) and ``extensions``, one entry per extension module of
  ``FRAMEWORKS_JSON`` in its order (every one, installed framework or not), each with
  ``imported`` (``import horovod.<x>`` raised nothing), ``error``, ``not_built`` (the error or
  the printed text is Horovod's "has not been built"), ``framework_installed`` (its framework
  is on ``sys.path``) and, when imported, ``api`` (name → return value of each API function that
  returned) and ``api_errors`` (name → error of each one missing or raising);
* ``mpi``: the MPI library the extension loaded (``/proc/self/maps``) and its
  ``MPI_Get_library_version`` string (callable before ``MPI_Init`` by the MPI standard), or null;
* ``cuda``: torch's CUDA view (``torch.version.cuda``, devices, NCCL version), or null.

Exit status: 0 (the record says what failed), 2 for bad arguments.
"""
import contextlib
import importlib
import importlib.util
import io
import json
import multiprocessing
import os
import platform
import site
import sys

#: Line prefix of every record (the same in every probe and in ``envtool.probes.MARKER``).
MARKER = "ENVTOOL-PROBE "

#: What ``import horovod.torch`` prints, instead of raising, when the extension was not compiled:
#: ``check_extension`` raises it (horovod/common/util.py@v0.28.1) and the package's
#: ``__init__`` prints the error and goes on (horovod/torch/__init__.py@v0.28.1).
NOT_BUILT = "has not been built"

#: Libraries named ``libmpi*`` that are language bindings, not the MPI library itself.
MPI_BINDINGS = ("libmpi_cxx", "libmpi_mpifh", "libmpi_usempi")


def default_start_method():
    """The interpreter's default start method, unfixed (str); see the module docstring."""
    return multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_context().get_start_method()


def interpreter(own_dir=None):
    """The interpreter's identity and import path.

    Args:
        own_dir: a directory to leave out of ``sys_path`` (this script's), or None.
    Returns:
        a dict with ``python``, ``implementation``, ``prefix``, ``base_prefix``, ``executable``,
        ``enable_user_site`` (bool), ``user_site`` (str) and ``sys_path`` (non-empty entries, in order).
    """
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "prefix": sys.prefix,
        "base_prefix": sys.base_prefix,
        "executable": sys.executable,
        "enable_user_site": bool(site.ENABLE_USER_SITE),
        "user_site": site.getusersitepackages(),
        "sys_path": [p for p in sys.path if p and (own_dir is None or os.path.abspath(p) != own_dir)],
    }


def version_of(module):
    """``module.__version__`` as a str, or None when it has none."""
    version = getattr(module, "__version__", None)
    return str(version) if version is not None else None


def try_import(name, capture=False):
    """Import ``name``, never raising.

    Args:
        name: a module name.
        capture: capture what the import prints on stdout (Horovod's "has not been built").
    Returns:
        ``(module or None, record)``; the record has ``ok``, ``printed`` and either ``version``
        and ``file`` or ``error`` (first line, ≤ 500 characters) and ``error_full`` (≤ 2000).
    """
    buf = io.StringIO()
    try:
        context = contextlib.redirect_stdout(buf) if capture else _no_context()
        with context:
            module = importlib.import_module(name)
        return module, {"ok": True, "version": version_of(module), "file": getattr(module, "__file__", None),
                        "printed": buf.getvalue().strip()}
    except BaseException as exc:  # an extension can raise anything, SystemExit included
        return None, {"ok": False, "error": "{}: {}".format(type(exc).__name__, exc).strip().splitlines()[0][:500],
                      "error_full": str(exc)[:2000], "printed": buf.getvalue().strip()}


@contextlib.contextmanager
def _no_context():
    yield


def extension_built(module, printed):
    """True when a Horovod framework extension really loaded.

    Args:
        module: the imported extension module, or None when the import failed.
        printed: what its import printed (str).
    Returns:
        bool: imported, did not print :data:`NOT_BUILT`, and has ``init``.
    """
    return bool(module is not None and NOT_BUILT not in printed and hasattr(module, "init"))


def call_api(module, names):
    """Call each capability function ``names`` of ``module`` (None when missing or raising).

    Returns:
        a dict name → result.
    """
    out = {}
    for name in names:
        fn = getattr(module, name, None)
        try:
            out[name] = fn() if fn is not None else None
        except Exception:
            out[name] = None
    return out


def call_api_checked(module, names):
    """Call each capability function ``names`` of ``module`` the way ``horovodrun --check-build``
    does (``fn(ext)`` inside ``try``; horovod/horovod@v0.28.1:horovod/common/util.py
    ``_check_extension_lambda``), keeping a raised error apart from a returned value.

    Returns:
        ``(values, errors)``: dicts name → return value (JSON-ready: bool/int/str) and name →
        ``"TypeName: message"`` (first line, ≤ 300 characters) of a missing or raising function.
    """
    values, errors = {}, {}
    for name in names:
        fn = getattr(module, name, None)
        if fn is None:
            errors[name] = "AttributeError: {} has no {}".format(getattr(module, "__name__", "?"), name)
            continue
        try:
            value = fn()
        except BaseException as exc:  # an extension can raise anything
            errors[name] = "{}: {}".format(type(exc).__name__, exc).strip().splitlines()[0][:300]
            continue
        values[name] = value if isinstance(value, (bool, int, float, str, type(None))) else str(value)
    return values, errors


def check_build_api(frameworks, api, present, loaded, version):
    """The ``check_build_api`` record (see the module docstring).

    ``horovodrun --check-build`` imports ``horovod.tensorflow``, ``horovod.torch`` and
    ``horovod.mxnet`` each in a forked child, whether the framework is installed or not, and
    counts a framework as available when the import raises nothing (``horovod.torch`` only
    prints "has not been built" and still imports); a capability (``mpi_built`` …) is the first
    non-None answer of those extensions in that order. This gathers the same facts in this
    process; envtool turns them into the check-build table
    (``envtool.horovod.checkbuild.from_api``).

    Args:
        frameworks: ``[(framework module, extension module), ...]`` in check-build order.
        api: capability function names to call on each imported extension.
        present: framework module → found on ``sys.path`` (bool).
        loaded: extension module → ``(module or None, import record)`` (:func:`try_import`), for the
            extensions :func:`collect` tried already (each is imported once).
        version: ``horovod.__version__`` (str or None).
    Returns:
        a JSON-ready dict with ``version`` and ``extensions`` (ordered list of dicts).
    """
    extensions = []
    for fw, ext in frameworks:
        if ext in loaded:
            emod, record = loaded[ext]
        else:
            emod, record = try_import(ext, capture=True)
        entry = {"module": ext, "framework": fw, "framework_installed": bool(present.get(fw)),
                 "imported": emod is not None, "error": record.get("error"),
                 "not_built": NOT_BUILT in ((record.get("error_full") or "") + (record.get("printed") or ""))}
        if emod is not None:
            entry["api"], entry["api_errors"] = call_api_checked(emod, api)
        extensions.append(entry)
    return {"version": version, "extensions": extensions}


def is_mpi_library(path):
    """True when ``path``'s file name is an MPI library (Open MPI's ``libmpi.so.40``, MPICH's
    ``libmpich.so.12``), not a language binding (``libmpi_cxx``, ``libmpi_mpifh``, ``libmpi_usempi*``)."""
    base = os.path.basename(path)
    return base.startswith("libmpi") and not base.startswith(MPI_BINDINGS)


def mpi_libraries(maps_lines):
    """The MPI libraries mapped into a process.

    Args:
        maps_lines: lines of ``/proc/<pid>/maps`` (iterable of str).
    Returns:
        sorted distinct paths of MPI libraries (list of str).
    """
    found = set()
    for line in maps_lines:
        fields = line.split()
        if fields and "/libmpi" in fields[-1] and is_mpi_library(fields[-1]):
            found.add(fields[-1])
    return sorted(found)


def mpi_info():
    """The MPI library loaded into this process and its version string, or None when none is."""
    try:
        with open("/proc/self/maps") as f:
            libs = mpi_libraries(f)
    except OSError:
        libs = []
    if not libs:
        return None
    mpi = {"library": libs[0]}
    try:
        import ctypes
        lib = ctypes.CDLL(libs[0])
        buf = ctypes.create_string_buffer(8192)
        n = ctypes.c_int(0)
        if lib.MPI_Get_library_version(buf, ctypes.byref(n)) == 0:
            mpi["version"] = buf.value[: n.value].decode(errors="replace").strip()
    except Exception as exc:
        mpi["error"] = "{}: {}".format(type(exc).__name__, exc)
    return mpi


def cuda_info():
    """torch's CUDA view: ``torch_cuda``, ``available``, ``device_count`` and, with devices,
    ``arch_list`` (``torch.cuda.get_arch_list()``), ``devices`` and ``nccl`` (``"2.18.3"``);
    ``error`` when a call raised."""
    import torch
    cuda = {"torch_cuda": getattr(getattr(torch, "version", None), "cuda", None)}
    try:
        cuda["available"] = available = bool(torch.cuda.is_available())
        cuda["device_count"] = count = int(torch.cuda.device_count())
        if available:
            # the targets compiled into torch (sm_80, compute_90): the arch gate checks the GPU against them
            if hasattr(torch.cuda, "get_arch_list"):  # torch >= 1.6
                cuda["arch_list"] = list(torch.cuda.get_arch_list())
            cuda["devices"] = [torch.cuda.get_device_name(i) for i in range(count)]
            version = torch.cuda.nccl.version()
            cuda["nccl"] = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    except Exception as exc:
        cuda["error"] = "{}: {}".format(type(exc).__name__, exc)
    return cuda


def tf_gpu_info():
    """TensorFlow's GPU view: ``built_with_cuda`` (``tf.test.is_built_with_cuda()``), ``cuda`` and
    ``cudnn`` (``tf.sysconfig.get_build_info()``, None for a CPU build), ``devices`` (the names of
    ``tf.config.list_physical_devices("GPU")``); ``error`` when a call raised
    (https://www.tensorflow.org/api_docs/python/tf/config/list_physical_devices)."""
    import tensorflow as tf
    out = {"built_with_cuda": None, "cuda": None, "cudnn": None, "devices": []}  # type: dict
    try:
        out["built_with_cuda"] = bool(tf.test.is_built_with_cuda())
        get_build_info = getattr(tf.sysconfig, "get_build_info", None)  # TensorFlow >= 2.3
        build = dict(get_build_info()) if get_build_info is not None else {}
        out["cuda"] = build.get("cuda_version")
        out["cudnn"] = build.get("cudnn_version")
        listing = getattr(getattr(tf, "config", None), "list_physical_devices", None)  # TensorFlow >= 2.1
        if listing is None:
            listing = getattr(getattr(getattr(tf, "config", None), "experimental", None), "list_physical_devices", None)
        if listing is None:
            out["devices"] = None
            out["unknown"] = "TensorFlow %s cannot list its devices (tf.config.list_physical_devices)" % tf.__version__
        else:
            out["devices"] = [d.name for d in listing("GPU")]
    except Exception as exc:
        out["error"] = "{}: {}".format(type(exc).__name__, exc)
    return out


def collect(frameworks, api, own_dir=None):
    """Everything the probe reports (see the module docstring), except ``start_method_default``.

    Args:
        frameworks: ``[(framework module, Horovod extension module), ...]``.
        api: Horovod capability function names.
        own_dir: passed to :func:`interpreter`.
    Returns:
        a JSON-serializable dict (``default=str`` for odd values).
    """
    out = interpreter(own_dir)
    mods = {}
    present = {}
    for fw, _ext in frameworks:
        present[fw] = importlib.util.find_spec(fw) is not None
        if present[fw]:
            _mod, mods[fw] = try_import(fw)
    hvd_present = importlib.util.find_spec("horovod") is not None
    out["horovod_present"] = hvd_present
    caps = None
    loaded = {}
    if hvd_present:
        hvd, mods["horovod"] = try_import("horovod")
        if hvd is not None:
            meta = os.path.join(os.path.dirname(hvd.__file__), "metadata.json")
            try:
                with open(meta) as f:
                    out["horovod_metadata"] = json.load(f)
            except (OSError, ValueError):
                out["horovod_metadata"] = None
            out["horovod_metadata_path"] = meta
            for fw, ext in frameworks:
                if not present.get(fw) or not mods.get(fw, {}).get("ok"):
                    continue
                emod, record = try_import(ext, capture=True)
                record["built"] = extension_built(emod, record["printed"])
                mods[ext] = record
                loaded[ext] = (emod, record)
                if record["built"] and caps is None:
                    caps = {"from": ext}
                    caps.update(call_api(emod, api))
    out["capabilities"] = caps
    if hvd_present and mods.get("horovod", {}).get("ok"):
        out["check_build_api"] = check_build_api(frameworks, api, present, loaded, mods["horovod"].get("version"))
    out["mpi"] = mpi_info()
    out["cuda"] = cuda_info() if mods.get("torch", {}).get("ok") else None
    out["tf_gpu"] = tf_gpu_info() if mods.get("tensorflow", {}).get("ok") else None
    out["modules"] = mods
    return out


def parse_args(argv):
    """``(frameworks, api)`` from the command line (lists); exits 2 with a message when bad."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) > 2:
        print("usage: env_info.py [FRAMEWORKS_JSON [API_JSON]]", file=sys.stderr)
        sys.exit(2)
    try:
        frameworks = json.loads(args[0]) if args else []
        api = json.loads(args[1]) if len(args) > 1 else []
        frameworks = [(str(fw), str(ext)) for fw, ext in frameworks]
        api = [str(name) for name in api]
    except (ValueError, TypeError) as exc:
        print("env_info.py: FRAMEWORKS_JSON must be [[module, extension], ...] and API_JSON [name, ...]: "
              + str(exc), file=sys.stderr)
        sys.exit(2)
    return frameworks, api


def main(argv=None):
    """Run the probe (see the module docstring); returns the exit status (int)."""
    start_method = default_start_method()  # first: nothing imported yet can have fixed it
    frameworks, api = parse_args(argv)
    out = {"start_method_default": start_method}
    out.update(collect(frameworks, api, own_dir=os.path.dirname(os.path.abspath(__file__))))
    print(MARKER + json.dumps(out, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
