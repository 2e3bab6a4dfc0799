"""A researcher's first hour outside our machines (issue 38): an unprivileged user whose pip has no
configuration at all (no wheel folder, no extra index: ``PIP_CONFIG_FILE=/dev/null``) locks the main
spec and creates the main environment from the committed lock.

PyTorch's CPU builds (``torch==2.13.0+cpu``) are on ``https://download.pytorch.org/whl/cpu``, which
this machine cannot reach (only PyPI, Debian and npm are), so the test serves the very same wheel
under its public file name from a simple index on loopback (PEP 503 layout of PyTorch's index:
project page ``whl/cpu/torch/``, files in ``whl/cpu/``) and tells envtool it mirrors the public
one (``ENVTOOL_INDEX_MIRRORS``). The lock must still name the public URL. Horovod comes from a site
cache published from this run's build (``envtool cache publish``), so nothing compiles here.

Slow: installs envtool and its dependencies from PyPI for the user, then torch for the user.
"""
from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import quote

import pytest

from conftest import REPO, run_envtool
from envtool.lock import lockio

pytestmark = pytest.mark.slow

USER = "envtool-other"
PUBLIC = "https://download.pytorch.org/whl/cpu"
COMMITTED = REPO / "lockfiles" / "cpu-horovod.conda-lock.yml"


def _torch_entry():
    lock = lockio.read_lock(COMMITTED)
    return next(p for p in lock.packages if p.key[1] == "torch")


@pytest.fixture(scope="module")
def pytorch_mirror(tmp_path_factory):
    """A loopback HTTP index holding the locked torch wheel under its public name: ``(URL, wheel name)``."""
    entry = _torch_entry()
    name = entry.url.rsplit("/", 1)[-1]
    from urllib.parse import unquote

    name = unquote(name)
    got = tmp_path_factory.mktemp("torch-download")
    # the wheel as this machine's own pip configuration finds it (a wheel folder here)
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(got),
                           f"torch=={entry.version}"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = got.glob("torch-*.whl")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert digest == entry.sha256, "this machine's torch wheel is not the locked one"
    root = tmp_path_factory.mktemp("pytorch-index")
    files = root / "whl" / "cpu"
    (files / "torch").mkdir(parents=True)
    os.link(wheel, files / name) if os.stat(wheel).st_dev == os.stat(files).st_dev else shutil.copy(wheel, files / name)
    (files / "torch" / "index.html").write_text(
        f'<!DOCTYPE html><html><body><a href="../{quote(name)}#sha256={digest}">{name}</a></body></html>\n')
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/whl/cpu", name
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # the test's output stays readable
        pass


@pytest.fixture(scope="module")
def user_home(cpu_horovod_env, tmp_path_factory):
    """The user's home (in /var/tmp, which the user can reach), with envtool installed in a venv of
    its own from a wheel of this checkout through PyPI, and a site cache holding this run's
    Horovod build (published by root, read-only for the user)."""
    if subprocess.run(["id", USER], capture_output=True).returncode != 0:
        pytest.fail(f"user {USER} is missing: run tests/setup.d/publish.sh as root")
    dist = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(REPO)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = dist.glob("envtool_hpc-*.whl")
    home = Path("/var/tmp") / f"envtool-first-hour-{os.getpid()}"
    home.mkdir(mode=0o755)
    cache = Path("/var/tmp") / f"envtool-first-hour-cache-{os.getpid()}"
    try:
        shutil.copy2(wheel, home / wheel.name)
        shutil.chown(home, user=USER)
        shutil.chown(home / wheel.name, user=USER)
        proc = run_envtool("cache", "publish", "--to", cache, "--json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        subprocess.run(["chmod", "-R", "o+rX", str(cache)], check=True)
        proc = _as_user(f"""set -e
            /usr/bin/python3 -m venv "$HOME/.local/share/envtool-hpc"
            "$HOME/.local/share/envtool-hpc/bin/python" -m pip install -q "$HOME/{wheel.name}"
            """, home)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        yield home, cache
    finally:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)


