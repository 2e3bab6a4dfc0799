#!/usr/bin/env bash
# Set-up on a fresh machine: system packages (as root, only when missing), then envtool.
#   bash scripts/setup.sh          what `envtool create cpu-horovod` needs (OpenMPI, a C++ compiler, cmake)
#   bash scripts/setup.sh --test   also what the tests need (tests/setup.d/*.sh) and the test extra
set -euo pipefail
cd "$(dirname "$0")/.."
with_tests=0
[ "${1:-}" = "--test" ] && with_tests=1

need_apt=()
command -v mpirun >/dev/null 2>&1 || need_apt+=(openmpi-bin)
ls /usr/lib/*/openmpi/include/mpi.h >/dev/null 2>&1 || need_apt+=(libopenmpi-dev)
command -v c++ >/dev/null 2>&1 || need_apt+=(g++)
command -v cmake >/dev/null 2>&1 || need_apt+=(cmake)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "scripts/setup.sh: missing system packages (${need_apt[*]}); run as root or install them" >&2
    exit 1
  fi
fi
if [ "$with_tests" = 1 ]; then
  for f in tests/setup.d/*.sh; do
    [ -e "$f" ] || continue
    echo "scripts/setup.sh: $f" >&2
    bash "$f"
  done
  python3 -m pip install -q --disable-pip-version-check -e '.[test]'
else
  python3 -m pip install -q --disable-pip-version-check -e .
fi
# pyenv only sees a new console script after a rehash
if command -v pyenv >/dev/null 2>&1; then pyenv rehash >/dev/null 2>&1 || true; fi
command -v envtool >/dev/null 2>&1 || echo "scripts/setup.sh: envtool is installed but not on PATH; use 'python3 -m envtool'" >&2
