"""The steps of an image plan other than the Horovod compile (:mod:`envtool.steps.image.compile`):
``wheelhouse``, ``base``, ``python``, ``install``, ``abi``, ``sbom``, the forms (``squashfs``,
``oci``) and ``place``. Each is a :class:`~envtool.core.plan.Step` whose ``data`` is the
:class:`~envtool.steps.image.job.ImageJob`; :mod:`envtool.steps.image.plan` puts them in order.
"""
from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import List, Optional, Tuple

from envtool.core import squashfs
from envtool.core.plan import Step, StepContext
from envtool.steps.image.horovod import InImageResult
from envtool.steps.image.job import BASE_REQUIREMENTS, REQUIREMENTS, ImageJob, Wheelhouse
from envtool.steps.image.root import IMAGE_PREFIX, WHEELHOUSE, ImageError, in_root, install_commands

#: The SBOM's path inside the image.
SBOM_PATH = IMAGE_PREFIX + "/share/envtool/sbom.cdx.json"
#: OCI manifest annotation / config label naming the SBOM's path in the image.
SBOM_LABEL = "org.envtool.sbom"
#: Horovod's PyTorch extension under the environment (its ``libmpi`` is checked).
HOROVOD_EXT = "lib/python*/site-packages/horovod/torch/mpi_lib_v2*.so"


def download_argv(job: ImageJob) -> Tuple[str, ...]:
    """``pip download`` of every locked wheel by name, version and SHA-256 (this machine's pip
    configuration: the site's index or pip's cache answers)."""
    work = job.work
    return (sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--require-hashes",
            "--disable-pip-version-check", "-d", str(work.house), "-r", str(work.dir / "download.txt"))


