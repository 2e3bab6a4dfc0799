"""``envtool sbom`` (issue 16): a CycloneDX SBOM of a real environment, validated against the
CycloneDX 1.6 JSON schema with the validator that ships with ``cyclonedx-python-lib``.

The environment is a real conda env made by ``envtool create`` from a local ``file://`` channel
(tests/helpers/conda_channel.py) plus a pip package from a local wheel; the Horovod build
record is the ``build-horovod`` step of envtool's own plan for ``cpu-horovod`` (the real planner's
output) with a fix rule id from envtool's table, since compiling Horovod here is too slow for a
unit test (the slow test reads the real cpu-horovod environment's record).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_envtool
from helpers import wheels
from helpers.conda_channel import PackageDef, build_channel, python_package
from helpers.speed import scaled


def validate(text: str) -> None:
    from cyclonedx.schema import OutputFormat, SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    assert error is None, error


@pytest.fixture(scope="module")
def small_env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sbom")
    url = build_channel(tmp / "ch", [
        python_package(system_site_packages=True),
        PackageDef("libfoo", "1.0", files={"lib/libfoo.txt": "foo\n"}),
    ])
    whl = tmp / "wheels"
    whl.mkdir()
    wheels.make_wheel(whl, "userpkg", "1.2", {"userpkg/__init__.py": "X = 1\n"})
    specs = tmp / "specs"
    specs.mkdir()
    (specs / "sbom-test.yaml").write_text(
        f"name: sbom-test\nsummary: test\nplatforms: [linux-64]\nengine: conda\nchannels: [\"{url}\"]\n"
        "packages:\n  conda: [python, libfoo]\n  pip: [userpkg==1.2]\nhorovod:\n  install: none\n")
    target = tmp / "env"
    proc = run_envtool("create", "sbom-test", "--prefix", target,
                       env={"ENVTOOL_SPEC_PATH": str(specs), "ENVTOOL_CACHE_DIR": str(tmp / "cache"),
                            "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(whl)}, timeout=scaled(600))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return target, url


def test_sbom_conda_and_pip_components_validate(small_env, tmp_path):
    target, url = small_env
    proc = run_envtool("sbom", "--prefix", target)
    assert proc.returncode == 0, proc.stderr
    validate(proc.stdout)
    bom = json.loads(proc.stdout)
    assert bom["bomFormat"] == "CycloneDX" and bom["specVersion"] == "1.6"
    by_name = {c["name"]: c for c in bom["components"]}
    foo = by_name["libfoo"]
    assert foo["purl"].startswith("pkg:conda/libfoo@1.0?") and "subdir=linux-64" in foo["purl"]
    assert "channel=" in foo["purl"] and "build=" in foo["purl"]
    record = json.loads(next((target / "conda-meta").glob("libfoo-1.0-*.json")).read_text())
    hashes = {h["alg"]: h["content"] for h in foo["hashes"]}
    assert hashes["SHA-256"] == record["sha256"] and hashes["MD5"] == record["md5"]
    assert by_name["python"]["purl"].startswith("pkg:conda/python@")
    assert by_name["userpkg"]["purl"] == "pkg:pypi/userpkg@1.2"
    assert bom["metadata"]["component"]["name"] == "env"
    root_dep = next(d for d in bom["dependencies"] if d["ref"] == bom["metadata"]["component"]["bom-ref"])
    assert set(root_dep["dependsOn"]) == {c["bom-ref"] for c in bom["components"]}
    # --output writes the same document; --json reports where
    proc = run_envtool("sbom", "--prefix", target, "--output", tmp_path / "env.cdx.json", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["components"] == len(bom["components"])
    validate((tmp_path / "env.cdx.json").read_text())


def test_sbom_horovod_build_properties(small_env, tmp_path):
    """The HOROVOD_* set and fix rules of the build record become properties of the horovod component."""
    import shutil

    target, _ = small_env
    env = tmp_path / "env"
    shutil.copytree(target, env, symlinks=True)
    whl = tmp_path / "wheels"
    whl.mkdir()
    wheels.make_wheel(whl, "horovod", "0.28.1", {"horovod/__init__.py": "__version__ = '0.28.1'\n"})
    import subprocess

    subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    "--find-links", str(whl), "horovod==0.28.1"], check=True, capture_output=True, timeout=scaled(300))
    plan = run_envtool("plan", "cpu-horovod", "--prefix", env, "--json")
    assert plan.returncode == 0, plan.stderr
    steps = json.loads(plan.stdout)["steps"]
    hvd_step = next(s for s in steps if s["id"] == "build-horovod")
    record = json.loads((env / ".envtool" / "create.json").read_text())
    record["steps"].append(hvd_step)
    record["results"]["build-horovod"] = {"fixes": ["horovod-torch-cxx17"], "cache_key": "k1"}
    (env / ".envtool" / "create.json").write_text(json.dumps(record))
    proc = run_envtool("sbom", "--prefix", env)
    assert proc.returncode == 0, proc.stderr
    validate(proc.stdout)
    hvd = next(c for c in json.loads(proc.stdout)["components"] if c["name"] == "horovod")
    assert hvd["purl"] == "pkg:pypi/horovod@0.28.1"
    props = {(p["name"], p["value"]) for p in hvd["properties"]}
    expected = {(f"envtool:horovod:env:{k}", v) for k, v in hvd_step["env"].items() if k.startswith("HOROVOD_")}
    assert expected and expected <= props
    assert ("envtool:horovod:env:HOROVOD_WITH_PYTORCH", "1") in props
    assert ("envtool:horovod:fix-rule", "horovod-torch-cxx17") in props


@pytest.mark.slow
def test_sbom_real_cpu_horovod_env(cpu_horovod_env):
    proc = run_envtool("sbom", "--prefix", cpu_horovod_env)
    assert proc.returncode == 0, proc.stderr
    validate(proc.stdout)
    comps = {c["name"]: c for c in json.loads(proc.stdout)["components"]}
    assert comps["torch"]["purl"].startswith("pkg:pypi/torch@2.13.0")
    props = {p["name"]: p["value"] for p in comps["horovod"]["properties"]}
    assert props.get("envtool:horovod:env:HOROVOD_WITH_PYTORCH") == "1"


def test_sbom_bad_input_exit_2(tmp_path):
    proc = run_envtool("sbom", "--prefix", tmp_path / "missing")
    assert proc.returncode == 2 and "not a directory" in proc.stderr, proc.stderr
    (tmp_path / "empty").mkdir()
    proc = run_envtool("sbom", "--prefix", tmp_path / "empty")
    assert proc.returncode == 2 and "not an environment" in proc.stderr, proc.stderr
    proc = run_envtool("sbom", "--prefix", tmp_path / "empty", "--format", "spdx")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
