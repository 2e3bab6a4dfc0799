"""Horovod compiled inside an image, against the MPI of the site's ABI.

A Horovod wheel links the ``libmpi`` it was built against: Open MPI's ``libmpi.so.40`` or the MPICH
ABI's ``libmpi.so.12`` (MPICH, Cray MPICH, Intel MPI, MVAPICH: https://www.mpich.org/abi/; Debian's
MPICH names it ``libmpich.so.12``). On a
site whose ``container.mpi_abi`` differs from the environment's wheel (Perlmutter's Cray MPICH
behind Shifter's ``--mpi`` module; NERSC, "Using Shifter at NERSC",
https://docs.nersc.gov/development/containers/shifter/how-to-use/), the wheel cannot be reused: the
image gets a Horovod compiled inside it.

The compile runs in a *build root*: the same base as the image plus a compiler, CMake, Python's
headers and the MPI's development package (:data:`BUILD_PACKAGES`), with the environment's locked
wheels installed at :data:`~envtool.steps.image.root.IMAGE_PREFIX` exactly as in the image. It
uses the environment's own build decision, read from ``PREFIX/.envtool/create.json``: the same
``HOROVOD_*`` variables and the same Horovod version, with the fix rules decided again for the
image's compiler and CMake (:func:`envtool.horovod.fixes.applicable`). The source archive comes
through this machine's pip configuration; its SHA-256 is recorded with the result. Only the wheel
leaves the build root, which is removed; the image itself gets no compiler.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from envtool.core.errors import UsageError
from envtool.lock.model import LockData
from envtool.steps.image.root import IMAGE_PREFIX

#: Debian packages a Horovod compile needs in the build root, apart from the MPI's: the C++
#: compiler, make, CMake and Python's headers (Horovod's setup.py runs CMake: horovod/horovod@v0.28.1:setup.py).
BUILD_PACKAGES = ("g++", "make", "cmake", "python3-dev")
#: The MPI development package of each ABI (Debian bookworm:
#: https://packages.debian.org/bookworm/libopenmpi-dev, https://packages.debian.org/bookworm/libmpich-dev).
MPI_DEV_PACKAGES = {"openmpi": ("libopenmpi-dev",), "mpich": ("libmpich-dev",)}
#: Where the source archive, the fix rules' helper files and the built wheel go inside the build root.
BUILD_DIR = "/tmp/envtool-horovod"


@dataclass(frozen=True)
class InImageBuild:
    """The environment's Horovod build, as the image repeats it (decided once from the record).

    Attributes:
        requirement: what pip builds (``horovod==0.28.1``).
        version: Horovod's version, or None when the requirement names none.
        build_env: the ``HOROVOD_*`` assignments of the environment's build, in its order, with
            ``$CONDA_PREFIX``/``$PREFIX`` standing for :data:`IMAGE_PREFIX`.
        frameworks: spec framework name → version installed from the lock (``pytorch`` → ``2.13.0``).
        why: why the wheel is compiled in the image (for the log and the result).
        sdist_sha256: the source archive's SHA-256 the environment's build checked (``create`` from
            a lock that holds it records it), or ``""``: then the download is checked against nothing.
    """

    requirement: str
    version: Optional[str]
    build_env: Tuple[Tuple[str, str], ...]
    frameworks: Tuple[Tuple[str, str], ...]
    why: str
    sdist_sha256: str = ""


@dataclass
class InImageResult:
    """What the compile made.

    Attributes:
        wheel: the wheel's file name.
        sha256: the wheel's SHA-256.
        sdist: the source archive's file name.
        sdist_sha256: the source archive's SHA-256.
        mpi: the build root's MPI and version (``mpichversion``, or ``ompi_info --version``'s first line).
        toolchain: the build root's compiler and CMake (``cmake 3.25.1, gnu c++ 12.2.0``).
        fixes: ids of the fix rules applied.
        build_env: the variables the compile ran with (``HOROVOD_*``, ``MAKEFLAGS``, the fix rules').
        why: why it was compiled in the image.
    """

    wheel: str
    sha256: str
    sdist: str
    sdist_sha256: str
    mpi: str
    toolchain: str
    fixes: List[str] = field(default_factory=list)
    build_env: Dict[str, str] = field(default_factory=dict)
    why: str = ""

    def to_dict(self) -> Dict:
        """A JSON-ready mapping of the fields."""
        return asdict(self)


def recorded_build(prefix: Path, lock: LockData, why: str) -> InImageBuild:
    """The environment's Horovod build decision, from ``PREFIX/.envtool/create.json`` (the
    ``build-horovod`` step's ``env`` and result) and the lock (Horovod's and the frameworks' versions).

    Args:
        prefix: the environment.
        lock: its :class:`~envtool.lock.model.LockData`.
        why: why the compile is needed (kept with the decision).
    Returns:
        the :class:`InImageBuild`.
    Raises:
        UsageError: the record is missing or names no ``HOROVOD_*`` variable (exit 2).
    """
    from envtool.core import frameworks as fw
    from envtool.steps.create.horovod_build import expand_prefix_vars

    record = prefix / ".envtool" / "create.json"
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{record}: cannot read how Horovod was built ({exc}); an image that compiles Horovod "
                         "repeats the environment's build") from exc
    horovod_vars, sdist_sha = _recorded_step(data if isinstance(data, dict) else {})
    if not horovod_vars:
        raise UsageError(f"{record}: steps: expected a build-horovod step with its HOROVOD_* variables (the "
                         "environment's Horovod build, which the image repeats)")
    expanded = expand_prefix_vars(horovod_vars, Path(IMAGE_PREFIX))
    pip = [p for p in lock.for_platform(lock.platforms[0]) if p.manager == "pip"]
    hvd = next((p for p in pip if p.name.lower() == "horovod"), None)
    version = hvd.version if hvd is not None else None
    found: Dict[str, str] = {}
    for p in pip:
        f = fw.by_package(p.name)
        if f is not None:
            found.setdefault(f.name, p.version)
    return InImageBuild(requirement=f"horovod=={version}" if version else "horovod", version=version,
                        build_env=tuple(expanded.items()), frameworks=tuple(sorted(found.items())), why=why,
                        sdist_sha256=sdist_sha)


def _recorded_step(data: Dict) -> Tuple[Dict[str, str], str]:
    """The ``HOROVOD_*`` variables of ``create.json``'s ``build-horovod`` step (empty when there is no
    such step) and the source archive's SHA-256 its result names (``""`` when none or not a SHA-256)."""
    steps = data.get("steps")
    step = next((s for s in steps if isinstance(s, dict) and s.get("id") == "build-horovod"), None) \
        if isinstance(steps, list) else None
    env = (step or {}).get("env")
    env = env if isinstance(env, dict) else {}
    results = data.get("results")
    hvd_result = results.get("build-horovod") if isinstance(results, dict) else None
    sdist_sha = hvd_result.get("sdist_sha256") if isinstance(hvd_result, dict) else None
    if not (isinstance(sdist_sha, str) and re.fullmatch(r"[0-9a-f]{64}", sdist_sha)):
        sdist_sha = ""
    return {str(k): str(v) for k, v in env.items() if str(k).startswith("HOROVOD_")}, sdist_sha