def _as_user(script: str, home: Path, env=None, timeout=1800) -> subprocess.CompletedProcess:
    """``script`` in bash as the unprivileged user, with no pip configuration and nothing of ours."""
    base = {"HOME": str(home), "USER": USER, "LANG": "C.UTF-8",
            "PATH": f"{home}/.local/share/envtool-hpc/bin:/usr/local/bin:/usr/bin:/bin",
            "PIP_CONFIG_FILE": "/dev/null", "XDG_CACHE_HOME": f"{home}/.cache"}
    base.update(env or {})
    runuser = shutil.which("runuser") or "/usr/sbin/runuser"
    return subprocess.run([runuser, "-u", USER, "--", "env", "-i", *[f"{k}={v}" for k, v in base.items()],
                           "bash", "--noprofile", "--norc", "-c", script], capture_output=True, text=True,
                          timeout=timeout, cwd=str(home))


def test_committed_lock_names_the_public_url_of_the_cpu_torch():
    entry = _torch_entry()
    assert entry.version == "2.13.0+cpu"
    assert entry.url == f"{PUBLIC}/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert dict(lockio.read_lock(COMMITTED).pip_indexes) == {"torch": PUBLIC}


def test_bare_user_without_the_index_is_told_which_index_has_torch(user_home):
    home, _ = user_home
    proc = _as_user('envtool create cpu-horovod --prefix "$HOME/envs/no-index"', home, timeout=900)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    err = proc.stderr
    assert "torch is on https://download.pytorch.org/whl/cpu" in err, err
    assert "constraints refuse" not in err
    assert "index_mirrors" in err and "log:" in err
    assert not (home / "envs" / "no-index").exists()


def test_bare_user_locks_and_creates_the_main_environment(user_home, pytorch_mirror):
    home, cache = user_home
    mirror, name = pytorch_mirror
    env = {"ENVTOOL_INDEX_MIRRORS": f"{PUBLIC}={mirror}", "ENVTOOL_CACHE_PATH": str(cache)}
    proc = _as_user("set -e; id -u | grep -vx 0; pip config list | grep -v '^:env:.config-file=' | grep . && exit 9 || true\n"
                    'envtool lock cpu-horovod -o "$HOME/cpu.conda-lock.yml" --json > lock.json\n'
                    'envtool create cpu-horovod --prefix "$HOME/envs/hvd" --json > create.json\n',
                    home, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    summary = json.loads((home / "lock.json").read_text())
    assert summary["packages"]["linux-64"]["built"] == ["horovod"]
    own = lockio.read_lock(home / "cpu.conda-lock.yml")
    assert own.spec_hash == lockio.read_lock(COMMITTED).spec_hash
    names = {p.key[1]: p for p in own.packages}
    # what the spec asks for, plus what torch and Horovod need, as pip resolved them
    assert {"torch", "setuptools", "wheel", "horovod", "cloudpickle", "psutil", "pyyaml", "cffi"} <= set(names)
    assert "cloudpickle" in dict(names["horovod"].dependencies)
    assert names["horovod"].url == "https://files.pythonhosted.org/packages/e4/86/da559fcc1620ac7831a16ccb2ad3acb477a8da8a631f75a83b6410507210/horovod-0.28.1.tar.gz"
    torch = names["torch"]
    assert torch.url == f"{PUBLIC}/{quote(name)}" and torch.sha256 == _torch_entry().sha256
    text = (home / "cpu.conda-lock.yml").read_text()
    assert "127.0.0.1" not in text and "file:" not in text and str(home) not in text
    assert all(p.url.startswith("https://") for p in own.packages), [p.url for p in own.packages]
    result = json.loads((home / "create.json").read_text())
    assert result["ok"] is True
    assert result["results"]["build-horovod"]["cache_hit"] is True  # from the published site cache
    assert result["results"]["verify-lock"]["ok"] is True
