"""Which program installs pip packages (uv or pip), decided once when planning, and its commands.

uv installs a wheel it has cached by linking its files into the environment (hard links where
cache and prefix share a filesystem, copies otherwise: ``UV_LINK_MODE``), so a second install of
torch takes under a second where pip unpacks the ~700 MB wheel again. But uv reads neither pip's
configuration files nor ``PIP_*`` variables (uv docs, "Compatibility with pip":
https://docs.astral.sh/uv/pip/compatibility/), while sites — and our own machines — configure pip
with a mirror index, extra indexes, a local wheelhouse (``find-links``) and constraint files.
Left alone, uv would install other artifacts than pip (the CUDA torch from PyPI instead of the
CPU one from the wheelhouse). So envtool reads the *effective* pip configuration with
``pip config list`` (files and ``PIP_*`` variables, pip's own precedence) and hands it to uv as
options; a key uv cannot honour makes envtool use pip for that plan and say why.

What uv is also told, and why:

* ``--no-config``: uv's own ``uv.toml`` files are not read, so pip's configuration is the only
  one (a ``uv.toml`` in the user's working directory must not change what a lock installs).
* ``--index-url https://pypi.org/simple`` when pip's configuration names none (pip's default), so a
  stray ``UV_INDEX_URL``/``UV_DEFAULT_INDEX`` cannot point uv elsewhere.
* ``--index-strategy unsafe-best-match``: pip considers every index and link location and takes
  the best version among them; uv's default stops at the first index that has the package (uv
  docs, "Packages that exist on multiple indexes").

pip stays: ``--installer pip`` (or ``$ENVTOOL_INSTALLER=pip``) uses the environment's own
``python -m pip`` for every install, and Horovod is always built with pip (``pip wheel
--no-build-isolation``: its compile output and progress are pip's).
"""
from __future__ import annotations

import ast
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from envtool.core import external
from envtool.core.errors import UsageError
from envtool.core.plan import Installer

#: Installers ``--installer`` accepts.
INSTALLERS = ("uv", "pip")

#: pip's default index (pip ``--index-url`` default: https://pip.pypa.io/en/stable/cli/pip_install/).
PYPI_SIMPLE = "https://pypi.org/simple"

#: Keys that change only pip's own output or housekeeping, not what is installed: not passed.
_COSMETIC = frozenset({
    "format", "not-required", "outdated", "uptodate", "exclude-editable", "include-editable", "list-columns",
    "disable-pip-version-check", "no-python-version-warning", "root-user-action", "progress-bar", "verbose",
    "quiet", "no-input", "log", "log-file", "no-color", "cache-dir", "no-warn-script-location",
    "no-warn-conflicts", "config-file", "require-virtualenv", "require-venv", "exists-action", "retries",
    "break-system-packages", "use-feature", "use-deprecated", "python", "yes", "compile", "no-compile",
})

#: pip key -> uv option, one option per whitespace-separated value (pip splits these lists the same way).
_LIST_OPTIONS = {"extra-index-url": "--extra-index-url", "find-links": "--find-links",
                 "constraint": "--constraint", "trusted-host": "--allow-insecure-host"}
#: pip key -> uv option taking the value as is.
_VALUE_OPTIONS = {"index-url": "--index-url", "only-binary": "--only-binary", "no-binary": "--no-binary"}
#: pip's ``keyring-provider`` values uv takes as they are (uv: ``disabled``, ``subprocess``; pip's
#: ``auto`` and ``import`` have no uv equivalent, so pip installs).
_KEYRING = ("disabled", "subprocess")
#: pip boolean key -> uv flag given when the value is true.
_FLAG_OPTIONS = {"no-index": "--no-index", "pre": "--prerelease=allow"}
#: pip keys whose configured value pip reads against intuition (``no-cache-dir``: any value turns
#: the cache off; ``no-build-isolation=0`` turns isolation off — pip's ``store_false`` options):
#: no-cache-dir changes only where downloads are kept (uv: ``--no-cache`` for any value);
#: no-build-isolation makes pip install (unsupported for uv).
_ANY_VALUE_FLAGS = {"no-cache-dir": "--no-cache"}
#: pip key -> environment variable uv reads for the same setting.
_ENV_OPTIONS = {"cert": "SSL_CERT_FILE", "client-cert": "SSL_CLIENT_CERT", "proxy": "HTTPS_PROXY"}
#: URL-valued keys whose values may carry inline credentials (``https://user:token@mirror/simple``):
#: such values go to uv through these variables, never through its argv (which every user of a
#: shared login node can read in ``ps``), joined by the separator uv expects.
_SECRET_ENV = {"index-url": ("UV_INDEX_URL", " "), "extra-index-url": ("UV_EXTRA_INDEX_URL", " "),
               "find-links": ("UV_FIND_LINKS", ","), "constraint": ("UV_CONSTRAINT", " ")}
