"""The plain-data content of a modulefile, shared by the Lmod (Lua) and Tcl writers.

Modelled on Spack's ``lib/spack/spack/modules/common.py`` (a format-independent description
that each module system renders with its own template): :func:`build_content` looks at a
prefix (and the spec it was made from) and returns a :class:`ModuleContent` — whatis lines,
help text, family, conflicts, modules to depend on, environment changes, extensions. Nothing
here knows Lua or Tcl; :mod:`envtool.modules.lmod` and :mod:`envtool.modules.tcl` do.

Every change is static and reversible: ``prepend_path``/``append_path`` (undone by removing
the entry) and ``pushenv`` (undone by restoring the previous value, or unsetting it when there
was none). Nothing is executed at load time, so ``module unload`` restores the shell exactly.
"""
from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from envtool.core.errors import SpecError, UsageError
from envtool.spec.model import Spec
from envtool.spec.names import check_env_setting

#: Module name and version components: what Lmod and Environment Modules accept as a path
#: component without quoting, and never ``.``-leading (hidden) or ``default``.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
#: Environment variable names a modulefile may set (POSIX shell names).
VAR_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Package names and versions listed in ``extensions(...)`` (a comma-separated list that Lmod
#: splits itself; anything else is left out rather than escaped).
EXT_RE = re.compile(r"[A-Za-z0-9_.+!-]+")
#: Control characters: Lmod 8.6 and Environment Modules 5.2 both emit a variable whose value
#: holds a newline as two shell lines (the second is run as a command: seen with both on
#: Debian 12), so values may not contain them. Text in whatis/help may (it is only displayed).
CONTROL_RE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")

#: Packages whose versions go into a whatis line, in display order (pip and conda names).
KEY_PACKAGES = ("python", "torch", "pytorch", "pytorch-base", "tensorflow", "tensorflow-gpu", "tensorflow-cpu",
                "tensorflow-base", "mxnet", "horovod", "cudatoolkit", "cuda-version", "cudnn", "nccl", "mpi4py",
                "openmpi", "mpich", "numpy")


#: ``--extensions`` choices: every installed package, the spec's own (see
#: :func:`extension_names`), or none.
EXTENSIONS_CHOICES = ("all", "spec", "none")
#: Package names (conda and pip) of the frameworks and Horovod, always listed under ``spec``.
FRAMEWORK_NAMES = ("torch", "pytorch", "pytorch-base", "pytorch-cpu", "tensorflow", "tensorflow-gpu",
                   "tensorflow-cpu", "tensorflow-base", "mxnet", "horovod")
#: ``family("x")`` in a Lua modulefile, ``family x`` / ``family "x"`` in a Tcl one (Lmod's
#: ``050_lua_modulefiles.rst``; Environment Modules' modulefile(4)).
_FAMILY_RE = re.compile(r"""^\s*family\s*(?:\(\s*["']([^"']+)["']\s*\)|\s"?([A-Za-z0-9_.+-]+)"?)""", re.M)


@dataclass(frozen=True)
class EnvChange:
    """One reversible change to the environment.

    Attributes:
        op: ``prepend_path``, ``append_path`` (one ``:``-separated entry) or ``pushenv`` (set;
            unload restores the previous value or unsets it).
        name: the variable (a POSIX shell name).
        value: the entry or value (no control characters).
        origin: where it comes from, for a comment: ``activation``, ``spec env``, ``site env``
            or ``etc/conda/activate.d/<script>``.
    """

    op: str
    name: str
    value: str
    origin: str = "activation"


@dataclass(frozen=True)
class ModuleContent:
    """Everything a modulefile says, independent of the module system.

    Attributes:
        name: module name (``cpu-horovod``).
        version: module version (``2026.11``); the file is ``<root>/<name>/<version>.lua``.
        prefix: the environment's prefix as users will see it (absolute path).
        kind: ``conda`` (has ``conda-meta/``), ``venv`` (has ``pyvenv.cfg``) or ``prefix``.
        whatis: ``Label: text`` lines for ``whatis``/``module-whatis`` (may hold any text).
        help: the help text (may hold any text; the writers escape it).
        family: the Lmod family (``python``: one Python stack at a time), or None.
        conflicts: module names that cannot be loaded together with this one.
        depends_on: modules loaded first and unloaded with it (``spec.site.modules``).
        changes: environment changes, in order.
        extensions: ``(name, version)`` of every installed package, for ``module spider``.
        notes: comments for the admin (e.g. what an activate.d script did that was not applied).
        warning: printed on every ``module load`` (an archived or deprecated stack), or None.
    """

    name: str
    version: str
    prefix: str
    kind: str
    whatis: Tuple[str, ...] = ()
    help: str = ""
    family: Optional[str] = "python"
    conflicts: Tuple[str, ...] = ()
    depends_on: Tuple[str, ...] = ()
    changes: Tuple[EnvChange, ...] = ()
    extensions: Tuple[Tuple[str, str], ...] = ()
    notes: Tuple[str, ...] = ()
    warning: Optional[str] = None

    @property
    def full_name(self) -> str:
        """``name/version``."""
        return f"{self.name}/{self.version}"

    def to_dict(self) -> Dict[str, object]:
        """JSON-ready form."""
        return {"name": self.name, "version": self.version, "prefix": self.prefix, "kind": self.kind,
                "whatis": list(self.whatis), "help": self.help, "family": self.family,
                "conflicts": list(self.conflicts), "depends_on": list(self.depends_on),
                "changes": [{"op": c.op, "name": c.name, "value": c.value, "origin": c.origin}
                            for c in self.changes],
                "extensions": [f"{n}/{v}" for n, v in self.extensions], "notes": list(self.notes),
                "warning": self.warning}


def prefix_kind(prefix: Path) -> str:
    """``conda`` (``conda-meta/`` exists), ``venv`` (``pyvenv.cfg`` exists) or ``prefix``."""
    prefix = Path(prefix)
    if (prefix / "conda-meta").is_dir():
        return "conda"
    if (prefix / "pyvenv.cfg").is_file():
        return "venv"
    return "prefix"


def parse_module_name(text: str) -> Tuple[str, str]:
    """Split ``NAME/VERSION`` and check both parts.

    Returns:
        ``(name, version)``.
    Raises:
        UsageError: not exactly two parts, or a part that is not ``[A-Za-z0-9][A-Za-z0-9._+-]*``
            (or is ``default``, which Lmod reserves for the default marker).
    """
    parts = text.split("/")
    if len(parts) != 2 or not all(NAME_RE.fullmatch(p) for p in parts) or parts[1] == "default":
        raise UsageError(f"--name: expected NAME/VERSION, each made of letters, digits and . _ + - "
                         f"(not starting with . or -, version not 'default'), got {text!r}")
    return parts[0], parts[1]


def installed_packages(prefix: Path) -> List[Tuple[str, str]]:
    """``(name, version)`` of the packages in ``prefix``, sorted by name, one entry per name.

    Conda records (``conda-meta/*.json``, read as JSON: the ``name`` and ``version`` fields
    every record has, per conda's PrefixRecord) come first and win over a pip distribution of
    the same name; both come from :class:`~envtool.core.prefix.PrefixData`.
    A venv's Python version is read from ``pyvenv.cfg`` (``version``, written by ``venv`` since
    Python 3.11; ``version_info`` by virtualenv).
    """
    from envtool.core.prefix import PrefixData

    data = PrefixData(Path(prefix))
    found: Dict[str, str] = dict(data.conda_versions())
    cfg = Path(prefix) / "pyvenv.cfg"
    if cfg.is_file() and "python" not in found:
        for line in cfg.read_text(errors="replace").splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() in ("version", "version_info") and value.strip():
                found["python"] = value.strip()
                break
    for name, version in data.versions().items():
        found.setdefault(name, version)
    return sorted(found.items())


def default_name(spec: Optional[Spec], prefix: Path) -> Tuple[str, str]:
    """The module name and version when ``--name`` is not given.

    Name: the spec's name, else the prefix's directory name. Version: the spec's
    ``distribution.version``, else the day the prefix was made (``YYYY.MM.DD``, UTC, from
    ``.envtool/create.json`` or the directory's modification time). Characters a module name
    cannot hold become ``-``.
    """
    name = spec.name if spec is not None else Path(prefix).name
    version = spec.distribution.version if spec is not None and spec.distribution.version else None
    if not version:
        stamp = None
        meta = Path(prefix) / ".envtool" / "create.json"
        try:
            stamp = float(json.loads(meta.read_text()).get("created"))
        except (OSError, ValueError, TypeError, AttributeError):
            stamp = os.stat(prefix).st_mtime
        version = time.strftime("%Y.%m.%d", time.gmtime(stamp))

    def clean(text: str) -> str:
        text = re.sub(r"[^A-Za-z0-9._+-]", "-", text).lstrip(".-") or "env"
        return text

    return clean(name), clean(version)


def extension_names(spec: Optional[Spec]) -> set:
    """The package names ``--extensions spec`` keeps: every package the spec names (conda match
    specs read with py-rattler's ``MatchSpec``, pip requirements with ``packaging``), the
    frameworks and Horovod (:data:`FRAMEWORK_NAMES`). Names are compared canonicalised (PEP 503).

    Args:
        spec: the spec, or None (then only the frameworks and Horovod).
    Returns:
        a set of canonical names.
    """
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    names = {canonicalize_name(n) for n in FRAMEWORK_NAMES}
    if spec is None:
        return names
    if spec.packages.conda:
        from rattler import MatchSpec  # lazy: heavy import

        for pin in spec.packages.conda:
            try:
                ms = MatchSpec(pin.value)
            except Exception:  # noqa: BLE001 - the spec loader already checked the pin
                continue
            if ms.name is not None:
                names.add(canonicalize_name(ms.name.normalized))
    for pin in spec.packages.pip:
        try:
            names.add(canonicalize_name(Requirement(pin.value).name))
        except InvalidRequirement:
            continue
    return names


def module_families(modules: Sequence[str], modulepath: Optional[str] = None) -> Dict[str, str]:
    """The ``family`` that each of ``modules`` declares, found in the module tree.

    Each ``name/version`` is looked up as ``<dir>/name/version.lua`` or ``<dir>/name/version``
    in every directory of ``modulepath`` (``:``-separated; default ``$MODULEPATH``), first hit
    wins; a bare ``name`` looks at every version under ``<dir>/name/``. The file's
    ``family(...)`` line (Lua) or ``family ...`` command (Tcl) is read with a regular
    expression; a family set dynamically is not seen.

    Returns:
        module → family, for the modules found that declare one.
    """
    if modulepath is None:
        modulepath = os.environ.get("MODULEPATH", "")
    found: Dict[str, str] = {}
    for mod in modules:
        name, _, version = mod.partition("/")
        for d in (Path(p) for p in modulepath.split(":") if p):
            if version:
                candidates = [d / name / (version + ".lua"), d / name / version]
            else:
                candidates = sorted((d / name).glob("*")) if (d / name).is_dir() else []
            hits = [c for c in candidates if c.is_file() and not c.name.startswith(".")]
            for c in hits:
                try:
                    match = _FAMILY_RE.search(c.read_text(errors="replace"))
                except OSError:
                    continue
                if match:
                    found[mod] = match.group(1) or match.group(2)
                    break
            if hits:
                break
    return found


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
    import os
    import shlex

    from envtool.core.errors import SpecError
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
    import shlex

    own = '"$HOME"/envs/' + shlex.quote(name)
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
        from envtool.modules.activation import activate_d_changes

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


def load_template(filename: str):
    """The ``string.Template`` in ``envtool/modules/templates/<filename>``."""
    from string import Template

    return Template((Path(__file__).parent / "templates" / filename).read_text())


def comment_text(text: str) -> str:
    """``text`` made safe for a one-line comment in Lua or Tcl.

    Control characters (a newline would end the comment) become ``?`` and backslashes ``/``
    (in Tcl a backslash before the newline would continue the comment onto the next line).
    """
    return CONTROL_RE.sub("?", text.replace("\t", " ")).replace("\\", "/")


def change_lines(changes: Sequence[EnvChange], comment: str, line: Callable[[EnvChange], str]) -> List[str]:
    """Modulefile lines for ``changes``: ``line(change)`` each, with a ``comment`` line
    (``--`` in Lua, ``#`` in Tcl) naming the origin whenever it changes."""
    out: List[str] = []
    origin = None
    for c in changes:
        if c.origin != origin:
            out.append(f"{comment} {comment_text(c.origin)}")
            origin = c.origin
        out.append(line(c))
    return out


def check_names(content: ModuleContent) -> None:
    """Check what a writer puts outside quotes: the module name and version, variable names.

    Raises:
        ValueError: a name that :data:`NAME_RE` or :data:`VAR_RE` rejects (a bug: ``build_content``
            only makes valid ones).
    """
    for part in (content.name, content.version):
        if not NAME_RE.fullmatch(part):
            raise ValueError(f"module name part {part!r} is not [A-Za-z0-9][A-Za-z0-9._+-]*")
    for change in content.changes:
        if not VAR_RE.fullmatch(change.name):
            raise ValueError(f"variable name {change.name!r} is not a shell name")
