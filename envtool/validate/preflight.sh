#!/bin/bash
# envtool's pre-flight, one task per node before the main step of a validation job (not sourced).
#
#   bash preflight.sh OUT_DIR PREFIX|- [IFACE|- [NODES [GPU]]]   (on every node: srun --ntasks-per-node=1)
#   bash preflight.sh --gate OUT_DIR NODES [LOCK_SHA256]   (in the batch shell, after it)
#
# IFACE: the interface the controllers are told to use (the site file's batch.interface), or "-":
# the one holding the address the node's hostname resolves to. Every node listens on its
# interface's address (system python3, else the environment's python) and connects to every
# other node's listener with bash's /dev/tcp (bounded by timeout(1)). GPU=1: also list the
# libnccl files the environment's torch (and horovod.torch) map into one process.
#
# Runs with the node's own bash and coreutils only (the environment may be missing on this node:
# that is one thing it finds). Writes OUT_DIR/preflight/task-<T>.txt, one "key=value" per line,
# values without spaces except "addrs": what envtool's envtool/validate/preflight.py judges.
# Exits 1 when this node cannot run the main step (prefix missing), so `set -e` in the job script
# stops before the ranks start. Every probe has a time limit (timeout(1), 10 s).
set -u
if [ "$1" = "--gate" ]; then
    # exit 1 (stopping the job script before the main step) when the nodes' reports disagree:
    # fewer reports than nodes, a hostname twice, different locks, or (on more than one node)
    # a hostname that resolves to loopback, or a lock other than the submitting host's
    # (LOCK_SHA256). envtool names the nodes and causes from the reports.
    out="$2/preflight"
    nodes="$3"
    want="${4:-}"
    SHM_MIN_KIB="${SHM_MIN_KIB:-65536}"
    n=$(ls "$out"/task-*.txt 2>/dev/null | wc -l)
    [ "$n" -eq "$nodes" ] || { echo "pre-flight: $n of $nodes nodes reported" >&2; exit 1; }
    dup=$(cat "$out"/task-*.txt | sed -n 's/^host=//p' | sort | uniq -d)
    [ -z "$dup" ] || { echo "pre-flight: hostname(s) on more than one node: $dup" >&2; exit 1; }
    locks=$(cat "$out"/task-*.txt | sed -n 's/^lock_sha256=//p' | sort -u | wc -l)
    [ "$locks" -le 1 ] || { echo "pre-flight: the environment differs between nodes" >&2; exit 1; }
    if [ -n "$want" ] && cat "$out"/task-*.txt | grep '^lock_sha256=' | grep -qv "^lock_sha256=$want\$"; then
        echo "pre-flight: the environment on the nodes differs from the submitting host's" >&2; exit 1
    fi
    if [ "$nodes" -gt 1 ]; then
        bad=$(grep -l -E '^first_addr=(127\.|-$)' "$out"/task-*.txt)
        [ -z "$bad" ] || { echo "pre-flight: a hostname resolves to loopback or not at all" >&2; exit 1; }
        bad=$(grep -l -E '^iface_state=missing$' "$out"/task-*.txt)
        [ -z "$bad" ] || { echo "pre-flight: the interface is missing on a node" >&2; exit 1; }
        bad=$(grep -l -E '^reach=.*:fail' "$out"/task-*.txt)
        [ -z "$bad" ] || { echo "pre-flight: a node does not reach another on the interface" >&2; exit 1; }
    fi
    bad=$(grep -l '^lib_bad=' "$out"/task-*.txt)
    [ -z "$bad" ] || { echo "pre-flight: a library of the environment does not load on a node" >&2; exit 1; }
    small=$(sed -n 's/^shm_kib=\([0-9]*\)$/\1/p' "$out"/task-*.txt | awk -v m="$SHM_MIN_KIB" '$1 < m' | head -1)
    [ -z "$small" ] || { echo "pre-flight: /dev/shm is smaller than $SHM_MIN_KIB KiB on a node" >&2; exit 1; }
    if [ "$(grep -h '^maps=maps-' "$out"/task-*.txt | wc -l)" -gt 0 ]; then
        for f in "$out"/maps-*.txt; do
            n=$(awk '$6 ~ /\/libnccl[^\/]*\.so/ {print $5}' "$f" | sort -u | wc -l)
            [ "$n" -le 1 ] || { echo "pre-flight: more than one libnccl in one process" >&2; exit 1; }
        done
    fi
    # the interface every node chose (none set by the site): exported for the main step
    ifaces=$(cat "$out"/task-*.txt | sed -n 's/^iface=//p' | sort -u)
    {
        echo "# written by envtool's pre-flight (preflight.sh --gate)"
        if grep -q '^iface_source=hostname$' "$out"/task-*.txt && [ "$(echo "$ifaces" | wc -l)" -eq 1 ] \
                && echo "$ifaces" | grep -qxE '[A-Za-z0-9_.@-]{1,15}'; then
            for v in HOROVOD_GLOO_IFACE GLOO_SOCKET_IFNAME NCCL_SOCKET_IFNAME OMPI_MCA_btl_tcp_if_include; do
                echo "export $v=$ifaces  # chosen by the pre-flight: the interface of the address every node's hostname resolves to"
            done
        fi
    } > "$out/interface.env"
    exit 0
