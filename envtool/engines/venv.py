"""The venv/pip engine: ``python -m venv`` and real ``pip``.

A venv is not relocatable as is: its scripts' ``#!`` lines, ``bin/activate*`` and
``pyvenv.cfg`` name the prefix. ``create`` builds in a temporary sibling and then rewrites
those text files to the final prefix (:func:`envtool.steps.kernel.relocate.relocate`) before the
rename.
"""
from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

from envtool.core.prefix import PrefixData
from envtool.engines.base import Engine, InstalledPackage, LockInstall
from envtool.engines.pip import pip_install_step
from envtool.core.errors import UsageError
from envtool.spec.model import Spec
from envtool.core.plan import PlanOptions, Step, StepContext
from envtool.engines.layer import LAYER_PTH


def _wanted(spec: Spec) -> Tuple[str, str]:
    """``(version as written, X.Y)`` of the Python the spec pins."""
    assert spec.python is not None
    want = spec.python.version or spec.python.value.strip()
    return want, ".".join(want.split(".")[:2])


def look_up_interpreter(spec: Spec) -> str:
    """The base interpreter for the venv: ``python<X.Y>`` on ``PATH`` matching ``spec.python``, else
    this one; ``""`` when the spec pins a Python that is not on ``PATH``. This is the probe
    (``shutil.which``) :func:`envtool.steps.kernel.machine.probe` runs once before a plan is composed."""
    if spec.python is None:
        return sys.executable
    _, major_minor = _wanted(spec)
    if f"{sys.version_info.major}.{sys.version_info.minor}" == major_minor:
        return sys.executable
    return shutil.which(f"python{major_minor}") or ""


def find_interpreter(spec: Spec, probed: Optional[str] = None) -> str:
    """The base interpreter for the venv (:func:`look_up_interpreter`).

    Args:
        spec: the spec.
        probed: what :func:`look_up_interpreter` found before planning
            (:attr:`MachineFacts.base_python <envtool.core.plan.MachineFacts.base_python>`), or
            None to look it up now.
    Raises:
        UsageError: the spec pins a Python that is not on ``PATH``.
    """
    found = look_up_interpreter(spec) if probed is None else probed
    if not found:
        want, major_minor = _wanted(spec)
        raise UsageError(f"spec {spec.name!r} pins Python {want}, but no python{major_minor} is on PATH "
                         f"(this is Python {sys.version_info.major}.{sys.version_info.minor}); "
                         "install it or use a conda spec")
    return found


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


def create_venv_step(spec: Spec, options: PlanOptions, notes: Tuple[str, ...] = ()) -> Step:
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
    layer: Tuple[str, ...] = ("--system-site-packages",) if layered else ()
    layer += ("--prompt", Path(options.prefix).name)
    facts = options.machine
    probed = facts is not None and facts.base_python is not None
    base = find_interpreter(spec, facts.base_python if probed else None)  # type: ignore[union-attr]
    prefix = str(options.work_prefix)
    inst = options.install_with
    seeds: List[Path] = []
    if inst is not None and inst.name == "uv":
        seeds = [Path(w) for w in facts.seed_wheels] if probed else bundled_seed_wheels(base)  # type: ignore[union-attr]
    title = f"Create a venv at {options.prefix}" + (" over the base interpreter's packages" if layered else "")
    # a base interpreter that is itself a venv: venv bases the new one on *its* base, so a .pth
    # file names the base venv's site-packages (envtool.engines.layer.layer_over)
    over: Tuple[Tuple[str, ...], ...] = ((("#", f"when {base} is itself a venv: {LAYER_PTH} in the new "
                                                "site-packages runs site.addsitedir(<its site-packages>)"),)
                                         if layered else ())
    action = _create_layered if layered else None
    if inst is None or not seeds:
        return Step(id="create-venv", title=title, commands=((base, "-m", "venv", *layer, prefix), *over),
                    notes=tuple(notes), action=action, data=LayeredVenv(base) if layered else None)
    py = str(PrefixData(Path(prefix)).python)
    seed = (inst.program, "pip", "install", "--no-config", "--python", py, "--no-index", "--no-deps",
            *(str(w) for w in seeds))
    return Step(id="create-venv", title=title + " (seeded by uv from ensurepip's wheels)",
                commands=((base, "-m", "venv", "--without-pip", *layer, prefix), seed, *over),
                env=install_env(inst), drop_env=inst.drop_env, notes=tuple(notes), action=action,
                data=LayeredVenv(base) if layered else None)


@dataclass(frozen=True)
class LayeredVenv:
    """Payload of a layered ``create-venv`` step: the base interpreter it runs ``venv`` with."""

    base_python: str


def _create_layered(step: Step, runner: StepContext) -> dict:
    """Run the ``create-venv`` commands, then make the new venv see what its base interpreter
    (``step.data``) sees (:func:`envtool.engines.layer.layer_over`: a ``.pth`` for a venv base).

    Returns:
        ``{"base": <layer_over's record>}``.
    Raises:
        StepFailed: the base interpreter cannot be asked where its packages are, or the files
            cannot be written.
    """
    from envtool.core.errors import EnvtoolError, StepFailed
    from envtool.engines.layer import layer_over, probe_site

    runner.run_commands(step)
    prefix = Path(step.commands[0][-1])  # python -m venv ... PREFIX
    try:
        base = probe_site(step.data.base_python)
        record = layer_over(base, prefix)
    except (EnvtoolError, OSError) as exc:
        raise StepFailed(step.id, f"cannot layer the venv over {step.data.base_python}: {exc}", runner.log_path) from None
    if record["pth"]:
        runner.note(f"the base interpreter is a venv ({base.prefix}): {record['pth']} adds "
                    + ", ".join(map(str, record["site_packages"])))
    return {"base": record}


class VenvEngine(Engine):
    """Creates a venv and installs ``packages.pip`` with the venv's own pip."""

    name = "venv"
    summary = "python -m venv and pip (default for venv specs)"
    spec_engine = "venv"
    install_step_ids = frozenset({"pip-install"})

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

    def locked_steps(self, spec: Spec, options: PlanOptions, lock: LockInstall) -> List[Step]:
        """``create-venv`` (the lock's pip entries are installed after it).

        Raises:
            UsageError: the lock has conda packages (exit 2).
        """
        if lock.managed("conda"):
            raise UsageError(f"{lock.path}: the lock has conda packages but spec {spec.name!r} uses the venv engine")
        return [create_venv_step(spec, options, notes=lock.notes)]

    def lock_python(self, spec: Spec) -> Optional[str]:
        """The spec's base interpreter (:func:`find_interpreter`): its pip resolves the lock."""
        return find_interpreter(spec)

    def holds(self, prefix: Path) -> bool:
        """A Python prefix without ``conda-meta/``."""
        data = PrefixData(Path(prefix))
        return not data.is_conda and data.python.exists()

    def installed(self, prefix: Path) -> List[InstalledPackage]:
        """Every distribution in ``prefix``'s site-packages (:class:`~envtool.core.prefix.PrefixData`)."""
        return [InstalledPackage(name=d.name, version=d.version, manager="pip")
                for d in PrefixData(prefix).distributions]


__all__ = ["VenvEngine", "create_venv_step", "find_interpreter", "look_up_interpreter", "pip_install_step"]
