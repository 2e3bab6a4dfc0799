"""``pack`` as a plan of typed steps run by the one :class:`~envtool.steps.kernel.runner.Runner`
(:mod:`envtool.steps.pack`): check a venv, take its lockfile, write the SBOM, pack, move into place.

:func:`compose` decides everything that can be decided before any work (the kind, the output file,
the mount point, whether the lockfile is the environment's own or a snapshot) and reads nothing
else; ``pack --dry-run`` prints that plan, :func:`pack` runs the same one.
"""
from __future__ import annotations

import os
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Tuple

from envtool.core import procs, squashfs
from envtool.core.errors import UsageError
from envtool.core.plan import Step, StepContext
from envtool.core.prefix import PYTHON, PrefixData
from envtool.steps.pack import archive
from envtool.steps.pack.model import (FORMATS, LOCK_NAMES, SBOM, TMP_PREFIX, UNPACK_SCRIPT, PackResult, kind_of,
                                      output_path, sha256, unpacked_kib)

if TYPE_CHECKING:
    from envtool.steps.pack.contents import Judge


@dataclass(frozen=True)
class PackJob:
    """What one pack makes, decided before any work (every step's payload).

    Attributes:
        prefix: the environment (absolute).
        fmt: ``tar`` or ``squashfs``.
        kind: ``conda`` or ``venv``.
        out: the pack file (absolute).
        dest: where a squashfs image is mounted (None for a tar).
        work: the private directory the pack is built in, beside ``out``.
        lock: the environment's own lockfile, or None: a snapshot is made.
        allow_outside_links: keep symbolic links that leave the environment instead of refusing
            them (:func:`envtool.steps.pack.contents.check_contents`).
    """

    prefix: Path
    fmt: str
    kind: str
    out: Path
    dest: Optional[str]
    work: Path
    lock: Optional[Path]
    allow_outside_links: bool = False

    @property
    def built(self) -> Path:
        """The file being written, renamed to :attr:`out` by the last step."""
        return self.work / f"pack.{self.fmt}"


@dataclass(frozen=True)
class VenvCheck:
    """``check-venv``'s result: the base interpreter and the text files to relocate."""

    base: str
    relocate: Tuple[str, ...]


@dataclass(frozen=True)
class LockTaken:
    """``lock``'s result: the file put in the pack, its path inside, ``prefix``/``snapshot``, its sha256."""

    file: Path
    name: str
    source: str
    sha256: str


