"""Check 6, ``gpu``: the GPU stack — CUDA visible to the framework, Horovod built with
CUDA/NCCL, and the NCCL version against the spec (its ``nccl`` conda pin or the site's
``nccl/…`` module). Skipped, with the reason, on CPU-only machines."""
from __future__ import annotations

import os
import re
import shutil
from typing import Optional

from envtool.checks.common import version_tuple
from envtool.checks.registry import check, finding

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


def gpu_machine() -> Optional[str]:
    """Evidence of a GPU driver on this machine, or None."""
    for path in ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/kfd"):
        if os.path.exists(path):
            return path
    exe = shutil.which("nvidia-smi")
    return exe


def nvidia_smi() -> list:
    """``name, driver version, memory`` per GPU from ``nvidia-smi`` ([] when absent or failing)."""
    import subprocess

    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        proc = subprocess.run([exe, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [ln.strip() for ln in proc.stdout.splitlines() if ln.strip()] if proc.returncode == 0 else []


@check(ID, "GPU stack (CUDA, NCCL)", needs=("info",), order=60, fix="install the CUDA build of the framework")
def run(ctx):
    info = ctx.probe("info")
    cuda = info.data.get("cuda") or {}
    caps = info.data.get("capabilities") or {}
    evidence = gpu_machine()
    wants_gpu = ctx.spec is not None and (ctx.spec.horovod.uses_gpu or ctx.spec.cuda is not None)
    if not evidence and not cuda.get("available"):
        reason = ("CPU-only machine: no NVIDIA/AMD driver (/proc/driver/nvidia/version, /dev/nvidiactl, /dev/kfd) "
                  "and no nvidia-smi")
        if wants_gpu:
            reason += f"; spec {ctx.spec.name} expects GPUs - run doctor on a GPU node"
        return finding(ID, "skipped", reason, torch_cuda=cuda)
    items = [f"driver: {evidence}"]
    smi = nvidia_smi()
    if smi:
        items += [f"nvidia-smi: {line}" for line in smi]
    problems = []
    fixes = []
    if not cuda:
        items.append("torch is not installed in the env: CUDA not checked through a framework")
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
    details = {"torch_cuda": cuda, "horovod_nccl": hvd_nccl, "spec_nccl": want, "driver": evidence,
               "nvidia_smi": smi}
    if problems:
        return finding(ID, "fail", "; ".join(problems), "; ".join(fixes), items=items, **details)
    seen = (f"{cuda.get('device_count', 0)} CUDA device(s) seen by torch" if cuda
            else f"{len(smi)} GPU(s) by nvidia-smi; torch not installed")
    return finding(ID, "ok", f"{seen}; NCCL {have or '-'}", "", items=items, **details)
