"""``envtool config list|get|set|unset``: read and write envtool's configuration files.

Modelled on ``conda config`` (https://docs.conda.io/projects/conda/en/stable/commands/config.html),
``pixi config`` (https://pixi.sh/latest/reference/cli/pixi/config/) and ``pip config``
(https://pip.pypa.io/en/stable/cli/pip_config/): ``set`` and ``unset`` change the user's file
``$XDG_CONFIG_HOME/envtool/config.yaml`` (``--system``: the site-wide file, when writable); ``list``
shows every setting with its effective value, its default and where the value came from
(environment variable, user file, site-wide file, default); ``get`` prints one value.

The settings, the files and their order are those of :mod:`envtool.cli.settings`: a setting added
to :data:`~envtool.cli.settings.SETTINGS` is listed, read and written here with nothing more. A value
``set`` is checked exactly as every command checks the file (:func:`envtool.cli.settings.check_mapping`)
before the file is replaced (atomically, :func:`envtool.core.atomic.write_text_atomic`), keeping its
other settings; YAML comments in the file are not kept (PyYAML writes the mapping afresh).
"""
from __future__ import annotations

from pathlib import Path

from envtool.cli.common import add_json, print_json


def register(sub) -> None:
    p = sub.add_parser("config", help="show and change envtool's settings (list, get, set, unset)",
                       description="envtool's settings and where each comes from: an ENVTOOL_* environment "
                                   "variable, else the user's file $XDG_CONFIG_HOME/envtool/config.yaml (default "
                                   "~/.config/envtool/config.yaml), else the site-wide file /etc/envtool/config.yaml "
                                   "($ENVTOOL_SYSTEM_CONFIG), else envtool's default. 'set' and 'unset' change the "
                                   "user's file (--system: the site-wide one); a value is checked as every command "
                                   "checks the file before the file is replaced, its other settings kept.")
    csub = p.add_subparsers(dest="config_command", metavar="ACTION")
    ls = csub.add_parser("list", help="every setting: its effective value, default and origin")
    add_json(ls)
    ls.set_defaults(func=run_list)
    get = csub.add_parser("get", help="the effective value of one setting (else its default)")
    get.add_argument("key", metavar="KEY", help="a setting (see 'envtool config list')")
    add_json(get)
    get.set_defaults(func=run_get)
    st = csub.add_parser("set", help="write a setting into the user's configuration file (--system: the site's)",
                         description="Write KEY: VALUE into the user's configuration file (created if need be), "
                                     "checked as every command checks it: a setting that does not exist or a value "
                                     "the setting does not take is refused (exit 2) and nothing is written. Lists "
                                     "(spec_path, cache_path, site_path, lock_path) take directories separated by "
                                     "':'; default_channels takes names separated by spaces or commas; index_mirrors "
                                     "PUBLIC=MIRROR pairs separated by spaces or commas; lock_timeout "
                                     "a number of seconds.")
    st.add_argument("key", metavar="KEY", help="a setting (see 'envtool config list')")
    st.add_argument("value", metavar="VALUE", help="its value")
    _add_system(st)
    add_json(st)
    st.set_defaults(func=run_set)
    un = csub.add_parser("unset", help="remove a setting from the user's configuration file (--system: the site's)")
    un.add_argument("key", metavar="KEY", help="a setting (see 'envtool config list')")
    _add_system(un)
    add_json(un)
    un.set_defaults(func=run_unset)
    for parser in (p, ls, get, st, un):
        # the configuration files are read by the action itself, so that a bad file can be fixed
        # with 'config set'/'unset' and is reported by 'config list' (envtool.cli.main)
        parser.set_defaults(settings_later=True)
    p.set_defaults(func=_no_action, config_parser=p)


def _add_system(parser) -> None:
    parser.add_argument("--system", action="store_true",
                        help="the site-wide file (/etc/envtool/config.yaml, or $ENVTOOL_SYSTEM_CONFIG) instead of "
                             "the user's; it must be writable (administrators)")


def _no_action(args) -> int:
    import sys

    args.config_parser.print_help(sys.stderr)
    return 2


def _key(key: str) -> str:
    """``key`` when it is a setting (``ENVTOOL_CACHE_DIR`` and ``CACHE-DIR`` name ``cache_dir`` too).

    Raises:
        UsageError: no such setting (exit 2, with the closest name).
    """
    from envtool.cli import settings

    name = key.strip().lower().replace("-", "_").removeprefix("envtool_")
    if name not in settings.SETTINGS:
        raise settings.unknown_setting("config", key)
    return name


def _effective(key=None):
    """The rows of :func:`envtool.cli.settings.effective` after reading the files (all, or ``key``'s)."""
    from envtool.cli import settings

    settings.apply()
    rows = settings.effective()
    return [r for r in rows if key is None or r["setting"] == key]


def run_list(args) -> int:
    from envtool.cli import settings
    from envtool.core.term import table_width

    rows = _effective()
    if args.json:
        print_json({"files": [{"path": p, "status": s, "scope": "user" if i == 0 else "system"}
                              for i, (p, s) in enumerate(settings.files())], "settings": rows})
        return 0
    for i, (path, status) in enumerate(settings.files()):
        print(f"# {'user' if i == 0 else 'site-wide'} file: {path} ({status})")
    for line in format_rows(rows, table_width()):
        print(line)
    return 0


