"""Check 2, ``horovod-build`` and ``horovod-metadata``: Horovod's capabilities.

``horovod-build``: what ``horovodrun --check-build`` reports (:mod:`envtool.horovod.checkbuild`;
gathered from Horovod's Python API in the ``info`` probe, or from a real ``horovodrun
--check-build`` where the API cannot answer: the finding's ``check_build_source`` says which,
:func:`envtool.checks.envprobe.probe_check_build`) and the Python API probes (``nccl_built``, ``mpi_built``, ``gloo_built``, ``cuda_built``,
``ddl_built``, ``ccl_built``; horovod/common/basics.py@v0.28.1) against the spec's
``expect.check_build`` and ``horovod`` section; a framework extension that "has not been
built" (horovod/common/util.py::check_extension@v0.28.1 prints the missing ``.so`` path) is
explained with the rebuild command (:func:`envtool.checks.common.rebuild_command`).

``horovod-metadata``: ``site-packages/horovod/metadata.json`` (the framework versions the
extensions were compiled against) against the installed frameworks: a mismatch means an ABI
the extension was not built for (undefined symbols at import).
"""
from __future__ import annotations

import re
from typing import List

from envtool.checks.common import FRAMEWORK_OF_MODULE, rebuild_command
from envtool.checks.registry import check, finding

ID = "horovod-build"
META_ID = "horovod-metadata"

_NOT_BUILT = re.compile(r"Extension (\S+) has not been built: (\S+) not found")

#: check-build name → the API probe that must agree (section, name) → function.
API_OF = {("controllers", "MPI"): "mpi_built", ("controllers", "Gloo"): "gloo_built",
          ("tensor_operations", "NCCL"): "nccl_built", ("tensor_operations", "DDL"): "ddl_built",
          ("tensor_operations", "CCL"): "ccl_built", ("tensor_operations", "MLSL"): "ccl_built"}


def requested(spec, section: str, name: str) -> bool:
    """Whether the spec's ``horovod`` build section asks for a check-build capability (so that a
    rebuild from the spec adds it): frameworks/controllers by name, NCCL/DDL through the GPU
    operations, CCL through ``cpu_operations`` (horovod.md, "Build-time variables")."""
    h = spec.horovod
    if section == "frameworks":
        return name.lower() in h.frameworks
    if section == "controllers" or name in ("MPI", "Gloo"):
        return name.lower() in h.controllers
    if name == "NCCL":
        return h.gpu_operations == "nccl" or any(impl == "nccl" for _, impl in h.gpu_ops)
    if name == "DDL":
        return any(impl == "ddl" for _, impl in h.gpu_ops)
    if name in ("CCL", "MLSL"):
        return h.cpu_operations == "ccl"
    return True


_FIELD = {"frameworks": "horovod.frameworks", "controllers": "horovod.controllers", "NCCL": "horovod.gpu_operations",
          "DDL": "horovod.gpu_ops", "CCL": "horovod.cpu_operations", "MLSL": "horovod.cpu_operations"}


#: How a finding's items name the source of the check-build table
#: (:attr:`envtool.checks.envprobe.CheckBuildResult.source`; ``check_build_source`` in the details).
_SOURCE_OF = {"api": "Horovod's Python API as horovodrun asks it", "horovodrun": "horovodrun --check-build"}
_SHOWN_BY = {"api": "check-build (Horovod's API)", "horovodrun": "horovodrun --check-build"}


def _label(section: str, name: str) -> str:
    return {"frameworks": name, "controllers": f"{name} controller",
            "tensor_operations": f"{name} tensor operations"}[section]


@check(ID, "Horovod capabilities (check-build, API probes)", needs=("check_build", "info"), order=20,
       fix="rebuild Horovod with the HOROVOD_* variables of the spec")
