#!/usr/bin/env bash
# Charliecloud's runtime (ch-run, Debian's charliecloud-runtime 0.31) for tests/test_container_run*.py:
# job-script run lines and `doctor` are run inside a real unprivileged container.
# Run as root by scripts/setup.sh --test; idempotent: installs only when ch-run is missing.
set -euo pipefail
if ! command -v ch-run >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq charliecloud-runtime >/dev/null
fi
