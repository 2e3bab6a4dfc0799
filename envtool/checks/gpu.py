"""Check 6, ``gpu``: the GPU stack — CUDA visible to the framework, Horovod built with
CUDA/NCCL, and the NCCL version against the spec (its ``nccl`` conda pin or the site's
``nccl/…`` module). Skipped, with the reason, on CPU-only machines.

Also :func:`cpu_only_build`, which tells from an environment's package records alone (no import,
no subprocess) that its frameworks are CPU-only builds, and :func:`gpu_modules`, which picks the
GPU runtime modules out of a module list (``envtool jobscript`` warns when a job pairs the two).
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

from envtool.checks.common import version_tuple
from envtool.checks.registry import check, finding
from envtool.core import comm_rules, gpu_gates

ID = "gpu"


def nccl_code_to_version(code) -> Optional[str]:
    """``hvd.nccl_built()``'s ``NCCL_VERSION_CODE`` as ``X.Y.Z``: ``major*10000 + minor*100 + patch``
    from NCCL 2.9, ``major*1000 + minor*100 + patch`` before (nccl.h ``NCCL_VERSION``)."""
    if not isinstance(code, int) or isinstance(code, bool) or code <= 0:
        return None
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def spec_nccl(spec, site) -> Optional[str]:
    """The NCCL version the spec asks for: a ``nccl`` conda pin, else a ``nccl/<ver>`` site module."""
    if spec is not None:
        for pin in spec.packages.conda:
            m = re.match(r"\s*nccl\s*[=<>~ ]+\s*=?\s*([\d.]+)", pin.value)
            if m:
                return m.group(1).rstrip(".")
    modules = getattr(site, "modules", ()) or ()
    for mod in modules:
        m = re.match(r"nccl/([\d.]+)", mod)
        if m:
            return m.group(1).rstrip(".")
    return None


#: pip distributions of the CUDA runtime libraries (NVIDIA's ``nvidia-cuda-runtime-cu12``,
#: ``nvidia-cudnn-cu12``, ``nvidia-nccl-cu12``, … on PyPI, which PyTorch's CUDA wheels on PyPI
#: require: https://pypi.org/project/nvidia-cuda-runtime-cu12/), of a GPU TensorFlow
#: (``tensorflow-gpu``, https://pypi.org/project/tensorflow-gpu/) or a CUDA MXNet
#: (``mxnet-cu112``, https://pypi.org/project/mxnet-cu112/).
GPU_PIP = re.compile(r"^(nvidia-[a-z0-9-]+-cu\d+|tensorflow-gpu|mxnet-cu\d+)$")
#: conda packages of the CUDA/ROCm runtime (``cudatoolkit``, NVIDIA's ``cuda-cudart``/``cuda-runtime``,
#: ``cudnn``, ``nccl``, ``rccl``: anaconda.org/conda-forge and anaconda.org/nvidia) and the GPU
#: metapackages of the frameworks (``pytorch-gpu``, ``tensorflow-gpu``).
GPU_CONDA = re.compile(r"^(cudatoolkit|cuda-cudart|cuda-runtime|cudnn|nccl|rccl|pytorch-gpu|tensorflow-gpu)$")
#: GPU runtime modules, by the name before the version: ``cuda``/``cudatoolkit``, ``cudnn``,
#: ``nccl``, ``rocm``, ``rccl``, ``miopen`` (``cudnn/8.7.0``, ``nccl/2.15.5-ofi``, ``nccl-2.15``,
#: ``cudatoolkit/11.7``, ``rocm/5.6``; the NVIDIA and AMD libraries of those names).
GPU_MODULE = re.compile(r"^(cuda|cudatoolkit|cuda-toolkit|cudnn|nccl|rocm|rccl|miopen)([-/_.]\d|/|$)", re.IGNORECASE)


def gpu_modules(modules: Sequence[str]) -> Tuple[str, ...]:
    """The modules of ``modules`` that load a GPU runtime (:data:`GPU_MODULE`), in order."""
    return tuple(m for m in modules if GPU_MODULE.match(m.strip()))


def _framework_build(name: str, version: str, build: str = "", conda: bool = False) -> str:
    """``cpu``, ``gpu`` or ``unknown`` for one installed framework package.

    pip: PyTorch's wheel index labels its CPU wheels ``+cpu`` (``+cpu.cxx11.abi``) and its
    accelerator wheels ``+cu121``/``+rocm5.6`` (https://download.pytorch.org/whl/cpu,
    https://pytorch.org/get-started/locally/); ``tensorflow-cpu`` is TensorFlow's CPU-only
    distribution (https://pypi.org/project/tensorflow-cpu/); an unlabelled ``torch`` or a plain
    ``tensorflow`` may use a CUDA found at run time, so it is ``unknown``. conda: a ``-cpu``
    package name, or a build string with ``cpu`` and no ``cuda`` (pytorch channel ``py3.10_cpu_0``,
    conda-forge ``cpu_py310h…``, Open-CE ``cpu_py39_pb3.19_1``) is ``cpu``; ``cuda`` in it is ``gpu``.
    """
    if conda:
        low = build.lower()
        if name.endswith("-gpu") or "cuda" in low:
            return "gpu"
        if name.endswith("-cpu") or "cpu" in low:
            return "cpu"
        return "unknown"
    if name == "tensorflow-cpu":
        return "cpu"
    if name == "torch":
        from packaging.version import InvalidVersion, Version

        try:
            local = (Version(version).local or "").lower()
        except InvalidVersion:
            return "unknown"
        if local.startswith("cpu"):
            return "cpu"
        if local.startswith(("cu", "rocm")):
            return "gpu"
    return "unknown"


def cpu_only_build(prefix: Union[str, "os.PathLike[str]"]) -> Optional[str]:
    """Why the environment at ``prefix`` can only compute on CPUs, or None when it may use a GPU or
    cannot be told.

    Read from the package records alone (:class:`envtool.core.prefix.PrefixData`: the
    ``site-packages`` dist-infos and ``conda-meta/*.json``; no import, no subprocess, a few ms):
    the environment is CPU-only when it holds at least one framework of
    :data:`envtool.core.frameworks.FRAMEWORKS`, every framework package is a CPU-only build
    (:func:`_framework_build`), and no package carries a GPU runtime (:data:`GPU_PIP`,
    :data:`GPU_CONDA`). A framework whose build cannot be told (an unlabelled ``torch``, a plain
    ``tensorflow``, ``mxnet``) makes the answer None: the caller must not warn on a guess.

    Args:
        prefix: the environment (a missing one gives None).
    Returns:
        the evidence as a phrase (``torch 2.13.0+cpu``; ``conda pytorch 1.12.0 (build py3.10_cpu_0)``),
        or None.
    """
    from envtool.core import frameworks
    from envtool.core.prefix import PrefixData

    pd = PrefixData(Path(prefix))
    if not pd.prefix.is_dir():
        return None
    cpu: List[str] = []
    for rec in pd.conda_record_dicts:
        name = str(rec["name"])
        if GPU_CONDA.match(name):
            return None
        if frameworks.by_package(name) is not None:
            kind = _framework_build(name, str(rec["version"]), str(rec.get("build") or ""), conda=True)
            if kind != "cpu":
                return None
            cpu.append(f"conda {name} {rec['version']} (build {rec.get('build') or '?'})")
    if any(GPU_PIP.match(d.name) for d in pd.distributions):
        return None
    pip_names = {n for f in frameworks.FRAMEWORKS for n in f.pip_names}
    for dist in pd.pip_installed():  # a conda package's own dist-info (unlabelled version) was judged above
        if dist.name in pip_names:
            if _framework_build(dist.name, dist.version) != "cpu":
                return None
            cpu.append(f"{dist.name} {dist.version}")
    return ", ".join(cpu) or None


def gpu_machine() -> Optional[str]:
    """Evidence of a GPU driver on this machine, or None."""
    for path in ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/kfd"):
        if os.path.exists(path):
            return path
    exe = shutil.which("nvidia-smi")
    return exe


def nvidia_smi() -> list:
    """``name, driver version, memory`` per GPU from ``nvidia-smi`` ([] when absent or failing)."""
    out = _smi("--query-gpu=name,driver_version,memory.total", "--format=csv,noheader")
    return [ln.strip() for ln in out.splitlines() if ln.strip()]


#: nvidia-smi's exit statuses that say it cannot reach any GPU of this node, so that no other
#: query can succeed either: 9 "NVIDIA driver is not loaded", 12 "NVML shared library couldn't be
#: found or loaded" (nvidia-smi(1), RETURN VALUE, which follow NVML's return codes:
#: https://nvidia.github.io/cuda-python/cuda-bindings/latest/module/generated/cuda.bindings.nvml.Return.html).
SMI_UNREACHABLE = (9, 12)
#: What this process learnt of nvidia-smi: each query's output by its arguments, and ``"broken"``
#: once it was absent, hung, could not start or reached no GPU (then every later query is "").
_SMI_SEEN: Dict[Tuple[str, ...], str] = {}


def _smi(*args: str) -> str:
    """The output of ``nvidia-smi ARGS`` ("" when it is absent, fails or hangs for 20 s), decoded by
    :func:`envtool.core.external.run` (a byte that is not UTF-8 becomes U+FFFD, never an error).

    Each query runs at most once per process (one ``doctor``), and none runs again once nvidia-smi
    was absent, hung, could not start or exited with :data:`SMI_UNREACHABLE`: a node whose driver
    does not answer costs one 20-second wait, not one per query."""
    import subprocess

    from envtool.core import external

    if ("broken",) in _SMI_SEEN:
        return ""
    if args in _SMI_SEEN:
        return _SMI_SEEN[args]
    exe = shutil.which("nvidia-smi")
    out = ""
    if not exe:
        _SMI_SEEN[("broken",)] = "absent"
        return ""
    try:
        proc = external.run([exe, *args], timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        _SMI_SEEN[("broken",)] = type(exc).__name__
        return ""
    if proc.returncode in SMI_UNREACHABLE:
        _SMI_SEEN[("broken",)] = f"exit {proc.returncode}"
    elif proc.returncode == 0:
        out = proc.stdout
    _SMI_SEEN[args] = out
    return out


def horovod_objects_gates(prefix, facts) -> list:
    """:func:`envtool.core.gpu_gates.cuda_objects_gate` for each of Horovod's framework libraries in
    ``prefix`` (``site-packages/horovod/*/mpi_lib*.so``) from ``cuobjdump --list-elf`` on PATH;
    [] without a prefix, without cuobjdump (a node without the CUDA toolkit) or without such a
    library. A cuobjdump that fails or hangs (60 s) gives an ``unknown`` gate."""
    import subprocess

    from envtool.core import external

    exe = shutil.which("cuobjdump")
    if prefix is None or not exe:
        return []
    out = []
    for lib in sorted(Path(prefix).glob("lib/python*/site-packages/horovod/*/mpi_lib*.so")):
        try:
            proc = external.run([exe, "--list-elf", str(lib)], timeout=60)
            listing = proc.stdout if proc.returncode == 0 else ""
        except (OSError, subprocess.TimeoutExpired):
            listing = ""
        out.append(gpu_gates.cuda_objects_gate(listing, f"{lib.parent.name}/{lib.name}", facts.capability, facts.gpu,
                                               facts.where))
    return out


def node_report(ctx, cuda: dict, nccl: Optional[str]):
    """The GPU gates and known-bad stack rules on this node (:mod:`envtool.core.gpu_gates`): the
    driver and GPUs from ``nvidia-smi`` (its header, ``-L`` and the ``compute_cap`` query), torch's
    CUDA version and compiled targets from the ``info`` probe, the network and plug-ins from the
    site file's ``gpu`` section, NCCL's version in use and the variables the ranks get.

    Returns:
        a :class:`~envtool.core.gpu_gates.GpuReport`.
    """
    site_gpu = getattr(ctx.site, "gpu", None)
    gpus_per_node = getattr(ctx.site, "gpus_per_node", 0) or 0
    facts = gpu_gates.node_facts(_smi(), _smi("-L"), _smi(*gpu_gates.SMI_CAPS[1:]), cuda=cuda.get("torch_cuda"),
                                 arch_list=tuple(cuda["arch_list"]) if cuda.get("arch_list") is not None else None,
                                 # MIG matters only where the ranks talk NCCL: a CUDA build of torch
                                 nccl_ranks_per_gpu_node=gpus_per_node if gpus_per_node > 1 and
                                 cuda.get("torch_cuda") else 0,
                                 where="this node")
    gates = [gpu_gates.driver_gate(facts), gpu_gates.arch_gate(facts), gpu_gates.mig_gate(facts)]
    gates += horovod_objects_gates(getattr(ctx, "prefix", None), facts)
    comm = comm_rules.CommFacts(gpu=facts.gpu if facts.gpu != "the GPU" else (site_gpu.model if site_gpu else None),
                                network=site_gpu.network if site_gpu else None, nccl=nccl,
                                plugins=site_gpu.nccl_plugins if site_gpu else (), env=dict(ctx.environ))
    return gpu_gates.rules_report(gates, comm)


def _tensorflow_view(tf_gpu: dict, items: List[str], problems: List[str], fixes: List[str]) -> None:
    """TensorFlow's view of the GPUs of a GPU machine (the ``env_info`` probe's ``tf_gpu``): an item,
    and a problem with its fix when it sees none (a CPU-only build such as ``tensorflow-cpu``, or
    CUDA libraries it cannot load). Nothing when TensorFlow is not in the environment."""
    if not tf_gpu:
        return
    if tf_gpu.get("unknown"):
        items.append(f"tensorflow: {tf_gpu['unknown']}")
        return
    if tf_gpu.get("error"):
        problems.append(f"tensorflow could not list its GPUs: {tf_gpu['error']}")
        fixes.append("python -c 'import tensorflow as tf; print(tf.config.list_physical_devices(\"GPU\"))' "
                     "in the environment shows why")
        return
    devices = tf_gpu.get("devices") or []
    items.append(f"tensorflow: built with CUDA {tf_gpu.get('cuda') or '-'} (cuDNN {tf_gpu.get('cudnn') or '-'}), "
                 f"{len(devices)} GPU(s) {', '.join(devices)}".rstrip())
    if not devices:
        problems.append("tensorflow sees no GPU (" + ("a CPU-only build: tf.test.is_built_with_cuda() is False"
                                                      if tf_gpu.get("built_with_cuda") is False
                                                      else "its CUDA libraries did not load?") + ")")
        fixes.append("install TensorFlow's GPU build (the tensorflow package, not tensorflow-cpu) with the CUDA and "
                     "cuDNN its release was built with (https://www.tensorflow.org/install/source#gpu)")


@check(ID, "GPU stack (CUDA, NCCL)", needs=("info",), order=60, fix="install the CUDA build of the framework")
def run(ctx):
    info = ctx.probe("info")
    cuda = info.data.get("cuda") or {}
    tf_gpu = info.data.get("tf_gpu") or {}
    caps = info.data.get("capabilities") or {}
    evidence = gpu_machine()
    wants_gpu = ctx.spec is not None and (ctx.spec.horovod.uses_gpu or ctx.spec.cuda is not None)
    if not evidence and not cuda.get("available") and not tf_gpu.get("devices"):
        reason = ("CPU-only machine: no NVIDIA/AMD driver (/proc/driver/nvidia/version, /dev/nvidiactl, /dev/kfd) "
                  "and no nvidia-smi")
        if wants_gpu:
            reason += f"; spec {ctx.spec.name} expects GPUs - run doctor on a GPU node"
        return finding(ID, "skipped", reason, torch_cuda=cuda, tensorflow_gpu=tf_gpu or None)
    items = [f"driver: {evidence}"]
    smi = nvidia_smi()
    if smi:
        items += [f"nvidia-smi: {line}" for line in smi]
    problems: List[str] = []
    fixes: List[str] = []
    _tensorflow_view(tf_gpu, items, problems, fixes)
    if not cuda and not tf_gpu:
        items.append("neither torch nor tensorflow is installed in the env: CUDA not checked through a framework")
    if ctx.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        problems.append("CUDA_VISIBLE_DEVICES is set to '' (no GPU visible)")
        fixes.append("unset CUDA_VISIBLE_DEVICES (or let the launcher set it)")
    if cuda and not cuda.get("available"):
        problems.append(f"torch sees no CUDA device (torch.version.cuda={cuda.get('torch_cuda')!r}: "
                        + ("a CPU-only build" if not cuda.get("torch_cuda") else "driver/runtime mismatch?") + ")")
        fixes.append("install the CUDA build of torch that matches the driver (nvidia-smi)")
    elif cuda:
        items.append(f"torch: CUDA {cuda.get('torch_cuda')}, {cuda.get('device_count')} device(s) "
                     f"{', '.join(cuda.get('devices') or [])}, NCCL {cuda.get('nccl')}")
    hvd_nccl = nccl_code_to_version(caps.get("nccl_built")) if caps else None
    if caps:
        items.append(f"Horovod: cuda_built={caps.get('cuda_built')}, rocm_built={caps.get('rocm_built')}, "
                     f"NCCL {hvd_nccl or 'not built'}")
        if wants_gpu and ctx.spec.horovod.gpu_operations == "nccl" and not caps.get("nccl_built"):
            problems.append("the spec asks for NCCL GPU operations, Horovod has no NCCL (hvd.nccl_built() == 0)")
            from envtool.checks.common import rebuild_command

            fixes.append(rebuild_command(ctx, info))
    want = spec_nccl(ctx.spec, ctx.site)
    have = hvd_nccl or cuda.get("nccl")
    if want and have and version_tuple(want, 2) != version_tuple(have, 2):
        problems.append(f"NCCL {have} in use, the spec/site asks for {want}")
        mods = [m for m in (getattr(ctx.site, "modules", ()) or ()) if m.startswith("nccl/")]
        fixes.append(f"module load {mods[0]}" if mods else f"install nccl {want} in the environment")
    report = node_report(ctx, cuda, have)
    for problem, fix in report.problems():
        problems.append(problem)
        fixes.append(fix)
    items += [line for line in report.lines() if ": fail:" not in line and ": matched:" not in line]
    details = {"torch_cuda": cuda, "tensorflow_gpu": tf_gpu or None, "horovod_nccl": hvd_nccl, "spec_nccl": want, "driver": evidence,
               "nvidia_smi": smi, "gates": report.to_dict()}
    if problems:
        return finding(ID, "fail", "; ".join(problems), "; ".join(fixes), items=items, **details)
    seen = (f"{cuda.get('device_count', 0)} CUDA device(s) seen by torch" if cuda
            else f"{len(tf_gpu.get('devices') or ())} GPU(s) seen by tensorflow" if tf_gpu
            else f"{len(smi)} GPU(s) by nvidia-smi; torch not installed")
    return finding(ID, "ok", f"{seen}; NCCL {have or '-'}", "", items=items, **details)


def spec_nccl_version(spec) -> Optional[str]:
    """The NCCL version a spec will run with, when it is exact: an exact ``nccl`` conda pin
    (``nccl 2.18.3``, ``nccl=2.18.3``, ``nccl==2.18.3``), a ``nccl/<ver>`` site module, or the
    site's recorded ``nccl`` library (``site.libraries``); None when none says or only a range
    does (``nccl >=2.14``: the solver decides)."""
    # an exact version only: a range (nccl >=2.14) leaves the solver free, so a rule on it stays open
    for pin in spec.packages.conda:
        m = re.match(r"\s*nccl(?:\s*==?\s*|\s+)(\d+(?:\.\d+)+)(?:[.*\s=]|$)", pin.value)
        if m and not re.search(r"[<>~!,]", pin.value):
            return m.group(1)
    for mod in getattr(spec.site, "modules", ()) or ():
        m = re.match(r"nccl/(\d+(?:\.\d+)+)", mod)
        if m:
            return m.group(1)
    for name, pin in spec.site.libraries:
        value = str(getattr(pin, "value", "") or "")
        if name == "nccl" and re.fullmatch(r"=?=?\s*\d+(\.\d+)+", value.strip()):
            return value.strip().lstrip("=").strip()
    return None


def plan_report(spec) -> gpu_gates.GpuReport:
    """The gates and rules ``plan`` applies to ``spec`` on a login node, from the site file's ``gpu``
    section (:class:`envtool.spec.sites.gpu.SiteGPU`) and the spec's CUDA and NCCL.

    Nothing is checked for a CPU spec or a site file without a ``gpu`` section (``skipped`` says
    which). The framework's compiled targets are not known before it is installed, so the
    ``arch`` gate is left to ``doctor`` on a GPU node.
    """
    wants_gpu = spec.cuda is not None or spec.horovod.uses_gpu
    site_gpu = spec.site.gpu
    if not wants_gpu:
        return gpu_gates.GpuReport(skipped=f"spec {spec.name} is CPU-only: no GPU gates")
    if site_gpu is None:
        return gpu_gates.GpuReport(skipped=f"site {spec.site.name} has no gpu section (model, driver, network): "
                                   "the GPU gates run in doctor on a GPU node")
    where = f"site {spec.site.name}, {site_gpu.date}"
    nccl_ranks = spec.site.gpus_per_node if spec.site.gpus_per_node > 1 else 0
    facts = gpu_gates.GateFacts(driver=site_gpu.driver, cuda=str(spec.cuda.value) if spec.cuda is not None else None,
                                capability=site_gpu.capability or gpu_gates.capability_of(site_gpu.model),
                                gpu=site_gpu.model, arch_list=None, framework="the framework", mig=site_gpu.mig,
                                nccl_ranks_per_gpu_node=nccl_ranks, where=where)
    gates = [gpu_gates.driver_gate(facts), gpu_gates.mig_gate(facts)]
    env = dict(spec.site.env)
    env.update(dict(spec.env))
    comm = comm_rules.CommFacts(gpu=site_gpu.model, network=site_gpu.network, nccl=spec_nccl_version(spec),
                                plugins=site_gpu.nccl_plugins, env=env, where=where)
    return gpu_gates.rules_report(gates, comm)
