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

from envtool.errors import SpecError, UsageError
from envtool.spec.model import Spec

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
                "extensions": [f"{n}/{v}" for n, v in self.extensions], "notes": list(self.notes)}


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
    the same name; pip distributions come from :func:`envtool.engines.venv.pip_distributions`.
    A venv's Python version is read from ``pyvenv.cfg`` (``version``, written by ``venv`` since
    Python 3.11; ``version_info`` by virtualenv).
    """
    from envtool.engines.venv import pip_distributions

    found: Dict[str, str] = {}
    meta = Path(prefix) / "conda-meta"
    if meta.is_dir():
        for rec in sorted(meta.glob("*.json")):
            try:
                data = json.loads(rec.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(data, dict) and data.get("name") and data.get("version"):
                found.setdefault(str(data["name"]), str(data["version"]))
    cfg = Path(prefix) / "pyvenv.cfg"
    if cfg.is_file() and "python" not in found:
        for line in cfg.read_text(errors="replace").splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() in ("version", "version_info") and value.strip():
                found["python"] = value.strip()
                break
    for dist in pip_distributions(Path(prefix)):
        found.setdefault(dist.name, dist.version)
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
        _check_value(str(value), where, spec)
        out.append(EnvChange("pushenv", key, str(value), origin))
    return out


def _launch_example(spec: Optional[Spec]) -> Optional[str]:
    if spec is None or not spec.site.launcher:
        return None
    return spec.site.launcher.replace("{ranks}", "4") + " python train.py"


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
    lines.append("Make your own copy to add packages (this one is shared and read-only):")
    lines.append(f"  envtool clone {prefix} --prefix $HOME/envs/{name}")
    if spec is not None:
        lines.append(f"  envtool create {spec.name} --clone {prefix} --prefix $HOME/envs/{name}")
    if lock:
        lines.append("")
        lines.append(f"Lock (exact package versions): {lock}")
        if spec is not None:
            lines.append(f"  envtool create {spec.name} --from-lock {lock} --prefix $HOME/envs/{name}")
    lines.append("")
    lines.append(f"module unload {name} undoes every change this module makes.")
    return "\n".join(lines)


def build_content(prefix: Path, spec: Optional[Spec] = None, name: Optional[str] = None,
                  version: Optional[str] = None, runtime_prefix: Optional[Path] = None,
                  run_activate_d: bool = True) -> ModuleContent:
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

    extensions = tuple((n, v) for n, v in packages if EXT_RE.fullmatch(n) and EXT_RE.fullmatch(v) and n != "python")
    return ModuleContent(
        name=name, version=version, prefix=shown_s, kind=kind, whatis=tuple(whatis),
        help=_help_text(spec, name, version, shown_s, kind, lock, key), family="python",
        conflicts=(name,), depends_on=tuple(spec.site.modules) if spec is not None else (),
        changes=tuple(changes), extensions=extensions, notes=tuple(notes))


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
