"""The venv engine's ``venv.system_site_packages`` option, with real ``python -m venv``."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import run_envtool
from helpers.speed import scaled


def _spec(tmp_path, name, layered):
    d = tmp_path / "specs"
    d.mkdir(exist_ok=True)
    (d / f"{name}.yaml").write_text(textwrap.dedent(f"""\
        name: {name}
        summary: a bare venv{' over the base interpreter' if layered else ''}
        sources: {{nersc: "docs.nersc.gov (PyTorch: installing additional packages)"}}
        engine: venv
        venv: {{system_site_packages: {'true' if layered else 'false'}}}
        horovod: {{install: none}}
        expect: {{check_build: null}}
        """))
    return {"ENVTOOL_SPEC_PATH": str(d)}


def _visible(prefix: Path) -> set:
    out = subprocess.run([str(prefix / "bin" / "python"), "-c",
                          "import json, importlib.metadata as m; print(json.dumps(sorted({d.metadata['Name'].lower() "
                          "for d in m.distributions() if d.metadata['Name']})))"],
                         capture_output=True, text=True, check=True).stdout
    return set(json.loads(out))


def _base_distributions() -> set:
    base = getattr(sys, "_base_executable", sys.executable)
    out = subprocess.run([base, "-c",
                          "import json, sysconfig, importlib.metadata as m; print(json.dumps(sorted({"
                          "d.metadata['Name'].lower() for d in m.distributions(path=[sysconfig.get_path('purelib')]) "
                          "if d.metadata['Name']})))"], capture_output=True, text=True, check=True).stdout
    return set(json.loads(out))


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
@pytest.mark.parametrize("layered", [True, False])
def test_system_site_packages_layer(tmp_path, layered):
    name = "layer" if layered else "plain"
    env = _spec(tmp_path, name, layered)
    plan = json.loads(run_envtool("plan", name, "--json", env=env).stdout)
    create = next(s for s in plan["steps"] if s["id"] == "create-venv")
    assert ("--system-site-packages" in create["commands"][0]) is layered
    prefix = tmp_path / "envs" / name
    proc = run_envtool("create", name, "--prefix", prefix, env=env, timeout=scaled(600))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cfg = (prefix / "pyvenv.cfg").read_text()
    assert f"include-system-site-packages = {'true' if layered else 'false'}" in cfg
    own = {"pip", "setuptools", "wheel"}
    base_only = _base_distributions() - own
    if not base_only:
        pytest.skip("the base interpreter has no distributions besides pip/setuptools")
    visible = _visible(prefix)
    if layered:
        assert base_only <= visible
    else:
        assert not (base_only & visible)
