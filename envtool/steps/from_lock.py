"""``create --from-lock FILE``: install exactly the locked packages; no solve happens.

Conda entries: their records are looked up by URL in their channels (py-rattler, no solve) and
installed with :func:`envtool.engines.conda.install_records`. pip entries: ``pip install
--require-hashes --no-deps`` of ``name==version --hash=sha256:…`` lines (pip checks every
archive against the lock). Entries envtool builds (Horovod) are left to the ``build-horovod``
step that the planner adds next, which reuses the wheel cache. After the install, the prefix is
compared with the lock (:mod:`envtool.lock.diff`) and any difference fails the step.
"""
from __future__ import annotations

from pathlib import Path
from typing import List

from envtool.errors import StepFailed, UsageError
from envtool.spec.model import Spec
from envtool.steps.model import PlanOptions, Step


def check_lock_matches(spec: Spec, lock, path: Path) -> List[str]:
    """Notes about the lock's origin; raises when it was made from another spec or a changed one.

    Raises:
        UsageError: the lock names another spec, or its spec content hash differs (a stale lock).
    """
    from envtool.lock.spec_hash import spec_hash

    notes = []
    if lock.spec and lock.spec != spec.name:
        raise UsageError(f"{path}: metadata.custom_metadata.envtool.spec: expected {spec.name!r}, got {lock.spec!r}")
    if lock.spec_hash:
        now = spec_hash(spec)
        if now != lock.spec_hash:
            raise UsageError(f"{path}: metadata.custom_metadata.envtool.spec_hash: the lock is stale for spec "
                             f"{spec.name!r} (spec hash {now[:12]}, lock has {lock.spec_hash[:12]}); re-lock with "
                             f"'envtool lock {spec.name}'")
        notes.append(f"lock made from spec {spec.name} (content hash {now[:12]} matches)")
    else:
        notes.append("the lock records no spec content hash; installing it as it is")
    return notes


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


def plan_steps(spec: Spec, options: PlanOptions) -> List[Step]:
    """Steps that create ``options.work_prefix`` from ``options.from_lock``.

    Returns:
        ``create-venv`` (venv specs) or ``install-locked-conda`` (conda specs), then
        ``install-locked-pip`` when the lock has pip entries, then ``verify-lock``.
    Raises:
        UsageError: unreadable lock, no entries for this machine's platform, another or a
            changed spec, a pip entry without SHA-256.
    """
    from envtool.lock.lockio import read_lock
    from envtool.lock.model import pick_platform

    path = Path(options.from_lock)
    lock = read_lock(path)
    platform = pick_platform(lock, None, str(path))
    notes = check_lock_matches(spec, lock, path)
    entries = lock.for_platform(platform)
    conda = [p for p in entries if p.manager == "conda"]
    pip_lines = requirements_lines(entries)
    built = [p for p in entries if p.built]
    prefix = Path(options.work_prefix)
    py = str(prefix / "bin" / "python")
    steps: List[Step] = []
    if spec.engine == "venv" or not conda:
        if conda:
            raise UsageError(f"{path}: the lock has conda packages but spec {spec.name!r} uses the venv engine")
        from envtool.engines.venv import find_interpreter

        steps.append(Step(id="create-venv", title=f"Create a venv at {options.prefix}",
                          commands=((find_interpreter(spec), "-m", "venv", str(prefix)),), notes=tuple(notes)))
    else:
        steps.append(Step(
            id="install-locked-conda", title=f"Install {len(conda)} locked conda packages ({platform}) with py-rattler",
            commands=(("#", f"look up the {len(conda)} locked records by URL in their channels (no solve)"),
                      ("#", f"py-rattler install into {prefix}")),
            notes=tuple(notes), action=_install_conda,
            data={"packages": tuple(conda), "channels": lock.channels, "platform": platform, "prefix": str(prefix),
                  "target_prefix": str(options.prefix)}))
    if pip_lines:
        req_file = prefix / ".envtool" / "locked-requirements.txt"
        steps.append(Step(
            id="install-locked-pip", title=f"Install {len(pip_lines)} locked pip packages (hashes required, no deps)",
            commands=((py, "-m", "pip", "install", "--disable-pip-version-check", "--require-hashes", "--no-deps",
                       "-r", str(req_file)),),
            notes=tuple(f"{p.key[1]} {p.version} is built by the build-horovod step, not installed from {p.url}"
                        for p in built),
            action=_install_pip, data={"lines": tuple(pip_lines), "req_file": str(req_file)}))
    steps.append(Step(id="verify-lock", title="Compare the prefix with the lock",
                      commands=(("#", f"envtool diff --prefix {prefix} --lock {path} (built packages excepted)"),),
                      action=_verify, data={"packages": tuple(p for p in entries if not p.built),
                                            "platform": platform, "prefix": str(prefix), "lock": str(path)}))
    return steps


def _install_conda(step: Step, runner) -> None:
    from envtool.errors import EnvtoolError
    from envtool.lock import conda_resolve

    try:
        from envtool.engines.conda import install_records
    except ImportError as exc:
        raise StepFailed(step.id, f"the conda engine is not available: {exc}", runner.log_path) from None
    from envtool.horovod.cache import cache_root

    try:
        records = conda_resolve.records_for(step.data["packages"], step.data["channels"], step.data["platform"],
                                            progress=runner.note)
        install_records(records, Path(step.data["prefix"]), cache_root() / "pkgs",
                        target_prefix=Path(step.data["target_prefix"]), progress=runner.note)
    except EnvtoolError as exc:
        if isinstance(exc, StepFailed):
            raise
        raise StepFailed(step.id, str(exc), runner.log_path) from None


def _install_pip(step: Step, runner) -> None:
    req = Path(step.data["req_file"])
    req.parent.mkdir(parents=True, exist_ok=True)
    req.write_text("\n".join(step.data["lines"]) + "\n")
    for argv in step.commands:
        runner.run(argv)


def _verify(step: Step, runner) -> None:
    from envtool.lock import diff, snapshot

    platform = step.data["platform"]
    installed = [p for p in snapshot.snapshot(Path(step.data["prefix"]), platform, lookup=False) if not p.built]
    report = diff.compare(step.data["packages"], installed, platform,
                          seeded=snapshot.seeded(Path(step.data["prefix"])))
    runner.results["verify-lock"] = report.to_dict()
    if not report.ok:
        text = diff.format_report(report, step.data["lock"], step.data["prefix"])
        runner.note(text)
        raise StepFailed(step.id, "the environment does not match the lock:\n" + text, runner.log_path)
