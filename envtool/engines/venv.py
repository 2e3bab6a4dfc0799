"""The venv/pip engine: ``python -m venv`` and real ``pip``.

A venv is not relocatable as is: its scripts' ``#!`` lines, ``bin/activate*`` and
``pyvenv.cfg`` name the prefix. ``create`` builds in a temporary sibling and then rewrites
those text files to the final prefix (:func:`envtool.steps.relocate.relocate`) before the
rename.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import List

from envtool.core.prefix import PrefixData
from envtool.engines.base import Engine, InstalledPackage
from envtool.core.errors import UsageError
from envtool.spec.model import Spec
from envtool.core.plan import PlanOptions, Step


def find_interpreter(spec: Spec) -> str:
    """The base interpreter for the venv: ``python<X.Y>`` matching ``spec.python``, else this one.

    Raises:
        UsageError: the spec pins a Python that is not on ``PATH``.
    """
    if spec.python is None:
        return sys.executable
    want = spec.python.version or spec.python.value.strip()
    parts = want.split(".")
    major_minor = ".".join(parts[:2])
    if f"{sys.version_info.major}.{sys.version_info.minor}" == major_minor:
        return sys.executable
    found = shutil.which(f"python{major_minor}")
    if not found:
        raise UsageError(f"spec {spec.name!r} pins Python {want}, but no python{major_minor} is on PATH "
                         f"(this is Python {sys.version_info.major}.{sys.version_info.minor}); "
                         "install it or use a conda spec")
    return found


def pip_install_step(step_id: str, title: str, py: str, prefix: Path, reqs: List[str], options: PlanOptions,
                     exact: bool = False, **extra) -> Step:
    """A step that installs ``reqs`` with ``options.install_with`` (uv or pip), its variables included.

    Args:
        step_id, title: the step's id and progress line (the installer is appended to the title).
        py: the environment's interpreter.
        prefix: the environment.
        reqs: requirements and ``-r FILE`` options.
        options: the plan's options (``install_with``; None: pip).
        exact: install a lock exactly (:func:`envtool.engines.installer.install_commands`).
        extra: further :class:`~envtool.core.plan.Step` fields (``notes``, ``action``, ``data``).
    Returns:
        the step.
    """
    from envtool.engines.installer import install_commands, install_env

    inst = options.install_with
    name = inst.name if inst is not None else "pip"
    return Step(id=step_id, title=f"{title} with {name}", commands=install_commands(inst, py, prefix, reqs, exact=exact),
                env=install_env(inst, exact=exact), drop_env=inst.drop_env if inst is not None and inst.name == "uv" else (),
                progress=(f"installing with {name}", "compiling bytecode"), **extra)


def bundled_seed_wheels(python: str) -> List[Path]:
    """The wheels ``python -m venv`` seeds a venv with: ``ensurepip/_bundled/*.whl`` of ``python``
    (CPython ``Lib/ensurepip``: pip, and setuptools before 3.12), when ``python`` is this
    interpreter; otherwise an empty list (the base interpreter's files are not looked up)."""
    if os.path.realpath(python) != os.path.realpath(sys.executable):
        return []
    import importlib.util

    found = importlib.util.find_spec("ensurepip")
    if found is None or not found.origin:
        return []
    return sorted(Path(found.origin).parent.glob("_bundled/*.whl"))


def create_venv_step(spec: Spec, options: PlanOptions, notes: tuple = ()) -> Step:
    """The ``create-venv`` step: ``python -m venv`` (``--system-site-packages`` when the spec layers
    over the base interpreter, ``venv.system_site_packages``) at ``options.work_prefix``.

    With uv as the plan's installer, the venv is made ``--without-pip`` and uv installs the very
    wheels ``ensurepip`` would (:func:`bundled_seed_wheels`, offline): the same pip and
    setuptools, linked from uv's cache (0.2 s here instead of ensurepip's 3.5 s).

    Raises:
        UsageError: the spec pins a Python that is not on ``PATH`` (:func:`find_interpreter`).
    """
    from envtool.engines.installer import install_env

    layered = spec.venv.system_site_packages
    # built in a temporary sibling: the prompt is the final prefix's name, not the build directory's
    layer = ("--system-site-packages",) if layered else ()
    layer += ("--prompt", Path(options.prefix).name)
    base = find_interpreter(spec)
    prefix = str(options.work_prefix)
    inst = options.install_with
    seeds = bundled_seed_wheels(base) if inst is not None and inst.name == "uv" else []
    title = f"Create a venv at {options.prefix}" + (" over the base interpreter's packages" if layered else "")
    if not seeds:
        return Step(id="create-venv", title=title, commands=((base, "-m", "venv", *layer, prefix),),
                    notes=tuple(notes))
    py = str(Path(prefix) / "bin" / "python")
    seed = (inst.program, "pip", "install", "--no-config", "--python", py, "--no-index", "--no-deps",
            *(str(w) for w in seeds))
    return Step(id="create-venv", title=title + " (seeded by uv from ensurepip's wheels)",
                commands=((base, "-m", "venv", "--without-pip", *layer, prefix), seed),
                env=install_env(inst), drop_env=inst.drop_env, notes=tuple(notes))


class VenvEngine(Engine):
    """Creates a venv and installs ``packages.pip`` with the venv's own pip."""

    name = "venv"

    def create_steps(self, spec: Spec, options: PlanOptions) -> List[Step]:
        prefix = options.work_prefix
        py = str(self.python(prefix))
        steps = [create_venv_step(spec, options)]
        if spec.packages.conda:
            raise UsageError(f"spec {spec.name!r} lists conda packages but uses the venv engine; "
                             "set engine: conda")
        pip_reqs = [p.value for p in spec.packages.pip]
        if spec.horovod.install == "pip-build":
            # --no-build-isolation needs the build backend in the env itself (horovod.md, pitfalls).
            pip_reqs = ["setuptools", "wheel"] + pip_reqs
        if pip_reqs:
            steps.append(pip_install_step("pip-install", "Install pip packages: " + " ".join(p.value for p in spec.packages.pip),
                                          py, prefix, pip_reqs, options))
        return steps

    def installed(self, prefix: Path) -> List[InstalledPackage]:
        """Every distribution in ``prefix``'s site-packages (:class:`~envtool.core.prefix.PrefixData`)."""
        return [InstalledPackage(name=d.name, version=d.version, manager="pip")
                for d in PrefixData(prefix).distributions]
