"""Installing envtool as a user without root, the way the README says (issue 38).

The README's Install section marks each block of lines with an HTML comment
(``<!-- install:NAME -->``); the docs repeat the same blocks. The slow test runs the blocks
*verbatim* as an unprivileged user with no pip configuration (``PIP_CONFIG_FILE=/dev/null``: this
machine's pip.conf points at local wheel folders and indexes a user elsewhere does not have), from a
copy of this checkout the user owns: the venv route and the uv route each in a home of their own,
then the ``PATH`` line and the bash and zsh completion lines, and the installed ``envtool`` lists
specs, plans from the lock its wheel carries and completes in a bash that has no bash-completion
package loaded. The ``pip install --user`` line the README used to give fails here with
``externally-managed-environment`` (PEP 668, https://peps.python.org/pep-0668/); the test shows
that and the fast tests keep it out of the README and the docs.

The same user then does the main job (the README's quick start): ``envtool lock cpu-horovod`` and
``envtool create cpu-horovod``. PyTorch's CPU builds (``torch==2.13.0+cpu``) are on
``https://download.pytorch.org/whl/cpu``, which this machine cannot reach (only PyPI, Debian and npm
are), so the test serves the very same wheel under its public file name from a simple index on
loopback (the PEP 503 layout of PyTorch's index: project page ``whl/cpu/torch/``, files in
``whl/cpu/``) and tells envtool it mirrors the public one (``ENVTOOL_INDEX_MIRRORS``); the lock must
still name the public URL. Without that mirror, ``create`` must say which index has torch. Horovod
comes from a site cache published from this run's build (``envtool cache publish``): nothing compiles.

Not run: ``pipx install .`` (pipx is not installed here; installing it first would be another
install of the same kind as the venv route, about 20 s more).
"""
import functools
import hashlib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import tomllib
import zipfile
from pathlib import Path
from urllib.parse import quote, unquote

import pytest

from conftest import REPO, run_envtool
from envtool.lock import lockio
from helpers.speed import scaled

USER = "envtool-other"
#: the pages that carry install blocks; each block must be the README's block of the same name
PAGES = ("README.md", "docs/getting-started.md", "docs/index.md")
#: ``<!-- install:NAME -->`` then a ```sh fenced block: (NAME, the block's lines)
BLOCK = re.compile(r"^<!-- install:([a-z-]+) -->\n```sh\n(.*?)^```$", re.M | re.S)


def install_blocks(page: str = "README.md") -> dict:
    """NAME → the text of the ``<!-- install:NAME -->`` block of ``page`` (a path under the checkout).

    Raises:
        AssertionError: a name appears twice.
    """
    found = BLOCK.findall((REPO / page).read_text(encoding="utf-8"))
    names = [n for n, _ in found]
    assert len(names) == len(set(names)), f"{page}: an install block name appears twice: {names}"
    return dict(found)


def test_readme_marks_every_install_route_and_the_docs_repeat_it_exactly():
    readme = install_blocks()
    assert set(readme) == {"uv", "pipx", "venv", "path", "completion-bash", "completion-zsh"}, sorted(readme)
    assert readme["uv"].strip() == "uv tool install ."
    assert readme["pipx"].strip() == "pipx install ."
    for page in PAGES[1:]:
        blocks = install_blocks(page)
        assert blocks, f"{page} has no install block"
        for name, text in blocks.items():
            assert text == readme.get(name), f"{page}: block {name!r} differs from the README's"
    # the landing page gives an install command
    assert {"uv", "venv"} <= set(install_blocks("docs/index.md"))


def test_no_page_offers_pip_install_user_for_envtool():
    """``python3 -m pip install --user .`` fails with externally-managed-environment on Debian 12,
    Ubuntu 23.04 and later (PEP 668); no page may offer it (or ``pip install --user`` of a wheel)."""
    for page in PAGES:
        text = (REPO / page).read_text(encoding="utf-8")
        assert not re.search(r"pip install --user (\.|envtool)", text), page


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(REPO)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (found,) = out.glob("envtool_hpc-*.whl")
    return found


def test_distribution_name_is_ours_and_the_command_stays():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["name"] == "envtool-hpc"      # `envtool` on PyPI is another project (2015)
    assert project["scripts"]["envtool"] == "envtool.cli.entry:entry"


