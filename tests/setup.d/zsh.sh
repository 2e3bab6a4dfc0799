#!/usr/bin/env bash
# zsh for tests/test_completions.py (the generated zsh completion is loaded in a real zsh).
# Run as root by tests/setup.sh; idempotent: installs only when zsh is missing.
set -euo pipefail
# shellcheck source=../../scripts/lib/apt.sh
. "$(dirname "$0")/../../scripts/lib/apt.sh"   # waits for the dpkg lock, retries downloads
if ! command -v zsh >/dev/null 2>&1; then
    apt_install zsh >/dev/null
fi
