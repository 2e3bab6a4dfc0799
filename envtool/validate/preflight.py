"""The pre-flight of a validation job: one task per node, before the main step, that names what
would break a multi-node run before it wastes the allocation (issue 24, item 4; first checks).

Each node runs ``preflight.sh`` (bash and coreutils only, since the environment may be missing
there) and writes ``RUN_DIR/preflight/task-<T>.txt``; a gate in the batch shell stops the job
script when the reports disagree. :func:`judge` turns the reports into problems, each naming the
node(s), the cause and a fix line quoted for the shell:

* the prefix exists on every node (a prefix on node-local storage, such as ``/tmp`` of the
  submitting host, exists on no compute node: the ranks then die before reporting anything);
* it is the same environment everywhere: the sha256 of its lockfile (``PREFIX/conda-lock.yml``)
  is the same on every node and on the submitting host;
* every node's hostname resolves, and to a non-loopback address when the job has more than one
  node: Gloo, NCCL and ``torch.distributed`` advertise the address the hostname resolves to, and a
  peer that is told ``127.0.1.1`` connects to itself and hangs (pytorch/pytorch#15592,
  facebookincubator/gloo#367; Debian's installer maps the hostname to 127.0.1.1, see
  https://www.debian.org/doc/manuals/debian-reference/ch05.en.html#_the_hostname_resolution);
* the shared libraries the ranks load first (torch's ``_C`` extension, Horovod's ``mpi_lib``) load
  there: ``ldd`` names a dependency missing (``not found``) or unreadable on that node;
* hostnames are distinct (Horovod and Open MPI group ranks into nodes by hostname);
* the interface the controllers are told to use (the site file's ``batch.interface``, else the one
  holding the address the node's hostname resolves to) exists on every node, and every node opens
  a TCP connection to every other node's address on it (5 s each): a name missing on some nodes
  or a NIC that does not reach the others is the most reported cause of multi-node Horovod hangs
  (horovod/horovod#584, #1086, #2159);
* ``/dev/shm`` is not tiny: NCCL's shared-memory transport and PyTorch's DataLoader workers put
  their buffers there, and both fail on the 64 MiB a Docker container gets by default (NCCL's
  troubleshooting guide, "Shared memory":
  https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html#shared-memory;
  PyTorch's README, "Using pre-built images": https://github.com/pytorch/pytorch#using-pre-built-images);
  below :data:`SHM_MIN_KIB` is a failure, below :data:`SHM_WARN_KIB` a warning;
* on GPU nodes, one process that imports torch and horovod.torch maps exactly one ``libnccl``
  (two copies, e.g. pip's ``nvidia-nccl-cu12`` and the environment's own, keep separate
  communicator state and hang or crash in the first collective).

The launcher's PMI against the MPI build is checked on the submitting host before the job is
submitted (:mod:`envtool.validate.pmi`): it needs ``srun`` and the MPI's ``ompi_info``, not a node.
"""
from __future__ import annotations

import hashlib
import re
import shlex
import shutil
from pathlib import Path
from typing import Dict, List, Optional

from envtool.core import external
from envtool.core.prefix import PrefixData

SCRIPT = Path(__file__).with_name("preflight.sh")
LOCK_NAMES = ("conda-lock.yml", ".envtool/conda-lock.yml")
#: the directory of the reports inside a run directory
DIR = "preflight"
#: /dev/shm below this (KiB) fails the pre-flight: Docker's default of 64 MiB, on which NCCL and
#: DataLoader workers fail (see the module docstring); preflight.sh's gate uses the same number
SHM_MIN_KIB = 64 * 1024
#: /dev/shm below this (KiB) is a warning: 1 GiB
SHM_WARN_KIB = 1024 * 1024
#: free space (KiB) below which the node-local directory is a warning: 1 GiB
LOCAL_MIN_KIB = 1024 * 1024
#: the files of an earlier run in the same run directory, removed before a new one
STALE = ("task-*.txt", "listen-*.txt", "connected-*", "maps-*.txt", "interface.env", ".task-*", ".listen-*")


def install(run_dir: Path) -> Path:
    """Copy ``preflight.sh`` into ``run_dir`` (which every node sees); returns its path."""
    dest = Path(run_dir) / "preflight.sh"
    shutil.copyfile(SCRIPT, dest)
    return dest


