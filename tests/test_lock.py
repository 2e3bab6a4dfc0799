"""Lockfiles: conda-lock format written through conda-lock's models, pip resolved by pip,
snapshots, drift (``envtool diff``), stale locks (``envtool lock --check``), ``create --from-lock``.

Real parts only: pip resolves against the configured indexes (PyPI), ``conda-lock render`` is
conda-lock's own CLI, venvs are real, conda packages come from a real local ``file://`` channel
solved and installed with py-rattler.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from conftest import REPO, run_envtool
from envtool.lock import lockio
from envtool.lock.model import BUILT_CATEGORY, LockData, LockedPackage
from helpers.speed import scaled

COMMITTED = REPO / "lockfiles" / "cpu-horovod.conda-lock.yml"
CONDA_LOCK = shutil.which("conda-lock") or str(Path(sys.executable).parent / "conda-lock")


def render_explicit(lock: Path, platform: str, workdir: Path, extras=()) -> list:
    """Run the real ``conda-lock render --kind explicit`` and return the rendered lines."""
    argv = [CONDA_LOCK, "render", "--kind", "explicit", "-p", platform, *sum((["-e", e] for e in extras), []),
            str(lock)]
    proc = subprocess.run(argv, cwd=workdir, capture_output=True, text=True, timeout=scaled(120))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return (workdir / f"conda-{platform}.lock").read_text().splitlines()


def rendered_urls(lines) -> set:
    """URLs of an explicit file: ``URL#md5`` lines and ``# pip name @ URL#sha256=…`` lines, without fragments."""
    urls = set()
    for line in lines:
        if line.startswith("# pip "):
            urls.add(line.split(" @ ", 1)[1].split("#", 1)[0])
        elif line and not line.startswith(("#", "@")):
            urls.add(line.split("#", 1)[0])
    return urls


def file_sha256(url: str) -> str:
    path = unquote(urlsplit(url).path)
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def make_venv(path: Path, *packages: str) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=scaled(300))
    if packages:
        pip_install(path, *packages)
    return path