@pytest.mark.slow  # builds the wheel
def test_wheel_carries_specs_sites_lockfiles_and_completions(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for kind, pattern in (("specs", "*.yaml"), ("sites", "*.yaml"), ("lockfiles", "*.yml")):
        for f in (REPO / kind).glob(pattern):
            assert f"envtool/_bundled/{kind}/{f.name}" in names, f
    assert "envtool/_bundled/completions/envtool.bash" in names
    assert "envtool/_bundled/completions/_envtool" in names
    assert "envtool/probes/imports.py" in names


def _as_user(script: str, home: Path, path: str = "/usr/local/bin:/usr/bin:/bin", timeout=None, extra=None):
    """Run ``script`` with bash as :data:`USER` in a bare environment: ``HOME``, ``PATH``, no pip
    configuration (``PIP_CONFIG_FILE=/dev/null`` reads no pip.conf) and none of this process's
    ``PIP_*``/``UV_*`` settings. Only the TLS trust of this machine goes along (``SSL_CERT_FILE``,
    when set: its HTTPS goes through a proxy whose certificate authority is in that file, as a site's
    would be; pip here reads the system store anyway, uv only that variable)."""
    env = {"HOME": str(home), "PATH": path, "LANG": "C.UTF-8", "USER": USER, "PIP_CONFIG_FILE": "/dev/null"}
    if os.environ.get("SSL_CERT_FILE"):
        env["SSL_CERT_FILE"] = os.environ["SSL_CERT_FILE"]
    env.update(extra or {})
    runuser = shutil.which("runuser") or "/usr/sbin/runuser"
    return subprocess.run([runuser, "-u", USER, "--", "env", "-i", *[f"{k}={v}" for k, v in env.items()],
                           "bash", "--noprofile", "--norc", "-c", script], capture_output=True, text=True,
                          timeout=timeout or scaled(600), cwd=str(home))


def _copy_checkout(dest: Path) -> None:
    """This checkout's files as a ``git clone`` would have them (tracked and new unignored files)."""
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, text=True, check=True).stdout.split("\0")
    for rel in filter(None, listed):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def _chown_tree(top: Path) -> None:
    for root, dirs, files in os.walk(top):
        for name in (root, *(os.path.join(root, n) for n in dirs + files)):
            os.lchown(name, *_ids())


def _ids():
    import pwd

    entry = pwd.getpwnam(USER)
    return entry.pw_uid, entry.pw_gid


