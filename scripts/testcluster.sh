#!/usr/bin/env bash
# A real multi-node Slurm on this machine for trying envtool across nodes (root; see README,
# "Validating across nodes (test cluster)"):
#   bash scripts/testcluster.sh up [--nodes 3]     start it (2 nodes by default)
#   bash scripts/testcluster.sh run -- COMMAND     run COMMAND on the head node (the submitting host)
#   bash scripts/testcluster.sh down               stop every daemon, link and namespace
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/setup.d/slurm.sh >/dev/null
bash tests/setup.d/multinode.sh >/dev/null
exec python3 -m tests.helpers.cluster "$@"
