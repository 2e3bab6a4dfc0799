"""GPU gates: will a CUDA build of the framework run on these GPUs (core layer; issue 41, item 3)?

Pure functions over facts, each returning a :class:`Gate` (passed, failed with the fix, or not
decidable from what is known). The facts come from the node (``nvidia-smi``'s header,
``nvidia-smi -L`` and the ``compute_cap`` query: :func:`node_facts`; the framework's own view
from the ``env_info`` probe) when ``doctor`` runs on a GPU node, or from the site file's ``gpu``
section when ``plan`` runs on a login node.

* :func:`driver_gate`: the node's driver against the CUDA version the framework was built with
  (natively up to the driver's CUDA, else NVIDIA's minimum driver per CUDA major, :data:`MIN_DRIVER`).
* :func:`arch_gate`: the compute capabilities compiled into the framework (``torch.cuda.get_arch_list()``)
  cover the GPU's: a cubin for ``sm_XY`` runs on capability ``X.Z`` with ``Z >= Y`` (the same
  major), PTX for ``compute_XY`` is compiled at load time for any capability ``>= X.Y``, and an
  arch-specific target (``sm_90a``) runs on exactly that capability. An uncovered GPU fails at
  the first kernel with "no kernel image is available for execution on the device".
* :func:`mig_gate`: more than one NCCL rank per node on MIG slices is refused (NCCL's MIG support
  is experimental and has no GPU peer-to-peer between instances: NVIDIA/nccl#1716, 2026-08-23;
  NCCL refuses two ranks on one GPU since 2.5: NVIDIA/nccl#103).

Sources: NVIDIA's CUDA compatibility guide (minimum drivers, :data:`DRIVER_SOURCE`), the CUDA C++ Programming Guide's
"Binary Compatibility" and "PTX Compatibility"
(https://docs.nvidia.com/cuda/cuda-c-programming-guide/#binary-compatibility), NVIDIA's list of
compute capabilities (https://developer.nvidia.com/cuda-gpus), NVIDIA/nccl#1716 (MIG).
"""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from packaging.version import InvalidVersion, Version

from envtool.core import comm_rules, external

#: Where the minimum drivers come from (Table 1, "CUDA Toolkit 11.x, 12.x, and 13.x Driver Version Ranges").
DRIVER_SOURCE = "https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html"
#: The oldest Linux driver that runs anything built with CUDA major N (minor-version
#: compatibility), newest major first: (N, driver). CUDA 11.0 shipped with an older driver;
#: 450.80.02 is the one the guide names for the whole 11.x family.
MIN_DRIVER: Tuple[Tuple[int, str], ...] = ((13, "580"), (12, "525"), (11, "450.80.02"))
#: Where the compute-capability rules of :func:`covers` come from.
ARCH_SOURCE = "https://docs.nvidia.com/cuda/cuda-c-programming-guide/#binary-compatibility"
#: Where the MIG refusal comes from.
MIG_SOURCE = "https://github.com/NVIDIA/nccl/issues/1716"
#: Compute capability by GPU name, for drivers whose ``nvidia-smi`` cannot be asked
#: (``compute_cap`` is not a query field of the 470 driver, huggingface/candle#733): a pattern on
#: the name, first match wins. Source: https://developer.nvidia.com/cuda-gpus.
CAPABILITY_BY_NAME: Tuple[Tuple[str, str], ...] = (
    (r"\bGB?200\b", "10.0"), (r"\bB200\b", "10.0"), (r"\bGH200\b", "9.0"), (r"\bH200\b", "9.0"),
    (r"\bH100\b", "9.0"), (r"\bL40S?\b", "8.9"), (r"\bL4\b", "8.9"), (r"\bA100\b", "8.0"), (r"\bA30\b", "8.0"),
    (r"\bA40\b", "8.6"), (r"\bA10G?\b", "8.6"), (r"\bT4\b", "7.5"), (r"\bV100", "7.0"), (r"TITAN V\b", "7.0"),
    (r"\bP100\b", "6.0"), (r"TITAN Xp\b", "6.1"),
)
CAPABILITY_SOURCE = "https://developer.nvidia.com/cuda-gpus"
#: The ``nvidia-smi`` argvs whose output the parsers below read.
SMI = ("nvidia-smi",)
SMI_LIST = ("nvidia-smi", "-L")
SMI_CAPS = ("nvidia-smi", "--query-gpu=index,compute_cap", "--format=csv")

