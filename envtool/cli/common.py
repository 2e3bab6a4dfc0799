"""Helpers shared by the command modules: ``--json`` output, spec loading, prefixes."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Optional


def path_arg(text: str) -> str:
    """argparse ``type`` for a path option: refuses control characters (a newline in ``--prefix``
    made entry points that cannot run), the empty string and over-long paths; argparse then exits 2."""
    import argparse

    from envtool.core.errors import echo
    from envtool.spec.names import path_problem

    problem = path_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(f"expected a path without control characters and within the system's "
                                         f"length limits, got {problem}: {echo(text, 200)}")
    return text


#: Options whose values reach a generated file (job script, modulefile, module tree): argparse
#: ``dest`` -> (option as typed, kind of :data:`envtool.spec.names.OPTION_KINDS`, or ``time``).
GENERATED_FILE_OPTIONS = {
    "prefix": ("--prefix", "path"), "module": ("--module", "module"), "spec": ("--spec", "path"),
    "site": ("--site", "path"), "site_file": ("--site-file", "path"), "queue": ("--queue", "word"),
    "account": ("--account", "word"), "job_name": ("--job-name", "word"), "job_output": ("--job-output", "path"),
    "workdir": ("--workdir", "path"), "output": ("--output", "path"), "time": ("--time", "time"),
    "plot": ("--plot", "path"), "root": ("--root", "path"), "modulefiles": ("--modulefiles", "path"),
    "modulefile_root": ("--modulefile-root", "path"), "group": ("--group", "group"), "name": ("--name", "module"),
    "lock": ("--lock", "path"),
}


def check_generated_inputs(args, positional_spec: bool = False) -> None:
    """The one input gate for command-line values that reach a generated file: every attribute
    of ``args`` named in :data:`GENERATED_FILE_OPTIONS` that is set is checked with
    :func:`envtool.spec.names.check_option` (the checks site files get: no control characters,
    module-name, scheduler-name and path patterns), ``--time`` with
    :func:`envtool.scheduler.model.parse_time`. Used by ``jobscript``, ``validate``,
    ``modulefile``, ``publish``, ``create`` and ``plan`` before anything is written.

    Args:
        args: the parsed arguments.
        positional_spec: ``spec`` is the positional SPEC (a string or a list), not ``--spec``.
    Raises:
        UsageError: exit 2, naming the option and what was expected.
    """
    from envtool.scheduler.model import parse_time
    from envtool.spec.names import check_option

    for dest, (option, kind) in GENERATED_FILE_OPTIONS.items():
        value = getattr(args, dest, None)
        if value is None or (value == "" and dest in ("spec", "site")):
            continue
        if dest == "spec" and positional_spec:
            option = "SPEC"
        for item in (value if isinstance(value, list) else [value]):
            if not isinstance(item, str):
                continue
            if kind == "time":
                check_option(option, item, "text")
                parse_time(item)  # UsageError naming --time and the formats
            else:
                check_option(option, item, kind)


def name_arg(text: str) -> str:
    """argparse ``type`` for a name option (spec, module, clone source): as :func:`path_arg`, but the
    empty string is allowed (``--clone`` with no value, ``clone`` with no source: "the default")."""
    return text if text == "" else path_arg(text)


def seconds_arg(text: str) -> float:
    """argparse ``type`` for a duration: a finite number of seconds > 0 (``-1``, ``0``, ``nan``, ``inf`` are refused)."""
    import argparse
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text[:50]!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds greater than 0, got {text[:50]!r}")
    return value


def jobs_arg(text: str) -> int:
    """argparse ``type`` for a count of parallel jobs: an integer of at least 1."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of jobs, got {text[:50]!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1 job, got {value}")
    return value


def add_json(parser) -> None:
    """Add ``--json`` (machine-readable output) to a reporting command."""
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON on stdout")


def print_json(obj: Any) -> None:
    """Write ``obj`` as indented JSON to stdout (paths and other objects as strings)."""
    json.dump(obj, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def load_spec(name: str, site: Optional[str] = None, site_file: Optional[str] = None, quiet: bool = False):
    """Load spec ``name`` resolved for ``site`` (a name or file), else for the site detected on
    this machine (:func:`envtool.spec.sites.detect`, said on stderr unless ``quiet``), else as written.

    Raises:
        SpecError: exit 2.
    """
    return load_spec_site(name, site, site_file, quiet=quiet)[0]


def load_spec_site(name: str, site: Optional[str] = None, site_file: Optional[str] = None, quiet: bool = False):
    """As :func:`load_spec`, also returning the site file used (a ``SiteFile``, or None when none).

    Returns:
        ``(spec, site_file_or_None)``.
    Raises:
        SpecError: exit 2.
    """
    from envtool.spec import sites

    if not site and not site_file:
        found = sites.detect()
        if found is not None:
            if not quiet:
                print(f"site: {found.name} (detected: {found.reason}; --site local to resolve without it)",
                      file=sys.stderr)
            site_file = str(found.path)
    if site or site_file:
        resolved = sites.resolve_full(name, site=site, site_file=site_file)
        return resolved.spec, resolved.site
    from envtool.spec.catalog import load_spec as _load

    return _load(name), None


def default_prefix(spec_name: str) -> Path:
    """``./envs/<spec>`` when no ``--prefix`` is given."""
    return Path(os.getcwd()) / "envs" / spec_name


def add_spec_site(parser) -> None:
    """``--site NAME`` and ``--site-file FILE`` (site overlays)."""
    parser.add_argument("--site", type=name_arg, help="resolve the spec for this site (bundled: summit, perlmutter, "
                                                      "polaris, theta, bede, local; more in $ENVTOOL_SITE_PATH)")
    parser.add_argument("--site-file", type=path_arg, help="a site file to resolve the spec with")


def add_lock_options(parser) -> None:
    """``--lock FILE`` (alias ``--from-lock``) and ``--resolve`` (whether ``create`` installs a lock), and
    ``--installer`` (uv or pip for pip packages)."""
    parser.add_argument("--lock", "--from-lock", dest="lock", type=path_arg, metavar="FILE",
                        help="install exactly the packages of this lockfile (default: the spec's own lock when "
                             "there is one: SPEC.conda-lock.yml beside the spec file, $ENVTOOL_LOCK_PATH, lockfiles/)")
    parser.add_argument("--resolve", action="store_true",
                        help="ignore any lock of the spec and solve the packages afresh")
    parser.add_argument("--installer", choices=("uv", "pip"), default=None,
                        help="what installs pip packages: uv (default; given pip's configuration) or the "
                             "env's own pip (default from $ENVTOOL_INSTALLER)")