#: What a compile runs inside the build root, each found through ``PATH`` there (``command -v``).
BUILD_TOOLS = {"c++": "the C++ compiler", "make": "the build tool", "cmake": "CMake", "python3-config": "Python's headers",
               "mpicxx": "the MPI compiler wrapper"}


def is_gpu_build(build: InImageBuild) -> bool:
    """Whether the build asks for GPU operations (``HOROVOD_GPU*`` set: CUDA's ``nvcc`` is needed)."""
    return any(k.startswith("HOROVOD_GPU") and v for k, v in build.build_env)


def build_tools(build: InImageBuild) -> List[str]:
    """The commands :data:`BUILD_TOOLS` a compile needs, and ``nvcc`` for a GPU build."""
    return list(BUILD_TOOLS) + (["nvcc"] if is_gpu_build(build) else [])


def check_debian_base(base: str, build: InImageBuild) -> None:
    """Refuse a GPU build on a ``debian:`` base (Debian's archive as mmdebstrap uses it has no CUDA or
    NCCL), before anything is made. A ``dir:`` base is looked into by the plan's first step
    (:func:`envtool.steps.image.compile.lacking_tools`).

    Raises:
        UsageError: exit 2, naming ``container.base`` and the ``HOROVOD_GPU*`` variables.
    """
    if base.startswith("debian:") and is_gpu_build(build):
        gpu = ", ".join(f"{k}={v}" for k, v in build.build_env if k.startswith("HOROVOD_GPU"))
        raise UsageError(f"container.base: {base} has no CUDA compiler or NCCL, and the environment's Horovod "
                         f"was built with {gpu}: give a base with CUDA and NCCL (container.base: dir:/path)")