STATUSES = ("ok", "fail", "unknown")


@dataclass(frozen=True)
class Gate:
    """The outcome of one gate.

    Attributes:
        id: ``driver``, ``arch``, ``mig``, ``horovod-arch`` (:func:`cuda_objects_gate`).
        status: ``ok``, ``fail`` or ``unknown`` (a fact was missing: ``problem`` says which).
        summary: one line for people (what was compared).
        fix: what to do when it failed ("" otherwise).
        source: the public source of the rule.
    """

    id: str
    status: str
    summary: str
    fix: str = ""
    source: str = ""

    def to_dict(self) -> Dict[str, str]:
        """JSON-ready form."""
        return {"id": self.id, "status": self.status, "summary": self.summary, "fix": self.fix, "source": self.source}


@dataclass(frozen=True)
class NodeGPU:
    """One GPU of a node, as ``nvidia-smi -L`` lists it.

    Attributes:
        index: its index.
        name: the product name (``NVIDIA H100 80GB HBM3``).
        mig: the profiles of its MIG devices (``1g.10gb``), empty when MIG is off.
        capability: its compute capability (``9.0``), or None when not known.
    """

    index: int
    name: str
    mig: Tuple[str, ...] = ()
    capability: Optional[str] = None


@dataclass(frozen=True)
class GateFacts:
    """What the gates compare.

    Attributes:
        driver: the node's driver version, or None.
        driver_cuda: the newest CUDA the driver runs natively (``nvidia-smi``'s header), or None.
        cuda: the CUDA version the framework was built with (``torch.version.cuda``: ``12.4``), or None.
        capability: the GPU's compute capability (``9.0``), or None.
        gpu: the GPU's name, for messages.
        arch_list: the framework's compiled targets (``sm_80``, ``compute_90``), or None when unknown.
        framework: whose targets ``arch_list`` are (``torch``).
        mig: MIG is enabled on the GPUs, or None when unknown.
        nccl_ranks_per_gpu_node: the ranks one node runs with NCCL (0: no NCCL).
        where: where the facts come from, for messages (``nvidia-smi on nid001``, ``site perlmutter``).
    """

    driver: Optional[str] = None
    driver_cuda: Optional[str] = None
    cuda: Optional[str] = None
    capability: Optional[str] = None
    gpu: str = "the GPU"
    arch_list: Optional[Tuple[str, ...]] = None
    framework: str = "torch"
    mig: Optional[bool] = None
    nccl_ranks_per_gpu_node: int = 0
    where: str = ""


def parse_smi_header(text: str) -> Optional[Tuple[str, str]]:
    """``(driver, CUDA)`` from the header of ``nvidia-smi``'s default output: ``Driver Version: X
    CUDA Version: Y``, or from the 610 driver on ``KMD Version: X  CUDA UMD Version: Y``
    (sgl-project/sglang#27487). The CUDA version is the newest the driver runs natively. None
    when neither is there (``CUDA Version: Not Found`` on a vGPU host, bigstack-oss/cubecos#312)."""
    m = re.search(r"(?:Driver|KMD) Version:\s*([0-9]{1,9}(?:\.[0-9]{1,9}){1,4})\s+CUDA (?:UMD )?Version:\s*"
                  r"([0-9]{1,4}\.[0-9]{1,4})(?![0-9])", text)
    return (m.group(1), m.group(2)) if m else None


