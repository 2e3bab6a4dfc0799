#!/usr/bin/env bash
# A real one-node Slurm for tests/test_scheduler_slurm.py (run as root by tests/setup.sh; idempotent).
#
# Installs Debian's slurm-wlm (slurmctld + slurmd + client, 22.05 on bookworm), munge, and the
# PMIx runtime that srun's mpi/pmix plugin and Open MPI use (libpmix2, plus libpmix-bin for
# pmix_info) - each only when missing. No daemon is started or configured here: the pytest
# fixture `slurm_cluster` (tests/helpers/slurm.py) writes slurm.conf for this machine, starts
# munged, slurmctld and slurmd on loopback, and stops them after the tests.
set -euo pipefail
# shellcheck source=../../scripts/lib/apt.sh
. "$(dirname "$0")/../../scripts/lib/apt.sh"   # waits for the dpkg lock, retries downloads

missing=()
command -v slurmctld >/dev/null 2>&1 || missing+=(slurmctld)
command -v slurmd >/dev/null 2>&1 || missing+=(slurmd)
command -v sbatch >/dev/null 2>&1 || missing+=(slurm-client)
command -v munged >/dev/null 2>&1 || missing+=(munge)
dpkg -s libpmix2 >/dev/null 2>&1 || missing+=(libpmix2)
dpkg -s libpmix-bin >/dev/null 2>&1 || missing+=(libpmix-bin)
command -v mpirun >/dev/null 2>&1 || missing+=(openmpi-bin libopenmpi-dev)

if [ ${#missing[@]} -gt 0 ]; then
    apt_install --no-install-recommends "${missing[@]}"
fi
# The mpi/pmix plugin ships in slurmd's package on bookworm; say so when it is not there.
ls /usr/lib/x86_64-linux-gnu/slurm-wlm/mpi_pmix*.so >/dev/null 2>&1 \
    || ls /usr/lib/*/slurm-wlm/mpi_pmix*.so >/dev/null 2>&1 \
    || echo "slurm.sh: warning: no mpi_pmix plugin found; srun --mpi=pmix will not work" >&2
echo "slurm.sh: slurm-wlm $(dpkg-query -W -f='${Version}' slurmctld 2>/dev/null), munge $(dpkg-query -W -f='${Version}' munge 2>/dev/null)"
