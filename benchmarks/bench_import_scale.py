#!/usr/bin/env python3
"""Import at scale (issue 25, item 5): 1, 2, 4, 8, 16 concurrent ranks importing torch and
horovod.torch from a shared prefix on a real network file system, from a staged copy on
node-local storage, and from a squashfs image; side by side in one run.

Set-ups (all on this machine; the ranks are processes started together):

* ``shared``: the environment's prefix over sshfs (SFTP through an ``sshd`` started here on
  127.0.0.1 with a throwaway key, caches off: ``dir_cache=no``, ``attr_timeout=0``,
  ``entry_timeout=0``, ``negative_timeout=0``), mounted *at the prefix's own path* inside a
  private mount namespace (``unshare --mount``), so every absolute path the environment holds
  (RUNPATHs, ``.pth`` files, scripts) resolves to the network file system, as on a cluster whose
  shared file system holds the environment. Nothing outside the namespace sees the mount.
* ``staged``: the prefix packed once (``tar``), the file copied to node-local storage (a tmpfs:
  the broadcast, ``sbcast`` on Slurm), unpacked there.
* ``squashfs``: the prefix packed once with ``mksquashfs -comp lz4``, the image copied to
  node-local storage, mounted with ``squashfuse``.

The packs read the prefix from local disk (a bind mount made before sshfs covers the path): a
login node packs once, and reading through this one-connection SFTP emulation on a loaded
machine would time the emulation rather than the pack.

Per rank: the seconds of ``import torch`` + ``import horovod.torch`` inside the process (as
``envtool validate`` records them), and, in a second pass of ``--trace-ranks`` ranks (2) started
together under ``strace -f -y -e trace=%file,getdents64``, the metadata calls each made under the
original (shared) prefix (the count does not depend on the number of ranks; strace slows each), counted by ``envtool.validate.rank_probe.count_metadata_calls``.
Prints p50/p99 (nearest rank) of both per set-up and rank count, the ratios to ``shared``, the
staging times (pack, copy, unpack/mount), ``uptime``, and the targets of issue 25: 0 metadata
calls on the shared file system per rank after staging; p99 staged <= 0.2x shared at 16 ranks.

The packing uses ``tar`` and ``mksquashfs`` directly (``envtool pack`` is another branch's work).
Everything it starts (sshd, sshfs, squashfuse, ranks) is stopped, its mounts die with the
namespace, and its directory is removed, also on Ctrl-C. Needs root, Linux, and Debian's
openssh-server, sshfs, squashfs-tools, squashfuse, strace.

Usage: python3 benchmarks/bench_import_scale.py [--prefix /work/envs/cpu-horovod]
       [--ranks 1,2,4,8,16] [--workdir DIR] [--json]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from envtool.validate.rank_probe import count_metadata_calls  # noqa: E402

TOOLS = ("sshd", "ssh-keygen", "sshfs", "fusermount3", "mksquashfs", "squashfuse", "strace", "unshare", "tar")
RANK_CODE = ("import json, sys, time\n"
             "t0 = time.monotonic()\n"
             "import torch\n"
             "t1 = time.monotonic()\n"
             "import horovod.torch\n"
             "t2 = time.monotonic()\n"
             "print(json.dumps({'torch': t1 - t0, 'total': t2 - t0, 'prefix': sys.prefix}))\n")


def which(name):
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


def percentile(values, q):
    v = sorted(values)
    return v[max(0, math.ceil(q / 100.0 * len(v)) - 1)] if v else None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children(pid):
    """Direct children of ``pid`` (from /proc/PID/task/*/children)."""
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def descendants(pid):
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        for c in children(p):
            if c not in seen:
                seen.append(c)
                todo.append(c)
    return seen


def stop(proc, grace=10.0):
    """Stop ``proc`` and every process below it, by id: SIGTERM, then SIGKILL after ``grace`` s."""
    if proc is None or proc.poll() is not None:
        return
    below = descendants(proc.pid)
    for pid in [proc.pid] + below:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    for pid in [proc.pid] + below:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


# ---------------------------------------------------------------------------------------- outer


def start_sshd(work: Path, port: int):
    """An sshd on 127.0.0.1:``port`` accepting one throwaway key for root; returns (Popen, key)."""
    key, host_key = work / "id_ed25519", work / "ssh_host_ed25519_key"
    for k in (key, host_key):
        subprocess.run([which("ssh-keygen"), "-q", "-t", "ed25519", "-N", "", "-f", str(k)], check=True, timeout=60)
    (work / "authorized_keys").write_text((work / "id_ed25519.pub").read_text())
    (work / "sshd_config").write_text(f"""Port {port}
ListenAddress 127.0.0.1
HostKey {host_key}
PidFile none
AuthorizedKeysFile {work / 'authorized_keys'}
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
Subsystem sftp internal-sftp
LogLevel ERROR
""")
    proc = subprocess.Popen([which("sshd"), "-D", "-e", "-f", str(work / "sshd_config")],
                            stdout=subprocess.DEVNULL, stderr=open(work / "sshd.log", "w"), start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"sshd exited {proc.returncode}: {(work / 'sshd.log').read_text()[-500:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, key
        except OSError:
            time.sleep(0.2)
    stop(proc)
    raise SystemExit("sshd did not listen within 30 s")


def outer(args) -> int:
    missing = [t for t in TOOLS if not which(t)]
    if missing:
        raise SystemExit("missing: " + ", ".join(missing) + " (Debian: apt-get install openssh-server sshfs "
                         "squashfs-tools squashfuse strace)")
    if os.geteuid() != 0:
        raise SystemExit("needs root (mount namespace, FUSE mounts)")
    prefix = Path(args.prefix).resolve()
    if not (prefix / "bin" / "python").exists():
        raise SystemExit(f"--prefix {prefix}: no bin/python")
    work = Path(tempfile.mkdtemp(prefix="envtool-bench-import-", dir=args.workdir))
    made_run_sshd = not Path("/run/sshd").exists()
    sshd = inner = None
    try:
        if made_run_sshd:
            Path("/run/sshd").mkdir(mode=0o755)
        port = free_port()
        sshd, key = start_sshd(work, port)
        config = {"prefix": str(prefix), "work": str(work), "port": port, "key": str(key),
                  "ranks": args.ranks, "json": args.json, "trace_ranks": args.trace_ranks}
        inner = subprocess.Popen([which("unshare"), "--mount", "--propagation", "private", sys.executable,
                                  str(Path(__file__).resolve()), "--inner", json.dumps(config)],
                                 start_new_session=True)
        return inner.wait()
    except KeyboardInterrupt:
        print("interrupted: stopping ranks, unmounting, stopping sshd", file=sys.stderr)
        if inner is not None and inner.poll() is None:
            inner.send_signal(signal.SIGTERM)      # the inner run unmounts and stops its children
            try:
                inner.wait(timeout=60)
            except subprocess.TimeoutExpired:
                stop(inner, grace=1)
        return 130
    finally:
        stop(inner, grace=30)
        stop(sshd)
        shutil.rmtree(work, ignore_errors=True)
        if made_run_sshd:
            shutil.rmtree("/run/sshd", ignore_errors=True)


# ---------------------------------------------------------------------------------------- inner


class Terminated(KeyboardInterrupt):
    pass


def wait_mount(path: Path, proc, what: str, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.ismount(path):
            return
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"{what} exited {proc.returncode} before mounting {path}")
        time.sleep(0.1)
    raise SystemExit(f"{what} did not mount {path} within {timeout:.0f} s")


def run(argv, **kw):
    started = time.monotonic()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, **kw)
    return time.monotonic() - started


def timed_pass(python: str, n: int, timeout=1800.0):
    """Start ``n`` ranks together; per rank: import seconds (in the process) and wall seconds."""
    started = time.monotonic()
    procs = [subprocess.Popen([python, "-c", RANK_CODE], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(n)]
    out = []
    for p in procs:
        o, e = p.communicate(timeout=timeout)
        if p.returncode != 0:
            raise SystemExit(f"a rank failed ({python}): {e.decode(errors='replace')[-800:]}")
        rec = json.loads(o.decode().strip().splitlines()[-1])
        rec["wall"] = time.monotonic() - started
        out.append(rec)
    return out


def traced_pass(python: str, n: int, shared_prefix: str, tmp: Path, timeout=3600.0):
    """``n`` ranks together, each under strace; per rank the metadata calls under ``shared_prefix``."""
    files = [tmp / f"trace-{i}.txt" for i in range(n)]
    procs = [subprocess.Popen([which("strace"), "-f", "-qq", "-y", "-e", "trace=%file,getdents64", "-e",
                               "signal=none", "-o", str(f), python, "-c", RANK_CODE],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for f in files]
    counts = []
    for p, f in zip(procs, files):
        _, e = p.communicate(timeout=timeout)
        if p.returncode != 0:
            raise SystemExit(f"a traced rank failed ({python}): {e.decode(errors='replace')[-800:]}")
        with open(f, errors="replace") as fh:
            counts.append(count_metadata_calls(fh, shared_prefix))
        f.unlink()
    return counts


def _terminated(signum, frame):
    raise Terminated()


def inner(config) -> int:
    signal.signal(signal.SIGTERM, _terminated)
    prefix, work = Path(config["prefix"]), Path(config["work"])
    name = prefix.name
    ranks = [int(x) for x in str(config["ranks"]).split(",")]
    local = work / "node-local"
    local.mkdir()
    packs = work / "packed"        # where the packed file is written: the shared file system's role
    packs.mkdir()
    fuse = []                      # (Popen, mount point), unmounted in reverse
    mounted_tmpfs = False
    binds = []
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    try:
        size_kb = int(subprocess.run(["du", "-sk", str(prefix)], capture_output=True, text=True,
                                     check=True).stdout.split()[0])
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={2 * size_kb + 512 * 1024}k", "envtool-bench-local",
                        str(local)], check=True, timeout=60)
        mounted_tmpfs = True
        # the pack reads the prefix once (on a login node); here from local disk through a bind mount made
        # before sshfs covers the path: SFTP through one sshd on 2 loaded cores would time the emulation
        source = work / "source" / name
        source.mkdir(parents=True)
        subprocess.run(["mount", "--bind", "-o", "ro", str(prefix), str(source)], check=True, timeout=60)
        binds.append(source)
        sshfs = subprocess.Popen([which("sshfs"), "-f", "-o", ",".join([
            f"port={config['port']}", f"IdentityFile={config['key']}", "StrictHostKeyChecking=no",
            "UserKnownHostsFile=/dev/null", "BatchMode=yes", "ro", "dir_cache=no", "attr_timeout=0",
            "entry_timeout=0", "negative_timeout=0",
            # the venv's bin/python3 links to an absolute path; sshfs refuses such links (EPERM) unless told
            # the server is trusted (contain_symlinks, libfuse/sshfs pull request 361): it is our own sshd
            "no_contain_symlinks"]), f"root@127.0.0.1:{prefix}", str(prefix)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        fuse.append((sshfs, prefix))
        wait_mount(prefix, sshfs, "sshfs")
        fstype = [ln.split(" - ")[1].split()[0] for ln in open("/proc/self/mountinfo")
                  if ln.split()[4] == str(prefix)][-1]
        print(f"shared: {prefix} is now {fstype} (sftp to 127.0.0.1:{config['port']}, caches off) in this "
              f"mount namespace; node-local: tmpfs {local}", file=sys.stderr, flush=True)

        staging = {}
        tarball = packs / f"{name}.tar"
        staging["tar: pack (tar cf)"] = run(["tar", "-C", str(source.parent), "-cf", str(tarball), name])
        staging["tar: copy to node-local (the broadcast)"] = run(["cp", str(tarball), str(local / tarball.name)])
        (local / "staged").mkdir()
        staging["tar: unpack on node-local"] = run(["tar", "-C", str(local / "staged"), "-xf",
                                                    str(local / tarball.name)])
        os.unlink(local / tarball.name)
        image = packs / f"{name}.squashfs"
        staging["squashfs: pack (mksquashfs -comp lz4)"] = run(
            [which("mksquashfs"), str(source), str(image), "-comp", "lz4", "-processors", "2", "-no-progress",
             "-quiet"])
        staging["squashfs: copy to node-local (the broadcast)"] = run(["cp", str(image), str(local / image.name)])
        sq_mnt = local / "squashfs" / name
        sq_mnt.mkdir(parents=True)
        t0 = time.monotonic()
        sq = subprocess.Popen([which("squashfuse"), "-f", str(local / image.name), str(sq_mnt)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        fuse.append((sq, sq_mnt))
        wait_mount(sq_mnt, sq, "squashfuse")
        staging["squashfs: mount (squashfuse)"] = time.monotonic() - t0
        sizes = {"tar": tarball.stat().st_size, "squashfs": image.stat().st_size}

        setups = {"shared": prefix, "staged": local / "staged" / name, "squashfs": sq_mnt}
        results = {label: {} for label in setups}
        for n in ranks:            # set-ups interleaved at each rank count: they see the same load
            for label, root in setups.items():
                t0 = time.monotonic()
                results[label][n] = {"timed": timed_pass(str(root / "bin" / "python"), n)}
                secs = [x["total"] for x in results[label][n]["timed"]]
                print(f"{label}: {n} rank(s): p50 {percentile(secs, 50):.2f} s, p99 {percentile(secs, 99):.2f} s "
                      f"({time.monotonic() - t0:.0f} s; load {' '.join(Path('/proc/loadavg').read_text().split()[:3])})",
                      file=sys.stderr, flush=True)
        for label, root in setups.items():
            n = config["trace_ranks"]
            print(f"{label}: {n} rank(s) under strace ...", file=sys.stderr, flush=True)
            results[label].setdefault(n, {"timed": []})["traced"] = traced_pass(str(root / "bin" / "python"), n,
                                                                               str(prefix), work)
        load_after = Path("/proc/loadavg").read_text().split()[:3]
        uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        report(config, prefix, fstype, staging, sizes, results, ranks, load_before, load_after, uptime)
        return 0
    except KeyboardInterrupt:
        print("inner: interrupted; unmounting", file=sys.stderr)
        return 130
    finally:
        for proc, point in reversed(fuse):
            subprocess.run([which("fusermount3"), "-u", "-z", str(point)], capture_output=True, timeout=60)
            stop(proc)
        for point in binds:
            subprocess.run(["umount", "-l", str(point)], capture_output=True, timeout=60)
        if mounted_tmpfs:
            subprocess.run(["umount", "-l", str(local)], capture_output=True, timeout=60)


def report(config, prefix, fstype, staging, sizes, results, ranks, load_before, load_after, uptime):
    n_max = max(ranks)
    rows = []
    for label, per_n in results.items():
        for n, r in sorted(per_n.items()):
            secs = [x["total"] for x in r["timed"]]
            if not secs:
                continue
            row = {"setup": label, "ranks": n, "p50_s": percentile(secs, 50), "p99_s": percentile(secs, 99),
                   "max_s": max(secs), "p99_wall_s": percentile([x["wall"] for x in r["timed"]], 99)}
            traced = per_n.get(config["trace_ranks"], {}).get("traced")
            if traced and n == max(ranks):
                calls = [c["calls"] for c in traced]
                row.update(meta_p50=percentile(calls, 50), meta_p99=percentile(calls, 99),
                           meta_failed_p50=percentile([c["failed"] for c in traced], 50), meta_ranks=len(traced))
            rows.append(row)
    shared = {r["ranks"]: r for r in rows if r["setup"] == "shared"}
    for r in rows:
        r["p99_vs_shared"] = r["p99_s"] / shared[r["ranks"]]["p99_s"] if shared[r["ranks"]]["p99_s"] else None
    meta_after = {r["setup"]: r.get("meta_p99") for r in rows if r["ranks"] == n_max and r["setup"] != "shared"}
    ratio16 = {r["setup"]: r["p99_vs_shared"] for r in rows if r["ranks"] == n_max and r["setup"] != "shared"}
    targets = {
        "0 metadata calls on the shared file system per rank after staging": {
            k: {"p99_calls": v, "met": v == 0} for k, v in meta_after.items()},
        f"p99 staged <= 0.2x shared at {n_max} ranks": {k: {"ratio": v, "met": v is not None and v <= 0.2}
                                                        for k, v in ratio16.items()},
    }
    if config["json"]:
        print(json.dumps({"prefix": str(prefix), "shared_fs": fstype, "staging_s": staging, "sizes": sizes,
                          "rows": rows, "targets": targets, "load_before": load_before, "load_after": load_after,
                          "uptime": uptime}, indent=1))
        return
    print(f"uptime: {uptime}")
    print(f"load average before: {' '.join(load_before)}; after: {' '.join(load_after)}; cores: {os.cpu_count()}")
    print(f"prefix: {prefix} ({fstype} over 127.0.0.1, caches off); import torch + horovod.torch per rank; "
          f"metadata calls under {prefix} per rank (strace pass of {config['trace_ranks']} ranks, shown on the "
          f"{n_max}-rank rows)")
    print()
    print(f"{'setup':<9}{'ranks':>6}{'p50 s':>8}{'p99 s':>8}{'max s':>8}{'p99 wall s':>11}{'p99/shared':>11}"
          f"{'meta p50':>10}{'meta p99':>10}")
    for r in rows:
        ratio = f"{r['p99_vs_shared']:.2f}x" if r["p99_vs_shared"] is not None else "-"
        mp50 = str(r["meta_p50"]) if "meta_p50" in r else ""
        mp99 = str(r["meta_p99"]) if "meta_p99" in r else ""
        print(f"{r['setup']:<9}{r['ranks']:>6}{r['p50_s']:>8.2f}{r['p99_s']:>8.2f}{r['max_s']:>8.2f}"
              f"{r['p99_wall_s']:>11.2f}{ratio:>11}{mp50:>10}{mp99:>10}")
    print()
    print("staging (once; tar and mksquashfs run directly):")
    for k, v in staging.items():
        print(f"  {k:<46}{v:>8.1f} s")
    print(f"  sizes: tar {sizes['tar'] / 2**20:.0f} MiB, squashfs (lz4) {sizes['squashfs'] / 2**20:.0f} MiB")
    print()
    print("targets (issue 25):")
    for what, per in targets.items():
        for setup, v in per.items():
            val = v.get("p99_calls", v.get("ratio"))
            val = f"{val:.2f}x" if isinstance(val, float) else str(val)
            print(f"  {what}: {setup} {val}: {'met' if v['met'] else 'MISSED'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", default=os.environ.get("ENVTOOL_TEST_CPU_ENV", "/work/envs/cpu-horovod"),
                        help="the environment (default $ENVTOOL_TEST_CPU_ENV or /work/envs/cpu-horovod)")
    parser.add_argument("--ranks", default="1,2,4,8,16", help="rank counts, comma-separated (1,2,4,8,16)")
    parser.add_argument("--workdir", default=None, help="parent of the run's temporary directory (default $TMPDIR)")
    parser.add_argument("--trace-ranks", type=int, default=2,
                        help="ranks started together under strace per set-up to count metadata calls (2; the count "
                             "does not depend on how many run, strace slows each)")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    parser.add_argument("--inner", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        return inner(json.loads(args.inner))
    try:
        ranks = [int(x) for x in args.ranks.split(",")]
        if not ranks or min(ranks) < 1:
            raise ValueError
    except ValueError:
        parser.error(f"--ranks {args.ranks!r}: expected positive integers separated by commas")
    return outer(args)


if __name__ == "__main__":
    raise SystemExit(main())