def parse_smi_list(text: str) -> List[NodeGPU]:
    """The GPUs of ``nvidia-smi -L`` with their MIG devices (the indented ``MIG 1g.10gb  Device 0:``
    lines under a GPU; older drivers name them ``MIG-GPU-<uuid>/<gi>/<ci>``, the same line form)."""
    gpus: List[NodeGPU] = []
    for line in text.splitlines():
        g = re.match(r"GPU (\d+): (.+?) \(UUID: ", line)
        index = external.small_int(g.group(1)) if g else None
        if g and index is not None:
            gpus.append(NodeGPU(index, g.group(2).strip()))
            continue
        m = re.match(r"\s+MIG (\S+)\s+Device\s+\d+:", line)
        if m and gpus:
            last = gpus[-1]
            gpus[-1] = NodeGPU(last.index, last.name, last.mig + (m.group(1),), last.capability)
    return gpus


def _csv_rows(text: str) -> List[List[str]]:
    """The CSV rows of ``text``, each line read on its own: a line the csv module refuses (a quoted
    field over its size limit, ``csv.Error``) is skipped, and an open quote ends with its line."""
    rows: List[List[str]] = []
    for line in text.splitlines():
        try:
            rows += list(csv.reader([line], skipinitialspace=True))
        except csv.Error:
            continue
    return rows


def parse_smi_caps(text: str) -> Dict[int, str]:
    """Index -> compute capability from ``nvidia-smi --query-gpu=...,index,compute_cap --format=csv``
    (:data:`SMI_CAPS`; the header line names the columns, in any order). A driver without the
    ``compute_cap`` field prints an error instead (huggingface/candle#733): nothing is returned."""
    caps: Dict[int, str] = {}
    columns: Optional[List[str]] = None
    for row in _csv_rows(text):
        cells = [c.strip() for c in row]
        if "compute_cap" in cells and "index" in cells:
            columns = cells
            continue
        if columns is None or len(cells) != len(columns):
            continue
        entry = dict(zip(columns, cells))
        index = external.small_int(entry["index"])
        if index is not None and re.fullmatch(r"[0-9]{1,4}\.[0-9]{1,4}", entry["compute_cap"]):
            caps[index] = entry["compute_cap"]
    return caps


def capability_of(name: str) -> Optional[str]:
    """The compute capability of a GPU by its name (:data:`CAPABILITY_BY_NAME`), or None."""
    for pattern, cap in CAPABILITY_BY_NAME:
        if re.search(pattern, name):
            return cap
    return None


def node_facts(smi: str, listing: str, caps: str = "", **facts) -> "GateFacts":
    """:class:`GateFacts` of a node from ``nvidia-smi`` (:data:`SMI`), ``nvidia-smi -L`` and the
    optional capability query (:data:`SMI_CAPS`); ``facts`` adds the framework's side (``cuda``,
    ``arch_list``, ``nccl_ranks_per_gpu_node``, ``where``). The first GPU stands for the node (a
    node's GPUs are one model at the sites envtool knows); MIG counts when any GPU has it on."""
    header = parse_smi_header(smi)
    gpus = parse_smi_list(listing)
    by_index = parse_smi_caps(caps)
    first = gpus[0] if gpus else None
    cap = None
    if first is not None:
        cap = by_index.get(first.index) or capability_of(first.name)
    return GateFacts(driver=header[0] if header else None, driver_cuda=header[1] if header else None,
                     capability=cap, gpu=first.name if first else "the GPU",
                     mig=any(g.mig for g in gpus) if gpus else None, **facts)


def _version(text: Optional[str]) -> Optional[Version]:
    try:
        return Version(text) if text else None
    except (InvalidVersion, ValueError):  # packaging raises ValueError on a number int() refuses
        return None


def min_driver(cuda: str) -> Optional[str]:
    """The oldest driver that runs CUDA ``cuda`` (``12.4``) through minor-version compatibility
    (:data:`MIN_DRIVER`), or None for a major the table does not know."""
    v = _version(cuda)
    if v is None:
        return None
    for major, driver in MIN_DRIVER:
        if v.major == major:
            return driver
    return None


