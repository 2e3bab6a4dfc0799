"""Probe this machine once, before a plan is composed (``plan``, ``create``, ``publish``).

Everything the planner and the engines would otherwise ask the machine while composing steps is
gathered here into a :class:`~envtool.core.plan.MachineFacts` carried in
:attr:`PlanOptions.machine <envtool.core.plan.PlanOptions.machine>`: the installer for pip
packages (uv's version and pip's configuration, :func:`envtool.engines.installer.decide`), the
executables the engine drives, the interpreter a venv is made with and the wheels that seed it,
the interpreter a lock is checked against, and for a Horovod built with pip the toolchain (CMake
and C++ versions, the C++ compiler on ``PATH``), the compiler's and MPI's version lines and the
system tools a compile needs. Composing the steps then reads values only.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional, Tuple

from envtool.core import external
from envtool.core.errors import EnvtoolError, UsageError
from envtool.core.plan import MachineFacts, PlanOptions
from envtool.spec.model import Spec


@dataclass(frozen=True)
class BuildProbe:
    """The Horovod build's view of this machine.

    Attributes:
        real_cxx: the C++ compiler the build uses (``CXX`` of the spec's build variables, ``$CXX``,
            else ``c++``).
        toolchain: :class:`envtool.horovod.fixes.Toolchain` (CMake and C++ versions).
        compiler: the compiler's first ``--version`` line, else ``real_cxx``.
        mpi: MPI's first ``--version`` line (``mpirun (Open MPI) 4.1.4``), ``none``, or ``not used``.
        missing_tools: the system tools a compile needs that are not here
            (:func:`envtool.horovod.requirements.missing`).
        platform: this machine's conda platform (``linux-64`` …).
        cxx_path: the C++ compiler on ``PATH`` (``c++``, else ``g++``, else ``c++``): the real compiler
            behind the ``horovod-torch-cxx17`` fix's wrapper when the spec sets no ``CXX``
            (:func:`envtool.horovod.fixes.default_cxx`).
    """

    real_cxx: str
    toolchain: Any
    compiler: str
    mpi: str
    missing_tools: Tuple[Any, ...]
    platform: str
    cxx_path: str = "c++"


def first_line(argv: List[str]) -> Optional[str]:
    """The first line ``argv`` prints (stdout, else stderr; decoded by :func:`envtool.core.external.run`)
    when it exits 0 within 30 s, else None."""
    try:
        out = external.run(argv, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0].strip() if out.returncode == 0 and text else None


def mpi_version() -> str:
    """First line of the MPI implementation's version (``mpirun (Open MPI) 4.1.4``), or ``none``."""
    for argv in (["mpirun", "--version"], ["mpiexec", "--version"]):
        if shutil.which(argv[0]):
            line = first_line(argv)
            if line:
                return line
    return "none"


def real_cxx(env: Any) -> str:
    """The C++ compiler the build uses: ``CXX`` from the spec's build variables, ``$CXX``, else ``c++``."""
    return dict(env).get("CXX") or os.environ.get("CXX") or "c++"


def probe_build(spec: Spec, options: PlanOptions) -> Optional[BuildProbe]:
    """The Horovod build's probes (runs ``cmake``/``c++``/``mpirun --version``), or None when the spec
    does not build Horovod with pip."""
    if spec.horovod.install != "pip-build":
        return None
    from envtool.core.platforms import conda_platform
    from envtool.horovod import fixes
    from envtool.horovod import requirements as system_tools
    from envtool.horovod.flags import build_env

    cxx = real_cxx(build_env(spec, cpu_count=options.cpu_count))
    absent = system_tools.missing(system_tools.probe(spec.horovod.controllers, cxx=cxx,
                                                     prefix=Path(options.work_prefix)))
    return BuildProbe(real_cxx=cxx, toolchain=fixes.probe_toolchain(options.work_prefix, cxx=cxx),
                      compiler=fixes.version_line([cxx, "--version"]) or cxx,
                      mpi=mpi_version() if "mpi" in spec.horovod.controllers else "not used",
                      missing_tools=tuple(absent), platform=conda_platform(), cxx_path=fixes.default_cxx())


