"""Cross-field rules for a merged spec: combinations Horovod or the platform cannot build.

Each rule cites where the fact comes from. A broken rule raises :class:`SpecError` (exit 2)
naming the spec file and the field, before anything is built.
"""
from __future__ import annotations

from typing import Optional

from packaging.version import InvalidVersion, Version

from envtool.core import gpu_vendors
from envtool.core.errors import SpecError
from envtool.spec.model import FRAMEWORKS, Spec
from envtool.spec.yamlload import LineDict

#: conda platforms with no CUDA: NVIDIA ships CUDA for Linux on x86_64, ppc64le and aarch64
#: (CUDA installation guide for Linux, "System Requirements"); macOS support ended with CUDA
#: 10.2 (CUDA 11.0 release notes), and there has never been an s390x CUDA (Open-CE's s390x
#: builds are CPU-only, stacks.md).
CPU_ONLY_PLATFORMS = ("osx-64", "osx-arm64", "linux-s390x")


def horovod_version(spec: Spec) -> Optional[Version]:
    """The pinned Horovod version as a ``packaging`` Version (``0.18.2+1`` → 0.18.2+1), or None.

    Raises:
        SpecError: ``horovod.version`` is not a PEP 440 version.
    """
    pin = spec.horovod.version
    if pin is None:
        return None
    try:
        if pin.version is None:
            raise InvalidVersion(pin.value)
        return pin.parsed_version or Version(pin.version)  # parsed at load (envtool.spec.load)
    except InvalidVersion:
        raise SpecError(spec.path, "horovod.version", "a Horovod version such as 0.28.1", got=pin.value) from None


def _pin_line(raw: Optional[LineDict], kind: str, index: int) -> Optional[int]:
    """The line of ``packages.<kind>[index]`` in the merged raw mapping (its ``spec`` key when the
    pin is a mapping, else the list's key), or None."""
    packages = raw.get("packages") if raw is not None else None
    if not isinstance(packages, LineDict):
        return raw.line_of("packages") if raw is not None else None
    items = packages.get(kind)
    item = items[index] if isinstance(items, list) and index < len(items) else None
    if isinstance(item, LineDict):
        return item.line_of("spec" if "spec" in item else "value")
    return packages.line_of(kind)


def _check_incompatible(spec: Spec, version: Optional[Version], raw: Optional[LineDict]) -> None:
    """Refuse a package pin that admits only versions a known incompatibility breaks
    (:data:`envtool.core.incompatible.KNOWN`: Horovod <= 0.28.1 with TensorFlow >= 2.16 or Keras 3).

    Raises:
        SpecError: names the pin's field (``packages.pip[0]``) and line, what to pin instead,
            the row's id, reason and upstream issue URL.
    """
    from envtool.core import incompatible

    pins = [(("pip", i), p) for i, p in enumerate(spec.packages.pip)]
    pins += [(("conda", i), p) for i, p in enumerate(spec.packages.conda)]
    hits = incompatible.spec_hits(version, spec.horovod.frameworks, pins)
    if not hits:
        return
    row, (kind, index), pin = hits[0]
    hvd = f"Horovod {version}" if version is not None else "Horovod from horovod.source"
    raise SpecError(spec.path, f"packages.{kind}[{index}]",
                    f"{row.expected} when {hvd} is built with {row.framework} (horovod.frameworks)",
                    got=pin.value, line=_pin_line(raw, kind, index), hint=row.explain())


