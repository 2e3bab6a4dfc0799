"""The lock decides: which lock ``create`` installs, and the steps that install exactly it.

Choosing (:func:`choose`, once, before planning):

1. ``--resolve``: no lock; solve afresh.
2. ``--lock FILE`` (``--from-lock``): that lock; it must be current, cover this platform and
   interpreter, or the command stops (exit 2).
3. Otherwise the spec's own lock, found by :func:`envtool.lock.check.find_lock` (a
   ``SPEC.conda-lock.yml`` beside the spec file, then ``$ENVTOOL_LOCK_PATH``, then the bundled
   ``lockfiles/``). A lock for another site or another platform does not apply (a solve, with a
   note); a stale one (its spec content hash differs) stops with exit 2 naming the changed spec
   fields and the two ways on: ``envtool lock SPEC`` or ``create --resolve``.

Installing (no solve): conda entries are looked up by URL in their channels (py-rattler) and
installed by the engine (:meth:`envtool.engines.base.Engine.locked_steps`); pip entries with ``pip install
--require-hashes --no-deps --force-reinstall`` of ``name==version --hash=sha256:…`` lines (with
``PYTHONNOUSERSITE=1``), through the installing machine's pip configuration
(:mod:`envtool.lock.portable`), so a distribution that the base interpreter or the user site
already has cannot stand in for the locked one: pip puts every locked archive into the prefix (a
copy outside the environment is left alone, one seeded inside it is replaced). Entries
envtool builds (Horovod) are left to ``build-horovod``, which checks the locked source archive's
hash. After the build, ``verify-lock`` compares the prefix with the lock; any difference fails.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from envtool.core.errors import StepFailed, UsageError
from envtool.spec.model import Spec
from envtool.core.plan import PlanOptions, Step, StepContext
from envtool.engines.base import Engine, LockInstall
from envtool.core.prefix import PrefixData


@dataclass(frozen=True)
class LockChoice:
    """Where ``create`` takes its packages from.

    Attributes:
        path: the lock to install, or None to solve.
        reason: one line for ``plan`` and ``create`` (why this lock, or why a solve).
    """

    path: Optional[Path]
    reason: str


@dataclass(frozen=True)
class LoadedLock:
    """A lock read once and checked against the spec (:func:`load_checked`).

    Attributes:
        path: the lock file.
        lock: its :class:`~envtool.lock.model.LockData`.
        platform: this machine's platform, which the lock covers.
        notes: lines for the plan (hash match, interpreter).
    """

    path: Path
    lock: Any
    platform: str
    notes: Tuple[str, ...]

    def entries(self) -> list:
        """The lock's entries for :attr:`platform`."""
        return self.lock.for_platform(self.platform)

    def built(self, name: str):
        """The entry of ``name`` that envtool builds (``horovod``), or None."""
        return next((p for p in self.entries() if p.built and p.key[1] == name), None)


def _interpreter_for(spec: Spec) -> Any:
    """The interpreter a spec's environment would get when its engine's interpreter resolves pip
    (venv; probed), else None (conda: the lock's own python)."""
    from envtool.engines.registry import engine_for
    from envtool.core.platforms import probe_interpreter

    python = engine_for(spec.engine).lock_python(spec)
    return None if python is None else probe_interpreter(python)


#: ``load_checked(interpreter=PROBE)``: probe the interpreter now (no :class:`MachineFacts` at hand).
PROBE: Any = object()


