"""Issue 40, item 2: ``plan`` and ``create`` refuse TensorFlow >= 2.16 and Keras 3 with Horovod <= 0.28.1
(envtool.core.incompatible.KNOWN) before anything is built; the build step refuses the same versions
when they are only found installed. Real CLI runs on spec files written from specs/cpu-horovod.yaml."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from packaging.version import Version

from conftest import REPO, run_envtool
from envtool.core import incompatible
from envtool.spec import load
from envtool.spec import model as m

TF_ISSUE = "https://github.com/horovod/horovod/issues/4290"
KERAS_ISSUE = "https://github.com/keras-team/keras/issues/19970"


def _tf_spec(tmp_path: Path, name: str, *pins: str) -> Path:
    """specs/cpu-horovod.yaml made a TensorFlow spec: horovod.frameworks [tensorflow], the pip
    pins replaced by ``pins`` (one YAML flow item each), a name of its own (no lock file)."""
    text = (REPO / "specs" / "cpu-horovod.yaml").read_text()
    text = text.replace("name: cpu-horovod", f"name: {name}")
    text = re.sub(r"  pip:\n(?:    - .*\n)+", "  pip:\n" + "".join(f"    - {p}\n" for p in pins), text)
    text = text.replace("frameworks: [pytorch]", "frameworks: [tensorflow]")
    text = text.replace("frameworks: [PyTorch]", "frameworks: [TensorFlow]")
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def test_tensorflow_2_17_is_refused_by_plan_and_create_naming_the_pin_and_the_issue(tmp_path):
    spec = _tf_spec(tmp_path, "tf217", '{spec: "tensorflow-cpu==2.17.0", mark: I}', '"numpy==1.26.4"')
    line = spec.read_text().splitlines().index('    - {spec: "tensorflow-cpu==2.17.0", mark: I}') + 1
    proc = run_envtool("plan", spec)
    assert proc.returncode == 2, proc.stderr
    assert f"{spec}:{line}: packages.pip[0]: expected TensorFlow < 2.16" in proc.stderr
    assert "'tensorflow-cpu==2.17.0'" in proc.stderr and "horovod.frameworks" in proc.stderr
    assert "horovod-tf216" in proc.stderr and TF_ISSUE in proc.stderr
    prefix = tmp_path / "env"
    proc = run_envtool("create", spec, "--prefix", prefix, "--json")
    assert proc.returncode == 2, proc.stderr
    envelope = json.loads(proc.stdout)
    assert envelope["ok"] is False and envelope["exit"] == 2
    assert "packages.pip[0]" in envelope["error"] and TF_ISSUE in envelope["error"]
    assert not prefix.exists()


def test_a_range_that_admits_only_2_16_or_later_is_refused_one_that_admits_2_15_is_not(tmp_path):
    proc = run_envtool("plan", _tf_spec(tmp_path, "tfwild", '"tensorflow==2.17.*"'), "--json")
    assert proc.returncode == 2 and TF_ISSUE in json.loads(proc.stdout)["error"], proc.stderr
    data = json.loads(run_envtool("plan", _tf_spec(tmp_path, "tf212", '"tensorflow-cpu==2.12.1"'), "--json").stdout)
    assert data["ok"] is True and data["exit"] == 0 and "build-horovod" in [s["id"] for s in data["steps"]]
    assert not [n for s in data["steps"] for n in s["notes"] if "horovod-tf216" in n]  # decided: 2.12.1 is fine
    data = json.loads(run_envtool("plan", _tf_spec(tmp_path, "tfge", '"tensorflow>=2.10"'), "--json").stdout)
    assert data["ok"] is True, data
    build = next(s for s in data["steps"] if s["id"] == "build-horovod")
    assert [n for n in build["notes"] if "horovod-tf216 is checked when run" in n and TF_ISSUE in n]


def test_keras_3_with_tensorflow_2_15_is_refused_naming_the_keras_pin(tmp_path):
    spec = _tf_spec(tmp_path, "keras3", '"tensorflow-cpu==2.15.1"', '"keras==3.3.3"')
    proc = run_envtool("plan", spec, "--json")
    assert proc.returncode == 2, proc.stderr
    envelope = json.loads(proc.stdout)
    assert set(envelope) == {"ok", "error", "exit"} and envelope["exit"] == 2
    err = envelope["error"]
    assert "packages.pip[1]: expected Keras < 3" in err and "'keras==3.3.3'" in err
    assert "horovod-keras3" in err and TF_ISSUE in err and KERAS_ISSUE in err


def _pin(value: str, kind: str) -> m.Pin:
    """A pin parsed as a spec's ``packages.<kind>`` entry is."""
    return m.Pin(value=value, **load.check_pin_value("t.yaml", value, f"packages.{kind}[0]", None, kind))


