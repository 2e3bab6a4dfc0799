"""A real N-node Slurm on this one machine, each node in its own network, UTS and mount namespace.

Layout (issue 24, item 1):

* a *fabric* network namespace holds a Linux bridge (``br0``); nothing is added to the host's
  network namespace, so every address below exists only inside namespaces made here;
* a *head* (hostname ``head``, 198.18.0.1) runs ``slurmctld`` and is where jobs are submitted
  from (:meth:`Cluster.run` enters it); ``nodeI`` (198.18.0.10+I) each run one ``slurmd``;
* each of them is its own network, UTS and mount namespace: a veth pair joins its ``eth0`` to the
  bridge, ``hostname`` is set inside its UTS namespace, and its mount namespace has a private
  ``/tmp`` (a tmpfs, like a compute node's local disk) and its own ``/etc/hosts`` (a bind mount
  of a file in the cluster's directory). Everything else, the checkout included, is the host's
  file system: the "shared file system" of the cluster. Paths under ``/tmp`` given as ``shared``
  (pytest's base temporary directory) are bind-mounted into each private ``/tmp`` at the same
  path, as a site's scratch file system would be;
* ``munged`` (host namespaces) has a private key and socket in the cluster's directory.

Addresses come only from 198.18.0.0/15, the range RFC 2544 (section C.2.2,
https://www.rfc-editor.org/rfc/rfc2544#appendix-C.2.2) reserves for benchmarking, so they cannot
clash with a real network. Each namespace is held by one process whose ``argv[0]`` is
``envtool-tc:<owner>:<name>@<directory>``; :func:`cleanup_leftovers` finds those of an earlier run
whose owner process is gone (or the ``manual`` ones of the same directory, for ``up``/``down``)
and kills every process in their namespaces, then the holders, which removes links, bridge,
mounts and namespaces with them.

Namespaces are entered with ``nsenter --net= --uts= --mount=`` (util-linux), not ``ip netns
exec``: the latter remounts ``/sys`` in the entered namespace, which hides the cgroup mount that
slurmd reads (issue 24).

By hand::

    python3 -m tests.helpers.cluster up [--nodes 3] [--root DIR]   # prints how to use it
    python3 -m tests.helpers.cluster run -- srun -N2 -n4 hostname
    python3 -m tests.helpers.cluster down [--root DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

try:
    from . import slurm as slurm_helper
    from .speed import scaled
except ImportError:  # imported as ``helpers.cluster`` from tests/ on sys.path
    from helpers import slurm as slurm_helper  # type: ignore[no-redef]
    from helpers.speed import scaled  # type: ignore[no-redef]

MARK = "envtool-tc"
NET = "198.18.0"               # the cluster's /24 inside RFC 2544's 198.18.0.0/15
HEAD_ADDR = f"{NET}.1"
DEFAULT_ROOT = Path("/var/tmp/envtool-testcluster")
MULTINODE_SETUP = Path(__file__).resolve().parent.parent / "setup.d" / "multinode.sh"


def node_addr(i: int) -> str:
    """The address of ``node<i>`` (1-based) on the bridge."""
    return f"{NET}.{10 + i}"


def installed() -> bool:
    """Slurm, munge, nsenter, unshare and ip are there."""
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return slurm_helper.installed() and all(shutil.which(x, path=path) for x in ("nsenter", "unshare", "ip"))


def ensure_installed() -> str:
    """Install what is missing with tests/setup.d/slurm.sh and multinode.sh (root only); '' or why not."""
    why = slurm_helper.ensure_installed()
    if why:
        return why
    if installed():
        return ""
    if os.geteuid() != 0:
        return "nsenter/unshare/ip are missing and the tests do not run as root"
    proc = subprocess.run(["bash", str(MULTINODE_SETUP)], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0 or not installed():
        return f"tests/setup.d/multinode.sh could not install util-linux/iproute2: {proc.stderr[-500:]}"
    return ""


def can_make_namespaces() -> str:
    """'' when this process may create network, UTS and mount namespaces and a bridge; else why not."""
    if os.geteuid() != 0:
        return "the multi-node cluster needs root (namespaces, a bridge, mounts)"
    probe = ("ip link add br0 type bridge && mount -t tmpfs tmpfs /mnt && hostname probe")
    try:
        proc = subprocess.run(["unshare", "--net", "--uts", "--mount", "--propagation", "private",
                               "bash", "-c", probe], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare failed: {exc}"
    return "" if proc.returncode == 0 else f"cannot make namespaces here: {proc.stderr.strip()[-300:]}"


def _exe(name: str) -> str:
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") or name


def _cmdline(pid: int) -> List[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _ns(pid: int, kind: str) -> Optional[str]:
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None


def _pids() -> List[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return Path(f"/proc/{pid}").exists() and "zombie" not in _status(pid)


def _status(pid: int) -> str:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("State:"):
                return line.lower()
    except OSError:
        pass
    return ""


def _kill_wait(pids: Iterable[int], timeout: float = 15.0) -> None:
    """SIGTERM each PID, wait up to ``timeout`` s, then SIGKILL what is left."""
    pids = [p for p in pids if p > 1 and p != os.getpid()]
    for p in pids:
        try:
            os.kill(p, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        for p in pids:  # reap our own children
            try:
                os.waitpid(p, os.WNOHANG)
            except ChildProcessError:
                pass
        time.sleep(0.1)
    for p in pids:
        if _alive(p):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for p in pids:
        try:
            os.waitpid(p, 0)
        except ChildProcessError:
            pass


def _holders(manual_root: Optional[Path] = None) -> List[int]:
    """PIDs of namespace holders of earlier runs: their owner process is gone, or they belong to a
    ``manual`` cluster (``up``) in ``manual_root``."""
    out = []
    for pid in _pids():
        argv0 = (_cmdline(pid) or [""])[0]
        if not argv0.startswith(MARK + ":") or argv0.count(":") < 2:
            continue
        owner, rest = argv0.split(":", 2)[1:]
        root = rest.split("@", 1)[1] if "@" in rest else ""
        if (owner.isdigit() and not _alive(int(owner))) or (
                owner == "manual" and manual_root is not None and root == str(manual_root)):
            out.append(pid)
    return out


def _kill_holders(holders: List[int]) -> List[str]:
    """Kill every process inside the holders' network or mount namespaces, then the holders."""
    if not holders:
        return []
    spaces = {_ns(h, "net") for h in holders} | {_ns(h, "mnt") for h in holders}
    spaces.discard(None)
    inside = [p for p in _pids() if p not in holders and (_ns(p, "net") in spaces or _ns(p, "mnt") in spaces)]
    gone = [f"{p} {' '.join(_cmdline(p))[:80]}" for p in inside + holders]
    _kill_wait(inside)
    _kill_wait(holders)
    return gone