def load_checked(spec: Spec, path: Path, lock=None, interpreter: Any = PROBE) -> LoadedLock:
    """Read ``path`` and check that it can install ``spec`` here.

    Args:
        spec: the resolved spec.
        path: the lock.
        lock: its :class:`~envtool.lock.model.LockData` when the caller already read it (read
            here otherwise).
        interpreter: the interpreter the environment gets, as probed before planning
            (:attr:`MachineFacts.lock_interpreter <envtool.core.plan.MachineFacts.lock_interpreter>`;
            None: the engine provides Python), or :data:`PROBE` to probe it now.
    Returns:
        the :class:`LoadedLock`.
    Raises:
        UsageError: unreadable or incomplete lock, another spec, a stale spec hash (naming the
            changed fields and both ways on), no entries for this platform, or a lock resolved
            for another interpreter (exit 2).
    """
    from envtool.lock.lockio import read_lock
    from envtool.lock.model import pick_platform
    from envtool.lock.spec_hash import changed_fields, spec_hash

    lock = read_lock(path) if lock is None else lock
    if lock.spec and lock.spec != spec.name:
        raise UsageError(f"{path}: metadata.custom_metadata.envtool.spec: expected {spec.name!r}, got {lock.spec!r}")
    notes = []
    if lock.spec_hash:
        now = spec_hash(spec)
        if now != lock.spec_hash:
            fields = changed_fields(dict(lock.spec_fields), spec)
            what = ("changed since it was locked: " + ", ".join(fields)) if fields else \
                "changed since it was locked (the lock does not say which fields)"
            raise UsageError(
                f"{path}: the lock is stale for spec {spec.name!r}: {what} (spec hash {now[:12]}, lock has "
                f"{lock.spec_hash[:12]}).\n  Refresh the lock:      envtool lock {shlex.quote(spec.name)} -o "
                f"{shlex.quote(str(path))}\n  Or ignore it and solve: envtool create {shlex.quote(spec.name)} --resolve")
        notes.append(f"lock {path} made from spec {spec.name} (content hash {now[:12]} matches)")
    else:
        notes.append(f"lock {path} records no spec content hash; installing it as it is")
    platform = pick_platform(lock, None, str(path))
    here = _interpreter_for(spec) if interpreter is PROBE else interpreter
    if here is not None and lock.interpreter is not None and not here.compatible_with(lock.interpreter):
        raise UsageError(f"{path}: metadata.custom_metadata.envtool.python: the lock was resolved for "
                         f"{lock.interpreter.describe()}, but spec {spec.name!r} gets {here.describe()} here; "
                         f"lock it for this interpreter (envtool lock {shlex.quote(spec.name)}) or use --resolve")
    if here is not None and lock.interpreter is not None:
        notes.append(f"lock resolved for {lock.interpreter.describe()}; this interpreter: {here.describe()}")
    return LoadedLock(Path(path), lock, platform, tuple(notes))


def choose(spec: Spec, explicit: Optional[Path] = None, resolve: bool = False, clone: bool = False) -> LockChoice:
    """Decide whether ``create`` installs a lock or solves (see the module docstring).

    Args:
        spec: the resolved spec.
        explicit: ``--lock FILE``, or None.
        resolve: ``--resolve`` (solve afresh, ignore any lock).
        clone: ``--clone`` (a clone copies its source; no lock applies).
    Returns:
        the :class:`LockChoice`.
    Raises:
        UsageError: ``--lock`` with ``--resolve`` or ``--clone``; a chosen lock that cannot
            install the spec here (:func:`load_checked`).
    """
    from envtool.lock.check import find_lock
    from envtool.lock.model import pick_platform

    if explicit is not None and (resolve or clone):
        raise UsageError("--lock (--from-lock) cannot be combined with " + ("--resolve" if resolve else "--clone"))
    if resolve:
        return LockChoice(None, "--resolve: packages solved afresh; any lock of the spec is ignored")
    if clone:
        return LockChoice(None, "a clone copies its source environment; the spec's extras are solved")
    if explicit is not None:
        load_checked(spec, Path(explicit))
        return LockChoice(Path(explicit), f"packages installed exactly as locked in {explicit} (no solve)")
    found = find_lock(spec)
    if found is None:
        return LockChoice(None, f"no lock for spec {spec.name}: packages solved afresh "
                                "(the new environment's own lock is written to PREFIX/conda-lock.yml)")
    from envtool.lock.lockio import read_lock

    lock = read_lock(found)
    if lock.site and lock.site != spec.site.name:
        return LockChoice(None, f"lock {found} is for site {lock.site}, not {spec.site.name}: packages solved afresh")
    try:
        pick_platform(lock, None, str(found))
    except UsageError:
        return LockChoice(None, f"lock {found} has no entries for this platform ({', '.join(lock.platforms)}): "
                                "packages solved afresh")
    load_checked(spec, found, lock=lock)
    return LockChoice(found, f"packages installed exactly as locked in {found} (no solve; --resolve to solve afresh)")


