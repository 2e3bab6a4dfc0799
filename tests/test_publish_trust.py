"""``envtool publish`` at a shared site (issue 23, "Publish like create, and touch only what it made").

Checked the way a site admin works, on real trees, the real group ``envtool-pub``, the real users
``envtool-user`` (a member) and ``envtool-other`` (not) and real Lmod in bash:

* publish installs the spec's lock exactly, as ``create`` does (``install-locked-conda``, then
  "Compare the prefix with the lock"); ``--resolve`` solves;
* a later ``--umask 027`` leaves the shared root's mode alone (others keep earlier stacks);
* ``--group`` leaves a pre-existing ``--root`` and a site's own module directory alone;
* ``--dry-run`` changes nothing (a full listing with modes, owners and times compared);
* ``envtool retire`` removes a version publish made (environment, SBOM, modulefile), leaves the
  others, refuses the default and anything publish did not make, and ``module avail`` stops
  listing it.

The stack is the small conda stack of ``tests/test_publish.py`` (its ``site`` fixture: a local
``file://`` channel, Debian's Python wrapped as a conda package).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from conftest import run_envtool
from envtool.lock import lockio
from test_publish import GROUP, OTHER, USER, as_user, site  # noqa: F401  (site: the module-scoped fixture)
from helpers.speed import scaled


def _gid() -> int:
    import grp

    return grp.getgrnam(GROUP).gr_gid


def listing(top: Path) -> dict:
    """Every path under ``top`` with its type and mode, owner, group, size, mtime and link target."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in [*dirnames, *filenames, ""]:
            p = os.path.join(dirpath, name) if name else dirpath
            st = os.lstat(p)
            out[p] = (st.st_mode, st.st_uid, st.st_gid, st.st_size if not stat.S_ISDIR(st.st_mode) else 0,
                      st.st_mtime_ns, os.readlink(p) if stat.S_ISLNK(st.st_mode) else None)
    return out


def pub(site, root, mods, *extra, spec="pubtest", timeout=900):  # noqa: F811
    return run_envtool("publish", spec, "--root", root, "--modulefiles", mods, *extra, env=site["env"],
                       timeout=timeout)


@pytest.fixture(scope="module")
def world(site):  # noqa: F811
    """The ``site`` of test_publish plus the spec's own lock (``pubtest.conda-lock.yml`` beside it), a
    second spec ``pubtwo`` and a 2.0 version of ``pubtest`` in a directory of its own."""
    specs = Path(site["env"]["ENVTOOL_SPEC_PATH"])
    lock = specs / "pubtest.conda-lock.yml"
    proc = run_envtool("lock", "pubtest", "-o", lock, env=site["env"], timeout=scaled(600))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = (specs / "pubtest.yaml").read_text()
    (specs / "pubtwo.yaml").write_text(text.replace("name: pubtest", "name: pubtwo"))
    two = site["base"] / "specs-2.0"
    two.mkdir()
    (two / "pubtest.yaml").write_text(text.replace('version: "1.0"', 'version: "2.0"'))
    os.chmod(site["base"], 0o755)
    return dict(site, lock=lock, spec2=two / "pubtest.yaml")