def _munged_of(root_tag: Optional[Path] = None) -> List[int]:
    """munged processes started here (their pid file is named ``envtool-tc-munged.pid``)."""
    out = []
    for pid in _pids():
        argv = _cmdline(pid)
        if argv and os.path.basename(argv[0]) == "munged" and any(a.endswith(f"{MARK}-munged.pid") for a in argv):
            if root_tag is None or any(a.startswith(f"--pid-file={root_tag}/") for a in argv):
                out.append(pid)
    return out


def cleanup_leftovers(manual_root: Optional[Path] = None) -> List[str]:
    """Remove what an earlier crashed run left: namespace holders whose owner process is gone (and,
    those of ``up`` in ``manual_root``), every process in their namespaces, and munged processes
    started here whose cluster directory is gone or whose holders are gone.

    Returns:
        one line per process killed (PID and command).
    """
    gone = _kill_holders(_holders(Path(manual_root).resolve() if manual_root else None))
    live_roots = set()
    for pid in _pids():
        argv0 = (_cmdline(pid) or [""])[0]
        if argv0.startswith(MARK + ":"):
            live_roots.add(argv0.split("@", 1)[-1])
    stale = []
    for pid in _munged_of():
        pidfile = next((a.split("=", 1)[1] for a in _cmdline(pid) if a.startswith("--pid-file=")), "")
        root = str(Path(pidfile).parent.parent)
        if root not in live_roots:
            stale.append(pid)
            gone.append(f"{pid} munged ({root})")
    _kill_wait(stale)
    return gone


