"""uv installs with pip's configuration (issue 15, item 1): both installers pick the same artifacts,
and a lock's hashes are enforced by either.

Everything is real: wheels built here, served by a PEP 503 index on disk (``file://``), a second
("extra") index, a wheelhouse (``find-links``) and a constraint file, all named only in a pip
configuration file (``PIP_CONFIG_FILE``); real venvs; real ``uv pip install`` and ``pip install``.
Each artifact the spec needs is reachable only through one part of that configuration, so uv
left without it could not install the environment at all, let alone the same one.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from conftest import run_envtool
from helpers.wheels import make_wheel

from envtool.engines import installer
from helpers.speed import scaled


def _index(root: Path, wheels) -> Path:
    """A PEP 503 simple index at ``root/simple`` serving ``wheels`` from ``root/files``."""
    files = root / "files"
    files.mkdir(parents=True, exist_ok=True)
    by_name = {}
    for whl in wheels:
        target = files / whl.name
        whl.replace(target)
        by_name.setdefault(whl.name.split("-")[0].replace("_", "-"), []).append(target)
    for name, paths in by_name.items():
        page = root / "simple" / name
        page.mkdir(parents=True, exist_ok=True)
        links = "".join(f'<a href="../../files/{p.name}#sha256={hashlib.sha256(p.read_bytes()).hexdigest()}">'
                        f"{p.name}</a>\n" for p in paths)
        (page / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
    return root / "simple"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A "site" whose pip is configured with an index, an extra index, a wheelhouse and constraints.

    * ``alpha 1.0`` is on the main index; ``alpha 1.0+cpu`` only in the wheelhouse (the way this
      machine's CPU torch comes only from ``/opt/wheels``): pip takes the local version.
    * ``beta`` 1.0, 1.1 and 1.2 are on the extra index; the constraint file caps it at 1.1.
    * ``gamma 2.0`` (needs ``beta>=1``) is only on the extra index, with a prerelease ``3.0b1``
      that neither installer takes unless told to.
    """
    root = tmp_path_factory.mktemp("installer")
    build = root / "build"
    build.mkdir()
    main = _index(root / "main", [make_wheel(build, "envtool-alpha", "1.0", {"envtool_alpha.py": "KIND = 'index'\n"})])
    extra = _index(root / "extra", [
        make_wheel(build, "envtool-beta", v, {"envtool_beta.py": f"V = {v!r}\n"}) for v in ("1.0", "1.1", "1.2")
    ] + [make_wheel(build, "envtool-gamma", "3.0b1", {"envtool_gamma.py": "G = 3\n"}, requires=["envtool-beta>=1"])
    ] + [make_wheel(build, "envtool-gamma", "2.0", {"envtool_gamma.py": "G = 2\n\n\ndef where():\n    return where.__code__.co_filename\n"}, requires=["envtool-beta>=1"])])
    house = root / "wheelhouse"
    house.mkdir()
    make_wheel(house, "envtool-alpha", "1.0+cpu", {"envtool_alpha.py": "KIND = 'wheelhouse'\n"})
    # a site's mirror serves setuptools too: a venv's lock holds the one python -m venv seeds (3.11)
    import ensurepip
    import shutil

    for whl in (Path(ensurepip.__file__).parent / "_bundled").glob("*.whl"):
        shutil.copy(whl, house)
    constraints = root / "constraints.txt"
    constraints.write_text("# the site's caps\nenvtool-beta<=1.1\n")
    conf = root / "pip.conf"
    conf.write_text(f"[global]\nindex-url = {main.as_uri()}\nextra-index-url = {extra.as_uri()}\n"
                    f"find-links = {house}\nconstraint = {constraints}\n[install]\ntimeout = 7\n")
    env = {"PIP_CONFIG_FILE": str(conf), "PIP_FIND_LINKS": str(house), "PIP_INDEX_URL": main.as_uri(),
           "PIP_EXTRA_INDEX_URL": extra.as_uri(), "PIP_CONSTRAINT": str(constraints), "PIP_NO_INDEX": "0"}
    specs = root / "specs"
    specs.mkdir()
    (specs / "inst.yaml").write_text(textwrap.dedent("""\
        name: inst
        summary: three packages reachable only through pip's configuration
        sources: {t: "written for the tests"}
        engine: venv
        packages:
          pip:
            - {spec: "envtool-alpha==1.0", mark: I, source: t}
            - {spec: "envtool-gamma", mark: I, source: t}
        horovod: {install: none}
        expect: {check_build: null}
        """))
    return {"root": root, "env": dict(env, ENVTOOL_SPEC_PATH=str(specs)), "conf": conf, "house": house,
            "constraints": constraints, "main": main.parent}


