"""GPU vendors as data (issue 44): what a site's ``gpu.vendor`` means for a Horovod build and for
the collective library's network plug-in, so that ``plan`` and ``validate`` read a table instead of
branching on a site's or a vendor's name.

Each value is read in a public source, named beside it:

- Horovod 0.28.1 builds its GPU operations for CUDA unless ``HOROVOD_GPU=ROCM``; NCCL operations
  on ROCm are RCCL's (``HOROVOD_GPU_OPERATIONS=NCCL``); ``HOROVOD_ROCM_HOME`` names ROCm's
  directory (horovod/horovod@v0.28.1:docs/install.rst#L166-L173 and #L236-L253); without it
  CMake looks in ``/opt/rocm`` (horovod/horovod@v0.28.1:cmake/Modules/FindROCM.cmake#L12-L14).
- oneCCL serves Horovod's CPU operations with ``HOROVOD_CPU_OPERATIONS=CCL``
  (horovod/horovod@v0.28.1:docs/install.rst#L192-L198, docs/oneccl.rst#L17-L21); its sources are
  compiled only when ``CCL_ROOT`` is set in the build's environment
  (horovod/horovod@v0.28.1:CMakeLists.txt#L257-L263). Horovod 0.28.1 has no ``HOROVOD_WITH_CCL``
  and no GPU operations for Intel GPUs (``HOROVOD_GPU`` is CUDA or ROCM: docs/install.rst#L245).
- aws-ofi-nccl installs ``libnccl-net.so`` for NCCL and, built ``--with-rocm``, ``librccl-net.so``
  for RCCL (olcf/olcf-user-docs@274590317797:software/analytics/pytorch_frontier.rst#L640-L670);
  NCCL says ``No plugin found (libnccl-net.so)`` when none loads (NVIDIA/nccl-tests#185); RCCL's
  plug-in says ``NET/OFI Using aws-ofi-rccl 1.4.0`` (Lumi-supercomputer/lumi-userguide@6c3a26c0fc8f:
  docs/software/packages/pytorch.md#L97-L105).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple


@dataclass(frozen=True)
class GpuVendor:
    """One GPU vendor's build and communication facts.

    Attributes:
        name: the ``gpu.vendor`` value (``nvidia``, ``amd``, ``intel``).
        collective: the collective library ranks use on its GPUs (``NCCL``, ``RCCL``, ``oneCCL``).
        toolkit: the GPU toolkit Horovod's GPU code is built with (``CUDA``, ``ROCm``, ``oneAPI``):
            a spec's ``cuda`` pin is needed for GPU operations only where it is ``CUDA``.
        build_env: ``(HOROVOD_*, value)`` a Horovod build with GPU operations gets on this vendor's
            GPUs (values a spec may not contradict), in order.
        home_var: the variable naming the GPU toolkit's directory (``HOROVOD_ROCM_HOME``), or None.
        home_default: the directory Horovod's CMake assumes when ``home_var`` is unset, or None.
        gpu_operations: the ``HOROVOD_GPU_OPERATIONS`` Horovod supports here (``NCCL``), or None
            when Horovod has no GPU operations for this vendor.
        cpu_operations: the ``HOROVOD_CPU_OPERATIONS`` of the vendor's library (``CCL``), or None.
        build_needs: variables the build's environment must hold for that library (``CCL_ROOT``).
        net_plugin: the network plug-in library the collective library loads (``librccl-net.so``),
            or None.
        net_plugin_project: the project that provides it (``aws-ofi-rccl``), or None.
        plugin_in_use: substrings of ``NCCL_DEBUG=INFO`` lines that say the plug-in is in use.
        source: where these facts are read (see the module docstring).
    """

    name: str
    collective: str
    toolkit: str = "CUDA"
    build_env: Tuple[Tuple[str, str], ...] = ()
    home_var: Optional[str] = None
    home_default: Optional[str] = None
    gpu_operations: Optional[str] = None
    cpu_operations: Optional[str] = None
    build_needs: Tuple[str, ...] = ()
    net_plugin: Optional[str] = None
    net_plugin_project: Optional[str] = None
    plugin_in_use: Tuple[str, ...] = ()
    source: str = ""


VENDORS: Dict[str, GpuVendor] = {
    "nvidia": GpuVendor(
        name="nvidia", collective="NCCL", gpu_operations="NCCL",
        net_plugin="libnccl-net.so", net_plugin_project="aws-ofi-nccl",
        plugin_in_use=("Using network AWS Libfabric", "NET/OFI Using aws-ofi-nccl", "NET/AWS Libfabric"),
        source="horovod/horovod@v0.28.1:docs/install.rst#L166-L173 (CUDA when HOROVOD_GPU is unset)"),
    "amd": GpuVendor(
        name="amd", collective="RCCL", toolkit="ROCm", build_env=(("HOROVOD_GPU", "ROCM"),),
        home_var="HOROVOD_ROCM_HOME", home_default="/opt/rocm", gpu_operations="NCCL",
        net_plugin="librccl-net.so", net_plugin_project="aws-ofi-rccl",
        plugin_in_use=("NET/OFI Using aws-ofi-rccl", "Using network AWS Libfabric", "Using network OFI"),
        source="horovod/horovod@v0.28.1:docs/install.rst#L172-L173, #L236, #L245; "
               "cmake/Modules/FindROCM.cmake#L12-L14"),
    "intel": GpuVendor(
        name="intel", collective="oneCCL", toolkit="oneAPI", cpu_operations="CCL", build_needs=("CCL_ROOT",),
        source="horovod/horovod@v0.28.1:docs/install.rst#L192-L198, #L245, #L253; CMakeLists.txt#L257-L263"),
}

#: The ``gpu.vendor`` values a site file may give.
VENDOR_NAMES = tuple(VENDORS)


def vendor(name: Optional[str]) -> Optional[GpuVendor]:
    """The :class:`GpuVendor` of ``name`` (a :data:`VENDOR_NAMES` value), or None for None or an
    unknown name."""
    return VENDORS.get(name) if name else None
