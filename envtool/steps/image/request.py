"""What ``envtool image`` is asked to build, checked before anything is made.

:func:`check_request` reads the environment's lock and refuses bad input with exit 2 (a clear
message naming the option, file or field); :func:`host_problems` names what this machine lacks to
run the build (root, the tools), which ``--dry-run`` shows and a build refuses.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from envtool.core.errors import UsageError
from envtool.lock.model import LockData, LockedPackage
from envtool.spec.sites import ContainerSection

#: Image forms ``--format`` takes.
FORMATS = ("dir", "squashfs", "oci")
#: Debian packages of each MPI ABI and the sonames of ``libmpi`` they provide (Debian bookworm:
#: https://packages.debian.org/bookworm/amd64/libopenmpi3/filelist ``libmpi.so.40``;
#: https://packages.debian.org/bookworm/amd64/libmpich12/filelist ``libmpich.so.12``, the MPICH ABI
#: library that upstream MPICH installs as ``libmpi.so.12``: https://www.mpich.org/abi/).
MPI_PACKAGES: Dict[str, Tuple[Tuple[str, ...], Tuple[str, ...]]] = {
    "openmpi": (("libopenmpi3", "openmpi-bin"), ("libmpi.so.40",)),
    "mpich": (("libmpich12", "mpich"), ("libmpi.so.12", "libmpich.so.12")),
}


@dataclass(frozen=True)
class ImageRequest:
    """What the user asked for (``envtool image``'s options).

    Attributes:
        prefix: a venv environment made by envtool (holds ``conda-lock.yml``).
        output: the directory to create (must not exist).
        formats: some of :data:`FORMATS`.
        container: the site's ``container`` section (base, MPI ABI), or None (``debian:bookworm``, Open MPI).
        site_caches, cache_group: the site's wheel caches and their group (:func:`envtool.horovod.cache.chain`).
        compile_horovod: compile Horovod inside the image even when the environment's wheel could be reused.
    """

    prefix: Path
    output: Path
    formats: Tuple[str, ...]
    container: Optional[ContainerSection] = None
    site_caches: Tuple[str, ...] = ()
    cache_group: Optional[str] = None
    compile_horovod: bool = False


@dataclass(frozen=True)
class ImageInputs:
    """A checked :class:`ImageRequest` with the lock read (plain data, made by :func:`check_request`).

    Attributes:
        request: the request, its paths made absolute.
        section: the container section in force.
        lock_path: ``PREFIX/conda-lock.yml``.
        lock: its :class:`~envtool.lock.model.LockData`.
        plain: the locked pip entries installed as downloaded wheels.
        built: the locked pip entries envtool builds (Horovod).
        runtime_packages: the image's Debian packages (Python, the MPI's run-time library).
        sonames: the ``libmpi`` sonames of the site's MPI ABI.
    """

    request: ImageRequest
    section: ContainerSection
    lock_path: Path
    lock: LockData
    plain: Tuple[LockedPackage, ...]
    built: Tuple[LockedPackage, ...]
    runtime_packages: Tuple[str, ...]
    sonames: Tuple[str, ...]

    @property
    def prefix(self) -> Path:
        """The environment."""
        return self.request.prefix

    @property
    def output(self) -> Path:
        """The output directory."""
        return self.request.output


def check_request(request: ImageRequest) -> ImageInputs:
    """Check ``request`` and read the environment's lock; nothing is made.

    Raises:
        UsageError: an unknown form, no lock, a conda environment, an output that exists or whose
            parent is no directory, a base that cannot be built, an entry without SHA-256,
            ``--compile-horovod`` without a Horovod built by envtool (exit 2).
    """
    request = _absolute(request)
    section = request.container or ContainerSection(runtime="charliecloud", source="")
    _check_paths(request, section)
    lock_path = request.prefix / "conda-lock.yml"
    lock, pip_entries = _read_lock(lock_path)
    built = tuple(p for p in pip_entries if p.built)
    if request.compile_horovod and not any(p.name.lower() == "horovod" for p in built):
        raise UsageError(f"--compile-horovod: {lock_path} has no Horovod that envtool built (no envtool.built entry "
                         "for horovod); there is nothing to compile")
    mpi_pkgs, sonames = MPI_PACKAGES[section.mpi_abi]
    return ImageInputs(request=request, section=section, lock_path=lock_path, lock=lock,
                       plain=tuple(p for p in pip_entries if not p.built), built=built,
                       runtime_packages=("python3", "python3-venv", "ca-certificates") + mpi_pkgs, sonames=sonames)


def _read_lock(lock_path: Path) -> Tuple[LockData, List[LockedPackage]]:
    """The lock and its pip entries (of its first platform), each with a SHA-256.

    Raises:
        UsageError: not a venv lock, conda entries, an entry without SHA-256 (exit 2).
    """
    from envtool.lock.lockio import read_lock

    lock = read_lock(lock_path)
    if lock.engine != "venv":
        raise UsageError(f"{lock_path}: engine {lock.engine or 'unknown'}: envtool image builds venv environments only "
                         "so far")
    entries = lock.for_platform(lock.platforms[0])
    if any(p.manager == "conda" for p in entries):
        raise UsageError(f"{lock_path}: conda entries: envtool image builds venv environments only so far")
    pip_entries = [p for p in entries if p.manager == "pip"]
    missing_hash = [p.name for p in pip_entries if not p.sha256]
    if missing_hash:
        raise UsageError(f"{lock_path}: no SHA-256 for {', '.join(missing_hash)}: an image is built from hashes only")
    return lock, pip_entries


def _absolute(request: ImageRequest) -> ImageRequest:
    from dataclasses import replace

    bad = [f for f in request.formats if f not in FORMATS]
    if bad or not request.formats:
        raise UsageError(f"--format: expected some of {', '.join(FORMATS)} (comma-separated), got "
                         f"{','.join(request.formats)!r}")
    return replace(request, prefix=Path(request.prefix).absolute(), output=Path(request.output).absolute(),
                   formats=tuple(dict.fromkeys(request.formats)))


def _check_paths(request: ImageRequest, section: ContainerSection) -> None:
    """The lock, the output and the base (see :func:`check_request`)."""
    if not (request.prefix / "conda-lock.yml").is_file():
        raise UsageError(f"{request.prefix}: no conda-lock.yml (expected an environment made by envtool create)")
    if os.path.lexists(request.output):
        raise UsageError(f"--output: {request.output} exists; give a new directory")
    if not request.output.parent.is_dir():
        raise UsageError(f"--output: {request.output.parent} is not a directory")
    if section.base.startswith("oci-archive:"):
        raise UsageError(f"container.base: {section.base}: only debian:<suite> and dir:/path are built so far")
    if section.base.startswith("dir:") and not (Path(section.base.split(":", 1)[1]) / "bin").exists():
        raise UsageError(f"container.base: {section.base.split(':', 1)[1]} is not a root file system (no bin/)")


def host_problems(inputs: ImageInputs) -> List[str]:
    """What this machine lacks to build the image: root (``chroot`` and ``mmdebstrap --mode=root``
    need it) and the tools the base and forms need, each with its Debian package; empty when nothing."""
    said = []
    if os.geteuid() != 0:
        said.append("envtool image runs chroot and mmdebstrap as root: run it as root")
    formats: Sequence[str] = inputs.request.formats
    for tool, needed in (("mmdebstrap", inputs.section.base.startswith("debian:")),
                         ("mksquashfs", "squashfs" in formats), ("umoci", "oci" in formats),
                         ("unshare", True), ("chroot", True)):
        if needed and shutil.which(tool) is None:
            package = "squashfs-tools" if tool == "mksquashfs" else "util-linux" if tool == "unshare" else \
                "coreutils" if tool == "chroot" else tool
            said.append(f"{tool} is not installed (Debian package {package})")
    return said
