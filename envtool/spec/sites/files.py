"""Reading one site file: :func:`load_site` checks it whole and gives a :class:`SiteFile`; its
sections are parsed by their own modules (batch, container, node_local, retired, detect rules,
validation)."""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from envtool.core.errors import SpecError
from envtool.spec import catalog, load, registry
from envtool.spec import model as m
from envtool.spec.sites.batch import BatchSection, parse_batch
from envtool.spec.sites.container import ContainerSection, parse_container
from envtool.spec.sites.detect_rules import DetectRule, parse_detect
from envtool.spec.sites.fabric import FabricVar, parse_fabric
from envtool.spec.sites.gpu import SiteGPU, parse_gpu
from envtool.spec.sites.launch import LaunchSection, parse_launch
from envtool.spec.sites.node_local import NodeLocal, parse_node_local
from envtool.spec.sites.reader import check_source
from envtool.spec.sites.retired import Retirement, parse_retired
from envtool.spec.sites.validation import Reference, ValidateSection, parse_references, parse_validate
from envtool.spec.yamlload import LineDict, load_yaml

SITE_FILE_KEYS = ("name", "summary", "sources", "platforms", "scheduler", "launcher", "gpus_per_node", "modules",
                  "env", "notes", "stacks", "batch", "build_caches", "build_modules", "build_cache_group", "detect",
                  "clone_prefix", "validation", "retired", "node_local", "container", "gpu", "launch", "fabric")
STACK_KEYS = ("spec", "modules", "base_env", "launcher", "env", "mark", "source", "note", "warning", "overrides")
BUNDLED_SITES = ("summit", "perlmutter", "polaris", "bede", "theta", "frontier", "alps", "lumi", "aurora", "local")


@dataclass(frozen=True)
class StackMapping:
    """One entry of a site file's ``stacks``.

    Attributes:
        key: the spec name or glob it was written under.
        modules: modules loaded after the site's own, in order.
        base_env: the read-only environment ``--clone`` copies (conda env name or prefix), or None.
        launcher: a launcher replacing the site's, or None.
        env: variables added to the site's.
        mark: provenance mark of the mapping (``V``, ``V2``, ``I``) or None.
        source: id in the site file's ``sources``, or None.
        note: free text, or None.
        overrides: partial spec mapping merged over the spec (raw YAML mapping).
        line: line of the entry in the site file.
        spec: for a site variant, the spec it resolves as (its key is then the variant's name); else None.
        warning: what users of this stack at this site must know (``show`` and ``doctor`` print it), or None.
        env_paths: search-path entries added, ``(VAR, "prepend"|"append", entry)`` in order.
    """

    key: str
    modules: Tuple[str, ...] = ()
    base_env: Optional[str] = None
    launcher: Optional[str] = None
    env: Tuple[Tuple[str, str], ...] = ()
    mark: Optional[str] = None
    source: Optional[str] = None
    note: Optional[str] = None
    overrides: Optional[LineDict] = None
    line: Optional[int] = None
    spec: Optional[str] = None
    warning: Optional[str] = None
    env_paths: Tuple[Tuple[str, str, str], ...] = ()


