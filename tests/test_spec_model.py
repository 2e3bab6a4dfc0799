"""Spec loading and cross-field rules: every bad spec is a SpecError naming file, line and field."""
from __future__ import annotations

import textwrap

import pytest

from envtool.core.errors import SpecError
from envtool.spec import catalog, rules
from envtool.spec.load import check_pin_value

GOOD = """\
name: {name}
summary: test
distribution: {{name: ibm-wml-ce, version: "1.6.2"}}
sources: {{ref: https://example.org/ref}}
platforms: [linux-ppc64le]
engine: conda
python: {{value: "3.7", mark: V, source: ref}}
cuda: {{value: "10.1", mark: V, source: ref}}
channels: [https://example.org/channel]
packages:
  conda:
    - {{spec: "pytorch 1.2.0.*", mark: V, source: ref}}
horovod:
  version: {{value: "0.18.2", mark: V, source: ref}}
  install: pip-build
  frameworks: [pytorch]
  controllers: [mpi]
  gpu_ops: {{allreduce: ddl}}
"""


@pytest.fixture
def spec_dir(tmp_path, monkeypatch):
    """An ENVTOOL_SPEC_PATH directory; write(name, text) puts a spec in it."""
    monkeypatch.setenv("ENVTOOL_SPEC_PATH", str(tmp_path))

    def write(name, text):
        path = tmp_path / f"{name}.yaml"
        path.write_text(textwrap.dedent(text))
        return path

    write.dir = tmp_path
    return write


def load_error(spec_dir, name, text) -> SpecError:
    path = spec_dir(name, text)
    with pytest.raises(SpecError) as info:
        catalog.load_spec(name)
    assert str(path) in str(info.value) or info.value.path.endswith(f"{name}.yaml")
    return info.value


def test_good_spec_loads_with_marks(spec_dir):
    spec_dir("good", GOOD.format(name="good"))
    spec = catalog.load_spec("good")
    assert spec.horovod.gpu_ops == (("allreduce", "ddl"),)
    assert [(f, p.mark, p.source) for f, p in spec.pins()][0] == ("python", "V", "ref")


def test_unknown_key_is_named_with_a_suggestion(spec_dir):
    err = load_error(spec_dir, "typo", GOOD.format(name="typo").replace("  install: pip-build", "  instal: pip-build"))
    assert err.field == "horovod.instal" and "did you mean 'install'" in str(err) and err.line == 15


@pytest.mark.parametrize("old,new,field", [
    ('"pytorch 1.2.0.*"', '"pytorch 1.2..0"', "packages.conda[0]"),
    ('"3.7", mark', '"3.x", mark', "python"),
    ('"0.18.2", mark', '"zero.18", mark', "horovod.version"),
])
def test_bad_versions_are_refused(spec_dir, old, new, field):
    err = load_error(spec_dir, "badver", GOOD.format(name="badver").replace(old, new))
    assert err.field == field


def test_bad_pip_requirement_is_refused(spec_dir):
    text = GOOD.format(name="badpip") + "  # end\n"
    text = text.replace("packages:\n", "packages:\n  pip:\n    - {spec: \"torch=>1.2\", mark: V, source: ref}\n")
    err = load_error(spec_dir, "badpip", text)
    assert err.field == "packages.pip[0]" and "pip requirement" in err.expected


def test_pin_value_parsers_accept_what_they_should():
    check_pin_value("f", "tensorflow-base >=2.4.1,<2.4.5", "x", None, "conda")
    check_pin_value("f", "torch==2.13.0", "x", None, "pip")
    check_pin_value("f", "=10.2.*", "x", None, "version")
    check_pin_value("f", ">=3.8,<3.11", "x", None, "version")
    for value, kind in (("", "conda"), (">=3..8", "version"), ("3.x", "version"), ("torch=>2", "pip")):
        with pytest.raises(SpecError):
            check_pin_value("f", value, "x", None, kind)


@pytest.mark.parametrize("old,new,field,words", [
    # DDL outside linux-ppc64le
    ("platforms: [linux-ppc64le]", "platforms: [linux-64]", "horovod.gpu_ops", "linux-ppc64le"),
    # DDL outside WML-CE
    ("name: ibm-wml-ce,", "name: open-ce,", "horovod.gpu_ops", "ibm-wml-ce"),
    # GPU_OPERATIONS before 0.20
    ("  gpu_ops: {allreduce: ddl}", "  gpu_operations: nccl", "horovod.gpu_operations", "0.20.0"),
    # NCCL without CUDA
    ('cuda: {value: "10.1", mark: V, source: ref}\n', "", "horovod.gpu_operations", "cuda"),
    # check-build before 0.17.1
    ('"0.18.2", mark', '"0.16.4", mark', None, None),
])
def test_impossible_horovod_backends(spec_dir, old, new, field, words):
    text = GOOD.format(name="bad").replace(old, new)
    if field is None:  # 0.16.4 has no --check-build, so expecting one is refused
        text += "expect:\n  check_build: {frameworks: [PyTorch], controllers: [MPI], tensor_operations: [DDL, MPI]}\n"
        field, words = "expect.check_build", "0.17.1"
    err = load_error(spec_dir, "bad", text)
    assert err.field == field and words in str(err)


