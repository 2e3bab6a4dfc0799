"""Every cached artifact proves itself before use (issue 23, "Prove every cached artifact").

Real files, real modes, a real second user (``envtool-user``, in group ``envtool-pub``) writing
into caches, real ``pip install`` into a real venv and real imports: a wheel planted in a site
wheel cache, a site cache others can write, a ``.pyc`` planted in the bytecode store, cache
directories under ``umask 002``, and ``envtool diff`` of a prefix whose Horovod wheel is not the
locked one. Tiny wheels (:mod:`helpers.wheels`) stand in for Horovod: the cache logic never looks
inside a wheel.
"""
import grp
import importlib.util
import json
import marshal
import os
import pwd
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import run_envtool
from envtool.core.errors import StepFailed
from envtool.horovod import cache
from helpers.conda_channel import build_channel, python_package
from helpers.wheels import make_wheel
from helpers.speed import scaled

USER = "envtool-user"
GROUP = "envtool-pub"


@pytest.fixture
def shared_tmp():
    """A temporary directory the second user can reach (pytest's own base is root's, mode 0700)."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="envtool-trust-", dir="/tmp"))
    os.chmod(d, 0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _need_user():
    try:
        return pwd.getpwnam(USER).pw_uid, grp.getgrnam(GROUP).gr_gid
    except KeyError:
        pytest.skip(f"test user {USER} / group {GROUP} missing (bash scripts/setup.sh --test)")


def as_user(script: str) -> subprocess.CompletedProcess:
    """``script`` in bash as the second user (runuser)."""
    return subprocess.run(["runuser", "-u", USER, "--", "bash", "-c", script], capture_output=True, text=True,
                          timeout=scaled(120))


def _key(**kw) -> cache.BuildKey:
    fields = dict(requirement="horovod==0.28.1", build_env=(("HOROVOD_WITH_PYTORCH", "1"),),
                  frameworks=(("torch", "2.13.0+cpu"),), python_tag="cp311", compiler="c++ (GCC) 12.2.0",
                  platform="linux-64", mpi="not used", fixes=())
    fields.update(kw)
    return cache.BuildKey(**fields)


def _wheels(tmp_path: Path, marker: Path):
    """A genuine "horovod" wheel and a planted one of the same file name whose import writes ``marker``."""
    (tmp_path / "genuine").mkdir()
    (tmp_path / "planted").mkdir()
    genuine = make_wheel(tmp_path / "genuine", "horovod", "0.28.1", {"horovod/__init__.py": "GENUINE = True\n"})
    planted = make_wheel(tmp_path / "planted", "horovod", "0.28.1", {
        "horovod/__init__.py": f"open({str(marker)!r}, 'w').write('planted code ran')\nGENUINE = False\n"})
    return genuine, planted


def _published_site(tmp_path: Path, monkeypatch, genuine: Path, key: cache.BuildKey) -> Path:
    """A site cache made the way a site makes one: built into a cache, then ``cache publish``."""
    monkeypatch.setenv("ENVTOOL_CACHE_DIR", str(tmp_path / "publisher"))
    cache.WheelCache().store(key, genuine, log_text="[100%] Built target horovod\n")
    site = tmp_path / "site"
    results = cache.publish(cache.WheelCache().entries(), site)
    assert [r["status"] for r in results] == ["published"]
    monkeypatch.setenv("ENVTOOL_CACHE_DIR", str(tmp_path / "user"))
    return site


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    prefix = tmp_path_factory.mktemp("trust") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(prefix)], check=True, timeout=scaled(300))
    return prefix


def _install_what_the_cache_gives(venv: Path, wheel) -> str:
    """What the build step does with a cache hit: ``pip install`` it; then what validation does:
    import it. Returns the import's output ("" when there was no hit)."""
    if wheel is None:
        return ""
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "--no-deps", "--force-reinstall", str(wheel)], check=True, capture_output=True, timeout=scaled(300))
    return subprocess.run([str(venv / "bin" / "python"), "-c", "import horovod; print(horovod.GENUINE)"],
                          capture_output=True, text=True, cwd="/", timeout=scaled(120)).stdout.strip()