fi
out="$1/preflight"
prefix="$2"
iface_want="${3:--}"
nodes="${4:-1}"
gpu="${5:-0}"
task="${SLURM_PROCID:-${PMIX_RANK:-${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}}}"
mkdir -p "$out"
tmp="$out/.task-$task.$$"
host="$(hostname 2>/dev/null || uname -n)"
rc=0
{
    echo "task=$task"
    echo "host=$host"
    echo "nodelist=${SLURM_JOB_NODELIST:--}"
    if [ "$prefix" = "-" ]; then
        echo "prefix=-"
    elif [ -d "$prefix" ]; then
        echo "prefix=present"
        py="$prefix/bin/python"
        if [ -x "$py" ] && [ -f "$py" ]; then
            echo "python=present"
        else
            # named for what it is, not guessed: a link that does not resolve here (a venv's absolute
            # link to its base interpreter over sshfs), permission denied, not executable, or absent
            rc=1
            err="$(timeout 10 stat -L -c %F -- "$py" 2>&1 >/dev/null | tr -s ' \t\n' ' ' | cut -c1-300)"
            if [ -L "$py" ] && ! [ -e "$py" ]; then
                tgt="$(readlink -- "$py" 2>&1 | cut -c1-300)"
                echo "python=dangling"
                echo "python_why=bin/python is a symbolic link to $tgt, which cannot be followed on this node (${err:-no such file})"
            elif [ -d "$prefix/bin" ] && ! [ -x "$prefix/bin" ]; then
                echo "python=unreadable"
                echo "python_why=permission denied: $prefix/bin cannot be searched by $(id -un 2>/dev/null || id -u)"
            elif [ -n "$err" ]; then
                case "$err" in
                    *"No such file"*) echo "python=missing"; echo "python_why=bin/python is absent" ;;
                    *) echo "python=unreadable"; echo "python_why=bin/python cannot be read: $err" ;;
                esac
            elif [ -e "$py" ]; then
                echo "python=noexec"
                echo "python_why=bin/python is not an executable file there ($(stat -L -c '%F, mode %a, owner %U' -- "$py" 2>&1))"
            else
                echo "python=missing"; echo "python_why=bin/python is absent"
            fi
        fi
        fs="$(timeout 10 stat -f -c %T "$prefix" 2>/dev/null || echo unknown)"
        echo "fstype=$fs"
        lock=""
        for f in "$prefix/conda-lock.yml" "$prefix/.envtool/conda-lock.yml"; do
            if [ -f "$f" ]; then lock="$f"; break; fi
        done
        if [ -n "$lock" ]; then
            echo "lock_sha256=$(timeout 10 sha256sum "$lock" | cut -d' ' -f1)"
        else
            echo "lock_sha256=none"
        fi
        # the shared libraries the ranks load first: torch's extension and Horovod's; ldd names a
        # library missing or unreadable on this node ("not found", "file too short")
        for so in "$prefix"/lib/python3*/site-packages/torch/_C.*so "$prefix"/lib/python3*/site-packages/horovod/*/mpi_lib*.so; do
            [ -e "$so" ] || continue
            lo="$(timeout 20 ldd "$so" 2>&1)"; lrc=$?
            miss="$(printf '%s\n' "$lo" | awk '/=> not found/ {print $1}' | tr '\n' ' ')"
            if [ -n "$miss" ]; then
                echo "lib_bad=$so|not found: ${miss% }"; rc=1; break
            elif [ $lrc -ne 0 ]; then
                echo "lib_bad=$so|$(printf '%s\n' "$lo" | grep -m1 -E 'error|No such|too short|not a dynamic' | tr -s ' \t' ' ' | cut -c1-300)"
                rc=1; break
            fi
        done
    else
        rc=1
        err="$(timeout 10 stat -L -c %F -- "$prefix" 2>&1 >/dev/null | tr -s ' \t\n' ' ' | cut -c1-300)"
        if [ -L "$prefix" ] && ! [ -e "$prefix" ]; then
            echo "prefix=unreadable"
            echo "prefix_why=a symbolic link to $(readlink -- "$prefix" 2>&1 | cut -c1-300), which cannot be followed on this node (${err:-no such file})"
        elif [ -e "$prefix" ] && ! [ -d "$prefix" ]; then
            echo "prefix=unreadable"
            echo "prefix_why=not a directory there ($(stat -L -c %F -- "$prefix" 2>&1))"
        elif [ -n "$err" ] && case "$err" in *"No such file"*) false ;; *) true ;; esac; then
            echo "prefix=unreadable"
            echo "prefix_why=it cannot be reached by $(id -un 2>/dev/null || id -u): $err"
        else
            echo "prefix=missing"
        fi
    fi
    # what gethostbyname(hostname) gives (the address Gloo, NCCL and c10d advertise), then all
    first="$(timeout 10 getent ahostsv4 "$host" 2>/dev/null | awk 'NR==1 {print $1}')"
    echo "first_addr=${first:--}"
    echo "addrs=$(timeout 10 getent ahosts "$host" 2>/dev/null | awk '{print $1}' | sort -u | tr '\n' ' ')"
    echo "own_addrs=$(timeout 10 hostname -I 2>/dev/null)"
    # /dev/shm: NCCL's intra-node transport and the DataLoader's workers put their buffers there
    echo "shm_kib=$(timeout 10 df -kP /dev/shm 2>/dev/null | awk 'NR==2 {print $2}')"
    # free, not size: a full /dev/shm fails NCCL/Gloo/DataLoader with ENOSPC (errno 28)
    echo "shm_free_kib=$(timeout 10 df -kP /dev/shm 2>/dev/null | awk 'NR==2 {print $4}')"
    # the node-local directory jobs write to (TMPDIR, else /tmp): its free space
    echo "local_path=${TMPDIR:-/tmp}"
    echo "local_free_kib=$(timeout 10 df -kP "${TMPDIR:-/tmp}" 2>/dev/null | awk 'NR==2 {print $4}')"
    # the interface: the site's, or the one that holds the address the hostname resolves to
    if [ "$iface_want" != "-" ]; then
        iface="$iface_want"; echo "iface_source=site"
    else
        iface="$(timeout 10 ip -o -4 addr show 2>/dev/null | awk -v a="$first" '{split($4, p, "/"); if (p[1] == a) {print $2; exit}}')"
        echo "iface_source=hostname"
    fi
    echo "iface=${iface:--}"
    echo "ifaces=$(timeout 10 ip -o -4 addr show 2>/dev/null | awk '$2 != "lo" {print $2}' | sort -u | tr '\n' ' ')"
    iaddr=""
    # ip(8), not /sys/class/net: sysfs shows the network namespace it was mounted in
    if [ -n "$iface" ] && timeout 10 ip -o link show dev "$iface" >/dev/null 2>&1; then
        echo "iface_state=present"
        iaddr="$(timeout 10 ip -o -4 addr show dev "$iface" 2>/dev/null | awk '{split($4, p, "/"); print p[1]; exit}')"
        echo "iface_mtu=$(timeout 10 ip -o link show dev "$iface" 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "mtu") {print $(i + 1); exit}}')"
    else
        echo "iface_state=missing"
    fi
    echo "iface_addr=${iaddr:--}"
    # reachability: listen on this node's interface address, connect to every other node's
    pyexe=""
    for p in python3 "$prefix/bin/python"; do
        if command -v "$p" >/dev/null 2>&1 && timeout 20 "$p" -c "" >/dev/null 2>&1; then pyexe="$p"; break; fi
    done
    listener=""
    ltmp="$out/.listen-$task.$$"
    if [ -n "$iaddr" ] && [ -n "$pyexe" ]; then
        timeout 60 "$pyexe" -c '
import os, socket, sys, time
s = socket.socket()
s.bind((sys.argv[1], 0))
s.listen(64)
s.settimeout(0.5)
with open(sys.argv[2], "w") as f:
    f.write("%s %s %d\n" % (sys.argv[3], sys.argv[1], s.getsockname()[1]))
os.rename(sys.argv[2], sys.argv[4])
end = time.monotonic() + 50
while time.monotonic() < end:
    try:
        c, _ = s.accept()
        c.close()
    except socket.timeout:
        pass
' "$iaddr" "$ltmp" "$host" "$out/listen-$task.txt" 2>/dev/null &
        listener=$!
    else
        echo "$host - -" > "$ltmp" && mv -f "$ltmp" "$out/listen-$task.txt"
    fi
    echo "reach_tool=${pyexe:--}"
    waited=0
    while [ "$(ls "$out"/listen-*.txt 2>/dev/null | wc -l)" -lt "$nodes" ] && [ $waited -lt 200 ]; do
        sleep 0.1; waited=$((waited + 1))
    done
    reach=""
    if [ -n "$iaddr" ] && [ -n "$pyexe" ]; then
        for f in "$out"/listen-*.txt; do
            [ "$f" = "$out/listen-$task.txt" ] && continue
            read -r peer paddr pport < "$f" || continue
            if [ "$paddr" = "-" ]; then
                reach="$reach $peer:nolistener"
            elif timeout 5 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$paddr" "$pport" 2>/dev/null; then
                reach="$reach $peer:ok"
            else
                reach="$reach $peer:fail@$paddr"
            fi
        done
    fi
    echo "reach=${reach# }"
    : > "$out/connected-$task"
    waited=0
    while [ "$(ls "$out"/connected-* 2>/dev/null | wc -l)" -lt "$nodes" ] && [ $waited -lt 200 ]; do
        sleep 0.1; waited=$((waited + 1))
    done
    [ -n "$listener" ] && kill "$listener" 2>/dev/null
    # on GPU nodes: the driver and GPUs (nvidia-smi's header, -L and the compute_cap query) for the
    # GPU gates, and the NCCL settings the ranks get
    if [ "$gpu" = "1" ]; then
        if command -v nvidia-smi >/dev/null 2>&1; then
            timeout 20 nvidia-smi > "$out/smi-$task.txt" 2>/dev/null
            timeout 20 nvidia-smi -L > "$out/smil-$task.txt" 2>/dev/null
            timeout 20 nvidia-smi --query-gpu=index,compute_cap --format=csv > "$out/smic-$task.txt" 2>/dev/null
            echo "smi=yes"
        else
            echo "smi=-"
        fi
        for v in NCCL_PROTO FI_CXI_RDZV_THRESHOLD FI_CXI_RDZV_GET_MIN NCCL_IB_PCI_RELAXED_ORDERING; do
            val="$(printenv "$v" || true)"
            if [ -n "$val" ]; then echo "env_$v=$(printf %s "$val" | tr -d ' ')"; fi
        done
    fi
    # on GPU nodes: the libnccl files one process of the environment maps, and torch's CUDA view
    if [ "$gpu" = "1" ] && [ -x "$prefix/bin/python" ]; then
        timeout 60 "$prefix/bin/python" -c '
import json, sys
import torch
try:
    import horovod.torch  # noqa: F401
except ImportError:
    pass
view = {"cuda": torch.version.cuda, "available": torch.cuda.is_available()}
if view["available"] and hasattr(torch.cuda, "get_arch_list"):  # torch >= 1.6
    view["arch_list"] = list(torch.cuda.get_arch_list())
    try:
        view["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception:
        pass
with open(sys.argv[2], "w") as out:
    json.dump(view, out)
with open("/proc/self/maps") as f, open(sys.argv[1], "w") as out:
    out.write(f.read())
' "$out/maps-$task.txt" "$out/torch-$task.json" >/dev/null 2>&1 && echo "maps=maps-$task.txt" || echo "maps=-"
    fi
    echo "done=yes"
} > "$tmp"
mv -f "$tmp" "$out/task-$task.txt"
exit $rc
