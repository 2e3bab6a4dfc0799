"""Run an image plan with the one :class:`~envtool.steps.kernel.runner.Runner` (as ``create`` runs its plan).

The build works in ``.OUTPUT.envtool-image-XXXXXXXX`` beside the output (``mkdtemp``: mode 0700, a
name no one else holds). Every line of output goes to its build log; progress is a line per step.
A failure or an interrupt (exit 130; the running command's process group is killed, and each
command that runs in a root runs in its own PID namespace, :data:`~envtool.steps.image.root.UNSHARE`)
removes the work directory (only it: nothing else is touched, nothing half-built is left), after
copying the log beside the output (``OUTPUT.envtool-image.log``, or a new unique name when that
exists: never through a link another user planted); the error names that log and what was left.
"""
from __future__ import annotations

import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, Optional

from envtool.core.errors import UsageError
from envtool.steps.image.horovod import InImageResult
from envtool.steps.image.job import ImageWork
from envtool.steps.image.plan import ImagePlan, compose
from envtool.steps.image.request import ImageInputs, ImageRequest, check_request, host_problems
from envtool.steps.image.root import remove_tree
from envtool.steps.kernel.runner import Runner


@dataclass
class ImageResult:
    """What :func:`build` made.

    Attributes:
        output: the output directory.
        prefix: the environment it was built from.
        lock: the lockfile used.
        base: the base (``debian:bookworm``).
        mpi_abi: the MPI ABI of the image.
        libmpi: the ``libmpi`` Horovod's extension resolves to inside the image.
        forms: form → path (``dir``: ``OUTPUT/rootfs``, ``squashfs``: ``OUTPUT/image.sqfs``, ``oci``: ``OUTPUT/oci``).
        sizes: form → bytes.
        components: components in the SBOM.
        seconds: wall time of the whole build.
        step_seconds: step id → seconds.
        horovod_compiled: what the compile inside the image made (:class:`InImageResult`), or None
            when the environment's wheel was reused (``{}`` in :meth:`to_dict`).
        log: the build log (``OUTPUT/build.log``).
    """

    output: str
    prefix: str
    lock: str
    base: str
    mpi_abi: str
    libmpi: str = ""
    forms: Dict[str, str] = field(default_factory=dict)
    sizes: Dict[str, int] = field(default_factory=dict)
    components: int = 0
    seconds: float = 0.0
    step_seconds: Dict[str, float] = field(default_factory=dict)
    horovod_compiled: Optional[InImageResult] = None
    log: str = ""

    def to_dict(self) -> Dict:
        """A JSON-ready mapping of the fields."""
        out = asdict(self)
        out["horovod_compiled"] = out["horovod_compiled"] or {}
        return out


def dry_run_plan(request: ImageRequest) -> ImagePlan:
    """The plan ``image --dry-run`` shows: the request checked, the plan composed for a work
    directory that is not made; nothing is written.

    Raises:
        UsageError: bad input (exit 2, :func:`check_request`).
        ImageError: the environment's Horovod wheel cannot be used (exit 1).
    """
    inputs = check_request(request)
    work = inputs.output.parent / f".{inputs.output.name}.envtool-image-XXXXXXXX"
    return compose(inputs, work, preview=True, host=host_problems(inputs))


def build(request: ImageRequest, verbose: bool = False, quiet: bool = False) -> ImageResult:
    """Build the image ``request`` asks for into the new directory ``request.output``.

    Args:
        request: what to build.
        verbose: echo the commands' output.
        quiet: no progress lines.
    Returns:
        the :class:`ImageResult`.
    Raises:
        UsageError: bad input, or this machine lacks root or a tool (exit 2; nothing was made).
        ImageError, StepFailed: a tool failed (the Horovod compile included), the Horovod wheel is
            missing, the image's Horovod links another MPI ABI, the SBOMs differ (exit 1); ``exc.log``
            names the kept build log, ``exc.outcome`` says nothing was left.
        KeyboardInterrupt: an interrupt (exit 130), after the same clean-up.
    """
    started = time.monotonic()
    inputs = check_request(request)
    problems = host_problems(inputs)
    if problems:
        raise UsageError("; ".join(problems))
    output = inputs.output
    work = ImageWork(Path(tempfile.mkdtemp(prefix=f".{output.name}.envtool-image-", dir=output.parent)))
    runner = Runner(log_path=work.log, verbose=verbose, quiet=quiet)
    try:
        work.log.touch(mode=0o600)
        with runner:
            plan = _run(runner, inputs, work)
    except BaseException as exc:
        try:
            _keep_failed_log(exc, work, output)
        finally:
            remove_tree(work.dir)
        raise
    remove_tree(work.dir)
    return _result(plan, runner, started)


def _run(runner: Runner, inputs: ImageInputs, work: ImageWork) -> ImagePlan:
    """Compose the plan and run its steps; what failed is written to the log."""
    runner.note(f"envtool image {inputs.prefix} -> {inputs.output}; building in {work.dir}")
    try:
        plan = compose(inputs, work.dir)
        for i, step in enumerate(plan.steps, 1):
            runner.run_step(step, i, len(plan.steps))
    except BaseException as exc:
        runner.note(f"stopped: {type(exc).__name__}: {exc}")
        raise
    return plan


def _keep_failed_log(exc: BaseException, work: ImageWork, output: Path) -> None:
    """Copy the failed build's log beside the output and name it (and what was left) on ``exc``;
    envtool's main prints both (under ``--json`` too), also for an interrupt."""
    if not work.log.exists():
        return
    kept = keep_log(work.log, output.parent / f"{output.name}.envtool-image.log")
    setattr(exc, "log", kept)
    setattr(exc, "outcome", f"nothing was left at {output}")


def _result(plan: ImagePlan, runner: Runner, started: float) -> ImageResult:
    inputs = plan.job.inputs
    out = inputs.output
    result = ImageResult(output=str(out), prefix=str(inputs.prefix), lock=str(inputs.lock_path),
                         base=inputs.section.base, mpi_abi=inputs.section.mpi_abi,
                         libmpi=runner.results.get("abi", ""), components=runner.results.get("sbom", 0),
                         horovod_compiled=runner.results.get("compile-horovod"), log=str(out / "build.log"))
    for form, rel in (("dir", "rootfs"), ("squashfs", "image.sqfs"), ("oci", "oci")):
        if form in inputs.request.formats:
            result.forms[form] = str(out / rel)
            result.sizes[form] = tree_size(out / rel)
    result.step_seconds = {k: round(v, 1) for k, v in runner.timings.items()}
    result.seconds = round(time.monotonic() - started, 1)
    return result


def keep_log(log: Path, want: Path) -> Path:
    """Copy the build ``log`` next to the output as ``want``, or under a new unique name when
    ``want`` exists: the file is created (``O_EXCL``, never through a symbolic link) so nothing
    another user put in the output's directory is followed or replaced.

    Returns:
        the path written (mode 0600).
    Raises:
        OSError: the directory cannot be written.
    """
    data = log.read_bytes()
    try:
        fd = os.open(want, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        path = want
    except FileExistsError:
        fd, name = tempfile.mkstemp(dir=want.parent, prefix=want.name.replace(".log", "-"), suffix=".log")
        path = Path(name)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return path


def tree_size(path: Path) -> int:
    """Bytes of the regular files under ``path`` (or of ``path`` itself), hard links counted once."""
    if path.is_file():
        return path.stat().st_size
    seen = set()
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            total += st.st_size
    return total
