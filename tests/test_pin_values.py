"""Pins keep the values parsed when the spec is loaded, and compare versions as versions.

``Pin.matches`` once split versions on dots: ``2`` did not fit ``2.0``, ``1.0.0a1`` did not fit
``1.0a1`` and a pin's local label (``+cpu``) was thrown away. These tests load real spec files
and read a real venv (``python -m venv --without-pip``) with a real ``.dist-info`` in it.
"""
from __future__ import annotations

import copy
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from rattler import MatchSpec

from envtool.checks.versions import compare_pins
from envtool.lock.spec_hash import spec_hash
from envtool.spec import catalog
from envtool.spec.model import Pin
from helpers.speed import scaled

SPEC = """\
name: {name}
summary: typed pins
engine: conda
platforms: [linux-64]
python: "3.11"
channels: [https://example.org/channel]
packages:
  conda:
    - "pytorch 1.7.1 cuda10.2*"
    - "openssl 1.1.1k"
    - "numpy >=1.20,<2"
  pip:
    - "torch==2.1.0+cpu"
    - "Typing_Extensions>=4"
horovod:
  version: "{horovod}"
  install: pip-build
  frameworks: [pytorch]
  controllers: [gloo]
  build_packages: ["cmake 3.27.*"]
"""


@pytest.fixture
def load(tmp_path, monkeypatch):
    """load(horovod=...) writes ``typed.yaml`` on ENVTOOL_SPEC_PATH and loads it."""
    monkeypatch.setenv("ENVTOOL_SPEC_PATH", str(tmp_path))

    def _load(horovod: str = "0.28.1"):
        (tmp_path / "typed.yaml").write_text(SPEC.format(name="typed", horovod=horovod))
        return catalog.load_spec("typed")

    return _load


@pytest.mark.parametrize("pin, installed, fits", [
    ("2.0", "2", True),              # trailing zeros: the same version (split on dots said no)
    ("2", "2.0.0", True),
    ("1.01", "1.1", True),           # leading zeros: PEP 440 normal form
    ("1.0a1", "1.0.0a1", True),      # a pre-release written with and without a third component
    ("1.10", "1.9", False),          # numbers, not text
    ("1.9", "1.10", False),
    ("1.10", "1.10.2", True),        # shorter pin: prefix
    ("3.11", "3.11.7", True),
    ("2.1.0", "2.1.0rc1", False),    # a pre-release is not the release
    ("2.1.0rc1", "2.1.0rc1+cpu", True),
    ("2.1.0", "2.1.0+cpu", True),    # installed local label ignored when the pin names none
    ("2.1.0+cpu", "2.1.0+cu118", False),  # ... but a pin's own local label must be equal
    ("2.1.0+cpu", "2.1.0+cpu", True),
    ("=3.8", "3.8.18", True),        # conda's fuzzy '=': a prefix
    ("1.7.1.*", "1.7.10", False),
    ("1.7.1.*", "1.7.1.post1", True),
])
def test_bare_pin_matches_by_version_not_by_text(pin, installed, fits):
    assert Pin.bare(pin).matches(installed) is fits


def test_a_range_names_no_single_version():
    assert Pin.bare(">=3.8,<3.11").matches("3.9.1") is None


def test_loaded_pins_keep_their_parsed_values(load):
    spec = load(horovod="0.28.1+cpu")
    pytorch, openssl, numpy = spec.packages.conda
    assert isinstance(pytorch.match_spec, MatchSpec) and pytorch.match_spec.build == "cuda10.2*"
    assert (pytorch.name, pytorch.version, pytorch.parsed_version) == ("pytorch", "1.7.1", Version("1.7.1"))
    # a conda build string is not part of the version; a conda version outside PEP 440 keeps its text
    assert pytorch.matches("1.7.1") is True and pytorch.matches("1.7.10") is False
    assert openssl.parsed_version is None and openssl.version == "1.1.1k"
    assert openssl.matches("1.1.1k") is True and openssl.matches("1.1.1l") is False
    assert numpy.version is None and numpy.matches("1.26.4") is None
    torch, typing_ext = spec.packages.pip
    assert isinstance(torch.requirement, Requirement) and torch.specifier == SpecifierSet("==2.1.0+cpu")
    assert torch.parsed_version == Version("2.1.0+cpu") and torch.matches("2.1.0+cu118") is False
    assert typing_ext.name == "typing-extensions" and typing_ext.version is None
    assert spec.python is not None and spec.python.parsed_version == Version("3.11")
    assert spec.horovod.version is not None and spec.horovod.version.parsed_version == Version("0.28.1+cpu")


def test_specs_with_kept_match_specs_still_copy_and_hash(load):
    """``dataclasses.asdict`` (the lock's spec hash) deep-copies pins, MatchSpec included."""
    spec = load()
    assert spec.horovod.build_packages[0].match_spec is not None
    assert len(spec_hash(spec)) == 64
    copied = copy.deepcopy(spec.horovod.build_packages[0])
    assert copied == spec.horovod.build_packages[0] and str(copied.match_spec) == "cmake 3.27.*"
    assert load() == spec  # parsed values take no part in ==


def _venv_with(tmp_path: Path, name: str, version: str) -> Path:
    """A real venv (no pip) holding one distribution's ``.dist-info`` as an installer writes it."""
    prefix = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True, timeout=scaled(120))
    site = next(prefix.glob("lib/python*/site-packages"))
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text("")
    return prefix


def test_doctor_versions_check_compares_the_horovod_local_label(load, tmp_path):
    """The spec wants a CPU build of Horovod (``0.28.1+cpu``); the env holds a CUDA one."""
    spec = load(horovod="0.28.1+cpu")
    prefix = _venv_with(tmp_path, "horovod", "0.28.1+cu118")
    ok, bad = compare_pins(spec, prefix, "3.11.7")
    assert "horovod: want 0.28.1+cpu, found 0.28.1+cu118" in bad
    assert "python: want 3.11, found 3.11.7" in ok


def test_doctor_versions_check_accepts_an_equal_version_written_differently(load, tmp_path):
    spec = load(horovod="0.28.0")
    prefix = _venv_with(tmp_path, "horovod", "0.28")
    ok, bad = compare_pins(spec, prefix, "3.11.0")
    assert not [b for b in bad if b.startswith("horovod")], bad


def test_bad_pins_name_the_file_and_field(tmp_path):
    """A pin that does not parse is refused at load: exit 2, file and field named, no traceback."""
    path = tmp_path / "bad.yaml"
    path.write_text(textwrap.dedent("""\
        name: bad
        engine: conda
        packages:
          pip: ["torch>>2"]
        """))
    proc = subprocess.run([sys.executable, "-m", "envtool", "show", str(path)], capture_output=True, text=True,
                          timeout=scaled(120), cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 2, proc.stderr
    assert str(path) in proc.stderr and "packages.pip[0]" in proc.stderr and "Traceback" not in proc.stderr
