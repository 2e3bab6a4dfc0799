"""Check 1, ``versions``: interpreter and framework versions against the spec; frameworks
that fail to import, with the import error."""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from envtool.checks.common import base_pip, installed_pip
from envtool.checks.registry import check, finding
from envtool.spec.model import Spec

ID = "versions"


def _conda_records(prefix: Path) -> list:
    from envtool.core.prefix import PrefixData

    return PrefixData(Path(prefix)).conda_records


def compare_pins(spec: Spec, prefix: Path, python_version: Optional[str],
                 base: Optional[Mapping[str, Tuple[str, str]]] = None) -> Tuple[List[str], List[str]]:
    """Compare the spec's pins with what ``prefix`` holds, through the values
    :mod:`envtool.spec.load` parsed (:attr:`Pin.requirement`, :attr:`Pin.match_spec`,
    :meth:`Pin.matches`); nothing is parsed again here.

    Args:
        spec: the spec.
        prefix: the environment.
        python_version: its interpreter's version, or None.
        base: ``{canonical name: (version, base prefix)}`` of what a layered environment sees from
            its base (:func:`envtool.checks.common.base_pip`); a pin the prefix does not hold
            counts as present when the base has it, and its line says so.
    Returns:
        ``(ok_lines, problem_lines)``, each ``"name: want X, found Y"`` (``"… (from the base
        B)"`` for a base package).
    """
    ok: List[str] = []
    bad: List[str] = []
    if spec.python is not None and python_version:
        line = f"python: want {spec.python.value}, found {python_version}"
        (ok if spec.python.matches(python_version) is not False else bad).append(line)
    own = installed_pip(prefix)
    pip: Dict[str, str] = {name: version for name, (version, _) in (base or {}).items()}
    pip.update(own)

    def origin(name: str) -> str:
        return "" if name in own or not base or name not in base else f" (from the base {base[name][1]})"

    for pin in spec.packages.pip:
        req = pin.requirement  # parsed once by envtool.spec.load
        if req is None or pin.name is None:
            continue
        have = pip.get(pin.name)
        if have is None:
            bad.append(f"{req.name}: want {pin.value}, not installed")
        elif req.specifier and not req.specifier.contains(have, prereleases=True):
            bad.append(f"{req.name}: want {pin.value}, found {have}{origin(pin.name)}")
        else:
            ok.append(f"{req.name}: {have}{origin(pin.name)}")
    if spec.packages.conda:
        records = _conda_records(prefix)
        for pin in spec.packages.conda:
            ms = pin.match_spec  # parsed once by envtool.spec.load
            if ms is None:
                continue
            name = pin.name or pin.value
            same = [r for r in records if r.name.normalized == name]
            if not same:
                bad.append(f"{name}: want {pin.value}, not installed (conda-meta)")
            elif not any(ms.matches(r) for r in same):
                bad.append(f"{name}: want {pin.value}, found {same[0].version}")
            else:
                ok.append(f"{name}: {same[0].version}")
    if spec.horovod.version is not None and spec.horovod.install != "none":
        want = spec.horovod.version.version or spec.horovod.version.value
        have = pip.get("horovod")
        if have is None:
            bad.append(f"horovod: want {want}, not installed")
        elif spec.horovod.version.matches(have) is False:
            bad.append(f"horovod: want {want}, found {have}{origin('horovod')}")
    return ok, bad


@check(ID, "Interpreter and framework versions, imports", needs=("info",), order=10,
       fix="recreate the environment from its spec: envtool create SPEC --prefix PREFIX --force")
def run(ctx):
    info = ctx.probe("info")
    if info.error:
        return finding(ID, "fail", f"the environment's interpreter {ctx.python} did not answer: {info.error}",
                       output_tail=info.output_tail)
    data = info.data
    found = {"python": data.get("python")}
    failed = []
    for name in ("torch", "tensorflow", "mxnet", "horovod"):
        rec = info.module(name)
        if not rec:
            continue
        if rec.get("ok"):
            found[name] = rec.get("version")
        else:
            failed.append(f"import {name} failed: {rec.get('error')}")
    items = list(failed)
    ok_lines: List[str] = []
    base = base_pip(ctx) if ctx.spec is not None else {}
    if ctx.spec is not None:
        ok_lines, bad = compare_pins(ctx.spec, Path(ctx.prefix), data.get("python"), base=base)
        items += bad
        from envtool.core import frameworks

        for fw in ctx.spec.horovod.frameworks:
            mod = frameworks.get(fw).module
            if not info.module(mod):
                items.append(f"{mod}: the spec's horovod.frameworks has {fw}, but {mod} is not installed")
    if ctx.lock is not None:
        from envtool.checks import lockdrift

        locked = lockdrift.locked_versions(ctx)
        for name, module in (("python", None), ("torch", "torch"), ("pytorch", "torch"), ("tensorflow", "tensorflow"),
                             ("horovod", "horovod")):
            want = locked.get(name)
            have = found.get(module or "python")
            if want and have and want != have:
                items.append(f"{name}: the lock has {want}, found {have}")
            elif want and have:
                ok_lines.append(f"{name}: {have} (lock)")
    summary_found = ", ".join(f"{k} {v}" for k, v in found.items() if v)
    details: Dict[str, Any] = {"found": found, "matched": ok_lines}
    own = installed_pip(Path(ctx.prefix)) if base else {}
    pinned = {p.name for p in ctx.spec.packages.pip if p.name} | {"horovod"} if ctx.spec is not None else set()
    from_base = {n: base[n][0] for n in sorted(pinned) if n in base and n not in own}
    if from_base:
        details["from_base"] = {"prefix": next(iter(base.values()))[1], "packages": from_base}
        summary_found += (f"; from the base {details['from_base']['prefix']}: "
                          + ", ".join(f"{n} {v}" for n, v in from_base.items()))
    fix = ""
    if items:
        name = ctx.spec.name if ctx.spec is not None else "SPEC"
        fix = (f"recreate from the spec: envtool create {shlex.quote(name)} --prefix {shlex.quote(str(ctx.prefix))} "
               "--force")
        if failed and not ctx.spec:
            fix = (f"reinstall the failing package(s) with {shlex.quote(str(ctx.python))} -m pip install "
                   "--force-reinstall ...")
        return finding(ID, "fail", f"{len(items)} problem(s); found {summary_found}", fix, items=items, **details)
    matched = [f"spec {ctx.spec.name}"] if ctx.spec is not None else []
    matched += [f"lock {ctx.lock}"] if ctx.lock is not None else []
    against = f" (match {' and '.join(matched)})" if matched else ""
    return finding(ID, "ok", f"{summary_found}{against}", **details)