def test_tampered_wheel_in_a_site_cache_is_refused_and_none_of_its_code_runs(tmp_path, monkeypatch, venv):
    marker = tmp_path / "planted-code-ran"
    genuine, planted = _wheels(tmp_path, marker)
    key = _key()
    site = _published_site(tmp_path, monkeypatch, genuine, key)
    monkeypatch.setenv("ENVTOOL_CACHE_PATH", str(site))
    entry = site / "horovod-wheels" / key.digest()
    # the genuine published wheel is found and installs (the path below does run what the cache gives)
    wheel, hit = cache.lookup_chain(cache.chain(), key)
    assert hit is not None and hit.root == site
    assert _install_what_the_cache_gives(venv, wheel) == "True"

    # 1. the wheel replaced beside the copied key.json
    shutil.copyfile(planted, entry / genuine.name)
    wheel, hit = cache.lookup_chain(cache.chain(), key)
    _install_what_the_cache_gives(venv, wheel)
    assert not marker.exists()
    assert (wheel, hit) == (None, None)
    skipped = []
    cache.lookup_chain(cache.chain(), key, skipped=skipped)
    assert [c.root for c, _ in skipped] == [site] and "SHA-256" in skipped[0][1], skipped

    # 2. the genuine wheel back, a planted one beside it that sorts first
    shutil.copyfile(genuine, entry / genuine.name)
    shutil.copyfile(planted, entry / "horovod-0.28.0-py3-none-any.whl")
    wheel, hit = cache.lookup_chain(cache.chain(), key)
    _install_what_the_cache_gives(venv, wheel)
    assert not marker.exists() and wheel is None
    skipped = []
    cache.lookup_chain(cache.chain(), key, skipped=skipped)
    assert "holds horovod-0.28.0-py3-none-any.whl, " in skipped[0][1], skipped

    # 3. an entry made by copying key.json without its wheel record (as an older envtool wrote it)
    (entry / "horovod-0.28.0-py3-none-any.whl").unlink()
    shutil.copyfile(planted, entry / genuine.name)
    (entry / "key.json").write_text(json.dumps(cache.asdict(key)))
    wheel, hit = cache.lookup_chain(cache.chain(), key)
    _install_what_the_cache_gives(venv, wheel)
    assert not marker.exists() and wheel is None
    skipped = []
    cache.lookup_chain(cache.chain(), key, skipped=skipped)
    assert "records no wheel SHA-256" in skipped[0][1], skipped

    # 4. under a lock, only the lock's hash is taken, even from a proven entry
    shutil.rmtree(entry)
    monkeypatch.setenv("ENVTOOL_CACHE_DIR", str(tmp_path / "publisher"))
    assert cache.publish(cache.WheelCache().entries(), site)[0]["status"] == "published"
    monkeypatch.setenv("ENVTOOL_CACHE_DIR", str(tmp_path / "user"))
    assert cache.lookup_chain(cache.chain(), key)[0] == entry / genuine.name
    record = json.loads((entry / "key.json").read_text())["wheel"]
    assert record == {"file": genuine.name, "size": genuine.stat().st_size, "sha256": sha256(genuine)}
    skipped = []
    assert cache.lookup_chain(cache.chain(), key, want_sha256=sha256(planted), skipped=skipped) == (None, None)
    assert "the lock has" in skipped[0][1]


