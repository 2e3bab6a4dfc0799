"""Helpers shared by the command modules: ``--json`` output, spec loading, prefixes."""
from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional


def path_arg(text: str) -> str:
    """argparse ``type`` for a path option: refuses control characters (a newline in ``--prefix``
    made entry points that cannot run), the empty string and over-long paths; argparse then exits 2."""
    import argparse

    from envtool.core.errors import echo
    from envtool.spec.names import path_problem

    problem = path_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(f"expected a path in UTF-8 without control characters and within the "
                                         f"system's length limits, got {problem}: {echo(text, 200)}")
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
    "lock": ("--lock", "path"), "stage": ("--stage", "path"),
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


def finite_number_arg(unit: str, zero_ok: bool) -> Callable[[str], float]:
    """An argparse ``type`` for a finite number of ``unit`` (``seconds``, ``days``) that is > 0, or
    >= 0 with ``zero_ok`` (negative numbers, ``nan`` and ``inf`` are refused; the error names
    the unit and the bound)."""

    def parse(text: str) -> float:
        import argparse
        import math

        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number of {unit}, got {text[:50]!r}") from None
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
            bound = ">= 0" if zero_ok else "greater than 0"
            raise argparse.ArgumentTypeError(f"expected a finite number of {unit} {bound}, got {text[:50]!r}")
        return value

    parse.__name__ = f"{unit}_arg"
    return parse


#: argparse ``type`` for a duration: a finite number of seconds > 0 (``-1``, ``0``, ``nan``, ``inf`` are refused).
seconds_arg = finite_number_arg("seconds", zero_ok=False)


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


#: Largest text file envtool reads as input (bytes): an endless or huge input (``/dev/zero``, a
#: multi-gigabyte file) is refused instead of filling memory.
MAX_INPUT = 16 * 1024 * 1024


def read_input(name: str, what: str, limit: int = MAX_INPUT) -> str:
    """Read a text input named on the command line: ``-`` is stdin, else a regular file.

    A FIFO, a device (``/dev/zero``), a socket or a directory is refused without being read (it
    could block or never end); the read stops after ``limit`` bytes. Bytes that are not UTF-8 are
    replaced (U+FFFD).

    Args:
        name: the path, or ``-``.
        what: the option, for messages (``--from-file``).
        limit: the most bytes read.
    Returns:
        the text.
    Raises:
        UsageError: not a regular file, unreadable, or longer than ``limit`` (exit 2, naming it).
    """
    from envtool.core.errors import UsageError, echo
    from envtool.core.inputs import open_input

    if name == "-":
        data = sys.stdin.buffer.read(limit + 1)
    else:
        try:
            with open_input(name, what) as fh:  # a FIFO, a device, a directory: exit 2, never read
                data = fh.read(limit + 1)
        except OSError as exc:
            raise UsageError(f"{what} {echo(name)}: cannot read it ({exc.strerror})") from None
    if len(data) > limit:
        raise UsageError(f"{what} {echo(name)}: expected at most {limit // (1024 * 1024)} MiB of text, got more")
    return data.decode("utf-8", errors="replace")


@contextmanager
def progress_lines(args, prefix: str, after: float = 0.0) -> Iterator[Callable[[str], None]]:
    """A ``say(text)`` for a command's waits: each phase on stderr as ``PREFIX text``, on a terminal
    one line redrawn with its clock (:class:`envtool.core.term.LiveStatus`, cut to the width);
    nothing with ``-q`` or ``--json`` (whose stdout stays one JSON document). The live line is
    erased when the block ends.

    Args:
        args: the parsed arguments (``quiet``, ``json`` read when present).
        prefix: put before each line (``remove: ``).
        after: seconds of silence first (:class:`envtool.core.term.DelayedStatus`): for a
            command that is usually quicker than that; 0: every phase is said at once.
    """
    from envtool.core.term import DelayedStatus, LiveStatus

    quiet = bool(getattr(args, "quiet", False) or getattr(args, "json", False))
    with (DelayedStatus(prefix, after, sys.stderr) if after > 0 else LiveStatus(prefix, sys.stderr)) as live:
        yield (lambda text: None) if quiet else live.update


def add_json(parser) -> None:
    """Add ``--json`` (machine-readable output) to a reporting command."""
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON on stdout")