def pip_install(prefix: Path, *packages: str) -> None:
    proc = subprocess.run([str(prefix / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check",
                           "--quiet", *packages], capture_output=True, text=True, timeout=scaled(600))
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --- conda-lock model I/O and conda-lock's own renderer ------------------------------------

def test_committed_lock_reads_back_through_conda_lock_models():
    lock = lockio.read_lock(COMMITTED)
    assert lock.spec == "cpu-horovod" and lock.kind == "solve" and lock.platforms == ("linux-64",)
    names = {p.key[1]: p for p in lock.packages}
    assert names["torch"].version.startswith("2.13.0")
    assert names["horovod"].built == "horovod==0.28.1" and names["horovod"].version == "0.28.1"
    assert all(len(p.sha256) == 64 for p in lock.packages), [p.name for p in lock.packages if len(p.sha256) != 64]
    assert "version: 1\n" in COMMITTED.read_text()


def test_conda_lock_render_accepts_our_lock_and_lists_the_same_urls(tmp_path):
    lock = lockio.read_lock(COMMITTED)
    lines = render_explicit(COMMITTED, "linux-64", tmp_path)
    assert "@EXPLICIT" in lines
    main = {p.url for p in lock.packages if not p.built}
    assert rendered_urls(lines) == main
    # the built Horovod is an optional category: listed only when asked for
    lines = render_explicit(COMMITTED, "linux-64", tmp_path, extras=(BUILT_CATEGORY,))
    assert rendered_urls(lines) == {p.url for p in lock.packages}
    # hashes survive the trip: every pip line carries the lock's sha256
    by_url = {p.url: p.sha256 for p in lock.packages}
    for line in lines:
        if line.startswith("# pip "):
            url, _, frag = line.split(" @ ", 1)[1].partition("#sha256=")
            assert by_url[url] == frag


def test_write_then_read_is_lossless(tmp_path):
    pkgs = (
        LockedPackage(manager="conda", name="zlib", version="1.3", platform="linux-64", build="h0_0",
                      url="file:///c/linux-64/zlib-1.3-h0_0.conda", md5="0" * 32, sha256="1" * 64),
        LockedPackage(manager="pip", name="six", version="1.17.0", platform="linux-64",
                      url="https://files.example/six-1.17.0-py2.py3-none-any.whl", sha256="2" * 64),
        LockedPackage(manager="pip", name="horovod", version="0.28.1", platform="linux-64",
                      url="file:///cache/horovod-wheels/527641885db8b242938d/horovod.whl", sha256="3" * 64,
                      built="527641885db8b242938d"),
    )
    data = LockData(packages=pkgs, platforms=("linux-64",), channels=("file:///c",),
                    content_hash=(("linux-64", "abc"),), spec="s", spec_hash="d" * 64, site="local", kind="snapshot",
                    engine="venv")
    path = lockio.write_lock(data, tmp_path / "x.conda-lock.yml")
    back = lockio.read_lock(path)
    assert {p.key: p for p in back.packages} == {p.key: p for p in pkgs}
    assert (back.spec, back.spec_hash, back.site, back.kind, back.channels) == ("s", "d" * 64, "local", "snapshot",
                                                                                 ("file:///c",))


def test_a_conda_entry_without_md5_is_refused_by_conda_locks_model(tmp_path):
    from envtool.core.errors import UsageError

    bad = LockData(packages=(LockedPackage(manager="conda", name="zlib", version="1", platform="linux-64",
                                           url="file:///c/linux-64/zlib-1-0.conda", sha256="1" * 64),),
                   platforms=("linux-64",))
    with pytest.raises(UsageError, match="MD5"):
        lockio.write_lock(bad, tmp_path / "bad.yml")


def test_bad_lock_file_is_exit_2_naming_the_file(tmp_path):
    bad = tmp_path / "broken.yml"
    bad.write_text("metadata: {}\npackage: []\n")
    proc = run_envtool("diff", "--prefix", tmp_path, "--lock", bad)
    assert proc.returncode == 2, proc.stderr
    assert "broken.yml" in proc.stderr and "version" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_envtool("lock")
    assert proc.returncode == 2 and "SPEC" in proc.stderr


# --- stale locks ---------------------------------------------------------------------------

def test_every_committed_lock_matches_its_spec():
    proc = run_envtool("lock", "--check", "--json")
    report = json.loads(proc.stdout)
    assert proc.returncode == 0, report
    assert "cpu-horovod" in {r["spec"] for r in report["results"]}


def test_lock_check_fails_naming_a_changed_spec(tmp_path):
    specs, locks = tmp_path / "specs", tmp_path / "locks"
    specs.mkdir()
    locks.mkdir()
    text = (REPO / "specs" / "cpu-horovod.yaml").read_text()
    (specs / "cpu-horovod.yaml").write_text(text)
    shutil.copy(COMMITTED, locks / "cpu-horovod.conda-lock.yml")
    env = {"ENVTOOL_SPEC_PATH": str(specs)}
    proc = run_envtool("lock", "--check", "cpu-horovod", "--lock-dir", locks, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # a comment or a note does not make a lock stale; a pin does
    (specs / "cpu-horovod.yaml").write_text("# edited\n" + text.replace('note: "CPU wheel"', 'note: "x"'))
    assert run_envtool("lock", "--check", "cpu-horovod", "--lock-dir", locks, env=env).returncode == 0
    (specs / "cpu-horovod.yaml").write_text(text.replace("torch==2.13.0", "torch==2.12.0"))
    proc = run_envtool("lock", "--check", "cpu-horovod", "--lock-dir", locks, env=env)
    assert proc.returncode == 1
    assert "cpu-horovod" in proc.stdout and "stale" in proc.stdout
    # and create --from-lock refuses the stale lock (exit 2) before doing anything
    proc = run_envtool("create", "cpu-horovod", "--from-lock", locks / "cpu-horovod.conda-lock.yml",
                       "--prefix", tmp_path / "never", env=env)
    assert proc.returncode == 2 and "stale" in proc.stderr
    assert not (tmp_path / "never").exists()


# --- pip resolved by pip, with hashes ------------------------------------------------------

# `envtool lock cpu-horovod` (pip resolved by pip, with hashes and public URLs) runs in
# tests/test_user_install.py, as a user without our machines' pip configuration


def test_pip_part_for_another_platform_takes_that_platforms_wheels():
    from envtool.lock import pip_resolve

    target = pip_resolve.PipTarget(platform="linux-ppc64le", python_version="3.11")
    pkgs = {p.key[1]: p for p in pip_resolve.resolve(["cffi"], "linux-ppc64le", target=target)}
    assert set(pkgs) == {"cffi", "pycparser"}  # cffi's Requires-Dist, resolved by pip
    assert "ppc64le" in pkgs["cffi"].url and "cp311" in pkgs["cffi"].url
    assert all(p.platform == "linux-ppc64le" and len(p.sha256) == 64 for p in pkgs.values())


# --- snapshots and drift -------------------------------------------------------------------

@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_snapshot_then_drift_in_a_real_venv(tmp_path):
    venv = make_venv(tmp_path / "v", "six==1.17.0", "colorama==0.4.6")
    lock = tmp_path / "v.conda-lock.yml"
    proc = run_envtool("lock", "--prefix", venv, "-o", lock)
    assert proc.returncode == 0, proc.stderr
    data = lockio.read_lock(lock)
    assert data.kind == "snapshot"
    got = {(p.key[1], p.version) for p in data.packages if p.key[1] != "setuptools"}  # seeded by venv < 3.12
    assert got == {("six", "1.17.0"), ("colorama", "0.4.6")}
    for p in data.packages:
        if p.url.startswith("file://"):
            assert file_sha256(p.url) == p.sha256
    assert run_envtool("diff", "--prefix", venv, "--lock", lock).returncode == 0

    pip_install(venv, "iniconfig==2.3.0")
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "uninstall", "-y", "--quiet", "colorama"], check=True)
    proc = run_envtool("diff", "--prefix", venv, "--lock", lock, "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert [a["name"] for a in report["added"]] == ["iniconfig"]
    assert [r["name"] for r in report["removed"]] == ["colorama"]
    proc = run_envtool("diff", "--prefix", venv, "--lock", lock)
    assert proc.returncode == 1 and "+ pip iniconfig 2.3.0" in proc.stdout and "- pip colorama" in proc.stdout


# --- conda packages: a real local channel, py-rattler solves and installs ---------------------

@pytest.fixture(scope="module")
def conda_spec(tmp_path_factory):
    """A conda spec solved from a real local ``file://`` channel with linux-64 and linux-ppc64le packages."""
    from helpers.conda_channel import PackageDef, build_channel, python_package

    root = tmp_path_factory.mktemp("lockchan")
    url = build_channel(root / "channel", [
        PackageDef("libfoo", "1.0", files={"lib/libfoo.txt": "libfoo 1.0\n"}),
        PackageDef("libfoo", "1.1", files={"lib/libfoo.txt": "libfoo 1.1\n"}),
        PackageDef("foo", "2.1", depends=("libfoo >=1.0",), files={"bin/foo": "#!/bin/sh\necho foo\n"}),
        PackageDef("bar", "0.5", noarch="generic", files={"share/bar/bar.txt": "bar\n"}),
        PackageDef("baz", "1.0", files={"share/baz.txt": "baz\n"}),
        python_package(),
        PackageDef("purelib", "1.0", noarch="python", depends=("python",),
                   files={"site-packages/purelib/__init__.py": "X = 1\n",
                          "site-packages/purelib-1.0.dist-info/METADATA":
                              "Metadata-Version: 2.1\nName: purelib\nVersion: 1.0\n",
                          "site-packages/purelib-1.0.dist-info/RECORD": ""}),
    ], platforms=("linux-64", "linux-ppc64le"))
    specs = root / "specs"
    specs.mkdir()
    (specs / "lockme.yaml").write_text(f"""name: lockme
summary: conda packages from the tests' local channel
platforms: [linux-64, linux-ppc64le]
engine: conda
channels: ["{url}"]
packages:
  conda:
    - {{spec: "foo 2.*"}}
    - {{spec: "bar"}}
horovod: {{install: none}}
""")
    return {"root": root, "channel": url, "env": {"ENVTOOL_SPEC_PATH": str(specs)}}


@pytest.fixture(scope="module")
def conda_lock(conda_spec):
    out = conda_spec["root"] / "lockme.conda-lock.yml"
    proc = run_envtool("lock", "lockme", "--platform", "linux-64", "--platform", "linux-ppc64le", "-o", out,
                       "--json", env=conda_spec["env"])
    assert proc.returncode == 0, proc.stderr
    return out


def test_lock_conda_spec_for_two_platforms(conda_spec, conda_lock):
    lock = lockio.read_lock(conda_lock)
    assert lock.platforms == ("linux-64", "linux-ppc64le") and lock.channels == (conda_spec["channel"],)
    for platform in lock.platforms:
        entries = {p.name: p for p in lock.for_platform(platform)}
        assert set(entries) == {"foo", "libfoo", "bar"}  # the solve pulled libfoo in
        assert entries["libfoo"].version == "1.1"  # the newest that satisfies foo's ``libfoo >=1.0``
        assert f"/{platform}/foo-2.1-" in entries["foo"].url and "/noarch/bar-0.5-" in entries["bar"].url
        for p in entries.values():  # the lock's hashes are the archives' own
            archive = Path(unquote(urlsplit(p.url).path)).read_bytes()
            assert hashlib.md5(archive).hexdigest() == p.md5 and hashlib.sha256(archive).hexdigest() == p.sha256
    assert dict(lock.content_hash)["linux-64"] != dict(lock.content_hash)["linux-ppc64le"]


def test_conda_lock_render_round_trip_for_both_platforms(conda_lock, tmp_path):
    lock = lockio.read_lock(conda_lock)
    for platform in lock.platforms:
        lines = render_explicit(conda_lock, platform, tmp_path)
        assert rendered_urls(lines) == {p.url for p in lock.for_platform(platform)}
        assert {l.split("#")[1] for l in lines if l.startswith("file://")} == {p.md5 for p in lock.for_platform(platform)}


def test_create_from_conda_lock_then_drift(conda_spec, conda_lock, tmp_path):
    prefix = tmp_path / "env"
    proc = run_envtool("create", "lockme", "--from-lock", conda_lock, "--prefix", prefix, env=conda_spec["env"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    from envtool.lock import snapshot

    locked = {(p.name, p.version, p.build, p.url) for p in lockio.read_lock(conda_lock).for_platform("linux-64")}
    installed = {(p.name, p.version, p.build, p.url) for p in snapshot.snapshot(prefix, "linux-64", lookup=False)}
    assert installed == locked
    assert (prefix / "bin" / "foo").is_file() and (prefix / "share" / "bar" / "bar.txt").is_file()
    assert run_envtool("diff", "--prefix", prefix, "--lock", conda_lock).returncode == 0
    own = lockio.read_lock(prefix / "conda-lock.yml")  # the env's own lock, written by create
    assert {(p.name, p.url) for p in own.packages} == {(n, u) for n, _, _, u in locked}

    # drift: one more conda package installed with py-rattler
    from envtool.engines.rattler_api import install_records, solve_records

    records = solve_records([conda_spec["channel"]], ["foo 2.*", "bar", "baz"], "linux-64")
    install_records(records, prefix, tmp_path / "pkgs")
    proc = run_envtool("diff", "--prefix", prefix, "--lock", conda_lock, "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert [(a["manager"], a["name"]) for a in report["added"]] == [("conda", "baz")]
    assert report["removed"] == [] and report["changed"] == []


def test_snapshot_of_a_conda_env_lists_pip_installs_but_not_conda_python_packages(conda_spec, tmp_path):
    from envtool.engines.rattler_api import install_records, solve_records
    from envtool.lock import snapshot

    prefix = tmp_path / "cenv"
    records = solve_records([conda_spec["channel"]], ["purelib"], "linux-64")
    install_records(records, prefix, tmp_path / "pkgs")
    site = next(prefix.glob("lib/python*/site-packages"))
    assert (site / "purelib-1.0.dist-info" / "METADATA").is_file()  # a conda-owned Python distribution
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(prefix / "bin" / "python"), "install",
                           "--quiet", "--disable-pip-version-check", "six==1.17.0"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = {(p.manager, p.key[1]) for p in snapshot.snapshot(prefix, "linux-64", lookup=False)}
    assert got == {("conda", "python"), ("conda", "purelib"), ("pip", "six")}


def test_create_from_a_tampered_lock_fails_and_leaves_nothing(conda_spec, conda_lock, tmp_path):
    lock = lockio.read_lock(conda_lock)
    foo = next(p for p in lock.for_platform("linux-64") if p.name == "foo")
    bad = tmp_path / "tampered.conda-lock.yml"
    # a lock whose hash differs from the channel's archive (written through the lock writer, so its
    # own completeness stamp is consistent: the channel's hash check is what must catch it)
    from dataclasses import replace

    lockio.write_lock(replace(lock, packages=tuple(replace(p, sha256="f" * 64) if p == foo else p
                                                   for p in lock.packages)), bad)
    prefix = tmp_path / "env"
    proc = run_envtool("create", "lockme", "--from-lock", bad, "--prefix", prefix, env=conda_spec["env"])
    assert proc.returncode == 1
    assert "foo" in proc.stderr and "hash" in proc.stderr
    assert not prefix.exists()


# --- create --from-lock (slow: a real cpu-horovod env, Horovod from the wheel cache) ------

@pytest.mark.slow
def test_create_from_committed_lock_reproduces_the_pip_set(tmp_path, cpu_horovod_env):
    # cpu_horovod_env is `envtool create cpu-horovod`, which installs the committed lock (the main
    # job; tests/test_user_install.py does it again as a user without our pip configuration)
    prefix = cpu_horovod_env
    locked = {(p.key[1], p.version) for p in lockio.read_lock(COMMITTED).packages}
    from envtool.lock import snapshot

    installed = {(p.key[1], p.version) for p in snapshot.snapshot(prefix, "linux-64", lookup=False)}
    assert installed == locked
    # the env's own lock: a snapshot that names the built Horovod by its wheel-cache key
    own = lockio.read_lock(prefix / "conda-lock.yml")
    (key,) = own.built().values()
    assert set(own.built()) == {"horovod"} and own.spec_hash == lockio.read_lock(COMMITTED).spec_hash
    assert dict(own.pip_indexes) == dict(lockio.read_lock(COMMITTED).pip_indexes)
    assert run_envtool("diff", "--prefix", prefix, "--lock", COMMITTED).returncode == 0
    assert run_envtool("diff", "--prefix", prefix).returncode == 0
    # a snapshot lock names Horovod by its build key: create --from-lock rebuilds (here: reuses) it
    # with the build step instead of pip-installing a wheel that no index has
    again = tmp_path / "from-snapshot"
    proc = run_envtool("create", "cpu-horovod", "--from-lock", prefix / "conda-lock.yml", "--prefix", again, "--json",
                       timeout=3600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["results"]["build-horovod"]["cache_key"] == key
    assert result["results"]["verify-lock"]["ok"] is True
    assert "horovod" not in (again / ".envtool" / "locked-requirements.txt").read_text()
    assert run_envtool("diff", "--prefix", again, "--lock", prefix / "conda-lock.yml").returncode == 0

    # drift: one more package in the created env
    pip_install(again, "six==1.17.0")
    proc = run_envtool("diff", "--prefix", again, "--json")
    assert proc.returncode == 1
    assert [a["name"] for a in json.loads(proc.stdout)["added"]] == ["six"]


def test_committed_locks_travel():
    """No committed lock names a file on the machine that wrote it, each records its interpreter
    (venv locks) and its completeness stamp, and reads back whole."""
    from envtool.lock.check import committed_locks
    from envtool.lock.portable import is_local

    locks = committed_locks([REPO / "lockfiles"])
    assert locks
    for name, path in locks.items():
        data = lockio.read_lock(path)  # completeness stamp checked here
        assert "envtool.packages:" in path.read_text(), name
        assert not [p.url for p in data.packages if is_local(p.url)], name
        if data.engine == "venv":
            assert data.interpreter is not None, name
        assert dict(data.spec_fields), name


_READ_TWICE = """
import json, sys
from pathlib import Path
from envtool.lock import lockio, memo
lock = lockio.read_lock(Path(sys.argv[1]))
print(json.dumps({"conda_lock": "conda_lock" in sys.modules, "lock": memo.to_json(lock)}))
"""

