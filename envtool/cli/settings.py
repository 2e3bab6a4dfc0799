"""envtool's configuration: files for defaults, environment variables on top.

Every setting is one of the ``ENVTOOL_*`` environment variables (:data:`SETTINGS`). Its value
comes from, first to last:

1. the environment variable itself, when it is set (and not empty);
2. the user's file ``$XDG_CONFIG_HOME/envtool/config.yaml`` (else ``~/.config/envtool/config.yaml``;
   XDG Base Directory Specification, https://specifications.freedesktop.org/basedir-spec/latest/);
3. the site-wide file ``/etc/envtool/config.yaml`` for administrators (``$ENVTOOL_SYSTEM_CONFIG``
   names another path, for tests and unusual installs);
4. envtool's built-in default.

A file is a YAML mapping of setting names (lower case, without ``ENVTOOL_``) to values::

    cache_dir: /scratch/me/envtool-cache
    spec_path: [~/my-specs, /sw/site-specs]     # a list, or one string with ':' between entries
    installer: uv
    lock_timeout: 600

:func:`apply` runs before every command: each value from a file is checked as the variable would
be (:func:`envtool.cli.common.check_environment`) and then exported as that variable, so every
part of envtool (and the processes it starts) sees one value. ``envtool info`` shows each
effective value and where it came from (:func:`effective`).
"""
from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

#: setting -> (environment variable, kind, meaning). Kinds: ``path`` (one directory), ``paths``
#: (directories, a list or ``:``-separated), ``words`` (a list or a space/comma-separated string),
#: ``text``, ``seconds`` (a number > 0).
SETTINGS: Dict[str, Tuple[str, str, str]] = {
    "cache_dir": ("ENVTOOL_CACHE_DIR", "path", "envtool's own cache (default $XDG_CACHE_HOME/envtool, else ~/.cache/envtool)"),
    "cache_path": ("ENVTOOL_CACHE_PATH", "paths", "read-only site caches of built Horovod wheels"),
    "spec_path": ("ENVTOOL_SPEC_PATH", "paths", "directories of more specs (searched before the bundled ones)"),
    "site_path": ("ENVTOOL_SITE_PATH", "paths", "directories of more site files"),
    "lock_path": ("ENVTOOL_LOCK_PATH", "paths", "directories of lockfiles"),
    "site": ("ENVTOOL_SITE", "text", "the site of this machine (default: detected from the site files)"),
    "installer": ("ENVTOOL_INSTALLER", "text", "what installs pip packages: uv (default) or pip"),
    "start_method": ("ENVTOOL_START_METHOD", "text", "DataLoader start method validate tests (fork, spawn, forkserver)"),
    "default_channels": ("ENVTOOL_DEFAULT_CHANNELS", "words", "conda channels for 'defaults' (a mirror)"),
    "public_index": ("ENVTOOL_PUBLIC_INDEX", "text", "the public package index URL (default https://pypi.org/simple)"),
    "index_mirrors": ("ENVTOOL_INDEX_MIRRORS", "words", "mirrors of public package indexes, PUBLIC=MIRROR each "
                      "(https://download.pytorch.org/whl/cpu=file:///srv/pytorch-cpu); locks record the public URL"),
    "lock_timeout": ("ENVTOOL_LOCK_TIMEOUT", "seconds", "seconds a create waits for another's prefix lock (default 300)"),
}

def _default_cache_dir() -> str:
    from envtool.core.paths import default_cache_root

    return str(default_cache_root())


def _default_channels() -> str:
    from envtool.spec.channels import DEFAULT_CHANNELS

    return " ".join(DEFAULT_CHANNELS)


def _default_public_index() -> str:
    from envtool.lock.portable import DEFAULT_PUBLIC_INDEX

    return DEFAULT_PUBLIC_INDEX


def _default_lock_timeout() -> str:
    from envtool.steps.kernel.transaction import LOCK_TIMEOUT

    return f"{LOCK_TIMEOUT:g}"


#: setting -> a callable giving envtool's built-in default as the variable's text, computed now
#: (``cache_dir`` follows ``$XDG_CACHE_HOME``). A setting of :data:`SETTINGS` not named here has
#: no default value (``site``: detected; the search paths: the bundled files only), which
#: ``envtool config list`` and ``envtool info`` show as ``(none)``; a new setting needs nothing here.
DEFAULTS: Dict[str, Callable[[], Optional[str]]] = {
    "cache_dir": _default_cache_dir,
    "installer": lambda: "uv",
    "default_channels": _default_channels,
    "public_index": _default_public_index,
    "lock_timeout": _default_lock_timeout,
}


def default(key: str) -> Optional[str]:
    """envtool's built-in default of setting ``key`` as the variable's text, or None when it has none."""
    make = DEFAULTS.get(key)
    return make() if make is not None else None


