"""The ``modulefile`` step of ``create`` (``--modulefile-root DIR``).

Runs last, after validation and the lock: it reads the environment being built (packages,
activate.d scripts, the lock) and writes a modulefile of the default format
(:data:`envtool.modules.DEFAULT_FORMAT`: Lmod, ``<root>/<spec>/<version>.lua``) for the *final*
prefix (:mod:`envtool.modules`). ``envtool modulefile --format tcl`` writes the Tcl form for
Environment Modules sites.
"""
from __future__ import annotations

from pathlib import Path
from typing import List

from envtool.spec.model import Spec
from envtool.core.plan import PlanOptions, Step


def plan_steps(spec: Spec, options: PlanOptions) -> List[Step]:
    """The ``modulefile`` step when ``options.modulefile_root`` is set, else none.

    Returns:
        ``[Step]`` whose action writes the modulefile; its result (path, module name) goes to
        the step's result (returned).
    """
    if options.modulefile_root is None:
        return []
    from envtool.modules import DEFAULT_FORMAT, default_name
    from envtool.modules.registry import get

    writer = get(DEFAULT_FORMAT)
    name = spec.name
    version = spec.distribution.version
    root = Path(options.modulefile_root).absolute()
    shown = f"{root}/{name}/{writer.filename(version or '<date>')}"
    if version:
        name, version = default_name(spec, Path(options.prefix))
        shown = f"{root}/{name}/{writer.filename(version)}"
    return [Step(id="modulefile", title=f"Write the {writer.summary} modulefile {shown}",
                 commands=(("#", "envtool", "modulefile", spec.name, "--prefix", str(options.prefix),
                            "--root", str(root)),),
                 notes=("static, reversible changes only: PATH, CONDA_PREFIX/VIRTUAL_ENV, the spec's env, "
                        "etc/conda/activate.d effects; depends_on the site modules",),
                 action=_write, data={"spec": spec, "root": str(root), "prefix": str(options.prefix),
                                      "work_prefix": str(options.work_prefix)})]


def _write(step: Step, runner) -> dict:
    """Write the modulefile. A failure (root not writable, an activate.d script failing) does not
    throw away the validated environment: it is reported, like a missing lock, and
    ``envtool modulefile`` can write the file later."""
    from envtool.core.errors import EnvtoolError
    from envtool.modules import DEFAULT_FORMAT, build_content, write_modulefile

    data = step.data
    try:
        content = build_content(Path(data["work_prefix"]), spec=data["spec"], runtime_prefix=Path(data["prefix"]))
        path = write_modulefile(content, Path(data["root"]), DEFAULT_FORMAT)
    except EnvtoolError as exc:
        runner.note(f"no modulefile written: {exc}")
        runner.progress(f"      warning: no modulefile written ({exc}); the environment is kept; "
                        f"run 'envtool modulefile {data['spec'].name} --prefix {data['prefix']}' later")
        return {"ok": False, "error": str(exc), "root": data["root"]}
    runner.note(f"modulefile {content.full_name} written to {path}")
    return {"ok": True, "path": str(path), "module": content.full_name, "root": data["root"]}
