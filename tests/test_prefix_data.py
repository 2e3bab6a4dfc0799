"""PrefixData is the one place that knows a prefix's kind and its interpreter.

Every prefix here is real: a venv made by ``python -m venv --without-pip``, a conda environment
installed by py-rattler (the library ``envtool create --engine conda`` uses) from a local channel
of real conda packages (tests/helpers/conda_channel.py), and plain directories.
"""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
import rattler

from envtool.core.prefix import PrefixData
from envtool.core.targets import is_environment
from helpers.conda_channel import PackageDef, build_channel, python_package
from helpers.speed import scaled


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    prefix = tmp_path_factory.mktemp("prefixdata") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True, timeout=scaled(120))
    return prefix


@pytest.fixture(scope="module")
def conda_env(tmp_path_factory) -> Path:
    """A conda environment (python + libfoo) installed by py-rattler: conda-meta/*.json and history
    as rattler writes them; the python package links bin/python to this interpreter."""
    tmp = tmp_path_factory.mktemp("prefixdata-conda")
    url = build_channel(tmp / "channel", [python_package(),
                                          PackageDef("libfoo", "1.0", files={"share/libfoo/a.txt": "foo\n"})])
    prefix = tmp / "env"

    async def install() -> None:
        records = await rattler.solve(sources=[rattler.Channel(url)], specs=["python", "libfoo"],
                                      platforms=[rattler.Subdir.current(), rattler.Subdir("noarch")])
        await rattler.install(records, target_prefix=str(prefix), cache_dir=str(tmp / "cache"),
                              show_progress=False)

    asyncio.run(install())
    return prefix


def _sys_prefix(python: Path) -> str:
    return subprocess.run([str(python), "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True,
                          check=True, timeout=scaled(120)).stdout.strip()


def test_venv_kind_interpreter_and_config(venv):
    data = PrefixData(venv)
    assert (data.kind, data.is_venv, data.is_conda) == ("venv", True, False)
    assert data.python == venv / "bin" / "python" and data.find_python() == data.python
    assert _sys_prefix(data.python) == str(venv)
    assert data.activate_script == venv / "bin" / "activate"
    cfg = data.venv_config()
    assert Path(cfg["home"]).is_dir() and cfg["include-system-site-packages"] == "false"
    assert cfg["version"] == "%d.%d.%d" % sys.version_info[:3]  # written by venv since Python 3.11
    assert data.environment_kind() == "a venv (pyvenv.cfg)" == is_environment(venv)


def test_conda_environment_kind_records_and_interpreter(conda_env):
    data = PrefixData(conda_env)
    # the python package here also installs a pyvenv.cfg (tests/helpers): conda-meta/ decides the kind
    assert data.is_venv and data.kind == "conda"
    assert data.has_conda_records and data.has_conda_history
    assert {r.name.normalized for r in data.conda_records} == {"python", "libfoo"}
    assert data.conda_versions()["libfoo"] == "1.0"
    assert _sys_prefix(data.python) == str(conda_env)
    # a conda prefix is activated by conda, even when a bin/activate is there (conda's base has one)
    (conda_env / "bin" / "activate").write_text("# not a venv's script\n")
    try:
        assert data.activate_script is None
    finally:
        (conda_env / "bin" / "activate").unlink()


def test_conda_meta_without_records_or_history_is_not_an_environment(tmp_path):
    (tmp_path / "conda-meta").mkdir()
    data = PrefixData(tmp_path)
    assert data.kind == "conda" and not data.has_conda_records and not data.has_conda_history
    assert data.environment_kind() is None and is_environment(tmp_path) is None
    (tmp_path / "conda-meta" / "history").write_text("==> 2026-01-01 00:00:00 <==\n")
    assert data.environment_kind() == "a conda environment (conda-meta/)" == is_environment(tmp_path)


def test_python_prefix_with_only_python3(tmp_path):
    """A module's Python installation: no pyvenv.cfg, no conda-meta, only bin/python3."""
    (tmp_path / "bin").mkdir()
    os.symlink(os.path.realpath(sys.executable), tmp_path / "bin" / "python3")
    data = PrefixData(tmp_path)
    assert data.kind == "prefix" and data.activate_script is None and data.venv_config() == {}
    assert data.python == tmp_path / "bin" / "python" and not data.python.exists()
    assert data.find_python() == tmp_path / "bin" / "python3"


def test_missing_prefix_is_empty(tmp_path):
    data = PrefixData(tmp_path / "nothing")
    assert data.kind == "prefix" and data.find_python() is None and data.environment_kind() is None
    assert data.conda_records == [] and data.distributions == () and data.venv_config() == {}