def node_argv(script: Path, run_dir: Path, prefix: Optional[Path], interface: Optional[str] = None,
              nodes: int = 1, gpu: bool = False) -> List[str]:
    """``bash preflight.sh RUN_DIR PREFIX IFACE NODES GPU``: the per-node words.

    Args:
        script: from :func:`install`.
        run_dir: the run directory (shared by the nodes).
        prefix: the environment (None, e.g. a module: ``-``).
        interface: the site file's ``batch.interface``, or None: each node takes the interface
            of the address its hostname resolves to.
        nodes: nodes of the job (each waits, at most 20 s, for the others' listeners).
        gpu: list the ``libnccl`` files one process of the environment maps (GPU nodes).
    """
    return ["bash", str(script), str(run_dir), str(prefix) if prefix is not None else "-", interface or "-",
            str(int(nodes)), "1" if gpu else "0"]


def clear(run_dir: Path) -> None:
    """Remove the pre-flight files of an earlier run in ``run_dir`` (only those preflight.sh writes)."""
    d = Path(run_dir) / DIR
    if d.is_dir():
        for pattern in STALE:
            for old in d.glob(pattern):
                old.unlink()


def interface_env(run_dir: Path) -> Path:
    """The file the gate writes: ``export`` lines of the interface every node chose (sourced by the job)."""
    return Path(run_dir) / DIR / "interface.env"


def nccl_libraries(maps: str) -> List[str]:
    """The distinct ``libnccl`` files a process maps, from its ``/proc/PID/maps`` text.

    A file counts once however many of its segments are mapped: files are told apart by device
    and inode (fields 4 and 5 of proc(5), https://man7.org/linux/man-pages/man5/proc_pid_maps.5.html),
    so a symlink (``libnccl.so`` -> ``libnccl.so.2``) is one file and two copies are two.

    Args:
        maps: the text of ``/proc/self/maps`` (or of any process).
    Returns:
        the path of each distinct file whose name starts with ``libnccl`` and holds ``.so``, in the
        order first mapped.
    """
    seen: Dict[tuple, str] = {}
    for line in maps.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6:
            continue
        path = parts[5].strip()
        if path.endswith(" (deleted)"):
            path = path[: -len(" (deleted)")]
        name = path.rsplit("/", 1)[-1]
        if name.startswith("libnccl") and ".so" in name:
            seen.setdefault((parts[3], parts[4]), path)
    return list(seen.values())


def gate_argv(script: Path, run_dir: Path, nodes: int, lock: Optional[str] = None) -> List[str]:
    """``bash preflight.sh --gate RUN_DIR NODES [LOCK_SHA256]``: the batch-shell check after the
    per-node step (``lock``: :func:`lock_sha256` on the submitting host, which every node must match)."""
    return ["bash", str(script), "--gate", str(run_dir), str(int(nodes))] + ([lock] if lock else [])


def lock_sha256(prefix: Optional[Path]) -> Optional[str]:
    """sha256 (hex) of the prefix's lockfile as this host sees it, or None (no prefix or no lock)."""
    if prefix is None:
        return None
    for name in LOCK_NAMES:
        p = Path(prefix) / name
        if p.is_file():
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            return h.hexdigest()
    return None


def gather(run_dir: Path) -> List[Dict[str, str]]:
    """The nodes' reports (``key=value`` lines, as preflight.sh writes them), sorted by task."""
    out = []
    d = Path(run_dir) / DIR
    for f in sorted(d.glob("task-*.txt")) if d.is_dir() else []:
        rec: Dict[str, str] = {}
        for line in f.read_text(errors="replace").splitlines():
            key, sep, value = line.partition("=")
            if sep:
                rec[key.strip()] = value.strip()
        out.append(rec)
    return sorted(out, key=lambda r: external.small_int(r.get("task")) or 0)


def _names(recs: List[Dict[str, str]]) -> str:
    return ", ".join(r.get("host", "?") for r in recs)


def _loopback(addr: str) -> bool:
    return addr.startswith("127.") or addr == "::1"