@dataclass(frozen=True)
class SiteFile:
    """A parsed site file (see the module docstring for the format).

    Attributes:
        name: site id.
        path: the file (display string).
        summary: one line.
        sources: id → URL or document name.
        platforms: conda platforms the site's nodes run.
        scheduler: ``slurm``, ``lsf``, ``pbs`` or None.
        launcher: launcher template (``{ranks}`` is replaced), or None.
        gpus_per_node: GPUs on one node.
        modules: modules loaded for every stack.
        env: variables set for every stack.
        notes: free text.
        stacks: the per-spec mappings, in file order.
        batch: the job-script layout (:class:`BatchSection`).
        build_caches: read-only Horovod wheel cache roots (absolute paths or ``~/…``).
        build_modules: modules that provide a C++ compiler, CMake and MPI for a Horovod compile
            (named in the fix when ``plan``/``create`` finds one missing).
        build_cache_group: the group trusted to write the site's wheel caches (a group name), or
            None: a wheel cache writable by a group is not used.
        detect: how to recognise the site (:class:`DetectRule`, any matching), possibly empty.
        clone_prefix: the default prefix of ``create --clone`` here (``$VAR`` expanded,
            ``{spec}`` replaced by the spec name), or None.
        env_paths: search-path entries added for every stack, ``(VAR, "prepend"|"append", entry)``.
        node_local: the node-local storage (:class:`NodeLocal`), or None when the file does not say.
        references: ``validation.references`` (:class:`Reference`), in file order, possibly empty.
        retired: a :class:`Retirement` when the system is decommissioned, else None.
        container: how the site runs images (:class:`ContainerSection`), or None when the file
            does not say.
        validate: the ``validation`` section's fabric and allreduce-sweep references
            (:class:`ValidateSection`).
        gpu: the GPU nodes' hardware, driver and communication stack (:class:`SiteGPU`), or None
            when the file does not say.
        launch: the default launch of DDP scripts, the rendezvous host's name and the GPU order
            (:class:`LaunchSection`), or None when the file does not say.
        fabric: the interconnect's variables (:class:`FabricVar`), in file order, possibly empty.
    """

    name: str
    path: str
    summary: str = ""
    sources: Tuple[Tuple[str, str], ...] = ()
    platforms: Tuple[str, ...] = ("linux-64",)
    scheduler: Optional[str] = None
    launcher: Optional[str] = None
    gpus_per_node: int = 0
    modules: Tuple[str, ...] = ()
    env: Tuple[Tuple[str, str], ...] = ()
    notes: str = ""
    stacks: Tuple[StackMapping, ...] = ()
    batch: BatchSection = BatchSection()
    build_caches: Tuple[str, ...] = ()
    build_modules: Tuple[str, ...] = ()
    build_cache_group: Optional[str] = None
    detect: Tuple[DetectRule, ...] = ()
    clone_prefix: Optional[str] = None
    env_paths: Tuple[Tuple[str, str, str], ...] = ()
    node_local: Optional[NodeLocal] = None
    references: Tuple[Reference, ...] = ()

    def references_for(self, nodes: int) -> Tuple[Reference, ...]:
        """The references of ``validation.references`` for ``nodes`` nodes (possibly none)."""
        return tuple(r for r in self.references if r.nodes == nodes)
    retired: Optional[Retirement] = None
    container: Optional[ContainerSection] = None
    validate: ValidateSection = None  # type: ignore[assignment]
    gpu: Optional[SiteGPU] = None
    launch: Optional[LaunchSection] = None
    fabric: Tuple[FabricVar, ...] = ()

    def mapping_for(self, spec_name: str) -> Optional[StackMapping]:
        """The stack entry for ``spec_name``: exact key first, then the first matching glob; or None.

        Site variants (entries with ``spec:``) match only their own name, never a glob.
        """
        for s in self.stacks:
            if s.key == spec_name:
                return s
        for s in self.stacks:
            if s.spec is None and any(c in s.key for c in "*?[") and fnmatch.fnmatchcase(spec_name, s.key):
                return s
        return None

    def variants(self) -> Tuple[StackMapping, ...]:
        """The site variants (entries with ``spec:``), in file order."""
        return tuple(s for s in self.stacks if s.spec is not None)


def available() -> Dict[str, Path]:
    """Map site name → file: ``$ENVTOOL_SITE_PATH`` directories first, then the bundled ``sites/``."""
    return catalog.available("sites", "ENVTOOL_SITE_PATH")


def find(name: str) -> Path:
    """The file of site ``name`` (a name, or a path when it contains ``/`` or ends in ``.yaml``).

    Raises:
        SpecError: no such site (the message lists close names).
    """
    return catalog.find_named(name, available(), "site", "or give --site-file", list_known=True)


def load_site(path: Path) -> SiteFile:
    """Read and check one site file.

    Args:
        path: the file.
    Returns:
        the :class:`SiteFile`.
    Raises:
        SpecError: unknown keys (with a "did you mean"), wrong types, unknown platforms or
            marks, a ``source`` that is not in ``sources``, bad ``overrides`` — naming the file,
            line and field.
    """
    spath = str(path)
    raw = load_yaml(Path(path))
    r = load._Reader(spath, raw, "")
    r.check_keys(SITE_FILE_KEYS)
    sources = load._sources(r)
    source_ids = [k for k, _ in sources]
    platforms = _platforms(r)
    # the names come from the one registry the scheduler modules are registered in (envtool.spec.registry)
    scheduler = r.choice("scheduler", registry.site_scheduler_names())
    stacks = _stacks(spath, r, source_ids)
    batch = parse_batch(spath, raw, source_ids)
    build_caches, build_cache_group = _build_caches(r)
    detect = parse_detect(spath, raw, source_ids)
    clone_prefix = r.str("clone_prefix")
    if clone_prefix is not None and "{spec}" not in clone_prefix:
        raise r.error("clone_prefix", "a path template naming {spec} (e.g. $HOME/.conda/envs/{spec})",
                      got=clone_prefix)
    env, env_paths = r.env_map("env")
    retired = parse_retired(spath, raw, sources)
    gpus_per_node = r.int("gpus_per_node", 0)
    return SiteFile(name=r.str("name") or Path(path).stem, path=spath, summary=r.str("summary") or "",
                    sources=sources, platforms=tuple(platforms), scheduler=None if scheduler == "none" else scheduler,
                    launcher=r.str("launcher"), gpus_per_node=gpus_per_node,
                    modules=r.str_list("modules"), env=env, notes=r.str("notes") or "",
                    stacks=stacks, batch=batch, build_caches=build_caches,
                    build_modules=r.str_list("build_modules"), build_cache_group=build_cache_group, detect=detect,
                    clone_prefix=clone_prefix, env_paths=env_paths, references=parse_references(spath, raw, source_ids),
                    retired=retired, validate=parse_validate(spath, raw),
                    node_local=parse_node_local(spath, raw, source_ids),
                    container=parse_container(spath, raw, source_ids),
                    gpu=parse_gpu(spath, raw, source_ids),
                    launch=parse_launch(spath, raw, source_ids, gpus_per_node),
                    fabric=parse_fabric(spath, raw, source_ids))


