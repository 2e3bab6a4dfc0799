"""The one reader of an environment prefix (core layer), after conda's ``PrefixData``
(``conda/conda@26.7.1:conda/core/prefix_data.py``: one object per prefix that answers what the
prefix is and what it holds).

Every part of envtool that asks "what kind of prefix is this", "where is its interpreter" or
"what is installed in it" asks a :class:`PrefixData`: the kind (:attr:`PrefixData.kind`), the
interpreter (:attr:`PrefixData.python`), ``pyvenv.cfg`` (:meth:`PrefixData.venv_config`), conda
package records (``conda-meta/*.json``, read with py-rattler's ``PrefixRecord``) and Python
distributions (``site-packages/*.dist-info``, read with ``importlib.metadata``). It reads; it
never writes, and it runs no subprocess.

Facts it encodes:
* a venv has ``pyvenv.cfg`` at its root, ``key = value`` lines with ``home`` (the base
  interpreter's directory) and, since Python 3.11, ``version`` and ``executable`` (PEP 405,
  https://peps.python.org/pep-0405/; Python docs, ``venv``);
* a conda environment has ``conda-meta/`` with one ``<name>-<version>-<build>.json`` record per
  package and ``conda-meta/history`` (conda docs, "Conda environments"; conda's
  ``PrefixData.is_environment`` tests ``conda-meta/history``:
  ``conda/conda@26.7.1:conda/core/prefix_data.py``);
* on POSIX both put the interpreter at ``bin/python`` (PEP 405's ``bin`` directory; conda's
  ``python`` package installs ``bin/python``), and a venv's activation script is
  ``bin/activate`` (Python docs, ``venv``, "How venvs work");
* ``INSTALLER`` in a ``.dist-info`` names the tool that installed it (PyPA "Recording installed
  projects"): conda writes ``conda``, pip writes ``pip``;
* ``python -m venv`` seeds ``pip`` (and, before Python 3.12, ``setuptools``) through ensurepip.
"""
from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

#: Where a prefix keeps its interpreter, relative to the prefix (POSIX layout; see the module docstring).
PYTHON = "bin/python"
#: Where conda keeps a prefix's package records and ``history``, relative to the prefix.
CONDA_META = "conda-meta"
#: Distributions ``python -m venv`` puts in every venv itself (ensurepip), not a package step.
VENV_BOOTSTRAP = ("pip",)
#: Also seeded by ``python -m venv`` before Python 3.12 (ensurepip bundles setuptools).
VENV_SEEDED = ("setuptools",)


def canonical_name(name: str) -> str:
    """PEP 503 normalized distribution name (``PyYAML`` → ``pyyaml``, ``typing_extensions`` →
    ``typing-extensions``), by ``packaging.utils.canonicalize_name``."""
    from packaging.utils import canonicalize_name

    return str(canonicalize_name(name))


#: ``INSTALLER`` texts of the installers a pip step runs (envtool installs with uv or pip).
PIP_INSTALLERS = ("pip", "uv")

@dataclass(frozen=True)
class Distribution:
    """One Python distribution found in a prefix's ``site-packages``.

    Attributes:
        name: PEP 503 normalized name.
        version: its version string (``2.13.0+cpu``).
        installer: the ``INSTALLER`` file's text (``pip``, ``conda``, ``uv``) or ``""``.
        direct_url: the parsed ``direct_url.json`` (PEP 610) or ``{}``.
        requires: its ``Requires-Dist`` lines.
        metadata_dir: the ``.dist-info``/``.egg-info`` path relative to the prefix, or ``""``.
    """

    name: str
    version: str
    installer: str = ""
    direct_url: Tuple[Tuple[str, object], ...] = ()
    requires: Tuple[str, ...] = ()
    metadata_dir: str = ""

    @property
    def direct(self) -> Dict[str, object]:
        """``direct_url`` as a dict."""
        return dict(self.direct_url)