@dataclass
class Node:
    """One namespace of the cluster.

    Attributes:
        name: hostname (``head``, ``node1`` …).
        addr: its address on the bridge (198.18.0.0/15), or '' for the fabric.
        holder: the process holding its namespaces.
    """

    name: str
    addr: str
    holder: subprocess.Popen

    @property
    def pid(self) -> int:
        """PID of the namespace holder."""
        return self.holder.pid

    def nsenter(self, cwd: Optional[str] = None) -> List[str]:
        """``nsenter --net= --uts= --mount= [--wd=]`` words that enter this node."""
        words = [_exe("nsenter"), f"--net=/proc/{self.pid}/ns/net", f"--uts=/proc/{self.pid}/ns/uts",
                 f"--mount=/proc/{self.pid}/ns/mnt"]
        if cwd:
            words.append(f"--wd={cwd}")
        return words + ["--"]


@dataclass
class Cluster:
    """A running multi-node Slurm (see the module docstring).

    Attributes:
        root: its directory (slurm.conf, hosts files, state, logs, munge key and socket); on the
            shared file system.
        conf: the slurm.conf path.
        env: what a client needs (``SLURM_CONF``).
        cpus: CPUs of each node (as slurm.conf says).
        head: the head node (slurmctld; jobs are submitted from it).
        nodes: the compute nodes, ``node1`` …
        fabric: the namespace holding the bridge.
        procs: the daemons (munged, slurmctld, slurmd), started here.
    """

    root: Path
    conf: Path
    env: Dict[str, str]
    cpus: int
    head: Optional[Node] = None
    nodes: List[Node] = field(default_factory=list)
    fabric: Optional[Node] = None
    procs: List[subprocess.Popen] = field(default_factory=list)

    def node(self, name: str) -> Node:
        """The node called ``name`` (``head`` included)."""
        for n in [self.head] + self.nodes:
            if n is not None and n.name == name:
                return n
        raise KeyError(name)

    def run(self, *argv, node: Optional[str] = None, cwd: Optional[str] = None, env: Optional[dict] = None,
            timeout: Optional[float] = None, input: Optional[str] = None) -> subprocess.CompletedProcess:
        """Run ``argv`` inside ``node`` (default: the head) with ``SLURM_CONF`` set; text output;
        ``timeout`` default: 60 s times the machine's slowdown (tests/helpers/speed.py).

        Raises:
            subprocess.TimeoutExpired: it took longer than ``timeout`` seconds (it is killed).
        """
        n = self.node(node or "head")
        full = dict(os.environ, **self.env)
        full.update(env or {})
        return subprocess.run(n.nsenter(cwd or os.getcwd()) + [str(a) for a in argv], capture_output=True,
                              text=True, timeout=scaled(60) if timeout is None else timeout, env=full, input=input)

    def queue(self) -> str:
        """``squeue -h -o '%i %T %j'``: the jobs still known to the queue."""
        return self.run("squeue", "-h", "-o", "%i %T %j", timeout=scaled(20)).stdout.strip()

    def wait_queue_empty(self, timeout: Optional[float] = None) -> str:
        """Wait up to ``timeout`` s (default 30 s times the slowdown) for the queue to empty; returns
        what is left ('' when empty)."""
        deadline = time.monotonic() + (scaled(30) if timeout is None else timeout)
        left = self.queue()
        while left and time.monotonic() < deadline:
            time.sleep(0.5)
            left = self.queue()
        return left

    def _slurmd(self, name: str) -> int:
        for i, p in enumerate(self.procs):
            words = [str(a) for a in p.args]
            if any(w.endswith("slurmd") for w in words) and words[words.index("-N") + 1:][:1] == [name]:
                return i
        raise KeyError(f"no slurmd of {name}")

    def kill_slurmd(self, name: str) -> int:
        """SIGKILL ``name``'s slurmd (its job steps' slurmstepd live on, as on a real node); returns its PID."""
        p = self.procs[self._slurmd(name)]
        p.kill()
        p.wait(timeout=20)
        return p.pid

    def restart_slurmd(self, name: str, timeout: Optional[float] = None) -> str:
        """Start ``name``'s slurmd again with the same words (after :meth:`kill_slurmd`) and wait up
        to ``timeout`` s until Slurm sees it respond (ReturnToService=2 brings a down node back);
        returns its sinfo state."""
        i = self._slurmd(name)
        old = self.procs[i]
        if old.poll() is None:
            return "running"
        self.procs[i] = subprocess.Popen(old.args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, env=dict(os.environ, **self.env), cwd=self.root)
        deadline = time.monotonic() + (scaled(90) if timeout is None else timeout)
        state = ""
        while time.monotonic() < deadline:
            state = self.run("sinfo", "-h", "-N", "-n", name, "-o", "%T", timeout=scaled(20)).stdout.strip()
            if state and not state.endswith("*") and not state.startswith("down"):
                return state
            time.sleep(0.5)
        return state

    def hosts_text(self) -> str:
        """The cluster's /etc/hosts (every node's name and address)."""
        lines = ["127.0.0.1\tlocalhost", f"{HEAD_ADDR}\thead"]
        lines += [f"{n.addr}\t{n.name}" for n in self.nodes] if self.nodes else []
        return "\n".join(lines) + "\n"

    def bind_over(self, name: str, src: Path, dest: Path) -> None:
        """Bind-mount ``src`` over ``dest`` inside ``name``'s mount namespace only (the other nodes
        and the host still see the original); :meth:`unbind` removes it.

        Raises:
            subprocess.CalledProcessError: mount refused it.
        """
        n = self.node(name)
        subprocess.run([_exe("nsenter"), f"--mount=/proc/{n.pid}/ns/mnt", "--", "mount", "--bind", str(src),
                        str(dest)], check=True, capture_output=True, timeout=20)

    def unbind(self, name: str, dest: Path) -> None:
        """Unmount the top mount on ``dest`` inside ``name``'s mount namespace (undo :meth:`bind_over`)."""
        n = self.node(name)
        subprocess.run([_exe("nsenter"), f"--mount=/proc/{n.pid}/ns/mnt", "--", "umount", str(dest)],
                       capture_output=True, timeout=20)

    def override_hosts(self, name: str, text: str) -> Path:
        """Bind-mount a hosts file with ``text`` over ``/etc/hosts`` inside ``name``'s mount namespace
        (on top of the cluster's one; :meth:`restore_hosts` removes it). Returns the file."""
        path = self.root / f"hosts-{name}-override"
        path.write_text(text)
        self.bind_over(name, path, Path("/etc/hosts"))
        return path

    def restore_hosts(self, name: str) -> None:
        """Undo :meth:`override_hosts`."""
        self.unbind(name, Path("/etc/hosts"))

    def logs(self) -> str:
        """The tails of the daemons' logs (for assertion messages)."""
        out = []
        for p in sorted(self.root.glob("*.log")):
            out.append(f"--- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-20:]))
        return "\n".join(out)

    def save(self) -> Path:
        """Write ``cluster.json`` (PIDs, names, addresses) for ``down`` and for people."""
        data = {"conf": str(self.conf), "cpus": self.cpus, "fabric": self.fabric.pid if self.fabric else None,
                "head": {"pid": self.head.pid, "addr": self.head.addr} if self.head else None,
                "nodes": {n.name: {"pid": n.pid, "addr": n.addr} for n in self.nodes},
                "daemons": [{"pid": p.pid, "argv": [str(a) for a in p.args]} for p in self.procs]}
        path = self.root / "cluster.json"
        path.write_text(json.dumps(data, indent=2) + "\n")
        return path

    def stop(self) -> None:
        """Cancel all jobs, stop the daemons (by PID), delete the links and the bridge, and end the
        namespaces (by killing their holders and anything left inside them). Safe to call twice."""
        if self.head is not None and _alive(self.head.pid) and self.procs and self.procs[0].poll() is None:
            try:
                self.run("scancel", "--full", "--user=root", timeout=20)
                self.wait_queue_empty(20)
            except (OSError, subprocess.TimeoutExpired):
                pass
        _kill_wait([p.pid for p in reversed(self.procs) if p.poll() is None], timeout=20)
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self.fabric is not None and _alive(self.fabric.pid):
            for n in ([self.head] if self.head else []) + self.nodes:
                subprocess.run([_exe("nsenter"), f"--net=/proc/{self.fabric.pid}/ns/net", "--", "ip", "link",
                                "del", f"v-{n.name}"], capture_output=True, timeout=20)
            subprocess.run([_exe("nsenter"), f"--net=/proc/{self.fabric.pid}/ns/net", "--", "ip", "link", "del",
                            "br0"], capture_output=True, timeout=20)
        holders = [n.pid for n in ([self.head] if self.head else []) + self.nodes + ([self.fabric] if self.fabric
                                                                                       else [])]
        _kill_holders([h for h in holders if _alive(h)])
        for n in ([self.head] if self.head else []) + self.nodes + ([self.fabric] if self.fabric else []):
            try:
                n.holder.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.procs = []


def _holder(owner: str, name: str, root: Path, script: str, new_session: bool) -> subprocess.Popen:
    """Start the process that holds ``name``'s namespaces: it runs ``script`` inside new network,
    UTS and mount namespaces, then becomes ``sleep infinity`` named ``envtool-tc:OWNER:NAME@ROOT``."""
    tag = f"{MARK}:{owner}:{name}@{root}"
    full = script + f"\nexec -a {shlex.quote(tag)} sleep infinity\n"
    log = open(root / f"ns-{name}.log", "w")
    try:
        proc = subprocess.Popen([_exe("unshare"), "--net", "--uts", "--mount", "--propagation", "private",
                                 "bash", "-euo", "pipefail", "-c", full], stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=new_session)
    finally:
        log.close()
    deadline = time.monotonic() + scaled(30)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"setting up {name}'s namespaces failed (exit {proc.returncode}): "
                               f"{(root / f'ns-{name}.log').read_text(errors='replace')[-800:]}")
        if (_cmdline(proc.pid) or [""])[0] == tag:
            return proc
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"setting up {name}'s namespaces took more than 30 s")


