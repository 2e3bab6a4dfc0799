"""``defaults`` means what conda means: Anaconda's pkgs/main and pkgs/r, expanded before py-rattler.

No network: the mapping and the plan are checked as text; that py-rattler is handed the expanded
URLs is checked by real solves in which ``ENVTOOL_DEFAULT_CHANNELS`` (like conda's
``default_channels`` setting) points ``defaults`` at two local ``file://`` channels — had
py-rattler been handed the name ``defaults`` it would have looked for a channel of that name on
anaconda.org and found neither package.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envtool.engines.rattler_api import solve_records
from envtool.spec import channels
from helpers.speed import scaled

REPO = Path(__file__).resolve().parent.parent
MAIN, R = "https://repo.anaconda.com/pkgs/main", "https://repo.anaconda.com/pkgs/r"


def run_envtool(*args, env=None):
    full = {k: v for k, v in os.environ.items() if not k.startswith("ENVTOOL_")}
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "envtool", *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, env=full, timeout=scaled(300))


def test_expand_maps_defaults_to_conda_default_channels(monkeypatch):
    monkeypatch.delenv(channels.ENV_VAR, raising=False)
    assert channels.DEFAULT_CHANNELS == (MAIN, R)
    assert channels.expand(["https://ftp.osuosl.org/pub/open-ce/1.7.0/", "defaults"]) == [
        "https://ftp.osuosl.org/pub/open-ce/1.7.0/", MAIN, R]
    assert channels.expand(["conda-forge"]) == ["conda-forge"]
    assert channels.expand(["defaults", MAIN]) == [MAIN, R]  # no duplicates, order kept
    monkeypatch.setenv(channels.ENV_VAR, "file:///a, file:///b")
    assert channels.expand(["x", "defaults"]) == ["x", "file:///a", "file:///b"]
    monkeypatch.setenv(channels.ENV_VAR, "  ")
    assert channels.expand(["defaults"]) == [MAIN, R]


def test_plan_and_show_name_the_urls_not_the_word():
    proc = run_envtool("plan", "open-ce-1.7")
    assert proc.returncode == 0, proc.stderr
    solve = next(line for line in proc.stdout.splitlines() if "py-rattler solve" in line)
    assert f"https://ftp.osuosl.org/pub/open-ce/1.7.0/ {MAIN} {R} for linux-64" in solve
    assert " defaults " not in solve

    proc = run_envtool("show", "open-ce-1.7", "--json")
    d = json.loads(proc.stdout)
    assert d["channels"][-1] == "defaults" and d["channel_urls"][-2:] == [MAIN, R]
    proc = run_envtool("show", "open-ce-1.7")
    assert f"defaults = {MAIN} + {R}, as conda means it" in proc.stdout


@pytest.fixture(scope="module")
def two_channels(tmp_path_factory):
    from helpers.conda_channel import PackageDef, build_channel

    root = tmp_path_factory.mktemp("defaults")
    main = build_channel(root / "main", [PackageDef("alpha", "1.0", files={"share/alpha.txt": "a\n"})],
                         platforms=("linux-64",))
    r = build_channel(root / "r", [PackageDef("beta", "2.0", noarch="generic", files={"share/beta.txt": "b\n"})],
                      platforms=("linux-64",))
    return root, main, r


def test_py_rattler_is_handed_the_expanded_channels(two_channels, monkeypatch):
    _, main, r = two_channels
    monkeypatch.setenv(channels.ENV_VAR, f"{main} {r}")
    recs = solve_records(["defaults"], ["alpha", "beta"], "linux-64")
    urls = {rec.name.normalized: str(rec.url) for rec in recs}
    assert set(urls) == {"alpha", "beta"}
    assert urls["alpha"].startswith(main.rstrip("/") + "/linux-64/")
    assert urls["beta"].startswith(r.rstrip("/") + "/noarch/")


def test_lock_of_a_spec_with_defaults_solves_from_what_defaults_means(two_channels):
    root, main, r = two_channels
    specs = root / "specs"
    specs.mkdir(exist_ok=True)
    (specs / "usesdefaults.yaml").write_text("""name: usesdefaults
summary: a conda spec whose only channel is defaults
platforms: [linux-64]
engine: conda
channels: [defaults]
packages:
  conda:
    - {spec: "alpha 1.0"}
    - {spec: "beta"}
horovod: {install: none}
""")
    out = root / "usesdefaults.conda-lock.yml"
    env = {"ENVTOOL_SPEC_PATH": str(specs), channels.ENV_VAR: f"{main},{r}"}
    proc = run_envtool("lock", "usesdefaults", "--platform", "linux-64", "-o", out, env=env)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert f"{main.rstrip('/')}/linux-64/alpha-1.0-" in text and f"{r.rstrip('/')}/noarch/beta-2.0-" in text
