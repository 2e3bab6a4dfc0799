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

GROUP=envtool-pub
VENV=${ENVTOOL_TEST_USER_VENV:-/opt/envtool-test/venv}
here=$(cd "$(dirname "$0")/../.." && pwd)

getent group "$GROUP" >/dev/null || groupadd "$GROUP"
id envtool-user >/dev/null 2>&1 || useradd --no-create-home --shell /bin/bash -G "$GROUP" envtool-user
id -nG envtool-user | tr ' ' '\n' | grep -qx "$GROUP" || usermod -a -G "$GROUP" envtool-user
id envtool-other >/dev/null 2>&1 || useradd --no-create-home --shell /bin/bash envtool-other

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import rattler, yaml, packaging, requests" 2>/dev/null; then
    if ! /usr/bin/python3 -c "import ensurepip" 2>/dev/null; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
    fi
    mkdir -p "$(dirname "$VENV")"
    /usr/bin/python3 -m venv "$VENV"
    # envtool's runtime dependencies, as pyproject.toml lists them
    deps=$("$VENV/bin/python" -c "import sys, tomllib; print('\n'.join(tomllib.load(open(sys.argv[1], 'rb'))['project']['dependencies']))" "$here/pyproject.toml")
    echo "$deps" | xargs "$VENV/bin/python" -m pip install -q
    chmod -R a+rX "$(dirname "$VENV")"
fi
echo "publish.sh: group $GROUP, users envtool-user (member) and envtool-other; Python $VENV"
