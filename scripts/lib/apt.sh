# shellcheck shell=bash
# Sourced by scripts/setup.sh and tests/setup.d/*.sh: apt-get that survives a busy machine.
#
# * Another apt-get, dpkg or unattended-upgrades may hold the dpkg lock for minutes. `apt-get
#   install` waits for it up to $ENVTOOL_APT_LOCK_TIMEOUT s (default 900, 15 minutes) through
#   `-o DPkg::Lock::Timeout` (apt >= 1.9.11; apt.conf(5)). `apt-get update` does not wait for
#   /var/lib/apt/lists/lock (seen with apt 2.6.1: exit 100 at once), so apt_update retries it
#   while the message is a lock message, until the same limit.
# * Downloads retry on transient failures: `-o Acquire::Retries=5` (apt.conf(5)) for each file, and
#   apt_update runs again (at most 3 times) after an error that is not a lock.
#
#   apt_update                 apt-get update, once per script run
#   apt_install [OPTS] PKG...  apt_update, then apt-get install -y -qq [OPTS] PKG...
#   apt_get ARGS...            apt-get with the lock wait and the retries (download, source, ...)
ENVTOOL_APT_LOCK_TIMEOUT=${ENVTOOL_APT_LOCK_TIMEOUT:-900}
_envtool_apt_updated=0

apt_get() {
    DEBIAN_FRONTEND=noninteractive apt-get -o "DPkg::Lock::Timeout=$ENVTOOL_APT_LOCK_TIMEOUT" \
        -o Acquire::Retries=5 "$@"
}

apt_update() {
    [ "$_envtool_apt_updated" = 1 ] && return 0
    local start=$SECONDS errors=0 err rc said=0
    err=$(mktemp)
    while :; do
        rc=0
        apt_get update -qq 2>"$err" || rc=$?
        if [ "$rc" = 0 ]; then
            rm -f "$err"; _envtool_apt_updated=1; return 0
        fi
        if grep -qE 'Could not get lock|Unable to lock|Unable to acquire' "$err" \
           && [ $((SECONDS - start)) -lt "$ENVTOOL_APT_LOCK_TIMEOUT" ]; then
            if [ "$said" = 0 ]; then
                echo "apt_update: another process holds apt's lock ($(grep -m1 -oE 'held by process [0-9]+ \([^)]*\)' "$err" || echo 'lock held')); waiting up to ${ENVTOOL_APT_LOCK_TIMEOUT} s" >&2
                said=1
            fi
            sleep 3
            continue
        fi
        errors=$((errors + 1))
        if [ "$errors" -ge 3 ]; then
            cat "$err" >&2; rm -f "$err"
            echo "apt_update: apt-get update failed $errors times (exit $rc)" >&2
            return "$rc"
        fi
        echo "apt_update: apt-get update failed (exit $rc), trying again in $((10 * errors)) s: $(tail -n1 "$err")" >&2
        sleep $((10 * errors))
    done
}

apt_install() {
    apt_update
    apt_get install -y -qq "$@"
}
