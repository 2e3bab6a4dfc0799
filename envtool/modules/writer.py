"""The interface every modulefile format implements, and helpers its renderers share.

Modelled on Spack's one-writer-class-per-format layout (``spack/spack@04e016a8154f:
lib/spack/spack/modules/common.py``, ``BaseModuleFileWriter``; ``lmod.py`` and ``tcl.py`` beside it):
a :class:`ModuleWriter` subclass owns every fact of its format — the ``--format`` name, the file
suffix, how it renders a :class:`~envtool.modules.content.ModuleContent`, and how the module system
is told which version is the default. :mod:`envtool.modules.registry` holds one instance of each;
nothing else branches on a format.

Adding a format: one new module with a :class:`ModuleWriter` subclass, plus one line in
:mod:`envtool.modules.registry`. ``tests/test_module_writer_contract.py`` checks every registered
writer with the real module system(s) it names in :attr:`ModuleWriter.systems`.
"""
from __future__ import annotations

import abc
from pathlib import Path
from string import Template
from typing import Callable, ClassVar, List, Optional, Sequence, Tuple

from envtool.modules.content import CONTROL_RE, NAME_RE, VAR_RE, EnvChange, ModuleContent


class ModuleWriter(abc.ABC):
    """One modulefile format.

    Class attributes (the format's facts):
        name: the ``--format`` value (``lua``, ``tcl``); a module name part (:data:`NAME_RE`).
        label: what people call the format in messages (``Lua``, ``Tcl``).
        summary: who reads it, for ``--format`` help (``Lmod``).
        suffix: appended to the version to make the file name (``.lua``, or ``""``).
        default_marker: the file in ``<root>/<name>/`` that :meth:`mark_default` writes.
        default_help: how the default is marked, for ``--default`` help.
        systems: the module systems that load this format, for the contract test: ``lmod``
            (Lmod), ``envmodules`` (Environment Modules), or a name a test defines.
    """

    name: ClassVar[str]
    label: ClassVar[str]
    summary: ClassVar[str]
    suffix: ClassVar[str]
    default_marker: ClassVar[str]
    default_help: ClassVar[str]
    systems: ClassVar[Tuple[str, ...]]

    def filename(self, version: str) -> str:
        """The modulefile's name inside ``<root>/<name>/``: ``version`` plus :attr:`suffix`."""
        return version + self.suffix

    @abc.abstractmethod
    def render(self, content: ModuleContent) -> str:
        """The modulefile text for ``content``.

        Raises:
            ValueError: an invalid module or variable name in ``content`` (:func:`check_names`).
        """

    @abc.abstractmethod
    def mark_default(self, directory: Path, version: str) -> Path:
        """Make ``version`` the default of the module whose versions are in ``directory``
        (``<root>/<name>``), replacing an earlier marker of this format atomically.

        Returns:
            the marker written (``directory / default_marker``).
        Raises:
            OSError: ``directory`` cannot be written.
        """

    @abc.abstractmethod
    def default_markers(self, directory: Path, version: str) -> List[Path]:
        """The markers of this format in ``directory`` that make ``version`` the default (empty
        when none does). Never follows a marker outside ``directory``; reads at most a bounded amount."""

    def declared_family(self, text: str) -> Optional[str]:
        """The Lmod ``family`` that modulefile ``text`` of this format declares statically, or None
        (also when the format has no families: the default)."""
        return None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} --format {self.name}>"


def load_template(filename: str) -> Template:
    """The ``string.Template`` in ``envtool/modules/templates/<filename>``."""
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
