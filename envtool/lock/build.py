"""Make a :class:`~envtool.lock.model.LockData` from a spec (a solve) or from a prefix (a snapshot)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from envtool.core.errors import EnvtoolError, UsageError
from envtool.lock.model import BaseSet, LockData, LockedPackage
from envtool.spec.model import Spec
from envtool.core.prefix import PrefixData


def pip_requirements(spec: Spec) -> List[str]:
    """What pip installs from the index for ``spec``, as the engines' ``pip-install`` steps do: the
    build backend ``setuptools``/``wheel`` first when Horovod is pip-built (a venv always; a conda
    env when it has pip packages), then ``packages.pip``."""
    reqs = [p.value for p in spec.packages.pip]
    if spec.horovod.install == "pip-build" and (spec.engine == "venv" or reqs):
        reqs = ["setuptools", "wheel"] + reqs
    return reqs


def built_requirements(spec: Spec) -> List[str]:
    """Requirements envtool builds itself: Horovod when ``horovod.install`` is ``pip-build``."""
    if spec.horovod.install != "pip-build":
        return []
    from envtool.horovod.flags import requirement

    return [requirement(spec)]


def lock_spec(spec: Spec, platforms: Optional[Sequence[str]] = None, site: str = "",
              virtual_overrides: Optional[Mapping[str, str]] = None,
              progress: Optional[Callable[[str], None]] = None) -> LockData:
    """Solve ``spec`` for each platform without creating anything.

    Conda packages: py-rattler per platform with the platform's virtual packages. pip packages:
    pip's resolver — with the spec's interpreter for a venv spec (this machine's platform only),
    or for the solved Python and the platform's manylinux tag (binary wheels) for a conda spec.

    Args:
        spec: the resolved spec.
        platforms: platforms to lock (default ``spec.platforms``).
        site: the site the spec was resolved for ('' when none).
        virtual_overrides: ``__cuda``/``__glibc`` … overrides (an empty value drops one).
        progress: progress callback (stderr lines).
    Returns:
        the lock (kind ``solve``).
    Raises:
        UsageError: a platform the spec does not support, or a venv spec for another platform.
        EnvtoolError: a solve failed.
    """
    from envtool.lock import conda_resolve, pip_resolve
    from envtool.lock.portable import NotPublic, make_portable
    from envtool.lock.spec_hash import field_digests, platform_hash, spec_hash
    from envtool.core.platforms import conda_platform, probe_interpreter

    platforms = list(platforms or spec.platforms)
    for p in platforms:
        if p not in spec.platforms:
            raise UsageError(f"spec {spec.name!r} supports {', '.join(spec.platforms)}; --platform {p} is not one of them")
    from envtool.engines.registry import engine_for

    from envtool.lock.indexes import extra_index_args, spec_indexes

    engine = engine_for(spec.engine)
    here = conda_platform()
    indexes = spec_indexes(spec.packages.pip)
    index_args, index_notes = extra_index_args(indexes) if indexes else ([], [])
    for note in index_notes:
        if progress:
            progress(note)
    packages: List[LockedPackage] = []
    hashes: Dict[str, str] = {}
    interpreter = None
    for platform in platforms:
        vp = conda_resolve.virtual_packages_for(spec, platform, virtual_overrides)
        hashes[platform] = platform_hash(spec, platform, vp if spec.engine == "conda" else None)
        pip_reqs, built = pip_requirements(spec), built_requirements(spec)
        if engine.lock_python(spec) is not None:  # the engine's interpreter resolves pip (venv)
            if platform != here:
                raise UsageError(f"spec {spec.name!r} uses the {engine.name} engine: its pip packages are resolved by "
                                 f"this machine's interpreter, for {here} only (asked for {platform})")
            python = str(engine.lock_python(spec))
            interpreter = probe_interpreter(python)
            if pip_reqs or built:  # a bare venv locks as no packages (pip refuses to resolve nothing)
                packages += pip_resolve.resolve(pip_reqs, platform, python=python, built_requirements=built,
                                                progress=progress, index_args=index_args)
            continue
        conda = conda_resolve.solve(spec, platform, vp, progress=progress)
        packages += conda
        if pip_reqs or built:
            py = next((p for p in conda if p.name == "python"), None)
            if py is None:
                raise UsageError(f"spec {spec.name!r} has pip packages but its conda solve for {platform} has no python")
            target = pip_resolve.PipTarget(platform=platform, python_version=".".join(py.version.split(".")[:2]),
                                           glibc=vp.get("__glibc", "2.17"))
            packages += pip_resolve.resolve(pip_reqs, platform, built_requirements=built, target=target,
                                            progress=progress, index_args=index_args)
    try:
        packages, notes = make_portable(packages, progress=progress, indexes=indexes, strict=True)
    except NotPublic as exc:
        raise UsageError(not_public_message(spec, exc)) from None
    for note in notes:
        if progress:
            progress(note)
    return LockData(packages=tuple(packages), platforms=tuple(platforms), channels=tuple(spec.channels),
                    content_hash=tuple(sorted(hashes.items())), spec=spec.name, spec_hash=spec_hash(spec),
                    site=site or spec.site.name, kind="solve", engine=spec.engine,
                    sources=(spec.path,) if spec.path else (), interpreter=interpreter,
                    spec_fields=tuple(sorted(field_digests(spec).items())), pip_indexes=tuple(sorted(indexes.items())))


def not_public_message(spec: Spec, exc) -> str:
    """The exit-2 message for archives a lock of ``spec`` cannot name by a public URL
    (:class:`envtool.lock.portable.NotPublic`): each archive, where it was found, where envtool
    looked, and the two ways on (the spec names the index; this machine maps a mirror to it)."""
    from envtool.core.errors import echo

    lines = [f"spec {spec.name!r}: a lock records where anyone can download each archive, and these were found "
             "only on this machine:"]
    from envtool.lock.indexes import spec_indexes

    named = spec_indexes(spec.packages.pip)
    for name, version, url, looked in exc.entries:
        lines.append(f"  {name} {version}: {echo(url, 200)} (not on {' or '.join(looked)})")
        if name in named:
            lines.append(f"    the spec names its index {named[name]}, which this machine could not reach (see above): "
                         f"map a mirror holding the same files: envtool config set index_mirrors '{named[name]}=MIRROR_URL'")
    where = f"{spec.path}: " if spec.path else ""
    lines.append(f"name the public index that serves it in the spec ({where}packages.pip[i].index: https://…), and "
                 "where this machine has a copy of that index, map it: envtool config set index_mirrors "
                 "'PUBLIC_INDEX=MIRROR_URL' (the lock then records the public URL)")
    return "\n".join(lines)


def lock_prefix(prefix: Path, spec: Optional[Spec] = None, site: str = "", built_keys: Optional[Dict[str, str]] = None,
                lookup: bool = True, progress: Optional[Callable[[str], None]] = None,
                known: Optional[Mapping[Tuple[str, str], Tuple[str, str]]] = None,
                layered_over: Optional[Mapping[str, object]] = None) -> LockData:
    """Snapshot ``prefix`` (see :mod:`envtool.lock.snapshot`) as a lock for this machine's platform.

    Args:
        prefix: the environment.
        spec: the spec it was made from, when known (its name and content hash go into the metadata;
            otherwise they are copied from ``prefix/conda-lock.yml`` when that exists).
        site: the site name ('' when unknown).
        built_keys: name → wheel-cache key of packages envtool built.
        lookup: see :func:`envtool.lock.snapshot.snapshot`.
        progress: progress callback.
        known: see :func:`envtool.lock.snapshot.snapshot` (URLs and hashes already known, e.g.
            from the lock the environment was installed from).
        layered_over: the ``create-venv``/``clone-layer`` step's ``base`` record while ``create``
            runs (:func:`envtool.engines.layer.layer_over`), or None: read from the prefix.
    Returns:
        the lock (kind ``snapshot``; a layered venv's base set in ``base``); pip URLs made portable (:mod:`envtool.lock.portable`),
        the interpreter recorded.
    Raises:
        UsageError: not an environment.
        EnvtoolError: the pip lookup failed, or a layered venv's interpreter cannot be asked.
    """
    from envtool.lock import snapshot
    from envtool.lock.portable import make_portable
    from envtool.lock.spec_hash import field_digests, spec_hash
    from envtool.core.platforms import conda_platform, probe_interpreter

    platform = conda_platform()
    packages = snapshot.snapshot(Path(prefix), platform, lookup=lookup, built_keys=built_keys, progress=progress,
                                 known=known)
    name, digest, engine = "", "", ""
    sources: Tuple[str, ...] = ()
    fields: Tuple[Tuple[str, str], ...] = ()
    pip_indexes: Tuple[Tuple[str, str], ...] = ()
    if spec is not None:
        from envtool.lock.indexes import spec_indexes

        pip_indexes = tuple(sorted(spec_indexes(spec.packages.pip).items()))
        name, digest, engine = spec.name, spec_hash(spec), spec.engine
        site = site or spec.site.name
        sources = (spec.path,) if spec.path else ()
        fields = tuple(sorted(field_digests(spec).items()))
    else:  # what the environment's own lock recorded (its indexes: it was installed from them)
        own = Path(prefix) / "conda-lock.yml"
        if own.is_file():
            from envtool.lock.lockio import read_lock

            try:
                prev = read_lock(own)
                name, digest, engine, site, sources = prev.spec, prev.spec_hash, prev.engine, prev.site, prev.sources
                fields, pip_indexes = prev.spec_fields, prev.pip_indexes
            except UsageError:
                pass
    if lookup:
        packages, _ = make_portable(packages, progress=progress, indexes=dict(pip_indexes))
    python = PrefixData(Path(prefix)).python
    interpreter = None
    if python.exists():
        try:
            interpreter = probe_interpreter(str(python))
        except EnvtoolError:
            interpreter = None
    if spec is None and not name:
        import json

        try:
            name = json.loads((Path(prefix) / ".envtool" / "create.json").read_text()).get("spec", "")
        except (OSError, ValueError, RecursionError, AttributeError):
            name = ""
    if not engine:
        from envtool.engines.registry import spec_engine_of_prefix

        engine = spec_engine_of_prefix(prefix)
    return LockData(packages=tuple(packages), platforms=(platform,), channels=snapshot.channels_of(packages),
                    content_hash=((platform, digest or "unknown"),), spec=name, spec_hash=digest, site=site,
                    kind="snapshot", engine=engine, sources=sources, interpreter=interpreter, spec_fields=fields,
                    pip_indexes=pip_indexes, base=base_set(Path(prefix), layered_over))


def base_set(prefix: Path, recorded: Optional[Mapping[str, object]] = None) -> Optional[BaseSet]:
    """What a layered venv (:func:`envtool.engines.layer.is_layered`) sees from its base, as the
    lock records it (:class:`~envtool.lock.model.BaseSet`): read in the directories its own
    interpreter has on ``sys.path`` outside ``prefix`` (:func:`envtool.engines.layer.base_packages`).

    Args:
        prefix: the environment.
        recorded: see :func:`envtool.engines.layer.base_of`.
    Returns:
        the base set, or None when ``prefix`` is not a layered venv.
    Raises:
        EnvtoolError: the environment's interpreter cannot be asked (names it and why).
    """
    from envtool.engines import layer

    if not layer.is_layered(prefix):
        return None
    view = layer.probe_site(str(PrefixData(prefix).python))
    found = layer.base_packages(view, prefix)
    kind, where = layer.base_of(view, prefix, recorded)
    return BaseSet(kind=kind, prefix=where,
                   packages=tuple((p.name, p.version) for p in found), records=layer.records_digest(found))


def relative_sources(data: LockData, lock_path: Path) -> LockData:
    """``data`` with its spec paths made relative to the lock's directory (conda-lock's convention)."""
    from dataclasses import replace

    out = []
    for s in data.sources:
        try:
            out.append(os.path.relpath(os.path.abspath(s), os.path.abspath(Path(lock_path).parent)))
        except ValueError:
            out.append(s)
    return replace(data, sources=tuple(out))
