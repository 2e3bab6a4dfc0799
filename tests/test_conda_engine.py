"""The py-rattler engine: solve for a platform with virtual packages, install, ``envtool create``.

Real solves and installs from a ``file://`` channel built by tests/helpers/conda_channel.py.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import run_envtool
from helpers.conda_channel import BINARY_PLACEHOLDER, TEXT_PLACEHOLDER, PackageDef, build_channel, python_package

from envtool.engines.external import ExternalCondaEngine
from envtool.engines.rattler import RattlerEngine
from envtool.engines.rattler_api import install_records, parse_virtual_packages, read_prefix_records, solve_records
from envtool.engines.registry import engine_for, get_engine
from envtool.core.errors import EnvtoolError, UsageError


@pytest.fixture(scope="module")
def channel(tmp_path_factory):
    root = tmp_path_factory.mktemp("chan")
    so = b"\x7fELF\0\0" + BINARY_PLACEHOLDER.encode() + b"/lib/plugins\0rest"
    pkgs = [
        python_package(),
        PackageDef("cudatoolkit", "10.2.89", depends=("__cuda >=10.2",), files={"lib/cuda.txt": "10.2\n"}),
        PackageDef("cudatoolkit", "11.0.221", depends=("__cuda >=11.0",), files={"lib/cuda.txt": "11.0\n"}),
        PackageDef("pytorch-base", "1.7.1", depends=("cudatoolkit >=10.2,<11", "libtorch 1.7.1.*"),
                   files={"etc/conda/activate.d/pytorch.sh": "export TORCH_HOME=$CONDA_PREFIX/share/torch\n"}),
        PackageDef("libtorch", "1.7.1", files={"lib/libtorch.so": so,
                                                 "share/torch/config.cmake": f"set(P {TEXT_PLACEHOLDER})\n"}),
        PackageDef("glibc-hungry", "1.0", depends=("__glibc >=2.28",), subdirs=("linux-64",)),
        PackageDef("tool", "1.0", noarch="generic", files={"share/tool/README": "tool\n"}),
    ]
    return build_channel(root / "channel", pkgs)


def names(records):
    return {r.name.normalized: str(r.version) for r in records}


def test_ppc64le_cuda_solve_on_any_host(channel):
    recs = solve_records([channel], ["pytorch-base 1.7.1"], "linux-ppc64le",
                         ["__unix=0", "__linux=4.18", "__glibc=2.28", "__cuda=10.2", "__archspec=1=ppc64le"])
    assert names(recs) == {"pytorch-base": "1.7.1", "cudatoolkit": "10.2.89", "libtorch": "1.7.1"}
    assert {r.subdir for r in recs} == {"linux-ppc64le"}


def test_solved_records_keep_urls_and_come_dependencies_first(channel):
    recs = solve_records([channel], ["pytorch-base 1.7.1"], "linux-ppc64le", ["__cuda=10.2"])
    assert all(str(r.url).startswith("file://") and str(r.url).endswith((".conda", ".tar.bz2")) for r in recs)
    order = [r.name.normalized for r in recs]
    assert order.index("cudatoolkit") < order.index("pytorch-base")
    assert order.index("libtorch") < order.index("pytorch-base")


def test_virtual_packages_decide(channel):
    # no __cuda: cudatoolkit cannot be installed
    with pytest.raises(EnvtoolError, match="cudatoolkit|__cuda"):
        solve_records([channel], ["pytorch-base"], "linux-64", None)
    # __glibc defaults to 2.17; a package needing 2.28 solves only with the override
    with pytest.raises(EnvtoolError):
        solve_records([channel], ["glibc-hungry"], "linux-64")
    assert names(solve_records([channel], ["glibc-hungry"], "linux-64", {"__glibc": "2.28", "__unix": "0"})) == \
        {"glibc-hungry": "1.0"}
    # cuda 11 picks the newest toolkit
    assert names(solve_records([channel], ["cudatoolkit"], "linux-64", ["__cuda=11.2"]))["cudatoolkit"] == "11.0.221"


def test_bad_virtual_package_and_spec():
    with pytest.raises(UsageError, match="NAME=VERSION"):
        parse_virtual_packages(["__cuda"], "linux-64")
    with pytest.raises(UsageError, match="expected __NAME"):
        parse_virtual_packages({"cuda": "10.2"}, "linux-64")
    with pytest.raises(UsageError, match="channel"):
        solve_records([], ["python"], "linux-64")


def test_install_with_alternative_prefix_and_installed(channel, tmp_path):
    recs = solve_records([channel], ["pytorch-base", "tool", "python"], "linux-64", ["__cuda=10.2", "__glibc=2.17"])
    build, final = tmp_path / ".env.build", tmp_path / "env"
    install_records(recs, build, tmp_path / "pkgs", target_prefix=final)
    assert f"set(P {final})" in (build / "share/torch/config.cmake").read_text()
    so = (build / "lib/libtorch.so").read_bytes()
    assert f"{final}/lib/plugins\0".encode() in so and len(so) == len(b"\x7fELF\0\0" + BINARY_PLACEHOLDER.encode()
                                                                     + b"/lib/plugins\0rest")
    os.rename(build, final)
    got = {p.name: (p.version, p.manager) for p in RattlerEngine().installed(final)}
    assert got["pytorch-base"] == ("1.7.1", "conda") and got["tool"] == ("1.0", "conda")
    assert len(read_prefix_records(final)) == len(recs)


def test_install_failure_is_clear(tmp_path, channel):
    recs = solve_records([channel], ["tool"], "linux-64")
    ch = Path(channel[len("file://"):])
    shutil.copytree(ch, tmp_path / "ch2")
    url2 = (tmp_path / "ch2").as_uri()
    recs = solve_records([url2], ["tool"], "linux-64")
    next((tmp_path / "ch2" / "noarch").glob("tool-*.tar.bz2")).unlink()
    with pytest.raises(EnvtoolError, match="tool-1.0"):
        install_records(recs, tmp_path / "env", tmp_path / "pkgs")


def test_get_engine_maps_names():
    # --engine conda is the external conda executable (one vocabulary with `clone --engine conda`);
    # a spec's `engine: conda` is made by py-rattler unless --engine says otherwise
    assert isinstance(get_engine("rattler"), RattlerEngine) and isinstance(engine_for("conda"), RattlerEngine)
    conda = get_engine("conda")
    assert isinstance(conda, ExternalCondaEngine) and conda.tool == "conda"
    assert isinstance(engine_for("conda", "conda"), ExternalCondaEngine)
    ext = get_engine("micromamba")
    assert isinstance(ext, ExternalCondaEngine) and ext.tool == "micromamba"


def test_envtool_create_installs_pip_packages_with_the_envs_pip(tmp_path):
    """packages.pip is installed by ``<prefix>/bin/python -m pip`` after the conda packages (offline wheel)."""
    from test_clone import make_wheel

    url = build_channel(tmp_path / "ch", [python_package(system_site_packages=True)])
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    make_wheel(wheels)
    specs = tmp_path / "specs"
    _write_spec(specs, "rattler-pip", url, "python", pip="userpkg==1.2")
    target = tmp_path / "t"
    proc = run_envtool("create", "rattler-pip", "--prefix", target, "--json",
                       env={"ENVTOOL_SPEC_PATH": str(specs), "ENVTOOL_CACHE_DIR": str(tmp_path / "cache"),
                            "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = {(p.name, p.version, p.manager) for p in RattlerEngine().installed(target)}
    assert ("userpkg", "1.2", "pip") in got and any(n == "python" and m == "conda" for n, _, m in got)
    assert (target / "bin" / "userpkg").read_text().startswith(f"#!{target}/bin/python")


def _write_spec(dirpath: Path, name: str, channel: str, conda: str, pip: str = "") -> None:
    dirpath.mkdir(parents=True, exist_ok=True)
    text = (f"name: {name}\nsummary: test\nplatforms: [linux-64]\nengine: conda\ncuda: \"10.2\"\n"
            f"channels: [\"{channel}\"]\npackages:\n  conda: [{conda}]\n")
    if pip:
        text += f"  pip: [{pip}]\n"
    text += "horovod:\n  install: none\n"
    (dirpath / f"{name}.yaml").write_text(text)


def test_envtool_create_from_file_channel(channel, tmp_path):
    specs = tmp_path / "specs"
    _write_spec(specs, "rattler-test", channel, "pytorch-base 1.7.1, tool, python")
    target = tmp_path / "t"
    env = {"ENVTOOL_SPEC_PATH": str(specs), "ENVTOOL_CACHE_DIR": str(tmp_path / "cache")}
    plan = run_envtool("plan", "rattler-test", "--prefix", target, "--json", env=env)
    assert plan.returncode == 0, plan.stderr
    step = json.loads(plan.stdout)["steps"][0]
    assert step["id"] == "conda-create" and "__cuda=10.2" in " ".join(step["commands"][0])
    proc = run_envtool("create", "rattler-test", "--prefix", target, "--json", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {r.name.normalized for r in read_prefix_records(target)} == \
        {"pytorch-base", "libtorch", "cudatoolkit", "tool", "python"}
    # placeholders name the final prefix, not the temporary build sibling
    assert (target / "share/torch/config.cmake").read_text() == f"set(P {target})\n"
    so = (target / "lib/libtorch.so").read_bytes()
    assert f"{target}/lib/plugins\0".encode() in so and b"envtool-build" not in so
    assert (target / "etc/conda/activate.d/pytorch.sh").is_file()
    assert not [p for p in tmp_path.iterdir() if "envtool-build" in p.name]


def test_envtool_create_unsatisfiable_leaves_nothing(channel, tmp_path):
    specs = tmp_path / "specs"
    _write_spec(specs, "rattler-bad", channel, "pytorch-base 9.9")
    target = tmp_path / "t"
    proc = run_envtool("create", "rattler-bad", "--prefix", target,
                       env={"ENVTOOL_SPEC_PATH": str(specs), "ENVTOOL_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 1 and "pytorch-base" in proc.stderr and "Traceback" not in proc.stderr
    assert not target.exists()


@pytest.mark.skipif(not any(shutil.which(t) for t in ("conda", "mamba", "micromamba")),
                    reason="no conda, mamba or micromamba on PATH: the external engine drives a real tool only")
def test_external_engine_clone(tmp_path, channel):
    tool = next(t for t in ("conda", "mamba", "micromamba") if shutil.which(t))
    src = tmp_path / "src"
    install_records(solve_records([channel], ["tool"], "linux-64"), src, tmp_path / "pkgs")
    proc = run_envtool("clone", src, "--prefix", tmp_path / "t", "--engine", tool, "--json",
                       env={"ENVTOOL_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "t" / "share/tool/README").is_file()
