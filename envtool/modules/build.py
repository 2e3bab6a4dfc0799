"""Build the :class:`~envtool.modules.content.ModuleContent` of a modulefile from a prefix and its spec.

Modelled on Spack's ``spack/spack@04e016a8154f:lib/spack/spack/modules/common.py`` (a
format-independent description that each module system renders with its own template):
:func:`build_content` looks at a prefix (and the spec it was made from) and returns whatis
lines, help text, family, conflicts, modules to depend on, environment changes, extensions.
Nothing here knows Lua or Tcl; the writers in :mod:`envtool.modules.registry` do.
"""
from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from envtool.core.errors import SpecError, UsageError
from envtool.modules.activation import activate_d_changes
from envtool.modules.content import CONTROL_RE, EXTENSIONS_CHOICES, VAR_RE, EnvChange, ModuleContent
from envtool.modules.naming import default_name
from envtool.modules.packages import EXT_RE, KEY_PACKAGES, extension_names, installed_packages, prefix_kind
from envtool.modules.tree import module_families
from envtool.spec.model import Spec
from envtool.spec.names import check_env_setting


def _check_value(value: str, where: str, spec: Optional[Spec]) -> None:
    if CONTROL_RE.search(value):
        if spec is not None and where.startswith(("env.", "site.env.")):
            raise SpecError(spec.path, where, "a value without newlines or other control characters "
                            "(module systems cannot export them safely)", got=value)
        raise UsageError(f"{where}: {value!r} holds a newline or another control character, "
                         "which module systems cannot export safely")


def _spec_env(spec: Spec) -> List[EnvChange]:
    out = []
    merged: Dict[str, Tuple[str, str]] = {}
    for key, value in spec.site.env:
        merged[key] = (value, "site env")
    for key, value in spec.env:
        merged[key] = (value, "spec env")
    for key, (value, origin) in merged.items():
        where = ("env." if origin == "spec env" else "site.env.") + key
        if not VAR_RE.fullmatch(key):
            raise SpecError(spec.path, where, "a variable name of letters, digits and _ (not starting with a digit)",
                            got=key)
        check_env_setting(key, spec.path, where)  # a spec built in memory: the loader's check again
        _check_value(str(value), where, spec)
        out.append(EnvChange("pushenv", key, str(value), origin))
    # env: {VAR: {prepend|append: DIR}}: path entries, undone on unload (Lmod prepend_path/append_path,
    # Tcl prepend-path/append-path), applied in order.
    for paths, origin in ((spec.site.env_paths, "site env"), (spec.env_paths, "spec env")):
        for key, op, value in paths:
            where = ("env." if origin == "spec env" else "site.env.") + key
            if not VAR_RE.fullmatch(key) or op not in ("prepend", "append"):
                raise SpecError(spec.path, where, "{prepend: DIR} or {append: DIR} on a variable name",
                                got=(key, op))
            check_env_setting(key, spec.path, where, edit=True)
            _check_value(str(value), where, spec)
            out.append(EnvChange(op + "_path", key, str(value), origin))
    return out


def _launch_example(spec: Optional[Spec]) -> Optional[str]:
    if spec is None or not spec.site.launcher:
        return None
    return spec.site.launcher.replace("{ranks}", "4") + " python train.py"


def spec_argument(spec: Spec) -> Optional[str]:
    """How ``envtool create`` can name ``spec`` again, quoted for the shell: its name when the catalog
    resolves that name to the same file (``cpu-horovod``), the name with ``--site`` for a site
    variant (``open-ce-1.1.3-py36 --site summit``), else the spec file's path (a spec given as a
    file: its ``name:`` is no catalog name, so ``create NAME`` would fail). None when there is
    neither a catalog name nor a readable file."""
    from envtool.spec import catalog, sites

    try:
        known = catalog.available().get(spec.name)
        if known is not None and spec.path and os.path.realpath(known) == os.path.realpath(spec.path):
            return shlex.quote(spec.name)
        site_path = sites.available().get(spec.site.name) if spec.site.name else None
        if known is None and site_path is not None:
            variant = sites.load_site(site_path).mapping_for(spec.name)
            if variant is not None and variant.spec is not None:
                return f"{shlex.quote(spec.name)} --site {shlex.quote(spec.site.name)}"
    except (SpecError, OSError):
        pass
    if spec.path and os.path.isfile(spec.path):
        return shlex.quote(os.path.abspath(spec.path))
    return None


