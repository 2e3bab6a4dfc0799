"""The site twin (tests/twin/make_twin.py): a read-only Open-CE base env made of real software behind a
real Lmod module, met by an unprivileged user.

Set-up (as root): tests/setup.d/twin.sh (patchelf), modules.sh (Lmod), publish.sh (the user
``envtool-user`` and the shared Python ``/opt/envtool-test/venv``). The twin is built once per
machine under ``$ENVTOOL_TWIN_DIR`` (default ``/var/tmp/envtool-twin``: outside ``/root``, so the
unprivileged user can reach it) and reused; building it compiles Horovod once (Gloo only).

``ENVTOOL_TEST_TWIN_TF=1`` (opt-in, off in CI: about 1.7 GB more twin and a Horovod compile with
TensorFlow) adds the TensorFlow twin (``make_twin.py --tensorflow``, in ``<twin dir>-tf``, sharing the
default twin's compiled Horovod) and its clone test: Horovod rebuilt for TensorFlow and PyTorch.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from test_modulefile import LMOD_INIT

pytestmark = [pytest.mark.slow, pytest.mark.twin]

REPO = Path(__file__).resolve().parent.parent
from helpers.readable import importable_root  # noqa: E402
from helpers.speed import scaled  # noqa: E402
USER = "envtool-user"
USER_VENV = Path(os.environ.get("ENVTOOL_TEST_USER_VENV", "/opt/envtool-test/venv"))


def _missing() -> str:
    import pwd

    if os.geteuid() != 0:
        return "the twin test drops privileges to envtool-user and needs root"
    try:
        pwd.getpwnam(USER)
    except KeyError:
        return f"no user {USER} (tests/setup.d/publish.sh)"
    if not (USER_VENV / "bin" / "python").exists():
        return f"no {USER_VENV} (tests/setup.d/publish.sh)"
    if not LMOD_INIT:
        return "no Lmod (tests/setup.d/modules.sh)"
    if not shutil.which("patchelf"):
        return "no patchelf (tests/setup.d/twin.sh)"
    return ""


@pytest.fixture(scope="session")
def twin():
    why = _missing()
    if why:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return _make_twin(_twin_root())


def _twin_root() -> Path:
    return Path(os.environ.get("ENVTOOL_TWIN_DIR") or "/var/tmp/envtool-twin")


#: the opt-in for the TensorFlow twin and its clone test (tests/README.md)
TWIN_TF = os.environ.get("ENVTOOL_TEST_TWIN_TF") == "1"


@pytest.fixture(scope="session")
def twin_tf(twin):
    """The TensorFlow twin (``make_twin.py --tensorflow``) in ``<twin dir>-tf``; it copies the default
    twin's compiled Horovod instead of compiling it again."""
    if not TWIN_TF:
        pytest.skip("the TensorFlow twin is opt-in: ENVTOOL_TEST_TWIN_TF=1 (tests/README.md)")
    root = _twin_root()
    return _make_twin(root.with_name(root.name + "-tf"), "--tensorflow", "--horovod-from", str(root))


def _make_twin(root: Path, *extra: str) -> dict:
    root.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "twin" / "make_twin.py"), "--dir", str(root), "--json",
                           *extra], capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    info = json.loads(proc.stdout)
    # readable by everyone, as a site's software tree is (the base env itself stays read-only)
    subprocess.run(["chmod", "a+rX", str(root), str(root / "sw"), str(root / "sw" / "open-ce")], check=True)
    subprocess.run(["chmod", "-R", "a+rX", *(str(root / d) for d in ("modulefiles", "sites", "specs", "channel",
                                                                       "cache"))], check=True)
    return info


@pytest.fixture
def home():
    d = Path(tempfile.mkdtemp(prefix="envtool-twin-home-", dir="/tmp"))
    d.chmod(0o755)
    shutil.chown(d, USER, USER)
    yield d
    subprocess.run(["chmod", "-R", "u+w", str(d)], check=False)
    shutil.rmtree(d, ignore_errors=True)