#: Every command that deletes or replaces something, with what: each has ``--dry-run`` (say what
#: would go, delete nothing; tests/test_cli_conventions.py checks this against the parser, and that
#: no other command's help speaks of deleting or replacing). A command name as typed (``cache prune``).
DESTRUCTIVE = {
    "remove": "deletes an environment envtool made",
    "retire": "deletes a published version (environment, SBOM, modulefile)",
    "cache prune": "deletes old cached wheels, build logs and unlinked bytecode",
    "cache publish": "replaces a stale entry published earlier under the same key",
    "publish": "--force rebuilds and replaces published stacks",
    "create": "--force replaces the environment at the prefix",
    "clone": "--force replaces the environment at the prefix",
    "pack": "--force replaces the output file",
    "modulefile": "rewrites NAME/VERSION's modulefile; --force replaces one in the other format",
}

#: Commands that ask before deleting when run interactively (:func:`confirm`), each with ``-y/--yes``.
CONFIRMING = ("remove", "retire", "cache prune")


def add_dry_run(parser, what: str = "deleted or replaced") -> None:
    """``--dry-run``: check everything, say what would be ``what``, and change nothing."""
    parser.add_argument("--dry-run", action="store_true", help=f"check and show what would be {what}; change nothing")


def replacement_preview(target, force: bool) -> Optional[str]:
    """For ``--dry-run`` of a command that makes an environment at ``target``: the checks the
    build would make before touching anything (:class:`envtool.steps.kernel.transaction.BuildTransaction`).

    Returns:
        the path that ``--force`` would replace, or None when nothing is there.
    Raises:
        TargetExists: something is there and ``force`` is not given (exit 2).
        UsageError: ``force`` is given but what is there is not an environment that may be
            replaced (:func:`envtool.core.targets.check_replaceable`, exit 2).
    """
    from envtool.core.errors import TargetExists
    from envtool.core.targets import check_replaceable

    target = Path(os.path.abspath(target))
    if not os.path.lexists(target):
        return None
    if not force:
        raise TargetExists(target)
    check_replaceable(target)
    return str(target)


def add_yes(parser) -> None:
    """``-y/--yes``: do not ask before deleting (:func:`confirm`)."""
    parser.add_argument("-y", "--yes", action="store_true",
                        help="do not ask for confirmation (asked only when stdin is a terminal)")


def will_ask(args) -> bool:
    """Whether :func:`confirm` would ask (see there): stdin and stdout are terminals and none of
    ``--yes``, ``--json``, ``--dry-run`` was given."""
    from envtool.core.term import is_terminal

    if getattr(args, "yes", False) or getattr(args, "json", False) or getattr(args, "dry_run", False):
        return False
    return is_terminal(sys.stdin) and is_terminal(sys.stdout)


def confirm(args, question: str) -> bool:
    """Ask ``question`` ``Proceed ([y]/n)?`` as ``conda clean``/``conda remove`` do
    (https://docs.conda.io/projects/conda/en/stable/commands/clean.html: ``-y, --yes`` "Sets any
    confirmation values to 'yes' automatically"), but only when it can be answered: stdin and
    stdout are terminals, and neither ``--yes``, ``--json`` nor ``--dry-run`` was given. A script,
    a pipe or a batch job is never asked (conda too takes an empty answer as yes and ``--json`` as
    ``--yes``), so what ran unattended before runs the same.

    Args:
        args: the parsed arguments (``yes``, ``json``, ``dry_run``).
        question: what would be done, one line (printed before the prompt).
    Returns:
        True to go on (an empty answer is yes), False when the answer was no or stdin ended.
    """
    if not will_ask(args):
        return True
    print(question)
    while True:
        sys.stdout.write("Proceed ([y]/n)? ")
        sys.stdout.flush()
        answer = sys.stdin.readline()
        if not answer:  # end of input (Ctrl-D): no
            print()
            return False
        answer = answer.strip().lower()
        if answer in ("", "y", "yes"):
            return True
        if answer in ("n", "no"):
            return False
        print(f"Invalid choice: {answer}")


def add_no_size(parser, what: str) -> None:
    """Add ``--no-size`` (skip measuring ``what``, e.g. ``the caches``) and ``--json`` to a listing
    command."""
    parser.add_argument("--no-size", action="store_true", help=f"do not measure {what} (faster)")
    add_json(parser)