def _node_script(name: str, hosts: Path, shared: Sequence[Path]) -> str:
    """Inside the new namespaces: hostname, loopback up, a private /tmp (tmpfs) keeping the
    ``shared`` paths under /tmp visible at the same place, a private /dev/shm, and the cluster's
    hosts file."""
    q = shlex.quote
    lines = [f"hostname {q(name)}", "ip link set lo up"]
    if shared:
        # /mnt gets a tmpfs in this mount namespace only, to stage the shared paths across the /tmp mount
        lines.append("mount -t tmpfs -o size=1m,mode=0700 envtool-tc-stage /mnt")
        for i, p in enumerate(shared):
            lines += [f"mkdir /mnt/s{i}", f"mount --bind {q(str(p))} /mnt/s{i}"]
    lines.append("mount -t tmpfs -o mode=1777,size=2g envtool-tc-tmp /tmp")
    # a private /dev/shm too, as each real node has: Open MPI's shared-memory transport names its
    # segments /dev/shm/vader_segment.<hostname>.<jobid>.<local rank>, and two clusters on this
    # machine (same node names, job ids from 1) would otherwise map each other's segments
    lines.append("mount -t tmpfs -o mode=1777,size=2g envtool-tc-shm /dev/shm")
    for i, p in enumerate(shared):
        lines += [f"mkdir -p {q(str(p))}", f"mount --move /mnt/s{i} {q(str(p))}"]
    if shared:
        lines.append("umount /mnt")
    lines.append(f"mount --bind {q(str(hosts))} /etc/hosts")
    return "\n".join(lines)