def judge(records: List[Dict[str, str]], nodes: int, prefix: Optional[Path],
          local_lock: Optional[str] = None, site_path: Optional[str] = None,
          run_dir: Optional[Path] = None, warnings: Optional[List[str]] = None,
          site_gpu=None, ranks_per_node: int = 1) -> List[str]:
    """Problems (one line each: node(s), cause, a quoted fix line), or [] when the pre-flight passed.

    Args:
        records: from :func:`gather`.
        nodes: nodes of the job.
        prefix: the environment's prefix (None for a module: the prefix checks are skipped).
        local_lock: :func:`lock_sha256` on the submitting host, or None.
        site_path: the site file (named in the interface's fix), or None.
        run_dir: the run directory (the ``maps-*.txt`` of GPU nodes are read from it), or None.
        warnings: a list that gets what is not a failure (``/dev/shm`` below 1 GiB, no tool to
            test reachability with), or None.
        site_gpu: the site file's ``gpu`` section (:class:`envtool.spec.sites.gpu.SiteGPU`: the
            network and NCCL plug-ins the known-bad stack rules need), or None.
        ranks_per_node: the job's ranks on each node (the MIG gate refuses more than one with NCCL).
    """
    problems: List[str] = []
    if warnings is None:
        warnings = []
    q = shlex.quote
    if len(records) < nodes:
        nodelist = records[0].get("nodelist", "?") if records else "the job"
        problems.append(f"pre-flight: only {len(records)} of {nodes} node(s) reported "
                        f"({_names(records) or 'none'} of {nodelist}); the others did not run it: see the job output")
    if prefix is not None:
        missing = [r for r in records if r.get("prefix") == "missing"]
        if missing:
            where = ("it exists on the submitting host only: on storage the nodes do not share, such as a "
                     "node-local /tmp" if Path(prefix).is_dir() else "it does not exist on the submitting host either")
            fix = shlex.join(["envtool", "clone", str(prefix), "--prefix", "/SHARED/envs/" + Path(prefix).name])
            problems.append(f"pre-flight: {_names(missing)}: the prefix {prefix} does not exist there ({where}); "
                            f"fix: put the environment on a file system every node mounts, e.g. {fix}, and "
                            f"validate that prefix")
        for r in records:
            so, _, why = r.get("lib_bad", "").partition("|")
            if so:
                problems.append(f"pre-flight: {r.get('host', '?')}: {so} cannot be loaded there "
                                f"({why or 'ldd failed'}): "
                                f"the ranks on that node would die importing it; fix: compare the node with "
                                f"another one: {shlex.join(['ldd', so])} on {r.get('host', '?')}, and restore "
                                f"the library (a mount or a package missing on that node)")
        for r in records:
            if r.get("prefix") == "unreadable":  # there, but not for this user: named, not called missing
                problems.append(f"pre-flight: {r.get('host', '?')}: the prefix {prefix} cannot be read there: "
                                f"{r.get('prefix_why') or 'cause not reported'}; fix: "
                                f"{shlex.join(['ls', '-ld', str(prefix)])} on that node, and make the path and "
                                f"its directories readable (and searchable) by the job's user")
        nopy: Dict[str, List[Dict[str, str]]] = {}
        for r in records:  # grouped by the cause each node names (preflight.sh: python_why)
            if r.get("prefix") == "present" and r.get("python", "present") != "present":
                nopy.setdefault(r.get("python_why") or "bin/python is absent", []).append(r)
        for why, recs in nopy.items():
            absent = all(r.get("python") == "missing" for r in recs)
            problems.append(f"pre-flight: {_names(recs)}: {prefix}: {why}; fix: "
                            f"{shlex.join(['ls', '-l', str(Path(prefix) / 'bin' / 'python')])} on "
                            f"{'those nodes' if len(recs) > 1 else 'that node'}, and "
                            + ("re-copy or re-create the environment" if absent else
                               "make the link resolve there (a relative link, or the base interpreter at the "
                               "same path on every node: 'envtool clone' makes a copy that needs none)"
                               if any(r.get("python") == "dangling" for r in recs) else
                               "make it readable and executable by the job's user"))
        hashes: Dict[str, List[Dict[str, str]]] = {}
        for r in records:
            if r.get("prefix") == "present":
                hashes.setdefault(r.get("lock_sha256", "none"), []).append(r)
        expected = local_lock or (max(hashes, key=lambda h: len(hashes[h])) if hashes else None)
        for h, recs in sorted(hashes.items()):
            if expected is not None and h != expected and (len(hashes) > 1 or local_lock):
                what = "no lockfile" if h == "none" else f"lockfile sha256 {h[:12]}"
                ref = "the submitting host" if local_lock else "the other nodes"
                problems.append(f"pre-flight: {_names(recs)}: {prefix} is a different environment there ({what}, "
                                f"{ref} has {expected[:12] if expected != 'none' else 'none'}); fix: let every "
                                f"node mount one copy, then check it: "
                                f"{shlex.join(['sha256sum', str(Path(prefix) / 'conda-lock.yml')])}")
    seen: Dict[str, List[Dict[str, str]]] = {}
    for r in records:
        seen.setdefault(r.get("host", "?"), []).append(r)
    for host, recs in seen.items():
        if len(recs) > 1:
            problems.append(f"pre-flight: hostname {host} is reported by {len(recs)} nodes (tasks "
                            f"{', '.join(r.get('task', '?') for r in recs)}): Horovod and Open MPI count ranks "
                            f"per node by hostname; fix: give each node its own name, "
                            f"e.g. {shlex.join(['hostnamectl', 'set-hostname', host + '-2'])} on one of them")
    for r in records:
        host = r.get("host", "?")
        first = r.get("first_addr", "-")
        own = [a for a in r.get("own_addrs", "").split() if ":" not in a and not _loopback(a)]
        line = f"{own[0] if own else 'ADDRESS'} {host}"
        if first in ("", "-"):
            problems.append(f"pre-flight: {host}: its hostname {host} does not resolve to an IPv4 address there "
                            f"(getent ahostsv4 {q(host)} is empty); fix: add {q(line)} to /etc/hosts on {host} "
                            f"(or the name to DNS)")
        elif _loopback(first) and nodes > 1:
            problems.append(f"pre-flight: {host}: its hostname {host} resolves to {first}, a loopback address: "
                            f"other nodes would be told to connect to {first} (Gloo, NCCL and torch.distributed "
                            f"hang or fail); fix: in /etc/hosts on {host} map the name to the node's network "
                            f"address instead: {q(line)}")
    problems += _judge_interface(records, nodes, site_path, warnings)
    warnings += interface_differences(records)
    problems += _judge_shm(records, warnings)
    problems += _judge_nccl(records, prefix, run_dir)
    problems += _judge_gpu_gates(records, run_dir, site_gpu, ranks_per_node, warnings)
    return problems