def _help_text(spec: Optional[Spec], name: str, version: str, prefix: str, kind: str,
               lock: Optional[str], key: Sequence[Tuple[str, str]]) -> str:
    full = f"{name}/{version}"
    lines = []
    lines.append(spec.summary if spec is not None and spec.summary else f"Python environment at {prefix}")
    lines.append("")
    lines.append(f"Environment: {prefix} ({'conda environment' if kind == 'conda' else 'venv' if kind == 'venv' else 'prefix'})")
    if key:
        lines.append("Packages: " + ", ".join(f"{n} {v}" for n, v in key))
    if spec is not None:
        lines.append(f"Made from the envtool spec {spec.name!r}" + (f" ({spec.path})" if spec.path else "")
                     + (f" for site {spec.site.name!r}" if spec.site.name else ""))
    lines.append("")
    lines.append("Use it:")
    lines.append(f"  module load {full}")
    example = _launch_example(spec)
    if example:
        lines.append(f"  {example}        # launch 4 ranks with the site's launcher")
    if spec is not None and spec.site.modules:
        lines.append("  (loads " + ", ".join(spec.site.modules) + " first)")
    lines.append("")
    # a new prefix under ~/envs named after the module; never the environment's own folder name, so
    # the suggestion cannot clone an environment in ~/envs onto itself
    own_name = name if os.path.basename(os.path.normpath(prefix)) != name else f"{name}-copy"
    own = '"$HOME"/envs/' + shlex.quote(own_name)
    lines.append("Make your own copy to add packages (this one is shared and read-only):")
    lines.append(f"  envtool clone {shlex.quote(prefix)} --prefix {own}")
    spec_arg = spec_argument(spec) if spec is not None else None
    if spec_arg:
        lines.append(f"  envtool create {spec_arg} --clone {shlex.quote(prefix)} --prefix {own}")
    if lock:
        lines.append("")
        lines.append(f"Lock (exact package versions): {lock}")
        if spec_arg:
            lines.append(f"  envtool create {spec_arg} --from-lock {shlex.quote(lock)} --prefix {own}")
    lines.append("")
    lines.append(f"module unload {name} undoes every change this module makes.")
    return "\n".join(lines)


