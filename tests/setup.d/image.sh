#!/usr/bin/env bash
# envtool image (tests/test_image.py): mmdebstrap (a Debian root file system from Debian's
# archive), umoci (OCI image layouts), squashfs-tools (mksquashfs), squashfuse and Charliecloud's
# ch-run (runs directory and squashfs images), each installed only when missing (Debian packages).
set -euo pipefail
# shellcheck source=../../scripts/lib/apt.sh
. "$(dirname "$0")/../../scripts/lib/apt.sh"   # waits for the dpkg lock, retries downloads

missing=()
command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
command -v umoci >/dev/null 2>&1 || missing+=(umoci)
command -v mksquashfs >/dev/null 2>&1 || missing+=(squashfs-tools)
command -v squashfuse >/dev/null 2>&1 || missing+=(squashfuse)
command -v ch-run >/dev/null 2>&1 || missing+=(charliecloud-runtime)

if [ ${#missing[@]} -gt 0 ]; then
    apt_install --no-install-recommends $(printf '%s\n' "${missing[@]}" | sort -u)
fi
echo "image.sh: mmdebstrap $(dpkg-query -W -f='${Version}' mmdebstrap 2>/dev/null), umoci $(dpkg-query -W -f='${Version}' umoci 2>/dev/null), charliecloud $(dpkg-query -W -f='${Version}' charliecloud-runtime 2>/dev/null)"