#: dist-info files an installer writes itself (not from the wheel).
_OWN = ("INSTALLER", "REQUESTED", "RECORD", "direct_url.json", "uv_cache.json")


def _artifacts(prefix: Path) -> dict:
    """``{name: (version, frozenset of (path, hash) from RECORD)}`` for the test's distributions:
    two installs of the same wheel have the same RECORD entries (installer-written files aside)."""
    out = {}
    for dist in (prefix / "lib").glob("python*/site-packages/envtool_*.dist-info"):
        meta = dict(line.split(": ", 1) for line in (dist / "METADATA").read_text().splitlines() if ": " in line)
        rows = set()
        for line in (dist / "RECORD").read_text().splitlines():
            path, digest = line.split(",")[:2]
            if path.split("/")[-1] in _OWN or "__pycache__" in path or not digest:
                continue
            rows.add((path, digest))
        out[meta["Name"]] = (meta["Version"], frozenset(rows), (dist / "INSTALLER").read_text().strip())
    return out


def test_pip_configuration_is_read_with_pips_precedence(site):
    env = dict(site["env"], PIP_TIMEOUT="9", PATH="/usr/bin:/bin")
    import os
    import sys

    config = installer.read_pip_config(sys.executable, env=dict(os.environ, **env))
    assert config["find-links"] == str(site["house"])
    assert config["constraint"] == str(site["constraints"])
    assert config["timeout"] == "9"  # :env: wins over the file's [install] 7
    args, uv_env, passed, unsupported = installer.uv_arguments(config)
    assert not unsupported
    assert ("--find-links", str(site["house"])) in set(zip(args, args[1:]))
    assert ("--index-strategy", "unsafe-best-match") in set(zip(args, args[1:])) and "--prerelease=explicit" in args
    assert dict(uv_env)["UV_HTTP_TIMEOUT"] == "9"
    assert {"find-links", "constraint", "index-url", "extra-index-url"} <= set(passed)


def test_a_key_uv_cannot_honour_makes_the_plan_use_pip_and_says_why(site, tmp_path):
    conf = tmp_path / "pip.conf"
    conf.write_text(site["conf"].read_text() + "upgrade-strategy = eager\n")
    proc = run_envtool("plan", "inst", "--resolve", "--json", env=dict(site["env"], PIP_CONFIG_FILE=str(conf)))
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["installer"]["name"] == "pip" and "upgrade-strategy" in plan["installer"]["reason"]
    assert plan["steps"][1]["commands"][0][1:4] == ["-m", "pip", "install"]