def requirements_lines(packages) -> List[str]:
    """``name==version --hash=sha256:…`` lines for pip entries that are installed from their archive.

    Raises:
        UsageError: an entry without SHA-256 (``--require-hashes`` needs one).
    """
    lines = []
    for p in packages:
        if p.manager != "pip" or p.built:
            continue
        if not p.sha256:
            raise UsageError(f"lock entry pip {p.name} {p.version}: hash.sha256: expected a SHA-256 "
                             "(pip --require-hashes needs one)")
        lines.append(f"{p.key[1]}=={p.version} --hash=sha256:{p.sha256}")
    return lines


#: The id of the step that installs a lock's pip entries (for every engine).
LOCKED_PIP_STEP = "install-locked-pip"


@dataclass(frozen=True)
class LockedPipData:
    """Payload of ``install-locked-pip``.

    Attributes:
        lines: ``name==version --hash=sha256:…`` requirement lines.
        req_file: where they are written (inside the prefix's ``.envtool/``).
        pins: ``name==version`` of every locked pip entry installed from its archive.
        pins_file: where the pins are written for the constraint check.
        check: uv's check of the pins against pip's configured constraints (argv), or ``()``.
        check_env: the variables of that check.
        indexes: ``{project: public index}`` the lock records (packages not on PyPI); added to
            the install (through this machine's mirrors, when reachable) when the step runs.
    """

    lines: Tuple[str, ...]
    req_file: str
    pins: Tuple[str, ...]
    pins_file: str
    check: Tuple[str, ...]
    check_env: Dict[str, str]
    indexes: Dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class VerifyLockData:
    """Payload of ``verify-lock``: the locked entries (``packages``, and ``built`` ones envtool
    builds), the platform, the prefix and the lockfile."""

    packages: Tuple[Any, ...]
    built: Tuple[Any, ...]
    platform: str
    prefix: str
    lock: str


def plan_steps(spec: Spec, options: PlanOptions, loaded: LoadedLock, engine: Engine) -> List[Step]:
    """Steps that create ``options.work_prefix`` from the lock ``loaded``.

    Returns:
        the engine's steps for the lock (:meth:`Engine.locked_steps
        <envtool.engines.base.Engine.locked_steps>`: ``create-venv`` for venv specs,
        ``install-locked-conda`` for conda specs), then ``install-locked-pip`` when the lock has pip
        entries. :func:`verify_steps` comes after the Horovod build.
    Raises:
        UsageError: a pip entry without SHA-256; conda entries in a lock for a venv spec.
    """
    from envtool.engines.installer import constraint_check_command, install_env
    from envtool.engines.pip import pip_install_step

    entries = loaded.entries()
    pip_lines = requirements_lines(entries)
    built = [p for p in entries if p.built]
    prefix = Path(options.work_prefix)
    py = str(PrefixData(prefix).python)
    lock = LockInstall(path=loaded.path, entries=tuple(entries), channels=tuple(loaded.lock.channels),
                       platform=loaded.platform, notes=tuple(loaded.notes), lookup=_lookup_records)
    steps: List[Step] = list(engine.locked_steps(spec, options, lock))
    if pip_lines:
        req_file = prefix / ".envtool" / "locked-requirements.txt"
        pins_file = str(prefix / ".envtool" / "locked-pins.txt")
        name = options.install_with.name if options.install_with is not None else "pip"
        steps.append(pip_install_step(
            LOCKED_PIP_STEP,
            f"Install {len(pip_lines)} locked pip packages (hashes required, no deps, nothing taken as installed)",
            py, prefix, ["-r", str(req_file)], options, exact=True,
            notes=tuple(f"{p.key[1]} {p.version} is built by the build-horovod step from its locked source archive"
                        for p in built) + (f"{name} finds each archive through this machine's pip configuration; "
                                           "an archive whose SHA-256 differs from the lock is refused",)
            + tuple(f"{project} also from {index} (the index its spec names; a mirror of it when one is configured: "
                    "index_mirrors)" for project, index in loaded.lock.pip_indexes),
            action=_install_pip,
            data=LockedPipData(
                lines=tuple(pip_lines), req_file=str(req_file),
                pins=tuple(f"{p.key[1]}=={p.version}" for p in entries if p.manager == "pip" and not p.built),
                pins_file=pins_file,
                # pip applies them itself; uv checks the locked versions against them first, with
                # its whole share of pip's configuration (UV_CONSTRAINT included, unlike the exact install)
                check=tuple(constraint_check_command(options.install_with, py, pins_file) or ()),
                check_env=dict(install_env(options.install_with)),
                indexes=dict(loaded.lock.pip_indexes))))
    return steps


