"""Run in the batch shell of a validation job (on the job's first node) with the environment's
own interpreter; not imported by envtool.

    python rendezvous.py KIND OUT_DIR PHASE TIMEOUT -- LAUNCHER WORDS... COMMAND...

Serves the rendezvous of a controller that the site's launcher does not set up, runs the launcher
line as its child with the rendezvous variables in its environment, and stops when the child ends
(or after TIMEOUT seconds: the launcher is sent SIGTERM, then SIGKILL) with the child's exit status.

KIND ``horovod-gloo``: Horovod's own rendezvous server
(``horovod.runner.http.http_server.RendezvousServer``, the one ``horovodrun --gloo`` starts,
horovod/horovod@v0.28.1:horovod/runner/gloo_run.py ``launch_gloo``), initialised with the host
plan of the allocation (``horovod.runner.common.util.hosts.get_host_assignments`` over the job's
nodes and tasks per node, from ``SLURM_JOB_NODELIST`` and ``SLURM_TASKS_PER_NODE``). The plan goes
to the ranks as ``ENVTOOL_GLOO_PLAN`` (see rank_probe.py), the server's address and port as
``HOROVOD_GLOO_RENDEZVOUS_ADDR``/``PORT``.

Why a server inside the job rather than ``horovodrun -H <the allocation's hosts>``: horovodrun
starts the remote ranks over ssh (and checks the hosts over ssh first), which many sites do not
allow between compute nodes, and it would replace the site's launcher, so the binding, cgroups and
accounting of ``srun`` would be lost; the server must run inside the job because compute nodes may
not reach the submitting host.

KIND ``horovod-gloo:BINDING`` asks Gloo's presence of that binding (``horovod.tensorflow``;
``horovod-gloo`` alone: ``horovod.torch``): the binding the ranks use, so the server runs in an
environment that has only that framework.

KIND ``torch-gloo``: a ``torch.distributed.TCPStore`` (the c10d key-value store behind
``init_process_group``) served here; its address goes to the ranks as ``ENVTOOL_TORCH_STORE``.

The address served is the one this node uses toward the other nodes of the job (the route to the
second node's address), so it is never a loopback address on a multi-node job. When the build lacks
what KIND needs (no Gloo in Horovod, no gloo backend in torch), ``OUT_DIR/PHASE/skipped.txt`` says
why and the exit status is 0.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys


def tasks_per_node(text, nodes):
    """Slurm's ``SLURM_TASKS_PER_NODE`` (``2(x3),1``) → one count per node."""
    out = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not m:
            raise ValueError(f"SLURM_TASKS_PER_NODE {text!r}: not COUNT[(xREPEAT)],...")
        out += [int(m.group(1))] * int(m.group(2) or 1)
    if len(out) != nodes:
        raise ValueError(f"SLURM_TASKS_PER_NODE {text!r} names {len(out)} nodes, the job has {nodes}")
    return out


def job_nodes():
    """The job's node names, in Slurm's order (``scontrol show hostnames``)."""
    nodelist = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST")
    if not nodelist:
        return [socket.gethostname()]
    # bytes, decoded with each invalid byte replaced: this script runs standalone in the job (the
    # environment's Python only, no envtool), so it decodes as envtool.core.external does
    proc = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, timeout=60)
    names = proc.stdout.decode("utf-8", "replace").split()
    if proc.returncode != 0 or not names:
        raise RuntimeError(f"scontrol show hostnames {nodelist} failed: "
                           + proc.stderr.decode("utf-8", "replace").strip())
    return names


def serve_address(nodes):
    """This node's address toward the others (the route to the second node), or its own name's."""
    for peer in nodes[1:]:
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                s.connect((socket.gethostbyname(peer), 9))
                return s.getsockname()[0]
            finally:
                s.close()
        except OSError:
            continue
    return socket.gethostbyname(socket.gethostname())


def skip(out_dir, phase, why, name="skipped.txt"):
    """Write ``OUT_DIR/PHASE/NAME`` with ``why``; 0 for a skip, 1 for a failure."""
    d = os.path.join(out_dir, phase)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "w") as f:
        f.write(why + "\n")
    print(f"rendezvous: {phase} {name.split('.')[0]}: {why}", flush=True)
    return 0 if name == "skipped.txt" else 1


def main(argv):
    try:
        return _main(argv)
    except Exception as exc:  # report why in the run directory, not only as a traceback in the job output
        return skip(argv[2], argv[3], f"{type(exc).__name__}: {exc}", "failed.txt")


def _main(argv):
    kind, out_dir, phase, timeout = argv[1], argv[2], argv[3], float(argv[4])
    if argv[5] != "--":
        raise SystemExit("usage: rendezvous.py KIND OUT_DIR PHASE TIMEOUT -- COMMAND...")
    command = argv[6:]
    nodes = job_nodes()
    addr = serve_address(nodes)
    env = dict(os.environ, ENVTOOL_RENDEZVOUS_TIMEOUT=str(int(timeout)))
    server = None
    kind, _, binding = kind.partition(":")
    if kind == "horovod-gloo":
        import importlib

        hvd = importlib.import_module(binding or "horovod.torch")

        if not hvd.gloo_built():
            return skip(out_dir, phase, "Horovod was built without the Gloo controller")
        from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
        from horovod.runner.http.http_server import RendezvousServer

        counts = tasks_per_node(os.environ.get("SLURM_TASKS_PER_NODE") or "1", len(nodes))
        plan = get_host_assignments(parse_hosts(",".join(f"{n}:{c}" for n, c in zip(nodes, counts))), sum(counts))
        server = RendezvousServer()
        port = server.start()
        server.init(plan)
        env.update(HOROVOD_GLOO_RENDEZVOUS_ADDR=addr, HOROVOD_GLOO_RENDEZVOUS_PORT=str(port),
                   ENVTOOL_GLOO_PLAN=json.dumps([{"hostname": s.hostname, "local_rank": s.local_rank,
                                                  "local_size": s.local_size, "cross_rank": s.cross_rank,
                                                  "cross_size": s.cross_size} for s in plan]))
        print(f"rendezvous: Horovod's rendezvous server on {addr}:{port} for {len(plan)} ranks on "
              f"{', '.join(nodes)}", flush=True)
    elif kind == "torch-gloo":
        import datetime

        import torch.distributed as dist

        if not dist.is_available() or not dist.is_gloo_available():
            return skip(out_dir, phase, "torch was built without torch.distributed's gloo backend")
        size = int(os.environ.get("SLURM_NTASKS") or 1)
        server = dist.TCPStore(addr, 0, size, True, datetime.timedelta(seconds=timeout), wait_for_workers=False)
        env.update(ENVTOOL_TORCH_STORE=f"{addr}:{server.port}", ENVTOOL_TORCH_SIZE=str(size))
        print(f"rendezvous: torch.distributed TCPStore on {addr}:{server.port} for {size} ranks", flush=True)
    else:
        raise SystemExit(f"rendezvous.py: unknown KIND {kind!r} (horovod-gloo, torch-gloo)")
    child = subprocess.Popen(command, env=env)

    def forward(signum, frame):
        child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    try:
        code = child.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"rendezvous: {phase} did not finish within {timeout:.0f} s; stopping it", flush=True)
        child.terminate()
        try:
            code = child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            code = child.wait()
        code = code or 124
    if kind == "horovod-gloo" and server is not None:
        server.stop()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
