"""The TensorFlow twin's pieces, fast (no twin is built): the conda package ``make_twin.py`` makes from a
``tensorflow-cpu`` wheel is Open-CE's ``tensorflow-base``, and the twin's ``--tensorflow`` spec makes
envtool build one Horovod for TensorFlow and PyTorch (the slow, opt-in path: ``ENVTOOL_TEST_TWIN_TF=1``,
tests/test_site_twin.py)."""
from __future__ import annotations

import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "twin"))

import make_twin  # noqa: E402

METADATA = """Metadata-Version: 2.1
Name: tensorflow-cpu
Version: 2.15.1
Requires-Dist: numpy (<2.0.0,>=1.23.5)
Requires-Dist: keras (<2.16,>=2.15.0)
Requires-Dist: tensorflow-intel (==2.15.1) ; platform_system == "Windows"
"""


def _wheel(tmp: Path) -> Path:
    """A real (small) wheel under the name and metadata of PyPI's tensorflow-cpu 2.15.1 Linux wheel."""
    whl = tmp / "tensorflow_cpu-2.15.1-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    with zipfile.ZipFile(whl, "w") as zf:
        zf.writestr("tensorflow/__init__.py", "__version__ = '2.15.1'\n")
        zf.writestr("tensorflow_cpu-2.15.1.dist-info/METADATA", METADATA)
        zf.writestr("tensorflow_cpu-2.15.1.dist-info/WHEEL",
                    "Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: cp311-cp311-manylinux_2_17_x86_64\n")
        zf.writestr("tensorflow_cpu-2.15.1.dist-info/RECORD", "")
    return whl


def test_the_tensorflow_cpu_wheel_becomes_open_ce_s_tensorflow_base(tmp_path):
    pkg = make_twin.wheel_package(_wheel(tmp_path), tmp_path)
    assert (pkg.name, pkg.version, pkg.subdirs) == ("tensorflow-base", "2.15.1", ("linux-64",))
    assert set(pkg.depends) == {"numpy <2.0.0,>=1.23.5", "keras <2.16,>=2.15.0", "python 3.11.*"}, pkg.depends
    assert "lib/python3.11/site-packages/tensorflow/__init__.py" in pkg.files
    # the base env asks for it by that name, at the wheel's version
    assert make_twin.TF_BASE_SPEC == "tensorflow-base 2.15.1.*"
    assert make_twin.TF_WHEEL == "tensorflow-cpu==2.15.1"


def test_the_tensorflow_twin_spec_builds_horovod_for_both_frameworks(tmp_path):
    from envtool.horovod import flags
    from envtool.spec.catalog import load_spec

    spec_file = tmp_path / "open-ce-twin.yaml"
    spec_file.write_text(make_twin.SPEC_TF.format(spec="open-ce-twin", channel=(tmp_path / "channel").as_uri(),
                                                  tf=make_twin.TF_BASE_SPEC))
    spec = load_spec(str(spec_file))
    env = dict(flags.build_env(spec, cpu_count=2))
    assert env["HOROVOD_WITH_TENSORFLOW"] == "1" and env["HOROVOD_WITH_PYTORCH"] == "1", env
    assert env["HOROVOD_WITH_MPI"] == "1" and "HOROVOD_WITHOUT_TENSORFLOW" not in env, env
    assert env["HOROVOD_DEBUG"] == "1", env
    assert tuple(spec.expect.check_build.frameworks) == ("TensorFlow", "PyTorch")
    # the default twin's spec stays PyTorch only
    plain = tmp_path / "plain" / "open-ce-twin.yaml"
    plain.parent.mkdir()
    plain.write_text(make_twin.SPEC.format(spec="open-ce-twin", channel=(tmp_path / "channel").as_uri()))
    env = dict(flags.build_env(load_spec(str(plain)), cpu_count=2))
    assert env["HOROVOD_WITHOUT_TENSORFLOW"] == "1" and "HOROVOD_WITH_TENSORFLOW" not in env, env


def test_a_console_script_s_extras_marker_is_left_out_of_the_conda_entry_point(tmp_path):
    """google-auth-oauthlib 1.5.0 (a TensorFlow dependency) declares ``google-oauthlib-tool =
    google_auth_oauthlib.tool.__main__:main [tool]``; py-rattler refused to link the package with the
    marker in ``link.json`` ("entry point function must be a Python dotted identifier")."""
    whl = tmp_path / "google_auth_oauthlib-1.5.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as zf:
        zf.writestr("google_auth_oauthlib/__init__.py", "")
        zf.writestr("google_auth_oauthlib-1.5.0.dist-info/METADATA",
                    "Metadata-Version: 2.1\nName: google-auth-oauthlib\nVersion: 1.5.0\n")
        zf.writestr("google_auth_oauthlib-1.5.0.dist-info/entry_points.txt",
                    "[console_scripts]\ngoogle-oauthlib-tool = google_auth_oauthlib.tool.__main__:main [tool]\n")
    pkg = make_twin.wheel_package(whl, tmp_path)
    assert pkg.noarch == "python"
    assert pkg.entry_points == ("google-oauthlib-tool = google_auth_oauthlib.tool.__main__:main",), pkg.entry_points