def _hostname_failed(r: Dict[str, str], nodes: int) -> bool:
    first = r.get("first_addr", "-")
    return first in ("", "-") or (_loopback(first) and nodes > 1)


def _judge_interface(records: List[Dict[str, str]], nodes: int, site_path: Optional[str],
                     warnings: List[str]) -> List[str]:
    problems: List[str] = []
    q = shlex.quote
    if nodes < 2:
        return problems
    have = [set(r.get("ifaces", "").split()) - {"lo"} for r in records if r.get("ifaces")]
    common = sorted(set.intersection(*have)) if have else []
    see = shlex.join(["srun", "--mpi=none", "-N", str(nodes), "--ntasks-per-node=1", "ip", "-o", "-4", "addr",
                      "show"])
    by_iface: Dict[str, List[Dict[str, str]]] = {}
    for r in records:
        if r.get("iface_state") == "missing" and not (r.get("iface_source") == "hostname"
                                                       and _hostname_failed(r, nodes)):
            by_iface.setdefault(r.get("iface", "-"), []).append(r)
    for iface, recs in by_iface.items():
        site_said = recs[0].get("iface_source") == "site"
        where = f" (batch.interface in {site_path or 'the site file'})" if site_said else ""
        theirs = "; ".join(f"{r.get('host', '?')} has {r.get('ifaces', '').strip() or 'none'}" for r in recs)
        pick = (f"set batch.interface in {q(site_path or 'the site file')} to one every node has "
                f"({', '.join(common)})" if common else "give every node an interface of the same name")
        if iface in ("", "-"):
            cause = "no interface holds the address its hostname resolves to"
        else:
            cause = f"interface {iface}{where} does not exist there"
        problems.append(f"pre-flight: {_names(recs)}: {cause} ({theirs}); Gloo, NCCL and Open MPI would be "
                        f"told to use it; fix: {pick}; see each node's with {see}")
    addr_of = {r.get("host", "?"): r.get("iface_addr", "-") for r in records}
    for r in records:
        host = r.get("host", "?")
        for tok in r.get("reach", "").split():
            peer, _, how = tok.partition(":")
            if how.startswith("fail"):
                addr = how.partition("@")[2] or addr_of.get(peer, "?")
                problems.append(f"pre-flight: {host} -> {peer}: no TCP connection to {peer}'s address {addr} on "
                                f"interface {r.get('iface', '?')} within 5 s (a route or a firewall between "
                                f"them, or the interface is not the nodes' network); fix: on {host} check the "
                                f"route with {shlex.join(['ip', 'route', 'get', addr])}, or set batch.interface "
                                f"in {q(site_path or 'the site file')} to the interface of the nodes' network")
        if r.get("reach_tool") == "-" and r.get("iface_state") == "present":
            warnings.append(f"pre-flight: {host}: neither python3 nor the environment's python runs there: the "
                            f"connections between nodes were not tested")
    return problems


