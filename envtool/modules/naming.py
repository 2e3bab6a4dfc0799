"""Module names: ``NAME/VERSION`` as given on the command line, and the default one for a prefix."""
from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Optional, Tuple

from envtool.core.errors import UsageError
from envtool.modules.content import NAME_RE
from envtool.spec.model import Spec


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


