#!/usr/bin/env bash
# The site twin (tests/twin/make_twin.py, tests/test_site_twin.py; run as root; idempotent):
# patchelf makes the twin's CPython relocatable (RUNPATH $ORIGIN-relative). The twin also uses
# Lmod (modules.sh), the unprivileged user and shared Python (publish.sh), OpenMPI and a C++
# toolchain with cmake (the Horovod builds, as for cpu-horovod).
set -euo pipefail
if ! command -v patchelf >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq patchelf
fi
echo "twin.sh: patchelf $(patchelf --version)"
