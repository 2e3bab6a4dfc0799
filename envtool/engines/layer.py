"""Layering an environment over a base interpreter's packages: a system Python, a conda
environment or a venv.

``python -m venv --system-site-packages`` makes an environment that also imports its base
installation's site-packages (https://docs.python.org/3/library/venv.html). Run by an
interpreter that is itself a venv, ``venv`` bases the new environment on that venv's *base*
installation (``sys._base_executable``, PEP 405), so the venv's own packages are not seen:
stdlib ``venv`` and ``site`` have no notion of a parent venv (python/cpython#129445, open;
virtualenv declined the same request, pypa/virtualenv#270). :func:`layer_over` closes that gap
the way uv layers its ephemeral ``uv run --with`` environments over a base environment
(astral-sh/uv, ``crates/uv/src/commands/project/run.rs``: ``_uv_ephemeral_overlay.pth``): a
``.pth`` file in the new environment's site-packages whose ``import`` line calls
``site.addsitedir`` on the base venv's site-packages. ``site`` executes a ``.pth`` line that
starts with ``import`` and ``addsitedir`` appends the directory to ``sys.path`` after the ones
already there and reads that directory's own ``.pth`` files too
(https://docs.python.org/3/library/site.html), so the new environment's own packages win, and the
base venv's editable installs and its own layer (a layer over a layer) keep working.

The base's site-packages are read from the base interpreter itself (:func:`probe_site`, the
``site_dirs`` probe), never guessed from a path layout; the packages a layered environment sees
from outside its prefix are read in the directories its own interpreter has on ``sys.path``
(:func:`base_packages`), so ``doctor`` and the lock count what an ``import`` would find.
"""
from __future__ import annotations

import ast
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from envtool.core.errors import EnvtoolError
from envtool.core.prefix import PrefixData, canonical_name

#: The ``.pth`` file a layer over a venv base writes into its own site-packages (one
#: ``import site; site.addsitedir(...)`` line per base directory). Older layers (``envtool clone``
#: before this module) hold one plain directory line instead; :func:`pth_dirs` reads both.
LAYER_PTH = "_envtool_layer.pth"


def _under(path: str, prefix: str) -> bool:
    """Whether ``path`` is ``prefix`` or inside it (both resolved)."""
    p, root = os.path.realpath(path), os.path.realpath(prefix)
    return p == root or p.startswith(root.rstrip(os.sep) + os.sep)


@dataclass(frozen=True)
class SiteDirs:
    """Where one interpreter finds its packages (the ``site_dirs`` probe's record).

    Attributes:
        python: its version (``3.12.3``).
        executable: ``sys.executable``.
        prefix: ``sys.prefix``.
        base_prefix: ``sys.base_prefix``.
        venv: it runs in a virtual environment (``prefix != base_prefix``).
        conda: ``prefix/conda-meta`` exists.
        site_packages: ``site.getsitepackages()`` that exist, in order.
        user_site: the user site directory when enabled, else None.
        sys_path: its ``sys.path`` entries that exist (without ``PYTHONPATH``), in order.
    """

    python: str
    executable: str
    prefix: str
    base_prefix: str
    venv: bool
    conda: bool
    site_packages: Tuple[str, ...]
    user_site: Optional[str]
    sys_path: Tuple[str, ...]

    @property
    def kind(self) -> str:
        """``venv``, ``conda`` or ``system`` (any other Python installation: a module's, ``/usr``)."""
        return "venv" if self.venv else "conda" if self.conda else "system"

    @property
    def own_site_packages(self) -> Tuple[str, ...]:
        """The site-packages inside :attr:`prefix` (a venv's own; an installation's all)."""
        return tuple(d for d in self.site_packages if _under(d, self.prefix))

    @property
    def includes_system(self) -> bool:
        """A venv that also imports its base installation's site-packages
        (``include-system-site-packages = true``): some site-packages lie outside :attr:`prefix`."""
        return self.venv and any(not _under(d, self.prefix) for d in self.site_packages)