def driver_gate(facts: GateFacts) -> Gate:
    """The node's driver against the CUDA the framework was built with.

    The driver runs CUDA up to the version in ``nvidia-smi``'s header natively; a newer minor of
    the same major runs through minor-version compatibility when the driver is at least
    :data:`MIN_DRIVER`'s for that major (with a limited feature set: PTX newer than the driver is
    not compiled); a newer major does not run.

    Returns:
        ``fail`` with the fix, ``unknown`` when a version is missing, else ``ok``.
    """
    where = f" ({facts.where})" if facts.where else ""
    if not facts.cuda:
        return Gate("driver", "unknown", f"driver {facts.driver or '?'}{where}: the CUDA version {facts.framework} "
                    "is built with is not known (a CPU build, or not installed yet)", source=DRIVER_SOURCE)
    want = _version(facts.cuda)
    have = _version(facts.driver)
    native = _version(facts.driver_cuda)
    if want is None or (have is None and native is None):
        return Gate("driver", "unknown", f"CUDA {facts.cuda}: the node's driver version is not known{where}",
                    source=DRIVER_SOURCE)
    minimum = min_driver(facts.cuda)
    oldest_major, oldest_driver = MIN_DRIVER[-1]
    if minimum is None:
        where_ = f" ({facts.where})" if facts.where else ""
        if want.major < oldest_major and have is not None and have >= Version(oldest_driver):
            # a driver runs every older toolkit (backward compatibility, the same page)
            return Gate("driver", "ok", f"driver {facts.driver}{where_} runs CUDA {facts.cuda} (older than CUDA "
                        f"{oldest_major}, which it runs)", source=DRIVER_SOURCE)
        return Gate("driver", "unknown", f"driver {facts.driver or '?'}{where_}, CUDA {facts.cuda}: no minimum "
                    "driver known for that CUDA major", source=DRIVER_SOURCE)
    built = f"{facts.framework} is built with CUDA {facts.cuda}"
    shown = f"driver {facts.driver or '?'}" + (f" (CUDA {facts.driver_cuda})" if facts.driver_cuda else "") + where
    if native is not None and want.release[:2] <= native.release[:2]:
        return Gate("driver", "ok", f"{shown} runs CUDA {facts.cuda} natively", source=DRIVER_SOURCE)
    if have is not None and minimum is not None and have >= Version(minimum) and \
            (native is None or native.major == want.major):
        return Gate("driver", "ok", f"{shown} runs CUDA {facts.cuda} through minor-version compatibility (needs "
                    f">= {minimum} for CUDA {want.major}.x; PTX newer than the driver is not compiled)",
                    source=DRIVER_SOURCE)
    newest = facts.driver_cuda or _newest_cuda(have)
    fix = (f"use a build of {facts.framework} for CUDA {newest} or older" if newest else
           f"use a build of {facts.framework} for an older CUDA")
    fix += (f", or ask the site for a driver >= {minimum} (CUDA {want.major}.x)" if minimum else
            ", or ask the site for a newer driver")
    return Gate("driver", "fail", f"{shown} is too old: {built}" + (f", which needs a driver >= {minimum}"
                if minimum else ""), fix, DRIVER_SOURCE)


def _newest_cuda(driver: Optional[Version]) -> Optional[str]:
    """The newest CUDA major a driver runs by :data:`MIN_DRIVER` (``12.x``), or None."""
    if driver is None:
        return None
    for major, minimum in MIN_DRIVER:
        if driver >= Version(minimum):
            return f"{major}.x"
    return None


def _target(word: str) -> Optional[Tuple[str, int, int, str]]:
    """``sm_86`` -> ("sm", 8, 6, ""), ``compute_90`` -> ("compute", 9, 0, ""), ``sm_90a`` -> (..., "a")."""
    m = re.fullmatch(r"(sm|compute)_([0-9]{1,4})([0-9])([af]?)", word.strip())
    return (m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)) if m else None