@pytest.fixture(scope="module")
def readme_install():
    """The README's install blocks run verbatim as :data:`USER`: ``{base, checkout, venv_home,
    uv_home, pep668, zsh}`` (each home has envtool in ``~/.local/bin``); removed afterwards."""
    if subprocess.run(["id", USER], capture_output=True).returncode != 0:
        pytest.fail(f"user {USER} is missing: run tests/setup.d/publish.sh as root")
    blocks = install_blocks()
    base = Path("/var/tmp") / f"envtool-readme-install-{os.getpid()}"
    base.mkdir(mode=0o755)
    try:
        checkout, venv_home, uv_home = base / "envtool", base / "home-venv", base / "home-uv"
        for d in (checkout, venv_home, uv_home):
            d.mkdir()
        _copy_checkout(checkout)
        _chown_tree(base)
        stdlib = subprocess.run(["/usr/bin/python3", "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
                                capture_output=True, text=True, check=True).stdout.strip()
        pep668 = (Path(stdlib) / "EXTERNALLY-MANAGED").is_file()
        zsh = shutil.which("zsh", path="/usr/bin:/bin")
        after_install = f"""
            cd "$HOME"
            command -v envtool > where.txt
            envtool specs > specs.txt
            envtool plan cpu-horovod --prefix "$HOME/envs/cpu-horovod" > plan.txt
            """
        # the venv route, then PATH and completion, in the first home
        proc = _as_user(f"""set -e
            id -u | grep -vx 0
            cd {checkout}
            {'if python3 -m pip install --user . > "$HOME/pep668.txt" 2>&1; then exit 90; fi' if pep668 else ''}
            {blocks["venv"]}
            {blocks["path"]}
            {after_install}
            {blocks["completion-bash"]}
            bash --norc --noprofile -c '! type _init_completion 2>/dev/null && source ~/.bashrc && complete -p envtool >/dev/null &&
                COMP_WORDS=(envtool sp); COMP_CWORD=1; _shtab_envtool envtool sp envtool && printf "%s\\n" "${{COMPREPLY[@]}}"' > bash-complete.txt
            {blocks["completion-zsh"] if zsh else ''}
            {"zsh -f -c 'source ~/.zshrc; print -r -- ${_comps[envtool]}' > zsh-complete.txt" if zsh else ''}
            """, venv_home)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        if pep668:
            assert "externally-managed-environment" in (venv_home / "pep668.txt").read_text()
        # the uv route in a home of its own; uv from the user's PATH, else the uv that envtool's
        # venv got from PyPI (envtool depends on it)
        found = _as_user("command -v uv || true", uv_home).stdout.strip()
        uv_bin = base / "uv-bin"
        uv_bin.mkdir()
        os.symlink(found or venv_home / ".local/share/envtool-hpc/bin/uv", uv_bin / "uv")
        proc_uv = _as_user(f"""set -e
            cd {checkout}
            {blocks["uv"]}
            {blocks["path"]}
            {after_install}
            """, uv_home, path=f"{uv_bin}:/usr/local/bin:/usr/bin:/bin")
        assert proc_uv.returncode == 0, proc_uv.stdout + proc_uv.stderr
        yield {"base": base, "checkout": checkout, "venv_home": venv_home, "uv_home": uv_home, "pep668": pep668,
               "zsh": zsh}
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow  # installs envtool's dependencies from PyPI twice (about 25 s)
def test_readme_install_lines_work_as_written_for_a_user_without_root(readme_install):
    base, checkout, venv_home, uv_home, pep668, zsh = (readme_install[k] for k in (
        "base", "checkout", "venv_home", "uv_home", "pep668", "zsh"))
    for home in (venv_home, uv_home):
        assert (home / "where.txt").read_text().strip() == f"{home}/.local/bin/envtool"
        specs = (home / "specs.txt").read_text()
        assert "cpu-horovod" in specs and "open-ce-1.1.3" in specs
        plan = (home / "plan.txt").read_text()
        assert "Build Horovod" in plan
        # the plan installs the lock the wheel carries, not a file of the checkout
        assert "_bundled/lockfiles/cpu-horovod.conda-lock.yml" in plan
        assert str(checkout) not in plan and str(REPO) not in plan
        assert not (home / "envs").exists()
    assert os.path.realpath(uv_home / ".local/bin/envtool").startswith(str(uv_home))
    installed = venv_home / ".local/share/bash-completion/completions/envtool"
    assert installed.read_text() == (REPO / "completions" / "envtool.bash").read_text()
    completed = (venv_home / "bash-complete.txt").read_text().split()
    assert completed == ["specs"], completed
    if zsh:
        assert (venv_home / ".zfunc/_envtool").read_text() == (REPO / "completions" / "_envtool").read_text()
        assert (venv_home / "zsh-complete.txt").read_text().strip() == "_envtool"


# --- the main job as that user (issue 38): a lock that travels, from an index our machines lack ---

PUBLIC = "https://download.pytorch.org/whl/cpu"
COMMITTED = REPO / "lockfiles" / "cpu-horovod.conda-lock.yml"


def _torch_entry():
    lock = lockio.read_lock(COMMITTED)
    return next(p for p in lock.packages if p.key[1] == "torch")


@pytest.fixture(scope="module")
def pytorch_mirror(tmp_path_factory):
    """A loopback HTTP index holding the locked torch wheel under its public name: ``(URL, wheel name)``."""
    entry = _torch_entry()
    name = unquote(entry.url.rsplit("/", 1)[-1])
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
def site_cache(cpu_horovod_env):
    """A site cache of this run's Horovod build (``envtool cache publish`` by root, world-readable)."""
    cache = Path("/var/tmp") / f"envtool-first-hour-cache-{os.getpid()}"
    try:
        proc = run_envtool("cache", "publish", "--to", cache, "--json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        subprocess.run(["chmod", "-R", "o+rX", str(cache)], check=True)
        yield cache
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def _researcher(script: str, readme_install, extra=None, timeout=None):
    """``script`` as the user of the README's venv route (``envtool`` on its PATH)."""
    home = readme_install["venv_home"]
    return _as_user(script, home, path=f"{home}/.local/bin:/usr/local/bin:/usr/bin:/bin", extra=extra,
                    timeout=timeout or scaled(1800))


def test_committed_lock_names_the_public_url_of_the_cpu_torch():
    entry = _torch_entry()
    assert entry.version == "2.13.0+cpu"
    assert entry.url == f"{PUBLIC}/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert dict(lockio.read_lock(COMMITTED).pip_indexes) == {"torch": PUBLIC}


@pytest.mark.slow
def test_bare_user_without_the_index_is_told_which_index_has_torch(readme_install):
    home = readme_install["venv_home"]
    proc = _researcher('envtool create cpu-horovod --prefix "$HOME/envs/no-index"', readme_install)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    err = proc.stderr
    assert "torch is on https://download.pytorch.org/whl/cpu" in err, err
    assert "constraints refuse" not in err
    assert "index_mirrors" in err and "log:" in err
    assert not (home / "envs" / "no-index").exists()


@pytest.mark.slow
def test_bare_user_locks_and_creates_the_main_environment(readme_install, site_cache, pytorch_mirror):
    home, cache = readme_install["venv_home"], site_cache
    mirror, name = pytorch_mirror
    env = {"ENVTOOL_INDEX_MIRRORS": f"{PUBLIC}={mirror}", "ENVTOOL_CACHE_PATH": str(cache)}
    proc = _researcher("set -e; id -u | grep -vx 0; pip config list | grep -v '^:env:.config-file=' | grep . && exit 9 || true\n"
                    'envtool lock cpu-horovod -o "$HOME/cpu.conda-lock.yml" --json > lock.json\n'
                    'envtool create cpu-horovod --prefix "$HOME/envs/hvd" --json > create.json\n',
                    readme_install, extra=env)
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
