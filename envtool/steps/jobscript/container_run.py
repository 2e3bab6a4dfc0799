"""``jobscript --image``: a job script whose ranks run in an image through the site's container
runtime (issue 29).

The site file's ``container`` section (:class:`envtool.spec.sites.ContainerSection`) says which
runtime the site uses and with which site modules; each rank's command becomes the launcher's words
(``srun --mpi=`` from ``container.mpi``, else ``batch.mpi``), then the runtime's words
(:func:`envtool.scheduler.containers.wrap`), then the command. The image carries the environment
(at :data:`envtool.scheduler.containers.IMAGE_ENV_PREFIX`), so the script loads no module of the
stack and activates no environment; the site's ``batch.env`` and the spec's ``env`` are still
exported in the batch shell (Shifter, Apptainer and Charliecloud pass the host's environment into
the container; podman-hpc passes what its modules name).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Sequence, Tuple

from envtool.core.errors import SpecError, UsageError
from envtool.core.inputs import check_input
from envtool.scheduler import containers
from envtool.scheduler import launcher as launcher_mod
from envtool.scheduler.model import LaunchStep
from envtool.spec.sites import ContainerSection
from envtool.steps.jobscript.target import Target, job_env


def container_of(site) -> ContainerSection:
    """The ``container`` section of ``site`` (a :class:`envtool.spec.sites.SiteFile`).

    Raises:
        SpecError: the site file has none, or its ``container.modules`` names a module the runtime
            has no flag for (exit 2; names the file and the field).
    """
    section = getattr(site, "container", None)
    if section is None:
        raise SpecError(site.path, "container", "a container section (runtime: shifter|podman-hpc|apptainer|"
                        "charliecloud, source: ID) saying how the site runs images",
                        hint=f"site {site.name} does not say how its ranks run an image, so --image cannot "
                             "write its run line")
    rt = containers.runtime(section.runtime)
    if rt.modules is not None:
        unknown = [m for m in section.modules if m not in rt.modules]
        if unknown:
            raise SpecError(site.path, "container.modules", f"modules of {rt.name}: some of "
                            + ", ".join(rt.modules) + f" ({rt.source})", got=", ".join(unknown))
    return section


def resolve_image_target(spec: Optional[str] = None, site: Optional[str] = None, site_file: Optional[str] = None,
                         retired_ok: bool = False) -> Tuple[Target, ContainerSection]:
    """The job's :class:`~envtool.steps.jobscript.Target` when its ranks run in an image, and the
    site's container section.

    Args:
        spec: ``--spec`` (its ``env`` and start method are exported), or None.
        site: ``--site`` name; default the spec's own site, else ``local``.
        site_file: ``--site-file`` path (wins over ``site``).
        retired_ok: allow a site whose file says ``retired``.
    Returns:
        ``(target, section)``: the target has no prefix, no module and no module loads.
    Raises:
        SpecError: a bad or missing site file or spec, or a site file without ``container`` (exit 2).
        UsageError: a retired site without ``retired_ok``.
    """
    from envtool.spec import catalog, sites

    if site_file:
        check_input(Path(site_file), "--site-file")
        if not Path(site_file).is_file():
            raise SpecError(site_file, "(site file)", "an existing site file")
        sf = sites.load_site(Path(site_file))
    else:
        if site is None and spec:
            site = catalog.load_spec(spec).site.name
        sf = sites.load_site(sites.find(site or "local"))
    if sf.retired is not None and not retired_ok:
        raise UsageError(f"site {sf.name} is retired ({sf.retired.describe()}): a job script for it cannot run "
                         "there; pass --retired-ok to write one anyway (to read or reproduce older work)")
    section = container_of(sf)
    resolved_spec = None
    mapping = None
    if spec:
        res = sites.resolve_full(spec, site_file=str(sf.path))
        resolved_spec, mapping = res.spec, res.mapping
    env, env_paths = job_env(sf, resolved_spec, sf.env, ())
    target = Target(site=sf, spec=resolved_spec, prefix=None, module=None, modules=(), env=env,
                    env_paths=env_paths, launcher=launcher_mod.for_site(sf, mapping),
                    python=f"{containers.IMAGE_ENV_PREFIX}/bin/python")
    return target, section


def image_path(section: ContainerSection, image: str, must_exist: bool = False) -> str:
    """``image`` as the job sees it: for a runtime that runs a path (its ``path_image``:
    Charliecloud, Apptainer) the absolute path (a job script changes directory before its steps),
    else the name as given (Shifter and podman-hpc name images from their own stores).

    Raises:
        UsageError: ``must_exist`` and the path does not exist here (exit 2, names ``--image``).
    """
    known = section.runtime in containers.REGISTRY
    if not known or not containers.runtime(section.runtime).path_image or not image or image.startswith("-"):
        return image
    path = os.path.abspath(os.path.expanduser(image))
    if must_exist and not os.path.exists(path):
        raise UsageError(f"--image: {image}: no such image here (a {section.runtime} image is a directory or "
                         "file: envtool image ... --output DIR makes DIR/rootfs and DIR/image.sqfs)")
    return path


def image_step(target: Target, section: ContainerSection, image: str, command: Sequence[str],
               binds: Sequence[str] = ()) -> LaunchStep:
    """The launcher step that runs ``command`` on every rank inside ``image``.

    Args:
        target: the job's target (its site and launcher).
        section: the site's container section.
        image: the image as the runtime names it.
        command: the rank's command (words).
        binds: extra ``--bind`` directories (``SRC`` or ``SRC:DST``, absolute).
    Returns:
        a :class:`~envtool.scheduler.model.LaunchStep` whose words are the runtime's, then the
        command; its ``mpi`` is ``container.mpi`` (None: the site's ``batch.mpi``).
    Raises:
        UsageError: see :func:`envtool.scheduler.containers.wrap`.
        SpecError: ``container.mpi`` on a site whose launcher is not Slurm's srun (``--mpi=`` is
            an srun option, srun(1)); names the file and field.
    """
    launcher = target.launcher
    if section.mpi is not None and getattr(launcher, "program", None) != "srun":
        site = target.site
        raise SpecError(getattr(site, "path", None), "container.mpi",
                        "no value: srun --mpi= is a Slurm srun option, and this site launches ranks with "
                        f"{getattr(launcher, 'program', '?')}", got=section.mpi)
    return LaunchStep(tuple(containers.wrap(section, image_path(section, image), command, binds)), mpi=section.mpi)

def comment(site, section: ContainerSection, image: str) -> str:
    """The job script's header line that says the ranks run in ``image`` and where the run line
    comes from (the site file's ``container.source``)."""
    src = dict(site.sources).get(section.source, "")
    where = f"{section.source}: {' '.join(src.split())}" if src.strip() else section.source
    return (f"ranks run in image {image} through {section.runtime} ({containers.runtime(section.runtime).source}); "
            f"site {site.name}'s container section: {where}")