def as_user(script: str, home: Path, extra_env=None, timeout=None) -> subprocess.CompletedProcess:
    """``script`` in a clean bash as the unprivileged user, Lmod initialised, cwd ``home``."""
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "LANG": "C", "USER": USER, "MODULEPATH": ""}
    env.update(extra_env or {})
    code = f"source {LMOD_INIT} || exit 90\ncd {home}\n{script}"
    return subprocess.run(["runuser", "-u", USER, "--", "env", "-i", *[f"{k}={v}" for k, v in env.items()],
                           "bash", "--noprofile", "--norc", "-c", code], capture_output=True, text=True,
                          timeout=scaled(600) if timeout is None else timeout)


def test_twin_base_env_is_real_relocatable_and_lacks_mpi(twin):
    base = Path(twin["base_env"])
    # the interpreter finds libpython through an $ORIGIN-relative RUNPATH, not the build prefix
    dyn = subprocess.run(["readelf", "-d", str(base / "bin" / "python3.11")], capture_output=True, text=True,
                         check=True).stdout
    assert "[$ORIGIN/../lib]" in dyn, dyn
    probe = ("import json, sys, sysconfig, torch, numpy, yaml, horovod.torch as hvd; "
             "print(json.dumps({'prefix': sys.prefix, 'cfg': sysconfig.get_config_var('prefix'), "
             "'torch': torch.__version__, 'mpi': hvd.mpi_built(), 'gloo': hvd.gloo_built()}))")
    proc = subprocess.run([str(base / "bin" / "python"), "-c", probe], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "LANG": "C"}, timeout=scaled(300))
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got == {"prefix": str(base), "cfg": str(base), "torch": "2.13.0+cpu", "mpi": False, "gloo": True}
    assert (base / "conda-meta" / "history").is_file()
    assert (base / "etc" / "conda" / "activate.d" / "twin.sh").is_file()
    names = {json.loads(p.read_text())["name"] for p in (base / "conda-meta").glob("*.json")}
    assert {"python", "pytorch", "numpy", "pip", "horovod", "cffi", "psutil", "pyyaml", "cloudpickle"} <= names
    # the python package names no build-machine prefix in its text files
    cfg = next((base / "lib" / "python3.11").glob("_sysconfigdata_*.py")).read_text()
    assert str(Path(sys.base_prefix).resolve()) not in cfg and str(base) in cfg


def test_twin_module_is_usable_and_its_env_read_only_for_a_user(twin, home):
    root = Path(twin["dir"])
    base = Path(twin["base_env"])
    proc = as_user(f"module use {root / 'modulefiles'} && module load {twin['module']} || exit 91\n"
                   "echo \"CONDA_PREFIX=$CONDA_PREFIX\"; command -v python\n"
                   "python -c 'import torch, horovod.torch; print(\"import-ok\")' || exit 92\n"
                   f"touch {base}/written 2>/dev/null && exit 93\n"
                   f"touch {base}/lib/python3.11/site-packages/written 2>/dev/null && exit 94\n"
                   "echo done", home)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"CONDA_PREFIX={base}" in proc.stdout
    assert f"{base}/bin/python" in proc.stdout
    assert "import-ok" in proc.stdout and "done" in proc.stdout


