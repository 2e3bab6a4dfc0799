"""Compose ``envtool image``'s plan: the ordered :class:`~envtool.core.plan.Step` list that
``--dry-run`` prints and the build runs (:func:`envtool.steps.image.run.build`).

Order: ``check-build-base`` (a compile on a ``dir:`` base) → ``wheelhouse`` → the Horovod compile
(``horovod-sdist``, ``build-root``, ``build-root-install``, ``compile-horovod``; when the environment's
wheel is not reused) → ``base`` → ``python`` → ``install`` → ``abi`` → ``sbom`` → ``squashfs`` →
``oci`` → ``place``. Composing reads files only (the lock, the wheel cache's entries,
``create.json``); no command runs.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Sequence, Tuple

from envtool.core.plan import Step, redact
from envtool.steps.image.job import ImageJob, ImageWork
from envtool.steps.image.request import ImageInputs


@dataclass(frozen=True)
class ImagePlan:
    """An image's plan.

    Attributes:
        job: the payload its steps share (inputs, work directory, Horovod's choice).
        steps: the steps, in order.
        host: what this machine lacks to run it (``--dry-run`` shows it; a build refuses, exit 2).
    """

    job: ImageJob
    steps: Tuple[Step, ...]
    host: Tuple[str, ...] = ()

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready form (``image --dry-run --json``'s ``plan``)."""
        inputs, horovod = self.job.inputs, self.job.horovod
        return {"prefix": str(inputs.prefix), "output": str(inputs.output), "lock": str(inputs.lock_path),
                "base": inputs.section.base, "mpi_abi": inputs.section.mpi_abi,
                "formats": list(inputs.request.formats), "work": str(self.job.work.dir),
                "horovod": {"reuse": [str(w) for w, _ in horovod.reuse], "compile": horovod.compile_why or None},
                "host_problems": list(self.host), "steps": [s.to_dict() for s in self.steps]}


def _pip_wheel(inputs: ImageInputs, seeds: Sequence[Path]) -> str:
    """The pip wheel's file name the wheelhouse will hold (the first by name of the ensurepip wheels and
    the locked pip), or a placeholder when neither names one (the wheelhouse step then fails)."""
    names = [w.name for w in seeds if w.name.startswith("pip-")]
    names += [f"pip-{p.version}-py3-none-any.whl" for p in inputs.plain if p.name.lower() == "pip"]
    return min(names) if names else "pip-VERSION-py3-none-any.whl"


def _count(inputs: ImageInputs, seeds: Sequence[Path]) -> int:
    """How many packages the image's environment gets (the locked ones and the ensurepip wheels not locked)."""
    locked = {p.name.lower() for p in inputs.plain}
    return len(inputs.plain) + len(inputs.built) + len({w.name.split("-")[0].lower() for w in seeds} - locked)


def compose(inputs: ImageInputs, work: Path, preview: bool = False, host: Sequence[str] = ()) -> ImagePlan:
    """The plan for ``inputs`` built in the work directory ``work``.

    Args:
        inputs: the checked request (:func:`envtool.steps.image.request.check_request`).
        work: the work directory (made by the build; ``--dry-run`` shows a name that is not made).
        preview: ``--dry-run``: nothing is written (wheel-cache entries are not marked used).
        host: what this machine lacks (:func:`envtool.steps.image.request.host_problems`).
    Raises:
        ImageError, UsageError: see :func:`envtool.steps.image.wheels.choose_horovod`.
    """
    from envtool.steps.image.actions import form_steps, main_steps, wheelhouse_step
    from envtool.steps.image.compile import check_steps, compile_steps
    from envtool.steps.image.wheels import choose_horovod, seed_wheels

    seeds = tuple(seed_wheels(inputs.prefix))
    job = ImageJob(inputs=inputs, work=ImageWork(work), horovod=choose_horovod(inputs, preview=preview), seeds=seeds)
    pip_wheel = _pip_wheel(inputs, seeds)
    steps = [*check_steps(job), wheelhouse_step(job), *compile_steps(job, pip_wheel),
             *main_steps(job, pip_wheel, _count(inputs, seeds)), *form_steps(job)]
    return ImagePlan(job=job, steps=tuple(steps), host=tuple(host))


def format_plan(plan: ImagePlan) -> str:
    """Human-readable plan: numbered steps with their shell-quoted commands and notes (as ``envtool plan``
    prints ``create``'s)."""
    inputs, horovod = plan.job.inputs, plan.job.horovod
    lines = [f"Image plan for {inputs.prefix} -> {inputs.output}",
             f"lock: {inputs.lock_path}; base: {inputs.section.base}; MPI ABI: {inputs.section.mpi_abi}; "
             f"forms: {', '.join(inputs.request.formats)}",
             f"work directory: {plan.job.work.dir}",
             "Horovod: " + (f"compiled inside the image ({horovod.compile_why})" if horovod.compile_why else
                            "the environment's wheel" if horovod.reuse else "not in the lock")]
    lines += [f"this machine: {p}" for p in plan.host]
    for i, step in enumerate(plan.steps, 1):
        lines.append(f"{i}. [{step.id}] {step.title}")
        if step.env:
            lines.append("   env: " + " ".join(f"{k}={shlex.quote(redact(v))}" for k, v in step.env))
        lines += [f"   $ {line}" for line in step.shell_lines(with_env=False)]
        lines += [f"   note: {note}" for note in step.notes]
    return "\n".join(lines)