@pytest.fixture(scope="module")
def created(site, tmp_path_factory):
    out = {}
    for name in ("uv", "pip"):
        prefix = tmp_path_factory.mktemp("created") / name
        # a uv setting in the user's environment would change what uv installs: it is removed
        proc = run_envtool("create", "inst", "--resolve", "--installer", name, "--prefix", prefix,
                           env=dict(site["env"], UV_PRERELEASE="allow"), timeout=scaled(600))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        # progress without a terminal: plain lines with the installer's phases and the elapsed time
        assert f"installing with {name}: started" in proc.stderr and f"installing with {name}: done" in proc.stderr
        assert "compiling bytecode: started" in proc.stderr
        out[name] = prefix
    return out


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_both_installers_pick_the_same_artifacts(created):
    uv, pip = _artifacts(created["uv"]), _artifacts(created["pip"])
    assert {k: v[2] for k, v in uv.items()} == {"envtool-alpha": "uv", "envtool-beta": "uv", "envtool-gamma": "uv"}
    assert {k: v[2] for k, v in pip.items()} == {"envtool-alpha": "pip", "envtool-beta": "pip", "envtool-gamma": "pip"}
    assert {k: v[:2] for k, v in uv.items()} == {k: v[:2] for k, v in pip.items()}
    # the artifacts only the configuration reaches: the wheelhouse's local version, the capped version
    versions = {k: v[0] for k, v in uv.items()}
    assert versions == {"envtool-alpha": "1.0+cpu", "envtool-beta": "1.1", "envtool-gamma": "2.0"}


@pytest.mark.slow  # 10-14 s with its environment's set-up on 2 loaded cores: over the fast tier's 10 s
def test_uv_installs_are_byte_compiled_and_locked_like_pips(created):
    for name, prefix in created.items():
        site_packages = next((prefix / "lib").glob("python*/site-packages"))
        assert list((site_packages / "__pycache__").glob("envtool_gamma.*.pyc")), name
    uv = json.loads(json.dumps(__import__("yaml").safe_load((created["uv"] / "conda-lock.yml").read_text())))
    pip = __import__("yaml").safe_load((created["pip"] / "conda-lock.yml").read_text())
    pick = lambda lock: sorted((p["name"], p["version"], p["hash"].get("sha256")) for p in lock["package"]
                               if p["name"].startswith("envtool-"))
    assert pick(uv) == pick(pip) and len(pick(uv)) == 3


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
@pytest.mark.parametrize("name", ["uv", "pip"])
def test_either_installer_refuses_an_archive_with_another_hash(site, created, tmp_path, name):
    lock = created[name] / "conda-lock.yml"
    # the site's wheelhouse now serves another file under the locked name and version
    house = tmp_path / "evil"
    house.mkdir()
    make_wheel(house, "envtool-alpha", "1.0+cpu", {"envtool_alpha.py": "KIND = 'not the locked file'\n"})
    conf = tmp_path / "pip.conf"
    conf.write_text(site["conf"].read_text().replace(str(site["house"]), str(house)))
    env = dict(site["env"], PIP_CONFIG_FILE=str(conf), PIP_FIND_LINKS=str(house))
    prefix = tmp_path / "never"
    proc = run_envtool("create", "inst", "--lock", lock, "--installer", name, "--prefix", prefix, env=env, timeout=scaled(600))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "hash" in proc.stderr.lower() and not prefix.exists(), proc.stderr
    # and the same lock with the site's own wheelhouse installs
    ok = tmp_path / "ok"
    proc = run_envtool("create", "inst", "--lock", lock, "--installer", name, "--prefix", ok, env=site["env"], timeout=scaled(600))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _artifacts(ok)["envtool-alpha"][0] == "1.0+cpu"


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_a_locked_version_the_constraints_refuse_is_refused_by_uv_as_by_pip(site, created, tmp_path):
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("envtool-beta<=1.0\n")
    conf = tmp_path / "pip.conf"
    conf.write_text(site["conf"].read_text().replace(str(site["constraints"]), str(constraints)))
    env = dict(site["env"], PIP_CONFIG_FILE=str(conf), PIP_CONSTRAINT=str(constraints))
    lock = created["uv"] / "conda-lock.yml"
    for name in ("uv", "pip"):
        prefix = tmp_path / name
        proc = run_envtool("create", "inst", "--lock", lock, "--installer", name, "--prefix", prefix, env=env,
                           timeout=scaled(600))
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert not prefix.exists()
        if name == "uv":
            assert "constraints refuse the locked versions" in proc.stderr and "envtool-beta" in proc.stderr, proc.stderr