def check(spec: Spec, raw: Optional[LineDict] = None) -> None:
    """Run every cross-field rule on ``spec``.

    Args:
        spec: the merged spec.
        raw: its merged raw mapping, for line numbers (optional).
    Raises:
        SpecError: the first rule broken, naming file, line and field.
    """

    def fail(field: str, expected: str, got=None, hint: str = ""):
        line = None
        if raw is not None:
            top, _, sub = field.partition(".")
            section = raw.get(top)
            if sub and isinstance(section, LineDict):
                line = section.line_of(sub.split(".")[0])
            else:
                line = raw.line_of(top)
        raise SpecError(spec.path, field, expected, got=got, line=line, hint=hint)

    h = spec.horovod
    try:
        version = horovod_version(spec)
    except SpecError as exc:
        fail("horovod.version", exc.expected, got=exc.got)

    if h.install == "pip-build" and version is None and not h.source:
        fail("horovod.version", "a version (or horovod.source) when horovod.install is pip-build")

    # HOROVOD_GPU_OPERATIONS together with a per-op variable: CMake stops (CMakeLists.txt@v0.28.1).
    if h.gpu_operations and h.gpu_ops:
        fail("horovod.gpu_operations", "either gpu_operations or per-operation gpu_ops, not both",
             got=h.gpu_operations, hint="Horovod's CMake stops when HOROVOD_GPU_OPERATIONS is combined with "
             "HOROVOD_GPU_" + h.gpu_ops[0][0].upper())
    # HOROVOD_GPU_OPERATIONS appeared in 0.20.0 (horovod/CHANGELOG.md, setup.py@v0.20.0).
    if h.gpu_operations and version is not None and version < Version("0.20.0"):
        fail("horovod.gpu_operations", "Horovod >= 0.20.0 (HOROVOD_GPU_OPERATIONS does not exist before)",
             got=str(version), hint="use gpu_ops: {allreduce: nccl} for older Horovod")
    ops = dict(h.gpu_ops)
    if ops.get("allreduce") == "nccl" and "mpi" in ops.values() and not h.allow_mixed_gpu_impl:
        fail("horovod.gpu_ops", "allow_mixed_gpu_impl: true when NCCL allreduce is mixed with an MPI GPU op",
             hint="CMakeLists.txt@v0.28.1 stops without HOROVOD_ALLOW_MIXED_GPU_IMPL=1")
    # DDL is IBM's library, shipped for WML-CE on POWER only (stacks.md: IBM WML-CE).
    if ops.get("allreduce") == "ddl":
        if "linux-ppc64le" not in spec.platforms:
            fail("horovod.gpu_ops", "platforms to include linux-ppc64le for DDL (IBM WML-CE on POWER only)",
                 got=list(spec.platforms))
        if spec.distribution.name != "ibm-wml-ce":
            fail("horovod.gpu_ops", "distribution ibm-wml-ce for DDL (DDL ships only with IBM WML-CE)",
                 got=spec.distribution.name)
    # The site's GPU vendor says which toolkit GPU operations are built with (envtool.core.gpu_vendors):
    # a 'cuda' pin is needed only for CUDA (and where the site does not say, as before).
    vendor = gpu_vendors.vendor(getattr(spec.site.gpu, "vendor", None))
    if h.uses_gpu and spec.cuda is None and (vendor is None or vendor.toolkit == "CUDA"):
        fail("horovod.gpu_operations", "a 'cuda' pin when GPU operations (NCCL/MPI on GPU) are requested",
             hint="NCCL without CUDA cannot build")
    if h.uses_gpu and vendor is not None:
        where = f"site {spec.site.name}'s GPUs are {vendor.name}'s (its gpu.vendor)"
        if vendor.gpu_operations is None:
            fail("horovod.gpu_operations", f"no GPU operations: {where}, and Horovod has none for them "
                 f"({vendor.source}); their collective library is {vendor.collective}",
                 got=h.gpu_operations or dict(h.gpu_ops),
                 hint=f"leave GPU operations out; CPU operations use {vendor.cpu_operations or 'the controller'}")
        if vendor.toolkit != "CUDA":
            for field, value in (("horovod.cuda_home", h.cuda_home), ("horovod.cuda_cc_list", h.cuda_cc_list)):
                if value:
                    fail(field, f"no CUDA setting: {where}, whose toolkit is {vendor.toolkit}", got=value,
                         hint=f"name the toolkit's directory with {vendor.home_var} in horovod.extra_env instead")
    cpu_only = [p for p in spec.platforms if p in CPU_ONLY_PLATFORMS]
    if cpu_only and h.uses_gpu:
        fail("platforms", "platforms with CUDA when GPU operations are requested", got=cpu_only,
             hint="drop the CPU-only platforms or the GPU operations")
    if cpu_only and spec.cuda is not None:
        fail("cuda", "no 'cuda' pin on a CPU-only platform", got=cpu_only)
    # A channel's horovod package needs a conda environment (stacks.md: WML-CE 1.7.0, Open-CE).
    if h.install == "conda" and spec.engine != "conda":
        fail("horovod.install", "engine: conda when Horovod comes from a channel (install: conda)",
             got=spec.engine)
    # build-only packages are conda packages added and removed around the pip build of Horovod
    if h.build_packages and (spec.engine != "conda" or h.install != "pip-build"):
        fail("horovod.build_packages", "engine: conda and horovod.install: pip-build when build-only conda "
             "packages are listed", got=f"engine {spec.engine}, install {h.install}")
    if spec.venv.system_site_packages and spec.engine != "venv":
        fail("venv.system_site_packages", "engine: venv (a conda env has no system site packages)",
             got=spec.engine, hint="drop the venv section, or clone a module's Python with --clone")
    if h.cpu_operations == "gloo" and "gloo" not in h.controllers:
        fail("horovod.cpu_operations", "gloo among horovod.controllers when cpu_operations is gloo")
    if h.cpu_operations == "mpi" and "mpi" not in h.controllers:
        fail("horovod.cpu_operations", "mpi among horovod.controllers when cpu_operations is mpi")
    # oneCCL support (and the CCL check-build line) arrived in 0.19.0; before it was MLSL
    # (horovod/run/run.py@v0.18.2).
    if h.cpu_operations == "ccl" and version is not None and version < Version("0.19.0"):
        fail("horovod.cpu_operations", "Horovod >= 0.19.0 for CCL (0.17-0.18 had MLSL)", got=str(version))
    if h.nccl_link and not (h.gpu_operations == "nccl" or "nccl" in ops.values()):
        fail("horovod.nccl_link", "NCCL GPU operations when nccl_link is set", got=h.nccl_link)

    cb = spec.expect.check_build
    if cb is not None and h.install != "none":
        # What --check-build can show follows from the build request (flags.build_env: a framework
        # or controller not requested gets HOROVOD_WITHOUT_*; horovod/runner/launch.py@v0.28.1).
        from envtool.core import frameworks

        for name in cb.frameworks:
            fw = frameworks.by_label(name)  # a label of CHECK_BUILD_FRAMEWORKS: checked at load
            if fw is None or fw.name not in h.frameworks:
                fail("expect.check_build.frameworks", f"{name} among horovod.frameworks when check-build "
                     f"is to show it", got=list(h.frameworks))
        for name in cb.controllers:
            if name.lower() not in h.controllers:
                fail("expect.check_build.controllers", f"{name.lower()} among horovod.controllers when "
                     f"check-build is to show it", got=list(h.controllers))
        # For a pip build envtool derives the GPU variables itself, so NCCL/DDL only appear when asked
        # for (a channel's package may be built otherwise than its spec describes; not checked).
        gpu_impls = set(ops.values()) | ({h.gpu_operations} if h.gpu_operations else set())
        if h.install != "pip-build":
            gpu_impls |= {"nccl", "ddl"}
        if "NCCL" in cb.tensor_operations and "nccl" not in gpu_impls:
            fail("expect.check_build.tensor_operations", "NCCL GPU operations in horovod when check-build is "
                 "to show NCCL")
        if "DDL" in cb.tensor_operations and "ddl" not in gpu_impls:
            fail("expect.check_build.tensor_operations", "horovod.gpu_ops.allreduce: ddl when check-build is "
                 "to show DDL")
    if cb is not None:
        if version is not None and version < Version("0.17.1"):
            fail("expect.check_build", "null: horovodrun --check-build does not exist before 0.17.1",
                 got=str(version))
        if version is not None and version < Version("0.19.0") and "CCL" in cb.tensor_operations:
            fail("expect.check_build.tensor_operations", "MLSL, not CCL, before Horovod 0.19.0")
        if version is not None and version >= Version("0.19.0") and "MLSL" in cb.tensor_operations:
            fail("expect.check_build.tensor_operations", "CCL, not MLSL, from Horovod 0.19.0")

    # Known incompatibilities (envtool.core.incompatible.KNOWN, each row with its sources): a pin
    # that admits only broken versions stops here, before anything is built.
    if h.install != "none":
        _check_incompatible(spec, version, raw)

    # Checked last, so that a more specific rule above names its own field first. envtool builds
    # with HOROVOD_WITHOUT_<X>=1 for every framework not listed, and "at least one [framework] must
    # be enabled for Horovod to install successfully" (horovod@v0.28.1:docs/install.rst).
    if h.install == "pip-build" and not h.frameworks:
        fail("horovod.frameworks", "at least one of " + ", ".join(FRAMEWORKS) + " when Horovod is built",
             got=list(h.frameworks), hint="a GPU build" if h.uses_gpu else "")