def _platforms(r) -> Tuple[str, ...]:
    """``platforms``: conda platforms (default ``linux-64``)."""
    platforms = r.str_list("platforms") or ("linux-64",)
    for p in platforms:
        if p not in m.PLATFORMS:
            raise r.error("platforms", "conda platforms drawn from " + ", ".join(m.PLATFORMS), got=p)
    return tuple(platforms)


def _build_caches(r) -> Tuple[Tuple[str, ...], Optional[str]]:
    """``(build_caches, build_cache_group)``, checked."""
    build_caches = r.str_list("build_caches")
    for c in build_caches:
        if not (c.startswith("/") or c.startswith("~")):
            raise r.error("build_caches", "absolute directories (or ~/…) of published wheel caches", got=c)
    group = r.str("build_cache_group")
    if group is not None and not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}", group):
        raise r.error("build_cache_group", "a group name (letters, digits, '_', '.', '-')", got=group)
    return tuple(build_caches), group


def _stacks(spath: str, r, source_ids: List[str]) -> Tuple[StackMapping, ...]:
    """``stacks``: the per-spec entries, in file order."""
    stacks_raw = r.get("stacks") or LineDict()
    if not isinstance(stacks_raw, dict):
        raise r.error("stacks", "a mapping of spec names (or globs) to stack entries", got=stacks_raw)
    return tuple(_stack_entry(spath, stacks_raw, key, source_ids) for key in stacks_raw)


def _stack_entry(spath: str, stacks_raw, key, source_ids: List[str]) -> StackMapping:
    """One entry of ``stacks`` (SpecError naming ``stacks.<key>.<field>``)."""
    s = load._Reader(spath, stacks_raw[key], f"stacks.{key}", line=stacks_raw.line_of(key)
                     if isinstance(stacks_raw, LineDict) else None)
    s.check_keys(STACK_KEYS)
    mark = s.get("mark")
    if mark is not None and mark not in m.MARKS:
        raise s.error("mark", "one of " + ", ".join(m.MARKS), got=mark)
    source = s.str("source")
    check_source(s, "source", source, source_ids)
    variant_of = s.str("spec")
    if variant_of is not None and any(c in str(key) for c in "*?["):
        raise s.error("spec", "no glob in the key of a site variant (an entry with 'spec:')", got=str(key))
    overrides = _overrides(spath, s, key)
    stack_env, stack_env_paths = s.env_map("env")
    return StackMapping(key=str(key), modules=s.str_list("modules"), base_env=s.str("base_env"),
                        launcher=s.str("launcher"), env=stack_env, mark=mark, source=source,
                        note=s.str("note"), overrides=overrides, line=s.line,
                        spec=variant_of, warning=s.str("warning"), env_paths=stack_env_paths)


def _overrides(spath: str, s, key) -> Optional[Any]:
    """A stack entry's ``overrides``: a partial spec, type-checked on its own so errors name this file."""
    overrides = s.get("overrides")
    if overrides is None:
        return None
    if not isinstance(overrides, dict):
        raise s.error("overrides", "a partial spec mapping", got=overrides)
    for banned in ("name", "extends", "abstract", "site"):
        if banned in overrides:
            raise SpecError(spath, f"stacks.{key}.overrides.{banned}",
                            "spec fields other than name, extends, abstract and site "
                            "(site fields belong in the stack entry)",
                            line=overrides.line_of(banned) if isinstance(overrides, LineDict) else None)
    load.build_spec(spath, overrides, name=str(key), partial=True)
    return overrides


def retirement(name: str) -> Optional[Retirement]:
    """The :class:`Retirement` of site ``name`` (a known site name), or None when the site is not
    retired, unknown, or its file does not load (the commands that load it report that)."""
    if not name:
        return None
    try:
        path = available().get(name)
        return load_site(path).retired if path is not None else None
    except (SpecError, OSError):
        return None
