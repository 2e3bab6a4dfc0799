"""The steps that compile Horovod inside an image (:mod:`envtool.steps.image.horovod` says why and how).

``check-build-base`` (a ``dir:`` base: the build tools are looked for inside it, before anything is
downloaded), then, after the wheelhouse: ``horovod-sdist`` (the source archive), ``build-root`` (the
base plus the compiler, CMake and the MPI's development package), ``build-root-install`` (the
environment's locked wheels at ``/opt/env`` in it) and ``compile-horovod`` (``pip wheel`` with the
environment's ``HOROVOD_*`` variables; the wheel goes to the wheelhouse, the build root is removed).
"""
from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from envtool.core.errors import UsageError
from envtool.core.plan import Step, StepContext
from envtool.steps.image.horovod import (BUILD_DIR, BUILD_PACKAGES, MPI_DEV_PACKAGES, InImageBuild, InImageResult,
                                         build_tools, missing_tools_message)
from envtool.steps.image.job import BASE_REQUIREMENTS, ImageJob, Wheelhouse
from envtool.steps.image.root import (CLEAN_ENV, IMAGE_PREFIX, UNSHARE, WHEELHOUSE, ImageError, base_commands,
                                      base_title, in_root, install_commands, remove_tree)

#: Looks for each tool given as an argument through ``PATH`` inside a root (with CUDA's
#: ``/usr/local/cuda/bin``) and prints those it cannot find (``command -v``: POSIX, the root's
#: own symbolic links, never the host's).
_LACKS = ('PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/cuda/bin; '
          'for t; do command -v "$t" >/dev/null 2>&1 || echo "$t"; done')


@dataclass(frozen=True)
class Sdist:
    """Result of ``horovod-sdist``: the source archive on the host and its SHA-256."""

    path: Path
    sha256: str


def _lacks_argv(root: Path, tools: Sequence[str]) -> Tuple[str, ...]:
    return tuple(in_root(root, ["/usr/bin/env", "-i", "/bin/sh", "-c", _LACKS, "sh", *tools]))


def lacking_tools(ctx: StepContext, root: Path, tools: Sequence[str]) -> List[str]:
    """The ``tools`` a shell inside ``root`` cannot find.

    Raises:
        StepFailed: the shell could not run in ``root``.
    """
    out = ctx.run(_lacks_argv(root, tools)).stdout
    return [t for t in out.split() if t in tools]


def _check_build_base(step: Step, ctx: StepContext) -> None:
    job: ImageJob = step.data
    build = _build(job)
    section = job.inputs.section
    missing = lacking_tools(ctx, Path(section.base.split(":", 1)[1]), build_tools(build))
    if missing:
        raise UsageError(missing_tools_message(section.base, section.mpi_abi, build, missing))


def _build(job: ImageJob) -> InImageBuild:
    assert job.horovod.build is not None  # the compile's steps are planned only with a build decision
    return job.horovod.build


def check_steps(job: ImageJob) -> List[Step]:
    """``check-build-base`` when Horovod is compiled on a ``dir:`` base; else nothing."""
    base = job.inputs.section.base
    if job.horovod.build is None or not base.startswith("dir:"):
        return []
    src = Path(base.split(":", 1)[1])
    return [Step(id="check-build-base", title=f"Look for the build tools inside the base {src}",
                 commands=(_lacks_argv(src, build_tools(_build(job))),),
                 notes=("a base without them stops here (exit 2), before anything is downloaded",),
                 action=_check_build_base, data=job)]


def _sdist_argv(build: InImageBuild, dest: Path) -> Tuple[str, ...]:
    source: Tuple[str, ...] = (build.requirement,)
    if build.sdist_sha256:
        source = ("-r", str(dest.parent / "sdist.txt"), "--require-hashes")
    # pip prepares the archive's metadata (runs its setup.py): in a PID namespace, so an interrupt stops all of it
    return (*UNSHARE, sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary=:all:",
            "--disable-pip-version-check", "-d", str(dest), *source)


