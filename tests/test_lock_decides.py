"""The lock decides (issue 10): ``create`` installs the spec's lock when there is one, locks travel
between machines whose pip is configured differently, locked means locked, stale and foreign locks
are clear exit-2 errors.

Everything is real: wheels built here, pip configured through a ``PIP_CONFIG_FILE`` per "machine"
(each a wheelhouse of its own, no index), real venvs, real ``pip install --require-hashes``.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import run_envtool
from envtool.lock import lockio
from helpers.wheels import make_wheel
from helpers.speed import scaled

PKG, DEP = "envtool-locktest-pkg", "envtool-locktest-dep"
#: the public index the spec names for PKG (nothing answers there: each machine has a copy)
INDEX = "https://wheels.example.org/locktest"


def _wheels(dest: Path, version: str, marker: str = "", dep: bool = True) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    make_wheel(dest, PKG, version, {"envtool_locktest_pkg.py": f"VERSION = {version!r}{marker}\n"},
               requires=[f"{DEP}>=1"])
    if dep:
        make_wheel(dest, DEP, "1.0", {"envtool_locktest_dep.py": "X = 1\n"})


def _machine(root: Path, name: str, wheelhouse: Path) -> dict:
    """The environment of a "machine" whose pip finds packages only in ``wheelhouse`` (its own config file)."""
    conf = root / f"pip-{name}.conf"
    conf.write_text(f"[global]\nno-index = true\nfind-links = {wheelhouse}\n")
    # the wheelhouse is this machine's copy of the spec's (imaginary) public index
    return {"PIP_CONFIG_FILE": str(conf), "PIP_FIND_LINKS": str(wheelhouse), "PIP_NO_INDEX": "1",
            "PIP_EXTRA_INDEX_URL": "", "PIP_INDEX_URL": "", "ENVTOOL_INDEX_MIRRORS": f"{INDEX}=file://{wheelhouse}"}


def _spec(specs: Path, name: str, layered: bool = False, extra: str = "") -> None:
    specs.mkdir(exist_ok=True)
    (specs / f"{name}.yaml").write_text(textwrap.dedent(f"""\
        name: {name}
        summary: a small venv for the lock tests
        sources: {{t: "written for the tests"}}
        engine: venv
        venv: {{system_site_packages: {'true' if layered else 'false'}}}
        packages:
          pip:
            - {{spec: "{PKG}", index: "{INDEX}", mark: I, source: t}}
        """) + extra + "horovod: {install: none}\nexpect: {check_build: null}\n")


def _installed(prefix: Path) -> dict:
    out = subprocess.run([str(prefix / "bin" / "python"), "-c",
                          "import json, importlib.metadata as m; print(json.dumps({d.metadata['Name']: d.version "
                          "for d in m.distributions(path=[p for p in __import__('sys').path if p.startswith("
                          f"{str(prefix)!r})])}}))"], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("lockdecides")
    house_a, house_b = root / "machine-a" / "wheels", root / "machine-b" / "wheelhouse"
    _wheels(house_a, "1.0")
    specs = root / "specs"
    _spec(specs, "locktest")
    env_a = dict(_machine(root, "a", house_a), ENVTOOL_SPEC_PATH=str(specs))
    lock = specs / "locktest.conda-lock.yml"
    proc = run_envtool("lock", "locktest", "-o", lock, env=env_a, timeout=scaled(600))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # after the lock was written, the index moved on: machine A's wheelhouse has 1.1 too
    _wheels(house_a, "1.1", dep=False)
    house_b.mkdir(parents=True)
    for whl in house_a.glob("*.whl"):
        shutil.copy(whl, house_b)
    env_b = dict(_machine(root, "b", house_b), ENVTOOL_SPEC_PATH=str(specs))
    return {"root": root, "specs": specs, "lock": lock, "env_a": env_a, "env_b": env_b, "house_a": house_a}


def test_a_lock_records_no_local_url_and_the_interpreter(world):
    text = world["lock"].read_text()
    assert "file://" not in text and str(world["house_a"]) not in text and str(world["root"]) not in text
    lock = lockio.read_lock(world["lock"])
    by_name = {p.key[1]: p for p in lock.packages}
    assert by_name[PKG].version == "1.0" and by_name[DEP].version == "1.0"
    # found in this machine's copy of the spec's index: recorded at the public index, with the
    # hash of the very file pip saw; its dependency too (it came from the same copy)
    assert by_name[PKG].url == f"{INDEX}/envtool_locktest_pkg-1.0-py3-none-any.whl"
    assert by_name[DEP].url == f"{INDEX}/envtool_locktest_dep-1.0-py3-none-any.whl"
    import hashlib

    name = by_name[PKG].url.rsplit("/", 1)[-1]
    assert by_name[PKG].sha256 == hashlib.sha256((world["house_a"] / name).read_bytes()).hexdigest()
    assert dict(lock.pip_indexes) == {PKG: INDEX}
    assert lock.interpreter is not None and lock.interpreter.major_minor == "%d.%d" % sys.version_info[:2]
    assert dict(lock.spec_fields).keys() >= {"pip", "engine", "horovod"}


def test_plan_says_the_lock_decides_and_resolve_says_otherwise(world):
    proc = run_envtool("plan", "locktest", "--json", env=world["env_a"])
    plan = json.loads(proc.stdout)
    assert plan["lock"]["file"] == str(world["lock"]) and "exactly as locked" in plan["lock"]["reason"]
    assert [s["id"] for s in plan["steps"]][:2] == ["create-venv", "install-locked-pip"]
    plan = json.loads(run_envtool("plan", "locktest", "--json", "--resolve", env=world["env_a"]).stdout)
    assert plan["lock"]["file"] is None and "--resolve" in plan["lock"]["reason"]
    assert "pip-install" in [s["id"] for s in plan["steps"]]
    assert "packages: packages installed exactly as locked" in run_envtool("plan", "locktest", env=world["env_a"]).stdout


def test_create_installs_the_lock_not_the_newest(world, tmp_path):
    prefix = tmp_path / "a"
    proc = run_envtool("create", "locktest", "--prefix", prefix, "--json", env=world["env_a"], timeout=scaled(600))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    assert result["results"]["verify-lock"]["ok"] is True
    assert _installed(prefix)[PKG] == "1.0"
    # --resolve solves afresh and gets what the index serves now
    again = tmp_path / "r"
    proc = run_envtool("create", "locktest", "--prefix", again, "--resolve", env=world["env_a"], timeout=scaled(600))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _installed(again)[PKG] == "1.1"


def test_the_lock_travels_to_a_machine_configured_differently(world, tmp_path):
    prefix = tmp_path / "b"
    proc = run_envtool("create", "locktest", "--prefix", prefix, env=world["env_b"], timeout=scaled(600))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _installed(prefix)[PKG] == "1.0"
    own = lockio.read_lock(prefix / "conda-lock.yml")
    assert "file://" not in (prefix / "conda-lock.yml").read_text()
    assert {(p.key[1], p.version, p.sha256) for p in own.packages if p.key[1] in (PKG, DEP)} == \
        {(p.key[1], p.version, p.sha256) for p in lockio.read_lock(world["lock"]).packages}


def test_an_archive_with_another_hash_is_refused(world, tmp_path):
    house = tmp_path / "evil"
    _wheels(house, "1.0", marker="  # not the locked file")
    env = dict(world["env_a"], **_machine(tmp_path, "evil", house))
    prefix = tmp_path / "x"
    proc = run_envtool("create", "locktest", "--prefix", prefix, env=env, timeout=scaled(600))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "HASH" in proc.stderr.upper() and not prefix.exists()
    assert "log" in proc.stderr


def test_a_stale_lock_names_the_changed_fields_and_both_ways_on(world, tmp_path):
    specs = tmp_path / "specs"
    shutil.copytree(world["specs"], specs)
    text = (specs / "locktest.yaml").read_text()
    (specs / "locktest.yaml").write_text(text.replace(f'"{PKG}"', f'"{PKG}>=1"'))
    env = dict(world["env_a"], ENVTOOL_SPEC_PATH=str(specs))
    prefix = tmp_path / "never"
    for cmd in ("plan", "create"):
        proc = run_envtool(cmd, "locktest", "--prefix", prefix, env=env, timeout=scaled(600))
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "stale" in proc.stderr and "changed since it was locked: pip" in proc.stderr
        assert "envtool lock locktest" in proc.stderr and "envtool create locktest --resolve" in proc.stderr
        assert "Traceback" not in proc.stderr
    assert not prefix.exists()
    assert run_envtool("plan", "locktest", "--resolve", env=env).returncode == 0


def test_a_lock_for_another_interpreter_is_refused_before_anything(world, tmp_path):
    from dataclasses import replace

    from envtool.core.platforms import Interpreter

    data = lockio.read_lock(world["lock"])
    other = tmp_path / "other.conda-lock.yml"
    lockio.write_lock(replace(data, interpreter=Interpreter("cpython", "3.6.15", data.interpreter.platform)), other)
    prefix = tmp_path / "never"
    proc = run_envtool("create", "locktest", "--lock", other, "--prefix", prefix, env=world["env_a"])
    assert proc.returncode == 2 and "cpython 3.6.15" in proc.stderr, proc.stderr
    assert not prefix.exists()


def test_a_lock_cut_at_a_package_boundary_is_refused(world, tmp_path):
    text = world["lock"].read_text()
    cut = tmp_path / "cut.conda-lock.yml"
    cut.write_text(text[: text.rindex("\n- name:") + 1])  # still valid YAML, one entry fewer
    import yaml

    assert len(yaml.safe_load(cut.read_text())["package"]) == len(yaml.safe_load(text)["package"]) - 1
    prefix = tmp_path / "never"
    proc = run_envtool("create", "locktest", "--lock", cut, "--prefix", prefix, env=world["env_a"])
    assert proc.returncode == 2 and "incomplete" in proc.stderr and "cut.conda-lock.yml" in proc.stderr, proc.stderr
    assert not prefix.exists()
    proc = run_envtool("diff", "--prefix", prefix, "--lock", cut)
    assert proc.returncode == 2 and "incomplete" in proc.stderr


@pytest.mark.parametrize("edit, words", [
    (lambda t: t.replace("manager: pip", "manager: npm", 1), "manager"),
    (lambda t: t + t[t.index("- name:"):].replace("version: ", "version: 9", 1), "twice"),
    (lambda t: t.replace("sha256: ", "sha256: 0", 1), "sha256"),
])
def test_malformed_entries_are_exit_2_naming_the_entry(world, tmp_path, edit, words):
    bad = tmp_path / "bad.conda-lock.yml"
    bad.write_text(edit(world["lock"].read_text()))
    prefix = tmp_path / "never"
    proc = run_envtool("create", "locktest", "--lock", bad, "--prefix", prefix, env=world["env_a"])
    assert proc.returncode == 2, proc.stderr
    assert "bad.conda-lock.yml" in proc.stderr and words in proc.stderr and "Traceback" not in proc.stderr
    assert not prefix.exists()


def test_conda_entries_need_a_channel_subdir_url(tmp_path):
    from envtool.core.errors import UsageError
    from envtool.lock.model import LockData, LockedPackage

    for url in ("file:///etc/passwd", "http://example.invalid/zlib-1.3-h0_0.conda"):
        data = LockData(packages=(LockedPackage(manager="conda", name="zlib", version="1.3", platform="linux-64",
                                                build="h0_0", url=url, md5="0" * 32, sha256="1" * 64),),
                        platforms=("linux-64",))
        path = lockio.write_lock(data, tmp_path / "c.conda-lock.yml")
        with pytest.raises(UsageError, match="package conda zlib 1.3.*url"):
            lockio.read_lock(path)


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_locked_means_locked_over_a_user_site(world, tmp_path):
    """A distribution the user site already has (same version) must not stand in for the locked one:
    the layered venv gets its own hash-checked copy."""
    specs = tmp_path / "specs"
    _spec(specs, "layered", layered=True)
    env = dict(world["env_a"], ENVTOOL_SPEC_PATH=str(specs), PYTHONUSERBASE=str(tmp_path / "userbase"))
    lock = specs / "layered.conda-lock.yml"
    assert run_envtool("lock", "layered", "-o", lock, env=env, timeout=scaled(600)).returncode == 0
    version = next(p.version for p in lockio.read_lock(lock).packages if p.key[1] == PKG)
    user = subprocess.run([sys.executable, "-m", "pip", "install", "--user", "--no-deps", "--quiet",
                           "--disable-pip-version-check", f"{PKG}=={version}"],
                          capture_output=True, text=True, env=dict(__import__("os").environ, **env))
    assert user.returncode == 0, user.stdout + user.stderr
    prefix = tmp_path / "layered"
    proc = run_envtool("create", "layered", "--prefix", prefix, env=env, timeout=scaled(600))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    own = list((prefix / "lib").glob(f"python*/site-packages/envtool_locktest_pkg-{version}.dist-info"))
    assert own, "the locked distribution was not installed into the venv itself"


def test_locked_means_locked_over_a_pythonpath_entry(world, tmp_path):
    """Site modules often put packages on PYTHONPATH: a locked distribution found there (same version)
    must still be installed into the environment itself, from its hash-checked archive."""
    site = tmp_path / "site-module-packages"
    env = dict(world["env_a"])
    user = subprocess.run([sys.executable, "-m", "pip", "install", "--target", str(site), "--no-deps", "--quiet",
                           "--disable-pip-version-check", f"{PKG}==1.0", f"{DEP}==1.0"],
                          capture_output=True, text=True, env=dict(__import__("os").environ, **env))
    assert user.returncode == 0, user.stdout + user.stderr
    prefix = tmp_path / "p"
    proc = run_envtool("create", "locktest", "--prefix", prefix, env=dict(env, PYTHONPATH=str(site)), timeout=scaled(600))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("envtool_locktest_pkg", "envtool_locktest_dep"):
        assert list((prefix / "lib").glob(f"python*/site-packages/{name}-1.0.dist-info")), name


def test_a_spec_without_packages_locks_as_none_and_creates_from_it(tmp_path):
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "bare.yaml").write_text('name: bare\nsummary: a venv with nothing added\nsources: {t: "the tests"}\n'
                                     "engine: venv\nhorovod: {install: none}\nexpect: {check_build: null}\n")
    env = {"ENVTOOL_SPEC_PATH": str(specs)}
    lock = tmp_path / "bare.conda-lock.yml"
    proc = run_envtool("lock", "bare", "-o", lock, env=env, timeout=scaled(600))
    assert proc.returncode == 0, proc.stderr  # was exit 1: pip asked to resolve nothing
    assert lockio.read_lock(lock).packages == ()
    proc = run_envtool("create", "bare", "--lock", lock, "--prefix", tmp_path / "env", env=env, timeout=scaled(600))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "env" / "bin" / "python").exists()