def probe_site(python: str, timeout: float = 60.0) -> SiteDirs:
    """Ask ``python`` where it finds its packages (the ``site_dirs`` probe).

    Args:
        python: an interpreter path.
        timeout: seconds.
    Returns:
        its :class:`SiteDirs`.
    Raises:
        EnvtoolError: it did not run or printed no record (names the interpreter and why).
    """
    from envtool import probes

    run = probes.run_probe(Path(python), "site_dirs", [], timeout)
    if run.error or not run.records:
        raise EnvtoolError(f"{python}: cannot read where this interpreter finds its packages: "
                           f"{run.error or 'no output'}")
    r = run.records[-1]
    return SiteDirs(python=str(r.get("python") or ""), executable=str(r.get("executable") or python),
                    prefix=str(r.get("prefix") or ""), base_prefix=str(r.get("base_prefix") or ""),
                    venv=bool(r.get("venv")), conda=bool(r.get("conda")),
                    site_packages=tuple(str(d) for d in r.get("site_packages") or ()),
                    user_site=r.get("user_site") if isinstance(r.get("user_site"), str) else None,
                    sys_path=tuple(str(p) for p in r.get("sys_path") or ()))


def pth_line(directory: str) -> str:
    """The ``.pth`` line that adds ``directory`` as a site directory: ``import site;
    site.addsitedir('<directory>')`` (the path as a Python string literal).

    Raises:
        EnvtoolError: ``directory`` holds a line break (a ``.pth`` line cannot hold it).
    """
    if "\n" in directory or "\r" in directory:
        raise EnvtoolError(f"{directory!r}: a site directory with a line break cannot be named in a .pth file")
    return f"import site; site.addsitedir({directory!r})"


def pth_dirs(text: str) -> List[str]:
    """The directories a layer's ``.pth`` text names: the argument of each
    ``site.addsitedir('<literal>')`` on an ``import`` line, and each absolute plain line (the
    format of older layers). Anything else is ignored; nothing is executed."""
    out: List[str] = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(("import ", "import\t")):
            try:
                tree = ast.parse(line)
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr == "addsitedir" and node.args
                        and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                    out.append(node.args[0].value)
        elif line and not line.startswith("#") and os.path.isabs(line):
            out.append(line)
    return out


def layer_over(base: SiteDirs, prefix: Path) -> Dict[str, Any]:
    """Make the venv at ``prefix`` (made by ``base``'s ``python -m venv --system-site-packages``)
    see what ``base`` sees.

    A system or conda base needs nothing: ``--system-site-packages`` already names its
    site-packages. For a venv base, :data:`LAYER_PTH` is written into ``prefix``'s site-packages
    (one :func:`pth_line` per directory of :attr:`SiteDirs.own_site_packages`), and
    ``pyvenv.cfg``'s ``include-system-site-packages`` is set to what the base venv has, so the
    new environment sees the base venv's packages, then exactly what the base venv sees beneath
    them: nothing of the base installation when the base venv does not include it.

    Args:
        base: the base interpreter (:func:`probe_site`).
        prefix: the new venv.
    Returns:
        a JSON-ready record: ``kind``, ``python``, ``prefix`` of the base, ``pth`` (the file
        written, or None), ``site_packages`` (the directories it names), ``include_system``.
    Raises:
        EnvtoolError: ``prefix`` has no site-packages, or a base directory cannot be named in a
            ``.pth`` file.
        OSError: the files cannot be written.
    """
    record: Dict[str, Any] = {"kind": base.kind, "python": base.executable, "prefix": base.prefix,
                                 "pth": None, "site_packages": [], "include_system": True}
    if not base.venv:
        return record
    data = PrefixData(Path(prefix))
    sp = data.site_packages
    if sp is None:
        raise EnvtoolError(f"{prefix}: no lib/python*/site-packages to write {LAYER_PTH} into")
    dirs = list(base.own_site_packages)
    (sp / LAYER_PTH).write_text("".join(pth_line(d) + "\n" for d in dirs))
    cfg = Path(prefix) / "pyvenv.cfg"
    lines = cfg.read_text().splitlines()
    want = "true" if base.includes_system else "false"
    out = [f"include-system-site-packages = {want}" if ln.split("=", 1)[0].strip().lower()
           == "include-system-site-packages" else ln for ln in lines]
    cfg.write_text("\n".join(out) + "\n")
    record.update(pth=str(sp / LAYER_PTH), site_packages=dirs, include_system=base.includes_system)
    return record


@dataclass(frozen=True)
class BasePackage:
    """A distribution a layered environment sees from outside its prefix.

    Attributes:
        name: PEP 503 normalized name.
        version: its version.
        directory: the ``sys.path`` directory it was found in.
        record_sha256: SHA-256 of its ``RECORD`` (PyPA "Recording installed projects"; of its
            ``METADATA``/``PKG-INFO`` when there is no ``RECORD``, e.g. a distro's egg-info).
    """

    name: str
    version: str
    directory: str
    record_sha256: str