def missing_tools_message(base: str, mpi_abi: str, build: InImageBuild, missing: List[str]) -> str:
    """The exit-2 message for a ``dir:`` base that lacks the build tools ``missing``."""
    words = [f"{t} ({BUILD_TOOLS.get(t, 'the CUDA compiler')})" for t in missing]
    return (f"container.base: {base}: no {', '.join(words)} in it; compiling Horovod inside the "
            f"image needs them (Debian packages {' '.join(BUILD_PACKAGES + MPI_DEV_PACKAGES[mpi_abi])}"
            + (", and CUDA with NCCL" if is_gpu_build(build) else "") + ")")


def image_lock(lock, wheel: Path, sha256: str, requirement: str):
    """The image's lock: the environment's, with the Horovod entry naming the wheel compiled in the image.

    Args:
        lock: the environment's :class:`~envtool.lock.model.LockData`.
        wheel: the compiled wheel (its name goes into the entry's URL, ``file:///``).
        sha256: its SHA-256.
        requirement: what was built (the entry's ``built``: a requirement, not a wheel-cache key).
    Returns:
        a new :class:`~envtool.lock.model.LockData`.
    """
    from dataclasses import replace

    packages = tuple(replace(p, sha256=sha256, url=f"file://{IMAGE_PREFIX}/share/envtool/{wheel.name}",
                             built=requirement)
                     if p.manager == "pip" and p.name.lower() == "horovod" else p for p in lock.packages)
    return replace(lock, packages=packages)


def amend_record(record: Path, result: InImageResult) -> None:
    """Record the in-image compile in the image's copy of ``create.json``: ``results["build-horovod"]``
    names the compiled wheel (``wheel``, ``wheel_sha256``; no cache hit, no cache key), its fix
    rules and ``compiled_in_image``; what the environment's build said moves under
    ``environment_build``. The image's SBOM reads it for Horovod's properties.

    Raises:
        UsageError: the record is not a JSON object with an object ``results`` (exit 2, naming it).
        OSError: it cannot be read or written.
    """
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise UsageError(f"{record}: not JSON ({exc})") from exc
    results = data.setdefault("results", {}) if isinstance(data, dict) else None
    if not isinstance(results, dict):
        raise UsageError(f"{record}: results: expected an object of step results")
    before = results.get("build-horovod")
    results["build-horovod"] = {
        "fixes": result.fixes, "cache_key": None, "cache_hit": False, "cache": None, "cache_dir": None,
        "wheel": f"{IMAGE_PREFIX}/share/envtool/{result.wheel}", "wheel_sha256": result.sha256,
        "compiled_in_image": result.to_dict(), "environment_build": before if isinstance(before, dict) else None}
    record.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
