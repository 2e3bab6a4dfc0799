"""The allreduce sweep of a validation job: sizes, bus bandwidth, the transport NCCL used, the site
file's references, and the table (issue 24, item 3).

Every rank of each controller's step (:mod:`envtool.validate.rank_probe`, option ``--sweep``)
allreduces (sum) tensors of :data:`SIZES` bytes, float32, filled with a rank-dependent pattern of
small integers whose sum is exactly representable (so the result must be bit-exact, whatever
order the controller adds in), and times each size. This module turns the per-rank records into
one row per size and judges them.

Bus bandwidth follows nccl-tests' definition for allreduce (NVIDIA/nccl-tests, doc/PERFORMANCE.md,
https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md):
``algbw = size / time`` and ``busbw = algbw * 2 * (n - 1) / n`` for ``n`` ranks, which makes the
number comparable with the hardware's link bandwidth whatever the rank count.
"""
from __future__ import annotations

import re
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, TypedDict

from envtool.core import gpu_vendors
from envtool.core.gpu_vendors import GpuVendor

#: Bytes of each allreduce of the sweep: every power of two from 8 B to 64 MiB (as nccl-tests
#: ``-b 8 -e 64M -f 2``).
SIZES: Tuple[int, ...] = tuple(2 ** k for k in range(3, 27))
MAX_SIZE = SIZES[-1]


def busbw(size_bytes: int, seconds: float, ranks: int) -> float:
    """Bus bandwidth of one allreduce, bytes/s (nccl-tests' definition, see the module docstring).

    Args:
        size_bytes: the tensor's size in bytes.
        seconds: time of one allreduce (> 0).
        ranks: ranks taking part (>= 1; 1 rank moves nothing: 0.0).
    Returns:
        ``size / seconds * 2 * (ranks - 1) / ranks``.
    Raises:
        ValueError: ``seconds`` <= 0 or ``ranks`` < 1.
    """
    if seconds <= 0 or ranks < 1:
        raise ValueError(f"busbw needs seconds > 0 and ranks >= 1, got {seconds}, {ranks}")
    return size_bytes / seconds * 2.0 * (ranks - 1) / ranks


def human_size(n: int) -> str:
    """``8 B``, ``4 KiB``, ``64 MiB`` (powers of 1024; the unit the site file's keys use)."""
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << k and n % (1 << k) == 0:
            return f"{n >> k} {unit}"
    return f"{n} B"


#: ``NET/<name>`` as NCCL names its network transport in ``NCCL_DEBUG=INFO`` lines: the internal
#: ``Socket`` and ``IB`` transports and plugins (aws-ofi-nccl names itself ``AWS Libfabric`` or
#: ``OFI``); ``NET/Plugin`` lines only say whether a plugin loaded. Lines as NCCL prints them are
#: in tests/test_sweep.py, each with the public issue thread it was captured from.
_NET = re.compile(r"\bNET/(?!Plugin\b)(Socket|IB|OFI|AWS Libfabric|[A-Za-z][\w-]*)\b")
_USING = re.compile(r"\bUsing network (Socket|IB|AWS Libfabric|OFI|[A-Za-z][\w -]*?)\s*$")
_VIA = re.compile(r"\bvia (P2P|SHM|NET)/")


def transport_name(raw: str) -> str:
    """NCCL's name for a network transport → envtool's: ``socket``, ``ib``, ``ofi``, or lower case."""
    low = raw.strip().lower()
    if low == "socket":
        return "socket"
    if low in ("ib", "ibext"):
        return "ib"
    if low in ("ofi", "aws libfabric", "libfabric"):
        return "ofi"
    return low


class NcclTransports(TypedDict):
    """What :func:`nccl_transports` found (see there)."""

    network: Optional[str]
    initialised: List[str]
    channels: List[str]
    interfaces: List[str]