#: Where each setting's value came from after :func:`apply`: setting -> description.
_origins: Dict[str, str] = {}
#: The files looked at by :func:`apply`: ``(path, "read"|"absent")``.
_files: List[Tuple[str, str]] = []


def system_file() -> Path:
    """The site-wide configuration file: ``$ENVTOOL_SYSTEM_CONFIG``, else ``/etc/envtool/config.yaml``."""
    return Path(os.environ.get("ENVTOOL_SYSTEM_CONFIG") or "/etc/envtool/config.yaml")


def user_file() -> Path:
    """The user's configuration file: ``$XDG_CONFIG_HOME/envtool/config.yaml``, else ``~/.config/envtool/config.yaml``."""
    base = os.environ.get("XDG_CONFIG_HOME") or ""
    if not os.path.isabs(base):  # the XDG specification: a relative value is invalid and ignored
        base = os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "envtool" / "config.yaml"


def _as_variable(path: Path, key: str, value, kind: str) -> str:
    """A file's value as the environment variable's text (UsageError naming the file and key)."""
    from envtool.core.errors import UsageError, echo

    def bad(expected: str):
        return UsageError(f"{path}: {key}: expected {expected}, got {echo(repr(value), 120)}")

    if kind in ("paths", "words"):
        items = value if isinstance(value, list) else [value]
        if not all(isinstance(i, str) and i for i in items):
            raise bad("a string or a list of strings" if kind == "words" else "a directory or a list of directories")
        if kind == "words":
            return " ".join(items)
        return os.pathsep.join(os.path.expanduser(i) for j in items for i in j.split(os.pathsep) if i)
    if kind == "seconds":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value != value \
                or value == float("inf"):
            raise bad("a number of seconds greater than 0")
        return str(value)
    if not isinstance(value, str) or not value:
        raise bad("a directory" if kind == "path" else "a non-empty string")
    return os.path.expanduser(value) if kind == "path" else value


#: What a configuration file's errors suggest instead.
_INSTEAD = "keep it where only you or root can write"


def _check_file(path: Path) -> bytes:
    """The bytes of a configuration file, read only when no other user could have written it (exit 2 else).

    envtool's one rule for a path it uses (:mod:`envtool.core.paths`, the same as for caches):
    the way to the file must pass :func:`envtool.core.paths.trusted_path` (every directory on the
    way root's or the caller's and writable by nobody else, group included, unless sticky; every
    link root's or the caller's), and the file itself must be a regular file owned by the caller
    or root and writable by neither its group nor others (a group member could otherwise point
    ``cache_dir`` or ``spec_path`` at a directory of theirs). A group that is its owner's private
    group is the owner alone (:func:`envtool.core.paths.writable_by_others`). The file is opened
    ``O_NOFOLLOW`` and must be the one checked (:func:`envtool.core.paths.open_trusted_file`).

    Returns:
        the file's bytes (at most :data:`envtool.spec.yamlload.MAX_BYTES` + 1).
    Raises:
        UsageError: naming the file (or the component), its owner and mode, and the fix.
        SpecError: the file cannot be read (naming it).
    """
    from envtool.core.errors import SpecError
    from envtool.core.paths import open_trusted_file
    from envtool.spec.yamlload import MAX_BYTES

    try:
        return open_trusted_file(path, "the configuration file", _INSTEAD, MAX_BYTES)
    except OSError as exc:
        raise SpecError(path, "(file)", "a readable YAML file", hint=exc.strerror or str(exc)) from None


def read_file(path: Path) -> Dict[str, str]:
    """One configuration file as ``{VARIABLE: text}``, checked.

    Args:
        path: the file (must exist).
    Returns:
        the variables it sets.
    Raises:
        UsageError: not a mapping, an unknown setting (with the closest names), a wrong type, a
            value the variable would not accept, or a file others can write (exit 2, naming the
            file and the setting).
        SpecError: not YAML, or too large or deep (exit 2, naming the file and line).
    """
    return check_mapping(path, load_mapping(path))


def load_mapping(path: Path) -> Dict[Any, Any]:
    """A configuration file's YAML mapping as written, not yet checked (:func:`check_mapping`);
    the file must be the caller's or root's and writable by no one else (:func:`_check_file`).

    Args:
        path: the file (must exist).
    Returns:
        the mapping (empty for an empty file), in the file's order.
    Raises:
        UsageError: not a mapping, or a file others can write (exit 2, naming the file).
        SpecError: not YAML, or too large or deep (exit 2, naming the file and line).
    """
    from envtool.core.errors import SpecError, UsageError
    from envtool.spec.yamlload import MAX_BYTES, load_yaml_text

    raw = _check_file(path)
    try:
        if len(raw) > MAX_BYTES:
            raise SpecError(path, "(file)", f"a YAML file of at most {MAX_BYTES} bytes")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SpecError(path, "(file)", "UTF-8 text", line=raw.count(b"\n", 0, exc.start) + 1,
                            hint=f"byte 0x{raw[exc.start]:02x} at offset {exc.start} is not UTF-8") from None
        data = load_yaml_text(text, path)
    except SpecError as exc:
        if exc.field == "(top level)":
            raise UsageError(f"{path}: expected a mapping of settings ({', '.join(SETTINGS)})") from None
        raise
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a mapping of settings ({', '.join(SETTINGS)}), got {type(data).__name__}")
    return data