def build_content(prefix: Path, spec: Optional[Spec] = None, name: Optional[str] = None,
                  version: Optional[str] = None, runtime_prefix: Optional[Path] = None,
                  run_activate_d: bool = True, extensions: str = "spec",
                  modulepath: Optional[str] = None) -> ModuleContent:
    """Describe the modulefile for the environment at ``prefix``.

    Args:
        prefix: the environment to read (packages, ``conda-meta/``, ``pyvenv.cfg``,
            ``etc/conda/activate.d/*.sh``).
        spec: the spec it was made from (summary, sources, site modules and launcher, ``env``),
            or None.
        name, version: module name and version; defaults from :func:`default_name`.
        runtime_prefix: the path users will see, when ``prefix`` is a build location that is
            moved there afterwards (``create``); every occurrence of ``prefix`` in computed
            values is replaced by it. Default: ``prefix``.
        run_activate_d: compute what ``etc/conda/activate.d/*.sh`` set (runs them in a clean
            ``bash``; see :mod:`envtool.modules.activation`).
        extensions: which installed packages ``extensions(...)`` lists for ``module spider``:
            ``all``, ``spec`` (:func:`extension_names`: what the spec names, the frameworks,
            Horovod; the default: a large conda env would otherwise flood ``module avail``) or
            ``none``.
        modulepath: where the spec's site modules are looked up for their family
            (:func:`module_families`; default ``$MODULEPATH``). A module that ``depends_on`` a
            module of family ``python`` does not declare that family itself: Lmod would swap
            the dependency out for it ("automatically replacing …").
    Returns:
        a :class:`ModuleContent`.
    Raises:
        UsageError: ``prefix`` is not a directory, or a path or value holds a control character.
        SpecError: a spec ``env`` name or value a module system cannot take (exit 2).
        EnvtoolError: an activate.d script failed (exit 1).
    """
    prefix = Path(os.path.abspath(prefix))
    if not prefix.is_dir():
        raise UsageError(f"--prefix: {prefix} is not a directory (expected an environment prefix)")
    shown = Path(os.path.abspath(runtime_prefix)) if runtime_prefix is not None else prefix
    shown_s = str(shown)
    _check_value(shown_s, "--prefix", None)
    if ":" in shown_s:
        raise UsageError(f"--prefix: {shown_s} holds ':', which cannot be an entry of PATH")
    kind = prefix_kind(prefix)
    if name is None or version is None:
        dname, dversion = default_name(spec, prefix)
        name = name or dname
        version = version or dversion
    packages = installed_packages(prefix)
    by_name = dict(packages)
    key = [(n, by_name[n]) for n in KEY_PACKAGES if n in by_name]

    whatis = [f"Name: {name}", f"Version: {version}"]
    if spec is not None and spec.summary:
        whatis.append(f"Description: {spec.summary}")
    else:
        whatis.append(f"Description: Python environment at {shown_s}")
    if spec is not None:
        dist = spec.distribution
        whatis.append(f"Distribution: {dist.name}" + (f" {dist.version}" if dist.version else ""))
        for sid, url in spec.sources:
            whatis.append(f"Source: {sid} {url}")
    if key:
        whatis.append("Packages: " + ", ".join(f"{n} {v}" for n, v in key))
    whatis.append(f"Prefix: {shown_s}")

    lock = None
    for candidate in ("conda-lock.yml", ".envtool/conda-lock.yml"):
        if (prefix / candidate).is_file():
            lock = str(shown / candidate)
            break

    changes: List[EnvChange] = [EnvChange("prepend_path", "PATH", str(shown / "bin"))]
    if kind == "conda":
        changes.append(EnvChange("pushenv", "CONDA_PREFIX", shown_s))
        changes.append(EnvChange("pushenv", "CONDA_DEFAULT_ENV", shown_s))
    elif kind == "venv":
        changes.append(EnvChange("pushenv", "VIRTUAL_ENV", shown_s))
    notes: List[str] = []
    if kind == "conda" and run_activate_d:
        computed, skipped = activate_d_changes(prefix, shown)
        notes += skipped
        for change in computed:
            if not VAR_RE.fullmatch(change.name):
                notes.append(f"{change.origin} sets {change.name!r}, not a shell variable name (not applied)")
            elif change.op != "pushenv" and (change.value.startswith("-") or ":" in change.value):
                notes.append(f"{change.origin} adds {change.value!r} to {change.name} (not applied: "
                             "not a path entry)")
            else:
                _check_value(change.value, f"{change.origin}: {change.name}", None)
                changes.append(change)
    if spec is not None:
        changes += _spec_env(spec)

    if extensions not in EXTENSIONS_CHOICES:
        raise UsageError(f"--extensions: expected one of {', '.join(EXTENSIONS_CHOICES)}, got {extensions!r}")
    listed = [(n, v) for n, v in packages if EXT_RE.fullmatch(n) and EXT_RE.fullmatch(v) and n != "python"]
    if extensions == "none":
        listed = []
    elif extensions == "spec":
        from packaging.utils import canonicalize_name

        keep = extension_names(spec)
        listed = [(n, v) for n, v in listed if canonicalize_name(n) in keep]

    depends_on = tuple(spec.site.modules) if spec is not None else ()
    family: Optional[str] = "python"
    for mod, fam in module_families(depends_on, modulepath).items():
        if fam == family:
            notes.append(f"no family({family!r}): the site module {mod} this one depends on claims it")
            family = None
    warning = None
    if spec is not None and not spec.status.active:
        warning = spec.status.message(f"{name}/{version} ({spec.name})")
        whatis.append(f"Status: {spec.status.value}" + (f" since {spec.status.since}" if spec.status.since else ""))
    help_text = _help_text(spec, name, version, shown_s, kind, lock, key)
    if warning:
        help_text = f"WARNING: {warning}\n\n{help_text}"
    return ModuleContent(
        name=name, version=version, prefix=shown_s, kind=kind, whatis=tuple(whatis),
        help=help_text, family=family,
        conflicts=(name,), depends_on=depends_on,
        changes=tuple(changes), extensions=tuple(listed), notes=tuple(notes), warning=warning)