def _download_sdist(step: Step, ctx: StepContext) -> Sdist:
    """Horovod's source archive through this machine's pip configuration (as ``create``'s own build
    gets it), with ``--require-hashes`` when the environment's record holds its SHA-256."""
    from envtool.horovod.cache import file_sha256

    job: ImageJob = step.data
    build, dest = _build(job), job.work.dir / "sdist"
    dest.mkdir(parents=True, exist_ok=True)
    if build.sdist_sha256:
        (dest.parent / "sdist.txt").write_text(f"{build.requirement} --hash=sha256:{build.sdist_sha256}\n",
                                               encoding="utf-8")
    ctx.run_commands(step)
    found = sorted(dest.glob("horovod-*.tar.gz")) + sorted(dest.glob("horovod-*.zip"))
    if not found:
        raise ImageError(f"pip download {build.requirement} left no source archive in {dest}")
    return Sdist(path=found[0], sha256=file_sha256(found[0]))


def _install_build_root(step: Step, ctx: StepContext) -> None:
    """The environment's locked wheels (Horovod left out) at ``/opt/env`` in the build root."""
    job: ImageJob = step.data
    house: Wheelhouse = ctx.results["wheelhouse"]
    root = job.work.buildroot
    missing = lacking_tools(ctx, root, build_tools(_build(job)))
    if missing:  # mmdebstrap installed the packages: not reached unless the archive's packages changed
        raise ImageError(f"the build root made from {job.inputs.section.base} lacks {', '.join(missing)}")
    inside = root / WHEELHOUSE.lstrip("/")
    shutil.copytree(job.work.house, inside)
    for argv in install_commands(root, house.pip_wheel, BASE_REQUIREMENTS):
        ctx.run(argv)
    shutil.rmtree(inside)


def _compile_argv(root: Path, env: Dict[str, str], sdist_name: str) -> Tuple[str, ...]:
    from envtool.steps.create.horovod_build import PIP_WHEEL_OPTIONS

    return tuple(in_root(root, [*CLEAN_ENV, "PYTHONUNBUFFERED=1", *(f"{k}={v}" for k, v in env.items()),
                                IMAGE_PREFIX + "/bin/python", "-m", "pip", "wheel", *PIP_WHEEL_OPTIONS, "--no-index",
                                "--wheel-dir", f"{BUILD_DIR}/out", f"{BUILD_DIR}/{sdist_name}"]))


def _compile_env(build: InImageBuild, jobs: Optional[int] = None) -> Dict[str, str]:
    """The environment's ``HOROVOD_*`` variables and ``MAKEFLAGS=-jN`` (``N``: the CPUs this process may use)."""
    return {**dict(build.build_env), "MAKEFLAGS": f"-j{jobs or len(os.sched_getaffinity(0))}"}


def _toolchain(ctx: StepContext, root: Path):
    """The build root's compiler and CMake (:class:`envtool.horovod.fixes.Toolchain`)."""
    from envtool.horovod import fixes

    cxx = ctx.run(in_root(root, ["c++", "--version"])).stdout
    cmake = ctx.run(in_root(root, ["cmake", "--version"])).stdout
    family, cxx_version = fixes.parse_cxx_version(cxx)
    return fixes.Toolchain(cmake=fixes.parse_cmake_version(cmake), cxx_family=family, cxx_version=cxx_version)


def _mpi_version(ctx: StepContext, root: Path, mpi_abi: str) -> str:
    """The first line naming the build root's MPI: ``mpichversion`` (MPICH) or ``ompi_info --version``."""
    argv = ["mpichversion"] if mpi_abi == "mpich" else ["ompi_info", "--version"]
    proc = ctx.run(in_root(root, argv), check=False)
    if proc.returncode != 0:
        return {"mpich": "MPICH", "openmpi": "Open MPI"}[mpi_abi]
    lines = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip()]
    if mpi_abi == "mpich":
        version = next((ln.split(":", 1)[1].strip() for ln in lines if ln.lower().startswith("mpich version")), "")
        return f"MPICH {version}".strip()
    return lines[0] if lines else "Open MPI"