def format_rows(rows, width=None):
    """``config list``'s lines: ``SETTING = VALUE  [ORIGIN]`` with the default beside a value that
    is not it; wrapped below the setting's name when a line would be wider than ``width`` columns.

    Args:
        rows: :func:`envtool.cli.settings.effective`'s rows.
        width: the columns available, or None (no limit).
    Returns:
        the lines.
    """
    import textwrap

    out = []
    pad = max(len(r["setting"]) for r in rows)
    for r in rows:
        value = r["effective"] if r["effective"] is not None else "(none)"
        where = {"environment": f"${r['variable']}", "user": "user file", "system": "site-wide file",
                 "default": "default"}[r["origin"]]
        note = f"  [{where}" + (f"; default {r['default']}" if r["origin"] != "default" and r["default"] else "") + "]"
        line = f"{r['setting'].ljust(pad)} = {value}{note}"
        if width is None or len(line) <= width:
            out.append(line)
        else:
            out.append(f"{r['setting']} =")
            out += textwrap.wrap(f"{value}{note}", width, initial_indent="    ", subsequent_indent="    ",
                                 break_long_words=False, break_on_hyphens=False)
    return out


def run_get(args) -> int:
    import sys

    row = _effective(_key(args.key))[0]
    if args.json:
        print_json(row)
    elif row["effective"] is not None:
        print(row["effective"])
    else:
        print(f"{row['setting']}: not set, and no default ({row['meaning']})", file=sys.stderr)
    return 0


def _target(system: bool):
    """The file ``set``/``unset`` change: the user's, or with ``system`` the site-wide one.

    Raises:
        UsageError: the site-wide file (or its directory, when it does not exist yet) is not
            writable by this user (exit 2).
    """
    import os

    from envtool.cli import settings
    from envtool.core.errors import UsageError

    if not system:
        return settings.user_file()
    path = settings.system_file()
    where = path if path.exists() else path.parent
    if not where.is_dir() and where == path.parent:
        raise UsageError(f"{path}: the site-wide configuration file's directory {where} does not exist; an "
                         "administrator creates it (without --system, the user's file is changed)")
    if not os.access(where, os.W_OK):
        raise UsageError(f"{path}: the site-wide configuration file is not writable by you ({where}); --system is "
                         "for administrators (without it, the user's file is changed)")
    return path


def _plain(value):
    """``value`` as plain dicts, lists and scalars (what PyYAML's safe dumper writes)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _parse(key: str, text: str):
    """A command-line VALUE as the file holds it: a number for ``seconds`` settings, else the text."""
    from envtool.cli import settings

    if settings.SETTINGS[key][1] == "seconds":
        try:
            number = float(text)
        except ValueError:
            return text  # refused by check_mapping, naming the file and key
        return int(number) if number.is_integer() else number
    return text


def _write(path, data) -> None:
    """Replace ``path`` with the mapping ``data`` (YAML), atomically; its directory is made if need be.

    An existing file keeps its permission bits (a file the user made ``0600`` stays so; a new one
    is ``0600``: a mirror or cache path is nobody else's business), and a symbolic
    link (a dotfiles checkout) is written through: its target is replaced, the link stays. YAML
    comments in the file are not kept (PyYAML reads none). The way to the file is checked first
    (:func:`envtool.core.paths.walk_trusted`): a link or directory another user owns or can write
    is refused (exit 2), and links are followed by hand, not by the kernel.

    Raises:
        UsageError: see :func:`envtool.core.paths.trusted_path`.
    """
    import os
    import stat

    import yaml

    from envtool.core.atomic import write_text_atomic
    from envtool.core.paths import walk_trusted

    # envtool's rule for paths (envtool.core.paths): never through another user's link or directory
    _, real = walk_trusted(path, "the configuration file", "keep it where only you or root can write")
    target = Path(real)
    target.parent.mkdir(parents=True, exist_ok=True)
    walk_trusted(target, "the configuration file", "keep it where only you or root can write")
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        mode = 0o600
    text = yaml.safe_dump(_plain(data), sort_keys=False, default_flow_style=False, allow_unicode=True) if data else ""
    write_text_atomic(target, text, mode=mode)


def _current(path):
    """The mapping in ``path`` (empty when there is no file yet)."""
    import os

    from envtool.cli import settings
    from envtool.core.errors import UsageError

    if not os.path.lexists(path):
        return {}
    if not path.is_file():
        raise UsageError(f"{path}: expected a configuration file (YAML), got something that is not a regular file")
    return dict(settings.load_mapping(path))


def run_set(args) -> int:
    from envtool.cli import settings

    key = _key(args.key)
    path = _target(args.system)
    data = _current(path)
    data[key] = _parse(key, args.value)
    settings.check_mapping(path, data)  # every setting of the file as a command will read it, before writing
    _write(path, data)
    if args.json:
        print_json({"file": str(path), "setting": key, "value": data[key]})
    else:
        print(f"{key} = {data[key]} (written to {path})")
    return 0


def run_unset(args) -> int:
    import sys

    path = _target(args.system)
    data = _current(path)
    # a name the file holds is removed even when it is not a setting (a misspelt one that makes
    # every command refuse the file); any other name must be a setting
    key = args.key if args.key in data else _key(args.key)
    present = key in data
    if present:
        del data[key]
        _write(path, data)
    if args.json:
        print_json({"file": str(path), "setting": key, "removed": present})
    elif present:
        print(f"{key} removed from {path}")
    else:
        print(f"{key} is not set in {path}; nothing changed", file=sys.stderr)
    return 0