def test_publish_installs_the_spec_lock_like_create(world):
    root, mods = world["base"] / "lock" / "sw", world["base"] / "lock" / "mods"
    proc = pub(world, root, mods, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    prefix = root / "pubtest" / "1.0"
    made = json.loads((prefix / ".envtool" / "create.json").read_text())
    ids = [s["id"] for s in made["steps"]]
    assert "install-locked-conda" in ids and "verify-lock" in ids and "conda-create" not in ids, ids
    assert made["results"]["verify-lock"]["ok"] is True, made["results"]["verify-lock"]
    (stack,) = json.loads(proc.stdout)["stacks"]
    assert stack["lock"]["file"] == str(world["lock"]) and "exactly as locked" in stack["lock"]["reason"], stack
    assert "verify-lock: Compare the prefix with the lock" in stack["steps"], stack["steps"]
    # the prefix holds exactly the locked packages (its own lock, written after the install, agrees)
    want = {(p.key[1], p.version, p.sha256) for p in lockio.read_lock(world["lock"]).packages}
    got = {(p.key[1], p.version, p.sha256) for p in lockio.read_lock(prefix / "conda-lock.yml").packages}
    assert want and got == want
    assert json.loads((prefix / ".envtool" / "publish.json").read_text())["lock"] == str(world["lock"])
    # the text output says so too; --resolve solves as on create
    proc = pub(world, root, mods, "--force", "--resolve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    assert "--resolve: packages solved afresh" in out, out
    steps = [s["id"] for s in json.loads((prefix / ".envtool" / "create.json").read_text())["steps"]]
    assert "conda-create" in steps and "verify-lock" not in steps, steps
    # --lock names a lock; --lock with --resolve is a usage error, nothing touched
    before = listing(world["base"] / "lock")
    proc = pub(world, root, mods, "--force", "--lock", world["lock"], "--resolve", "--json")
    assert proc.returncode == 2 and "--resolve" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert json.loads(proc.stdout)["ok"] is False
    assert listing(world["base"] / "lock") == before


def test_a_later_umask_027_leaves_the_shared_root_alone(world):
    top = world["base"] / "umask"
    root, mods = top / "sw", top / "mods"
    proc = pub(world, root, mods, "--group", GROUP, "--umask", "022")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kept = [root, root / "pubtest", mods, mods / "pubtest"]
    modes = {p: (stat.S_IMODE(os.stat(p).st_mode), os.stat(p).st_gid) for p in kept}
    assert modes[root][0] == 0o2755, oct(modes[root][0])
    proc = pub(world, root, mods, "--group", GROUP, "--umask", "027", spec="pubtwo")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {p: (stat.S_IMODE(os.stat(p).st_mode), os.stat(p).st_gid) for p in kept} == modes
    # the new stack follows --umask 027; the earlier one is still everyone's
    assert not os.stat(root / "pubtwo" / "1.0").st_mode & 0o007 and not os.stat(root / "pubtwo").st_mode & 0o007
    script = textwrap.dedent(f"""\
        module use {mods}
        module load pubtest/1.0 || exit 91
        python -c "import hello; print('OTHER', hello.GREETING)" || exit 92
        ls {root}/pubtwo/1.0 >/dev/null 2>&1 && echo "LISTED pubtwo"
        exit 0
        """)
    proc = as_user(OTHER, script, world)
    assert proc.returncode == 0 and "OTHER hello from the published stack" in proc.stdout, proc.stdout + proc.stderr
    assert "LISTED pubtwo" not in proc.stdout


def test_group_leaves_a_pre_existing_root_and_site_module_dir_alone(world):
    top = world["base"] / "group"
    root, mods = top / "sw", top / "mods"
    root.mkdir(parents=True)
    site_mod = mods / "sitemod"
    site_mod.mkdir(parents=True)
    (site_mod / "1.0.lua").write_text('whatis("a module the site wrote")\n')
    for p in (root, mods, site_mod):
        os.chmod(p, 0o755)
    os.chmod(site_mod / "1.0.lua", 0o644)
    before = {p: (os.stat(p).st_mode, os.stat(p).st_gid) for p in (root, mods, site_mod, site_mod / "1.0.lua")}
    assert all(gid != _gid() for _, gid in before.values())
    proc = pub(world, root, mods, "--group", GROUP, "--umask", "027")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {p: (os.stat(p).st_mode, os.stat(p).st_gid) for p in before} == before
    # what publish created is the group's, setgid
    for p in (root / "pubtest", mods / "pubtest"):
        st = os.stat(p)
        assert st.st_gid == _gid() and st.st_mode & stat.S_ISGID, p


def test_dry_run_changes_nothing_and_says_what_it_would_do(world):
    top = world["base"] / "dry"
    top.mkdir()
    root, mods = top / "sw", top / "mods"
    before = listing(world["base"])
    proc = pub(world, root, mods, "--group", GROUP, "--umask", "027", "--default", "--dry-run", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["dry_run"] is True and out["ok"] is True
    changes = {c["path"]: c for c in out["changes"]}
    assert changes[str(root)]["change"] == "create" and changes[str(root)]["mode"] == "drwxr-s---"
    assert changes[str(root)]["group"] == GROUP
    assert changes[str(mods / "pubtest" / "1.0.lua")]["kind"] == "modulefile"
    assert changes[str(mods / "pubtest" / "1.0.lua")]["mode"] == "-r--r--r--"
    assert changes[str(mods / "pubtest" / "default")]["kind"] == "default marker"
    assert changes[str(root / "pubtest" / "1.0")]["change"] == "create"
    (stack,) = out["stacks"]
    assert "verify-lock: Compare the prefix with the lock" in stack["steps"]
    assert listing(world["base"]) == before and not root.exists() and not mods.exists()
    # on a published tree, with --force, in text: still nothing changes
    assert pub(world, root, mods, "--group", GROUP).returncode == 0
    before = listing(world["base"])
    proc = pub(world, root, mods, "--group", GROUP, "--umask", "027", "--force", "--default", "--dry-run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "dry run: nothing was changed" in proc.stdout and "would replace" in proc.stdout, proc.stdout
    assert f"keep           directory        {root}" in proc.stdout, proc.stdout
    assert listing(world["base"]) == before


def _avail(world, mods) -> str:
    proc = as_user(USER, f"module use {mods}\nmodule -t avail pubtest 2>&1\nmodule load pubtest && "
                         "python -c 'import sys; print(\"LOADED\", sys.prefix)'", world)
    return proc.stdout + proc.stderr


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_retire_removes_only_what_publish_made_and_refuses_the_default(world):
    top = world["base"] / "retire"
    root, mods = top / "sw", top / "mods"
    assert pub(world, root, mods, "--group", GROUP).returncode == 0
    proc = pub(world, root, mods, "--group", GROUP, "--default", spec=str(world["spec2"]))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    one, two = root / "pubtest" / "1.0", root / "pubtest" / "2.0"
    seen = _avail(world, mods)
    assert "pubtest/1.0" in seen and "pubtest/2.0" in seen and f"LOADED {two}" in seen, seen
    retire = lambda *a: run_envtool("retire", *a, "--root", root, "--modulefiles", mods, env=world["env"])  # noqa: E731

    # the default is refused (nothing removed); a dry run removes nothing
    before = listing(top)
    proc = retire("pubtest/2.0")
    assert proc.returncode == 2 and "default of pubtest" in proc.stderr and "--force-default" in proc.stderr, \
        proc.stdout + proc.stderr
    proc = retire("pubtest/1.0", "--dry-run", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    removed = json.loads(proc.stdout)["removed"]
    assert set(removed) == {str(one), str(mods / "pubtest" / "1.0.lua"), str(root / "pubtest" / "1.0.cdx.json")}
    assert listing(top) == before

    # not made by publish: a directory without the marker, a marker naming another module
    squat = root / "pubtest" / "0.9"
    (squat / ".envtool").mkdir(parents=True)
    (squat / "thesis.tex").write_text("mine")
    proc = retire("pubtest/0.9")
    assert proc.returncode == 2 and "not published by envtool" in proc.stderr, proc.stderr
    (squat / ".envtool" / "publish.json").write_text(json.dumps({"module": "other/1", "prefix": "/elsewhere"}))
    proc = retire("pubtest/0.9", "--json")
    assert proc.returncode == 2 and json.loads(proc.stdout)["ok"] is False, proc.stdout + proc.stderr
    assert (squat / "thesis.tex").read_text() == "mine"
    shutil.rmtree(squat)

    proc = retire("pubtest/1.0")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not os.path.lexists(one) and not (mods / "pubtest" / "1.0.lua").exists()
    assert not (root / "pubtest" / "1.0.cdx.json").exists()
    assert (two / ".envtool" / "publish.json").is_file() and (mods / "pubtest" / "2.0.lua").is_file()
    assert sorted(p.name for p in (root / "pubtest").iterdir()) == ["2.0", "2.0.cdx.json"]
    assert sorted(p.name for p in (mods / "pubtest").iterdir()) == ["2.0.lua", "default"]
    seen = _avail(world, mods)
    assert "pubtest/1.0" not in seen and "pubtest/2.0" in seen and f"LOADED {two}" in seen, seen
    proc = as_user(USER, f"module use {mods}\nmodule load pubtest/1.0 && echo LOADED-1.0", world)
    assert "LOADED-1.0" not in proc.stdout, proc.stdout + proc.stderr

    # --force-default retires the default and its marker
    proc = retire("pubtest/2.0", "--force-default")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not os.path.lexists(two) and not os.listdir(mods / "pubtest") and not os.listdir(root / "pubtest")
    assert "pubtest/2.0" not in _avail(world, mods)


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_an_interrupted_retire_leaves_the_version_or_nothing(world):
    """SIGTERM at several moments of a retire: afterwards the version is either whole (every file
    there, its modulefile too) or gone from view; what an interrupted retire renamed aside is hidden
    and the next retire removes it."""
    top = world["base"] / "interrupt"
    root, mods = top / "sw", top / "mods"
    prefix = root / "pubtest" / "1.0"
    outcomes = set()
    for delay in (0.1, 0.3, 0.5, 0.7, 0.9, 1.2):
        if not prefix.exists():
            assert pub(world, root, mods).returncode == 0
        files = sorted(str(p.relative_to(prefix)) for p in prefix.rglob("*"))
        env = dict(os.environ, **world["env"], PYTHONFAULTHANDLER="1")  # SIGABRT: every thread's stack
        proc = subprocess.Popen(["python3", "-m", "envtool", "retire", "pubtest/1.0", "--root", str(root)],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=Path(__file__).resolve().parent.parent)
        time.sleep(delay)
        proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=scaled(120))
        except subprocess.TimeoutExpired:  # say where it hangs: faulthandler prints the stacks on SIGABRT
            proc.send_signal(signal.SIGABRT)
            out, err = proc.communicate(timeout=scaled(30))
            pytest.fail(f"retire still running {scaled(120):.0f} s after SIGTERM at {delay} s:\n{err}")
        assert proc.returncode in (0, 130, -signal.SIGTERM), (proc.returncode, out, err)
        assert "Traceback" not in err, err
        visible = [p for p in (*(root / "pubtest").iterdir(), *(mods / "pubtest").iterdir())
                   if not p.name.startswith(".")]
        if prefix.exists():
            assert sorted(str(p.relative_to(prefix)) for p in prefix.rglob("*")) == files
            assert (mods / "pubtest" / "1.0.lua").is_file()
            outcomes.add("kept")
        else:
            assert visible == [], visible
            outcomes.add("gone")
        hidden = [p.name for p in (*(root / "pubtest").iterdir(), *(mods / "pubtest").iterdir())
                  if p.name.startswith(".")]
        assert all(".envtool-retire-" in n for n in hidden), hidden
    # the next retire sweeps whatever an interrupted one left aside
    if not prefix.exists():
        assert pub(world, root, mods).returncode == 0
    proc = run_envtool("retire", "pubtest/1.0", "--root", root, env=world["env"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert os.listdir(root / "pubtest") == [] and os.listdir(mods / "pubtest") == [], \
        (os.listdir(root / "pubtest"), os.listdir(mods / "pubtest"))


@pytest.mark.slow  # 8-10 s with two workers: the full suite only (tests/README.md, fast tier)
def test_retire_a_tcl_default_and_bad_input(world):
    """Environment Modules' ``.version`` marks the default too: refused, then removed with --force-default;
    a bad NAME/VERSION or a version never published is exit 2 with a message, never a traceback."""
    top = world["base"] / "retire-tcl"
    root, mods = top / "sw", top / "mods"
    proc = pub(world, root, mods, "--format", "tcl", "--default")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (mods / "pubtest" / ".version").is_file() and (mods / "pubtest" / "1.0").is_file()
    retire = lambda *a: run_envtool("retire", *a, "--root", root, env=world["env"])  # noqa: E731
    proc = retire("pubtest/1.0")
    assert proc.returncode == 2 and ".version" in proc.stderr and "--force-default" in proc.stderr, proc.stderr
    assert (root / "pubtest" / "1.0").is_dir()
    proc = retire("pubtest/1.0", "--force-default", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["default"] == str(mods / "pubtest" / ".version") and out["ok"] is True
    assert os.listdir(mods / "pubtest") == [] and os.listdir(root / "pubtest") == []
    for bad in ("pubtest", "../etc/1.0", "pubtest/default", "pubtest/1.0\nx", "pubtest/9.9"):
        proc = retire(bad)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr and "error" in proc.stderr, (bad, proc.stderr)


def test_publishing_cpu_horovod_would_install_its_committed_lock(tmp_path):
    """The finding as filed: ``publish cpu-horovod`` solved afresh (``Install pip packages: torch==… with
    uv``, no compare step). Its dry run (real spec, real committed lock, this machine's interpreter;
    nothing is built) now plans the locked install and the compare step, exactly as ``create`` does."""
    repo = Path(__file__).resolve().parent.parent
    env = {"ENVTOOL_CACHE_DIR": str(tmp_path / "cache")}
    proc = run_envtool("publish", "cpu-horovod", "--root", tmp_path / "sw", "--modulefiles", tmp_path / "mods",
                       "--site", "local", "--dry-run", "--json", env=env, timeout=scaled(300))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (stack,) = json.loads(proc.stdout)["stacks"]
    assert stack["lock"]["file"] == str(repo / "lockfiles" / "cpu-horovod.conda-lock.yml"), stack["lock"]
    ids = [s.split(":")[0] for s in stack["steps"]]
    assert "install-locked-pip" in ids and "verify-lock" in ids and "pip-install" not in ids, ids
    assert ids.index("install-locked-pip") < ids.index("verify-lock") < ids.index("validate"), ids
    plan = json.loads(run_envtool("plan", "cpu-horovod", "--site", "local", "--prefix", tmp_path / "sw" / "x",
                                  "--json", env=env, timeout=scaled(300)).stdout)
    assert ids == [s["id"] for s in plan["steps"]]  # one planner: the steps create would run
    assert not (tmp_path / "sw").exists() and not (tmp_path / "mods").exists()
