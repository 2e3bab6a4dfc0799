"""Site detection (`detect:` in site files), the default clone source and the site's clone prefix."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.speed import scaled

REPO = Path(__file__).resolve().parent.parent


def run_envtool(*args, env=None, cwd=None):
    full = {k: v for k, v in os.environ.items() if not k.startswith(("ENVTOOL_", "CONDA_"))}
    full["PYTHONPATH"] = str(REPO)  # this checkout's envtool, whatever the cwd
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "envtool", *map(str, args)], cwd=cwd or REPO, capture_output=True,
                          text=True, env=full, timeout=scaled(300))


@pytest.mark.parametrize("environ,hostname,site", [
    ({"NERSC_HOST": "perlmutter"}, "login15", "perlmutter"),
    ({}, "login2.summit.olcf.ornl.gov", "summit"),
    ({}, "login2.summit", "summit"),
    ({}, "polaris-login-02", "polaris"),
    ({}, "gpu025.bede.dur.ac.uk", "bede"),
    ({"NERSC_HOST": "cori"}, "login15", None),
    ({}, "summitdev-login1", None),
    ({}, "workstation.example.org", None),
])
def test_bundled_sites_are_recognised_by_their_documented_rules(environ, hostname, site, monkeypatch):
    from envtool.spec import sites

    monkeypatch.delenv("ENVTOOL_SITE_PATH", raising=False)
    found = sites.detect(environ, hostname)
    assert (found.name if found else None) == site
    if found:
        # every rule of a bundled site names where its fact comes from
        sf = sites.load_site(found.path)
        assert sf.detect and all(r.source in dict(sf.sources) for r in sf.detect)


def test_envtool_site_wins_and_must_name_a_site(monkeypatch):
    from envtool.core.errors import SpecError
    from envtool.spec import sites

    monkeypatch.delenv("ENVTOOL_SITE_PATH", raising=False)
    found = sites.detect({"ENVTOOL_SITE": "local", "NERSC_HOST": "perlmutter"}, "h")
    assert found.name == "local" and found.reason == "$ENVTOOL_SITE"
    with pytest.raises(SpecError):
        sites.detect({"ENVTOOL_SITE": "no-such-site"}, "h")


SITE = """\
name: tw
platforms: [linux-64]
launcher: "mpirun -np {{ranks}}"
detect:
  - env: {{TW_SYSTEM: "tw*"}}
clone_prefix: "$TW_WORK/envs/{{spec}}"
stacks:
  cpu-horovod:
    base_env: {base}
"""


def _conda_env(path: Path) -> Path:
    """A minimal directory that clone source resolution accepts as a conda env (plan reads no more)."""
    (path / "conda-meta").mkdir(parents=True)
    (path / "conda-meta" / "history").write_text("")
    return path


def test_plan_uses_the_detected_site_its_base_env_and_clone_prefix(tmp_path):
    base = _conda_env(tmp_path / "base")
    (tmp_path / "sites").mkdir()
    (tmp_path / "sites" / "tw.yaml").write_text(SITE.format(base=base))
    env = {"ENVTOOL_SITE_PATH": str(tmp_path / "sites"), "TW_SYSTEM": "twin", "TW_WORK": str(tmp_path / "work")}
    proc = run_envtool("plan", "cpu-horovod", "--clone", "--engine", "rattler", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "site: tw (detected: TW_SYSTEM=twin" in proc.stderr
    assert f"-> {tmp_path / 'work' / 'envs' / 'cpu-horovod'}" in proc.stdout
    assert f"clone source: {base} (the base env of site tw for cpu-horovod)" in proc.stdout
    # --json: nothing for people on stdout, and the detection is not said with --json
    proc = run_envtool("plan", "cpu-horovod", "--clone", "--engine", "rattler", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["prefix"] == str(tmp_path / "work" / "envs" / "cpu-horovod") and data["site"] == "tw", data
    assert data["clone_source"] == {"source": str(base), "reason": "the base env of site tw for cpu-horovod"}
    assert proc.stderr == ""
    # an explicit --site wins over detection; the site's clone_prefix needs its variable
    proc = run_envtool("plan", "cpu-horovod", "--clone", str(base), "--engine", "rattler", "--site", "local",
                       env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "detected" not in proc.stderr
    assert f"-> {tmp_path / 'envs' / 'cpu-horovod'}" in proc.stdout
    env.pop("TW_WORK")
    proc = run_envtool("plan", "cpu-horovod", "--clone", "--engine", "rattler", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"-> {tmp_path / 'envs' / 'cpu-horovod'}" in proc.stdout


def test_clone_without_source_or_site_base_env_takes_conda_prefix(tmp_path):
    active = _conda_env(tmp_path / "active")
    proc = run_envtool("plan", "cpu-horovod", "--clone", "--engine", "rattler", env={"CONDA_PREFIX": str(active)},
                       cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"clone source: $CONDA_PREFIX (the active environment $CONDA_PREFIX={active})" in proc.stdout
    assert f"Clone {active}" in proc.stdout
    assert "detected" not in proc.stderr
    proc = run_envtool("plan", "cpu-horovod", "--clone", "--engine", "rattler", cwd=tmp_path)
    assert proc.returncode == 2
    assert "$CONDA_PREFIX is unset" in proc.stderr


@pytest.mark.parametrize("text,field", [
    ("detect: {env: X}\n", "detect"),
    ("detect:\n  - hostnam: x\n", "hostnam"),
    ("detect:\n  - source: nope\n", "env"),
    ("detect:\n  - hostname: x\n    source: nope\n", "source"),
    ("clone_prefix: /scratch/envs\n", "clone_prefix"),
])
def test_bad_detect_rules_and_clone_prefix_are_refused_naming_the_field(tmp_path, text, field):
    site = tmp_path / "bad.yaml"
    site.write_text("name: bad\nplatforms: [linux-64]\n" + text)
    proc = run_envtool("show", "cpu-horovod", "--site-file", site)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert str(site) in proc.stderr and field in proc.stderr
    assert "Traceback" not in proc.stderr
