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
* hostnames are distinct (Horovod and Open MPI group ranks into nodes by hostname).
"""
from __future__ import annotations

import hashlib
import shlex
import shutil
from pathlib import Path
from typing import Dict, List, Optional

SCRIPT = Path(__file__).with_name("preflight.sh")
LOCK_NAMES = ("conda-lock.yml", ".envtool/conda-lock.yml")
#: the directory of the reports inside a run directory
DIR = "preflight"


def install(run_dir: Path) -> Path:
    """Copy ``preflight.sh`` into ``run_dir`` (which every node sees); returns its path."""
    dest = Path(run_dir) / "preflight.sh"
    shutil.copyfile(SCRIPT, dest)
    return dest


def node_argv(script: Path, run_dir: Path, prefix: Optional[Path]) -> List[str]:
    """``bash preflight.sh RUN_DIR PREFIX`` (``-`` without a prefix, e.g. a module): the per-node words."""
    return ["bash", str(script), str(run_dir), str(prefix) if prefix is not None else "-"]


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
    return sorted(out, key=lambda r: int(r["task"]) if r.get("task", "").isdigit() else 0)


def _names(recs: List[Dict[str, str]]) -> str:
    return ", ".join(r.get("host", "?") for r in recs)


def _loopback(addr: str) -> bool:
    return addr.startswith("127.") or addr == "::1"


def judge(records: List[Dict[str, str]], nodes: int, prefix: Optional[Path],
          local_lock: Optional[str] = None) -> List[str]:
    """Problems (one line each: node(s), cause, a quoted fix line), or [] when the pre-flight passed.

    Args:
        records: from :func:`gather`.
        nodes: nodes of the job.
        prefix: the environment's prefix (None for a module: the prefix checks are skipped).
        local_lock: :func:`lock_sha256` on the submitting host, or None.
    """
    problems: List[str] = []
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
        nopy = [r for r in records if r.get("prefix") == "present" and r.get("python") == "missing"]
        if nopy:
            problems.append(f"pre-flight: {_names(nopy)}: {prefix} has no bin/python there (a partial copy?); "
                            f"fix: {shlex.join(['ls', '-l', str(Path(prefix) / 'bin' / 'python')])} on those "
                            f"nodes, and re-copy or re-create the environment")
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
    return problems


def table(records: List[Dict[str, str]]) -> str:
    """One line per node: host, prefix, lockfile sha256 (12 hex), address the hostname resolves to."""
    rows = [("node", "prefix", "lock sha256", "hostname resolves to")]
    for r in records:
        prefix = r.get("prefix", "?")
        rows.append((r.get("host", "?"), "-" if prefix == "-" else prefix,
                     (r.get("lock_sha256") or "-")[:12], r.get("first_addr", "-")))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in rows)
