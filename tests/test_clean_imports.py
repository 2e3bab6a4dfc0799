"""Environments import cleanly, and validation names a warning that importing the framework or
Horovod prints (slow: a real cpu-horovod environment).

The noisy environment is the real one with numpy taken out of a hard-linked copy: PyTorch then
warns "Failed to initialize NumPy: No module named 'numpy'" on every ``import torch`` — the
warning every rank of a validation job printed before numpy was in the spec.
"""
import os
import shutil
import subprocess

import pytest

from conftest import run_envtool
from envtool.validate import probes
from helpers.speed import scaled

pytestmark = pytest.mark.slow


def test_import_torch_and_horovod_print_nothing(cpu_horovod_env):
    proc = subprocess.run([str(cpu_horovod_env / "bin" / "python"), "-c", "import torch, horovod.torch"],
                          capture_output=True, text=True, timeout=scaled(300), env=dict(os.environ, PYTHONWARNINGS=""))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


def test_create_validation_reports_clean_imports(cpu_horovod_env):
    import json

    meta = json.loads((cpu_horovod_env / ".envtool" / "create.json").read_text())
    imports = meta["results"]["validate"]["imports"]
    assert [m["module"] for m in imports["modules"]] == ["torch", "horovod.torch"]
    assert all(m["ok"] and not m["warnings"] and not m["stderr"] for m in imports["modules"])
    assert imports["unexpected"] == []


@pytest.fixture(scope="module")
def without_numpy(cpu_horovod_env, tmp_path_factory):
    """A hard-linked copy of the environment with numpy removed (the original is untouched)."""
    copy = tmp_path_factory.mktemp("noisy") / "env"
    subprocess.run(["cp", "-al", str(cpu_horovod_env), str(copy)], check=True, timeout=scaled(300))
    site = next(copy.glob("lib/python3*/site-packages"))
    removed = [p for p in site.iterdir() if p.name == "numpy" or p.name.startswith("numpy-")
               or p.name == "numpy.libs"]
    assert removed, "the environment has no numpy to take out"
    for p in removed:
        shutil.rmtree(p)
    return copy


def test_import_probe_names_the_numpy_warning(without_numpy):
    results, error = probes.import_modules(without_numpy / "bin" / "python", ["torch", "horovod.torch"])
    assert error is None
    assert [r.module for r in results] == ["torch", "horovod.torch"]
    assert all(r.ok for r in results)
    unexpected = probes.unexpected_warnings(results, ())
    assert unexpected, results
    module, line = unexpected[0]
    assert module == "torch" and "Failed to initialize NumPy" in line
    # a spec that expects the warning accepts it, and only it
    assert probes.unexpected_warnings(results, ("Failed to initialize NumPy",)) == ()


def test_validate_fails_naming_the_warning_and_the_rank(without_numpy):
    proc = run_envtool("validate", "--prefix", without_numpy, "--ranks", "2", "--json", timeout=900)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    text = proc.stdout + proc.stderr
    assert "printed a warning" in text and "Failed to initialize NumPy" in text
    assert "rank 0" in text
