#!/usr/bin/env bash
# Real module systems for tests/test_modulefile.py (run as root by tests/setup.sh; idempotent).
#
# Debian's `lmod` (8.6) and `environment-modules` (5.2) conflict as packages: installing one
# removes the other. So Lmod is installed with apt, and Environment Modules is unpacked from its
# .deb (`apt-get download` + `dpkg -x`) into a private tree, /opt/envmodules, whose hard-coded
# paths (/usr/share/modules, /etc/environment-modules, /usr/lib/x86_64-linux-gnu) are rewritten
# to point inside that tree. It needs only `tclsh8.6` (package tcl8.6) to run.
#
# Afterwards:
#   Lmod:                source /usr/share/lmod/lmod/init/bash
#   Environment Modules: source /opt/envmodules/usr/share/modules/init/bash
set -euo pipefail
# shellcheck source=../../scripts/lib/apt.sh
. "$(dirname "$0")/../../scripts/lib/apt.sh"   # waits for the dpkg lock, retries downloads

ENVMODULES_ROOT=${ENVMODULES_ROOT:-/opt/envmodules}

lmod_init() {
    for f in /usr/share/lmod/lmod/init/bash /usr/share/lmod/*/init/bash; do
        [ -f "$f" ] && { echo "$f"; return 0; }
    done
    return 1
}

# The unpacked tree is keyed by the package version it came from (.envtool-key): a tree from
# another version than the one apt offers now is unpacked again.
candidate=$(apt-cache policy environment-modules 2>/dev/null | awk '/Candidate:/ {print $2}')
have=$(cat "$ENVMODULES_ROOT/.envtool-key" 2>/dev/null || true)
stale=0
if [ -n "$candidate" ] && [ "$candidate" != "(none)" ] && [ "$have" != "$candidate" ]; then stale=1; fi

# Environment Modules first: `apt-get download` works whether or not lmod is installed.
if [ ! -f "$ENVMODULES_ROOT/usr/share/modules/init/bash" ] || [ "$stale" = 1 ]; then
    if ! command -v tclsh8.6 >/dev/null 2>&1; then
        apt_install tcl8.6
    fi
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    deb=$(ls /var/cache/apt/archives/environment-modules_"${candidate//:/%3a}"_*.deb 2>/dev/null | head -n1 || true)
    [ -n "$candidate" ] && [ "$candidate" != "(none)" ] || deb=$(ls /var/cache/apt/archives/environment-modules_*.deb 2>/dev/null | head -n1 || true)
    if [ -z "$deb" ]; then
        apt_update
        (cd "$work" && apt_get download -qq environment-modules)
        deb=$(ls "$work"/environment-modules_*.deb | head -n1)
    fi
    mkdir -p "$work/tree"
    dpkg -x "$deb" "$work/tree"
    # Relocate: the package's scripts name their install paths literally.
    rm -f "$work/tree/usr/share/modules/init/.modulespath"
    ln -s "$ENVMODULES_ROOT/etc/environment-modules/modulespath" "$work/tree/usr/share/modules/init/.modulespath"
    { grep -rlI -e /usr/share/modules -e /etc/environment-modules -e /usr/lib/x86_64-linux-gnu \
        "$work/tree/usr/lib" "$work/tree/usr/share/modules" "$work/tree/etc/environment-modules" \
        "$work/tree/usr/bin" 2>/dev/null || true; } | while read -r f; do
        sed -i -e "s#/usr/share/modules#$ENVMODULES_ROOT/usr/share/modules#g" \
               -e "s#/etc/environment-modules#$ENVMODULES_ROOT/etc/environment-modules#g" \
               -e "s#/usr/lib/x86_64-linux-gnu#$ENVMODULES_ROOT/usr/lib/x86_64-linux-gnu#g" "$f"
    done
    dpkg-deb -f "$deb" Version >"$work/tree/.envtool-key"
    rm -rf "$ENVMODULES_ROOT"
    mkdir -p "$(dirname "$ENVMODULES_ROOT")"
    mv "$work/tree" "$ENVMODULES_ROOT"
    chmod 755 "$ENVMODULES_ROOT"
fi

# Lmod from its Debian package (this removes the environment-modules package, if installed).
if ! lmod_init >/dev/null; then
    apt_install lmod
fi

# Check that both work from where they are.
bash -c "source '$(lmod_init)' && module --version" >/dev/null 2>&1 \
    || { echo "modules.sh: Lmod does not start" >&2; exit 1; }
bash -c "source '$ENVMODULES_ROOT/usr/share/modules/init/bash' && module --version" >/dev/null 2>&1 \
    || { echo "modules.sh: Environment Modules ($ENVMODULES_ROOT) does not start" >&2; exit 1; }
echo "modules.sh: Lmod $(lmod_init); Environment Modules $ENVMODULES_ROOT"
