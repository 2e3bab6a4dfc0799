"""The pip-install steps every engine shares: the spec's ``packages.pip`` installed with the plan's
installer (uv or pip, :mod:`envtool.engines.installer`) into the environment's own interpreter."""
from __future__ import annotations

from pathlib import Path
from typing import Any, List

from envtool.core.plan import PlanOptions, Step
from envtool.spec.model import Spec
from envtool.core.prefix import PrefixData


def pip_install_step(step_id: str, title: str, py: str, prefix: Path, reqs: List[str], options: PlanOptions,
                     exact: bool = False, **extra: Any) -> Step:
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


def spec_pip_steps(spec: Spec, prefix: Path, options: PlanOptions, title: str = "Install pip packages into the env: "
                   ) -> List[Step]:
    """The ``pip-install`` step for ``spec.packages.pip`` into ``prefix`` (none when it lists no pip
    package). A Horovod built with pip (``horovod.install: pip-build``) builds with
    ``--no-build-isolation``, so its build backend (setuptools, wheel) is installed first.

    Args:
        spec: the resolved spec.
        prefix: the environment being built.
        options: the plan's options (the installer).
        title: the step title's start (the requirements follow).
    Returns:
        zero or one step.
    """
    reqs = [p.value for p in spec.packages.pip]
    if not reqs:
        return []
    if spec.horovod.install == "pip-build":
        reqs = ["setuptools", "wheel"] + reqs
    py = str(PrefixData(Path(prefix)).python)
    return [pip_install_step("pip-install", title + " ".join(p.value for p in spec.packages.pip),
                             py, Path(prefix), reqs, options)]