def _shared_under_tmp(paths: Iterable[Path]) -> List[Path]:
    out = []
    for p in paths:
        p = Path(p).resolve()
        if p.parts[:2] == ("/", "tmp") and len(p.parts) > 2 and p not in out:
            out.append(p)
    return out


def start(root: Path, nodes: int = 2, shared: Iterable[Path] = (), owner: Optional[str] = None,
          cpus: Optional[int] = None) -> Cluster:
    """Configure and start the cluster in ``root`` (see the module docstring).

    Args:
        root: the cluster's directory; it must be on the shared file system (outside /tmp, or
            under one of ``shared``). Created when missing.
        nodes: compute nodes (1-9).
        shared: paths under /tmp the nodes must see (bind-mounted into their private /tmp).
        owner: tag of the owning process in the holders' names (default: this PID; ``manual`` for
            ``up``, which outlives its process).
        cpus: CPUs per node in slurm.conf (default: this machine's, at least 2).
    Returns:
        the running :class:`Cluster` (all nodes idle).
    Raises:
        RuntimeError: a namespace, a link or a daemon could not be set up, or the nodes did not
            become idle within 90 s (with the daemons' logs); what was started is stopped first.
    """
    if not 1 <= nodes <= 9:
        raise ValueError(f"nodes: expected 1 to 9, got {nodes}")
    root = Path(root).resolve()
    shared_paths = _shared_under_tmp(shared)
    if root.parts[:2] == ("/", "tmp") and not any(root == s or s in root.parents for s in shared_paths):
        raise ValueError(f"{root} is under /tmp, which is private to each node: give it in shared")
    cleanup_leftovers(manual_root=root if owner == "manual" else None)
    owner = owner or str(os.getpid())
    new_session = owner == "manual"
    for d in ("state", "spool", "munge"):
        (root / d).mkdir(parents=True, exist_ok=True)
    os.chmod(root / "munge", 0o700)
    cpus = cpus or max(2, os.cpu_count() or 1)
    names = [f"node{i}" for i in range(1, nodes + 1)]
    for n in names:
        (root / "spool" / n).mkdir(exist_ok=True)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    sock = root / "munge" / "munge.socket"
    conf = root / "slurm.conf"
    node_lines = "\n".join(f"NodeName={n} NodeAddr={node_addr(i)} CPUs={cpus} State=UNKNOWN"
                           for i, n in enumerate(names, 1))
    conf.write_text(f"""# written by tests/helpers/cluster.py: {nodes} nodes, each its own namespaces, on 198.18.0.0/15
ClusterName=envtoolmn
SlurmctldHost=head({HEAD_ADDR})
SlurmctldPort=6817
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
StateSaveLocation={root / 'state'}
SlurmdSpoolDir={root / 'spool'}/%n
SlurmctldPidFile={root / 'slurmctld.pid'}
SlurmdPidFile={root / 'spool'}/%n/slurmd.pid
SlurmctldLogFile={root / 'slurmctld.log'}
SlurmdLogFile={root}/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=pmix
SchedulerType=sched/backfill
# a batch job is scheduled when it is submitted, not up to 3 s later (the default batch_sched_delay;
# slurm.conf(5), https://slurm.schedmd.com/slurm.conf.html#OPT_batch_sched_delay)
SchedulerParameters=batch_sched_delay=0
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
MinJobAge=300
SlurmctldTimeout=30
# slurmctld pings each slurmd every SlurmdTimeout/3 s and sets a node that has not answered for
# SlurmdTimeout s DOWN (slurm.conf(5), #OPT_SlurmdTimeout): a killed slurmd is noticed in seconds
SlurmdTimeout=15
MessageTimeout=20
{node_lines}
PartitionName=debug Nodes={','.join(names)} Default=YES MaxTime=INFINITE State=UP
""")
    env = {"SLURM_CONF": str(conf)}
    cluster = Cluster(root=root, conf=conf, env=env, cpus=cpus)
    hosts = root / "hosts"
    try:
        cluster.fabric = Node("fabric", "", _holder(owner, "fabric", root, "ip link set lo up\n"
                                                    "ip link add br0 type bridge\nip link set br0 up",
                                                    new_session))
        members = [("head", HEAD_ADDR)] + [(n, node_addr(i)) for i, n in enumerate(names, 1)]
        hosts.write_text("127.0.0.1\tlocalhost\n" + "".join(f"{a}\t{n}\n" for n, a in members))
        for name, addr in members:
            node = Node(name, addr, _holder(owner, name, root, _node_script(name, hosts, shared_paths),
                                            new_session))
            if name == "head":
                cluster.head = node
            else:
                cluster.nodes.append(node)
            fab = [_exe("nsenter"), f"--net=/proc/{cluster.fabric.pid}/ns/net", "--"]
            inside = [_exe("nsenter"), f"--net=/proc/{node.pid}/ns/net", "--"]
            for argv in (fab + ["ip", "link", "add", f"v-{name}", "type", "veth", "peer", "name", "eth0",
                                "netns", str(node.pid)],
                         fab + ["ip", "link", "set", f"v-{name}", "master", "br0", "up"],
                         inside + ["ip", "addr", "add", f"{addr}/24", "dev", "eth0"],
                         inside + ["ip", "link", "set", "eth0", "up"]):
                proc = subprocess.run(argv, capture_output=True, text=True, timeout=20)
                if proc.returncode != 0:
                    raise RuntimeError(f"{shlex.join(argv)}: {proc.stderr.strip()}")
        full = dict(os.environ, **env)

        def daemon(argv, node=None):
            words = (node.nsenter(str(root)) if node else []) + argv
            cluster.procs.append(subprocess.Popen(words, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                                  stderr=subprocess.DEVNULL, env=full, cwd=root,
                                                  start_new_session=new_session))

        daemon([_exe("munged"), "--foreground", "--force", f"--socket={sock}", f"--key-file={key}",
                f"--pid-file={root / 'munge' / (MARK + '-munged.pid')}", f"--log-file={root / 'munged.log'}",
                f"--seed-file={root / 'munge' / 'seed'}"])
        deadline = time.monotonic() + scaled(20)
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        daemon([_exe("slurmctld"), "-D", "-i", "-f", str(conf)], cluster.head)
        for n in cluster.nodes:
            daemon([_exe("slurmd"), "-D", "-N", n.name, "-f", str(conf)], n)
        cluster.save()
        deadline = time.monotonic() + scaled(90)
        states = ""
        while time.monotonic() < deadline:
            for p in cluster.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{p.args} exited with {p.returncode}\n{cluster.logs()}")
            try:
                states = cluster.run("sinfo", "-h", "-N", "-o", "%N %T", timeout=20).stdout.strip()
            except subprocess.TimeoutExpired:
                states = "(sinfo timed out)"
            idle = [line.split()[0] for line in states.splitlines() if line.split()[1:2] == ["idle"]]
            if sorted(set(idle)) == sorted(names):
                return cluster
            time.sleep(0.5)
        raise RuntimeError(f"the nodes did not become idle within 90 s (sinfo: {states!r})\n{cluster.logs()}")
    except BaseException:
        cluster.stop()
        raise