def covers(arch_list: Sequence[str], capability: str) -> Optional[str]:
    """The target of ``arch_list`` that runs on ``capability`` (``9.0``), or None.

    A cubin ``sm_XY`` runs on ``X.Z`` for ``Z >= Y``; ``sm_XYa`` on ``X.Y`` only; ``sm_XYf`` on
    the family (``X.Z``, ``Z >= Y``); PTX ``compute_XY`` on any capability ``>= X.Y``
    (``compute_XYa`` on ``X.Y`` only), compiled when loaded. The closest cubin is preferred, then
    the newest PTX.
    """
    m = re.fullmatch(r"([0-9]{1,4})\.([0-9]{1,4})", capability.strip())
    if not m:
        return None
    cap = (int(m.group(1)), int(m.group(2)))
    cubins: List[Tuple[Tuple[int, int], str]] = []
    ptx: List[Tuple[Tuple[int, int], str]] = []
    for word in arch_list:
        t = _target(word)
        if t is None:
            continue
        kind, tmaj, tmin, suffix = t
        runs = (tmaj, tmin) == cap if suffix == "a" else (
            tmaj == cap[0] and tmin <= cap[1] if kind == "sm" else (tmaj, tmin) <= cap)
        if runs:
            (cubins if kind == "sm" else ptx).append(((tmaj, tmin), word.strip()))
    best = max(cubins) if cubins else (max(ptx) if ptx else None)
    return best[1] if best else None


def arch_gate(facts: GateFacts) -> Gate:
    """The framework's compiled targets against the GPU's compute capability (:func:`covers`).

    Returns:
        ``fail`` naming the targets and the fix when nothing covers the capability, ``unknown``
        when the capability or the targets are not known, else ``ok`` naming the target used.
    """
    where = f" ({facts.where})" if facts.where else ""
    if not facts.capability or facts.arch_list is None:
        return Gate("arch", "unknown", f"{facts.gpu}{where}: " + ("compute capability not known"
                    if not facts.capability else f"{facts.framework}'s compiled targets not known"), source=ARCH_SOURCE)
    if not facts.arch_list:
        return Gate("arch", "unknown", f"{facts.framework} lists no compiled targets (a CPU build)", source=ARCH_SOURCE)
    hit = covers(facts.arch_list, facts.capability)
    cc = facts.capability.replace(".", "")
    if hit is None:
        return Gate("arch", "fail", f"{facts.framework} has no kernels for {facts.gpu}{where}, compute capability "
                    f"{facts.capability} (it has {' '.join(facts.arch_list)}): every kernel would fail with \"no "
                    "kernel image is available for execution on the device\"",
                    f"install a build of {facts.framework} that lists sm_{cc} (or PTX for an older capability) in "
                    f"{facts.framework}.cuda.get_arch_list(); a newer release usually does", ARCH_SOURCE)
    how = "PTX compiled when loaded" if hit.startswith("compute_") else "a cubin"
    return Gate("arch", "ok", f"{facts.framework}'s {hit} runs on {facts.gpu}, compute capability "
                f"{facts.capability} ({how})", source=ARCH_SOURCE)


#: How ``cuobjdump --list-elf FILE`` and ``cuobjdump --list-ptx FILE`` name each embedded image:
#: ``ELF file    1: NAME.sm_80.cubin`` (a cubin for ``sm_80``), ``PTX file    1: NAME.sm_80.ptx``
#: (PTX for virtual architecture 8.0, compiled when loaded). Sources: NVIDIA's CUDA Binary
#: Utilities (https://docs.nvidia.com/cuda/cuda-binary-utilities/index.html, cuobjdump options
#: ``--list-elf`` and ``--list-ptx``) and PyTorch's test of the same listing
#: (``pytorch/pytorch@5cead903cab1:test/test_cpp_extensions_jit.py``, ``_run_jit_cuda_archflags``).
CUOBJDUMP_LINE = re.compile(r"^\s*(ELF|PTX) file\s+\d+:\s*\S*?\.sm_(\d+[a-z]?)\.(cubin|ptx)\s*$", re.M)
#: Where Horovod's CUDA kernels get their architectures (``HOROVOD_BUILD_CUDA_CC_LIST``,
#: ``horovod/horovod@v0.28.1:docs/install.rst``, "Environment Variables").
HOROVOD_CC_SOURCE = "horovod/horovod@v0.28.1:docs/install.rst (HOROVOD_BUILD_CUDA_CC_LIST)"


