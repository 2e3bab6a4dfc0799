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