def nccl_transports(lines: Iterable[str]) -> NcclTransports:
    """What NCCL used, from its ``NCCL_DEBUG=INFO`` lines (a pure parser; lines from any rank).

    Recognised: ``NET/Socket : Using [0]eth0:…`` and ``NET/IB : Using [0]mlx5_0:1/IB …`` (the
    transports NCCL initialised), ``Using network Socket|IB|AWS Libfabric`` (the one it picked,
    NCCL >= 2.7), and channel lines ``… via NET/IB/0`` or ``via P2P/IPC``/``via SHM`` (what a
    connection went over).

    Args:
        lines: text lines (other lines are ignored).
    Returns:
        ``{"network": name or None, "initialised": [names], "channels": [names], "interfaces": [...]}``:
        ``network`` is the transport NCCL says it uses between nodes (``socket``, ``ib``, ``ofi``),
        from ``Using network`` or else from the ``NET/`` channel lines; ``channels`` also holds
        ``p2p``/``shm`` for connections inside a node; ``interfaces`` the NICs named after
        ``NET/Socket : Using`` or ``NET/IB : Using``.
    """
    network: Optional[str] = None
    initialised: List[str] = []
    channels: List[str] = []
    interfaces: List[str] = []
    for line in lines:
        if "NCCL INFO" not in line:
            continue
        m = _USING.search(line)
        if m:
            network = transport_name(m.group(1))
            continue
        via = _VIA.search(line)
        if via:
            kind = via.group(1).lower()
            if kind == "net":
                n = _NET.search(line[via.start():])
                kind = transport_name(n.group(1)) if n else "net"
            if kind not in channels:
                channels.append(kind)
            continue
        n = _NET.search(line)
        if n:
            name = transport_name(n.group(1))
            if name not in initialised:
                initialised.append(name)
            used = re.search(r"Using\s+((?:\[\d+\]\S+\s*)+)", line)
            if used:
                for nic in re.findall(r"\[\d+\]([^\s:;]+)", used.group(1)):
                    if nic not in interfaces:
                        interfaces.append(nic)
    if network is None:
        nets = [c for c in channels if c not in ("p2p", "shm")]
        network = nets[0] if nets else None
    return {"network": network, "initialised": initialised, "channels": channels, "interfaces": interfaces}


def rows(records: Sequence[dict]) -> List[dict]:
    """One row per size from the ranks' ``sweep`` checks.

    The time of a size is the slowest rank's mean time per allreduce (a collective is as fast
    as its slowest member); ``verified`` is true when every rank's result was bit-exact.

    Args:
        records: rank records of one step (each with ``checks.sweep.sizes``).
    Returns:
        ``[{"bytes", "ranks", "seconds", "latency_us", "algbw_gbs", "busbw_gbs", "verified",
        "iterations"}]`` in size order (GB/s = 1e9 bytes/s, as nccl-tests prints).
    """
    by_size: Dict[int, List[dict]] = {}
    n = 0
    for r in records:
        sw = (r.get("checks") or {}).get("sweep") or {}
        if sw.get("sizes"):
            n += 1
        for s in sw.get("sizes") or ():
            by_size.setdefault(int(s["bytes"]), []).append(s)
    out = []
    for size in sorted(by_size):
        got = by_size[size]
        secs = max(float(s["seconds"]) for s in got)
        out.append({"bytes": size, "ranks": len(got), "seconds": secs, "latency_us": secs * 1e6,
                    "algbw_gbs": size / secs / 1e9 if secs > 0 else 0.0,
                    "busbw_gbs": busbw(size, secs, len(got)) / 1e9 if secs > 0 else 0.0,
                    "verified": len(got) == n and all(s.get("exact") for s in got),
                    "iterations": min(int(s.get("iterations", 0)) for s in got)})
    return out


#: Units a reference may use: bandwidth (compared with busbw) or time (with the latency).
BANDWIDTH_UNITS = {"GB/s": 1.0, "MB/s": 1e-3}
TIME_UNITS = {"us": 1.0, "ms": 1e3}


def check_references(table: Sequence[dict], references, controller: str, nodes: int) -> List[str]:
    """Compare a sweep with the site file's references (ReFrame's bounds; see
    :class:`envtool.spec.sites.AllreduceReference`).

    A reference ``(value, lower, upper, unit)`` passes when the measured number lies within
    ``value * (1 + lower)`` and ``value * (1 + upper)`` (a None bound is open), as ReFrame's
    performance references (https://reframe-hpc.readthedocs.io/en/stable/regression_test_api.html,
    ``reference``). Bandwidth units compare the bus bandwidth, time units the latency.

    Args:
        table: from :func:`rows`.
        references: the site's :class:`~envtool.spec.sites.AllreduceReference` entries.
        controller: this sweep's controller (``mpi``, ``gloo``, ``torch``, ``nccl``).
        nodes: nodes of the job.
    Returns:
        problems, one line each, naming the controller, the size and the bound missed.
    """
    by_size = {r["bytes"]: r for r in table}
    problems = []
    for ref in references:
        if ref.nodes != nodes or ref.controller not in ("*", controller):
            continue
        row = by_size.get(ref.size)
        where = f"{controller} allreduce of {human_size(ref.size)} on {nodes} node(s)"
        if row is None:
            problems.append(f"{where}: no measurement (the sweep did not reach this size)")
            continue
        if ref.unit in BANDWIDTH_UNITS:
            got, what = row["busbw_gbs"] / BANDWIDTH_UNITS[ref.unit], "bus bandwidth"
        else:
            got, what = row["latency_us"] / TIME_UNITS[ref.unit], "latency"
        low = ref.value * (1 + ref.lower) if ref.lower is not None else None
        high = ref.value * (1 + ref.upper) if ref.upper is not None else None
        if low is not None and got < low:
            problems.append(f"{where}: {what} {got:.4g} {ref.unit} is below the site's reference "
                            f"{ref.value:g} {ref.unit} (lower bound {low:.4g}, {ref.source})")
        elif high is not None and got > high:
            problems.append(f"{where}: {what} {got:.4g} {ref.unit} is above the site's reference "
                            f"{ref.value:g} {ref.unit} (upper bound {high:.4g}, {ref.source})")
    return problems


