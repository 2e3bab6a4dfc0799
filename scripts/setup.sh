#!/usr/bin/env bash
# Development set-up from a checkout: system packages (as root, only when missing), then envtool.
#   bash scripts/setup.sh          what `envtool create cpu-horovod` needs (OpenMPI, a C++ compiler,
#                                  cmake) and envtool itself (editable)
#   bash scripts/setup.sh --test   also what the tests need (tests/setup.d/*.sh, as root) and the
#                                  test extra
# Without root (a login node): nothing is installed system-wide; the missing tools are named with
# both fixes (the site's modules, or apt-get by an admin), and envtool is installed for this user
# (`pip install --user`, or into the active venv). `envtool plan` checks the same tools again.
# Users who only want the tool: `pipx install .` or `python3 -m pip install --user .` (README, Install).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/apt.sh
. scripts/lib/apt.sh   # apt-get that waits for the dpkg lock and retries downloads
with_tests=0
[ "${1:-}" = "--test" ] && with_tests=1
PY=${PYTHON:-python3}

need_apt=()
command -v mpirun >/dev/null 2>&1 || need_apt+=(openmpi-bin)
command -v mpicxx >/dev/null 2>&1 || ls /usr/lib/*/openmpi/include/mpi.h >/dev/null 2>&1 || need_apt+=(libopenmpi-dev)
command -v c++ >/dev/null 2>&1 || need_apt+=(g++)
command -v cmake >/dev/null 2>&1 || need_apt+=(cmake)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt_install "${need_apt[@]}" >/dev/null
  else
    echo "scripts/setup.sh: a Horovod compile needs what this machine lacks (${need_apt[*]})." >&2
    echo "  on an HPC site:    module load <compiler> <cmake> <mpi>   (the site's names; a site file's build_modules)" >&2
    echo "  on Debian/Ubuntu:  sudo apt-get install ${need_apt[*]}" >&2
    echo "  CMake without root: $PY -m pip install --user cmake" >&2
    echo "  envtool is installed anyway; 'envtool plan SPEC' says again what a build lacks." >&2
  fi
fi
if [ "$with_tests" = 1 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "scripts/setup.sh --test: the tests' set-up (users, Slurm, Lmod) needs root" >&2
    exit 1
  fi
  for f in tests/setup.d/*.sh; do
    [ -e "$f" ] || continue
    echo "scripts/setup.sh: $f" >&2
    bash "$f"
  done
fi
# The distribution was called `envtool` before it became `envtool-hpc` (the PyPI name `envtool`
# belongs to another project); an old editable install of ours would shadow the new one.
if "$PY" -m pip show envtool 2>/dev/null | grep -q '^Summary: Provision distributed deep-learning'; then
  "$PY" -m pip uninstall -y -q envtool >/dev/null 2>&1 || true
fi
target=.
[ "$with_tests" = 1 ] && target='.[test]'
user=()
# No root and no venv: install for this user (site-packages is not ours to write).
if [ "$(id -u)" != 0 ] && ! "$PY" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)' \
   && ! [ -w "$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" ]; then
  user=(--user)
fi
"$PY" -m pip install -q --disable-pip-version-check ${user[@]+"${user[@]}"} -e "$target"
# pyenv only sees a new console script after a rehash
if command -v pyenv >/dev/null 2>&1; then pyenv rehash >/dev/null 2>&1 || true; fi
command -v envtool >/dev/null 2>&1 || echo "scripts/setup.sh: envtool is installed but not on PATH (add ~/.local/bin to PATH, or use '$PY -m envtool')" >&2