def parse_cuobjdump_list(text: str) -> Tuple[str, ...]:
    """The targets of a CUDA object from ``cuobjdump --list-elf`` (and ``--list-ptx``) output, in
    :func:`covers`'s words: ``sm_80`` for a cubin line, ``compute_80`` for a PTX line, each once,
    in order (:data:`CUOBJDUMP_LINE`). Other lines (``cuobjdump info    : File '…' does not
    contain device code``) are skipped: () for an object without CUDA code."""
    out: List[str] = []
    for kind, arch, _ in CUOBJDUMP_LINE.findall(text):
        word = ("sm_" if kind == "ELF" else "compute_") + arch
        if word not in out:
            out.append(word)
    return tuple(out)


#: The id of :func:`cuda_objects_gate`'s gate.
OBJECTS_GATE = "horovod-arch"


def cuda_objects_gate(listing: str, obj: str, capability: Optional[str], gpu: str = "the GPU",
                      where: str = "") -> Gate:
    """Horovod's CUDA objects (``obj``, a library of its build) against the GPU's compute capability,
    from ``cuobjdump --list-elf OBJ`` output (:func:`parse_cuobjdump_list`, :func:`covers`).

    Args:
        listing: what cuobjdump printed for ``obj``.
        obj: the object's path or name, for messages.
        capability: the GPU's compute capability (``9.0``), or None.
        gpu: the GPU's name; where: where the facts come from (both for messages).
    Returns:
        ``fail`` naming the architectures found and the fix (rebuild with
        ``HOROVOD_BUILD_CUDA_CC_LIST`` naming the capability) when none covers it; ``unknown``
        without a capability or without device code in the listing; else ``ok`` naming the image.
    """
    at = f" ({where})" if where else ""
    targets = parse_cuobjdump_list(listing)
    if not capability:
        return Gate(OBJECTS_GATE, "unknown", f"{gpu}{at}: compute capability not known", source=HOROVOD_CC_SOURCE)
    if not targets:
        return Gate(OBJECTS_GATE, "unknown", f"{obj}: cuobjdump lists no CUDA images (no device code, or not "
                    "cuobjdump --list-elf output)", source=HOROVOD_CC_SOURCE)
    hit = covers(targets, capability)
    cc = capability.replace(".", "")
    if hit is None:
        return Gate(OBJECTS_GATE, "fail", f"Horovod's CUDA kernels in {obj} have no image for {gpu}{at}, compute "
                    f"capability {capability} (they have {' '.join(targets)}): its GPU operations would fail with "
                    "\"no kernel image is available for execution on the device\"",
                    f"rebuild Horovod with HOROVOD_BUILD_CUDA_CC_LIST including {cc} (the spec's "
                    "horovod.cuda_cc_list)", HOROVOD_CC_SOURCE)
    how = "PTX compiled when loaded" if hit.startswith("compute_") else "a cubin"
    return Gate(OBJECTS_GATE, "ok", f"Horovod's {hit} in {obj} runs on {gpu}, compute capability {capability} ({how})",
                source=HOROVOD_CC_SOURCE)