class PrefixData:
    """What a prefix holds, read once and cached on the object.

    Args:
        prefix: the environment (it need not exist: then everything is empty).
    """

    def __init__(self, prefix: Union[str, "os.PathLike[str]"]):
        self.prefix = Path(prefix)

    @property
    def conda_meta(self) -> Path:
        """``prefix/conda-meta``, where conda keeps the package records (it may not exist)."""
        return self.prefix / CONDA_META

    @property
    def is_conda(self) -> bool:
        """True when ``conda-meta/`` exists."""
        return self.conda_meta.is_dir()

    @property
    def has_conda_records(self) -> bool:
        """True when ``conda-meta/`` holds at least one package record (``*.json``)."""
        return self.is_conda and any(self.conda_meta.glob("*.json"))

    @property
    def has_conda_history(self) -> bool:
        """True when ``conda-meta/history`` exists (conda's own test of "is a conda environment")."""
        return (self.conda_meta / "history").is_file()

    @property
    def is_venv(self) -> bool:
        """True when ``pyvenv.cfg`` exists."""
        return (self.prefix / "pyvenv.cfg").is_file()

    @property
    def kind(self) -> str:
        """``conda`` (``conda-meta/`` exists), ``venv`` (``pyvenv.cfg``, no ``conda-meta/``) or
        ``prefix`` (anything else, e.g. a module's Python installation)."""
        return "conda" if self.is_conda else "venv" if self.is_venv else "prefix"

    @property
    def bin(self) -> Path:
        """``prefix/bin``: the interpreter, console scripts and ``activate`` (POSIX layout)."""
        return self.prefix / "bin"

    @property
    def python(self) -> Path:
        """The prefix's interpreter, ``prefix/bin/python`` (:data:`PYTHON`; it need not exist: see
        :meth:`find_python`)."""
        return self.prefix / PYTHON

    def find_python(self) -> Optional[Path]:
        """The interpreter that exists: ``bin/python``, else ``bin/python3`` (a Python prefix that
        only installs ``python3``), else None."""
        for name in ("python", "python3"):
            path = self.bin / name
            if path.exists():
                return path
        return None

    @property
    def activate_script(self) -> Optional[Path]:
        """``bin/activate`` when the prefix is activated by sourcing it (a venv's script, and no
        ``conda-meta/``: a conda prefix is activated by ``conda activate``), else None."""
        script = self.bin / "activate"
        return script if script.is_file() and not self.is_conda else None

    def venv_config(self) -> Dict[str, str]:
        """``pyvenv.cfg`` as ``{key: value}`` (keys lower-cased, both stripped; PEP 405's
        ``key = value`` lines); empty when there is none or it cannot be read."""
        out: Dict[str, str] = {}
        try:
            text = (self.prefix / "pyvenv.cfg").read_text(errors="replace")
        except OSError:
            return out
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                out[key.strip().lower()] = value.strip()
        return out

    def environment_kind(self) -> Optional[str]:
        """Why the prefix is a venv or conda environment, as a short phrase (``"a venv
        (pyvenv.cfg)"``, ``"a conda environment (conda-meta/)"`` for ``conda-meta/history`` or a
        package record), or None."""
        if self.is_venv:
            return "a venv (pyvenv.cfg)"
        if self.has_conda_history or self.has_conda_records:
            return "a conda environment (conda-meta/)"
        return None

    @cached_property
    def site_packages(self) -> Optional[Path]:
        """``prefix/lib/pythonX.Y/site-packages`` (the first, sorted), or None."""
        hits = sorted(glob.glob(str(self.prefix / "lib" / "python*" / "site-packages")))
        return Path(hits[0]) if hits else None

    def read_conda_records(self, strict: bool = False) -> list:
        """py-rattler ``PrefixRecord`` of every ``conda-meta/*.json``, sorted by file name (empty
        without ``conda-meta/``).

        Args:
            strict: raise on a file py-rattler cannot read (a clone must not skip a package);
                otherwise such a file is skipped (a check reports what it can read).
        Raises:
            EnvtoolError: ``strict`` and a record file does not parse (names the file).
        """
        meta = self.conda_meta
        if not meta.is_dir():
            return []
        from rattler import PrefixRecord

        out = []
        for path in sorted(meta.glob("*.json")):
            try:
                out.append(PrefixRecord.from_path(path))
            except Exception as exc:  # noqa: BLE001 - py-rattler raises its own parse errors
                if strict:
                    from envtool.core.errors import EnvtoolError

                    raise EnvtoolError(f"{path}: not a conda package record: {exc}") from None
        return out

    @cached_property
    def conda_records(self) -> list:
        """:meth:`read_conda_records` (lenient), read once."""
        return self.read_conda_records()

    @cached_property
    def conda_files(self) -> frozenset:
        """Paths (relative to the prefix) that conda records own."""
        return frozenset(str(f) for r in self.conda_records for f in r.files)

    @cached_property
    def conda_record_dicts(self) -> Tuple[Dict[str, object], ...]:
        """Every ``conda-meta/*.json`` as its JSON object (sorted by file name), for readers that
        want fields as conda wrote them (``url``, ``channel``, ``md5``, ``sha256``); files that are
        not JSON objects with ``name`` and ``version`` are skipped."""
        meta = self.conda_meta
        out = []
        for path in sorted(meta.glob("*.json")) if meta.is_dir() else ():
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(data, dict) and data.get("name") and data.get("version"):
                out.append(data)
        return tuple(out)

    def conda_versions(self) -> Dict[str, str]:
        """``{conda package name: version}`` from the ``name`` and ``version`` fields every record
        has (:attr:`conda_record_dicts`, so a record py-rattler would refuse for another field
        still counts); the first file of a name wins."""
        out: Dict[str, str] = {}
        for data in self.conda_record_dicts:
            out.setdefault(str(data["name"]), str(data["version"]))
        return out

    @cached_property
    def distributions(self) -> Tuple[Distribution, ...]:
        """Every distribution in :attr:`site_packages`, sorted by name (one per name)."""
        from importlib import metadata

        sp = self.site_packages
        if sp is None:
            return ()
        out: Dict[str, Distribution] = {}
        for dist in metadata.distributions(path=[str(sp)]):
            raw = (dist.metadata["Name"] or "").strip()
            if not raw:
                continue
            try:
                direct = json.loads(dist.read_text("direct_url.json") or "{}")
            except json.JSONDecodeError:
                direct = {}
            meta_dir = getattr(dist, "_path", None)
            rel = os.path.relpath(str(meta_dir), str(self.prefix)) if meta_dir is not None else ""
            name = canonical_name(raw)
            out[name] = Distribution(name=name, version=dist.version,
                                     installer=(dist.read_text("INSTALLER") or "").strip(),
                                     direct_url=tuple(direct.items()) if isinstance(direct, dict) else (),
                                     requires=tuple(dist.requires or ()), metadata_dir=rel)
        return tuple(out[k] for k in sorted(out))

    def versions(self) -> Dict[str, str]:
        """``{normalized distribution name: version}`` of every distribution."""
        return {d.name: d.version for d in self.distributions}

    def pip_installed(self) -> List[Distribution]:
        """The distributions a pip step put there (pip or uv): not conda's (``INSTALLER`` other than
        :data:`PIP_INSTALLERS`, or
        metadata files a conda record owns) and not the venv's own ``pip`` (:data:`VENV_BOOTSTRAP`)."""
        owned_dirs = {os.path.dirname(f) for f in self.conda_files}
        out = []
        for d in self.distributions:
            if d.installer and d.installer not in PIP_INSTALLERS:
                continue
            if d.metadata_dir and d.metadata_dir in owned_dirs:
                continue
            if self.is_venv and d.name in VENV_BOOTSTRAP:
                continue
            out.append(d)
        return out