def test_a_site_cache_others_can_write_is_skipped(shared_tmp, monkeypatch):
    uid, gid = _need_user()
    tmp_path = shared_tmp
    genuine, _ = _wheels(tmp_path, tmp_path / "unused")
    key = _key()
    site = _published_site(tmp_path, monkeypatch, genuine, key)
    key_json = tmp_path / "key.json"
    shutil.copyfile(site / "horovod-wheels" / key.digest() / "key.json", key_json)
    for d in (tmp_path / "genuine", key_json, genuine):
        os.chmod(d, 0o755 if d.is_dir() else 0o644)
    wheels = site / "horovod-wheels"
    entry = wheels / key.digest()
    assert cache.WheelCache(site, read_only=True).lookup(key) == entry / genuine.name

    os.chmod(wheels, 0o777)
    assert cache.WheelCache(site, read_only=True).lookup(key) is None
    assert cache.WheelCache(site, read_only=True).find(key) == (None, f"not trusted: {wheels} is world-writable")

    os.chmod(wheels, 0o775)
    os.chown(wheels, -1, gid)
    assert cache.WheelCache(site, read_only=True).lookup(key) is None
    why = cache.WheelCache(site, read_only=True).find(key)[1]
    assert f"{wheels} is writable by group {GROUP}" in why and "build_cache_group" in why
    assert cache.WheelCache(site, read_only=True, group=GROUP).find(key)[0] == entry / genuine.name

    # a member of that group replaces the entry with one of their own: its owner is not the cache's
    shutil.rmtree(entry)
    proc = as_user(f"umask 022; mkdir {entry} && cp {genuine} {key_json} {entry}/")
    assert proc.returncode == 0, proc.stderr
    assert entry.stat().st_uid == uid
    wheel, why = cache.WheelCache(site, read_only=True, group=GROUP).find(key)
    assert wheel is None and why == f"not trusted: {entry} is owned by {USER}, not by the cache's owner root"

    # the site file names the trusted group; a bad name is refused (exit 2)
    site_file = tmp_path / "mysite.yaml"
    site_file.write_text(f"name: mysite\nbuild_caches: [{site}]\nbuild_cache_group: {GROUP}\n")
    proc = run_envtool("plan", "cpu-horovod", "--site-file", site_file, "--prefix", tmp_path / "env",
                       env={"ENVTOOL_CACHE_DIR": str(tmp_path / "user")})
    assert proc.returncode == 0, proc.stderr
    site_file.write_text(f"name: mysite\nbuild_caches: [{site}]\nbuild_cache_group: 'a b;c'\n")
    proc = run_envtool("plan", "cpu-horovod", "--site-file", site_file, "--prefix", tmp_path / "env",
                       env={"ENVTOOL_CACHE_DIR": str(tmp_path / "user")})
    assert proc.returncode == 2 and "build_cache_group" in proc.stderr and "Traceback" not in proc.stderr


def test_cache_publish_records_the_wheel_and_stays_group_readable_not_writable_under_umask_002(tmp_path, monkeypatch):
    genuine, _ = _wheels(tmp_path, tmp_path / "unused")
    key = _key()
    monkeypatch.setenv("ENVTOOL_CACHE_DIR", str(tmp_path / "user"))
    old = os.umask(0o002)
    try:
        stored = cache.WheelCache().store(key, genuine)
    finally:
        os.umask(old)
    for p in (tmp_path / "user", tmp_path / "user" / "horovod-wheels", stored.parent):
        assert stat.S_IMODE(p.stat().st_mode) == 0o700, p
    for p in stored.parent.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    site = tmp_path / "site"
    proc = subprocess.run(["bash", "-c", f"umask 002; exec {sys.executable} -m envtool cache publish --to {site} --json"],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent, timeout=scaled(120))
    assert proc.returncode == 0, proc.stderr
    entry = site / "horovod-wheels" / key.digest()
    for p in (site, site / "horovod-wheels", entry, *entry.iterdir()):
        mode = stat.S_IMODE(p.stat().st_mode)
        assert mode & stat.S_IRGRP and not mode & (stat.S_IWGRP | stat.S_IWOTH), (p, oct(mode))
    assert json.loads((entry / "key.json").read_text())["wheel"]["sha256"] == sha256(genuine)
    assert cache.WheelCache(site, read_only=True).find(key) == (entry / genuine.name, "")


