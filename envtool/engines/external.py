"""The external conda engines: a real ``conda``, ``mamba`` or ``micromamba`` run with ``--json``
(``--engine conda|mamba|micromamba``)."""
from __future__ import annotations

import functools
import json
import os
import shutil
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from envtool.core.errors import EnvtoolError, StepFailed, UsageError
from envtool.core.plan import PlanOptions, Step, StepContext
from envtool.engines.base import CloneSettings, Engine, InstalledPackage, LockInstall
from envtool.engines.pip import spec_pip_steps
from envtool.engines.rattler import RattlerEngine
from envtool.engines.rattler_api import package_cache
from envtool.spec.model import Spec


@dataclass(frozen=True)
class ToolData:
    """Payload of ``conda-create``/``clone-external`` made by an external tool: the tool's name."""

    tool: str


class ExternalCondaEngine(Engine):
    """Drives a real ``conda``, ``mamba`` or ``micromamba`` (``--json``), with a writable package cache.

    ``CONDA_PKGS_DIRS`` (conda's documented variable; micromamba reads it too) points at
    envtool's cache so that a read-only site installation is never written to.
    """

    spec_engine = "conda"
    install_step_ids = frozenset({"conda-create", "clone-external", "pip-install", "install-locked-conda"})

    def __init__(self, tool: str = "conda") -> None:
        self.tool = tool
        self.name = tool
        self.summary = f"an external {tool} executable on PATH"

    def executable(self) -> str:
        """The tool's path (``$CONDA_EXE``/``$MAMBA_EXE`` when they name it, else ``PATH``).

        Raises:
            UsageError: the tool is not installed.
        """
        for var in ("CONDA_EXE", "MAMBA_EXE"):
            exe = os.environ.get(var)
            if exe and Path(exe).name == self.tool and os.access(exe, os.X_OK):
                return exe
        found = shutil.which(self.tool)
        if not found:
            raise UsageError(f"--engine {self.tool}: {self.tool} is not on PATH (use the default rattler engine)")
        return found

    def probe_tools(self) -> Dict[str, str]:
        """``{tool: path}`` when the tool is installed, else ``{}``."""
        try:
            return {self.tool: self.executable()}
        except UsageError:
            return {}

    def _exe(self, options: PlanOptions) -> str:
        """The tool's path as probed before planning (``options.machine``), else looked up now.

        Raises:
            UsageError: the tool is not installed.
        """
        if options.machine is not None:
            found = options.machine.tool(self.tool)
            if found is None:
                raise UsageError(f"--engine {self.tool}: {self.tool} is not on PATH (use the default rattler engine)")
            return found
        return self.executable()

    def _env(self) -> Tuple[Tuple[str, str], ...]:
        return (("CONDA_PKGS_DIRS", str(package_cache())),)

    def create_steps(self, spec: Spec, options: PlanOptions) -> List[Step]:
        """``<tool> create --yes --json --prefix P --override-channels -c … SPECS`` then pip.

        Raises:
            UsageError: the tool is not installed.
        """
        exe = self._exe(options)
        specs = [p.value for p in spec.packages.conda]
        argv = [exe, "create", "--yes", "--json", "--prefix", str(options.work_prefix), "--override-channels"]
        for ch in spec.channels:
            argv += ["-c", ch]
        step = Step(id="conda-create", title=f"{self.tool} create ({len(specs)} specs)",
                    commands=(tuple(argv + specs),), env=self._env(), action=_external_action,
                    data=ToolData(self.tool))
        return [step] + spec_pip_steps(spec, Path(options.work_prefix), options)

    def clone_steps(self, spec: Optional[Spec], source: str, options: PlanOptions,
                    how: Optional[CloneSettings] = None) -> List[Step]:
        """``<tool> create --yes --json --prefix P --clone SRC`` (``CONDA_PKGS_DIRS`` = envtool's cache).

        Raises:
            UsageError: the tool is not installed, or the source is not found.
        """
        from envtool.engines import clone

        src = clone.resolve_source(source)
        exe = self._exe(options)
        argv = (exe, "create", "--yes", "--json", "--prefix", str(options.work_prefix), "--clone", str(src))
        steps = [Step(id="clone-external", title=f"{self.tool} create --clone {src}", commands=(argv,),
                      env=self._env(), action=_external_action, data=ToolData(self.tool),
                      notes=(f"{self.tool}'s clone does not carry untracked files or rewrite their prefixes; "
                             "the rattler engine does",))]
        if spec is not None:
            steps += spec_pip_steps(spec, Path(options.work_prefix), options)
        return steps

    def locked_steps(self, spec: Spec, options: PlanOptions, lock: LockInstall) -> List[Step]:
        """As the rattler engine: a lock's records are installed exactly with py-rattler (the tools
        would solve again)."""
        return RattlerEngine().locked_steps(spec, options, lock)

    def holds(self, prefix: Path) -> bool:
        """A conda prefix (``conda-meta/``)."""
        return RattlerEngine().holds(prefix)

    def installed(self, prefix: Path) -> List[InstalledPackage]:
        """Same as :meth:`RattlerEngine.installed` (reads ``conda-meta``; runs no tool)."""
        return RattlerEngine().installed(prefix)


def parse_conda_json(output: str) -> Dict[str, Any]:
    """The JSON document in a ``conda … --json`` output (the last top-level object).

    conda prints one object; mamba/micromamba may print progress lines before it.

    Raises:
        EnvtoolError: no JSON object in the output.
    """
    text = output.strip()
    start = text.find("{")
    while start != -1:
        try:
            return json.loads(text[start:])
        except ValueError:
            start = text.find("\n{", start + 1)
            start = start + 1 if start != -1 else -1
    raise EnvtoolError("no JSON document in the tool's output")


def _external_action(step: Step, runner: StepContext) -> dict:
    proc = runner.run(step.commands[0], env=dict(step.env), check=False)
    try:
        doc = parse_conda_json(proc.stdout)
    except EnvtoolError:
        doc = {}
    if proc.returncode != 0 or doc.get("success") is False or "error" in doc or "exception_name" in doc:
        msg = doc.get("message") or doc.get("error") or proc.stdout.strip().splitlines()[-1:] or ["(no output)"]
        name = doc.get("exception_name", "")
        raise StepFailed(step.id, f"{step.data.tool} failed (exit {proc.returncode}){': ' + name if name else ''}: "
                                  f"{msg if isinstance(msg, str) else msg[0]}", runner.log_path)
    actions = doc.get("actions", {})
    return {"tool": step.data.tool, "prefix": doc.get("prefix"), "linked": len(actions.get("LINK", []))}


#: The factories :mod:`envtool.engines.registry` names ``conda``, ``mamba`` and ``micromamba``.
CONDA = functools.partial(ExternalCondaEngine, "conda")
MAMBA = functools.partial(ExternalCondaEngine, "mamba")
MICROMAMBA = functools.partial(ExternalCondaEngine, "micromamba")