def run(ctx):
    from envtool.horovod import checkbuild

    info = ctx.probe("info")
    cb = ctx.probe("check_build")
    spec = ctx.spec
    expect = spec.expect.check_build if spec is not None else None
    hvd_present = bool(info.data.get("horovod_present")) or cb.parsed is not None
    if not hvd_present:
        if expect is not None or (spec is not None and spec.horovod.install != "none"):
            return finding(ID, "fail", f"Horovod is not installed in {ctx.prefix}, but spec {spec.name} expects it",
                           rebuild_command(ctx, info), check_build_error=cb.error)
        return finding(ID, "skipped", "Horovod is not installed in this environment", check_build_error=cb.error)
    items: List[str] = []
    details = {"check_build": cb.parsed.to_dict() if cb.parsed else None, "check_build_error": cb.error,
               "check_build_seconds": round(cb.seconds, 3), "check_build_source": cb.source,
               "check_build_fallback_reason": cb.fallback_reason, "api": info.data.get("capabilities")}
    shown_by = _SHOWN_BY[cb.source]
    rebuild = False
    # Extensions that import but were not built (the .so is missing).
    for module, (fw, printed) in FRAMEWORK_OF_MODULE.items():
        rec = info.module(f"horovod.{module}")
        if not rec or rec.get("built", True):
            continue
        text = (rec.get("printed") or "") + "\n" + (rec.get("error_full") or rec.get("error") or "")
        m = _NOT_BUILT.search(text)
        wanted = spec is None or fw in spec.horovod.frameworks
        if m:
            line = (f"Extension {m.group(1)} has not been built: {m.group(2)} is missing, so "
                    f"`import horovod.{module}` gives no hvd.init()")
        else:
            line = f"horovod.{module} did not load: {(rec.get('error') or rec.get('printed') or '?').splitlines()[0]}"
        if cb.parsed is not None and cb.parsed.section("frameworks").get(printed):
            line += (f" (check-build still shows [X] {printed}, from {_SOURCE_OF[cb.source]}: from 0.22 the "
                     "import only prints the error, horovod.md)")
        if wanted:
            items.append(line)
            rebuild = True
    if cb.parsed is None:
        items.append(f"{shown_by}: {cb.error}")
    comparison = None
    if cb.parsed is not None and expect is not None:
        comparison = checkbuild.compare(cb.parsed, expect)
        details["comparison"] = comparison.to_dict()
        for row in comparison.missing:
            line = (f"{_label(row.section, row.name)}: expected by spec {spec.name}, not built "
                    f"({shown_by} shows [ ] {row.name})")
            if not requested(spec, row.section, row.name):
                field = _FIELD.get(row.name if row.section == "tensor_operations" else row.section,
                                   "horovod.controllers")
                line += (f"; the spec's build section does not request it ({field}), so a rebuild from the spec "
                         "will not add it either: add it there")
            items.append(line)
            rebuild = True
    caps = info.data.get("capabilities") or {}
    if cb.parsed is not None and caps:
        for (section, name), fn in API_OF.items():
            shown = cb.parsed.section(section).get(name)
            api = caps.get(fn)
            if shown is None or api is None:
                continue
            if bool(shown) != bool(api):
                items.append(f"check-build shows {name} {'built' if shown else 'not built'} but hvd.{fn}() "
                             f"returns {api!r}")
    if spec is not None and spec.horovod.uses_gpu and caps and not (caps.get("cuda_built") or caps.get("rocm_built")):
        items.append(f"spec {spec.name} asks for GPU operations ({spec.horovod.gpu_operations or spec.horovod.gpu_ops}) "
                     "but hvd.cuda_built() and hvd.rocm_built() are False")
        rebuild = True
    built = []
    if cb.parsed is not None:
        for section in checkbuild.SECTIONS.values():
            names = [n for n, ok in getattr(cb.parsed, section) if ok]
            built.append("/".join(names) or "-")
    have = "; ".join(built) if built else "capabilities unknown"
    version = (cb.parsed.version if cb.parsed else None) or info.module("horovod").get("version") or "?"
    if items:
        fix = rebuild_command(ctx, info) if rebuild else "see the items above"
        return finding(ID, "fail", f"Horovod {version} ({have}): {len(items)} problem(s)", fix, items=items, **details)
    against = f", as spec {spec.name} expects" if expect is not None else ""
    return finding(ID, "ok", f"Horovod {version}: {have}{against}", **details)


@check(META_ID, "Horovod metadata.json vs installed frameworks", needs=("info",), order=21,
       fix="rebuild Horovod against the installed frameworks")
def run_metadata(ctx):
    info = ctx.probe("info")
    if info.error:
        return finding(META_ID, "skipped", f"no answer from the environment's interpreter: {info.error}")
    if not info.data.get("horovod_present"):
        return finding(META_ID, "skipped", "Horovod is not installed in this environment")
    meta = info.data.get("horovod_metadata")
    path = info.data.get("horovod_metadata_path")
    if not meta:
        return finding(META_ID, "skipped", f"{path} is absent or unreadable (Horovod before 0.21 writes none)",
                       path=path)
    items = []
    matched = []
    for module, (fw, _) in FRAMEWORK_OF_MODULE.items():
        built_against = meta.get(fw)
        if not built_against or built_against == "none":
            continue
        rec = info.module(module)
        have = rec.get("version") if rec.get("ok") else None
        if have is None:
            items.append(f"{fw}: Horovod was built against {built_against}, but {module} "
                         + ("is not installed" if not rec else f"fails to import ({rec.get('error')})"))
        elif have != built_against:
            items.append(f"{fw}: Horovod was built against {built_against}, installed is {have}")
        else:
            matched.append(f"{fw} {have}")
    if items:
        return finding(META_ID, "fail", f"{path}: built against other framework versions",
                       rebuild_command(ctx, info), items=items, metadata=meta, path=path)
    return finding(META_ID, "ok", "built against the installed " + (", ".join(matched) or "frameworks"),
                   metadata=meta, path=path)