def _lookup_records(packages: Sequence[Any], channels: Sequence[str], platform: str,
                    progress: Callable[[str], None]) -> List[Any]:
    """The locked conda records, looked up by URL in their channels
    (:func:`envtool.lock.conda_resolve.records_for`)."""
    from envtool.lock import conda_resolve

    return list(conda_resolve.records_for(tuple(packages), tuple(channels), platform, progress=progress))


def verify_steps(options: PlanOptions, loaded: LoadedLock) -> List[Step]:
    """The ``verify-lock`` step: the prefix against the lock, after the build. Built packages
    (Horovod) are compared by the wheel's SHA-256 where the lock records a wheel: a wheel taken
    from a cache must be the locked one; one compiled afresh (the locked wheel was in no cache)
    differs by nature and is noted, not refused."""
    path, platform = loaded.path, loaded.platform
    prefix = Path(options.work_prefix)
    return [Step(id="verify-lock", title="Compare the prefix with the lock",
                 commands=(("#", "envtool diff --prefix " + shlex.quote(str(prefix)) + " --lock "
                            + shlex.quote(str(path)) + " (built packages excepted)"),),
                 action=_verify, data=VerifyLockData(packages=tuple(p for p in loaded.entries() if not p.built),
                                                     built=tuple(p for p in loaded.entries() if p.built),
                                                     platform=platform, prefix=str(prefix), lock=str(path)))]


def _with_index_args(argv: Sequence[str], args: Sequence[str]) -> Tuple[str, ...]:
    """``argv`` (an installer command ending in requirements or ``-r FILE``) with ``args`` inserted
    before its first ``-r``, else at its end."""
    argv = tuple(argv)
    if not args:
        return argv
    at = argv.index("-r") if "-r" in argv else len(argv)
    return argv[:at] + tuple(args) + argv[at:]


def _split_index_args(args: Sequence[str], env: Dict[str, str]) -> Tuple[List[str], Dict[str, str]]:
    """``args`` (``--extra-index-url URL`` / ``--find-links URL`` / ``--trusted-host HOST`` pairs) for an
    installer whose variables are ``env``: where uv already takes that kind of source from a
    variable (``UV_EXTRA_INDEX_URL``, ``UV_FIND_LINKS``: how envtool hands uv pip's sources that
    carry credentials), the URL joins the variable — uv ignores the variable once the option is on
    its command line — else it stays an option. Returns ``(options, variables to set)``."""
    joins = {"--extra-index-url": ("UV_EXTRA_INDEX_URL", " "), "--find-links": ("UV_FIND_LINKS", ",")}
    out: List[str] = []
    extra: Dict[str, str] = {}
    for option, value in zip(args[::2], args[1::2]):
        var, sep = joins.get(option, ("", ""))
        if var and env.get(var):
            extra[var] = (extra.get(var) or env[var]) + sep + value
        else:
            out += [option, value]
    return out, extra


