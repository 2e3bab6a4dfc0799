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

from envtool.modules.build import build_content
from envtool.modules.content import EnvChange, ModuleContent
from envtool.modules.naming import default_name, parse_module_name
from envtool.modules.registry import DEFAULT_FORMAT
from envtool.modules.tree import (default_markers, mark_default, modulefile_path, other_format, other_format_message,
                                  write_modulefile)

__all__ = ["DEFAULT_FORMAT", "EnvChange", "ModuleContent", "build_content", "default_markers", "default_name",
           "mark_default", "modulefile_path", "other_format", "other_format_message", "parse_module_name",
           "write_modulefile"]
