"""Which site this machine is (:func:`detect`, from the site files' ``detect`` rules) and where a
clone goes here by default (:func:`clone_prefix`)."""
from __future__ import annotations

import os
import socket
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

from envtool.core.errors import SpecError
from envtool.spec.sites.files import SiteFile, available, find, load_site


@dataclass(frozen=True)
class Detection:
    """The site recognised on this machine.

    Attributes:
        name: the site's name.
        path: its site file.
        reason: what matched (``NERSC_HOST=perlmutter``), or ``$ENVTOOL_SITE`` when set.
    """

    name: str
    path: Path
    reason: str


def detect(environ: Optional[Mapping[str, str]] = None, hostname: Optional[str] = None) -> Optional[Detection]:
    """The site this machine belongs to: ``$ENVTOOL_SITE`` when set, else the first site file (in
    :func:`available` order: ``$ENVTOOL_SITE_PATH`` first, then the bundled ones) one of whose
    ``detect`` rules matches; None when no site matches.

    Site files that do not parse are skipped here (``envtool show --site NAME`` reports them).

    Args:
        environ: the environment (default ``os.environ``).
        hostname: the host name (default ``socket.gethostname()``).
    Returns:
        a :class:`Detection`, or None.
    Raises:
        SpecError: ``$ENVTOOL_SITE`` names no known site.
    """
    env = os.environ if environ is None else environ
    forced = env.get("ENVTOOL_SITE")
    if forced:
        return Detection(name=forced, path=find(forced), reason="$ENVTOOL_SITE")
    host = socket.gethostname() if hostname is None else hostname
    for name, path in available().items():
        try:
            sf = load_site(path)
        except SpecError:
            continue
        for rule in sf.detect:
            said = rule.matches(env, host)
            if said is not None:
                return Detection(name=sf.name, path=path, reason=said)
    return None


def clone_prefix(site: SiteFile, spec_name: str, environ: Optional[Mapping[str, str]] = None) -> Optional[Path]:
    """The site's default prefix for a clone of ``spec_name`` (its ``clone_prefix``), or None when
    the site names none or a variable it uses is unset.

    Args:
        site: the site file.
        spec_name: the spec (or site variant) name put for ``{spec}``.
        environ: the environment for ``$VAR`` (default ``os.environ``).
    Returns:
        an absolute path, or None.
    """
    if not site.clone_prefix:
        return None
    env = dict(os.environ if environ is None else environ)
    try:
        text = string.Template(site.clone_prefix.replace("{spec}", spec_name)).substitute(env)
    except (KeyError, ValueError):
        return None
    return Path(os.path.abspath(os.path.expanduser(text)))
