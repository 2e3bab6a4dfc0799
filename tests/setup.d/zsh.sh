#!/usr/bin/env bash
# zsh for tests/test_completions.py (the generated zsh completion is loaded in a real zsh).
# Run as root by tests/setup.sh; idempotent: installs only when zsh is missing.
set -euo pipefail
if ! command -v zsh >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zsh >/dev/null
fi
