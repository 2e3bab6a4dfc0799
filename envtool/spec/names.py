"""What a name or path given to envtool may look like, checked where it comes in (core layer).

Names become path components (``envs/<spec>``, ``<cache>/logs/<spec>-….log``), module names
(``<root>/<name>/<version>.lua``), environment variable names, and words in commands that
envtool prints for pasting. A value that cannot be valid is refused at input, with exit 2,
instead of being escaped later:

* spec names: :data:`SPEC_NAME_RE` (no ``/``, no leading ``.``: ``../../x`` never becomes a path);
* environment variable names: POSIX shell names (:data:`ENV_KEY_RE`; POSIX.1-2017 XBD 8.1
  "uppercase letters, digits, and the underscore", lowercase being allowed by shells);
* module names (``site.modules``), channels, prefixes and other paths: no control characters
  (a newline in a prefix makes ``#!`` lines that cannot run; in a value it splits a shell line).

Every pattern is applied with ``fullmatch`` (``$`` would accept a trailing newline).
"""
from __future__ import annotations

import os
import re
from typing import Optional

from envtool.core.errors import SpecError, UsageError, echo

#: Spec names: a letter or digit, then letters, digits, ``._+-``; at most 100 characters.
SPEC_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")
#: Environment variable names (POSIX shell names).
ENV_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Module names as ``module load`` takes them: ``name`` or ``name/version`` made of printable,
#: non-space characters other than shell metacharacters.
MODULE_RE = re.compile(r"[A-Za-z0-9_.+-][A-Za-z0-9_.+/:@=,-]*")
#: C0 control characters and DEL (tab included: no name or path needs one).
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
#: Scheduler words given on the command line (queue, partition, QOS, account, job name): one
#: word of printable characters (no space, no control character), not starting with ``-`` (a
#: scheduler would read it as an option), at most 200 characters. Shell characters are allowed:
#: the job script quotes every word (``<PROJECT>``, ``queue@server``).
SCHED_WORD_RE = re.compile(r"[^\s\x00-\x1f\x7f-][^\s\x00-\x1f\x7f]{0,199}")
#: Group names (``--group``): a name or a gid without control characters, not starting with ``-``
#: (directory-service groups may hold spaces and capitals, so nothing narrower is assumed).
GROUP_RE = re.compile(r"[^\x00-\x1f\x7f-][^\x00-\x1f\x7f]{0,255}")


#: Longest path component and path (bytes), Linux's NAME_MAX and PATH_MAX (limits.h).
NAME_MAX = 255
PATH_MAX = 4096


def path_problem(text: str) -> Optional[str]:
    """Why ``text`` cannot be a path here, or None: empty, a control character, bytes that are not
    UTF-8, a component over :data:`NAME_MAX` bytes or a path over :data:`PATH_MAX` bytes (the kernel
    would answer ENAMETOOLONG)."""
    if not text:
        return "an empty path"
    if has_control(text):
        return "a control character (newline, tab …)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # undecodable bytes, kept as surrogate escapes (PEP 383)
        return "bytes that are not valid UTF-8 (envtool writes paths into UTF-8 scripts, modulefiles and JSON)"
    raw = os.fsencode(text)
    if len(raw) >= PATH_MAX:
        return f"a path of {len(raw)} bytes (at most {PATH_MAX - 1})"
    if any(len(part) > NAME_MAX for part in raw.split(b"/")):
        return f"a path component longer than {NAME_MAX} bytes"
    return None


def has_control(text: str) -> bool:
    """Whether ``text`` contains a control character (newline, tab, NUL, ESC, DEL …)."""
    return bool(CONTROL_RE.search(text))


def check_prefix(text: str, option: str = "--prefix") -> str:
    """Refuse a prefix (or other path option) that is empty or holds a control character.

    Args:
        text: the path as given.
        option: the option name for the message.
    Returns:
        ``text`` unchanged.
    Raises:
        UsageError: exit 2.
    """
    problem = path_problem(text)
    if problem:
        raise UsageError(f"{option}: expected a path without control characters and within the system's "
                         f"length limits, got {problem}: {echo(text)}")
    return text


def check_spec_name(name: str, path: Optional[str] = None, line: Optional[int] = None) -> str:
    """Refuse a spec name that is not a safe single path component (:data:`SPEC_NAME_RE`).

    Raises:
        SpecError: exit 2, naming ``path`` and ``line`` when given.
    """
    if not isinstance(name, str) or not SPEC_NAME_RE.fullmatch(name):
        raise SpecError(path, "name", "a name of letters, digits and ._+- that starts with a letter or digit "
                        "(at most 100 characters; it becomes a directory name)", got=name, line=line)
    return name