#: While a ``--json`` command runs, the objects it hands to :func:`print_json`; :func:`emit_json`
#: writes them once the exit status is known (None: print at once).
_pending: Optional[List[Any]] = None

#: ``error`` of the JSON object when a command returned a non-zero status without saying why.
_EXIT_WORDS = {1: "a check failed (see the result)", 2: "usage or input error", 3: "internal error",
               130: "interrupted"}


def collect_json() -> None:
    """Hold what :func:`print_json` is given until :func:`emit_json` (``envtool`` main, under ``--json``)."""
    global _pending
    _pending = []


def collecting_json() -> bool:
    """Whether :func:`collect_json` is holding output for :func:`emit_json` (the command runs under ``--json``)."""
    return _pending is not None


def print_json(obj: Any) -> None:
    """Write ``obj`` as indented JSON to stdout (paths and other objects as strings); under
    :func:`collect_json`, keep it for :func:`emit_json`."""
    if _pending is not None:
        _pending.append(obj)
        return
    json.dump(obj, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def emit_json(code: int, error: Optional[str] = None) -> None:
    """Print the one JSON object of a ``--json`` command on stdout, with ``ok`` (bool), ``error``
    (a message or null) and ``exit`` (the exit status) added to what the command reported.

    Args:
        code: the exit status.
        error: the error message when the command failed with one (it overrides ``ok`` and
            ``error`` of what the command reported before failing).
    Every command, on every way out, prints this one object (the envelope): a command reports its
    lists under a key of its own (``specs``: ``specs``, ``doctor --list``: ``checks``); anything
    handed over that is not a mapping goes under ``result``.
    """
    global _pending
    held, _pending = _pending or [], None
    out: dict = {}
    for obj in held:
        if isinstance(obj, dict):
            out.update(obj)
        else:
            out["result"] = obj
    if error is not None:
        out["ok"] = False
        out["error"] = error
    else:
        out.setdefault("ok", code == 0)
        problems = out.get("problems")
        said = "; ".join(str(p) for p in problems[:5]) if isinstance(problems, list) and problems else None
        out.setdefault("error", None if code == 0 else said or _EXIT_WORDS.get(code, f"exit status {code}"))
        if code != 0:
            out["ok"] = False
    out["exit"] = code
    head = {k: out.pop(k) for k in ("ok", "error", "exit")}
    print_json({**head, **out})


#: ``ENVTOOL_*`` variables that hold ``:``-separated directories (``ENVTOOL_CACHE_DIR``: one).
PATH_VARIABLES = ("ENVTOOL_CACHE_DIR", "ENVTOOL_CACHE_PATH", "ENVTOOL_SPEC_PATH", "ENVTOOL_SITE_PATH",
                  "ENVTOOL_LOCK_PATH")


def check_environment(environ=None) -> None:
    """Refuse ``ENVTOOL_*`` variables that no command could use (exit 2, naming the variable, what
    was expected and what it holds): a directory list with a control character (a newline
    would split a path in a generated script), bytes that are not UTF-8 or a name over the
    system's limits; ``ENVTOOL_CACHE_DIR`` that is relative or not a directory;
    ``ENVTOOL_DEFAULT_CHANNELS`` with a control character; ``ENVTOOL_INSTALLER`` other than ``uv`` or ``pip``; ``ENVTOOL_START_METHOD``
    other than a :mod:`multiprocessing` start method; ``ENVTOOL_SITE`` with a control character;
    ``ENVTOOL_PUBLIC_INDEX`` that is not an ``http(s)`` URL; ``ENVTOOL_INDEX_MIRRORS`` that is not
    ``PUBLIC=MIRROR`` words (:func:`envtool.lock.indexes.parse_mirrors`).

    Raises:
        UsageError: the first such variable.
    """
    from envtool.core.errors import UsageError, echo
    from envtool.spec.names import has_control, path_problem

    env = os.environ if environ is None else environ

    def bad_bytes(text: str) -> bool:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False

    for name in PATH_VARIABLES:
        value = env.get(name, "")
        items = [value] if name == "ENVTOOL_CACHE_DIR" else value.split(os.pathsep)
        for item in items:
            if not item:
                continue
            problem = path_problem(item) or ("bytes that are not valid UTF-8" if bad_bytes(item) else None)
            if problem:
                raise UsageError(f"${name}: expected {'a directory' if name == 'ENVTOOL_CACHE_DIR' else 'directories separated by :'} "
                                 f"without control characters, in UTF-8 and within the system's length limits, "
                                 f"got {problem}: {echo(value)}")
    cache_dir = env.get("ENVTOOL_CACHE_DIR", "")
    if cache_dir:
        if not os.path.isabs(cache_dir):
            raise UsageError(f"$ENVTOOL_CACHE_DIR: expected an absolute path (a relative one would change with the "
                             f"working directory), got {echo(cache_dir)}")
        if os.path.exists(cache_dir) and not os.path.isdir(cache_dir):
            raise UsageError(f"$ENVTOOL_CACHE_DIR: expected a directory (or a path to create one at), got "
                             f"{echo(cache_dir)}, which is not a directory")
    import re

    for item in re.split(r"[\s,]+", env.get("ENVTOOL_DEFAULT_CHANNELS", "")):
        if item and (has_control(item) or bad_bytes(item)):
            raise UsageError(f"$ENVTOOL_DEFAULT_CHANNELS: expected channel names or URLs separated by spaces or "
                             f"commas, got {echo(item)}")
    choices = {"ENVTOOL_INSTALLER": ("uv", "pip"), "ENVTOOL_START_METHOD": ("fork", "spawn", "forkserver")}
    for name, allowed in choices.items():
        value = env.get(name, "").strip()
        if value and value not in allowed:
            raise UsageError(f"${name}: expected one of {', '.join(allowed)} (or unset), got {echo(value)}")
    site = env.get("ENVTOOL_SITE", "")
    if site and (has_control(site) or bad_bytes(site)):
        raise UsageError(f"$ENVTOOL_SITE: expected a site name, got {echo(site)}")
    index = env.get("ENVTOOL_PUBLIC_INDEX", "")
    if index and (not index.startswith(("https://", "http://", "file://")) or has_control(index) or " " in index
                  or bad_bytes(index)):
        raise UsageError(f"$ENVTOOL_PUBLIC_INDEX: expected an http(s) or file URL of a package index, got {echo(index)}")
    from envtool.lock.indexes import MIRRORS_VARIABLE, MirrorError, parse_mirrors

    try:
        parse_mirrors(env.get(MIRRORS_VARIABLE, ""))
    except MirrorError as exc:
        raise UsageError(f"${MIRRORS_VARIABLE} (setting index_mirrors): {str(exc)[:300]}") from None


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


def environment_arg(text: str) -> Path:
    """The environment a ``SPEC|PREFIX`` argument names: the directory itself, else the spec's
    environment at its default prefix (:func:`default_prefix`).

    Raises:
        UsageError: neither exists (exit 2).
    """
    from envtool.core.errors import UsageError

    prefix = Path(text)
    if prefix.is_dir():
        return prefix
    if os.sep in text or text.startswith("."):
        raise UsageError(f"PREFIX {text}: no such environment (not a directory)")
    prefix = default_prefix(text)
    if not prefix.is_dir():
        raise UsageError(f"{text}: neither an environment directory nor a spec with an environment at "
                         f"its default prefix {prefix} (envtool create {text})")
    return prefix


def add_environment_argument(parser, help_text: str, spec_ok: bool = False) -> None:
    """``--prefix PREFIX``, the one documented way to name an environment (as every command that
    acts on one takes it), and the positional ``PREFIX`` these commands took before, kept as its
    alias (``envtool remove ./envs/x`` and ``envtool remove --prefix ./envs/x`` are the same).
    :func:`prefix_given` reads them back.

    Args:
        parser: the command's parser.
        help_text: what the environment is for (``the environment to delete``).
        spec_ok: a spec name is also taken (its default prefix ./envs/SPEC, :func:`environment_arg`).
    """
    what = "PREFIX|SPEC" if spec_ok else "PREFIX"
    parser.add_argument("--prefix", type=path_arg, metavar=what, help=help_text + (
        " (a prefix, or a spec name: its default prefix ./envs/SPEC)" if spec_ok else ""))
    parser.add_argument("prefix_positional", nargs="?", type=path_arg, metavar=what, default=None,
                        help="the same as --prefix (the older spelling, kept as an alias)")


def prefix_given(args) -> str:
    """The environment named by ``--prefix`` or the positional alias of :func:`add_environment_argument`.

    Raises:
        UsageError: neither was given, or both name different places (exit 2).
    """
    from envtool.core.errors import UsageError, echo

    flag, positional = getattr(args, "prefix", None), getattr(args, "prefix_positional", None)
    if flag and positional and os.path.abspath(flag) != os.path.abspath(positional):
        raise UsageError(f"--prefix {echo(flag)} and PREFIX {echo(positional)} name different environments; "
                         "give one (--prefix is the documented way, the positional its alias)")
    if not (flag or positional):
        raise UsageError("expected the environment: --prefix PREFIX (or PREFIX alone)")
    return str(flag or positional)


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


def engine_arg(value: str) -> str:
    """``--engine`` value: a registered engine name (:mod:`envtool.engines.registry`); a deprecated
    spelling (``conda-external``) is taken with a warning on stderr and given as its new name."""
    import argparse

    from envtool.engines.registry import canonical
    from envtool.core.errors import UsageError

    try:
        return canonical(value)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).split(": ", 1)[-1]) from None