@pytest.mark.parametrize("value,kind,refused", [
    ("tensorflow-cpu==2.17.0", "pip", True), ("tensorflow>=2.16", "pip", True), ("tensorflow~=2.16", "pip", True),
    ("tensorflow>=2.16,<2.18", "pip", True), ("tensorflow-gpu==2.16.0rc0", "pip", True),
    ("tensorflow<2.16", "pip", False), ("tensorflow", "pip", False), ("tensorflow>2.15.1", "pip", False),
    ("tensorflow!=2.15.0,>=2.15", "pip", False), ("tensorflow-cpu==2.15.1", "pip", False),
    ("tensorflow-base 2.17.*", "conda", True), ("tensorflow >=2.16,<2.18", "conda", True),
    ("tensorflow-base 2.14.1.*", "conda", False), ("tensorflow-gpu 2.*", "conda", False),
    ("tensorflow", "conda", False), ("torch==2.17.0", "pip", False),
])
def test_which_tensorflow_pins_admit_only_broken_versions(value, kind, refused):
    row = next(r for r in incompatible.KNOWN if r.id == "horovod-tf216")
    assert incompatible.pin_only_broken(row, _pin(value, kind)) is refused


def test_which_pins_leave_the_installed_check_nothing_to_find():
    row = next(r for r in incompatible.KNOWN if r.id == "horovod-tf216")
    for value, kind in (("tensorflow<2.16", "pip"), ("tensorflow-cpu==2.15.1", "pip"), ("tensorflow-gpu 1.14.*", "conda")):
        assert incompatible.pins_exclude(row, [_pin("numpy==2.4.6", "pip"), _pin(value, kind)]), value
    for value, kind in (("tensorflow>=2.10", "pip"), ("tensorflow", "pip"), ("tensorflow-gpu 2.*", "conda")):
        assert not incompatible.pins_exclude(row, [_pin(value, kind)]), value


def test_installed_versions_the_build_step_refuses():
    hits = incompatible.installed_hits(Version("0.28.1"), ["tensorflow"], {"tensorflow-cpu": "2.17.0"})
    assert [(r.id, d, v) for r, d, v in hits] == [("horovod-tf216", "tensorflow-cpu", "2.17.0")]
    assert incompatible.installed_hits(None, ["tensorflow"], {"tensorflow": "2.16.1"})  # a source build
    assert not incompatible.installed_hits(Version("0.28.1"), ["tensorflow"], {"tensorflow-cpu": "2.15.1"})
    assert not incompatible.installed_hits(Version("0.28.1"), ["pytorch"], {"tensorflow-cpu": "2.17.0"})
    assert not incompatible.installed_hits(Version("0.29.0"), ["tensorflow"], {"tensorflow-cpu": "2.17.0"})
    keras = incompatible.installed_hits(Version("0.28.1"), ["tensorflow"], {"tensorflow": "2.15.1", "keras": "3.3.3"})
    assert [r.id for r, _, _ in keras] == ["horovod-keras3"]


def test_the_build_step_stops_before_compiling_when_the_installed_tensorflow_is_2_16_or_later(tmp_path):
    from types import SimpleNamespace

    from envtool.core.errors import StepFailed
    from envtool.horovod.fixes import Toolchain
    from envtool.steps.create import horovod_build as hb

    d = hb.BuildDecision(prefix=tmp_path, requirement="horovod==0.28.1", version="0.28.1", build_env=(),
                         requested=("tensorflow",), toolchain=Toolchain(), compiler="", mpi="not used",
                         platform="linux-64", rules=None)
    step, runner = SimpleNamespace(id="build-horovod"), SimpleNamespace(log_path=tmp_path / "build.log")
    # what probe_env reports for a clone of a base environment with TensorFlow 2.17 (the spec pins none)
    with pytest.raises(StepFailed) as err:
        hb._refuse_incompatible(step, runner, d, {"tensorflow": ["tensorflow-cpu", "2.17.0"]})
    assert "tensorflow-cpu 2.17.0: expected TensorFlow < 2.16" in str(err.value) and TF_ISSUE in str(err.value)
    assert "nothing was compiled" in str(err.value) and err.value.exit_status == 1
    hb._refuse_incompatible(step, runner, d, {"tensorflow": ["tensorflow-cpu", "2.15.1"]})  # no error