def mig_gate(facts: GateFacts) -> Gate:
    """More than one NCCL rank per node on MIG slices is refused (NVIDIA/nccl#1716).

    Returns:
        ``fail`` when MIG is enabled and a node runs two or more NCCL ranks, ``unknown`` when
        MIG's state is not known and NCCL runs several ranks, else ``ok``.
    """
    where = f" ({facts.where})" if facts.where else ""
    ranks = facts.nccl_ranks_per_gpu_node
    if facts.mig and ranks > 1:
        return Gate("mig", "fail", f"MIG is enabled on {facts.gpu}{where} and {ranks} ranks per node would "
                    "communicate with NCCL across MIG instances: NCCL's MIG support is experimental and has no "
                    "GPU peer-to-peer between instances (NVIDIA, 2026-08-23)",
                    "run on whole GPUs (a partition or node type without MIG), or one rank per node",
                    MIG_SOURCE)
    if facts.mig is None and ranks > 1:
        return Gate("mig", "unknown", f"MIG state of {facts.gpu} not known{where}", source=MIG_SOURCE)
    if facts.mig:
        said = "MIG enabled, " + ("one NCCL rank per node" if ranks == 1 else "no NCCL ranks (no CUDA build of the "
                                                                            "framework, or one GPU per node)")
    else:
        said = "MIG not enabled" if facts.mig is not None else "MIG state not known"
    return Gate("mig", "ok", said + where, source=MIG_SOURCE)


def run_gates(facts: GateFacts) -> List[Gate]:
    """Every gate on ``facts``: driver, arch, mig (in that order)."""
    return [driver_gate(facts), arch_gate(facts), mig_gate(facts)]


@dataclass(frozen=True)
class GpuReport:
    """The gates and the known-bad stack rules for one spec at one site (``plan``) or one node
    (``doctor``).

    Attributes:
        gates: the :class:`Gate` outcomes (empty when there was nothing to check).
        matched: the :class:`~envtool.core.comm_rules.CommRule` rows that apply.
        undecided: ``(rule, why)`` rows a missing fact leaves open.
        avoided: ``(rule, setting)`` rows the environment works around.
        skipped: why nothing was checked, or "".
    """

    gates: Tuple[Gate, ...] = ()
    matched: Tuple[Any, ...] = ()
    undecided: Tuple[Tuple[Any, str], ...] = ()
    avoided: Tuple[Tuple[Any, str], ...] = ()
    skipped: str = ""

    def problems(self) -> List[Tuple[str, str]]:
        """``(problem, fix)`` for every failed gate and every matched rule."""
        out = [(f"GPU gate {g.id}: {g.summary} ({g.source})", g.fix) for g in self.gates if g.status == "fail"]
        out += [(f"known-bad stack {r.id}: {r.reason} (source: {r.source}; {r.date})", r.fix) for r in self.matched]
        return out

    def lines(self) -> List[str]:
        """What ``plan`` prints, one line each."""
        if self.skipped:
            return [f"gpu: {self.skipped}"]
        out = [f"gpu gate {g.id}: {g.status}: {g.summary}" + (f"; fix: {g.fix}" if g.fix else "") for g in self.gates]
        out += [f"known-bad stack {r.id}: matched: {r.reason}; fix: {r.fix} ({r.source})" for r in self.matched]
        out += [f"known-bad stack {r.id}: avoided by {setting}" for r, setting in self.avoided]
        out += [f"known-bad stack {r.id}: undecided ({why})" for r, why in self.undecided]
        return out

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready form."""
        return {"skipped": self.skipped or None, "gates": [g.to_dict() for g in self.gates],
                "matched": [{"id": r.id, "reason": r.reason, "fix": r.fix, "source": r.source, "date": r.date}
                            for r in self.matched],
                "avoided": [{"id": r.id, "by": s} for r, s in self.avoided],
                "undecided": [{"id": r.id, "why": w} for r, w in self.undecided]}


def rules_report(gates: Sequence[Gate], facts: "comm_rules.CommFacts") -> GpuReport:
    """A :class:`GpuReport` of ``gates`` and the rows of :data:`envtool.core.comm_rules.KNOWN` ``facts`` match."""
    found = comm_rules.evaluate(facts)
    return GpuReport(gates=tuple(gates), matched=tuple(found["matched"]), undecided=tuple(found["undecided"]),
                     avoided=tuple(found["avoided"]))