def add_engine_option(parser, default: Optional[str] = None, what: str = "make the environment") -> None:
    """``--engine NAME``: every registered engine is a choice, listed with its summary in ``--help``."""
    from envtool.engines.registry import choices_help, names

    parser.add_argument("--engine", type=engine_arg, choices=names(), default=default, metavar="{" + ",".join(names()) + "}",
                        help=f"what to {what} with" + (f" (default: {default})" if default else
                                                      " (default: the spec's engine: venv, or rattler for engine: conda)")
                        + ": " + choices_help())


def add_plan_options(parser) -> None:
    """The options ``plan`` and ``create`` share (one block, so their help cannot drift): SPEC,
    ``--prefix``, ``--clone``, the lock options, ``--engine``, ``--modulefile-root``, ``--jobs``,
    ``--spec-dir``/``--site``, ``--platform-mismatch-ok`` and ``--json``."""
    parser.add_argument("spec", type=name_arg, help="spec name (see 'envtool specs') or path to a spec file")
    parser.add_argument("--prefix", type=path_arg, help="target prefix (default: for --clone the site's clone_prefix, "
                                                        "else ./envs/SPEC)")
    parser.add_argument("--clone", type=name_arg, nargs="?", const="", default=None, metavar="SOURCE",
                        help="clone SOURCE (env name or prefix) instead of creating from scratch (default SOURCE: the "
                             "site's base env for the spec, else the active environment $CONDA_PREFIX, e.g. the one a "
                             "loaded module provides)")
    add_lock_options(parser)
    add_engine_option(parser)
    parser.add_argument("--modulefile-root", type=path_arg, metavar="DIR", help="also write a modulefile under DIR")
    parser.add_argument("--jobs", type=jobs_arg, default=None, help="parallel compile jobs (default: CPU count)")
    add_spec_site(parser)
    add_platform_mismatch(parser)
    add_json(parser)


