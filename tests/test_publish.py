"""``envtool publish`` (issue 16), checked the way a site uses it: root publishes, a second,
unprivileged user of the group loads, runs and clones the stack in a real shell and cannot
change it; someone outside the group cannot read it (``--umask 027``).

Set-up (``tests/setup.d/publish.sh``, as root): group ``envtool-pub``, users ``envtool-user``
(a member) and ``envtool-other`` (not), and ``/opt/envtool-test/venv``, a Python with envtool's
dependencies that other users can run (root's interpreter lives under ``/root``, mode 700).

The stack is small so the test stays cheap: a real conda environment made by ``create`` from a
local ``file://`` channel (tests/helpers/conda_channel.py) holding a ``python`` package that wraps
Debian's ``/usr/bin/python3.11`` and a ``noarch: python`` package ``hello``. Everything lives in a
``/tmp`` directory other users can reach (pytest's own tmp_path is private to root).
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
import textwrap
from pathlib import Path

import pytest

from conftest import run_envtool
from helpers.conda_channel import PackageDef, build_channel, python_package
from test_modulefile import LMOD_INIT, assert_same_env, normalise, read_env0

GROUP = "envtool-pub"
USER = "envtool-user"
OTHER = "envtool-other"
USER_VENV = Path(os.environ.get("ENVTOOL_TEST_USER_VENV", "/opt/envtool-test/venv"))
WORKTREE = Path(__file__).resolve().parent.parent
from helpers.readable import importable_root  # noqa: E402
from helpers.speed import scaled  # noqa: E402
DEBIAN_PYTHON = "/usr/bin/python3.11"


def _ready() -> str:
    import grp
    import pwd

    try:
        members = grp.getgrnam(GROUP).gr_mem
        pwd.getpwnam(OTHER)
    except KeyError:
        return "no envtool-pub group or test users"
    if USER not in members:
        return f"{USER} is not in {GROUP}"
    if not (USER_VENV / "bin" / "python").exists():
        return f"no {USER_VENV}"
    if not LMOD_INIT:
        return "no Lmod"
    if os.geteuid() != 0:
        return "publishing with --group to another user needs root here"
    return ""


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    why = _ready()
    if why:
        msg = f"{why} (run tests/setup.d/publish.sh and modules.sh as root)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    base = Path(tempfile.mkdtemp(prefix="envtool-publish-", dir="/tmp"))
    base.chmod(0o755)
    ver = subprocess.run([DEBIAN_PYTHON, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    url = build_channel(base / "channel", [
        python_package(version=ver, interpreter=DEBIAN_PYTHON),
        PackageDef("hello", "0.3", noarch="python",
                   files={"site-packages/hello.py": "GREETING = 'hello from the published stack'\n"}),
    ])
    specs = base / "specs"
    specs.mkdir()
    (specs / "pubtest.yaml").write_text(textwrap.dedent(f"""\
        name: pubtest
        summary: a tiny published stack
        distribution: {{name: site, version: "1.0"}}
        platforms: [linux-64]
        engine: conda
        channels: ["{url}"]
        packages:
          conda: [python, hello]
        horovod: {{install: none}}
        env: {{OMP_NUM_THREADS: "1"}}
        """))
    (base / "lmodrc.lua").write_text(
        f'scDescriptT = {{ {{ dir = "{base}/spider", timestamp = "{base}/spider/timestamp" }} }}\n')
    home = base / "home"
    home.mkdir()
    shutil.chown(home, USER, USER)
    env = {"ENVTOOL_SPEC_PATH": str(specs), "ENVTOOL_CACHE_DIR": str(base / "cache"),
           "LMOD_RC": str(base / "lmodrc.lua"), "MODULEPATH": ""}
    yield {"base": base, "env": env, "root": base / "sw", "mods": base / "modules", "home": home}
    subprocess.run(["chmod", "-R", "u+w", str(base)], check=False)
    shutil.rmtree(base, ignore_errors=True)


def publish(site, *extra):
    return run_envtool("publish", "pubtest", "--root", site["root"], "--modulefiles", site["mods"],
                       "--group", GROUP, "--umask", "027", "--default", "--json", *extra, env=site["env"],
                       timeout=900)


def as_user(user: str, script: str, site, timeout=None, init=None) -> subprocess.CompletedProcess:
    """``script`` in a clean, real bash as ``user`` (runuser), Lmod (or ``init``) initialised."""
    env = {"HOME": str(site["home"]), "PATH": "/usr/bin:/bin", "LANG": "C", "PYTHONPATH": str(importable_root()),
           "ENVTOOL_CACHE_DIR": f"{site['home']}/cache", "LMOD_RC": str(site["base"] / "lmodrc.lua")}
    code = f"source {init or LMOD_INIT} || exit 90\ncd {site['home']}\n{script}"
    return subprocess.run(["runuser", "-u", user, "--", "env", "-i", *[f"{k}={v}" for k, v in env.items()],
                           "bash", "--noprofile", "--norc", "-c", code], capture_output=True, text=True,
                          timeout=scaled(600) if timeout is None else timeout)


@pytest.fixture(scope="module")
def published(site):
    proc = publish(site)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    return out


def test_publish_layout_and_modes(site, published):
    import grp

    (stack,) = published["stacks"]
    prefix = site["root"] / "pubtest" / "1.0"
    assert stack["action"] == "published" and stack["prefix"] == str(prefix) and stack["module"] == "pubtest/1.0"
    gid = grp.getgrnam(GROUP).gr_gid
    checked = 0
    for path in [prefix, *prefix.rglob("*")]:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            continue
        checked += 1
        assert st.st_gid == gid, path
        assert not st.st_mode & 0o222, f"{path} is writable: {oct(st.st_mode)}"
        assert st.st_mode & 0o040, f"{path} is not group-readable"
        assert not st.st_mode & 0o007, f"{path} is open to others despite --umask 027"
        if stat.S_ISDIR(st.st_mode):
            assert st.st_mode & stat.S_ISGID and st.st_mode & 0o010, path
    assert checked > 10
    # nothing in the published tree shares an inode with py-rattler's package cache, uv's cache or
    # another environment: the mode and group changes above stayed in the tree
    shared = [p for p in prefix.rglob("*") if p.is_file() and not p.is_symlink() and os.lstat(p).st_nlink > 1]
    assert not shared, shared[:5]
    pkgs = Path(site["env"]["ENVTOOL_CACHE_DIR"]) / "pkgs"
    cached = [p for p in pkgs.rglob("*") if p.is_file() and not p.is_symlink()]
    assert cached and not [p for p in cached if os.lstat(p).st_gid == gid or not os.lstat(p).st_mode & 0o200]
    for d in (site["root"], site["root"] / "pubtest", site["mods"], site["mods"] / "pubtest"):
        st = os.stat(d)
        assert st.st_gid == gid and st.st_mode & stat.S_ISGID, d
    modfile = site["mods"] / "pubtest" / "1.0.lua"
    assert Path(stack["modulefile"]) == modfile and os.stat(modfile).st_gid == gid
    # modulefiles stay readable by all (Lmod's system spider cache skips the others): envtool/steps/publish/__init__.py
    assert stat.S_IMODE(os.stat(modfile).st_mode) == 0o444
    assert os.readlink(site["mods"] / "pubtest" / "default") == "1.0.lua"
    sbom = site["root"] / "pubtest" / "1.0.cdx.json"
    from test_sbom import validate

    validate(sbom.read_text())
    assert any(c["name"] == "hello" for c in json.loads(sbom.read_text())["components"])
    marker = json.loads((prefix / ".envtool" / "publish.json").read_text())
    assert marker["module"] == "pubtest/1.0" and marker["group"] == GROUP
    # Lmod's spider cache (configured by the site's lmodrc: LMOD_RC) was rebuilt with the new module
    assert published["spider_caches"] == [str(site["base"] / "spider")]
    assert "pubtest" in (site["base"] / "spider" / "spiderT.lua").read_text()


def test_group_member_loads_runs_clones_and_cannot_modify(site, published):
    prefix = site["root"] / "pubtest" / "1.0"
    home = site["home"]
    script = textwrap.dedent(f"""\
        module use {site['mods']}
        env -0 > {home}/before
        module load pubtest || exit 91
        echo "PY=$(command -v python) CP=$CONDA_PREFIX OMP=$OMP_NUM_THREADS"
        python -c "import hello, sys; print(hello.GREETING, sys.prefix)" || exit 92
        touch {prefix}/new 2>/dev/null && echo "WROTE new"
        echo x >> {prefix}/conda-meta/history 2>/dev/null && echo "WROTE history"
        mkdir {prefix}/bin/extra 2>/dev/null && echo "WROTE mkdir"
        rm -f {prefix}/bin/python 2>/dev/null; [ -e {prefix}/bin/python ] || echo "WROTE rm"
        rm -rf {prefix}/conda-meta 2>/dev/null; [ -d {prefix}/conda-meta ] || echo "WROTE rmdir"
        mv {prefix} {site['root']}/pubtest/moved 2>/dev/null && echo "WROTE mv"
        echo x >> {site['mods']}/pubtest/1.0.lua 2>/dev/null && echo "WROTE modulefile"
        module unload pubtest
        env -0 > {home}/after
        /opt/envtool-test/venv/bin/python -m envtool clone {prefix} --prefix {home}/mine || exit 93
        {home}/mine/bin/python -c "import hello, sys; print('CLONE', hello.GREETING, sys.prefix)" || exit 94
        touch {home}/mine/added && echo "CLONE WRITABLE"
        """).replace("/opt/envtool-test/venv", str(USER_VENV))
    proc = as_user(USER, script, site)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert f"PY={prefix}/bin/python CP={prefix} OMP=1" in proc.stdout, out
    assert f"hello from the published stack {prefix}\n" in proc.stdout, out
    assert "WROTE" not in proc.stdout, out
    assert f"CLONE hello from the published stack {home}/mine" in proc.stdout, out
    assert "CLONE WRITABLE" in proc.stdout, out
    before = normalise(read_env0(home / "before"), "lmod")
    after = normalise(read_env0(home / "after"), "lmod")
    assert_same_env(before, after)


def test_outsider_cannot_read(site, published):
    prefix = site["root"] / "pubtest" / "1.0"
    proc = as_user(OTHER, f"ls {prefix} && echo LISTED; {prefix}/bin/python -c 'print(1)' && echo RAN", site)
    assert "LISTED" not in proc.stdout and "RAN" not in proc.stdout, proc.stdout + proc.stderr
    # the check can fail: the member can
    proc = as_user(USER, f"ls {prefix} >/dev/null && echo LISTED", site)
    assert "LISTED" in proc.stdout, proc.stdout + proc.stderr


def test_second_publish_is_a_no_op_and_force_replaces(site, published):
    prefix = site["root"] / "pubtest" / "1.0"
    marker = prefix / ".envtool" / "publish.json"
    first = marker.read_text()
    inode = os.stat(prefix).st_ino
    proc = publish(site)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (stack,) = json.loads(proc.stdout)["stacks"]
    assert stack["action"] == "unchanged" and stack["log"] is None
    assert marker.read_text() == first and os.stat(prefix).st_ino == inode
    proc = publish(site, "--force")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (stack,) = json.loads(proc.stdout)["stacks"]
    assert stack["action"] == "replaced"
    assert marker.read_text() != first and os.stat(prefix).st_ino != inode
    assert not os.stat(prefix).st_mode & 0o222
    assert not [p for p in (site["root"] / "pubtest").iterdir() if "envtool" in p.name], \
        list((site["root"] / "pubtest").iterdir())


def test_publish_bad_input_exit_2(site, tmp_path):
    proc = run_envtool("publish", "pubtest", "--root", tmp_path / "sw", "--modulefiles", tmp_path / "m",
                       "--group", "no-such-group-xyz", env=site["env"])
    assert proc.returncode == 2 and "--group" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    proc = run_envtool("publish", "pubtest", "--root", tmp_path / "sw", "--modulefiles", tmp_path / "m",
                       "--umask", "777", env=site["env"])
    assert proc.returncode == 2 and "--umask" in proc.stderr, proc.stderr
    squatter = tmp_path / "sw" / "pubtest" / "1.0"
    squatter.mkdir(parents=True)
    (squatter / "keep").write_text("")
    proc = run_envtool("publish", "pubtest", "--root", tmp_path / "sw", "--modulefiles", tmp_path / "m",
                       env=site["env"])
    assert proc.returncode == 2 and "not published by envtool" in proc.stderr, proc.stderr
    assert (squatter / "keep").exists()


def test_publish_tcl_for_environment_modules(site):
    """``--format tcl``: the member loads the stack with Environment Modules 5 and unloads it cleanly."""
    from test_modulefile import ENVMODULES_INIT

    if not ENVMODULES_INIT.is_file():
        pytest.skip("Environment Modules is not installed (tests/setup.d/modules.sh)")
    root, mods = site["base"] / "sw-tcl", site["base"] / "modules-tcl"
    proc = run_envtool("publish", "pubtest", "--root", root, "--modulefiles", mods, "--group", GROUP,
                       "--format", "tcl", "--default", env=site["env"], timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"module use {mods}" in proc.stdout
    assert (mods / "pubtest" / "1.0").is_file() and (mods / "pubtest" / ".version").is_file()
    prefix = root / "pubtest" / "1.0"
    home = site["home"]
    script = textwrap.dedent(f"""\
        module use {mods}
        env -0 > {home}/before-tcl
        module load pubtest || exit 91
        python -c "import hello, sys; print(hello.GREETING, sys.prefix)" || exit 92
        touch {prefix}/new 2>/dev/null && echo "WROTE new"
        module unload pubtest
        env -0 > {home}/after-tcl
        """)
    proc = as_user(USER, script, site, init=ENVMODULES_INIT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"hello from the published stack {prefix}\n" in proc.stdout and "WROTE" not in proc.stdout, \
        proc.stdout + proc.stderr
    assert_same_env(normalise(read_env0(home / "before-tcl"), "envmodules"),
                    normalise(read_env0(home / "after-tcl"), "envmodules"))


def test_publish_on_a_site_clones_its_base_env(site, published, tmp_path):
    """With ``--site-file``, a stack whose site names a base environment is cloned from it, not solved."""
    base_env = site["root"] / "pubtest" / "1.0"
    site_file = tmp_path / "testsite.yaml"
    site_file.write_text(textwrap.dedent(f"""\
        name: testsite
        summary: a site whose base environment is the stack published above
        platforms: [linux-64]
        launcher: "mpirun -n {{ranks}}"
        stacks:
          pubtest:
            base_env: {base_env}
        """))
    root, mods = tmp_path / "sw", tmp_path / "mods"
    proc = run_envtool("publish", "pubtest", "--root", root, "--modulefiles", mods, "--site-file", site_file,
                       "--json", env=site["env"], timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    prefix = root / "pubtest" / "1.0"
    steps = [s["id"] for s in json.loads((prefix / ".envtool" / "create.json").read_text())["steps"]]
    assert any("clone" in s for s in steps), steps
    assert not any(s == "conda-create" for s in steps), steps
    assert "mpirun -n 4 python train.py" in (mods / "pubtest" / "1.0.lua").read_text()
    proc = subprocess.run([str(prefix / "bin" / "python"), "-c", "import hello; print(hello.GREETING)"],
                          capture_output=True, text=True, timeout=scaled(60))
    assert proc.stdout.strip() == "hello from the published stack", proc.stderr