def _wheelhouse(step: Step, ctx: StepContext) -> Wheelhouse:
    """Download the locked wheels, add the ensurepip wheels (pip) and a reused Horovod wheel; write
    :data:`BASE_REQUIREMENTS` (all but Horovod)."""
    from envtool.horovod.cache import file_sha256

    job: ImageJob = step.data
    plain, house = job.inputs.plain, job.work.house
    house.mkdir()
    lines = [f"{p.name}=={p.version} --hash=sha256:{p.sha256}" for p in plain]
    (job.work.dir / "download.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    ctx.run_commands(step)
    for w in job.seeds:
        shutil.copy2(w, house / w.name)
        name, version = w.name.split("-")[:2]
        if not any(p.name.lower() == name.lower() for p in plain):
            lines.append(f"{name}=={version} --hash=sha256:{file_sha256(w)}")
    pip_wheel = next(iter(sorted(house.glob("pip-*.whl"))), None)
    if pip_wheel is None:
        raise ImageError(f"no pip wheel to install with: neither the lock nor {job.inputs.prefix}/.envtool/create.json "
                         "names one")
    (house / BASE_REQUIREMENTS).write_text("\n".join(lines) + "\n", encoding="utf-8")
    for wheel, sha in job.horovod.reuse:
        shutil.copy2(wheel, house / wheel.name)
        lines.append(f"horovod @ file://{WHEELHOUSE}/{wheel.name} --hash=sha256:{sha}")
    return Wheelhouse(lines=tuple(lines), pip_wheel=pip_wheel.name)


def _check_python(step: Step, ctx: StepContext) -> str:
    """The image's Python (``3.11``) must be the one the lock was resolved for."""
    job: ImageJob = step.data
    out = ctx.run(step.commands[0]).stdout.split()
    have = out[-1] if out else ""
    interpreter = job.inputs.lock.interpreter
    if interpreter is not None:
        want = ".".join(str(interpreter.version).split(".")[:2])
        if have != want:
            raise ImageError(f"the base {job.inputs.section.base} has Python {have or '?'}; the lock was resolved "
                             f"for {want} (choose a base with that Python)")
    return have


def _compiled(ctx: StepContext) -> Optional[InImageResult]:
    return ctx.results.get("compile-horovod")


def _install(step: Step, ctx: StepContext) -> None:
    """The wheelhouse installed at ``/opt/env`` in the root (no index, hashes required); the
    environment's record and lock go with it (a compiled Horovod named in both)."""
    job: ImageJob = step.data
    house: Wheelhouse = ctx.results["wheelhouse"]
    root, lines = job.work.root, list(house.lines)
    compiled = _compiled(ctx)
    if compiled is not None:
        lines.append(f"horovod @ file://{WHEELHOUSE}/{compiled.wheel} --hash=sha256:{compiled.sha256}")
    (job.work.house / REQUIREMENTS).write_text("\n".join(lines) + "\n", encoding="utf-8")
    inside = root / WHEELHOUSE.lstrip("/")
    shutil.copytree(job.work.house, inside)
    venv, pip = install_commands(root, house.pip_wheel, REQUIREMENTS)
    ctx.run(venv)
    ctx.run(pip, progress="installing with pip", progress_kind="install")
    shutil.rmtree(inside)
    _record(job, root / IMAGE_PREFIX.lstrip("/"), compiled)


def _record(job: ImageJob, image_env: Path, compiled: Optional[InImageResult]) -> None:
    """``create.json`` (how Horovod was built: the SBOM's Horovod properties read it) and the lock
    into the image's environment; with a compiled Horovod, both name the compiled wheel."""
    from envtool.lock.lockio import write_lock
    from envtool.steps.image.horovod import amend_record, image_lock

    record = job.inputs.prefix / ".envtool" / "create.json"
    if record.is_file():
        (image_env / ".envtool").mkdir(exist_ok=True)
        shutil.copy2(record, image_env / ".envtool" / "create.json")
    if compiled is None:
        shutil.copy2(job.inputs.lock_path, image_env / "conda-lock.yml")
        return
    if record.is_file():
        amend_record(image_env / ".envtool" / "create.json", compiled)
    assert job.horovod.build is not None
    write_lock(image_lock(job.inputs.lock, job.work.house / compiled.wheel, compiled.sha256,
                          job.horovod.build.requirement), image_env / "conda-lock.yml")


def _check_abi(step: Step, ctx: StepContext) -> str:
    """Horovod's MPI extension must link the image's ``libmpi`` of the site's ABI (``ldd`` in the root).

    Returns:
        the ``libmpi`` line (``libmpi.so.40 => /usr/lib/…``).
    """
    job: ImageJob = step.data
    root, sonames, abi = job.work.root, job.inputs.sonames, job.inputs.section.mpi_abi
    exts = sorted((root / IMAGE_PREFIX.lstrip("/")).glob(HOROVOD_EXT))
    if not exts:
        raise ImageError(f"no Horovod PyTorch extension (horovod/torch/mpi_lib_v2*.so) under {IMAGE_PREFIX}")
    inside = "/" + str(exts[0].relative_to(root))
    ldd = ctx.run(in_root(root, ["ldd", inside])).stdout
    libmpi = [ln.strip() for ln in ldd.splitlines() if re.match(r"\s*libmpi(ch)?\.so", ln)]
    if not libmpi:
        raise ImageError(f"{inside} links no libmpi: Horovod was built without MPI")
    if not libmpi[0].startswith(sonames) or "not found" in libmpi[0]:
        raise ImageError(f"{inside} needs {libmpi[0]}; the site's {abi} ABI provides {' or '.join(sonames)}"
                         + ("" if _compiled(ctx) else
                            ": build with --compile-horovod to compile Horovod inside the image against it"))
    return re.sub(r"\s*\(0x[0-9a-f]+\)$", "", libmpi[0])


def _sbom(step: Step, ctx: StepContext) -> int:
    """The installed ``/opt/env`` must list what the environment lists (a compiled Horovod: the same
    version, its own hashes); write the SBOM into the image; drop apt's downloaded archives and lists.

    Returns:
        the number of components in the SBOM.
    """
    from envtool.sbom import write_sbom
    from envtool.steps.image.sbom import compare_sbom

    job: ImageJob = step.data
    inputs, root = job.inputs, job.work.root
    image_env = root / IMAGE_PREFIX.lstrip("/")
    compiled = _compiled(ctx)
    differs = compare_sbom(inputs.prefix, image_env, rebuilt=("horovod",) if compiled else ())
    if differs:
        raise ImageError("the image's /opt/env differs from the environment: " + "; ".join(differs))
    sbom = root / SBOM_PATH.lstrip("/")
    sbom.parent.mkdir(parents=True, exist_ok=True)
    name = inputs.lock.spec or inputs.prefix.name
    if compiled is not None:  # the image's own installed set, named by its path in the image
        write_sbom(image_env, sbom, name=name, label_prefix=IMAGE_PREFIX)
        shutil.copy2(job.work.house / compiled.wheel, sbom.parent / compiled.wheel)
    else:
        write_sbom(inputs.prefix, sbom, name=name)
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for f in (root / junk).glob("*"):
            if f.is_file():
                f.unlink()
    return len(json.loads(sbom.read_text(encoding="utf-8")).get("components", []))


def _form(step: Step, ctx: StepContext) -> None:
    """Write one form (its commands) into the work directory's ``out``."""
    job: ImageJob = step.data
    job.work.out.mkdir(exist_ok=True)
    ctx.run_commands(step)


def oci_commands(job: ImageJob) -> Tuple[Tuple[str, ...], ...]:
    """``umoci`` (https://umo.ci/): an OCI image layout, tag ``env``, one layer of the root; the
    manifest annotation and config label :data:`SBOM_LABEL` name the SBOM's path in the image."""
    oci, root = job.work.out / "oci", str(job.work.root)
    label = f"{SBOM_LABEL}={SBOM_PATH}"
    return (("umoci", "init", "--layout", str(oci)), ("umoci", "new", "--image", f"{oci}:env"),
            ("umoci", "insert", "--image", f"{oci}:env", root, "/"),
            ("umoci", "config", "--image", f"{oci}:env", "--config.label", label, "--manifest.annotation", label,
             "--config.env", f"PATH={IMAGE_PREFIX}/bin:/usr/local/bin:/usr/bin:/bin",
             "--config.env", f"VIRTUAL_ENV={IMAGE_PREFIX}", "--config.cmd", f"{IMAGE_PREFIX}/bin/python"),
            ("umoci", "gc", "--layout", str(oci)))


def _place(step: Step, ctx: StepContext) -> None:
    """The root becomes ``out/rootfs`` (the ``dir`` form), the build log goes in, and ``out`` is renamed
    to the output (never over something that appeared there meanwhile)."""
    from envtool.steps.kernel.transaction import rename_noreplace

    job: ImageJob = step.data
    out = job.work.out
    out.mkdir(exist_ok=True)
    if "dir" in job.inputs.request.formats:
        job.work.root.rename(out / "rootfs")
    ctx.note(f"moving {out} -> {job.inputs.output}")
    shutil.copy2(ctx.log_path, out / "build.log")
    try:
        rename_noreplace(out, job.inputs.output)
    except FileExistsError:
        raise ImageError(f"--output: {job.inputs.output} appeared during the build; it was left as it is") from None


def form_steps(job: ImageJob) -> List[Step]:
    """The forms asked for (``squashfs``, ``oci``; ``dir`` is the root itself) and ``place``."""
    formats, out = job.inputs.request.formats, job.work.out
    steps = []
    if "squashfs" in formats:
        steps.append(Step(id="squashfs", title="Write the squashfs image", action=_form, data=job,
                          commands=(tuple(squashfs.mksquashfs_argv(job.work.root, out / "image.sqfs")),)))
    if "oci" in formats:
        steps.append(Step(id="oci", title="Write the OCI image layout (umoci)", commands=oci_commands(job),
                          action=_form, data=job))
    moves: List[Tuple[str, ...]] = [("#", "rename", str(job.work.root), str(out / "rootfs"))] if "dir" in formats else []
    moves += [("#", "copy", str(job.work.log), str(out / "build.log")),
              ("#", "rename", str(out), str(job.inputs.output))]
    steps.append(Step(id="place", title=f"Put the image at {job.inputs.output}", commands=tuple(moves),
                      notes=("the work directory is removed whatever happens; on a failure only the build log is "
                             "kept, beside the output",), action=_place, data=job))
    return steps


def main_steps(job: ImageJob, pip_wheel: str, count: int) -> List[Step]:
    """``base``, ``python``, ``install``, ``abi`` (when Horovod is in the lock) and ``sbom``.

    Args:
        job: the payload.
        pip_wheel: the pip wheel's file name as the plan expects it (the run uses the wheelhouse's).
        count: how many packages are installed (for the title).
    """
    from envtool.steps.image.root import base_commands, base_title

    inputs, root = job.inputs, job.work.root
    steps = [Step(id="base", title=base_title(inputs.section.base), commands=base_commands(
                 inputs.section.base, root, inputs.runtime_packages)),
             Step(id="python", title="Check the image's Python", action=_check_python, data=job, commands=(
                 tuple(in_root(root, ["/usr/bin/python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"])),)),
             Step(id="install", title=f"Install {count} packages into {IMAGE_PREFIX} (no index, hashes required)",
                  commands=install_commands(root, pip_wheel, REQUIREMENTS), action=_install, data=job,
                  notes=(f"the wheelhouse is copied to {WHEELHOUSE} in the root for the install and removed after it",
                         "the environment's create.json and lock go to /opt/env"))]
    if inputs.built:
        steps.append(Step(id="abi", title="Check that Horovod's MPI extension links the image's MPI", action=_check_abi,
                          data=job, commands=(tuple(in_root(root, ["ldd", f"{IMAGE_PREFIX}/{HOROVOD_EXT}"])),),
                          notes=(f"the site's {inputs.section.mpi_abi} ABI: {' or '.join(inputs.sonames)}",)))
    steps.append(Step(id="sbom", title=f"Compare the image's SBOM with the environment's; write {SBOM_PATH}",
                      commands=(("#", "envtool", "sbom", "--prefix", str(inputs.prefix)),
                                ("#", "envtool", "sbom", "--prefix", str(root / IMAGE_PREFIX.lstrip("/")))),
                      action=_sbom, data=job))
    return steps


def wheelhouse_step(job: ImageJob) -> Step:
    """``wheelhouse``: the locked wheels downloaded by hash, the ensurepip wheels and a reused Horovod."""
    notes = [f"seed wheel: {w}" for w in job.seeds] + [f"Horovod: the environment's wheel {w}" for w, _ in
                                                        job.horovod.reuse]
    return Step(id="wheelhouse", title=f"Download {len(job.inputs.plain)} locked wheels (hashes required)",
                commands=(download_argv(job),), progress=("downloading wheels",),
                notes=tuple(notes + list(job.horovod.notes)), action=_wheelhouse, data=job)
