#!/usr/bin/env bash
# Charliecloud's runtime (ch-run, Debian's charliecloud-runtime 0.31) for tests/test_container_run*.py:
# job-script run lines and `doctor` are run inside a real unprivileged container.
# Run as root by scripts/setup.sh --test; idempotent: installs only when ch-run is missing.
set -euo pipefail
# shellcheck source=../../scripts/lib/apt.sh
. "$(dirname "$0")/../../scripts/lib/apt.sh"   # waits for the dpkg lock, retries downloads
if ! command -v ch-run >/dev/null 2>&1; then
    apt_install charliecloud-runtime >/dev/null
fi