#: How NCCL and RCCL say that no network plug-in loaded, with the library they looked for:
#: ``NET/Plugin : No plugin found (libnccl-net.so)`` (NVIDIA/nccl-tests#185, NCCL 2.19),
#: ``NET/Plugin : dlerror=libnccl-net.so: cannot open shared object file`` (same thread) and
#: ``NET/Plugin: Could not find: ofi libnccl-net-ofi.so`` (eth-cscs/cscs-docs@80abed138e7c:
#: docs/software/communication/nccl.md#L94). Any library name is taken, RCCL's librccl-net.so as well.
_PLUGIN_MISSING = re.compile(r"NET/Plugin\s*:.*?(?:No plugin found \(|dlerror=|Could not find:(?:\s+\S+)?\s+)"
                             r"(lib[\w.+-]*?\.so)")


def plugin_status(lines: Iterable[str], vendor: Optional[GpuVendor] = None) -> Dict[str, Any]:
    """Whether the collective library's network plug-in loaded, from its ``NCCL_DEBUG=INFO`` lines.

    The plug-in's library and the lines that show it in use are the GPU vendor's data
    (:data:`envtool.core.gpu_vendors.VENDORS`: NCCL's ``libnccl-net.so``, RCCL's ``librccl-net.so``,
    which says ``NET/OFI Using aws-ofi-rccl 1.4.0`` when in use).

    Args:
        lines: text lines from any rank (lines without ``NCCL INFO`` are ignored).
        vendor: the site's GPU vendor, or None (NVIDIA's NCCL).
    Returns:
        ``{"library": the plug-in library looked for, "in_use": bool, "missing": [libraries the
        library said it could not load]}``.
    """
    v = vendor or gpu_vendors.VENDORS["nvidia"]
    in_use = False
    missing: List[str] = []
    for line in lines:
        if "NCCL INFO" not in line:
            continue
        if any(mark in line for mark in v.plugin_in_use):
            in_use = True
        m = _PLUGIN_MISSING.search(line)
        if m and m.group(1) not in missing:
            missing.append(m.group(1))
    return {"library": v.net_plugin, "in_use": in_use, "missing": missing}


def check_fabric(transport: Optional[str], fabric: Optional[str], vendor: Optional[GpuVendor] = None,
                 plugin: Optional[Dict[str, Any]] = None) -> Optional[str]:
    """The problem when NCCL's (or RCCL's) network transport is not the site's fabric, or None.

    Args:
        transport: from :func:`nccl_transports` (``network``), or None when NCCL said nothing.
        fabric: the site file's ``validate.fabric`` (``ib``, ``ofi``, ``socket``) or None.
        vendor: the site's GPU vendor (its collective library and network plug-in are named in the
            fix), or None: NVIDIA's NCCL and ``libnccl-net.so``.
        plugin: :func:`plugin_status` of the same lines, or None (then the fix names no missing library).
    """
    if not fabric or fabric == "socket":
        return None
    v = vendor or gpu_vendors.VENDORS["nvidia"]
    lib = v.collective if v.collective in ("NCCL", "RCCL") else "NCCL"
    if transport is None:
        return (f"{lib} did not say which network transport it used (no NCCL_DEBUG=INFO 'NET/' line); the site's "
                f"fabric is {fabric}")
    if transport != fabric:
        said = ""
        if plugin and plugin.get("missing"):
            said = f"; {lib} found no {', '.join(plugin['missing'])}"
        plugin_lib = v.net_plugin or "its library"
        fix = {"ofi": f"load the site's {v.net_plugin_project or 'aws-ofi-nccl'} plugin ({plugin_lib} "
                      f"in a directory on LD_LIBRARY_PATH)",
               "ib": "check that the node's IB devices are visible and NCCL_IB_DISABLE is not set"}.get(fabric, "")
        return (f"{lib} used the {transport} transport between nodes, the site's fabric is {fabric} (a silent "
                f"fallback){said}" + (f"; fix: {fix}" if fix else ""))
    return None


def table(controller: str, table_rows: Sequence[dict], transport: str = "") -> str:
    """The sweep as text: size, latency, algbw, busbw, verified (one line per size)."""
    head = f"allreduce sweep, {controller}" + (f" ({transport})" if transport else "") + ":"
    lines = [head, f"{'size':>10}  {'iters':>5}  {'time (us)':>11}  {'algbw GB/s':>10}  {'busbw GB/s':>10}  bit-exact"]
    for r in table_rows:
        lines.append(f"{human_size(r['bytes']):>10}  {r['iterations']:>5}  {r['latency_us']:>11.1f}  "
                     f"{r['algbw_gbs']:>10.4f}  {r['busbw_gbs']:>10.4f}  {'yes' if r['verified'] else 'NO'}")
    return "\n".join(lines)
