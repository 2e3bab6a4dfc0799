#!/usr/bin/env bash
# envtool pack and staging (tests/test_pack.py, tests/test_stage.py): squashfs-tools (mksquashfs,
# unsquashfs), squashfuse (a user-space squashfs mount) and fusermount, each installed only when
# missing (Debian packages). conda-pack is a Python dependency of envtool (pyproject.toml).
set -euo pipefail
# shellcheck source=../../scripts/lib/apt.sh
. "$(dirname "$0")/../../scripts/lib/apt.sh"   # waits for the dpkg lock, retries downloads

missing=()
command -v mksquashfs >/dev/null 2>&1 || missing+=(squashfs-tools)
command -v unsquashfs >/dev/null 2>&1 || missing+=(squashfs-tools)
command -v squashfuse >/dev/null 2>&1 || missing+=(squashfuse)
command -v fusermount >/dev/null 2>&1 || command -v fusermount3 >/dev/null 2>&1 || missing+=(fuse3)

if [ ${#missing[@]} -gt 0 ]; then
    apt_install --no-install-recommends $(printf '%s\n' "${missing[@]}" | sort -u)
fi
echo "pack.sh: squashfs-tools $(dpkg-query -W -f='${Version}' squashfs-tools 2>/dev/null), squashfuse $(dpkg-query -W -f='${Version}' squashfuse 2>/dev/null)"
