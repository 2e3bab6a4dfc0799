"""Derive the ``HOROVOD_*`` build environment from a spec.

Rules (``docs/reference/horovod.md``, "Build-time variables"):

* every requested framework and controller gets ``HOROVOD_WITH_<X>=1``, every other one
  ``HOROVOD_WITHOUT_<X>=1``, so that a missing piece stops the build instead of being skipped
  (setup.py@v0.19.0 "Unable to build PyTorch plugin, will skip it" unless WITH is set);
* ``HOROVOD_WITH_GLOO=1`` is read by no CMake file (CMakeLists.txt@v0.28.1: Gloo is built
  unless ``HOROVOD_WITHOUT_GLOO`` is set) but is the documented spelling, so it is emitted;
* ``HOROVOD_GPU_OPERATIONS`` exists from 0.20.0; older versions take per-op variables;
* 0.19.x tests flags for being non-empty, so ``=0`` counts as set: such values are refused;
* the site's GPU vendor (``gpu.vendor`` of the site file, :mod:`envtool.core.gpu_vendors`) adds
  what Horovod 0.28.1 needs on those GPUs, read from that table rather than from the site's name:
  on AMD GPUs a build with GPU operations gets ``HOROVOD_GPU=ROCM`` and ``HOROVOD_ROCM_HOME``
  (``HOROVOD_GPU_OPERATIONS=NCCL`` then means RCCL), on Intel GPUs ``HOROVOD_CPU_OPERATIONS=CCL``
  (oneCCL) unless the spec names other CPU operations, and GPU operations are refused there
  (Horovod has none for Intel GPUs).
"""
from __future__ import annotations

from typing import List, Optional, Tuple

from packaging.version import Version

from envtool.core import frameworks, gpu_vendors
from envtool.core.errors import SpecError
from envtool.spec.model import GPU_OP_CHOICES, HorovodSpec, Spec
from envtool.spec.rules import horovod_version

_FRAMEWORK_VARS = tuple((f.name, f.build_var) for f in frameworks.FRAMEWORKS)
_CONTROLLER_VARS = (("mpi", "MPI"), ("gloo", "GLOO"))


def build_env(spec: Spec, cpu_count: Optional[int] = None) -> List[Tuple[str, str]]:
    """The ordered ``HOROVOD_*`` (and ``MAKEFLAGS``) assignments for building Horovod.

    Args:
        spec: a validated spec (its ``horovod`` section is read).
        cpu_count: parallel compile jobs for ``MAKEFLAGS=-jN`` (setup.py drops its default
            ``-j8`` when ``MAKEFLAGS`` is set); None leaves ``MAKEFLAGS`` out.
    Returns:
        ``[(name, value), …]`` in the order shown by ``plan``: GPU variables, WITH, WITHOUT,
        locations, extra variables, ``MAKEFLAGS``.
    Raises:
        SpecError: an ``extra_env`` flag set to ``0`` for Horovod < 0.20 (counts as set there).
    """
    h: HorovodSpec = spec.horovod
    version = horovod_version(spec)
    vendor = site_vendor(spec)
    env: List[Tuple[str, str]] = []
    if h.gpu_operations:
        env.append(("HOROVOD_GPU_OPERATIONS", h.gpu_operations.upper()))
    if vendor is not None and h.uses_gpu:  # refused by spec.rules where Horovod has no GPU operations
        env.extend(vendor.build_env)
    for op, impl in h.gpu_ops:
        env.append((f"HOROVOD_GPU_{op.upper()}", impl.upper()))
    if h.nccl_link:
        env.append(("HOROVOD_NCCL_LINK", h.nccl_link.upper()))
    if h.allow_mixed_gpu_impl:
        env.append(("HOROVOD_ALLOW_MIXED_GPU_IMPL", "1"))
    if h.cpu_operations:
        env.append(("HOROVOD_CPU_OPERATIONS", h.cpu_operations.upper()))
    elif vendor is not None and vendor.cpu_operations:
        env.append(("HOROVOD_CPU_OPERATIONS", vendor.cpu_operations))
    for key, var in _FRAMEWORK_VARS:
        if key in h.frameworks:
            env.append((f"HOROVOD_WITH_{var}", "1"))
    for key, var in _CONTROLLER_VARS:
        if key in h.controllers:
            env.append((f"HOROVOD_WITH_{var}", "1"))
    for key, var in _FRAMEWORK_VARS:
        if key not in h.frameworks:
            env.append((f"HOROVOD_WITHOUT_{var}", "1"))
    for key, var in _CONTROLLER_VARS:
        if key not in h.controllers:
            env.append((f"HOROVOD_WITHOUT_{var}", "1"))
    if h.cuda_home:
        env.append(("HOROVOD_CUDA_HOME", h.cuda_home))
    if h.nccl_home:
        env.append(("HOROVOD_NCCL_HOME", h.nccl_home))
    if h.cuda_cc_list:
        env.append(("HOROVOD_BUILD_CUDA_CC_LIST", h.cuda_cc_list))
    names = {k for k, _ in env}
    derived = dict(env)
    if vendor is not None and h.uses_gpu and vendor.home_var and vendor.home_default:
        # Horovod's own default directory, which extra_env may name otherwise (the site's ROCm module)
        env.append((vendor.home_var, vendor.home_default))
        names.add(vendor.home_var)
    for key, value in h.extra_env:
        if version is not None and version < Version("0.20.0") and key.startswith("HOROVOD_") \
                and value.strip() in ("0", "false", "False"):
            raise SpecError(spec.path, f"horovod.extra_env.{key}",
                            "a variable left out rather than set to 0 for Horovod < 0.20",
                            got=value, hint="setup.py@v0.19.x treats any non-empty value as set")
        _check_extra(spec, key, value, derived)
        if key in names:
            env = [(k, v) for k, v in env if k != key]
        env.append((key, value))
    if cpu_count:
        env.append(("MAKEFLAGS", f"-j{cpu_count}"))
    return env


