#!/usr/bin/env bash
# The multi-node test cluster (tests/helpers/cluster.py): what it needs beside tests/setup.d/slurm.sh.
#
# nsenter and unshare (util-linux), ip with bridge and veth support (iproute2), getent
# (libc-bin, for the pre-flight), each installed only when missing. Nothing is configured here:
# the cluster's namespaces, bridge and daemons are made and removed by the tests.
set -euo pipefail
# shellcheck source=../../scripts/lib/apt.sh
. "$(dirname "$0")/../../scripts/lib/apt.sh"   # waits for the dpkg lock, retries downloads

missing=()
command -v nsenter >/dev/null 2>&1 || missing+=(util-linux)
command -v unshare >/dev/null 2>&1 || missing+=(util-linux)
command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || missing+=(iproute2)
command -v getent >/dev/null 2>&1 || missing+=(libc-bin)

if [ ${#missing[@]} -gt 0 ]; then
    apt_install --no-install-recommends $(printf '%s\n' "${missing[@]}" | sort -u)
fi
echo "multinode.sh: $(nsenter --version 2>&1 | head -1), $(ip -V 2>&1 | head -1)"