def _judge_shm(records: List[Dict[str, str]], warnings: List[str]) -> List[str]:
    problems: List[str] = []
    fix = shlex.join(["mount", "-o", "remount,size=50%", "/dev/shm"])
    sized = [(r, external.small_int(r.get("shm_kib"))) for r in records]
    small = [(r, k) for r, k in sized if k is not None and 0 <= k < SHM_MIN_KIB]
    if small:
        sizes = ", ".join(f"{r.get('host', '?')} {k // 1024} MiB" for r, k in small)
        problems.append(f"pre-flight: {_names([r for r, _ in small])}: /dev/shm is below {SHM_MIN_KIB // 1024} MiB ({sizes}): "
                        f"NCCL's shared-memory transport and DataLoader workers fail there ('unhandled system "
                        f"error', 'Bus error'); fix: as root on those nodes {fix} (in a container: "
                        f"--shm-size or --ipc=host)")
    low = [r for r, k in sized if k is not None and SHM_MIN_KIB <= k < SHM_WARN_KIB]
    if low:
        warnings.append(f"pre-flight: {_names(low)}: /dev/shm is below {SHM_WARN_KIB // 1024 // 1024} GiB: DataLoader "
                        f"workers with large batches may run out of it; to raise it: {fix}")
    # free space, not size: a /dev/shm of many GiB that other jobs filled fails with ENOSPC (errno 28)
    full = [(r, k) for r, k in ((r, external.small_int(r.get("shm_free_kib"))) for r in records)
            if k is not None and 0 <= k < SHM_MIN_KIB]
    if full and not small:
        frees = ", ".join(f"{r.get('host', '?')} {k // 1024} MiB free" for r, k in full)
        problems.append(f"pre-flight: {_names([r for r, _ in full])}: /dev/shm full ({frees}; at least "
                        f"{SHM_MIN_KIB // 1024} MiB needed): NCCL, Gloo and DataLoader workers fail with "
                        f"'No space left on device' (errno 28); fix: remove stale files there "
                        f"({shlex.join(['ls', '-la', '/dev/shm'])}) or run without those nodes")
    tight = [(r, k) for r, k in ((r, external.small_int(r.get("local_free_kib"))) for r in records)
             if k is not None and 0 <= k < LOCAL_MIN_KIB]
    if tight:
        frees = ", ".join(f"{r.get('host', '?')} {r.get('local_path', '?')} {k // 1024} MiB free" for r, k in tight)
        warnings.append(f"pre-flight: {_names([r for r, _ in tight])}: the node-local directory has little free "
                        f"space ({frees}; below {LOCAL_MIN_KIB // 1024} MiB): caches and staged copies may fail "
                        f"with 'No space left on device'")
    return problems


def interface_differences(records: List[Dict[str, str]]) -> List[str]:
    """Warnings when the nodes' interfaces differ: the interface name, or its MTU (``iface``,
    ``iface_mtu`` of each node's record). Nodes whose interface names differ (one renamed while the
    site names none) make NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME impossible to set once for all;
    differing MTUs stall or slow large messages (fragmentation, jumbo frames dropped)."""
    out: List[str] = []
    for key, what in (("iface", "interface names"), ("iface_mtu", "interface MTUs")):
        seen: Dict[str, List[Dict[str, str]]] = {}
        for r in records:
            v = r.get(key, "-") or "-"
            if v != "-":
                seen.setdefault(v, []).append(r)
        if len(seen) > 1:
            each = "; ".join(f"{_names(recs)}: {v}" for v, recs in sorted(seen.items()))
            hint = ("set batch.interface in the site file only once every node has the same name"
                    if key == "iface" else "give every node's interface the same MTU")
            out.append(f"pre-flight: the nodes' {what} differ ({each}); {hint}")
    return out


