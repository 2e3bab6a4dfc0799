"""Reading a project: the files and directories given, streamed one directory entry at a time,
plus the local modules they import (modules beside a file, the package it belongs to, relative
imports), within the bounds of :class:`~envtool.checks.scan.model.Limits`."""
from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple

from envtool.checks.scan.facts import ModuleFacts, parse_source
from envtool.checks.scan.model import Limits
from envtool.checks.scan.project import Project
from envtool.core.prefix import PrefixData

#: directories never entered when a directory is scanned (caches, version control, environments).
SKIP_DIRS = {"__pycache__", "site-packages", "node_modules", ".git", ".hg", ".svn", ".tox", ".venv", "venv"}


def package_root(path: Path) -> Path:
    """The directory imports of ``path`` resolve against: above the topmost package holding it."""
    d = path.parent
    while (d / "__init__.py").is_file() and d.parent != d:
        d = d.parent
    return d


def module_file(base: Path, dotted_name: str) -> Optional[Path]:
    """The file of module ``dotted_name`` under ``base`` (``a/b.py`` or ``a/b/__init__.py``), or None."""
    p = base.joinpath(*dotted_name.split(".")) if dotted_name else base
    if dotted_name and p.with_suffix(".py").is_file():
        return p.with_suffix(".py")
    if (p / "__init__.py").is_file():
        return p / "__init__.py"
    return None


def find_local_imports(mod: ModuleFacts) -> Iterator[Tuple[Path, Optional[str]]]:
    """``(file, local name bound to it or None)`` for each import of ``mod`` found in the project."""
    if mod.tree is None:
        return
    roots = [mod.path.parent]
    root = package_root(mod.path)
    if root != mod.path.parent:
        roots.append(root)
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                for r in roots:
                    f = module_file(r, a.name)
                    if f:
                        yield f, (a.asname or a.name.split(".")[0]) if a.asname or "." not in a.name else None
                        break
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.path.parent
                for _ in range(node.level - 1):
                    base = base.parent
                bases = [base]
            else:
                bases = roots
            for b in bases:
                f = module_file(b, node.module or "")
                found = False
                if f is not None:
                    yield f, None
                    found = True
                for a in node.names:  # from pkg import submodule
                    sub = module_file(b, f"{node.module}.{a.name}" if node.module else a.name)
                    if sub is not None:
                        yield sub, a.asname or a.name
                        found = True
                if found:
                    break


def iter_dir(d: Path) -> Iterator[Path]:
    """Every regular ``*.py`` file under ``d``, sorted, skipping :data:`SKIP_DIRS`, hidden
    directories and Python environments (``pyvenv.cfg``, ``conda-meta``)."""
    for dirpath, dirnames, filenames in os.walk(d):
        dirnames[:] = sorted(n for n in dirnames if n not in SKIP_DIRS and not n.startswith(".")
                             and PrefixData(Path(dirpath, n)).kind == "prefix")
        for n in sorted(filenames):
            if n.endswith(".py") and os.path.isfile(os.path.join(dirpath, n)):  # not a FIFO or a device
                yield Path(dirpath, n)


def read_module(path: Path, shown: str) -> ModuleFacts:
    """Read and parse one file (reported as ``shown``).

    Raises:
        UsageError: the file cannot be read, or is not a regular file (exit status 2).
    """
    from envtool.core.errors import UsageError
    from envtool.core.inputs import read_input

    try:
        text = read_input(path, "--script").decode("utf-8", errors="replace")  # a FIFO: exit 2, never a hang
    except OSError as exc:
        raise UsageError(f"--script {shown}: cannot read it ({exc.strerror})") from None
    return parse_source(text, shown, path)


def limit_error(what: str, limits: Limits, files: int, size: int) -> Exception:
    """The :class:`~envtool.core.errors.UsageError` (exit status 2) raised when the scan passes ``limits``."""
    from envtool.core.errors import UsageError

    return UsageError(
        f"--script: {what}; the scan stopped after {files} file(s), {size / 1048576:.1f} MiB, to bound its memory "
        f"(limits: {limits.max_files} files, {limits.max_bytes / 1048576:.4g} MiB of source). Name the entry "
        "script(s) with --entry (only their imports are read), pass a smaller directory, or raise "
        "--max-source-mb / --max-files")


def load_project(paths: Sequence[Path], entries: Sequence[Path] = (), launch: Optional[str] = None,
                  limits: Optional[Limits] = None) -> Project:
    """Read the files (streamed: one directory entry at a time) and the local modules they import.

    Raises:
        UsageError: a file cannot be read, or a limit of ``limits`` is passed (exit status 2).
    """
    limits = limits or Limits()
    explicit: Set[Path] = set()
    budget = {"files": 0, "bytes": 0}

    def given() -> Iterator[Path]:
        if entries:
            for e in entries:
                explicit.add(Path(e).resolve())
                yield Path(e)
            return
        for p in paths:
            p = Path(p)
            if p.is_dir():
                yield from iter_dir(p)
            else:
                explicit.add(p.resolve())
                yield p

    modules: Dict[Path, ModuleFacts] = {}

    def load(path: Path) -> Optional[ModuleFacts]:
        key = path.resolve()
        if key in modules:
            return None
        budget["files"] += 1
        if budget["files"] > limits.max_files:
            raise limit_error(f"more than {limits.max_files} Python files", limits, budget["files"] - 1,
                               budget["bytes"])
        try:
            size = path.stat().st_size
        except OSError:
            size = 0
        if budget["bytes"] + size > limits.max_bytes:
            raise limit_error(f"more than {limits.max_bytes / 1048576:.4g} MiB of Python source (next: {path})",
                               limits, budget["files"] - 1, budget["bytes"])
        mod = read_module(path, str(path))
        budget["bytes"] += mod.size or size
        mod.path = key
        modules[key] = mod
        return mod

    files: List[Path] = []
    for path in given():  # names only, streamed: the file cap stops a huge tree before any is read
        files.append(path)
        if len(files) > limits.max_files:
            raise limit_error(f"more than {limits.max_files} Python files", limits, 0, 0)
    given_set = set(files)
    for path in files:
        load(path)
    queue: List[Path] = list(files)
    if queue:
        while queue:
            path = queue.pop(0)
            mod = modules.get(path.resolve()) if path in given_set else load(path)
            if mod is None or mod.tree is None or mod.local_imports:
                continue
            for f, alias in find_local_imports(mod):
                rf = f.resolve()
                mod.local_imports.add(rf)
                if alias:
                    mod.project_aliases.add(alias)
                if rf not in modules:
                    queue.append(f)
    proj = Project(list(modules.values()), explicit, launch, explicit)
    proj.files, proj.bytes = budget["files"], budget["bytes"]
    return proj