def _tree_digest(root: Path) -> str:
    """sha256 over every path, mode and file content under ``root`` (symlinks by target)."""
    import hashlib

    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        h.update(f"{p.relative_to(root)}\0{st.st_mode}\0".encode())
        if p.is_symlink():
            h.update(os.readlink(p).encode())
        elif p.is_file():
            with open(p, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
    return h.hexdigest()


def _seed_wheel_cache(home: Path) -> None:
    """Give the user's envtool cache the Horovod wheels this machine already built (root's cache),
    so the rebuild in the clone is a cache hit when its key matches (else it compiles)."""
    from envtool.core.paths import cache_root

    src = cache_root() / "horovod-wheels"
    dest = home / "cache" / "horovod-wheels"
    if src.is_dir():
        shutil.copytree(src, dest)
    (home / "cache").mkdir(exist_ok=True)
    subprocess.run(["chown", "-R", f"{USER}:{USER}", str(home / "cache")], check=True)


def test_clone_the_site_module_rebuild_horovod_with_mpi_and_load_the_new_module(twin, home, cpu_horovod_env):
    """The mission's command, as a user meets a site: load the site's module, `envtool create SPEC
    --clone` with no --site, SOURCE or --prefix; Horovod is rebuilt with MPI in the clone.

    The rebuild is a hit in the wheel cache the test hands the user: the cpu-horovod environment's
    compile (``cpu_horovod_env``, awaited here) has the same key (Horovod 0.28.1 with PyTorch 2.13.0,
    Gloo and MPI, Python 3.11, this compiler and Open MPI). Without waiting, whether the clone
    compiled depended on which worker got there first: CI's run compiled (634 s) where a rehearsal
    hit the cache (63 s). The compile itself is the cpu-horovod environment's, tested there."""
    root = Path(twin["dir"])
    base = Path(twin["base_env"])
    before = _tree_digest(base)
    _seed_wheel_cache(home)
    env = {"ENVTOOL_SITE_PATH": str(root / "sites"), "ENVTOOL_SPEC_PATH": str(root / "specs"),
           "ENVTOOL_TWIN_SYSTEM": "twin", "ENVTOOL_CACHE_DIR": str(home / "cache"), "PYTHONPATH": str(importable_root())}
    envtool = f"{USER_VENV}/bin/python -m envtool"
    load = f"module use {root / 'modulefiles'} && module load {twin['module']} || exit 91\n"
    # doctor in the site's env: Horovod lacks MPI; the fix is the clone command
    proc = as_user(load + f"{envtool} doctor --spec {twin['spec']} --only horovod-build --json", home, env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = json.loads(proc.stdout)
    found = found["findings"] if isinstance(found, dict) else found
    hb = next(f for f in found if f["id"] == "horovod-build")
    assert hb["status"] == "fail" and "MPI" in json.dumps(hb), hb
    assert hb["fix"].startswith(f"envtool create {twin['spec']} --clone {base}"), hb
    proc = as_user(load + f"{envtool} create {twin['spec']} --clone --modulefile-root $HOME/mods", home, env,
                   timeout=3000)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]
    prefix = home / ".conda" / "envs" / twin["spec"]
    assert f"environment ready at {prefix}" in proc.stdout
    assert "site: twin (detected: ENVTOOL_TWIN_SYSTEM=twin" in proc.stderr
    assert f"clone source: {base} (the base env of site twin for {twin['spec']})" in proc.stderr
    assert f"prefix: {prefix} (site twin's clone_prefix" in proc.stderr
    out = json.loads((prefix / ".envtool" / "create.json").read_text())
    assert _tree_digest(base) == before, "the source environment changed"
    # conda's horovod went with its record; the pip build is what Python sees
    results = out["results"]
    assert results["build-horovod"]["cache_hit"], results["build-horovod"]
    assert results["validate"]["ok"], results["validate"]
    found_cb = results["validate"]["check_build"]["found"]
    assert "MPI" in json.dumps(found_cb) and results["validate"]["allreduce"]["ok"], found_cb
    assert results["conda-remove-horovod"]["removed"].startswith("horovod 0.28.1")
    assert not list((prefix / "conda-meta").glob("horovod-*.json"))
    names = {json.loads(p.read_text())["name"] for p in (prefix / "conda-meta").glob("*.json")}
    assert {"python", "pytorch", "numpy"} <= names
    import yaml

    locked = {(p["name"], p["manager"]) for p in yaml.safe_load((prefix / "conda-lock.yml").read_text())["package"]}
    assert {("pytorch", "conda"), ("python", "conda"), ("horovod", "pip")} <= locked, locked
    assert ("horovod", "conda") not in locked
    # a fresh shell (the site's module tree on MODULEPATH, as on the site: the new module loads the
    # site's module first): the new module makes the environment usable, MPI included
    mods = home / "mods"
    use = f"module use {root / 'modulefiles'} && module use {mods} && "
    proc = as_user(use + f"module load {twin['spec']} || exit 91\n"
                   "test \"$CONDA_PREFIX\" = " + str(prefix) + " || exit 93\n"
                   "python -c 'import horovod.torch as h; assert h.mpi_built() and h.gloo_built(); print(\"hvd-ok\")'"
                   " || exit 92\n"
                   "mpirun -np 2 python -c 'import torch, horovod.torch as h; h.init(); "
                   "print(\"sum\", h.allreduce(torch.ones(1), op=h.Sum).item())'", home, timeout=scaled(600))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "hvd-ok" in proc.stdout and proc.stdout.count("sum 2.0") == 2, proc.stdout
    # doctor in the new env passes
    proc = as_user(use + f"module load {twin['spec']} || exit 91\n"
                   f"{envtool} doctor --spec {twin['spec']} --only horovod-build --json", home, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_clone_the_tensorflow_twin_builds_horovod_for_both_frameworks_and_validates_both(twin_tf, home):
    """Opt-in (``ENVTOOL_TEST_TWIN_TF=1``): the twin's base env holds ``tensorflow-base`` beside
    ``pytorch``, as Open-CE's does; ``envtool create --clone`` rebuilds Horovod with TensorFlow, PyTorch,
    Gloo and MPI (a compile unless the user's wheel cache has that key), ``horovodrun --check-build``
    in the new module shows ``[X] TensorFlow`` and ``[X] PyTorch``, and validation ran a 2-rank
    allreduce through each framework's binding with each controller. Prints the check-build output
    and create's ``--json`` envelope (run with ``-s`` to keep them)."""
    root = Path(twin_tf["dir"])
    base = Path(twin_tf["base_env"])
    assert twin_tf["tensorflow"] is True
    names = {json.loads(p.read_text())["name"] for p in (base / "conda-meta").glob("*.json")}
    assert {"tensorflow-base", "pytorch", "keras", "horovod"} <= names, names
    before = _tree_digest(base)
    _seed_wheel_cache(home)
    env = {"ENVTOOL_SITE_PATH": str(root / "sites"), "ENVTOOL_SPEC_PATH": str(root / "specs"),
           "ENVTOOL_TWIN_SYSTEM": "twin", "ENVTOOL_CACHE_DIR": str(home / "cache"), "PYTHONPATH": str(importable_root())}
    envtool = f"{USER_VENV}/bin/python -m envtool"
    load = f"module use {root / 'modulefiles'} && module load {twin_tf['module']} || exit 91\n"
    proc = as_user(load + f"{envtool} create {twin_tf['spec']} --clone --modulefile-root $HOME/mods --json", home,
                   env, timeout=scaled(5400))
    print("=== create --json ===\n" + proc.stdout + "\n=== end create --json ===")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]
    prefix = home / ".conda" / "envs" / twin_tf["spec"]
    # first what the new module's horovodrun says (printed before anything else can fail: it took a compile)
    use = f"module use {root / 'modulefiles'} && module use {home / 'mods'} && "
    cb = as_user(use + f"module load {twin_tf['spec']} || exit 91\nhorovodrun --check-build", home,
                 timeout=scaled(600))
    print("=== horovodrun --check-build ===\n" + cb.stdout + cb.stderr + "=== end horovodrun --check-build ===")
    # with --json the envelope is on stdout and the progress lines are not printed
    out = json.loads(proc.stdout)
    assert out["ok"] and out["prefix"] == str(prefix), out
    assert out["results"]["clone-install"]["source"] == str(base), out["results"]["clone-install"]
    assert _tree_digest(base) == before, "the source environment changed"
    results = json.loads((prefix / ".envtool" / "create.json").read_text())["results"]
    v = results["validate"]
    assert v["ok"], v
    found = v["check_build"]["found"]
    assert found["frameworks"]["TensorFlow"] is True and found["frameworks"]["PyTorch"] is True, found
    assert found["controllers"] == {"MPI": True, "Gloo": True}, found
    runs = {(a["framework"], a["controller"]): a for a in v["allreduces"]}
    assert sorted(runs) == [("pytorch", "gloo"), ("pytorch", "mpi"), ("tensorflow", "gloo"),
                            ("tensorflow", "mpi")], v["allreduces"]
    assert all(r["ok"] for r in runs.values()), runs
    assert [m["module"] for m in v["imports"]["modules"]] == ["tensorflow", "horovod.tensorflow",
                                                              "horovod.tensorflow.keras", "torch", "horovod.torch"]
    assert v["imports"]["unexpected"] == [], v["imports"]
    assert v["dataloader"]["ok"], v["dataloader"]
    assert results["conda-remove-horovod"]["removed"].startswith("horovod 0.28.1")
    # the new module: horovodrun --check-build marks both frameworks
    assert cb.returncode == 0, cb.stdout + cb.stderr
    assert "[X] TensorFlow" in cb.stdout and "[X] PyTorch" in cb.stdout, cb.stdout
