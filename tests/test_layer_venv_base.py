"""Layering over a base interpreter that is itself a venv (issue 41, item 5).

``python -m venv --system-site-packages`` run by a venv's interpreter bases the new venv on that
venv's *base* installation (https://docs.python.org/3/library/venv.html, "How venvs work"), so
the base venv's own packages are not seen. envtool writes a ``.pth`` whose ``import`` line runs
``site.addsitedir(<the base venv's site-packages>)`` (https://docs.python.org/3/library/site.html),
records the base's packages in the lock, and ``doctor`` counts them as present, from the base.

Real venvs, a real wheel built here and installed with a real installer; no network.
"""
import base64
import hashlib
import json
import os
import shutil
import site
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from conftest import REPO
from helpers.speed import scaled

PKG = "envtool_t41_base"  # a name no index serves: the layer can only get it from its base
VERSION = "4.1.0"


def _wheel(where: Path, name: str = PKG, version: str = VERSION) -> Path:
    """A pure-Python wheel (PEP 427 layout: package, METADATA, WHEEL, RECORD) built here."""
    files = {f"{name}/__init__.py": f"VALUE = {version!r}\n",
             f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{name}-{version}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                  "Tag: py3-none-any\n"}
    rows = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        rows.append(f"{path},sha256={digest},{len(text)}")
    files[f"{name}-{version}.dist-info/RECORD"] = "\n".join(rows + [f"{name}-{version}.dist-info/RECORD,,"]) + "\n"
    whl = where / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
    return whl


def _install(python: Path, wheel: Path) -> None:
    """Install ``wheel`` into ``python``'s environment, offline (uv when here, else pip)."""
    uv = shutil.which("uv")
    argv = ([uv, "pip", "install", "--offline", "--no-index", "--no-deps", "--python", str(python), str(wheel)] if uv
            else [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index", "--no-deps",
                  "--disable-pip-version-check", str(wheel)])
    subprocess.run(argv, check=True, capture_output=True, timeout=scaled(120))


def _base_venv(tmp_path: Path, deps: bool = True, wheel=(PKG, VERSION)) -> Path:
    """A venv that does not include system site packages, holding ``wheel``, and (``deps``) seeing
    this interpreter's site-packages through a ``.pth`` of its own (so envtool runs from it): a venv
    base as a site's or container's Python is, whose own ``.pth`` files the layer must honour too."""
    base = tmp_path / "base"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(base)], check=True, timeout=scaled(60))
    sp = next((base / "lib").glob("python*/site-packages"))
    if deps:
        dirs = [d for d in site.getsitepackages() if os.path.isdir(d)]
        (sp / "zz_deps.pth").write_text("".join(f"import site; site.addsitedir({d!r})\n" for d in dirs))
    _install(base / "bin" / "python", _wheel(tmp_path, *wheel))
    return base


