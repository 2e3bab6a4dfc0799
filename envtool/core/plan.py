"""The plan model (core layer): a :class:`Plan` is an ordered tuple of :class:`Step`, plain data.

``envtool plan`` prints a plan; ``envtool create`` executes the same plan (made for the
temporary build prefix), so what is shown is what runs.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple

if TYPE_CHECKING:  # the plan carries the spec it was made from; the core does not import the spec layer
    from envtool.spec.model import Spec

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: ``scheme://user:password@`` in a URL (a package index with inline credentials).
_URL_AUTH = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/@\s:]*)(?::[^/@\s]*)?@")


def redact(text: str) -> str:
    """``text`` with the password of every URL's inline credentials shown as ``****``
    (``https://me:tok@mirror/simple`` → ``https://me:****@mirror/simple``; a token alone,
    ``https://tok@mirror``, → ``https://****@mirror``), as pip shows them (pip
    ``redact_auth_from_url``). For what envtool prints and logs, never for what it runs."""
    return _URL_AUTH.sub(lambda m: f"{m.group('scheme')}{m.group('user')}:****@" if m.group(0).count(":") > 1
                         else f"{m.group('scheme')}****@", text)


@dataclass(frozen=True)
class PlanOptions:
    """What the user asked for besides the spec.

    Attributes:
        prefix: the target prefix (where the environment ends up).
        build_prefix: where it is built (a temporary sibling during ``create``; equal to
            ``prefix`` for ``plan``).
        clone: clone source (env name, prefix) or ``""`` for the site's base env; None: no clone.
        from_lock: a lockfile to install from instead of solving, or None.
        engine: engine override (``venv``, ``rattler``, ``conda``, ``mamba``, ``micromamba``) or None.
        modulefile_root: write a modulefile under this directory, or None.
        cpu_count: parallel compile jobs for the Horovod build.
        site: site name the spec was resolved for, or None.
        preview: True for ``plan`` (nothing runs): a clone source that does not exist on this
            machine (the site's base env seen from a laptop) is planned with a note instead of
            raising; ``create`` leaves it False so a missing source is an error before any step.
        lock_reason: why packages come from ``from_lock`` or from a solve (one line, shown by
            ``plan`` and logged by ``create``).
        installer: the installer asked for pip packages: ``uv`` or ``pip`` (``--installer``); ``""``:
            ``$ENVTOOL_INSTALLER``, else ``uv``.
        link_files: see :attr:`Installer.link` (False for ``publish``).
        install_with: the installer decided by the planner (:func:`envtool.engines.installer.decide`),
            or None before planning (the engines then install with pip).
        machine: what planning needs to know about this machine, probed once before the steps are
            composed (:func:`envtool.steps.kernel.machine.probe`), or None before that.
    """

    prefix: Path
    build_prefix: Optional[Path] = None
    clone: Optional[str] = None
    from_lock: Optional[Path] = None
    engine: Optional[str] = None
    modulefile_root: Optional[Path] = None
    cpu_count: int = 2
    site: Optional[str] = None
    preview: bool = False
    lock_reason: str = ""
    installer: str = ""
    link_files: bool = True
    install_with: Optional["Installer"] = None
    machine: Optional["MachineFacts"] = None

    @property
    def work_prefix(self) -> Path:
        """The prefix the steps act on."""
        return self.build_prefix or self.prefix


@dataclass(frozen=True)
class MachineFacts:
    """What planning reads about this machine, probed once, up front (:func:`envtool.steps.kernel.machine.probe`),
    so that composing the steps (the planner, the engines) does no I/O.

    Attributes:
        tools: ``(name, absolute path)`` of the executables the chosen engine drives (an external
            ``conda``), as found on ``PATH`` (:meth:`Engine.probe_tools
            <envtool.engines.base.Engine.probe_tools>`); a missing one is absent.
        build: the Horovod build's probes (:class:`envtool.steps.kernel.machine.BuildProbe`: toolchain,
            compiler and MPI version lines, missing system tools), or None when the spec does not
            build Horovod with pip.
        base_python: the interpreter a venv for the spec is made with
            (:func:`envtool.engines.venv.find_interpreter`), ``""`` when the Python the spec pins is
            not on ``PATH``, or None when not probed (the venv step then looks it up itself).
        seed_wheels: the wheels ``ensurepip`` would seed a venv with
            (:func:`envtool.engines.venv.bundled_seed_wheels` of :attr:`base_python`).
        lock_interpreter: the interpreter the lock being installed is checked against
            (:class:`envtool.core.platforms.Interpreter`; :func:`envtool.steps.create.from_lock.load_checked`),
            or None when no lock is installed or the spec's engine provides Python itself (conda).
    """

    tools: Tuple[Tuple[str, str], ...] = ()
    build: Any = None
    base_python: Optional[str] = None
    seed_wheels: Tuple[str, ...] = ()
    lock_interpreter: Any = None

    def tool(self, name: str) -> Optional[str]:
        """The absolute path of executable ``name`` when it was found, else None."""
        return dict(self.tools).get(name)


@dataclass(frozen=True)
class Installer:
    """How pip packages are installed, decided once when planning (plain data).

    Attributes:
        name: ``uv`` or ``pip``.
        program: the ``uv`` executable (absolute path), or ``""`` for pip (``python -m pip``).
        version: the installer's version (``uv 0.13.9``), or ``""`` for pip (the env's own).
        args: uv options that carry pip's effective configuration (``--index-url`` …); empty for pip.
        env: variables uv needs for the rest of that configuration (``SSL_CERT_FILE`` …).
        passed: the pip configuration keys passed to uv (``find-links``, ``constraint`` …).
        reason: one line for people: why this installer (e.g. why pip when uv was asked).
        drop_env: inherited variables removed for the installer (``UV_*`` settings that would
            change what uv installs, e.g. ``UV_TORCH_BACKEND``, ``UV_INDEX``); pip's configuration
            is the one configuration.
        link: link files from caches (uv's hard links, kept bytecode); False: private copies,
            for environments whose files' mode and group are changed afterwards (``publish``:
            a shared inode would carry those changes into uv's cache and other environments).
    """

    name: str = "pip"
    program: str = ""
    version: str = ""
    args: Tuple[str, ...] = ()
    env: Tuple[Tuple[str, str], ...] = ()
    passed: Tuple[str, ...] = ()
    reason: str = ""
    drop_env: Tuple[str, ...] = ()
    link: bool = True

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready form."""
        return {"link": self.link, "name": self.name, "program": self.program or None, "version": self.version or None,
                "args": [redact(a) for a in self.args], "env": {k: redact(v) for k, v in self.env},
                "drop_env": list(self.drop_env), "pip_config_passed": list(self.passed),
                "reason": redact(self.reason)}


class StepContext(Protocol):
    """What a step's ``action`` receives from whoever runs the plan (the steps layer's
    :class:`envtool.steps.kernel.runner.Runner`): an engine's action talks to this interface and never
    imports the runner (the layers flow down: steps → engines → core).

    Attributes:
        log_path: the build log every line of output is appended to (named in errors).
        results: what earlier steps returned, by step id (read by later steps, e.g. ``verify-lock``
            reads ``build-horovod``'s).
    """

    log_path: Path
    results: Dict[str, Any]

    def note(self, text: str) -> None:
        """Write ``text`` to the build log (credentials in URLs redacted)."""

    def progress(self, text: str) -> None:
        """Show ``text`` as a progress line (stderr, unless quiet)."""

    def run(self, argv: Sequence[str], env: Optional[Mapping[str, str]] = None, cwd: Optional[Path] = None,
            timeout: Optional[float] = None, check: bool = True,
            progress: Optional[str] = None, progress_kind: str = "build") -> Any:
        """Run one command (output to the log) and return its ``subprocess.CompletedProcess``
        (``stdout`` holds the output as text).

        Raises:
            StepFailed: ``check`` and a non-zero exit, or ``timeout`` (seconds) passed.
        """

    def run_commands(self, step: "Step", env: Optional[Mapping[str, str]] = None) -> None:
        """Run ``step.commands`` in order (``#`` lines skipped)."""


#: A step's action: runs the step with the runner's context; what it returns is the step's result
#: (``envtool create --json`` shows it under ``results``), None for none.
StepAction = Callable[["Step", StepContext], Any]


@dataclass(frozen=True)
class Step:
    """One step of a plan.

    Attributes:
        id: stable id (``create-venv``, ``pip-install``, ``build-horovod``, ``validate`` …).
        title: one line shown as progress.
        commands: the exact commands (argv tuples) the step runs, in order; for steps done
            in-process (py-rattler) a readable description prefixed with ``#``.
        env: variables added to the environment of the commands, in display order.
        notes: facts worth showing (a fix rule applied, a cache key, why a step is there).
        action: ``(step, context) -> result`` that executes it (:data:`StepAction`); None runs
            ``commands`` in order.
        data: parameters for ``action`` (not shown, not serialised): a payload dataclass of the
            module that made the step.
        drop_env: variables removed from the inherited environment of the commands (the
            installer's :attr:`Installer.drop_env`).
        progress: per command, a label shown with the command's phase and elapsed time while it
            runs (``installing with uv``), or ``""``; installs and bytecode compiles have one.
    """

    id: str
    title: str
    commands: Tuple[Tuple[str, ...], ...] = ()
    env: Tuple[Tuple[str, str], ...] = ()
    notes: Tuple[str, ...] = ()
    action: Optional[StepAction] = field(default=None, compare=False, repr=False)
    data: Any = field(default=None, compare=False, repr=False)
    progress: Tuple[str, ...] = field(default=(), compare=False, repr=False)
    drop_env: Tuple[str, ...] = ()

    def shell_lines(self, with_env: bool = True) -> Tuple[str, ...]:
        """Commands as shell lines, with ``env`` assignments in front of each (``with_env``).

        Every word is shell-quoted (``shlex``), ``#`` comment lines too, so a pasted line runs
        exactly the command shown and a comment cannot end early (control characters are shown
        as ``\\n``, ``\\x1b`` …).
        """
        prefix = " ".join(f"{k}={shlex.quote(redact(v))}" for k, v in self.env) if with_env else ""
        if with_env and self.drop_env:
            prefix = "env " + " ".join(f"-u {k}" for k in self.drop_env) + (" " + prefix if prefix else "")
        out = []
        for argv in self.commands:
            if argv and argv[0].startswith("#"):
                # a comment: a command shown as words is quoted word by word; prose is quoted where it is
                # written; a control character (which could end the comment) is shown escaped
                text = "# " + shlex.join(argv[1:]) if len(argv) > 2 else " ".join(argv)
                out.append(_CONTROL.sub(lambda m: repr(m.group(0))[1:-1], text))
            else:
                line = redact(shlex.join(argv))
                out.append(f"{prefix} {line}" if prefix else line)
        return tuple(out)

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready form (``action`` and ``data`` left out)."""
        return {"id": self.id, "title": self.title, "commands": [[redact(w) for w in c] for c in self.commands],
                "env": {k: redact(v) for k, v in self.env}, "drop_env": list(self.drop_env), "notes": list(self.notes)}


@dataclass(frozen=True)
class Plan:
    """An ordered plan for one spec and one target."""

    spec: Spec
    options: PlanOptions
    steps: Tuple[Step, ...]
    #: the GPU gates and known-bad stack rules ``plan`` applied (a ``to_dict()``-able report), or None
    gpu: Optional[Any] = None

    def step(self, step_id: str) -> Optional[Step]:
        """The step with ``step_id``, or None."""
        return next((s for s in self.steps if s.id == step_id), None)

    def to_dict(self) -> Dict[str, Any]:
        return {"spec": self.spec.name, "spec_file": self.spec.path, "prefix": str(self.options.prefix),
                "engine": self.options.engine or self.spec.engine, "site": self.options.site or self.spec.site.name,
                "lock": {"file": str(self.options.from_lock) if self.options.from_lock else None,
                         "reason": self.options.lock_reason},
                "installer": self.options.install_with.to_dict() if self.options.install_with else None,
                "steps": [s.to_dict() for s in self.steps],
                "gpu": self.gpu.to_dict() if self.gpu is not None else None}

def format_steps(steps: Sequence["Step"]) -> List[str]:
    """The lines :func:`envtool.steps.create.planner.format_plan` prints for ``steps`` (a sequence of :class:`Step`): numbered,
    each with its environment, its exact commands (shell-quoted) and its notes; also what
    ``pack``, ``publish`` and ``retire`` print for their plans."""
    lines: List[str] = []
    for i, step in enumerate(steps, 1):
        lines.append(f"{i}. [{step.id}] {step.title}")
        if step.env:
            lines.append("   env: " + " ".join(f"{k}={shlex.quote(redact(v))}" for k, v in step.env))
        if step.drop_env:
            lines.append("   unset: " + " ".join(step.drop_env))
        for line in step.shell_lines(with_env=False):
            lines.append(f"   $ {line}")
        for note in step.notes:
            lines.append(f"   note: {note}")
    return lines
