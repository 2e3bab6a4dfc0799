"""What a conda environment's ``etc/conda/activate.d/*.sh`` scripts set, computed ahead of time.

``conda activate`` sources every ``etc/conda/activate.d/*.sh`` (sorted by name) after it has set
``CONDA_PREFIX`` and ``PATH`` (conda/activate.py, ``_get_activate_scripts``). Sites that hand-write
modulefiles for conda either ``execute{}`` that (not undone on unload) or leave it out. Here each
script is sourced once, now, in a clean ``bash --noprofile --norc`` whose environment is known;
the difference between the environment before and after becomes static, reversible changes
(the idea of Lmod's ``$LMOD_DIR/sh_to_modulefile``):

* a ``:``-list variable that gained entries in front or behind → ``prepend_path``/``append_path``;
* any other new or changed variable → ``pushenv`` (unload restores the old value).

Path-list variables start out holding a sentinel entry, so ``export LD_LIBRARY_PATH=$CONDA_PREFIX/lib:$LD_LIBRARY_PATH``
reads as a prepend whether or not the user has ``LD_LIBRARY_PATH`` set. Variables a script
unsets, shell functions and aliases cannot be expressed reversibly; they are reported, not applied.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from envtool.core import external
from envtool.core.errors import EnvtoolError
from envtool.modules.content import EnvChange

#: A path entry no real directory has; marks "whatever the user had" in path-list variables.
SENTINEL = "/__envtool_previous_value__"
#: Variables that hold ``:``-separated path lists in the clean shell (seeded with the sentinel).
PATH_VARS = ("LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "PYTHONPATH",
             "MANPATH", "PKG_CONFIG_PATH", "CMAKE_PREFIX_PATH", "XDG_DATA_DIRS", "INFOPATH", "JAVA_HOME_PATHS")
_SPLIT = "__ENVTOOL_ACTIVATE_D_SPLIT__"
_IGNORE = frozenset({"_", "SHLVL", "PWD", "OLDPWD", "BASH_EXECUTION_STRING"})


def activate_scripts(prefix: Path) -> List[Path]:
    """``prefix/etc/conda/activate.d/*.sh``, in the order conda sources them (sorted by name)."""
    d = Path(prefix) / "etc" / "conda" / "activate.d"
    return sorted(p for p in d.glob("*.sh") if p.is_file()) if d.is_dir() else []


def _parse_env0(blob: str) -> Dict[str, str]:
    out = {}
    for item in blob.split("\0"):
        key, sep, value = item.partition("=")
        if sep and key:
            out[key] = value
    return out


def _diff(name: str, before: str, after: str, origin: str, replace: Tuple[str, str]) -> List[EnvChange]:
    old, new = replace
    fix = (lambda s: s.replace(old, new)) if old != new else (lambda s: s)
    if before and after.endswith(":" + before):
        added = [e for e in after[: -len(before) - 1].split(":") if e]
        # prepend_path puts each entry in front: add the last first so the order is kept.
        return [EnvChange("prepend_path", name, fix(e), origin) for e in reversed(added)]
    if before and after.startswith(before + ":"):
        added = [e for e in after[len(before) + 1:].split(":") if e]
        return [EnvChange("append_path", name, fix(e), origin) for e in added]
    if SENTINEL in after.split(":"):  # the sentinel moved into the middle: keep the list as a whole
        entries = after.split(":")
        i = entries.index(SENTINEL)
        return ([EnvChange("prepend_path", name, fix(e), origin) for e in reversed(entries[:i]) if e]
                + [EnvChange("append_path", name, fix(e), origin) for e in entries[i + 1:] if e])
    return [EnvChange("pushenv", name, fix(after), origin)]


def activate_d_changes(prefix: Path, runtime_prefix: Path,
                       timeout: float = 60.0) -> Tuple[List[EnvChange], List[str]]:
    """Run the activate.d scripts of ``prefix`` in a clean bash and return their effect.

    Args:
        prefix: the conda prefix the scripts are in (``CONDA_PREFIX`` while they run).
        runtime_prefix: the path users will see; ``prefix`` is replaced by it in every value.
        timeout: seconds the scripts may take together.
    Returns:
        ``(changes, skipped)``: a list of :class:`envtool.modules.content.EnvChange` in script
        order, and a list of lines naming what could not be applied reversibly.
    Raises:
        EnvtoolError: a script exits non-zero or times out (exit status 1), naming the script.
    """
    scripts = activate_scripts(prefix)
    if not scripts:
        return [], []
    prefix = Path(prefix)
    base = {"HOME": os.environ.get("HOME", "/"), "LANG": "C", "CONDA_PREFIX": str(prefix),
            "CONDA_DEFAULT_ENV": str(prefix), "PATH": f"{prefix / 'bin'}:/usr/bin:/bin"}
    for var in PATH_VARS:
        base[var] = SENTINEL
    changes: List[EnvChange] = []
    skipped: List[str] = []
    before: Optional[Dict[str, str]] = None
    for script in scripts:
        origin = f"etc/conda/activate.d/{script.name}"
        code = ('env -0; printf "\\0%s\\0" "$1"; . "$2" || exit $?; env -0')
        try:
            proc = external.run(["bash", "--noprofile", "--norc", "-c", code, "envtool", _SPLIT, str(script)],
                                env=base if before is None else before, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise EnvtoolError(f"{script}: did not finish in {timeout:.0f} s while computing its effect "
                               "for the modulefile") from None
        if proc.returncode != 0:
            raise EnvtoolError(f"{script}: exited with status {proc.returncode} while computing its effect "
                               f"for the modulefile: {proc.stderr.strip()[-500:]}")
        first, _, second = proc.stdout.partition(f"\0{_SPLIT}\0")
        env_before, env_after = _parse_env0(first), _parse_env0(second)
        for key in sorted(env_before):
            if key not in env_after and key not in _IGNORE:
                skipped.append(f"{origin} unsets {key} (not applied: an unset cannot be undone)")
        for key, value in env_after.items():
            if key in _IGNORE or key.startswith("BASH_FUNC_"):
                if key.startswith("BASH_FUNC_") and env_before.get(key) != value:
                    skipped.append(f"{origin} exports shell function {key[10:].rstrip('%')} (not applied)")
                continue
            if env_before.get(key) == value:
                continue
            prev = env_before.get(key, "")
            changes += _diff(key, prev, value, origin, (str(prefix), str(runtime_prefix)))
        before = {k: v for k, v in env_after.items() if k not in _IGNORE and not k.startswith("BASH_FUNC_")}
    return changes, skipped