def _py(prefix: Path, code: str) -> str:
    proc = subprocess.run([str(prefix / "bin" / "python"), "-c", code], capture_output=True, text=True,
                          timeout=scaled(60), env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_layer_over_a_venv_base_sees_it_in_order(tmp_path):
    """``layer_over`` (no create): the child made by the base venv's ``venv --system-site-packages``
    imports the base venv's package, its own copy of a name wins over the base's, and the base's
    own ``.pth`` files are read (``addsitedir``)."""
    from envtool.engines.layer import LAYER_PTH, layer_over, pth_dirs, probe_site

    base = _base_venv(tmp_path)
    child = tmp_path / "child"
    subprocess.run([str(base / "bin" / "python"), "-m", "venv", "--without-pip", "--system-site-packages", str(child)],
                   check=True, timeout=scaled(60))
    view = probe_site(str(base / "bin" / "python"))
    assert view.kind == "venv" and not view.includes_system and Path(view.prefix) == base
    record = layer_over(view, child)
    child_sp = next((child / "lib").glob("python*/site-packages"))
    base_sp = next((base / "lib").glob("python*/site-packages"))
    assert record["pth"] == str(child_sp / LAYER_PTH) and record["site_packages"] == [str(base_sp)]
    assert pth_dirs((child_sp / LAYER_PTH).read_text()) == [str(base_sp)]
    assert "include-system-site-packages = false" in (child / "pyvenv.cfg").read_text()  # as the base venv
    assert _py(child, f"import {PKG}; print({PKG}.VALUE)") == VERSION
    (child_sp / f"{PKG}.py").write_text("VALUE = 'own'\n")  # the layer's own module shadows the base's
    assert _py(child, f"import {PKG}; print({PKG}.VALUE)") == "own"
    assert _py(child, "import packaging; print(packaging.__file__)")  # via the base venv's own .pth


@pytest.mark.slow  # 11 s on a quiet 2-core machine (ensurepip in the layer, pip, the lock): over the fast tier's 10 s
def test_create_layered_over_a_venv_base_locks_and_doctors_it(tmp_path):
    """``envtool create`` run by a venv's interpreter, for a spec with ``venv.system_site_packages``
    that pins a package only the base venv has: the layer imports it, the lock records the base's
    set (still a conda-lock file that conda-lock 4.0.3 parses) and ``doctor --only versions`` counts
    it as present, from the base. Before the fix the layer saw the base's base installation and the
    pinned package was not found."""
    from conda_lock.lockfile import parse_conda_lock_file

    from envtool.lock.lockio import read_lock

    base = _base_venv(tmp_path)
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "t41-layer.yaml").write_text(textwrap.dedent(f"""\
        name: t41-layer
        summary: a venv layered over a venv base
        sources: {{venv-doc: "https://docs.python.org/3/library/venv.html"}}
        engine: venv
        venv: {{system_site_packages: true}}
        packages:
          pip:
            - {{spec: "{PKG}=={VERSION}", mark: V, source: venv-doc}}
        horovod: {{install: none}}
        expect: {{check_build: null}}
        """))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ENVTOOL_DEBUG")}
    env.update(ENVTOOL_SPEC_PATH=str(specs), XDG_STATE_HOME=str(tmp_path / "state"), PIP_NO_INDEX="1")
    layer = tmp_path / "layer"

    def envtool(*args):
        return subprocess.run([str(base / "bin" / "python"), "-m", "envtool", *map(str, args)], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=scaled(300))

    proc = envtool("create", "t41-layer", "--prefix", layer)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert _py(layer, f"import {PKG}, sys; print({PKG}.__file__.startswith(sys.prefix))") == "False"

    lock = layer / "conda-lock.yml"
    parse_conda_lock_file(lock)  # conda-lock's own reader takes it
    data = read_lock(lock)
    assert data.base is not None and data.base.kind == "venv" and Path(data.base.prefix) == base
    assert dict(data.base.packages)[PKG.replace("_", "-")] == VERSION
    assert data.base.records.startswith(f"{len(data.base.packages)} sha256:")
    assert PKG.replace("_", "-") not in {p.key[1] for p in data.packages}  # the lock installs nothing of the base

    proc = envtool("doctor", "--prefix", layer, "--only", "versions", "--json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    (found,) = json.loads(proc.stdout)["findings"]
    assert found["status"] == "ok", found
    assert f"{PKG}: {VERSION} (from the base {base})" in found["details"]["matched"], found
    assert found["details"]["from_base"] == {"prefix": str(base), "packages": {PKG.replace("_", "-"): VERSION}}
    assert f"from the base {base}" in found["summary"]


def test_horovod_runtime_requirements_missing_from_layer_and_base(tmp_path):
    """Horovod's runtime requirements the layer does not see are named (to be installed into the
    layer); the one its venv base provides (PyYAML here) and extras/markers that do not apply are
    not. A real layered venv with Horovod's installed metadata (its 0.28.1 Requires-Dist)."""
    from envtool.engines.layer import layer_over, probe_site
    from envtool.steps.create.horovod_build import missing_runtime_deps

    base = _base_venv(tmp_path, deps=False, wheel=("PyYAML", "6.0.2"))
    layer = tmp_path / "layer"
    subprocess.run([str(base / "bin" / "python"), "-m", "venv", "--without-pip", "--system-site-packages", str(layer)],
                   check=True, timeout=scaled(60))
    layer_over(probe_site(str(base / "bin" / "python")), layer)
    meta = next((layer / "lib").glob("python*/site-packages")) / "horovod-0.28.1.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: horovod\nVersion: 0.28.1\n"
                                   "Requires-Dist: cloudpickle\nRequires-Dist: psutil\nRequires-Dist: pyyaml\n"
                                   "Requires-Dist: packaging\nRequires-Dist: cffi>=1.4.0\n"
                                   'Requires-Dist: dataclasses; python_version < "3.7"\n'
                                   'Requires-Dist: torch; extra == "pytorch"\n')
    (meta / "RECORD").write_text("")
    assert missing_runtime_deps(layer) == ["cloudpickle", "psutil", "packaging", "cffi>=1.4.0"]


def test_check_build_that_died_of_a_missing_module_names_it():
    """``horovodrun --check-build`` that fails on an import names the module, not an old Horovod."""
    from envtool.horovod import checkbuild

    text = ("Traceback (most recent call last):\n  File \"/e/bin/horovodrun\", line 5, in <module>\n"
            "    from horovod.runner.launch import run_commandline\n"
            "  File \"/e/lib/python3.12/site-packages/horovod/runner/launch.py\", line 28, in <module>\n"
            "    import yaml\nModuleNotFoundError: No module named 'yaml'\n")
    with pytest.raises(checkbuild.CheckBuildParseError) as err:
        checkbuild.parse(text)
    assert "No module named 'yaml'" in str(err.value) and "'yaml' is missing" in str(err.value)
    assert "0.17.1" not in str(err.value)


def test_lock_records_the_base_set_and_refuses_an_edited_one(tmp_path):
    """The base set goes into ``metadata.custom_metadata`` (conda-lock v1 stays parseable by
    conda-lock 4.0.3), reads back, and a set edited by hand is refused naming the field (exit 2)."""
    from conda_lock.lockfile import parse_conda_lock_file

    from envtool.core.errors import UsageError
    from envtool.lock.lockio import read_lock, write_lock
    from envtool.lock.model import BaseSet, LockData

    base = BaseSet(kind="venv", prefix="/opt/torch/.venv", packages=(("pyyaml", "6.0.2"), ("torch", "2.11.0")),
                   records="2 sha256:" + "ab" * 32)
    path = write_lock(LockData(packages=(), platforms=("linux-64",), kind="snapshot", engine="venv", base=base),
                      tmp_path / "conda-lock.yml")
    meta = parse_conda_lock_file(path).metadata.custom_metadata
    assert json.loads(meta["envtool.base_packages"]) == {"pyyaml": "6.0.2", "torch": "2.11.0"}
    assert read_lock(path).base == base
    path.write_text(path.read_text().replace('"pyyaml":"6.0.2",', ""))
    with pytest.raises(UsageError, match="envtool.base_packages: envtool.base records 2 base packages but 1"):
        read_lock(path)