#: Keys whose values are local paths pip expands ``~`` in.
_PATH_KEYS = ("find-links", "constraint")
#: Inherited ``UV_*`` variables kept for uv: where its cache is, how it links, how much it does
#: at once, whether it draws progress bars — none changes what is installed. Every other
#: ``UV_*`` variable (``UV_INDEX``, ``UV_TORCH_BACKEND``, ``UV_PRERELEASE``, ``UV_EXCLUDE_NEWER`` …)
#: is removed from uv's environment, so pip's configuration is the only one.
UV_KEEP = frozenset({"UV_CACHE_DIR", "UV_LINK_MODE", "UV_CONCURRENT_DOWNLOADS", "UV_CONCURRENT_INSTALLS",
                     "UV_CONCURRENT_BUILDS", "UV_NO_PROGRESS", "UV_NATIVE_TLS", "UV_SYSTEM_CERTS"})


def _has_auth(url: str) -> bool:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return bool(parts.netloc) and "@" in parts.netloc


#: pip's timeout keys (seconds) -> ``UV_HTTP_TIMEOUT`` (whole seconds).
_TIMEOUT_KEYS = ("timeout", "default-timeout")

_TRUE = frozenset({"1", "true", "yes", "on", "y", "t"})
_FALSE = frozenset({"0", "false", "no", "off", "n", "f", ""})


class PipConfigError(Exception):
    """pip's configuration could not be read (``pip config list`` failed or printed something else)."""


def read_pip_config(python: str, env: Optional[Dict[str, str]] = None, timeout: float = 60.0) -> Dict[str, str]:
    """The effective configuration ``pip install`` sees: ``pip config list`` run by ``python``.

    pip lists every loaded key as ``section.key='value'`` (the value as a Python literal), with
    ``PIP_*`` variables in the section ``:env:``. For ``pip install`` a key is looked up in the
    sections ``global``, then ``install``, then ``:env:``, the later winning (pip
    ``ConfigOptionParser._get_ordered_configuration_items``); that merge is done here.

    Args:
        python: an interpreter with pip (the one the venv is made from, or envtool's own).
        env: the environment pip runs with (default: this process's).
        timeout: seconds before giving up.
    Returns:
        ``{key: value}`` (keys without section, e.g. ``find-links``; values as pip stores them).
    Raises:
        PipConfigError: pip could not be run, failed, timed out, or printed a line that is not
            ``section.key=literal``.
    """
    memo_key = _pip_config_key(python) if env is None else ""
    remembered = _pip_config_memo(memo_key) if memo_key else None
    if remembered is not None:
        return remembered
    argv = [python, "-m", "pip", "config", "list", "--disable-pip-version-check"]
    try:
        proc = external.run(argv, timeout=timeout, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PipConfigError(f"{shlex.join(argv)}: {exc}") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [""])[-1]
        raise PipConfigError(f"{shlex.join(argv)} exited {proc.returncode}: {last[-300:]}")
    by_section: Dict[str, Dict[str, str]] = {}
    for line in proc.stdout.splitlines():
        if not line.strip():
            continue
        name, sep, literal = line.partition("=")
        section, dot, key = name.rpartition(".")
        try:
            value = ast.literal_eval(literal) if sep else None
        except (ValueError, SyntaxError):
            value = None
        if not (sep and dot and key) or not isinstance(value, str):
            raise PipConfigError(f"{shlex.join(argv)}: unexpected line {line[:200]!r}")
        by_section.setdefault(section, {})[key] = value
    merged: Dict[str, str] = {}
    for section in ("global", "install", ":env:"):
        merged.update(by_section.get(section, {}))
    if memo_key and _pip_config_key(python) == memo_key:  # nothing it depends on changed while pip ran
        _pip_config_remember(memo_key, merged)
    return merged