def check_env_key(key: object, path: Optional[str], field: str, line: Optional[int] = None) -> str:
    """Refuse an environment variable name that is not a POSIX shell name.

    Raises:
        SpecError: exit 2.
    """
    if not isinstance(key, str) or not ENV_KEY_RE.fullmatch(key):
        raise SpecError(path, field, "environment variable names (letters, digits, _; not starting with a digit)",
                        got=key, line=line)
    return key


def check_module_name(name: str, path: Optional[str], field: str, line: Optional[int] = None) -> str:
    """Refuse a module name (``name`` or ``name/version``) with spaces, control or shell characters.

    Raises:
        SpecError: exit 2.
    """
    if not MODULE_RE.fullmatch(name) or "//" in name or name.endswith("/"):
        raise SpecError(path, field, "module names such as 'gcc/12' (letters, digits, _.+-/:@=,)", got=name, line=line)
    return name


def check_no_control(value: str, path: Optional[str], field: str, line: Optional[int] = None,
                     allow_tab: bool = False) -> str:
    """Refuse a value (a channel, a path, an env value) that holds a control character.

    Args:
        allow_tab: a tab is allowed (environment variable values).
    Raises:
        SpecError: exit 2.
    """
    if has_control(value.replace("\t", " ") if allow_tab else value):
        raise SpecError(path, field, "a value without control characters (newline, escape …)", got=value, line=line)
    return value


#: What each kind of command-line value may be, in words (for :func:`check_option`'s message).
OPTION_KINDS = {
    "path": "a path without control characters and within the system's length limits",
    "module": "a module name such as 'gcc/12' (letters, digits, _.+-/:@=,; no spaces or control characters)",
    "word": "a scheduler name (one word without spaces or control characters, not starting with '-', "
            "at most 200 characters)",
    "group": "a group name or number (no control characters, not starting with '-')",
    "text": "text without control characters (newline, carriage return, escape …)",
}


def option_problem(value: str, kind: str) -> Optional[str]:
    """Why ``value`` cannot be a command-line value of ``kind`` (a key of :data:`OPTION_KINDS`), or None.

    The checks are the ones site and spec files already get (:func:`path_problem`,
    :data:`MODULE_RE` as :func:`check_module_name` uses it, :data:`CONTROL_RE`), plus
    :data:`SCHED_WORD_RE` and :data:`GROUP_RE` for scheduler and group names.

    Raises:
        KeyError: an unknown ``kind`` (a bug).
    """
    if kind not in OPTION_KINDS:
        raise KeyError(kind)
    if not isinstance(value, str):
        return "not text"
    if has_control(value):
        return "a control character (newline, carriage return, tab …)"
    if kind == "path":
        return path_problem(value)
    if kind == "module":
        if not MODULE_RE.fullmatch(value) or "//" in value or value.endswith("/"):
            return "other characters"
        return None
    if kind == "word":
        return None if SCHED_WORD_RE.fullmatch(value) else "a space, a leading '-' or over 200 characters"
    if kind == "group":
        return None if GROUP_RE.fullmatch(value) else "a leading '-' or over 256 characters"
    return None


def check_option(option: str, value: str, kind: str) -> str:
    """Refuse a command-line value that cannot go into a generated file (job script, modulefile).

    Args:
        option: the option as the user typed it (``--queue``), named in the message.
        value: the value given.
        kind: a key of :data:`OPTION_KINDS` (``path``, ``module``, ``word``, ``group``, ``text``).
    Returns:
        ``value`` unchanged.
    Raises:
        UsageError: exit 2, naming ``option``, what was expected and the value (cut by :func:`echo`).
    """
    problem = option_problem(value, kind)
    if problem:
        raise UsageError(f"{option}: expected {OPTION_KINDS[kind]}, got {problem}: {echo(value)}")
    return value


