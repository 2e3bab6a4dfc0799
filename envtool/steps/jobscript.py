"""The ``jobscript`` step: a batch script for a site's scheduler, from an environment (a prefix or
a module) and a layout. Composes :mod:`envtool.scheduler` (directives, launcher) with the spec and
site file (modules, runtime variables, start method).

What goes in, in order: the site's directives for the layout; ``cd`` to the working directory;
``module use``/``module load`` of the site's modules, the stack's, then the environment's own
module; the environment's activation (for ``--prefix``); the variables — ``OMP_NUM_THREADS``
from the CPUs per rank, then the interface variables of the site's ``batch.interface``
(:data:`envtool.scheduler.model.INTERFACE_VARIABLES`, each with a comment naming the file), the
site's ``env``, its ``batch.env``, the spec's ``env`` (a later one wins), and
``ENVTOOL_START_METHOD`` where the spec expects a DataLoader start method; then the launcher lines.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Optional, Sequence, Tuple

from envtool.core.errors import SpecError, UsageError
from envtool.core.prefix import PYTHON, PrefixData
from envtool.scheduler import launcher as launcher_mod
from envtool.scheduler.model import INTERFACE_VARIABLES, JobRequest, LaunchStep, parse_time
from envtool.scheduler.script import activation_lines, make_layout

if TYPE_CHECKING:
    from envtool.scheduler.launcher import Launcher
    from envtool.scheduler.stage import Stage
    from envtool.spec.model import Spec
    from envtool.spec.sites import SiteFile


@dataclass(frozen=True)
class Target:
    """The environment a job runs in, resolved for a site.

    Attributes:
        site: the :class:`envtool.spec.sites.SiteFile`.
        spec: the spec resolved for the site (:class:`envtool.spec.model.Spec`), or None when the
            environment names none and ``--spec`` was not given.
        prefix: the environment's prefix, or None (a module).
        module: ``NAME/VERSION`` of the environment's module, or None.
        modules: every module loaded, in order.
        env: variables exported, in order (later entries already merged over earlier ones).
        env_paths: search-path entries added after them, ``(VAR, "prepend"|"append", entry)`` in order
            (the site's, its ``batch.env``'s, the spec's).
        launcher: the site's :class:`envtool.scheduler.launcher.Launcher`.
        kind: ``venv`` or ``conda`` where ``prefix`` is not on this machine (a staged copy), else None.
        stage: the :class:`envtool.scheduler.stage.Stage` that puts ``prefix`` on each node, or None.
        cpu_only: why the environment (for a staged one, the pack's source on this machine) computes
            on CPUs only (:func:`envtool.checks.gpu.cpu_only_build`: ``torch 2.13.0+cpu``), else None.
    """

    site: SiteFile
    spec: Optional[Spec]
    prefix: Optional[Path]
    module: Optional[str]
    modules: Tuple[str, ...] = ()
    env: Tuple[Tuple[str, str], ...] = ()
    launcher: Optional[Launcher] = None
    python: str = "python"
    notes: Tuple[str, ...] = field(default=())
    env_paths: Tuple[Tuple[str, str, str], ...] = ()
    kind: Optional[str] = None
    stage: Optional[Stage] = None
    cpu_only: Optional[str] = None


def spec_of_prefix(prefix: Path) -> Optional[str]:
    """The spec an environment was created from (``P/.envtool/create.json`` ``spec``), or None."""
    meta = Path(prefix) / ".envtool" / "create.json"
    try:
        return json.loads(meta.read_text()).get("spec") or None
    except (OSError, ValueError, AttributeError):
        return None


def resolve_target(prefix: Optional[str] = None, module: Optional[str] = None, spec: Optional[str] = None,
                   site: Optional[str] = None, site_file: Optional[str] = None, here: bool = True, retired_ok: bool = False,
                   platform_mismatch_ok: bool = False) -> Target:
    """Find the site file, the spec and what the job loads and exports.

    Args:
        prefix: ``--prefix`` (an environment directory), or None.
        module: ``--module NAME[/VERSION]``, or None (one of the two is needed).
        spec: ``--spec``; default the spec recorded in the prefix.
        site: ``--site`` name; default the spec's own site, else ``local``.
        site_file: ``--site-file`` path (wins over ``site``).
        here: the prefix must be an environment on this machine (False: a packed one's source,
            which may be gone).
        retired_ok: ``--retired-ok``: a site whose file says ``retired`` is allowed.
        platform_mismatch_ok: ``--platform-mismatch-ok``: the environment's recorded spec may be for
            another platform than the site's nodes (its variables and start method are kept; the
            site's modules are loaded).
    Returns:
        a :class:`Target`.
    Raises:
        UsageError: neither or both of prefix/module; no such prefix; a retired site without
            ``retired_ok``; the environment's spec runs on none of the site's platforms without
            ``platform_mismatch_ok`` (exit 2, naming both).
        SpecError: a bad or missing site file or spec (exit 2).
    """
    from envtool.spec import catalog, sites

    if bool(prefix) == bool(module):
        raise UsageError("give one of --prefix P or --module NAME/VERSION")
    pfx = None
    if prefix:
        pfx = Path(prefix).expanduser().absolute()
        if here and not PrefixData(pfx).python.exists():
            raise UsageError(f"--prefix {prefix}: not an environment (no bin/python)")
    spec_name = spec or (spec_of_prefix(pfx) if pfx else None)
    resolved_spec = None
    mapping = None
    if site_file:
        if not Path(site_file).is_file():
            raise SpecError(site_file, "(site file)", "an existing site file")
        sf = sites.load_site(Path(site_file))
    else:
        if site is None and spec_name:
            try:
                site = catalog.load_spec(spec_name).site.name
            except SpecError:
                if spec:
                    raise
                spec_name = None  # the recorded spec is gone: go on without it
        sf = sites.load_site(sites.find(site or "local"))
    if sf.retired is not None and not retired_ok:
        raise UsageError(f"site {sf.name} is retired ({sf.retired.describe()}): a job script for it cannot run "
                         "there; pass --retired-ok to write one anyway (to read or reproduce older work)")
    mismatch = False
    if spec_name:
        try:
            res = sites.resolve_full(spec_name, site_file=sf.path)
        except SpecError as exc:
            if exc.field == "platforms" and not spec:
                try:
                    own = catalog.load_spec(spec_name)
                except SpecError:
                    own = None
                if own is not None:
                    message = (f"the environment {pfx} was created from spec {spec_name}, which is for "
                               f"{', '.join(own.platforms)}; site {sf.name} runs {', '.join(sf.platforms)}")
                    if not platform_mismatch_ok:
                        raise UsageError(f"{message}: its programs would not run on the site's nodes; give an "
                                         "environment made for the site, or pass --platform-mismatch-ok to write "
                                         "the script anyway") from None
                    resolved_spec, mismatch = own, True
            elif spec:
                raise
            res = None
        if res is not None:
            resolved_spec, mapping = res.spec, res.mapping
    modules = list(resolved_spec.site.modules if resolved_spec is not None and not mismatch else sf.modules)
    if module:
        if module.startswith("-") or not module.strip():
            raise UsageError(f"--module {module!r}: expected NAME/VERSION")
        modules.append(module)
    spec_site = resolved_spec.site if resolved_spec is not None and not mismatch else None
    env, env_paths = job_env(sf, resolved_spec, spec_site.env if spec_site is not None else sf.env,
                             spec_site.env_paths if spec_site is not None else sf.env_paths)
    from envtool.checks.gpu import cpu_only_build

    return Target(site=sf, spec=resolved_spec, prefix=pfx, module=module, modules=tuple(modules),
                  env=env, env_paths=env_paths, launcher=launcher_mod.for_site(sf, mapping),
                  python=str(PrefixData(pfx).python) if pfx else "python",
                  cpu_only=cpu_only_build(pfx) if pfx is not None else None)


def job_env(sf, resolved_spec, site_env, site_env_paths):
    """What a job exports, in order: the site's (or the spec's own site's) variables, then the
    site file's ``batch.env``, then the spec's ``env`` and its DataLoader start method
    (``ENVTOOL_START_METHOD``); and the search-path entries in the same order.

    Args:
        sf: the :class:`~envtool.spec.sites.SiteFile`.
        resolved_spec: the resolved spec, or None.
        site_env: ``(VAR, value)`` pairs of the site; site_env_paths: its ``(VAR, how, entry)``.
    Returns:
        ``((VAR, value), ...)`` (later wins) and ``((VAR, "prepend"|"append", entry), ...)``.
    """
    env: Dict[str, str] = dict(site_env)
    env.update(sf.batch.env)
    if resolved_spec is not None:
        env.update(resolved_spec.env)
        if resolved_spec.expect.dataloader_start_method:
            env["ENVTOOL_START_METHOD"] = resolved_spec.expect.dataloader_start_method
    env_paths = tuple(site_env_paths) + sf.batch.env_paths + (resolved_spec.env_paths if resolved_spec is not None
                                                              else ())
    return tuple(env.items()), env_paths


def resolve_staged(stage_file: str, prefix: Optional[str] = None, spec: Optional[str] = None,
                   site: Optional[str] = None, site_file: Optional[str] = None,
                   token: Optional[str] = None, retired_ok: bool = False,
                   platform_mismatch_ok: bool = False) -> Target:
    """The :class:`Target` of a job that stages the pack ``stage_file`` (``envtool pack``) to the
    site's node-local storage and runs from there (issue 25).

    The spec and site are found as for the pack's source environment (:func:`resolve_target`);
    the target's prefix is then the node-local copy: ``NODE_LOCAL/envtool-NAME-TOKEN`` for a tar, the
    image's mount point (``envtool pack --dest-prefix``) for a squashfs image.

    Args:
        stage_file: the pack file (on a file system the compute nodes mount).
        prefix: ``--prefix``: the environment the pack was made from (its lockfile must match the pack's).
        spec, site, site_file: as :func:`resolve_target`.
        token: the node-local directory's distinguishing part (default: random, 8 hex digits).
        retired_ok, platform_mismatch_ok: as :func:`resolve_target`.
    Returns:
        the target, with ``stage`` set.
    Raises:
        UsageError: not a pack, a pack of another environment than ``prefix``, a squashfs image whose
            mount point is not under the site's node-local path.
        SpecError: the site file has no ``node_local`` (names the file and field), or its path names
            a variable this shell does not set.
    """
    import dataclasses
    import os
    import shlex
    import re
    import secrets

    from envtool.scheduler.stage import Stage
    from envtool.steps import pack as pack_mod
    from envtool.validate import preflight as pf

    file = Path(stage_file).absolute()
    manifest = pack_mod.read_manifest(file)
    source = Path(str(manifest.get("source_prefix") or "/"))
    lock = str(manifest.get("lock_sha256") or "")
    if prefix:
        mine = pf.lock_sha256(Path(prefix).absolute())
        if mine != lock:
            raise UsageError(f"--stage {stage_file}: packed from an environment whose lockfile sha256 is {lock[:12]}, "
                             f"but --prefix {prefix} has {(mine or 'none')[:12]}: pack it again "
                             f"(envtool pack --prefix {shlex.quote(str(prefix))} --format {manifest['format']})")
        source = Path(prefix).absolute()
    target = resolve_target(str(source), None, spec, site, site_file, here=False, retired_ok=retired_ok,
                            platform_mismatch_ok=platform_mismatch_ok)
    sf = target.site
    nl = getattr(sf, "node_local", None)
    if nl is None:
        raise SpecError(sf.path, "node_local", "the compute nodes' local storage for --stage (node_local: {path: DIR, "
                        "source: ID})", hint=f"site {sf.name} does not say where a job may put an environment on a node")
    unset = [v for v in re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", nl.path) if not os.environ.get(v)]
    if unset:
        raise SpecError(sf.path, "node_local.path", "a path whose variables are set where the job script is written",
                        got=nl.path, hint=f"${unset[0]} is not set or empty here; the job runs as the user who writes "
                                          f"it: set it, or give a site file with the path spelled out")
    root = os.path.expandvars(nl.path)
    root = root.rstrip("/") or "/"
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", source.name or "env")[:64]
    token = token or secrets.token_hex(4)
    fmt = manifest["format"]
    if fmt == "tar":
        staged = f"{root}/envtool-{name}-{token}"
        copy = staged + ".tar"
    else:
        staged = os.path.normpath(str(manifest.get("dest_prefix") or ""))
        if not staged.startswith(root.rstrip("/") + "/"):
            raise UsageError(f"--stage {stage_file}: a squashfs image mounted at {staged or '?'}, which is not under "
                             f"site {sf.name}'s node-local storage {root} (node_local.path in {sf.path}); pack it for "
                             f"a mount point there: envtool pack --prefix {shlex.quote(str(source))} --format squashfs "
                             f"--dest-prefix {shlex.quote(f'{root}/{name}')}")
        copy = f"{root}/envtool-{name}-{token}.squashfs"
    src = dict(sf.sources).get(nl.source, "")
    stage = Stage(file=str(file), format=fmt, kind=str(manifest["kind"]), prefix=staged, copy=copy,
                  unpack=tuple(str(w) for w in manifest.get("unpack") or ()) if fmt == "tar" else (),
                  lock_sha256=lock, unpacked_kib=int(manifest.get("unpacked_kib") or 0), node_local=nl.path,
                  source=f"{nl.source}: {src.split()[0] if '://' in src.split()[0] else ' '.join(src.split())[:80]}"
                  if src.split() else nl.source)
    return dataclasses.replace(target, prefix=Path(staged), python=f"{staged}/{PYTHON}", kind=stage.kind,
                               stage=stage)


def build_request(target: Target, nodes: int, steps: Sequence[LaunchStep], ranks_per_node: Optional[int] = None,
                  gpus_per_rank: Optional[int] = None, time: Optional[str] = None, account: Optional[str] = None,
                  queue: Optional[str] = None, job_name: Optional[str] = None, output: Optional[str] = None,
                  workdir: Optional[str] = None, extra_env: Sequence[Tuple[str, str]] = ()) -> JobRequest:
    """The :class:`JobRequest` for ``target`` (see the module docstring for what goes in).

    Raises:
        UsageError: a bad ``--time`` or count.
        SpecError: the site file lacks what the layout needs (names the field), among it
            ``batch.cpus_per_node`` (the CPUs per rank must be known).
    """
    site = target.site
    layout = make_layout(site, nodes, ranks_per_node, gpus_per_rank)
    if not layout.cpus_per_rank:
        from envtool.scheduler.model import missing

        raise missing(site, "batch.cpus_per_node", "the CPUs a job may use on one node (an integer; 'auto' for "
                      "this machine's)", "the job script's CPUs per rank and OMP_NUM_THREADS come from it (a "
                      "script with an unknown CPU count would leave the binding to chance)")
    env: Dict[str, str] = {}
    notes: Dict[str, str] = {}
    if layout.cpus_per_rank:
        env["OMP_NUM_THREADS"] = str(layout.cpus_per_rank)
    iface = getattr(site.batch, "interface", None)
    if iface:
        for k in INTERFACE_VARIABLES:
            env[k] = iface
            notes[k] = f"batch.interface in {site.path}"
    for k, v in list(target.env) + list(extra_env):
        env.pop(k, None)
        env[k] = v
        notes.pop(k, None)   # the site's or spec's own env wins, without the interface's note
    comments = []
    if target.spec is not None and target.spec.expect.dataloader_start_method:
        comments.append(f"spec {target.spec.name} expects DataLoader(multiprocessing_context="
                        f"{target.spec.expect.dataloader_start_method!r}); ENVTOOL_START_METHOD names it")
    seconds = parse_time(time) if time else None
    if seconds is None and site.batch.time and site.scheduler:
        seconds = parse_time(site.batch.time)
        comments.append(f"wall-clock limit {site.batch.time}: the site's default (batch.time in {site.path}); "
                        "--time sets another")
    return JobRequest(site=site, layout=layout, steps=tuple(steps), seconds=seconds,
                      account=account, queue=queue, job_name=job_name, output=output,
                      modules=target.modules,
                      activation=activation_lines(target.prefix, target.kind) if target.prefix else (),
                      env=tuple(env.items()), env_paths=target.env_paths, workdir=workdir,
                      launcher=target.launcher,
                      comments=tuple(comments), env_notes=tuple(notes.items()), stage=target.stage,
                      extra_directives=tuple(site.node_local.directives)
                      if target.stage is not None and site.node_local is not None else ())


def gpu_mismatch(target: Target, req: JobRequest) -> Optional[str]:
    """A warning when a CPU-only environment runs in a job that asks for GPUs or loads GPU modules
    (issue 38: a CPU venv wrapped in ``module load cudnn nccl`` and a 4-GPU request for
    ``--spec perlmutter-horovod``), else None.

    Not an error: the script runs (the ranks compute on the nodes' CPUs), as a CPU smoke test on a
    GPU partition may mean to; it costs GPU allocation the ranks never use.

    Args:
        target: the job's :class:`Target` (its ``cpu_only`` evidence).
        req: the :class:`JobRequest` (its layout's GPUs and the modules it loads).
    Returns:
        one line naming the environment and its evidence, the GPUs asked, the GPU modules and where
        they come from, and what to do; or None.
    """
    from envtool.checks.gpu import gpu_modules

    if not target.cpu_only:
        return None
    lay = req.layout
    gpus = lay.ranks_per_node * lay.gpus_per_rank
    mods = gpu_modules(req.modules)
    if not gpus and not mods:
        return None
    asks, cpu_job = [], []
    if gpus:
        asks.append(f"requests {gpus} GPU{'s' if gpus > 1 else ''} per node ({lay.ranks_per_node} "
                    f"rank{'s' if lay.ranks_per_node > 1 else ''} x {lay.gpus_per_rank} GPU"
                    f"{'s' if lay.gpus_per_rank > 1 else ''})")
        cpu_job.append("--gpus-per-rank 0")
    if mods:
        spec = target.spec
        from_spec = spec is not None and set(mods) <= set(spec.site.modules)
        whose = f"spec {spec.name}'s site modules" if spec is not None and from_spec else f"site {target.site.name}'s modules"
        asks.append(f"loads {' '.join(mods)} ({whose})")
        cpu_job.append("the --spec of a CPU stack" if from_spec else "a --site-file without them")
    where = str(target.prefix) if target.stage is None else f"{target.stage.file} (staged to {target.prefix})"
    return (f"the environment at {where} is CPU-only ({target.cpu_only}) but the job script "
            f"{' and '.join(asks)}: the ranks will not use the GPUs; use an environment made from a GPU spec, "
            f"or for a CPU job give {' and '.join(cpu_job)}")


def render(req: JobRequest) -> str:
    """The script text (see :func:`envtool.scheduler.script.render`)."""
    from envtool import __version__
    from envtool.scheduler.script import render as _render

    return _render(req, version=__version__)
