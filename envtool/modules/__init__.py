"""Modulefiles for site admins: Lmod (Lua) and Environment Modules (Tcl).

Layout (after Spack's ``spack/spack@04e016a8154f:lib/spack/spack/modules/``):

* :mod:`.content` — :class:`ModuleContent`, what a modulefile says, independent of the format;
* :mod:`.build` — :func:`build_content` fills it in from a prefix and its spec (with
  :mod:`.packages`, :mod:`.naming` and :mod:`.activation`);
* :mod:`.writer` — the :class:`~envtool.modules.writer.ModuleWriter` interface; :mod:`.lmod` and
  :mod:`.tcl` implement it (suffix, rendering with ``templates/``, default marking);
* :mod:`.registry` — the one table of writers, by ``--format`` name;
* :mod:`.tree` — :func:`write_modulefile` puts the text at ``<root>/<name>/<version><suffix>`` and
  marks the default version.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: What ``from envtool.modules import NAME`` gives, and the module that defines it. Loaded on first
#: use (PEP 562 module ``__getattr__``), so that ``import envtool.modules.registry`` (the command
#: line's ``--format`` choices) does not import the builder and the spec model at start-up.
_EXPORTS = {
    "DEFAULT_FORMAT": "envtool.modules.registry", "EnvChange": "envtool.modules.content",
    "ModuleContent": "envtool.modules.content", "build_content": "envtool.modules.build",
    "default_markers": "envtool.modules.tree", "default_name": "envtool.modules.naming",
    "mark_default": "envtool.modules.tree", "modulefile_path": "envtool.modules.tree",
    "other_format": "envtool.modules.tree", "other_format_message": "envtool.modules.tree",
    "parse_module_name": "envtool.modules.naming", "write_modulefile": "envtool.modules.tree",
}

if TYPE_CHECKING:
    from envtool.modules.build import build_content
    from envtool.modules.content import EnvChange, ModuleContent
    from envtool.modules.naming import default_name, parse_module_name
    from envtool.modules.registry import DEFAULT_FORMAT
    from envtool.modules.tree import (default_markers, mark_default, modulefile_path, other_format,
                                      other_format_message, write_modulefile)

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """``envtool.modules.NAME`` for a name of :data:`_EXPORTS`, imported from its module on first use.

    Raises:
        AttributeError: another name.
    """
    if name not in _EXPORTS:
        raise AttributeError(f"module 'envtool.modules' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