#: the cache's directory (below the cache root) of :func:`read_pip_config`'s remembered answer.
PIP_CONFIG_SUBDIR = "pip-config"
#: variables that change what ``pip config list`` finds or lists (pip docs, "Configuration":
#: https://pip.pypa.io/en/stable/topics/configuration/#location), beside every ``PIP_*`` one.
_PIP_CONFIG_VARS = ("HOME", "XDG_CONFIG_HOME", "XDG_CONFIG_DIRS", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME",
                    "PYTHONUSERBASE", "PYTHONNOUSERSITE", "PYTHONSAFEPATH")


def _pip_config_key(python: str) -> str:
    """A digest of everything ``python -m pip config list`` reads, or ``""`` (then pip is run).

    Covers: the interpreter (its path, real path, size and modification time); pip's package beside
    it (``__init__.py`` under ``lib/python3*/site-packages`` of its prefix, its real prefix and the
    user's site) by size, modification and change time; every configuration file pip reads on Linux
    (pip docs, "Configuration", https://pip.pypa.io/en/stable/topics/configuration/#location): the
    global ``/etc/pip.conf`` and ``$XDG_CONFIG_DIRS/pip/pip.conf``, the user's ``~/.pip/pip.conf``
    and ``$XDG_CONFIG_HOME/pip/pip.conf``, the site's ``PREFIX/pip.conf``, ``$PIP_CONFIG_FILE``:
    present or not, size, modification and change time, inode; every ``PIP_*`` variable and the
    variables that move those files (:data:`_PIP_CONFIG_VARS`). No pip found beside the
    interpreter: ``""``."""
    import glob
    import hashlib

    def stamp(path: str) -> str:
        try:
            st = os.stat(path)
        except OSError as exc:
            return f"{path} absent {exc.errno}"
        return f"{path} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns} {st.st_ino}"

    try:
        real = os.path.realpath(python)
        prefixes = sorted({os.path.dirname(os.path.dirname(os.path.abspath(python))),
                           os.path.dirname(os.path.dirname(real))})
        home = os.path.expanduser("~")
        users = glob.glob(os.path.join(os.environ.get("PYTHONUSERBASE") or os.path.join(home, ".local"),
                                       "lib", "python3*", "site-packages", "pip", "__init__.py"))
        pips = sorted({f for p in prefixes for f in glob.glob(os.path.join(glob.escape(p), "lib", "python3*",
                                                                            "site-packages", "pip", "__init__.py"))})
        if not pips:
            return ""
        xdg_dirs = (os.environ.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(":")
        files = (["/etc/pip.conf"] + [os.path.join(d, "pip", "pip.conf") for d in xdg_dirs if d]
                 + [os.path.join(home, ".pip", "pip.conf"),
                    os.path.join(os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config"), "pip", "pip.conf")]
                 + [os.path.join(p, "pip.conf") for p in prefixes]
                 + ([os.environ["PIP_CONFIG_FILE"]] if os.environ.get("PIP_CONFIG_FILE") else []))
        h = hashlib.sha256()
        for part in (["format 1", f"python {os.path.abspath(python)} -> {stamp(real)}"]
                     + [stamp(f) for f in pips + sorted(users) + files]
                     + [f"env {k}={v}" for k, v in sorted(os.environ.items())
                        if k.startswith("PIP_") or k in _PIP_CONFIG_VARS]):
            h.update(part.encode("utf-8", "surrogateescape") + b"\0")
        return h.hexdigest()
    except (OSError, ValueError):
        return ""


def _pip_config_memo(key: str) -> Optional[Dict[str, str]]:
    """The configuration remembered under ``key``, or None (none, another key, not the user's own
    regular file that nobody else can write, malformed)."""
    import json
    import stat

    from envtool.core.paths import cache_root

    try:
        fd = os.open(cache_root() / PIP_CONFIG_SUBDIR / "config.json",
                     os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError):
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022 or st.st_size > 1 << 20:
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = json.loads(f.read((1 << 20) + 1))
        config = data["config"] if isinstance(data, dict) and data.get("key") == key else None
        if isinstance(config, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in config.items()):
            return dict(config)
        return None
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None
    finally:
        os.close(fd)


def _pip_config_remember(key: str, config: Dict[str, str]) -> None:
    """Keep ``config`` under ``key`` for the next run (written beside, then renamed); never raises."""
    import json

    from envtool.core.errors import EnvtoolError
    from envtool.core.paths import cache_dir

    try:
        d = cache_dir(PIP_CONFIG_SUBDIR)
        tmp = d / f".config.json.tmp-{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(json.dumps({"key": key, "config": config}))
            os.replace(tmp, d / "config.json")
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    except (OSError, EnvtoolError, ValueError):
        pass


def uv_arguments(config: Dict[str, str]) -> Tuple[Tuple[str, ...], Tuple[Tuple[str, str], ...], Tuple[str, ...], List[str]]:
    """Translate pip's effective configuration into uv options and variables.

    Args:
        config: :func:`read_pip_config`'s result.
    Returns:
        ``(args, env, passed, unsupported)``: uv options (``--index-url``, one ``--find-links`` per
        location …, always with ``--index-strategy unsafe-best-match`` and ``--prerelease=explicit``
        unless pip's ``pre`` is set), environment
        variables (``SSL_CERT_FILE`` …) as ``(name, value)`` pairs, the keys passed, and the keys
        uv cannot honour (then pip must install: :func:`decide`).
    """
    args: List[str] = []
    env: List[Tuple[str, str]] = []
    passed: List[str] = []
    unsupported: List[str] = []
    for key in sorted(config):
        value = config[key]
        if key in _COSMETIC or (not value.strip() and key not in _FLAG_OPTIONS):
            continue  # an empty value (PIP_INDEX_URL="") sets nothing
        items = value.split() if key in _LIST_OPTIONS else [value.strip()]
        if key in _PATH_KEYS:
            items = [os.path.expanduser(v) if v.startswith("~") else v for v in items]
            value = " ".join(items)
        if key in _SECRET_ENV and any(_has_auth(v) for v in items):
            name, sep = _SECRET_ENV[key]
            env.append((name, sep.join(items)))  # credentials: not in argv (redacted when shown)
            passed.append(key)
            continue
        if key in _VALUE_OPTIONS:
            args += [_VALUE_OPTIONS[key], value.strip()]
        elif key in _LIST_OPTIONS:
            for item in value.split():
                args += [_LIST_OPTIONS[key], item]
        elif key in _FLAG_OPTIONS:
            flag = value.strip().lower()
            if flag in _TRUE:
                args.append(_FLAG_OPTIONS[key])
            elif flag in _FALSE:
                continue  # pip's default: nothing to pass
            else:
                unsupported.append(f"{key}={value!r}")
                continue
        elif key in _ANY_VALUE_FLAGS:
            args.append(_ANY_VALUE_FLAGS[key])
        elif key == "keyring-provider":
            if value.strip() not in _KEYRING:
                unsupported.append(f"{key}={value.strip()!r}")
                continue
            args += ["--keyring-provider", value.strip()]
        elif key == "user" and value.strip().lower() in _FALSE:
            continue  # pip's default
        elif key in _ENV_OPTIONS:
            env.append((_ENV_OPTIONS[key], value.strip()))
            if key == "proxy":
                env.append(("HTTP_PROXY", value.strip()))
        elif key in _TIMEOUT_KEYS:
            try:
                seconds = float(value)
            except ValueError:
                unsupported.append(f"{key}={value!r}")
                continue
            env.append(("UV_HTTP_TIMEOUT", str(max(1, int(round(seconds))))))
        else:
            unsupported.append(key)
            continue
        passed.append(key)
    if "cert" not in passed and not any(os.environ.get(v) for v in ("UV_NATIVE_TLS", "UV_SYSTEM_CERTS", "SSL_CERT_FILE")):
        # pip trusts the system's certificate store (Debian's and Ubuntu's pip are patched to use
        # /etc/ssl/certs; pip >= 24.2 uses truststore: https://pip.pypa.io/en/stable/topics/https-certificates/);
        # uv trusts its own bundled roots unless told otherwise
        # (https://docs.astral.sh/uv/concepts/authentication/certificates/), so behind a site's TLS
        # proxy pip works and uv fails with "invalid peer certificate: UnknownIssuer"
        env.append(("UV_NATIVE_TLS", "1"))
    if "index-url" not in passed and "--no-index" not in args:
        args = ["--index-url", PYPI_SIMPLE] + args
    args += ["--index-strategy", "unsafe-best-match"]
    if "--prerelease=allow" not in args:
        # pip takes a prerelease only when a specifier names one (PEP 440 "Handling of pre-releases");
        # uv's default also takes one when nothing else satisfies a range
        args.append("--prerelease=explicit")
    return tuple(args), tuple(dict(env).items()), tuple(passed), unsupported


def find_uv() -> Tuple[str, str]:
    """The ``uv`` executable and its version: the ``uv`` package's binary, else ``uv`` on ``PATH``.

    Returns:
        ``(path, "uv X.Y.Z")``, or ``("", "")`` when there is none that runs.
    """
    path = ""
    try:
        from uv import find_uv_bin  # the PyPI package "uv" ships the binary with this finder

        path = find_uv_bin()
    except (ImportError, FileNotFoundError, OSError):
        path = ""
    import shutil

    path = path or shutil.which("uv") or ""
    if not path:
        return "", ""
    try:
        out = external.run([path, "--version"], timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "", ""
    if out.returncode != 0:
        return "", ""
    return os.path.abspath(path), " ".join(out.stdout.split()[:2])


def requested(option: Optional[str]) -> str:
    """The installer asked for: ``--installer``, else ``$ENVTOOL_INSTALLER``, else ``uv``.

    Raises:
        UsageError: ``$ENVTOOL_INSTALLER`` names neither ``uv`` nor ``pip``.
    """
    if option:
        return option
    value = os.environ.get("ENVTOOL_INSTALLER", "").strip()
    if not value:
        return "uv"
    if value not in INSTALLERS:
        raise UsageError(f"$ENVTOOL_INSTALLER: expected one of {', '.join(INSTALLERS)}, got {value!r}")
    return value


def base_python() -> str:
    """The interpreter whose ``pip config list`` is what a new environment's pip reads: this one's
    base interpreter when envtool runs from a venv (that venv's own ``pip.conf`` is not the new
    environment's), else this one (``sys._base_executable``, CPython >= 3.7; ``sys.executable``)."""
    base = getattr(sys, "_base_executable", "") or ""
    return base if base and os.path.exists(base) else sys.executable


def decide(want: str = "uv", python: Optional[str] = None, layered: bool = False) -> Installer:
    """Decide how this plan installs pip packages.

    Args:
        want: ``uv`` or ``pip``.
        python: the interpreter whose pip configuration counts (default: :func:`base_python`).
        layered: the target sees packages it does not hold (a ``system_site_packages`` venv, a
            venv layered over a cloned one): uv does not count those as installed and would
            install copies over them, so pip installs.
    Returns:
        an :class:`~envtool.core.plan.Installer`: uv with pip's configuration as options, or pip —
        when asked, when no ``uv`` runs here, when pip's configuration cannot be read, or when it
        holds a key uv cannot honour (named in ``reason``).
    Raises:
        UsageError: ``want`` is neither ``uv`` nor ``pip``; pip's configuration is broken (pip
            itself would refuse to install).
    """
    if want not in INSTALLERS:
        raise UsageError(f"--installer: expected one of {', '.join(INSTALLERS)}, got {want!r}")
    if want == "pip":
        return Installer(name="pip", reason="pip (asked for)")
    if layered:
        return Installer(name="pip", reason="pip: the environment layers over packages it does not hold, "
                                            "which uv would install again")
    program, version = find_uv()
    if not program:
        return Installer(name="pip", reason="pip: no uv found (pip install uv, or put uv on PATH)")
    try:
        config = read_pip_config(python or base_python())
    except PipConfigError as exc:
        if "No module named pip" in str(exc):
            return Installer(name="pip", reason="pip: this interpreter has no pip to read pip's configuration with")
        raise UsageError(f"pip's configuration cannot be read ({exc}); fix it (see 'pip config debug')") from None
    args, env, passed, unsupported = uv_arguments(config)
    if unsupported:
        return Installer(name="pip", reason="pip: uv cannot honour pip's configuration key(s) "
                         + ", ".join(unsupported))
    drop = tuple(sorted(k for k in os.environ if k.startswith("UV_") and k not in UV_KEEP))
    return Installer(name="uv", program=program, version=version, args=args, env=env, passed=passed, drop_env=drop,
                     reason=f"{version}, with pip's configuration"
                     + (f" ({', '.join(passed)})" if passed else " (none set)"))


def compile_command(py: str, prefix: Path, link: bool = True) -> Tuple[str, ...]:
    """Byte-compile ``PREFIX/lib`` with the environment's interpreter, reusing the bytecode of
    sources uv hard-linked from its cache (:mod:`envtool.probes.bytecode`; the bytecode of such
    sources is kept by inode in ``<envtool cache>/bytecode``); files that do not compile are
    skipped, as pip skips them. ``link`` False: nothing is linked or kept (the store argument is ``""``)."""
    from envtool.core.paths import cache_root
    from envtool.probes import probe_path

    return (py, str(probe_path("bytecode")), str(Path(prefix) / "lib"), str(cache_root() / "bytecode") if link else "")


def bytecode_store(argv: Sequence[str]) -> Optional[Path]:
    """The bytecode store ``argv`` links from and keeps into when it is a :func:`compile_command`
    (``PY …/probes/bytecode.py LIB STORE`` with a store), else None. The runner makes it under
    envtool's rule for its cache (:func:`envtool.core.paths.ensure_dir`) before the probe runs:
    the probe itself creates and ``chmod``-s nothing but the store it is given."""
    from envtool.probes import probe_path

    if len(argv) == 4 and str(argv[1]) == str(probe_path("bytecode")) and argv[3]:
        return Path(argv[3])
    return None


def install_commands(installer: Optional[Installer], py: str, prefix: Path, reqs: Sequence[str],
                     exact: bool = False) -> Tuple[Tuple[str, ...], ...]:
    """The commands that install ``reqs`` into ``prefix`` and byte-compile the result.

    Both installers leave bytecode to :func:`compile_command`: ``compileall`` with a worker per
    CPU (pip compiles in one process: about 13 s of a 19 s ``pip install torch==2.13.0`` on our
    2-core machines), after linking the bytecode of sources shared with an earlier environment.

    Args:
        installer: the plan's decision (None: pip).
        py: the environment's interpreter (``PREFIX/bin/python``).
        prefix: the environment (``PREFIX/lib`` is compiled; compiled files are only stat'ed).
        reqs: requirements and ``-r FILE`` options, as pip and uv both take them.
        exact: install exactly these (a lock): hashes required, no dependencies, everything
            reinstalled (pip ``--require-hashes --no-deps --force-reinstall``; uv
            ``--require-hashes --no-deps --reinstall``).
    Returns:
        a tuple of two argv tuples: the install, then ``compileall``.
    """
    compile_cmd = compile_command(py, prefix, link=installer.link if installer is not None else True)
    locked: Tuple[str, ...] = ()
    if installer is None or installer.name != "uv":
        locked = ("--force-reinstall", "--require-hashes", "--no-deps") if exact else ()
        return ((py, "-m", "pip", "install", "--disable-pip-version-check", "--no-compile", *locked, *reqs),
                compile_cmd)
    args = installer.args
    if exact:
        # uv refuses a constraint that is not ``==`` in --require-hashes mode; a lock fixes every
        # version, so the constraints are checked against it instead (constraint_check_command)
        args = _without(args, "--constraint")
        locked = ("--reinstall", "--require-hashes", "--no-deps")
    return ((installer.program, "pip", "install", "--no-config", "--python", py, *args, *locked, *reqs),
            compile_cmd)


def _without(args: Sequence[str], option: str) -> Tuple[str, ...]:
    out: List[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a == option:
            skip = True
        else:
            out.append(a)
    return tuple(out)


def constraint_check_command(installer: Optional[Installer], py: str, pins_file: str) -> Optional[Tuple[str, ...]]:
    """For a locked install with uv: a ``uv pip install --dry-run --no-deps`` of the locked
    ``name==version`` lines in ``pins_file`` with pip's constraint files, so that a constraint
    refuses a locked version as pip would (uv takes only ``==`` constraints with
    ``--require-hashes``, so the install itself runs without them). uv reads the constraint files
    (every form it accepts) and evaluates their markers for the target interpreter ``py``.

    Returns:
        the argv, or None when the installer is not uv or pip's configuration names no
        constraint (passed as ``--constraint`` or through ``UV_CONSTRAINT``).
    """
    if installer is None or installer.name != "uv":
        return None
    if "--constraint" not in installer.args and "UV_CONSTRAINT" not in dict(installer.env):
        return None
    return (installer.program, "pip", "install", "--no-config", "--python", py, *installer.args,
            "--dry-run", "--no-deps", "-r", pins_file)


def prune_bytecode(store: Optional[Path] = None, dry_run: bool = False) -> Tuple[int, int]:
    """Delete the kept bytecode (:func:`compile_command`) that no environment links any more.

    An entry whose link count is 1 is held by the store alone: every environment that shared it
    is gone (or recompiled), so it can only serve a source inode that no longer exists. Its hash
    sidecar (``<entry>.sha256``) goes with it. Only the current user's files are deleted.

    Args:
        store: the bytecode store (default ``<envtool cache>/bytecode``).
        dry_run: delete nothing; count what would be deleted.
    Returns:
        ``(entries deleted, bytes freed)`` (with ``dry_run``: that would be).
    """
    from envtool.core.paths import cache_root

    store = Path(store) if store is not None else cache_root() / "bytecode"
    count = freed = 0
    try:
        entries = list(os.scandir(store))
    except OSError:
        return 0, 0
    names = {e.name for e in entries}
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
            if entry.name.endswith(".pyc") and entry.is_file(follow_symlinks=False) and st.st_nlink == 1 \
                    and st.st_uid == os.geteuid():  # another user's file is never envtool's to delete
                if not dry_run:
                    os.unlink(entry.path)
                count += 1
                freed += st.st_size
                names.discard(entry.name)
        except OSError:
            continue
    if dry_run:
        return count, freed
    for entry in entries:  # a hash sidecar (envtool.probes.bytecode) whose entry is gone
        if entry.name.endswith(".pyc.sha256") and entry.name[:-len(".sha256")] not in names:
            try:
                if entry.stat(follow_symlinks=False).st_uid != os.geteuid():
                    continue
                os.unlink(entry.path)
            except OSError:
                pass
    return count, freed


def install_env(installer: Optional[Installer], exact: bool = False) -> Tuple[Tuple[str, str], ...]:
    """Variables the install command needs (uv's share of pip's configuration, and
    ``UV_LINK_MODE=copy`` when the plan must not link files); empty for pip."""
    if installer is None or installer.name != "uv":
        return ()
    env = tuple((k, v) for k, v in installer.env if not (exact and k == "UV_CONSTRAINT"))
    return env + ((("UV_LINK_MODE", "copy"),) if not installer.link else ())