def test_a_uv_seeded_venv_has_ensurepips_pip(created):
    import ensurepip

    bundled = ensurepip.version()
    out = subprocess.run([str(created["uv"] / "bin" / "python"), "-m", "pip", "--version"], capture_output=True,
                         text=True, check=True).stdout
    assert out.split()[1] == bundled


def test_a_second_uv_env_links_the_first_ones_bytecode_and_python_accepts_it(site, created, tmp_path):
    import os
    import sys

    prefix = tmp_path / "again"
    proc = run_envtool("create", "inst", "--resolve", "--installer", "uv", "--prefix", prefix, env=site["env"],
                       timeout=scaled(600))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    first = next((created["uv"] / "lib").glob("python*/site-packages"))
    second = next((prefix / "lib").glob("python*/site-packages"))
    assert os.stat(first / "envtool_gamma.py").st_ino == os.stat(second / "envtool_gamma.py").st_ino  # uv linked it
    tag = sys.implementation.cache_tag
    pyc = lambda sp: sp / "__pycache__" / f"envtool_gamma.{tag}.pyc"
    assert os.stat(pyc(first)).st_ino == os.stat(pyc(second)).st_ino  # the bytecode was linked, not compiled
    # Python takes it as valid (it would write a new file, a new inode, otherwise) and names the
    # second environment's file in code objects
    out = subprocess.run([str(prefix / "bin" / "python"), "-c", "import envtool_gamma as g; print(g.where())"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == str(second / "envtool_gamma.py")
    assert os.stat(pyc(second)).st_ino == os.stat(pyc(first)).st_ino


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_cache_prune_deletes_kept_bytecode_no_environment_links(site, tmp_path):
    import os
    import shutil

    cache = tmp_path / "cache"
    env = dict(site["env"], ENVTOOL_CACHE_DIR=str(cache))
    prefix = tmp_path / "short-lived"
    proc = run_envtool("create", "inst", "--resolve", "--installer", "uv", "--prefix", prefix, env=env, timeout=scaled(600))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kept = list((cache / "bytecode").glob("*.pyc"))
    assert kept and all(os.stat(p).st_nlink >= 2 for p in kept)
    proc = run_envtool("cache", "prune", "--json", env=env)
    assert json.loads(proc.stdout)["bytecode"]["deleted"] == 0  # the environment still links them
    shutil.rmtree(prefix)
    proc = run_envtool("cache", "prune", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["bytecode"]["deleted"] == len(kept)
    assert not list((cache / "bytecode").glob("*.pyc"))


class _AuthIndex:
    """The site's main index served over HTTP on loopback, behind basic authentication."""

    def __init__(self, root: Path, user: str, password: str):
        import base64
        import functools
        import http.server
        import threading

        want = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self.requests = []

        class Handler(http.server.SimpleHTTPRequestHandler):
            def do_GET(inner):
                self.requests.append((inner.path, inner.headers.get("Authorization") == want))
                if inner.headers.get("Authorization") != want:
                    inner.send_response(401)
                    inner.send_header("WWW-Authenticate", 'Basic realm="site"')
                    inner.end_headers()
                    return
                return super().do_GET()

            def log_message(inner, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://{user}:{password}@127.0.0.1:{self.server.server_address[1]}/simple"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
@pytest.mark.parametrize("name", ["uv", "pip"])
def test_an_index_with_credentials_works_and_the_secret_is_never_shown(site, tmp_path, name):
    secret = "s3cr3t-token-%s" % name
    index = _AuthIndex(site["main"], "alice", secret)
    try:
        conf = tmp_path / "pip.conf"
        conf.write_text(site["conf"].read_text().replace(
            next(l for l in site["conf"].read_text().splitlines() if l.startswith("index-url")),
            f"index-url = {index.url}"))
        env = dict(site["env"], PIP_CONFIG_FILE=str(conf), PIP_INDEX_URL=index.url)
        plan = run_envtool("plan", "inst", "--resolve", "--installer", name, "--json", env=env)
        assert plan.returncode == 0, plan.stderr
        assert secret not in plan.stdout
        if name == "uv":
            assert "alice:****@" in plan.stdout  # the credentials travel in uv's environment, not in its argv (ps shows argv)
            step = next(s for s in json.loads(plan.stdout)["steps"] if s["id"] == "pip-install")
            assert not any("alice" in w for w in step["commands"][0]) and "UV_INDEX_URL" in step["env"]
        prefix = tmp_path / "env"
        proc = run_envtool("create", "inst", "--resolve", "--installer", name, "--prefix", prefix, env=env, timeout=scaled(600))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert secret not in proc.stdout + proc.stderr
        assert secret not in (prefix / ".envtool" / "create.log").read_text()
        assert any(ok and "envtool-alpha" in path for path, ok in index.requests)  # it really used the index
        assert _artifacts(prefix)["envtool-alpha"][0] == "1.0+cpu"
    finally:
        index.close()


def test_a_venv_over_the_base_interpreters_packages_is_installed_by_pip(site, tmp_path):
    specs = tmp_path / "specs"
    specs.mkdir()
    text = (Path(site["env"]["ENVTOOL_SPEC_PATH"]) / "inst.yaml").read_text()
    (specs / "inst.yaml").write_text(text.replace("engine: venv\n", "engine: venv\nvenv: {system_site_packages: true}\n"))
    proc = run_envtool("plan", "inst", "--resolve", "--json", env=dict(site["env"], ENVTOOL_SPEC_PATH=str(specs)))
    assert proc.returncode == 0, proc.stderr
    installer_ = json.loads(proc.stdout)["installer"]
    # uv counts only the venv's own packages as installed and would put copies over the base's
    assert installer_["name"] == "pip" and "layers over packages" in installer_["reason"]
    assert "over the base interpreter's packages" in json.loads(proc.stdout)["steps"][0]["title"]
    plain = json.loads(run_envtool("plan", "inst", "--resolve", "--json", env=site["env"]).stdout)
    assert "over the base interpreter's packages" not in plain["steps"][0]["title"]  # --prompt is not a layer


@pytest.mark.parametrize("setting, words", [
    ({"PIP_UPGRADE_STRATEGY": "eager"}, "upgrade-strategy"),
    ({"PIP_KEYRING_PROVIDER": "import"}, "keyring-provider"),
    ({"PIP_NO_BUILD_ISOLATION": "0"}, "no-build-isolation"),
])
def test_settings_uv_cannot_honour_make_pip_install(site, setting, words):
    proc = run_envtool("plan", "inst", "--resolve", "--json", env=dict(site["env"], **setting))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["installer"]["name"] == "pip"
    assert words in json.loads(proc.stdout)["installer"]["reason"]


def test_settings_that_change_nothing_installed_keep_uv(site):
    env = dict(site["env"], PIP_FORMAT="columns", PIP_USER="0", PIP_NO_CACHE_DIR="false")
    plan = json.loads(run_envtool("plan", "inst", "--resolve", "--json", env=env).stdout)
    assert plan["installer"]["name"] == "uv", plan["installer"]
    assert "--no-cache" in plan["installer"]["args"]  # pip: any value of no-cache-dir turns the cache off


def test_a_broken_pip_configuration_is_exit_2_before_anything(site, tmp_path):
    bad = tmp_path / "pip.conf"
    bad.write_text("index-url = https://alice:pw@mirror.example/simple\n")  # no [global] header
    prefix = tmp_path / "never"
    proc = run_envtool("create", "inst", "--resolve", "--prefix", prefix, env=dict(site["env"], PIP_CONFIG_FILE=str(bad)))
    assert proc.returncode == 2 and "pip's configuration cannot be read" in proc.stderr, proc.stderr
    assert "pw@" not in proc.stderr and "Traceback" not in proc.stderr and not prefix.exists()


def test_a_token_alone_in_an_index_url_is_not_shown(site):
    env = dict(site["env"], PIP_INDEX_URL="https://t0ken-only-secret@mirror.example/simple")
    proc = run_envtool("plan", "inst", "--resolve", "--json", env=env)
    assert proc.returncode == 0 and "t0ken-only-secret" not in proc.stdout and "****@mirror.example" in proc.stdout


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_a_range_only_a_prerelease_satisfies_is_refused_by_both_installers(site, tmp_path):
    specs = tmp_path / "specs"
    specs.mkdir()
    text = (Path(site["env"]["ENVTOOL_SPEC_PATH"]) / "inst.yaml").read_text()
    (specs / "inst.yaml").write_text(text.replace('"envtool-gamma"', '"envtool-gamma>2.0"'))
    for name in ("uv", "pip"):
        prefix = tmp_path / name
        proc = run_envtool("create", "inst", "--resolve", "--installer", name, "--prefix", prefix,
                           env=dict(site["env"], ENVTOOL_SPEC_PATH=str(specs)), timeout=scaled(600))
        assert proc.returncode == 1 and not prefix.exists(), (name, proc.stderr)  # 3.0b1 is not taken


def test_optimized_bytecode_never_stands_in_for_plain_bytecode(tmp_path):
    import os
    import sys

    from envtool.probes import probe_path

    source = tmp_path / "a.py"
    source.write_text("def f():\n    assert False, 'asserts run'\n")
    libs = []
    for n in (1, 2):
        lib = tmp_path / f"env{n}" / "lib"
        lib.mkdir(parents=True)
        os.link(source, lib / "a.py")  # as uv links one cached file into two environments
        libs.append(lib)
    store = tmp_path / "store"
    subprocess.run([sys.executable, "-O", str(probe_path("bytecode")), str(libs[0]), str(store)], check=True)
    subprocess.run([sys.executable, str(probe_path("bytecode")), str(libs[1]), str(store)], check=True)
    out = subprocess.run([sys.executable, "-c", "import a\ntry:\n    a.f()\nexcept AssertionError as e:\n    print(e)"],
                         cwd=libs[1], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "asserts run"
    # and a second plain environment does link the first plain one's bytecode
    lib3 = tmp_path / "env3" / "lib"
    lib3.mkdir(parents=True)
    os.link(source, lib3 / "a.py")
    subprocess.run([sys.executable, str(probe_path("bytecode")), str(lib3), str(store)], check=True)
    tag = sys.implementation.cache_tag
    assert os.stat(lib3 / "__pycache__" / f"a.{tag}.pyc").st_ino == os.stat(libs[1] / "__pycache__" / f"a.{tag}.pyc").st_ino


def test_pip_configuration_is_remembered_until_what_pip_reads_changes(tmp_path, monkeypatch):
    """Issue 45 (item 5): ``plan`` ran ``pip config list`` (0.35 s) on every run. Its answer is kept
    in the cache, keyed by the files and variables pip reads: an unchanged configuration is not
    asked again; an edited file, a new ``PIP_*`` variable, are seen at once."""
    import os
    import sys

    monkeypatch.setenv("ENVTOOL_CACHE_DIR", str(tmp_path / "cache"))
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\ntimeout = 7\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    first = installer.read_pip_config(sys.executable)
    assert first["timeout"] == "7"
    key = installer._pip_config_key(sys.executable)
    assert key and installer._pip_config_memo(key) == first  # remembered: the next run asks no pip
    assert installer.read_pip_config(sys.executable) == first
    conf.write_text("[global]\ntimeout = 8\n")  # edited (the same size): seen
    os.utime(conf, ns=(conf.stat().st_atime_ns, conf.stat().st_mtime_ns + 10**9))
    assert installer._pip_config_key(sys.executable) != key
    assert installer.read_pip_config(sys.executable)["timeout"] == "8"
    monkeypatch.setenv("PIP_DEFAULT_TIMEOUT", "9")  # a variable: seen
    assert installer.read_pip_config(sys.executable)["default-timeout"] == "9"
    (tmp_path / "cache" / "pip-config" / "config.json").chmod(0o666)  # writable by others: not trusted
    assert installer._pip_config_memo(installer._pip_config_key(sys.executable)) is None