def _load(root: Path) -> Optional[dict]:
    try:
        return json.loads((root / "cluster.json").read_text())
    except (OSError, ValueError):
        return None


def main(argv: Optional[List[str]] = None) -> int:
    """``up`` / ``down`` / ``run`` / ``status`` for a developer (see the module docstring)."""
    p = argparse.ArgumentParser(prog="python3 -m tests.helpers.cluster",
                                description="a real multi-node Slurm in namespaces on this machine (root)")
    p.add_argument("action", choices=("up", "down", "run", "status"))
    p.add_argument("--nodes", type=int, default=2, help="compute nodes for up (2)")
    p.add_argument("--root", type=Path, default=DEFAULT_ROOT, help=f"the cluster's directory ({DEFAULT_ROOT})")
    p.add_argument("--node", default="head", help="for run: the node to run in (head)")
    p.epilog = "run: the command follows --, e.g. run -- srun -N2 -n4 hostname (default: a shell)"
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[argv.index("--") + 1:] if "--" in argv else []
    args = p.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    root = args.root.resolve()
    if args.action == "up":
        why = ensure_installed() or can_make_namespaces()
        if why:
            print(f"cluster: {why}", file=sys.stderr)
            return 2
        gone = cleanup_leftovers(manual_root=root)
        for g in gone:
            print(f"cluster: removed leftover {g}", file=sys.stderr)
        if root.exists() and root == DEFAULT_ROOT.resolve():
            shutil.rmtree(root)
        try:
            c = start(root, nodes=args.nodes, owner="manual")
        except (RuntimeError, ValueError) as exc:
            print(f"cluster: {exc}", file=sys.stderr)
            return 1
        print(f"cluster: up: head {HEAD_ADDR} (slurmctld), " + ", ".join(f"{n.name} {n.addr}" for n in c.nodes))
        opt = "" if root == DEFAULT_ROOT.resolve() else f" --root {shlex.quote(str(root))}"
        print(f"cluster: state in {root / 'cluster.json'}; SLURM_CONF={c.conf}")
        print(f"cluster: try: python3 -m tests.helpers.cluster run{opt} -- srun -N{len(c.nodes)} "
              f"-n{2 * len(c.nodes)} hostname")
        print(f"cluster: stop it with: python3 -m tests.helpers.cluster down{opt}")
        return 0
    data = _load(root)
    if args.action == "status":
        print(json.dumps(data, indent=2) if data else f"cluster: no cluster.json in {root}")
        return 0 if data else 1
    if args.action == "run":
        if not data or not _alive(data["head"]["pid"]):
            print(f"cluster: no running cluster in {root} (run: python3 -m tests.helpers.cluster up)",
                  file=sys.stderr)
            return 2
        pid = data["head"]["pid"] if args.node == "head" else data["nodes"][args.node]["pid"]
        words = [_exe("nsenter"), f"--net=/proc/{pid}/ns/net", f"--uts=/proc/{pid}/ns/uts",
                 f"--mount=/proc/{pid}/ns/mnt", f"--wd={os.getcwd()}", "--"] + (command or ["bash"])
        return subprocess.call(words, env=dict(os.environ, SLURM_CONF=data["conf"]))
    # down
    if data:
        try:
            subprocess.run([_exe("nsenter"), f"--net=/proc/{data['head']['pid']}/ns/net",
                            f"--mount=/proc/{data['head']['pid']}/ns/mnt", "--", "scancel", "--full",
                            "--user=root"], env=dict(os.environ, SLURM_CONF=data["conf"]), capture_output=True,
                           timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            pass
        _kill_wait([d["pid"] for d in reversed(data.get("daemons", []))
                    if _alive(d["pid"]) and os.path.basename(_cmdline(d["pid"])[0] or "") in
                    ("slurmd", "slurmctld", "munged", "nsenter")])
    gone = cleanup_leftovers(manual_root=root)
    for g in gone:
        print(f"cluster: stopped {g}", file=sys.stderr)
    print("cluster: down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
