"""``envtool image``: a container image of an environment, built from the environment's own lock.

One workflow package, as ``create``: :mod:`.request` checks what was asked, :mod:`.plan` composes
a :class:`~envtool.steps.image.plan.ImagePlan` of typed :class:`~envtool.core.plan.Step` s
(:mod:`.actions`, :mod:`.compile`; payload :class:`~envtool.steps.image.job.ImageJob`), which
``image --dry-run`` prints and :func:`~envtool.steps.image.run.build` runs with the one
:class:`~envtool.steps.kernel.runner.Runner` (build log, progress per step, clean-up on failure and interrupt).
The image is made in a temporary directory next to the output and renamed into place at the end;
a failure or an interrupt removes it (nothing half-built is left). Steps:

1. **Lock.** ``PREFIX/conda-lock.yml`` (the lockfile ``create`` wrote; :func:`envtool.lock.lockio.read_lock`).
   Only venv environments are supported so far (a conda environment is refused, exit 2).
2. **Wheelhouse on the host.** ``pip download --no-deps --only-binary=:all: --require-hashes`` of
   every locked pip entry (name, version and the lock's SHA-256, through this machine's pip
   configuration, so the site's index or pip's cache answers; nothing is pulled from an image
   registry). The wheels that seeded the venv (pip, from ``PREFIX/.envtool/create.json``) are added
   with their SHA-256. Horovod is the wheel envtool built for the environment: the wheel-cache entry
   the lock names (``envtool.built.horovod``), proven by :meth:`envtool.horovod.cache.WheelCache.find`
   and required to have the lock's SHA-256 — when that wheel links an MPI of the site's ABI.
   Otherwise (or with ``--compile-horovod``) Horovod is compiled in a build root of the same base
   with the environment's own ``HOROVOD_*`` variables (:mod:`envtool.steps.image.horovod`).
3. **Base root file system.** ``debian:<suite>``: Debian's ``mmdebstrap`` (minbase, plus
   ``python3``, ``python3-venv`` and the MPI of the site's ``container.mpi_abi``: Debian's Open MPI
   ``libopenmpi3`` (``libmpi.so.40``) or MPICH ``libmpich12`` (``libmpich.so.12``, Debian's name for the MPICH ABI's ``libmpi.so.12``:
   https://www.mpich.org/abi/)), from Debian's archive; ``dir:/path``: a copy of that root file system.
4. **The environment at /opt/env.** ``python3 -m venv --without-pip /opt/env`` inside the root
   (``chroot``), then pip, run from its own wheel (pip's documented ``python pip.whl/pip``), installs
   the wheelhouse with ``--no-index --no-deps --require-hashes``: the same hashes as ``create``.
   When Horovod was compiled in the image, the image's copy of the lock names that wheel (kept at
   ``/opt/env/share/envtool/``) and its ``create.json`` records the compile.
5. **MPI ABI check.** Horovod's MPI extension must link the image's ``libmpi`` of the site's ABI
   (``ldd`` inside the root); otherwise the build stops (exit 1).
6. **SBOM.** The SBOM of the installed ``/opt/env`` must list the same components (name, version,
   hashes) as the environment's (a Horovod compiled in the image: the same version, its own
   hashes); the environment's SBOM (with a compiled Horovod: the SBOM of the image's ``/opt/env``) is
   written to ``/opt/env/share/envtool/sbom.cdx.json``.
7. **Forms.** ``dir`` (``OUTPUT/rootfs``, for ``ch-run OUTPUT/rootfs``), ``squashfs``
   (``OUTPUT/image.sqfs``, ``mksquashfs``; ``ch-run`` mounts it with squashfuse), ``oci`` (``OUTPUT/oci``,
   an OCI image layout made with ``umoci``, tag ``env``; the manifest annotation and config label
   :data:`SBOM_LABEL` name the SBOM's path in the image; ``podman load``/``skopeo copy oci:OUTPUT/oci:env``).

Tools: mmdebstrap (https://gitlab.mister-muffin.de/josch/mmdebstrap), umoci (https://umo.ci/),
squashfs-tools, Charliecloud (https://hpc.github.io/charliecloud/ch-run.html).
"""
from __future__ import annotations

from envtool.steps.image.actions import SBOM_LABEL, SBOM_PATH
from envtool.steps.image.horovod import InImageResult
from envtool.steps.image.plan import ImagePlan, compose, format_plan
from envtool.steps.image.request import FORMATS, MPI_PACKAGES, ImageRequest, check_request
from envtool.steps.image.root import IMAGE_PREFIX, ImageError, remove_tree
from envtool.steps.image.run import ImageResult, build, dry_run_plan
from envtool.steps.image.sbom import compare_sbom
from envtool.steps.image.wheels import FAMILY_ABI, wheel_mpi_abi

__all__ = ["FAMILY_ABI", "FORMATS", "IMAGE_PREFIX", "ImageError", "ImagePlan", "ImageRequest", "ImageResult",
           "InImageResult", "MPI_PACKAGES", "SBOM_LABEL", "SBOM_PATH", "build", "check_request", "compare_sbom",
           "compose", "dry_run_plan", "format_plan", "remove_tree", "wheel_mpi_abi"]
