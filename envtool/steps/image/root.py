"""Root file systems for ``envtool image``: the commands that make one and run inside it, and its removal.

A root is a directory tree (``mmdebstrap``'s output, or a copy of the site's ``dir:`` base).
Commands run in it through ``chroot`` inside a private mount namespace (:func:`in_root`), so the
``/proc`` and ``/dev`` mounted for them vanish with the namespace even when envtool is killed.
The functions here only build argv lists; the steps that run them are run by the one
:class:`envtool.steps.kernel.runner.Runner` (output in the build log, progress, clean-up on interrupt).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import List, Sequence, Tuple

from envtool.core.errors import EnvtoolError, UsageError

#: Where the environment lives inside the image.
IMAGE_PREFIX = "/opt/env"
#: Where the wheelhouse is put inside a root while the environment is installed.
WHEELHOUSE = "/tmp/envtool-wheelhouse"
#: The environment commands get inside a root: nothing of the host's (no ``PIP_*``, no host paths).
CLEAN_ENV = ("/usr/bin/env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/root", "LANG=C.UTF-8")


class ImageError(EnvtoolError):
    """The image could not be built (exit 1): a tool failed, or a check of the result failed."""


def _mounts_below(path: Path) -> List[str]:
    """Mount points at or below ``path`` (``/proc/self/mountinfo``, field 5), deepest first."""
    base = str(path.resolve())
    found = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as fh:
            for line in fh:
                point = line.split()[4].replace("\\040", " ")
                if point == base or point.startswith(base + "/"):
                    found.append(point)
    except OSError:
        pass
    return sorted(found, key=len, reverse=True)


def remove_tree(path: Path) -> None:
    """Remove a directory envtool made, after unmounting anything a tool left mounted in it (so the
    removal never reaches into a bound ``/dev`` or ``/proc``); a tree with a mount that will not go
    is left alone and named in an error."""
    if not os.path.lexists(path):
        return
    for point in _mounts_below(path):
        subprocess.run(["umount", "-l", point], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    left = _mounts_below(path)
    if left:
        raise ImageError(f"{path}: still mounted at {', '.join(left)}; not removed (unmount it, then delete it)")
    shutil.rmtree(path, ignore_errors=True)


#: ``unshare`` (util-linux) options every command of a build runs under: a private mount namespace
#: (what is mounted for the command vanishes with it) and a PID namespace whose first process is
#: killed when ``unshare`` dies (``--kill-child``); the kernel then kills every process left in the
#: namespace, so stopping ``unshare`` stops a whole compile (pip, CMake, make, the compilers):
#: unshare(1), pid_namespaces(7) ("If the init process of a PID namespace terminates, the kernel
#: terminates all of the processes in the namespace via a SIGKILL signal").
UNSHARE = ("unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--kill-child")


def in_root(root: Path, argv: Sequence[str]) -> List[str]:
    """``argv`` run inside ``root``: ``chroot`` in private mount and PID namespaces (:data:`UNSHARE`),
    with ``/proc`` and ``/dev`` mounted there only (they vanish with the namespace, even when
    envtool is killed)."""
    script = ('set -e; mount -t proc proc "$0/proc"; mount --rbind /dev "$0/dev"; '
              'exec chroot "$0" "$@"')
    return [*UNSHARE, "sh", "-c", script, str(root), *argv]


def base_commands(base: str, root: Path, packages: Sequence[str]) -> Tuple[Tuple[str, ...], ...]:
    """The command that makes the root file system ``root`` from the site's ``container.base``.

    Args:
        base: ``debian:<suite>`` (Debian's ``mmdebstrap``, variant minbase, with ``packages`` from
            Debian's archive; documentation and manual pages left out:
            https://manpages.debian.org/bookworm/mmdebstrap/mmdebstrap.1.en.html) or ``dir:/path`` (a copy,
            ``cp -a``).
        root: the directory to make (must not exist).
        packages: Debian packages to add to a ``debian:`` base; a ``dir:`` base must hold them already.
    Returns:
        one argv.
    Raises:
        UsageError: ``base`` is neither form (exit 2).
    """
    if base.startswith("debian:"):
        suite = base.split(":", 1)[1]
        return ((*UNSHARE, "--mount-proc", "mmdebstrap", "--variant=minbase", "--mode=root",
                 "--include=" + ",".join(packages), "--dpkgopt=path-exclude=/usr/share/doc/*",
                 "--dpkgopt=path-exclude=/usr/share/man/*", suite, str(root)),)
    if base.startswith("dir:"):
        return (("cp", "-a", base.split(":", 1)[1], str(root)),)
    raise UsageError(f"container.base: {base}: only debian:<suite> and dir:/path are built so far")


def base_title(base: str, purpose: str = "") -> str:
    """The progress line of the step that makes a root from ``base`` (``purpose``: ``for the Horovod build``)."""
    what = f" {purpose}" if purpose else ""
    if base.startswith("debian:"):
        return f"Make a Debian {base.split(':', 1)[1]} root file system{what} with mmdebstrap"
    return f"Copy the root file system {base.split(':', 1)[1]}{what}"


def install_commands(root: Path, pip_wheel: str, requirements: str) -> Tuple[Tuple[str, ...], ...]:
    """Create the venv :data:`IMAGE_PREFIX` inside ``root`` and install the wheelhouse (copied to
    :data:`WHEELHOUSE` in the root) into it.

    ``python3 -m venv --without-pip``, then pip run from its own wheel (pip's documented
    ``python pip.whl/pip``: https://pip.pypa.io/en/stable/installation/#standalone-zip-application
    and https://pip.pypa.io/en/stable/topics/secure-installs/) with ``--no-index --no-deps
    --require-hashes``: the lock's hashes.

    Args:
        root: the root file system (host path).
        pip_wheel: the file name of the pip wheel in the wheelhouse.
        requirements: the file name of the requirements (``name==version --hash=…`` lines) in the wheelhouse.
    Returns:
        the two argvs.
    """
    return (tuple(in_root(root, ["/usr/bin/python3", "-m", "venv", "--without-pip", IMAGE_PREFIX])),
            tuple(in_root(root, [*CLEAN_ENV, IMAGE_PREFIX + "/bin/python", f"{WHEELHOUSE}/{pip_wheel}/pip",
                                 "install", "--no-index", "--no-deps", "--require-hashes", "--no-cache-dir",
                                 "--disable-pip-version-check", "--find-links", WHEELHOUSE,
                                 "-r", f"{WHEELHOUSE}/{requirements}"])))
