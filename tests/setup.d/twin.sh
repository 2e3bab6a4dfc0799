#!/usr/bin/env bash
# The site twin (tests/twin/make_twin.py, tests/test_site_twin.py; run as root; idempotent):
# patchelf makes the twin's CPython relocatable (RUNPATH $ORIGIN-relative). The twin also uses
# Lmod (modules.sh), the unprivileged user and shared Python (publish.sh), OpenMPI and a C++
# toolchain with cmake (the Horovod builds, as for cpu-horovod).
set -euo pipefail
# shellcheck source=../../scripts/lib/apt.sh
. "$(dirname "$0")/../../scripts/lib/apt.sh"   # waits for the dpkg lock, retries downloads
if ! command -v patchelf >/dev/null 2>&1; then
    apt_install patchelf
fi
echo "twin.sh: patchelf $(patchelf --version)"