def base_packages(view: SiteDirs, prefix: Path) -> List[BasePackage]:
    """The distributions ``prefix``'s interpreter sees outside ``prefix`` (its base's), read in
    the directories of ``view.sys_path`` (the environment's own ``site_dirs`` record) outside
    ``prefix`` and other than the user site, in ``sys.path`` order; a name is taken where an
    import would find it first, and names the environment itself holds are left out.

    Args:
        view: the environment's :func:`probe_site` record.
        prefix: the environment.
    Returns:
        the base's packages, sorted by name.
    """
    from importlib import metadata

    own = set(PrefixData(Path(prefix)).versions())
    user = os.path.realpath(view.user_site) if view.user_site else None
    found: Dict[str, BasePackage] = {}
    for directory in view.sys_path:
        if _under(directory, str(prefix)) or not os.path.isdir(directory) or os.path.realpath(directory) == user:
            continue
        for dist in metadata.distributions(path=[directory]):
            raw = (dist.metadata["Name"] or "").strip()
            if not raw:
                continue
            name = canonical_name(raw)
            if name in own or name in found:
                continue
            text = dist.read_text("RECORD") or dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
            found[name] = BasePackage(name=name, version=dist.version, directory=directory,
                                      record_sha256=hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest())
    return [found[k] for k in sorted(found)]


def visible_versions(view: SiteDirs) -> Dict[str, str]:
    """``{normalized name: version}`` of every distribution on ``view.sys_path`` (the first of a
    name wins, as an import would find it): what that interpreter sees, layers and base included."""
    from importlib import metadata

    out: Dict[str, str] = {}
    for directory in view.sys_path:
        if not os.path.isdir(directory):
            continue
        for dist in metadata.distributions(path=[directory]):
            raw = (dist.metadata["Name"] or "").strip()
            if raw:
                out.setdefault(canonical_name(raw), dist.version)
    return out


def records_digest(packages: Sequence[BasePackage]) -> str:
    """``<count> sha256:<digest>`` over each package's name, version and :attr:`BasePackage.record_sha256`
    (sorted by name): changes when a base package is added, removed, upgraded or has its files rewritten."""
    rows = "".join(f"{p.name} {p.version} {p.record_sha256}\n" for p in sorted(packages, key=lambda p: p.name))
    return f"{len(packages)} sha256:{hashlib.sha256(rows.encode('utf-8')).hexdigest()}"


def is_layered(prefix: Path) -> bool:
    """Whether the venv at ``prefix`` sees packages it does not hold: ``include-system-site-packages
    = true`` in its ``pyvenv.cfg``, or a :data:`LAYER_PTH` in its site-packages. Reads files only."""
    data = PrefixData(Path(prefix))
    if not data.is_venv:
        return False
    if data.venv_config().get("include-system-site-packages", "false").lower() == "true":
        return True
    sp = data.site_packages
    return sp is not None and (sp / LAYER_PTH).is_file()


def base_of(view: SiteDirs, prefix: Path, recorded: Optional[Mapping[str, object]] = None) -> Tuple[str, str]:
    """The base a layered environment stands on: ``(kind, prefix)``, kind ``venv``, ``conda`` or
    ``system``. ``recorded`` (:func:`layer_over`'s record, while ``create`` runs), else what its
    ``create`` recorded (``.envtool/create.json``: the ``create-venv`` or ``clone-layer`` step's
    ``base``), else read from the
    environment: ``venv`` when it holds :data:`LAYER_PTH` (the base prefix is then unknown:
    ``""``), else its interpreter's base installation (``view.base_prefix``), ``conda`` when that
    has ``conda-meta/``."""
    import json

    try:
        with open(Path(prefix) / ".envtool" / "create.json", "rb") as fh:
            results = json.loads(fh.read(16 * 1024 * 1024).decode("utf-8")).get("results") or {}
    except (OSError, ValueError, AttributeError, RecursionError):
        results = {}
    steps = [results.get(sid) if isinstance(results, dict) else None for sid in ("create-venv", "clone-layer")]
    for base in [recorded, *(step.get("base") if isinstance(step, dict) else None for step in steps)]:
        if (isinstance(base, dict) and base.get("kind") in ("venv", "conda", "system")
                and isinstance(base.get("prefix"), str) and base["prefix"]):
            return base["kind"], base["prefix"]
    sp = PrefixData(Path(prefix)).site_packages
    if sp is not None and (sp / LAYER_PTH).is_file():
        return "venv", ""
    return ("conda" if Path(view.base_prefix, "conda-meta").is_dir() else "system"), view.base_prefix