def site_vendor(spec: Spec) -> Optional[gpu_vendors.GpuVendor]:
    """The :class:`~envtool.core.gpu_vendors.GpuVendor` of the site the spec was resolved for
    (its site file's ``gpu.vendor``), or None when the site does not name one."""
    return gpu_vendors.vendor(getattr(spec.site.gpu, "vendor", None))


def _origin(key: str) -> str:
    """The spec field a derived variable comes from (for the message when ``extra_env`` contradicts it)."""
    if key.startswith(("HOROVOD_WITH_", "HOROVOD_WITHOUT_")):
        var = key.split("_", 2)[2]
        return "horovod.controllers" if var in dict(_CONTROLLER_VARS).values() else "horovod.frameworks"
    return {"HOROVOD_GPU_OPERATIONS": "horovod.gpu_operations", "HOROVOD_NCCL_LINK": "horovod.nccl_link",
            "HOROVOD_ALLOW_MIXED_GPU_IMPL": "horovod.allow_mixed_gpu_impl",
            "HOROVOD_CPU_OPERATIONS": "horovod.cpu_operations", "HOROVOD_CUDA_HOME": "horovod.cuda_home",
            "HOROVOD_NCCL_HOME": "horovod.nccl_home",
            "HOROVOD_BUILD_CUDA_CC_LIST": "horovod.cuda_cc_list",
            "HOROVOD_GPU": "the site's gpu.vendor"}.get(key, "horovod.gpu_ops")


def _check_extra(spec: Spec, key: str, value: str, derived: dict) -> None:
    """Refuse an ``extra_env`` entry that contradicts the derived ``HOROVOD_*`` set: the same
    variable with another value, ``HOROVOD_WITH_X`` beside a derived ``HOROVOD_WITHOUT_X`` (or the
    reverse), or a per-operation ``HOROVOD_GPU_<OP>`` beside a derived ``HOROVOD_GPU_OPERATIONS``
    (or the reverse; CMakeLists.txt@v0.28.1 stops on that mix).

    Raises:
        SpecError: naming ``horovod.extra_env.<KEY>``, both values and the field to change instead.
    """
    field = f"horovod.extra_env.{key}"
    if key in derived and derived[key] != value:
        raise SpecError(spec.path, field, f"{key} left to envtool, which derives {key}={derived[key]} from "
                        f"{_origin(key)}", got=f"{key}={value}", hint=f"change {_origin(key)} instead")
    for a, b in (("HOROVOD_WITH_", "HOROVOD_WITHOUT_"), ("HOROVOD_WITHOUT_", "HOROVOD_WITH_")):
        if key.startswith(a):
            opposite = b + key[len(a):]
            if opposite in derived:
                raise SpecError(spec.path, field, f"no {key}: envtool derives {opposite}={derived[opposite]} from "
                                f"{_origin(opposite)}", got=f"{key}={value}",
                                hint=f"change {_origin(opposite)} instead; both variables would reach the build")
    per_op = {f"HOROVOD_GPU_{op.upper()}" for op in GPU_OP_CHOICES}
    if key in per_op and "HOROVOD_GPU_OPERATIONS" in derived:
        raise SpecError(spec.path, field, f"no {key}: envtool derives HOROVOD_GPU_OPERATIONS="
                        f"{derived['HOROVOD_GPU_OPERATIONS']} from horovod.gpu_operations", got=f"{key}={value}",
                        hint="Horovod's CMake stops when HOROVOD_GPU_OPERATIONS is combined with a per-op variable")
    if key == "HOROVOD_GPU_OPERATIONS" and per_op & set(derived):
        other = sorted(per_op & set(derived))[0]
        raise SpecError(spec.path, field, f"no {key}: envtool derives {other}={derived[other]} from horovod.gpu_ops",
                        got=f"{key}={value}", hint="use horovod.gpu_operations instead of gpu_ops")


def cache_relevant(env: List[Tuple[str, str]]) -> List[Tuple[str, str]]:
    """The assignments that change the built binary (``MAKEFLAGS`` only changes the speed)."""
    return sorted((k, v) for k, v in env if k != "MAKEFLAGS")


def requirement(spec: Spec) -> str:
    """What pip builds: ``spec.horovod.source`` or ``horovod==<version>``."""
    h = spec.horovod
    if h.source:
        return h.source
    version = horovod_version(spec)
    return f"horovod=={version}"
