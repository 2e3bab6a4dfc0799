"""``horovod.build_packages``: conda packages the Horovod build needs and the environment does not
keep (OLCF's WML-CE 1.6.2 recipe installs ``gxx_linux-ppc64le=7.3.0`` for the build and removes it:
olcf/olcf-user-docs@f674c627dd63:software/analytics/ibm-wml-ce.rst#L153-L155). Real conda packages
from a local channel, real py-rattler transactions on a real prefix; plan and show run as
subprocesses."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers.conda_channel import PackageDef, build_channel, python_package
from envtool.engines.rattler import build_package_steps
from envtool.engines.rattler_api import install_records, read_prefix_records, solve_records
from envtool.spec.catalog import load_spec
from envtool.steps.kernel.runner import Runner
from helpers.speed import scaled

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def channel(tmp_path_factory):
    base = tmp_path_factory.mktemp("build-pkgs")
    return build_channel(base / "channel", [
        python_package(),
        PackageDef("base-a", "1.0", noarch="generic", files={"share/base-a": "a\n"}),
        PackageDef("libgx", "7.3.0", noarch="generic", files={"lib/libgx.txt": "gx\n"}),
        PackageDef("gxx-fake", "7.3.0", noarch="generic", depends=("libgx 7.3.0",),
                   files={"bin/gxx-fake": "#!/bin/sh\n"})])


def _spec(tmp_path, monkeypatch, channel, build_packages='["gxx-fake 7.3.0.*"]', engine="conda"):
    d = tmp_path / "specs"
    d.mkdir(exist_ok=True)
    (d / "bp.yaml").write_text(textwrap.dedent(f"""\
        name: bp
        engine: {engine}
        platforms: [linux-64]
        channels: ["{channel}"]
        packages:
          conda: [python, base-a]
        horovod:
          version: "0.28.1"
          install: pip-build
          frameworks: [pytorch]
          controllers: [gloo]
          build_packages: {build_packages}
        """))
    monkeypatch.setenv("ENVTOOL_SPEC_PATH", str(d))
    monkeypatch.setenv("ENVTOOL_CACHE_DIR", str(tmp_path / "cache"))  # the steps' package cache: ours, empty
    return load_spec("bp")


def _run(step, tmp_path):
    with Runner(log_path=tmp_path / "log") as runner:
        return step.action(step, runner)


def test_build_packages_are_added_for_the_build_and_removed_after(channel, tmp_path, monkeypatch):
    prefix = tmp_path / "env"
    install_records(solve_records([channel], ["python", "base-a"], "linux-64"), prefix, tmp_path / "pkgs")
    before_names = {r.name.normalized for r in read_prefix_records(prefix)}
    spec = _spec(tmp_path, monkeypatch, channel)
    (install,), (remove,) = build_package_steps(spec, prefix, prefix)
    assert (install.id, remove.id) == ("conda-install-build", "conda-remove-build")

    assert _run(install, tmp_path) == {"added": ["gxx-fake", "libgx"]}
    names = {r.name.normalized for r in read_prefix_records(prefix)}
    assert names == before_names | {"gxx-fake", "libgx"}
    assert (prefix / "bin" / "gxx-fake").is_file() and (prefix / "lib" / "libgx.txt").is_file()

    assert _run(remove, tmp_path) == {"removed": ["gxx-fake", "libgx"]}
    assert {r.name.normalized for r in read_prefix_records(prefix)} == before_names
    assert not (prefix / "bin" / "gxx-fake").exists() and not (prefix / "lib" / "libgx.txt").exists()
    assert not list((prefix / "conda-meta").glob("gxx-fake-*.json"))
    assert (prefix / "share" / "base-a").is_file()


def test_a_build_package_the_environment_already_had_is_kept(channel, tmp_path, monkeypatch):
    prefix = tmp_path / "env"
    install_records(solve_records([channel], ["python", "base-a", "gxx-fake"], "linux-64"), prefix, tmp_path / "pkgs")
    spec = _spec(tmp_path, monkeypatch, channel)
    (install,), (remove,) = build_package_steps(spec, prefix, prefix)
    assert _run(install, tmp_path) == {"added": []}
    assert _run(remove, tmp_path) == {"removed": []}
    assert (prefix / "bin" / "gxx-fake").is_file()  # it was not ours to remove
    assert "gxx-fake" in {r.name.normalized for r in read_prefix_records(prefix)}


def _envtool(*args, env=None):
    import os

    return subprocess.run([sys.executable, "-m", "envtool", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=scaled(120), env={**os.environ, **(env or {})})


def test_plan_puts_the_build_packages_around_the_horovod_build(tmp_path):
    proc = _envtool("plan", "ibm-wml-ce-1.6.2", "--platform-mismatch-ok", "--json", env={"ENVTOOL_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr
    ids = [s["id"] for s in json.loads(proc.stdout)["steps"]]
    i = ids.index("build-horovod")
    assert ids[i - 1] == "conda-install-build" and ids[i + 1] == "conda-remove-build", ids
    proc = _envtool("show", "ibm-wml-ce-1.6.2", "--json")
    d = json.loads(proc.stdout)
    assert d["horovod"]["build_packages"] == ["gxx_linux-ppc64le 7.3.0.*"]
    assert not any(p["value"].startswith("gxx") for p in d["pins"] if p["field"].startswith("packages."))


def test_build_packages_need_the_conda_engine(channel, tmp_path):
    d = tmp_path / "specs"
    d.mkdir()
    (d / "bp.yaml").write_text("name: bp\nengine: venv\nhorovod:\n  version: '0.28.1'\n  install: pip-build\n"
                               "  build_packages: ['gxx 7.3.0.*']\n")
    proc = _envtool("show", "bp", env={"ENVTOOL_SPEC_PATH": str(d)})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "horovod.build_packages" in proc.stderr and "engine: conda" in proc.stderr and str(d / "bp.yaml") in proc.stderr
    (d / "bp.yaml").write_text("name: bp\nsite:\n  libraries: [cudnn]\n")
    proc = _envtool("show", "bp", env={"ENVTOOL_SPEC_PATH": str(d)})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "site.libraries" in proc.stderr and "mapping" in proc.stderr