def test_ccl_before_0_19(spec_dir):
    text = GOOD.format(name="ccl").replace("  gpu_ops: {allreduce: ddl}", "  gpu_ops: {allreduce: ddl}\n"
                                           "  cpu_operations: ccl")
    assert load_error(spec_dir, "ccl", text).field == "horovod.cpu_operations"


def test_cpu_only_platform_with_gpu_operations(spec_dir):
    text = GOOD.format(name="osx").replace("platforms: [linux-ppc64le]", "platforms: [linux-ppc64le, osx-arm64]")
    err = load_error(spec_dir, "osx", text)
    assert err.field == "platforms" and "osx-arm64" in str(err)


def test_conda_horovod_needs_conda_engine(spec_dir):
    text = GOOD.format(name="venvconda").replace("engine: conda", "engine: venv").replace(
        "  install: pip-build", "  install: conda")
    assert load_error(spec_dir, "venvconda", text).field == "horovod.install"


def test_expectation_must_follow_the_build(spec_dir):
    text = GOOD.format(name="expect") + ("expect:\n  check_build: {frameworks: [TensorFlow], controllers: [MPI], "
                                         "tensor_operations: [DDL, MPI]}\n")
    assert load_error(spec_dir, "expect", text).field == "expect.check_build.frameworks"


def test_extends_cycle_is_named(spec_dir):
    spec_dir("cyc-a", "extends: cyc-b\n")
    spec_dir("cyc-b", "extends: cyc-a\n")
    with pytest.raises(SpecError) as info:
        catalog.load_spec("cyc-a")
    assert info.value.field == "extends" and "cyc-a -> cyc-b -> cyc-a" in str(info.value)


def test_abstract_is_not_inherited_and_abstract_specs_do_not_load(spec_dir):
    spec_dir("par", "abstract: true\nsources: {ref: x}\nhorovod: {frameworks: [pytorch]}\n")
    spec_dir("kid", "extends: par\npython: {value: '3.11', mark: I, source: ref}\n")
    kid = catalog.load_spec("kid")
    assert kid.horovod.frameworks == ("pytorch",) and kid.python.source == "ref"
    with pytest.raises(SpecError) as info:
        catalog.load_spec("par")
    assert info.value.field == "abstract"


def test_horovod_version_parses_local_versions(spec_dir):
    spec_dir("local", GOOD.format(name="local").replace('"0.18.2", mark', '"0.18.2+1", mark'))
    assert str(rules.horovod_version(catalog.load_spec("local"))) == "0.18.2+1"


def test_expected_nccl_needs_nccl_in_a_pip_build(spec_dir):
    text = GOOD.format(name="nccl") + ("expect:\n  check_build: {frameworks: [PyTorch], controllers: [MPI], "
                                       "tensor_operations: [NCCL, MPI]}\n")
    assert load_error(spec_dir, "nccl", text).field == "expect.check_build.tensor_operations"
    spec_dir("ddl", GOOD.format(name="ddl") + ("expect:\n  check_build: {frameworks: [PyTorch], controllers: [MPI], "
                                                "tensor_operations: [DDL, MPI]}\n"))
    assert catalog.load_spec("ddl").expect.check_build.tensor_operations == ("DDL", "MPI")


def test_venv_section(spec_dir):
    spec_dir("layered", "extends: cpu-horovod\nname: layered\nvenv: {system_site_packages: true}\n")
    assert catalog.load_spec("layered").venv.system_site_packages is True
    assert catalog.load_spec("cpu-horovod").venv.system_site_packages is False
    err = load_error(spec_dir, "typo-venv", "extends: cpu-horovod\nname: typo-venv\nvenv: {system_site_package: true}\n")
    assert err.field == "venv.system_site_package" and "did you mean 'system_site_packages'" in str(err)
    err = load_error(spec_dir, "notbool", "extends: cpu-horovod\nname: notbool\nvenv: {system_site_packages: 'yes'}\n")
    assert err.field == "venv.system_site_packages" and "true or false" in str(err)
    text = GOOD.format(name="condavenv") + "venv: {system_site_packages: true}\n"
    assert load_error(spec_dir, "condavenv", text).field == "venv.system_site_packages"