def _fix_rules(build: InImageBuild, toolchain, env: Dict[str, str], host_fixes: Path) -> List[str]:
    """Decide the fix rules for the build root's toolchain, prepare their files under ``host_fixes``
    (seen as ``BUILD_DIR/fixes`` inside) and add their variables to ``env``; returns their ids."""
    from packaging.version import InvalidVersion, Version

    from envtool.horovod import fixes

    def version(text: Optional[str]) -> Optional[Version]:
        try:
            return Version(text.split("+")[0]) if text else None
        except InvalidVersion:
            return None

    frameworks = {k: v for k, v in ((k, version(v)) for k, v in build.frameworks) if v is not None}
    rules = fixes.applicable(version(build.version), frameworks, toolchain)
    for rule in rules:
        added = rule.prepare(host_fixes, {**env, "CXX": env.get("CXX", "/usr/bin/c++")})
        env.update({k: v.replace(str(host_fixes), f"{BUILD_DIR}/fixes") for k, v in added})
    return [r.id for r in rules]


def _compile(step: Step, ctx: StepContext) -> InImageResult:
    """Compile Horovod in the build root; the wheel goes to the wheelhouse, the build root is removed."""
    from envtool.horovod.cache import file_sha256

    job: ImageJob = step.data
    build, root, sdist = _build(job), job.work.buildroot, ctx.results["horovod-sdist"]
    toolchain = _toolchain(ctx, root)
    mpi_line = _mpi_version(ctx, root, job.inputs.section.mpi_abi)
    inside = root / BUILD_DIR.lstrip("/")
    (inside / "out").mkdir(parents=True)
    shutil.copy2(sdist.path, inside / sdist.path.name)
    env = _compile_env(build)
    fixes = _fix_rules(build, toolchain, env, inside / "fixes")
    ctx.progress(f"      Horovod is compiled inside the image: {build.why}")
    ctx.run(_compile_argv(root, env, sdist.path.name), progress="compiling Horovod")
    built = sorted((inside / "out").glob("horovod-*.whl"))
    if not built:
        raise ImageError(f"pip wheel made no Horovod wheel in the build root (see {ctx.log_path})")
    wheel = job.work.house / built[0].name
    shutil.copy2(built[0], wheel)
    remove_tree(root)
    return InImageResult(wheel=wheel.name, sha256=file_sha256(wheel), sdist=sdist.path.name, sdist_sha256=sdist.sha256,
                         mpi=mpi_line, toolchain=toolchain.describe(), fixes=fixes, build_env=env, why=build.why)


def compile_steps(job: ImageJob, pip_wheel: str) -> List[Step]:
    """The steps that compile Horovod in a build root (after the wheelhouse), or none when the
    environment's wheel is reused.

    Args:
        job: the payload.
        pip_wheel: the pip wheel's file name, as the plan expects it (the run uses the wheelhouse's).
    """
    if job.horovod.build is None:
        return []
    build, work, section = job.horovod.build, job.work, job.inputs.section
    root = work.buildroot
    packages = (*job.inputs.runtime_packages, *BUILD_PACKAGES, *MPI_DEV_PACKAGES[section.mpi_abi])
    why = (f"why: {build.why}",)
    return [
        Step(id="horovod-sdist", title=f"Download Horovod's source archive ({build.requirement})",
             commands=(_sdist_argv(build, work.dir / "sdist"),), notes=why, action=_download_sdist, data=job),
        Step(id="build-root", title=base_title(section.base, "for the Horovod build"),
             commands=base_commands(section.base, root, packages)),
        Step(id="build-root-install", title=f"Install the locked wheels into the build root's {IMAGE_PREFIX}",
             commands=(_lacks_argv(root, build_tools(build)), *install_commands(root, pip_wheel, BASE_REQUIREMENTS)),
             action=_install_build_root, data=job),
        Step(id="compile-horovod", title=f"Compile {build.requirement} in the build root (minutes)",
             commands=(_compile_argv(root, _compile_env(build), f"horovod-{build.version or 'VERSION'}.tar.gz"),),
             notes=("the fix rules for the build root's compiler and CMake are decided once they are probed "
                    "and add their variables", "the wheel goes to the wheelhouse; the build root is removed"),
             action=_compile, data=job),
    ]
