"""A clone whose Horovod is rebuilt with pip loses conda's ``horovod`` package properly: its files and its
``conda-meta`` record go (py-rattler's transaction), the rest of the clone stays; a package that
depends on conda's horovod stops the step. Real conda packages from a local channel, real py-rattler."""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers.conda_channel import PackageDef, build_channel, python_package
from envtool.core.errors import StepFailed
from envtool.core.plan import PlanOptions
from envtool.engines.rattler import RattlerEngine
from envtool.engines.rattler_api import install_records, read_prefix_records, solve_records
from envtool.spec.catalog import load_spec
from envtool.steps.kernel.runner import Runner

HVD = PackageDef("horovod", "0.28.1", noarch="python", depends=("python",), files={
    "site-packages/horovod/__init__.py": "__version__ = '0.28.1'\n",
    "site-packages/horovod-0.28.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: horovod\nVersion: 0.28.1\n",
    "site-packages/horovod-0.28.1.dist-info/INSTALLER": "conda\n"})


@pytest.fixture(scope="module")
def channel(tmp_path_factory):
    base = tmp_path_factory.mktemp("drop-hvd")
    return build_channel(base / "channel", [
        python_package(), HVD,
        PackageDef("needs-hvd", "1.0", noarch="generic", depends=("horovod",), files={"share/needs": "x\n"}),
        PackageDef("other", "1.0", noarch="generic", files={"share/other": "y\n"})])


def _step(prefix: Path):
    spec = load_spec("cpu-horovod")  # horovod.install: pip-build
    import dataclasses

    spec = dataclasses.replace(spec, engine="rattler", packages=dataclasses.replace(spec.packages, pip=()))
    src = prefix.parent / "src"
    src.mkdir(exist_ok=True)
    (src / "conda-meta").mkdir(exist_ok=True)
    opts = PlanOptions(prefix=prefix)
    steps = RattlerEngine().clone_steps(spec, str(src), opts)
    step = next(s for s in steps if s.id == "conda-remove-horovod")
    # the step works on the build prefix (a temporary sibling in `create`); point it at ours
    return dataclasses.replace(step, data=dataclasses.replace(step.data, prefix=str(prefix), final_prefix=str(prefix)))


def _run(step, tmp_path):
    with Runner(log_path=tmp_path / "log") as runner:
        return step.action(step, runner)


def test_conda_horovod_is_removed_with_its_record(channel, tmp_path):
    prefix = tmp_path / "clone"
    install_records(solve_records([channel], ["python", "horovod", "other"], "linux-64"), prefix, tmp_path / "pkgs")
    site = next(prefix.glob("lib/python*/site-packages"))
    assert (site / "horovod" / "__init__.py").is_file()
    step = _step(prefix)
    assert _run(step, tmp_path) == {"removed": "horovod 0.28.1 h0_0"}
    names = {r.name.normalized for r in read_prefix_records(prefix)}
    assert "horovod" not in names and {"python", "other"} <= names
    assert not (site / "horovod").exists() and not list(site.glob("horovod-*.dist-info"))
    assert not [p for p in (prefix / "conda-meta").glob("horovod-*.json")]
    # nothing left to remove: the step says so
    assert _run(step, tmp_path) == {"removed": None}


def test_a_package_needing_conda_horovod_stops_the_step(channel, tmp_path):
    prefix = tmp_path / "clone"
    install_records(solve_records([channel], ["python", "needs-hvd"], "linux-64"), prefix, tmp_path / "pkgs")
    step = _step(prefix)
    with pytest.raises(StepFailed, match="needs-hvd"):
        _run(step, tmp_path)
    assert "horovod" in {r.name.normalized for r in read_prefix_records(prefix)}
