"""A real one-node Slurm on loopback for the tests: Debian's slurm-wlm + munge, started and stopped here.

:func:`start` writes a private ``slurm.conf`` (SlurmctldHost=localhost, NodeAddr=127.0.0.1, this
machine's CPUs, select/cons_tres, proctrack/linuxproc, MpiDefault=pmix, SlurmUser=root, free
ports), a private munge key and socket, starts ``munged``, ``slurmctld -D`` and ``slurmd -D`` as
children, and waits until the node is idle. Clients find it through ``SLURM_CONF``
(:attr:`Cluster.env`). :meth:`Cluster.stop` cancels every job and stops the daemons.
Nothing here is shared with a system Slurm: state, spool, logs and the key live in ``root``.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

try:
    from .speed import scaled
except ImportError:  # imported as ``helpers.slurm`` from tests/ on sys.path
    from helpers.speed import scaled  # type: ignore[no-redef]

SLURM_SETUP = Path(__file__).resolve().parent.parent / "setup.d" / "slurm.sh"


def installed() -> bool:
    """slurmctld, slurmd, sbatch and munged are on PATH (or in /usr/sbin)."""
    return all(shutil.which(x, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
               for x in ("slurmctld", "slurmd", "sbatch", "srun", "munged"))


def ensure_installed() -> str:
    """Install with tests/setup.d/slurm.sh when missing (root only). Returns '' or why not."""
    if installed():
        return ""
    if os.geteuid() != 0:
        return "slurm-wlm/munge are not installed and the tests do not run as root"
    proc = subprocess.run(["bash", str(SLURM_SETUP)], capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0 or not installed():
        return f"tests/setup.d/slurm.sh could not install slurm-wlm/munge: {proc.stderr[-500:]}"
    return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _exe(name: str) -> str:
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") or name


@dataclass
class Cluster:
    """A running one-node Slurm.

    Attributes:
        root: its private directory (slurm.conf, state, logs, munge key and socket).
        conf: the slurm.conf path.
        env: variables a client needs (``SLURM_CONF``).
        cpus: CPUs of the node.
    """

    root: Path
    conf: Path
    env: Dict[str, str]
    cpus: int
    procs: List[subprocess.Popen] = field(default_factory=list)

    def run(self, *argv, timeout: Optional[float] = None) -> subprocess.CompletedProcess:
        """Run a Slurm client command against this cluster (``timeout`` default: 60 s times the slowdown)."""
        return subprocess.run(list(argv), capture_output=True, text=True,
                              timeout=scaled(60) if timeout is None else timeout,
                              env=dict(os.environ, **self.env))

    def queue(self) -> str:
        """``squeue -h -o '%i %T %j'``: the jobs still known to the queue."""
        return self.run("squeue", "-h", "-o", "%i %T %j").stdout.strip()

    def logs(self) -> str:
        """The tails of the daemons' logs (for assertion messages)."""
        out = []
        for name in ("slurmctld.log", "slurmd.log", "munged.log"):
            p = self.root / name
            if p.exists():
                out.append(f"--- {name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-30:]))
        return "\n".join(out)

    def stop(self) -> None:
        """Cancel all jobs, then stop slurmd, slurmctld and munged (SIGTERM, then SIGKILL)."""
        try:
            self.run("scancel", "--full", "--user=root", timeout=20)
            deadline = time.monotonic() + scaled(20)
            while self.queue() and time.monotonic() < deadline:
                time.sleep(0.5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=10)


def start(root: Path, mpi_default: str = "pmix") -> Cluster:
    """Configure and start the cluster in ``root`` (see the module docstring).

    Raises:
        RuntimeError: a daemon exited or the node did not become idle within 90 s (with the logs).
    """
    root = Path(root)
    for d in ("state", "spool", "munge"):
        (root / d).mkdir(parents=True, exist_ok=True)
    os.chmod(root / "munge", 0o700)
    cpus = os.cpu_count() or 1
    key = root / "munge" / "munge.key"
    subprocess.run(["dd", "if=/dev/urandom", f"of={key}", "bs=1024", "count=1"], check=True, capture_output=True)
    os.chmod(key, 0o400)
    sock = root / "munge" / "munge.socket"
    ctld_port, d_port = _free_port(), _free_port()
    conf = root / "slurm.conf"
    conf.write_text(f"""# written by tests/helpers/slurm.py: a one-node cluster on loopback
ClusterName=envtooltest
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
StateSaveLocation={root / 'state'}
SlurmdSpoolDir={root / 'spool'}
SlurmctldPidFile={root / 'slurmctld.pid'}
SlurmdPidFile={root / 'slurmd.pid'}
SlurmctldLogFile={root / 'slurmctld.log'}
SlurmdLogFile={root / 'slurmd.log'}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault={mpi_default}
SchedulerType=sched/backfill
# a batch job is scheduled when it is submitted, not up to 3 s later (the default batch_sched_delay;
# slurm.conf(5), https://slurm.schedmd.com/slurm.conf.html#OPT_batch_sched_delay)
SchedulerParameters=batch_sched_delay=0
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
MinJobAge=300
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
""")
    env = {"SLURM_CONF": str(conf)}
    full = dict(os.environ, **env)
    procs = []
    cluster = Cluster(root=root, conf=conf, env=env, cpus=cpus, procs=procs)
    try:
        procs.append(subprocess.Popen([_exe("munged"), "--foreground", "--force", f"--socket={sock}",
                                       f"--key-file={key}", f"--pid-file={root / 'munge' / 'munged.pid'}",
                                       f"--log-file={root / 'munged.log'}", f"--seed-file={root / 'munge' / 'seed'}"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=full))
        deadline = time.monotonic() + scaled(20)
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        procs.append(subprocess.Popen([_exe("slurmctld"), "-D", "-i", "-f", str(conf)], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, env=full))
        procs.append(subprocess.Popen([_exe("slurmd"), "-D", "-N", "localhost", "-f", str(conf)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=full))
        deadline = time.monotonic() + scaled(90)
        state = ""
        while time.monotonic() < deadline:
            for p in procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{p.args[0]} exited with {p.returncode}\n{cluster.logs()}")
            proc = cluster.run("sinfo", "-h", "-N", "-o", "%T", timeout=scaled(20))
            state = proc.stdout.strip()
            if state.startswith("idle"):
                return cluster
            time.sleep(0.5)
        raise RuntimeError(f"the node did not become idle (sinfo: {state!r})\n{cluster.logs()}")
    except BaseException:
        cluster.stop()
        raise
