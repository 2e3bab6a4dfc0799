"""Which wheels go into the image: the environment's Horovod wheel (reused, or compiled anew in the
image), and the wheels that seeded the venv. Decided while the plan is composed, from files only
(the lock, the wheel cache's entries, ``create.json``); no command runs.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from envtool.lock.model import LockedPackage
from envtool.steps.image.horovod import InImageBuild, recorded_build
from envtool.steps.image.request import ImageInputs
from envtool.steps.image.root import ImageError

#: The MPI ABI of each MPI family :func:`envtool.checks.launchers.mpi_identity` names: Open MPI's
#: (IBM Spectrum MPI is built on Open MPI), or the MPICH ABI (MPICH, Cray MPICH, Intel MPI, MVAPICH:
#: https://www.mpich.org/abi/).
FAMILY_ABI = {"openmpi": "openmpi", "spectrum-mpi": "openmpi", "mpich": "mpich", "cray-mpich": "mpich",
              "intel-mpi": "mpich", "mvapich": "mpich"}


@dataclass(frozen=True)
class HorovodChoice:
    """How Horovod gets into the image.

    Attributes:
        reuse: ``(wheel, SHA-256)`` of the environment's wheels copied into the wheelhouse.
        compile_why: why Horovod is compiled inside the image, or ``""`` (not compiled).
        build: the environment's build decision the compile repeats (:func:`recorded_build`), or None.
        notes: what was looked at and not used (a wheel no cache proves), for the plan and the log.
    """

    reuse: Tuple[Tuple[Path, str], ...] = ()
    compile_why: str = ""
    build: Optional[InImageBuild] = None
    notes: Tuple[str, ...] = ()


def wheel_mpi_abi(mpi: str) -> str:
    """The MPI ABI of a wheel from its build key's ``mpi`` (the first line of ``mpirun --version``
    when it was built, or ``not used``).

    Returns:
        ``openmpi``, ``mpich``, ``none`` (built without MPI), or ``""`` when the banner is not recognised.
    """
    from envtool.checks.launchers import mpi_identity

    if not mpi.strip() or mpi.strip().lower() in ("not used", "none"):
        return "none"
    family, _version = mpi_identity(mpi)
    return FAMILY_ABI.get(family or "", "")


def horovod_wheel(built_key: str, sha256: str, site_caches: Sequence[str], group: Optional[str],
                  mark_used: bool = True) -> Path:
    """The wheel envtool built for the environment: the wheel-cache entry ``built_key`` (the lock's
    ``envtool.built.horovod``), proven by :meth:`WheelCache.find <envtool.horovod.cache.WheelCache.find>`
    with the lock's SHA-256.

    Args:
        mark_used: mark the entry used on a hit (False for ``--dry-run``: nothing is written).
    Raises:
        ImageError: no cache holds a proven wheel of that hash (the reasons are named).
    """
    from envtool.horovod import cache as wheel_cache

    reasons = []
    for c in wheel_cache.chain(site_caches, group=group):
        entry = c.dir / built_key
        key = wheel_cache.read_key(entry)  # a regular file only: a FIFO there never blocks the image
        if key is None:
            continue
        if key.digest() != built_key:
            reasons.append(f"{entry}: key.json does not hash to {built_key}")
            continue
        wheel, why = c.find(key, want_sha256=sha256, mark_used=mark_used)
        if wheel is not None:
            return wheel
        if why:
            reasons.append(why)
    said = "; ".join(reasons) or "no wheel cache holds the entry"
    raise ImageError(f"the Horovod wheel the lock records (build key {built_key}, SHA-256 {sha256}) is not available: "
                     f"{said}. An image needs that wheel (recreate the environment with envtool create to put it in "
                     "the cache), or --compile-horovod to compile Horovod inside the image")


def choose_horovod(inputs: ImageInputs, preview: bool = False) -> HorovodChoice:
    """Reuse the environment's Horovod wheel when it links an MPI of the site's ABI, else compile it
    inside the image (always with ``--compile-horovod``).

    Args:
        inputs: the checked request.
        preview: ``--dry-run`` (wheel-cache entries are not marked used).
    Raises:
        ImageError: an entry other than Horovod is built by envtool; the wheel is not in any cache
            (without ``--compile-horovod``); the wheel was built without MPI.
        UsageError: the record of the environment's build is missing or unreadable (a compile), or
            a GPU build on a ``debian:`` base (:func:`envtool.steps.image.horovod.check_debian_base`).
    """
    from envtool.steps.image.horovod import check_debian_base

    reuse: List[Tuple[Path, str]] = []
    whys: List[str] = []
    notes: List[str] = []
    for p in inputs.built:
        wheel = _wheel_of(inputs, p, preview, notes)
        if wheel is None:
            whys.append("--compile-horovod (no wheel cache holds a proven copy of the environment's wheel)")
            continue
        why = _compile_reason(inputs, wheel)
        if why:
            whys.append(why)
        else:
            reuse.append((wheel, p.sha256))
    if not whys:
        return HorovodChoice(reuse=tuple(reuse), notes=tuple(notes))
    build = recorded_build(inputs.prefix, inputs.lock, whys[0])
    check_debian_base(inputs.section.base, build)
    return HorovodChoice(reuse=tuple(reuse), compile_why=whys[0], build=build, notes=tuple(notes))


def _wheel_of(inputs: ImageInputs, entry: LockedPackage, preview: bool, notes: List[str]) -> Optional[Path]:
    """The proven wheel of the built ``entry``, or None when ``--compile-horovod`` stands in for a
    missing one (the reason goes to ``notes``)."""
    request = inputs.request
    if entry.name.lower() != "horovod":
        raise ImageError(f"{inputs.lock_path}: {entry.name} is built by envtool; only Horovod can be reused or "
                         "compiled")
    try:
        return horovod_wheel(entry.built, entry.sha256, request.site_caches, request.cache_group,
                             mark_used=not preview)
    except ImageError as exc:
        if not request.compile_horovod:
            raise
        notes.append(f"the environment's Horovod wheel is not used: {exc}")
        return None


def _compile_reason(inputs: ImageInputs, wheel: Path) -> str:
    """Why the proven ``wheel`` is compiled anew rather than reused, or ``""`` (reused).

    Raises:
        ImageError: it was built without MPI (an image's Horovod is for the site's MPI, hybrid mode).
    """
    abi_wanted = inputs.section.mpi_abi
    from envtool.horovod import cache as wheel_cache

    said_mpi = str(json.loads(wheel_cache.key_json_text(wheel.parent)).get("mpi", ""))
    abi = wheel_mpi_abi(said_mpi)
    if abi == "none":
        raise ImageError(f"the environment's Horovod was built without MPI ({wheel.parent}/key.json: mpi "
                         f"{said_mpi!r}); the site's container.mpi_abi {abi_wanted} is for Horovod's MPI "
                         "(hybrid mode): build the environment with HOROVOD_WITH_MPI=1")
    if inputs.request.compile_horovod:
        return "--compile-horovod"
    if abi == abi_wanted:
        return ""
    from envtool.checks.launchers import mpi_identity

    family, version = mpi_identity(said_mpi)
    built_with = " ".join(w for w in (family, version) if w) or repr(said_mpi[:60])
    return f"the wheel links {built_with} ({abi or 'ABI unknown'}), the site's container.mpi_abi is {abi_wanted}"


def seed_wheels(prefix: Path) -> List[Path]:
    """The wheels that seeded the venv (the ``.whl`` arguments of the ``create-venv`` step in
    ``PREFIX/.envtool/create.json``), those that still exist."""
    try:
        data = json.loads((prefix / ".envtool" / "create.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    steps = data.get("steps") if isinstance(data, dict) else None
    commands = [c for s in (steps if isinstance(steps, list) else [])
                if isinstance(s, dict) and s.get("id") == "create-venv" for c in (s.get("commands") or [])]
    return [Path(w) for c in commands for w in c if isinstance(w, str) and w.endswith(".whl") and Path(w).is_file()]