def add_platform_mismatch(parser) -> None:
    """``--platform-mismatch-ok``: go on when the spec is for another platform than the machine
    (``plan``, ``create``) or than the site (``jobscript``, ``validate``)."""
    parser.add_argument("--platform-mismatch-ok", action="store_true",
                        help="go on although the spec is for another platform than this machine (plan, create) "
                             "or than the site (jobscript); without it that is an error (exit 2)")


def check_machine_platform(spec, mismatch_ok: bool, say=None) -> None:
    """Refuse a spec none of whose platforms is this machine's (``plan``/``create`` of a
    ``linux-ppc64le`` spec on ``linux-64`` would plan an install that cannot run here).

    Args:
        spec: the resolved spec (``spec.platforms``: conda platform names).
        mismatch_ok: ``--platform-mismatch-ok`` was given: only say it (through ``say``).
        say: a callable taking one line for people, or None.
    Raises:
        UsageError: exit 2, naming the spec's platforms, the machine's and the option.
    """
    from envtool.core.errors import UsageError
    from envtool.core.platforms import conda_platform

    here = conda_platform()
    if not spec.platforms or here in spec.platforms:
        return
    message = (f"spec {spec.name} is for {', '.join(spec.platforms)}, but this machine is {here}")
    if not mismatch_ok:
        raise UsageError(f"{message}: an environment built here would not run on the spec's nodes; run this on a "
                         f"{spec.platforms[0]} machine, or pass --platform-mismatch-ok to go on anyway")
    if say is not None:
        say(f"warning: {message} (--platform-mismatch-ok)")