def clone_source(spec: Spec, options: PlanOptions) -> Tuple[str, str]:
    """What ``--clone`` copies, and why: the SOURCE given, else the site's base env for the spec
    (``site.base_env``), else ``""`` — the active environment, ``$CONDA_PREFIX`` (the one the site's
    module activates; :func:`envtool.engines.clone.resolve_source`).

    Returns:
        ``(source, reason)``: the source string for the engine and a phrase for people.
    """
    if options.clone:
        return options.clone, "given"
    if spec.site.base_env:
        return spec.site.base_env, f"the base env of site {spec.site.name} for {spec.name}"
    active = os.environ.get("CONDA_PREFIX")
    if active:
        return "", f"the active environment $CONDA_PREFIX={active}"
    return "", "no SOURCE, no site base env and $CONDA_PREFIX unset"


def _layered(spec: Spec, options: PlanOptions) -> bool:
    """Whether the environment sees packages it does not hold: a ``system_site_packages`` venv, or
    a clone of a venv (made as a venv layered over it)."""
    if spec.engine == "venv" and spec.venv.system_site_packages:
        return True
    if options.clone is None:
        return False
    from envtool.engines import clone

    source, _ = clone_source(spec, options)
    try:
        return clone.source_kind(clone.resolve_source(source)) == "venv"
    except (EnvtoolError, OSError):  # a source not on this machine (plan for a site)
        return False


def decide_installer(spec: Spec, options: PlanOptions) -> PlanOptions:
    """``options`` with ``install_with`` decided (:func:`envtool.engines.installer.decide`) when the
    plan may install pip packages and nothing decided it yet; otherwise ``options`` unchanged.

    Raises:
        UsageError: ``--installer`` was given for a plan that installs no pip package (exit 2).

    pip's configuration is read with the base interpreter's pip
    (:func:`envtool.engines.installer.base_python`): the files and ``PIP_*`` variables it reads are
    those the new environment's pip reads (a new environment has no ``pip.conf`` of its own).
    """
    if options.install_with is not None:
        return options
    if not (spec.packages.pip or options.from_lock is not None or spec.horovod.install == "pip-build"):
        if options.installer:
            raise UsageError(f"--installer {options.installer}: spec {spec.name!r} installs no pip packages (no "
                             "packages.pip, no lock, Horovod not built with pip), so there is nothing for an "
                             "installer of pip packages to do; leave --installer out")
        return options
    from envtool.engines.installer import decide, requested

    chosen = decide(requested(options.installer or None), layered=_layered(spec, options))
    return dataclasses.replace(options, install_with=dataclasses.replace(chosen, link=options.link_files))


def lock_interpreter(spec: Spec, options: PlanOptions, engine: Any) -> Any:
    """The interpreter a lock installed for ``spec`` is checked against
    (:func:`envtool.steps.create.from_lock.load_checked`), or None when no lock is installed or the spec's
    engine provides Python itself. Asked of the engine that serves the spec's ``engine:`` kind: ``engine``
    itself unless ``--engine`` chose another (then the kind's registered default is looked up).

    Raises:
        UsageError: the spec pins a Python this machine lacks.
        EnvtoolError: the interpreter does not answer.
    """
    if options.from_lock is None:
        return None
    from envtool.core.platforms import probe_interpreter

    if options.engine:
        from envtool.engines.registry import engine_for

        engine = engine_for(spec.engine)
    python = engine.lock_python(spec)
    return None if python is None else probe_interpreter(python)


def probe(spec: Spec, options: PlanOptions, engine: Any = None) -> PlanOptions:
    """``options`` with :attr:`~PlanOptions.machine` probed and the installer decided; unchanged when
    already probed (``create`` probes once for its build prefix).

    Args:
        spec: the resolved spec.
        options: the plan's options.
        engine: the plan's :class:`~envtool.engines.base.Engine`, resolved once by the caller
            (:func:`envtool.steps.create.planner.make_plan`); None: resolved here.
    Raises:
        UsageError: ``--installer`` for a plan that installs no pip package; an unknown engine.
    """
    if options.machine is not None:
        return options
    if engine is None:
        from envtool.engines.registry import engine_for

        engine = engine_for(spec.engine, options.engine)
    from envtool.engines.venv import bundled_seed_wheels, look_up_interpreter

    options = decide_installer(spec, options)
    base = look_up_interpreter(spec)
    facts = MachineFacts(tools=tuple(sorted(engine.probe_tools().items())), build=probe_build(spec, options),
                         base_python=base, seed_wheels=tuple(str(w) for w in bundled_seed_wheels(base)) if base else (),
                         lock_interpreter=lock_interpreter(spec, options, engine))
    return dataclasses.replace(options, machine=facts)