def _install_pip(step: Step, runner: StepContext) -> None:
    from dataclasses import replace as _replace

    from envtool.lock.indexes import extra_index_args, hint_for_missing

    d: LockedPipData = step.data
    req = Path(d.req_file)
    index_args: List[str] = []
    if d.indexes:
        runner.note("the lock's package indexes: " + ", ".join(f"{k} from {v}" for k, v in sorted(d.indexes.items())))
        index_args, notes = extra_index_args(d.indexes)
        for line in notes:
            runner.note(line)
            runner.progress(line)
    if d.check:
        pins = Path(d.pins_file)
        pins.parent.mkdir(parents=True, exist_ok=True)
        pins.write_text("\n".join(d.pins) + "\n")
        runner.note("pip's configured constraints, checked against the locked versions (as pip would):")
        check_args, check_vars = _split_index_args(index_args, d.check_env)
        proc = runner.run(_with_index_args(d.check, check_args),
                          env=dict(d.check_env, PYTHONNOUSERSITE="1", **check_vars), check=False)
        if proc.returncode != 0:
            tail = "\n".join("    " + line for line in proc.stdout.strip().splitlines()[-6:])
            hint = hint_for_missing(proc.stdout, d.indexes)
            if hint:  # a version no configured source has: not a constraint's doing
                raise StepFailed(step.id, "a locked version is not on any package index this machine uses:\n"
                                 + hint + "\n  the installer said:\n" + tail, runner.log_path)
            raise StepFailed(step.id, "pip's configured constraints refuse the locked versions (as pip would):\n"
                             + tail, runner.log_path)
    req.parent.mkdir(parents=True, exist_ok=True)
    req.write_text("\n".join(d.lines) + "\n")
    install_args, install_vars = _split_index_args(index_args, dict(step.env))
    install = step if not install_args else _replace(
        step, commands=tuple(_with_index_args(c, install_args) if i == 0 else c for i, c in enumerate(step.commands)))
    try:
        runner.run_commands(install, env={"PYTHONNOUSERSITE": "1", **install_vars})
    except StepFailed:
        said = _log_tail(runner.log_path)
        hint = hint_for_missing(said, d.indexes)
        if not hint:
            raise
        tail = "\n".join("    " + line for line in said.strip().splitlines()[-6:])
        raise StepFailed(step.id, "a locked version is not on any package index this machine uses:\n" + hint
                         + "\n  the installer said:\n" + tail, runner.log_path) from None


def _log_tail(path: Optional[Path], size: int = 16384) -> str:
    """The last ``size`` bytes of the build log (``""`` when there is none)."""
    if path is None:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - size))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _built_changes(built: Sequence[Any], by_key: Dict[Any, Any], build: Dict[str, Any],
                   runner: StepContext) -> List[Any]:
    """The hash differences of the entries envtool builds (Horovod) whose lock records a wheel.

    Args:
        built: the lock's built entries (:attr:`VerifyLockData.built`).
        by_key: the snapshot's packages by ``(manager, name)`` key.
        build: the ``build-horovod`` step's result (``{}`` when there was none).
        runner: the step context; a matching hash, or a wheel compiled afresh because the locked
            one was in no wheel cache, is noted in the log.
    Returns:
        one :class:`envtool.lock.diff.Change` (``hash``) per installed wheel that is not the locked
        one and was not compiled afresh.
    """
    from envtool.lock import diff

    extra = []
    for locked in built:
        got = by_key.get(locked.key)
        if got is None or not (diff.is_wheel(locked.url) and locked.sha256):
            continue
        if got.sha256.lower() == locked.sha256.lower():
            runner.note(f"{locked.key[1]}: installed wheel SHA-256 {got.sha256} is the lock's")
        elif build.get("cache_hit") is False:
            runner.note(f"{locked.key[1]}: compiled afresh (the locked wheel {locked.sha256} is in no wheel cache); "
                        f"installed wheel SHA-256 {got.sha256 or '(not recorded)'}")
        else:
            extra.append(diff.Change(locked.key[0], locked.key[1], "hash", locked.sha256, got.sha256 or "(not recorded)"))
    return extra


def _verify(step: Step, runner: StepContext) -> Dict[str, Any]:
    """The ``verify-lock`` action: compare the prefix with the lock (built entries by wheel hash).

    Returns:
        the diff report as a dict (JSON-ready).
    Raises:
        StepFailed: the environment does not match the lock (the report is the step's result).
    """
    d: VerifyLockData = step.data
    from dataclasses import replace

    from envtool.lock import diff, snapshot

    platform = d.platform
    build = runner.results.get("build-horovod") or {}
    keys = {"horovod": build["cache_key"]} if build.get("cache_key") else None
    everything = snapshot.snapshot(Path(d.prefix), platform, lookup=False, built_keys=keys)
    installed = [p for p in everything if not p.built]
    report = diff.compare(d.packages, installed, platform,
                          seeded=snapshot.seeded(Path(d.prefix)))
    extra = _built_changes(d.built, {p.key: p for p in everything}, build, runner)
    if extra:
        report = replace(report, changed=report.changed + tuple(extra))
    if not report.ok:
        text = diff.format_report(report, d.lock, d.prefix)
        runner.note(text)
        raise StepFailed(step.id, "the environment does not match the lock:\n" + text, runner.log_path,
                         step_result=report.to_dict())
    return report.to_dict()