#: Variables that hold ``:``-separated search paths: a spec or site file may add entries to them
#: (``{prepend: DIR}`` / ``{append: DIR}``, undone by ``module unload``) but not replace them, which
#: would hide the user's own entries and outlive the module. Sources: POSIX.1-2017 XBD 8.3 (PATH);
#: ld.so(8) (LD_LIBRARY_PATH); gcc(1) "Environment Variables" (LIBRARY_PATH, CPATH, C_INCLUDE_PATH,
#: CPLUS_INCLUDE_PATH, OBJC_INCLUDE_PATH); python(1) (PYTHONPATH); man(1) (MANPATH); pkg-config(1);
#: cmake-env-variables(7) (CMAKE_PREFIX_PATH); XDG Base Directory Specification (XDG_DATA_DIRS,
#: XDG_CONFIG_DIRS); Lmod/Environment Modules (MODULEPATH); perlrun(1) (PERL5LIB, PERLLIB); Lua 5.4
#: manual §6.3 (LUA_PATH, LUA_CPATH); dyld(1) (DYLD_LIBRARY_PATH, DYLD_FALLBACK_LIBRARY_PATH).
PATH_LIST_VARS = frozenset({
    "PATH", "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "OBJC_INCLUDE_PATH",
    "PYTHONPATH", "MANPATH", "INFOPATH", "PKG_CONFIG_PATH", "CMAKE_PREFIX_PATH", "XDG_DATA_DIRS", "XDG_CONFIG_DIRS",
    "MODULEPATH", "PERL5LIB", "PERLLIB", "LUA_PATH", "LUA_CPATH", "CLASSPATH", "DYLD_LIBRARY_PATH",
    "DYLD_FALLBACK_LIBRARY_PATH", "CDPATH", "NLSPATH",
})
#: Variables that make a loader, a shell or an interpreter run code of the variable's choosing in
#: every process that sees them: never set by a spec or site file. Sources: ld.so(8) "Environment"
#: (every ``LD_*`` other than LD_LIBRARY_PATH: LD_PRELOAD, LD_AUDIT, LD_PROFILE …); dyld(1)
#: (DYLD_INSERT_LIBRARIES); bash(1) "INVOCATION" (BASH_ENV, ENV) and "Shell Variables" (PROMPT_COMMAND;
#: PS0-PS4 undergo command substitution; SHELLOPTS, BASHOPTS, IFS); zsh(1) "STARTUP/SHUTDOWN FILES"
#: (ZDOTDIR); python(1) "Environment variables" (PYTHONSTARTUP, PYTHONHOME, PYTHONINSPECT,
#: PYTHONUSERBASE, PYTHONBREAKPOINT, PYTHONEXECUTABLE, PYTHONPLATLIBDIR); perlrun(1) (PERL5OPT);
#: ruby(1) (RUBYOPT); node(1) (NODE_OPTIONS: ``--require``); the JVM's JAVA_TOOL_OPTIONS and
#: _JAVA_OPTIONS (``-javaagent``); gconv (glibc iconv(3) modules: GCONV_PATH).
HOOK_VARS = frozenset({
    "DYLD_INSERT_LIBRARIES", "BASH_ENV", "ENV", "PROMPT_COMMAND", "PS0", "PS1", "PS2", "PS3", "PS4", "SHELLOPTS",
    "BASHOPTS", "IFS", "ZDOTDIR", "BASH_XTRACEFD", "PYTHONSTARTUP", "PYTHONHOME", "PYTHONINSPECT", "PYTHONUSERBASE",
    "PYTHONBREAKPOINT", "PYTHONEXECUTABLE", "PYTHONPLATLIBDIR", "PERL5OPT", "RUBYOPT", "NODE_OPTIONS",
    "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "GCONV_PATH",
})
#: The reversible forms of an ``env`` entry: ``{prepend: DIR or [DIR, …]}``, ``{append: …}``.
PATH_EDIT_OPS = ("prepend", "append")


def is_hook_var(key: str) -> bool:
    """Whether variable ``key`` is a loader, shell or interpreter hook (:data:`HOOK_VARS`, any
    ``LD_*`` but ``LD_LIBRARY_PATH``)."""
    return key in HOOK_VARS or (key.startswith("LD_") and key != "LD_LIBRARY_PATH")


def check_env_setting(key: str, path: Optional[str], field: str, line: Optional[int] = None,
                      edit: bool = False) -> str:
    """Refuse an ``env`` entry that replaces a search path or sets a hook.

    Args:
        key: the variable.
        path, field, line: where it was written (``field`` is ``env.PATH`` …).
        edit: the entry is the reversible ``{prepend: …}``/``{append: …}`` form.
    Returns:
        ``key``.
    Raises:
        SpecError: exit 2: a hook (:func:`is_hook_var`) in any form; a :data:`PATH_LIST_VARS`
            variable set to a plain value (naming the form to write instead).
    """
    if is_hook_var(key):
        raise SpecError(path, field, "no loader, shell or interpreter hook variable (it would run code of its "
                        "choosing in every process of the environment)", got=key, line=line,
                        hint="leave it out; put code the environment needs in a package or a module")
    if key in PATH_LIST_VARS and not edit:
        raise SpecError(path, field, f"{{prepend: DIR}} or {{append: DIR}} (a list for several), which adds to "
                        f"{key} and is undone on 'module unload'; a plain value would replace {key}", line=line,
                        hint=f"write: env: {{{key}: {{prepend: /path/to/dir}}}}")
    return key