def _planted_pyc(source: Path, code: str) -> bytes:
    """Bytecode of ``code`` with a header valid for ``source`` (its mtime and size, PEP 552), as
    someone planting a ``.pyc`` would write it."""
    st = source.stat()
    header = importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little") + \
        (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    return header + marshal.dumps(compile(code, str(source), "exec"))


def test_a_planted_pyc_in_the_bytecode_store_is_never_linked(shared_tmp):
    """The store of a user whose umask was 002 (group envtool-pub); envtool-user, a member, plants
    bytecode for a source that the next environment shares (as uv hard-links it)."""
    _need_user()
    from envtool.probes import probe_path

    tmp_path = shared_tmp
    marker = tmp_path / "planted-code-ran"
    source = tmp_path / "a.py"
    source.write_text("VALUE = 'genuine'\n")
    libs = []
    for n in (1, 2, 3):
        lib = tmp_path / f"env{n}" / "lib"
        lib.mkdir(parents=True)
        os.link(source, lib / "a.py")
        libs.append(lib)
    store = tmp_path / "cache" / "bytecode"
    store.mkdir(parents=True, mode=0o775)
    os.chmod(store.parent, 0o775)
    os.chmod(store, 0o2775)
    os.chown(store, -1, grp.getgrnam(GROUP).gr_gid)

    def probe(lib):
        return subprocess.run(["bash", "-c", f"umask 002; exec {sys.executable} {probe_path('bytecode')} {lib} {store}"],
                              capture_output=True, text=True, check=True, timeout=scaled(120))

    probe(libs[0])  # a store envtool did not make, that a group can write: neither used nor chmod-ed
    assert stat.S_IMODE(store.stat().st_mode) == 0o2775 and os.listdir(store) == []
    os.chmod(store, 0o700)  # as envtool's cache_dir("bytecode") leaves it before the probe runs
    probe(libs[0])
    tag = sys.implementation.cache_tag
    entries = [p for p in store.iterdir() if p.name.endswith(".pyc")]
    assert len(entries) == 1
    entry = entries[0]
    planted = tmp_path / "planted.pyc"
    planted.write_bytes(_planted_pyc(source, f"open({str(marker)!r}, 'w').write('ran')\nVALUE = 'planted'\n"))
    os.chmod(planted, 0o644)
    # the group member replaces the entry (and its hash sidecar, if any) with their own
    proc = as_user(f"rm -f {entry} {entry}.sha256; cp {planted} {entry}; "
                   f"sha256sum {entry} | cut -d' ' -f1 > {entry}.sha256")
    if proc.returncode != 0:  # the store is private now (0700): the planting is done for them, as root
        entry.unlink()
        Path(f"{entry}.sha256").unlink(missing_ok=True)
        shutil.copyfile(planted, entry)
        Path(f"{entry}.sha256").write_text(sha256(entry) + "\n")
        os.chown(entry, pwd.getpwnam(USER).pw_uid, -1)
        os.chown(f"{entry}.sha256", pwd.getpwnam(USER).pw_uid, -1)
    planted_ino = entry.stat().st_ino

    probe(libs[1])
    pyc = libs[1] / "__pycache__" / f"a.{tag}.pyc"
    assert pyc.stat().st_ino != planted_ino
    out = subprocess.run([sys.executable, "-c", "import a; print(a.VALUE)"], cwd=libs[1], capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == "genuine" and not marker.exists()
    assert stat.S_IMODE(store.stat().st_mode) == 0o700

    # an entry of the user's own without the recorded hash (or with another) is not linked either
    for sidecar in (None, "0" * 64 + "\n"):
        entry.unlink()
        Path(f"{entry}.sha256").unlink(missing_ok=True)
        shutil.copyfile(planted, entry)
        if sidecar:
            Path(f"{entry}.sha256").write_text(sidecar)
        ino = entry.stat().st_ino
        shutil.rmtree(libs[2] / "__pycache__", ignore_errors=True)
        probe(libs[2])
        assert (libs[2] / "__pycache__" / f"a.{tag}.pyc").stat().st_ino != ino
        subprocess.run([sys.executable, "-c", "import a"], cwd=libs[2], check=True)
        assert not marker.exists()
    # while a proven entry is linked (the bytecode cache still works)
    shutil.rmtree(libs[2] / "__pycache__")
    probe(libs[2])
    assert (libs[2] / "__pycache__" / f"a.{tag}.pyc").stat().st_ino == entry.stat().st_ino


def test_envtools_cache_directories_are_private_under_umask_002(tmp_path):
    """A conda create from a local channel under umask 002 makes the cache root, logs/, repodata/
    and pkgs/; each is 0700. A cache root of the user's own that is open to the group is
    tightened; one owned by another user is refused (exit 2)."""
    uid, _ = _need_user()
    channel = build_channel(tmp_path / "channel", [python_package()])
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "tiny.yaml").write_text(textwrap.dedent(f"""\
        name: tiny
        summary: test
        platforms: [linux-64]
        engine: conda
        channels: ["{channel}"]
        packages:
          conda: [python]
        horovod:
          install: none
        """))
    root = tmp_path / "cache"
    repo = Path(__file__).resolve().parent.parent

    def create(prefix):  # with the cache root ``root`` as it is when called
        return subprocess.run(["bash", "-c", f"umask 002; exec {sys.executable} -m envtool create tiny --prefix {prefix}"],
                              capture_output=True, text=True, cwd=repo, timeout=scaled(600),
                              env=dict(os.environ, ENVTOOL_SPEC_PATH=str(specs), ENVTOOL_CACHE_DIR=str(root)))

    proc = create(tmp_path / "env")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for d in (root, root / "logs", root / "repodata", root / "pkgs"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, (d, oct(d.stat().st_mode))

    os.chmod(root, 0o775)
    os.chmod(root / "pkgs", 0o2775)
    proc = create(tmp_path / "env2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert stat.S_IMODE(root.stat().st_mode) == 0o700 and stat.S_IMODE((root / "pkgs").stat().st_mode) == 0o700

    os.chown(root / "logs", uid, -1)
    proc = create(tmp_path / "env3")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{root}/logs: permission denied: envtool's cache directory is owned by another user" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "env3").exists()

    # a shared directory envtool did not make (here like /tmp) is refused, not made private
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "someone-elses-file").write_text("kept\n")
    os.chmod(shared, 0o1777)
    root = shared
    proc = create(tmp_path / "env4")
    assert proc.returncode == 2 and f"{shared}: envtool's cache directory can be written by others" in proc.stderr
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777 and sorted(os.listdir(shared)) == ["someone-elses-file"]


def _verify_lock(prefix: Path, lock: Path, digest: str, cache_hit: bool) -> str:
    """Run ``create --lock``'s ``verify-lock`` step on ``prefix`` after a ``build-horovod`` step that
    reported ``cache_hit``; returns the step's log."""
    from envtool.core.plan import PlanOptions
    from envtool.lock.lockio import read_lock
    from envtool.lock.model import pick_platform
    from envtool.steps.create import from_lock
    from envtool.steps.kernel.runner import Runner

    data = read_lock(lock)
    loaded = from_lock.LoadedLock(lock, data, pick_platform(data, None, str(lock)), ())
    (step,) = from_lock.verify_steps(PlanOptions(prefix=prefix), loaded)
    log = prefix.parent / f"verify-{cache_hit}.log"
    log.unlink(missing_ok=True)
    with Runner(log_path=log, quiet=True) as runner:
        runner.results["build-horovod"] = {"cache_key": digest, "cache_hit": cache_hit}
        step.action(step, runner)
    return log.read_text()


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_diff_reports_a_horovod_wheel_that_is_not_the_locked_one(tmp_path):
    """An environment whose Horovod came from a wheel cache is locked (``lock --prefix``: the wheel's
    URL and SHA-256); the wheel is then replaced by another of the same name, version and build
    key: ``diff`` reports the hash (exit 1), in text and JSON."""
    marker = tmp_path / "planted-code-ran"
    genuine, planted = _wheels(tmp_path, marker)
    digest = _key().digest()
    prefix = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", str(prefix)], check=True, timeout=scaled(300))

    def install(wheel):
        entry = tmp_path / f"cache-{wheel.parent.name}" / "horovod-wheels" / digest
        entry.mkdir(parents=True)
        shutil.copyfile(wheel, entry / wheel.name)
        subprocess.run([str(prefix / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "--no-deps", "--force-reinstall", str(entry / wheel.name)], check=True, timeout=scaled(300))

    install(genuine)
    lock = tmp_path / "env.conda-lock.yml"
    proc = run_envtool("lock", "--prefix", prefix, "-o", lock)
    assert proc.returncode == 0, proc.stderr
    assert sha256(genuine) in lock.read_text()
    proc = run_envtool("diff", "--prefix", prefix, "--lock", lock)
    assert proc.returncode == 0 and "matches" in proc.stdout, proc.stdout + proc.stderr

    _verify_lock(prefix, lock, digest, cache_hit=True)  # the genuine wheel: the step passes

    install(planted)
    # create --lock's "Compare the prefix with the lock" step: a cached wheel must be the locked one
    with pytest.raises(StepFailed, match="horovod: hash"):
        _verify_lock(prefix, lock, digest, cache_hit=True)
    # (compiled afresh because the locked wheel was in no cache: another hash by nature, noted)
    assert "compiled afresh" in _verify_lock(prefix, lock, digest, cache_hit=False)
    proc = run_envtool("diff", "--prefix", prefix, "--lock", lock)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert (f"~ pip horovod: hash {sha256(genuine)} -> {sha256(planted)}") in proc.stdout
    data = json.loads(run_envtool("diff", "--prefix", prefix, "--lock", lock, "--json").stdout)
    assert data["ok"] is False and data["changed"] == [
        {"manager": "pip", "name": "horovod", "field": "hash", "locked": sha256(genuine),
         "installed": sha256(planted)}]


def test_the_build_step_warns_naming_the_cache_and_checks_what_pip_installed(tmp_path, monkeypatch, venv, capfd):
    """The build step's own lookup (the code ``create`` runs): a tampered site entry is reported
    on stderr and in the build log, naming the cache directory and why; and a wheel that pip
    installed with another hash than the one checked stops the step."""
    from envtool.steps.create.horovod_build import cached_wheel, check_installed_wheel
    from envtool.steps.kernel.runner import Runner

    marker = tmp_path / "planted-code-ran"
    genuine, planted = _wheels(tmp_path, marker)
    key = _key()
    site = _published_site(tmp_path, monkeypatch, genuine, key)
    monkeypatch.setenv("ENVTOOL_CACHE_PATH", str(site))
    shutil.copyfile(planted, site / "horovod-wheels" / key.digest() / genuine.name)
    log = tmp_path / "build.log"
    with Runner(log_path=log) as runner:
        assert cached_wheel(list(cache.chain()), key, "", runner) == (None, None)
    err = capfd.readouterr().err
    assert f"warning: wheel cache {site}/horovod-wheels: entry {key.digest()} not used: " in err
    assert "not the wheel key.json records" in err
    text = log.read_text()
    assert f"wheel cache {tmp_path}/user/horovod-wheels: key {key.digest()} miss\n" in text
    assert f"wheel cache {site}/horovod-wheels (site, read-only): key {key.digest()} miss (" in text

    _install_what_the_cache_gives(venv, genuine)
    with Runner(log_path=log) as runner:
        check_installed_wheel(venv, sha256(genuine), "build-horovod", runner)
        with pytest.raises(StepFailed, match="not the checked"):
            check_installed_wheel(venv, sha256(planted), "build-horovod", runner)


@pytest.mark.slow
def test_create_under_a_lock_refuses_planted_site_wheels_and_installs_the_locked_one(tmp_path, shared_tmp,
                                                                                    cpu_horovod_env):
    """End to end with the real Horovod wheel (copied from the user's wheel cache, never changed):
    the spec's lock, made to record that wheel (as a lock of an environment does), and three site
    caches in ``$ENVTOOL_CACHE_PATH``: a planted wheel beside the real entry's copied key.json, a
    planted wheel whose key.json records the planted wheel's own hash (self-consistent, not the
    lock's), then the real entry. ``create --lock`` skips the first two with warnings naming them,
    installs the real wheel and none of the planted code runs; ``diff`` then finds no drift."""
    from dataclasses import replace

    from envtool.lock.lockio import read_lock, write_lock
    from test_site_cache import _copy_entry, _read_only, _real_entry, _writable

    entry = _real_entry(cpu_horovod_env)
    real_sha = sha256(entry.wheel)
    marker = tmp_path / "planted-code-ran"
    (tmp_path / "w").mkdir()
    planted = make_wheel(tmp_path / "w", "horovod", "0.28.1", {
        "horovod/__init__.py": f"open({str(marker)!r}, 'w').write('planted code ran')\n"})
    repo = Path(__file__).resolve().parent.parent
    data = read_lock(repo / "lockfiles" / "cpu-horovod.conda-lock.yml")
    data = replace(data, packages=tuple(
        replace(p, url=entry.wheel.name, sha256=real_sha) if p.key == ("pip", "horovod") else p
        for p in data.packages))
    lock = write_lock(data, tmp_path / "cpu-horovod.conda-lock.yml")

    copied, consistent, good = tmp_path / "site-copied", tmp_path / "site-consistent", tmp_path / "site"
    d = _copy_entry(entry, copied)
    shutil.copyfile(planted, d / entry.wheel.name)  # key.json still records the real wheel
    d = _copy_entry(entry, consistent)
    shutil.copyfile(planted, d / entry.wheel.name)
    key = json.loads((d / "key.json").read_text())
    key["wheel"].update(size=planted.stat().st_size, sha256=sha256(planted))
    (d / "key.json").write_text(json.dumps(key))
    _copy_entry(entry, good)
    roots = (copied, consistent, good)
    for r in roots:
        _read_only(r)
    try:
        env = {"ENVTOOL_CACHE_DIR": str(tmp_path / "user"), "ENVTOOL_CACHE_PATH": ":".join(map(str, roots))}
        prefix = shared_tmp / "env"  # a short path: validation's forkserver socket lives below the build directory
        proc = run_envtool("create", "cpu-horovod", "--lock", lock, "--prefix", prefix, "--json", env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert not marker.exists()
        build = json.loads(proc.stdout)["results"]["build-horovod"]
        assert build["cache_hit"] is True and build["cache_dir"] == str(good / "horovod-wheels")
        assert build["wheel_sha256"] == real_sha == build["locked_wheel_sha256"]
        skipped = {s["cache_dir"]: s["reason"] for s in build["cache_skipped"]}
        assert list(skipped) == [f"{copied}/horovod-wheels", f"{consistent}/horovod-wheels"], skipped
        assert "not the wheel key.json records" in skipped[f"{copied}/horovod-wheels"]
        assert skipped[f"{consistent}/horovod-wheels"].endswith("the lock has " + real_sha)
        log = (prefix / ".envtool" / "create.log").read_text()
        assert f"wheel cache {consistent}/horovod-wheels (site, read-only): key {entry.digest} miss (" in log
        assert f"wheel cache {good}/horovod-wheels (site, read-only): key {entry.digest} hit" in log
        diff = run_envtool("diff", "--prefix", prefix, "--lock", lock)
        assert diff.returncode == 0, diff.stdout + diff.stderr
        subprocess.run([str(prefix / "bin" / "python"), "-c", "import horovod.torch"], check=True, cwd="/")
        assert not marker.exists()
    finally:
        for r in roots:
            _writable(r)