def unknown_setting(where: str, key: str):
    """The error for a name that is not a setting: exit 2, naming ``where`` (a file, or ``config``)
    and the closest setting (:func:`difflib.get_close_matches`) with every setting's name.

    Returns:
        a :class:`~envtool.core.errors.UsageError` to raise.
    """
    from envtool.core.errors import UsageError, echo

    close = difflib.get_close_matches(str(key).lower().removeprefix("envtool_"), list(SETTINGS), n=1)
    return UsageError(f"{where}: {echo(str(key), 80)}: not a setting" + (f" (did you mean {close[0]}?)" if close else "")
                      + f"; expected one of {', '.join(SETTINGS)}")


def check_mapping(path: Path, data: Dict[Any, Any]) -> Dict[str, str]:
    """The settings of a configuration file's mapping as ``{VARIABLE: text}``, each checked as
    :func:`apply` checks them (used by :func:`read_file` and by ``envtool config set``, so a value
    that ``set`` writes is one that every later command reads).

    Args:
        path: the file the mapping is (or will be) in: named in every error.
        data: setting -> value, as YAML gives them.
    Raises:
        UsageError: an unknown setting (with the closest name), a wrong type or a value the
            variable would not accept (exit 2, naming the file and the setting).
    """
    from envtool.core.errors import UsageError
    from envtool.cli.common import check_environment

    out: Dict[str, str] = {}
    for key, value in data.items():
        if key not in SETTINGS:
            raise unknown_setting(str(path), key)
        var, kind, _ = SETTINGS[key]
        out[var] = _as_variable(path, str(key), value, kind)
        try:
            check_environment({var: out[var]})
        except UsageError as exc:
            raise UsageError(f"{path}: {key}: {str(exc).removeprefix('$' + var + ': ')}") from None
    return out


def apply() -> None:
    """Export the settings of the configuration files that the environment does not set
    (see the module docstring for the order); remembers where each value came from.

    Raises:
        UsageError, SpecError: a bad configuration file (exit 2, naming it and the setting).
    """
    _origins.clear()
    _files.clear()
    layers: List[Tuple[str, Dict[str, str]]] = []
    for path in (user_file(), system_file()):
        if path.is_file():
            layers.append((str(path), read_file(path)))
            _files.append((str(path), "read"))
        elif os.path.lexists(path):
            from envtool.core.errors import UsageError

            raise UsageError(f"{path}: expected a configuration file (YAML), got something that is not a regular file")
        else:
            _files.append((str(path), "absent"))
    for key, (var, _, _) in SETTINGS.items():
        if os.environ.get(var):
            _origins[key] = f"environment (${var})"
            continue
        for where, values in layers:
            if var in values:
                os.environ[var] = values[var]
                _origins[key] = where
                if key == "cache_dir":
                    from envtool.core.paths import note_origin

                    note_origin(where)  # an error about the cache root names this file
                break
        else:
            _origins[key] = "default"


def origin_kind(origin: str) -> str:
    """What kind of place an origin of :func:`effective` is: ``environment``, ``user`` (the user's
    file), ``system`` (the site-wide file) or ``default``."""
    if origin.startswith("environment"):
        return "environment"
    if origin == "default":
        return "default"
    return "user" if origin == str(user_file()) else "system"


def effective() -> List[Dict[str, Optional[str]]]:
    """Each setting with its value now and where it came from (after :func:`apply`).

    Returns:
        ``[{"setting", "variable", "value" (None: the default), "from" (``environment ($VAR)``, a
        file's path, or ``default``), "origin" (:func:`origin_kind`), "default" (envtool's built-in
        value, :func:`default`; None: none), "effective" (the value, else the default), "meaning"}]``.
    """
    out = []
    for key, (var, _, meaning) in SETTINGS.items():
        value = os.environ.get(var) or None
        origin = _origins.get(key) or (f"environment (${var})" if value else "default")
        fallback = default(key)
        out.append({"setting": key, "variable": var, "value": value, "from": origin, "origin": origin_kind(origin),
                    "default": fallback, "effective": value if value is not None else fallback, "meaning": meaning})
    return out


def files() -> List[Tuple[str, str]]:
    """The configuration files :func:`apply` looked at, ``(path, "read"|"absent")``, user's first."""
    return list(_files)