@dataclass(frozen=True)
class PackPlan:
    """The steps of one pack and what they make (:func:`compose`)."""

    job: PackJob
    steps: Tuple[Step, ...]

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready form (``pack --dry-run --json``'s ``plan``)."""
        j = self.job
        return {"prefix": str(j.prefix), "kind": j.kind, "format": j.fmt, "path": str(j.out),
                "dest_prefix": j.dest, "steps": [s.to_dict() for s in self.steps]}

    def format(self) -> str:
        """The plan for people: what is packed where, then the numbered steps with their commands."""
        from envtool.core.plan import format_steps

        j = self.job
        head = [f"Plan for pack {j.prefix} -> {j.out}", f"kind: {j.kind}; format: {j.fmt}"
                + (f"; mounted at {j.dest}" if j.dest else "")]
        return "\n".join(head + format_steps(self.steps))


def _squashfs_dest(prefix: Path, dest_prefix: Optional[str]) -> str:
    if shutil.which("mksquashfs") is None:
        raise UsageError("--format squashfs needs mksquashfs (Debian/Ubuntu: apt-get install squashfs-tools)")
    dest = os.path.normpath(dest_prefix) if dest_prefix else str(prefix)
    if not os.path.isabs(dest):
        raise UsageError(f"--dest-prefix {dest_prefix}: expected an absolute path (where the image is mounted)")
    return dest


def make_job(prefix: Path, fmt: str, output: Optional[Path] = None, dest_prefix: Optional[str] = None,
             force: bool = False, allow_outside_links: bool = False) -> PackJob:
    """Check the arguments and decide the :class:`PackJob` (reads only the environment's kind,
    the output's directory and whether a lockfile is there).

    Raises:
        NotPackable: not an environment envtool can pack (exit 2).
        UsageError: a bad format, output or destination, or mksquashfs missing (exit 2).
    """
    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    prefix = Path(os.path.abspath(prefix))
    kind = kind_of(prefix)
    out = output_path(prefix, fmt, output, force)
    dest = _squashfs_dest(prefix, dest_prefix) if fmt == "squashfs" else None
    lock = next((prefix / n for n in LOCK_NAMES if (prefix / n).is_file()), None)
    return PackJob(prefix, fmt, kind, out, dest, out.parent / f".{out.name}{TMP_PREFIX}{os.getpid()}", lock,
                   allow_outside_links)


def compose(prefix: Path, fmt: str, output: Optional[Path] = None, dest_prefix: Optional[str] = None,
            force: bool = False, allow_outside_links: bool = False) -> PackPlan:
    """The plan that packs ``prefix`` (see :func:`make_job` for what is checked and raised)."""
    job = make_job(prefix, fmt, output, dest_prefix, force, allow_outside_links)
    steps: List[Step] = []
    steps.append(Step("check-contents", "Check, before anything in it is read, that the environment holds only "
                      "regular files, directories and links inside it (no socket, FIFO, device, set-user-ID, "
                      "set-group-ID or capability file" + ("" if job.allow_outside_links else ", no link leaving it")
                      + ", not the pack's own output directory)",
                      commands=(("#", "lstat every entry of", str(job.prefix)),), action=_check_contents, data=job))
    if job.kind == "venv":
        steps.append(Step("check-venv", "Check that the venv can be packed: its base interpreter, .pth entries, "
                          "files naming its prefix", commands=(("#", "read", str(job.prefix / "pyvenv.cfg"), "and scan",
                                                     str(job.prefix), "for its path"),),
                          action=_check_venv, data=job))
    if job.lock is not None:
        steps.append(Step("lock", f"Take the environment's lockfile {job.lock.relative_to(job.prefix)}",
                          commands=(("#", "sha256sum", str(job.lock)),), action=_take_lock, data=job))
    else:
        steps.append(Step("lock", "Snapshot a lockfile of the environment (it has none)",
                          commands=(("#", "lock the packages installed in", str(job.prefix)),),
                          notes=("the lock's sha256 is what validate's pre-flight compares on every node",),
                          action=_take_lock, data=job))
    steps.append(Step("sbom", "Write the CycloneDX SBOM", commands=(("#", "inventory of", str(job.prefix), "->", SBOM),),
                      action=_write_sbom, data=job))
    steps.append(_pack_step(job))
    steps.append(Step("place", f"Move the pack into place at {job.out}",
                      commands=(("#", "mv", str(job.built), str(job.out)),), action=_place, data=job))
    return PackPlan(job, tuple(steps))


def _pack_step(job: PackJob) -> Step:
    what = f"{job.kind} environment {job.prefix} as {job.fmt}"
    if job.kind == "conda":
        return Step("pack", f"Pack the {what} with conda-pack", action=_pack, data=job,
                    commands=(("#", "conda-pack", "--prefix", str(job.prefix), "--format", job.fmt, "--output", str(job.built),
                               *(("--dest-prefix", job.dest) if job.dest else ())),),
                    notes=(("bin/conda-unpack relocates it where it is unpacked",) if job.fmt == "tar" else
                           (f"relocated now to {job.dest}, where the image is mounted",)))
    if job.fmt == "tar":
        return Step("pack", f"Write the {what}", action=_pack, data=job,
                    commands=(("#", "tar of", str(job.prefix), "->", str(job.built), "(manifest first, with", UNPACK_SCRIPT + ")"),),
                    notes=(f"{UNPACK_SCRIPT} rewrites the prefix in the listed text files where it is unpacked",))
    root = job.work / "root"
    return Step("pack", f"Write the {what}, relocated to {job.dest}", action=_pack, data=job,
                commands=(("#", "copy", str(job.prefix), "to", str(root), "rewriting the prefix to", str(job.dest)),
                          tuple(squashfs.mksquashfs_argv(root, job.built, "-no-xattrs"))))


def _check_venv(step: Step, ctx: StepContext) -> VenvCheck:
    from envtool.steps.pack.venv import check_venv

    base, relocate = check_venv(step.data.prefix)
    ctx.note(f"base interpreter {base}; {len(relocate)} text file(s) name the prefix")
    return VenvCheck(base, tuple(relocate))


def _judge(job: PackJob) -> "Judge":
    """The :class:`~envtool.steps.pack.contents.Judge` of ``job``'s environment: a venv's base
    interpreter from ``pyvenv.cfg`` alone (nothing else in the environment is read), the output's
    directory (``job.work``) refused under any name."""
    from envtool.steps.pack.contents import Judge

    base = None
    if job.kind == "venv":
        from envtool.steps.pack.venv import base_interpreter

        base = base_interpreter(job.prefix, PrefixData(job.prefix).venv_config())
    return Judge(job.prefix, job.allow_outside_links, base, job.work)


def _check_contents(step: Step, ctx: StepContext) -> List[str]:
    notes = _judge(step.data).check()
    for note in notes:
        ctx.note(note)
    return notes


def _take_lock(step: Step, ctx: StepContext) -> LockTaken:
    job: PackJob = step.data
    if job.lock is not None:
        return LockTaken(job.lock, str(job.lock.relative_to(job.prefix)), "prefix", sha256(job.lock))
    from envtool.lock import build, lockio

    data = build.lock_prefix(job.prefix, lookup=False, progress=ctx.progress)
    out = job.work / "conda-lock.yml"
    lockio.write_lock(data, out)
    return LockTaken(out, "conda-lock.yml", "snapshot", sha256(out))


def _write_sbom(step: Step, ctx: StepContext) -> Path:
    from envtool.sbom import build_bom, render

    job: PackJob = step.data
    sbom = job.work / "sbom.cdx.json"
    sbom.write_text(render(build_bom(job.prefix)))
    return sbom


def _manifest(job: PackJob, venv: Optional[VenvCheck], lock: LockTaken) -> Dict[str, Any]:
    """``.envtool/pack.json`` (see :mod:`envtool.steps.pack`)."""
    from envtool import __version__

    relocate = list(venv.relocate) if venv else []
    unpack: List[str] = []
    if job.fmt == "tar" and job.kind == "conda":
        unpack = [PYTHON, "bin/conda-unpack"]
    elif job.fmt == "tar" and relocate:
        unpack = [PYTHON, UNPACK_SCRIPT]
    return {"manifest_version": 1, "envtool": __version__, "kind": job.kind, "format": job.fmt,
            "source_prefix": str(job.prefix), "dest_prefix": job.dest, "lock": lock.name, "lock_sha256": lock.sha256,
            "lock_source": lock.source, "sbom": SBOM, "base_python": venv.base if venv else None,
            "relocate": relocate if job.fmt == "tar" else [], "unpack": unpack,
            "unpacked_kib": unpacked_kib(job.prefix),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def _pack(step: Step, ctx: StepContext) -> Dict[str, Any]:
    job: PackJob = step.data
    venv: Optional[VenvCheck] = ctx.results.get("check-venv")
    lock: LockTaken = ctx.results["lock"]
    manifest = _manifest(job, venv, lock)
    extra: Dict[str, Path] = {SBOM: ctx.results["sbom"]}
    if lock.source == "snapshot":
        extra[lock.name] = lock.file
    if job.kind == "conda":
        archive.pack_conda(job.prefix, job.fmt, job.built, job.dest, manifest, extra, job.work)
    elif job.fmt == "tar":
        archive.venv_tar(job.prefix, job.built, manifest, extra, _judge(job).entries())
    else:
        assert job.dest is not None  # a squashfs job always has its mount point
        archive.venv_squashfs_root(job.prefix, job.work / "root", job.dest, manifest, extra,
                                   list(venv.relocate) if venv else [], job.work, _judge(job).entries())
        ctx.run(step.commands[-1])
    return manifest


def _place(step: Step, ctx: StepContext) -> int:
    from envtool.core.atomic import umask_mode

    job: PackJob = step.data
    os.chmod(job.built, 0o644 & ~(0o666 & ~umask_mode(0o666)))
    os.replace(job.built, job.out)
    return job.out.stat().st_size


@contextmanager
def workdir(job: PackJob) -> Iterator[Path]:
    """``job.work``, private, beside the output (same file system: the final rename is atomic);
    leftovers of killed packs (their PID gone) are removed first, and it is removed on the way out
    (an interrupt too: :func:`envtool.core.procs.scratch`)."""
    procs.remove_stale(job.out.parent, f".{job.out.name}{TMP_PREFIX}")
    procs.remove_path(job.work)
    job.work.mkdir(mode=0o700)
    with procs.scratch(job.work):
        try:
            yield job.work
        finally:
            procs.remove_path(job.work)


def pack(prefix: Path, fmt: str, output: Optional[Path] = None, dest_prefix: Optional[str] = None,
         force: bool = False, verbose: bool = False, quiet: bool = False,
         allow_outside_links: bool = False) -> PackResult:
    """Pack the environment at ``prefix`` into one file (see :mod:`envtool.steps.pack`): the plan of
    :func:`compose`, run by the one runner, with its build log under ``<cache>/logs``.

    Args:
        prefix: the environment (a conda environment or a venv).
        fmt: ``tar`` (uncompressed, unpacked and relocated on the node) or ``squashfs`` (mounted
            read-only with squashfuse; relocated now to ``dest_prefix``).
        output: the file to write (default :func:`envtool.steps.pack.model.default_output`).
        dest_prefix: for ``squashfs``, the absolute directory it will be mounted at (default: the
            source prefix itself); ignored for ``tar``.
        force: replace an existing ``output``.
        verbose: echo commands' output; quiet: no progress lines.
        allow_outside_links: keep symbolic links that leave the environment (named in the result's
            notes) instead of refusing the pack.
    Returns:
        a :class:`PackResult`.
    Raises:
        NotPackable: the environment cannot be packed (the reason; exit 2): among others, a socket,
            FIFO, device node, set-user-ID or set-group-ID file, or a link leaving it
            (:mod:`envtool.steps.pack.contents`).
        UsageError: a bad format, output or destination (exit 2).
        CheckFailed, StepFailed: conda-pack or mksquashfs failed (exit 1; ``exc.log`` names the log).
    """
    from envtool.steps.kernel.runner import new_log_path
    from envtool.steps.kernel.runner import Runner

    started = time.monotonic()
    plan = compose(prefix, fmt, output, dest_prefix, force, allow_outside_links)
    job = plan.job
    runner = Runner(log_path=new_log_path(f"pack-{job.prefix.name}"), verbose=verbose, quiet=quiet)
    with workdir(job), runner:
        runner.note(f"envtool pack {job.prefix} ({job.kind}) -> {job.out} ({job.fmt})")
        runner.run_steps(plan.steps)
    return _result(job, runner.results, runner.timings, time.monotonic() - started, runner.log_path)


def _result(job: PackJob, results: Dict[str, Any], timings: Dict[str, float], seconds: float, log: Path) -> PackResult:
    venv: Optional[VenvCheck] = results.get("check-venv")
    lock: LockTaken = results["lock"]
    notes = list(results.get("check-contents") or [])
    if venv:
        notes.append(f"the venv's base interpreter {venv.base} must exist at that path on every compute node")
    if job.dest:
        notes.append(f"mount the image at {job.dest}: its files name that directory")
    return PackResult(path=job.out, format=job.fmt, kind=job.kind, lock_sha256=lock.sha256, size=results["place"],
                      seconds=seconds, prefix=job.prefix, lock=lock.name, lock_source=lock.source,
                      base_python=venv.base if venv else None, dest_prefix=job.dest,
                      unpack=list(results["pack"]["unpack"]), notes=notes, log=log, timings=dict(timings))
