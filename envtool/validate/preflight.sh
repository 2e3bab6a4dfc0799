#!/bin/bash
# envtool's pre-flight, one task per node before the main step of a validation job (not sourced).
#
#   bash preflight.sh OUT_DIR PREFIX|-        (on every node: srun --ntasks-per-node=1)
#   bash preflight.sh --gate OUT_DIR NODES [LOCK_SHA256]   (in the batch shell, after it)
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
    fi
    exit 0
fi
out="$1/preflight"
prefix="$2"
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
        if [ -x "$prefix/bin/python" ]; then echo "python=present"; else echo "python=missing"; rc=1; fi
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
    else
        echo "prefix=missing"
        rc=1
    fi
    # what gethostbyname(hostname) gives (the address Gloo, NCCL and c10d advertise), then all
    first="$(timeout 10 getent ahostsv4 "$host" 2>/dev/null | awk 'NR==1 {print $1}')"
    echo "first_addr=${first:--}"
    echo "addrs=$(timeout 10 getent ahosts "$host" 2>/dev/null | awk '{print $1}' | sort -u | tr '\n' ' ')"
    echo "own_addrs=$(timeout 10 hostname -I 2>/dev/null)"
    echo "done=yes"
} > "$tmp"
mv -f "$tmp" "$out/task-$task.txt"
exit $rc