def _judge_nccl(records: List[Dict[str, str]], prefix: Optional[Path], run_dir: Optional[Path]) -> List[str]:
    problems: List[str] = []
    for r in records:
        maps = r.get("maps", "-")
        if run_dir is None or not re.fullmatch(r"maps-\d+\.txt", maps):
            continue
        try:
            text = (Path(run_dir) / DIR / maps).read_text(errors="replace")
        except OSError:
            continue
        libs = nccl_libraries(text)
        if len(libs) > 1:
            pip_one = [x for x in libs if "/site-packages/nvidia/nccl/" in x]
            python = str(PrefixData(Path(prefix)).python) if prefix is not None else "python"
            fix = (shlex.join([python, "-m", "pip", "show", "-f", "nvidia-nccl-cu12", "nvidia-nccl-cu11"]) +
                   " (and remove the copy that does not match the CUDA build of torch and Horovod)") if pip_one \
                else shlex.join(["ls", "-l"] + libs)
            problems.append(f"pre-flight: {r.get('host', '?')}: {len(libs)} libnccl files in one process of the "
                            f"environment ({', '.join(libs)}): torch and Horovod then keep separate NCCL state "
                            f"and hang or crash in the first collective; fix: keep one: {fix}")
    return problems


def _read(run_dir: Path, name: str) -> str:
    try:
        return (Path(run_dir) / DIR / name).read_text(errors="replace")[:1 << 20]
    except OSError:
        return ""


def _judge_gpu_gates(records: List[Dict[str, str]], run_dir: Optional[Path], site_gpu, ranks_per_node: int,
                     warnings: List[str]) -> List[str]:
    """The GPU gates and the known-bad stack rules on each GPU node that reported ``nvidia-smi``'s
    outputs (:mod:`envtool.core.gpu_gates`, :mod:`envtool.core.comm_rules`): a failed gate or a
    matched rule is a problem naming the node and the fix; an undecided rule is a warning."""
    import json

    from envtool.core import gpu_gates
    from envtool.core import comm_rules

    problems: List[str] = []
    if run_dir is None:
        return problems
    for r in records:
        task, host = r.get("task", "?"), r.get("host", "?")
        if r.get("smi") != "yes" or not task.isdigit():
            continue
        try:
            view = json.loads(_read(run_dir, f"torch-{task}.json") or "{}")
        except ValueError:
            view = {}
        arch = view.get("arch_list")
        facts = gpu_gates.node_facts(_read(run_dir, f"smi-{task}.txt"), _read(run_dir, f"smil-{task}.txt"),
                                     _read(run_dir, f"smic-{task}.txt"), cuda=view.get("cuda"),
                                     arch_list=tuple(arch) if isinstance(arch, list) else None,
                                     nccl_ranks_per_gpu_node=ranks_per_node,
                                     where=host)
        env = {k[4:]: v for k, v in r.items() if k.startswith("env_")}
        comm = comm_rules.CommFacts(gpu=facts.gpu, network=getattr(site_gpu, "network", None), nccl=view.get("nccl"),
                                    plugins=getattr(site_gpu, "nccl_plugins", ()), env=env)
        report = gpu_gates.rules_report(gpu_gates.run_gates(facts), comm)
        problems += [f"pre-flight: {host}: {p}; fix: {f}" for p, f in report.problems()]
        warnings += [f"pre-flight: {host}: known-bad stack {rule.id} not decided ({why})"
                     for rule, why in report.undecided]
    return problems


def table(records: List[Dict[str, str]]) -> str:
    """One line per node: host, prefix, lockfile sha256 (12 hex), address the hostname resolves to,
    interface (its address and MTU), the nodes it reached, the size and free space of /dev/shm."""
    rows = [("node", "prefix", "lock sha256", "hostname resolves to", "interface", "reaches", "/dev/shm")]
    for r in records:
        prefix = r.get("prefix", "?")
        iface = r.get("iface", "-")
        iface += "" if r.get("iface_state", "present") == "present" else " (missing)"
        iface += f" {r['iface_addr']}" if r.get("iface_addr", "-") != "-" else ""
        iface += f" mtu {r['iface_mtu']}" if r.get("iface_mtu", "-") not in ("", "-") else ""
        kib = external.small_int(r.get("shm_kib"))
        free = external.small_int(r.get("shm_free_kib"))
        shm = f"{kib // 1024} MiB" if kib is not None and kib >= 0 else "-"
        shm += f" ({free // 1024} MiB free)" if free is not None and free >= 0 else ""
        rows.append((r.get("host", "?"), "-" if prefix == "-" else prefix,
                     (r.get("lock_sha256") or "-")[:12], r.get("first_addr", "-"), iface,
                     r.get("reach") or "-", shm))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in rows)
