"""``envtool pack`` (issue 25, item 1): one file from a real environment, with its lockfile and SBOM.

The environments are real and made by ``envtool create``: a conda environment from a local
``file://`` channel (tests/helpers/conda_channel.py; one package holds a text file with the build
prefix placeholder, which conda-unpack must rewrite) and a venv with a pip package from a local
wheel that has a console script (its ``#!`` line names the prefix). Each pack is then used where
the source environment cannot be seen: unpacked (tar) or mounted with squashfuse (squashfs) inside
a private mount namespace (``unshare --mount``) in which a tmpfs hides the source prefix.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from conftest import REPO, run_envtool
from helpers import wheels
from helpers.conda_channel import TEXT_PLACEHOLDER, PackageDef, build_channel, python_package
from helpers.speed import scaled

SETUP = REPO / "tests" / "setup.d" / "pack.sh"


def _tools() -> str:
    """'' when mksquashfs, unsquashfs and squashfuse are here (installed by tests/setup.d/pack.sh as root)."""
    need = ("mksquashfs", "unsquashfs", "squashfuse")
    if all(shutil.which(t) for t in need):
        return ""
    if os.geteuid() == 0:
        subprocess.run(["bash", str(SETUP)], capture_output=True, text=True, timeout=900)
    missing = [t for t in need if not shutil.which(t)]
    return f"missing {', '.join(missing)} (tests/setup.d/pack.sh installs them as root)" if missing else ""


@pytest.fixture(scope="module")
def tools():
    why = _tools()
    if why:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def conda_env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pack-conda")
    url = build_channel(tmp / "ch", [
        python_package(),
        PackageDef("libfoo", "1.0", files={"share/libfoo/where.txt": f"prefix={TEXT_PLACEHOLDER}\n"}),
    ])
    specs = tmp / "specs"
    specs.mkdir()
    (specs / "pack-conda.yaml").write_text(
        f"name: pack-conda\nsummary: test\nplatforms: [linux-64]\nengine: conda\nchannels: [\"{url}\"]\n"
        "packages:\n  conda: [python, libfoo]\nhorovod:\n  install: none\n")
    target = tmp / "env"
    proc = run_envtool("create", "pack-conda", "--prefix", target,
                       env={"ENVTOOL_SPEC_PATH": str(specs), "ENVTOOL_CACHE_DIR": str(tmp / "cache")}, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (target / "share/libfoo/where.txt").read_text() == f"prefix={target}\n"
    return target


@pytest.fixture(scope="module")
def venv_env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pack-venv")
    whl = tmp / "wheels"
    whl.mkdir()
    wheels.make_wheel(whl, "hellopkg", "1.0", {"hellopkg/__init__.py":
                                               "import sys\ndef main():\n    print('hello from', sys.prefix)\n"},
                      console_scripts=["hello-pack = hellopkg:main"])
    specs = tmp / "specs"
    specs.mkdir()
    (specs / "pack-venv.yaml").write_text("name: pack-venv\nsummary: test\nplatforms: [linux-64]\nengine: venv\n"
                                          "packages:\n  pip: [hellopkg==1.0]\nhorovod:\n  install: none\n")
    target = tmp / "env"
    proc = run_envtool("create", "pack-venv", "--prefix", target,
                       env={"ENVTOOL_SPEC_PATH": str(specs), "ENVTOOL_CACHE_DIR": str(tmp / "cache"),
                            "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(whl), "UV_OFFLINE": "1"}, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (target / "bin" / "hello-pack").read_text().startswith(f"#!{target}/bin/python")
    return target


def pack(env, fmt, out, *extra, timeout=None):
    proc = run_envtool("pack", env, "--format", fmt, "-o", out, "--json", *extra,
                       timeout=scaled(600) if timeout is None else timeout)
    data = json.loads(proc.stdout)
    return proc, data


def hidden(prefix: Path, script: str, timeout=None) -> subprocess.CompletedProcess:
    """Run ``script`` (bash) in a private mount namespace where an empty tmpfs covers ``prefix``."""
    inner = f"mount -t tmpfs -o size=1m envtool-hide {prefix} && test -z \"$(ls -A {prefix})\" && {script}"
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "bash", "-ec", inner],
                          capture_output=True, text=True, timeout=scaled(120) if timeout is None else timeout)


def test_conda_tar_unpacks_and_relocates_where_the_source_is_hidden(conda_env, tmp_path):
    out = tmp_path / "env.tar"
    proc, data = pack(conda_env, "tar", out)
    assert proc.returncode == 0, proc.stderr
    assert data["ok"] and data["kind"] == "conda" and data["format"] == "tar"
    assert data["lock_sha256"] == sha256(conda_env / "conda-lock.yml") and data["lock_source"] == "prefix"
    assert data["size"] == out.stat().st_size > 0 and data["unpack"] == ["bin/python", "bin/conda-unpack"]
    with tarfile.open(out) as tar:
        names = set(tar.getnames())
        manifest = json.load(tar.extractfile(".envtool/pack.json"))
        sbom = json.load(tar.extractfile(".envtool/sbom.cdx.json"))
    assert {"conda-lock.yml", "bin/conda-unpack", "share/libfoo/where.txt"} <= names
    assert any(n.startswith("conda-meta/libfoo-1.0") for n in names)
    assert manifest["lock_sha256"] == data["lock_sha256"] and manifest["source_prefix"] == str(conda_env)
    assert sbom["bomFormat"] == "CycloneDX" and "libfoo" in {c["name"] for c in sbom["components"]}
    dest = tmp_path / "node-local" / "env"
    r = hidden(conda_env, f"mkdir -p {dest} && tar -xf {out} -C {dest} && {dest}/bin/python {dest}/bin/conda-unpack"
                          f" && cat {dest}/share/libfoo/where.txt && {dest}/bin/python -c 'import sys; print(sys.prefix)'"
                          f" && sha256sum {dest}/conda-lock.yml")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    assert lines[0] == f"prefix={dest}" and lines[1] == str(dest), r.stdout
    assert lines[2].split()[0] == data["lock_sha256"]
    # the unpacked copy is the locked environment (envtool diff: no drift)
    diff = run_envtool("diff", "--prefix", dest, "--json")
    assert diff.returncode == 0, diff.stdout + diff.stderr


def test_conda_squashfs_mounts_at_its_destination(conda_env, tmp_path, tools):
    out = tmp_path / "env.squashfs"
    dest = tmp_path / "mnt" / "env"
    proc, data = pack(conda_env, "squashfs", out, "--dest-prefix", dest)
    assert proc.returncode == 0, proc.stderr
    assert data["format"] == "squashfs" and data["dest_prefix"] == str(dest) and data["unpack"] == []
    assert out.read_bytes()[:4] == b"hsqs"
    r = hidden(conda_env, f"mkdir -p {dest} && squashfuse {out} {dest} && trap 'fusermount -u {dest}' EXIT && "
                          f"cat {dest}/share/libfoo/where.txt && sha256sum {dest}/conda-lock.yml && "
                          f"cat {dest}/.envtool/pack.json")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    assert lines[0] == f"prefix={dest}" and lines[1].split()[0] == data["lock_sha256"]
    assert json.loads("\n".join(lines[2:]))["kind"] == "conda"


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_venv_tar_runs_from_the_unpacked_copy_alone(venv_env, tmp_path):
    out = tmp_path / "venv.tar"
    proc, data = pack(venv_env, "tar", out)
    assert proc.returncode == 0, proc.stderr
    assert data["kind"] == "venv" and data["lock_sha256"] == sha256(venv_env / "conda-lock.yml")
    base = data["base_python"]
    assert base and os.path.isfile(base) and any(base in n for n in data["notes"])
    assert data["unpack"] == ["bin/python", ".envtool/unpack.py"]
    with tarfile.open(out) as tar:
        assert tar.next().name == ".envtool/pack.json"      # first: read without scanning the archive
        manifest = json.load(tar.extractfile(".envtool/pack.json"))
    assert "bin/hello-pack" in manifest["relocate"] and "pyvenv.cfg" in manifest["relocate"]
    assert manifest["base_python"] == base
    dest = tmp_path / "node-local" / "venv"
    r = hidden(venv_env, f"mkdir -p {dest} && tar -xf {out} -C {dest} && {dest}/bin/python {dest}/.envtool/unpack.py"
                         f" && {dest}/bin/hello-pack && head -1 {dest}/bin/hello-pack && "
                         f"sha256sum {dest}/conda-lock.yml && . {dest}/bin/activate && echo \"$VIRTUAL_ENV\"")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    assert lines[0] == f"hello from {dest}" and lines[1] == f"#!{dest}/bin/python", r.stdout
    assert lines[2].split()[0] == data["lock_sha256"] and lines[3] == str(dest)


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_venv_squashfs_mounted_runs_without_the_source(venv_env, tmp_path, tools):
    out = tmp_path / "venv.squashfs"
    dest = tmp_path / "mnt" / "venv"
    proc, data = pack(venv_env, "squashfs", out, "--dest-prefix", dest)
    assert proc.returncode == 0, proc.stderr
    # zstd, as the image's squashfs form (envtool.core.squashfs): 14x faster to write than gzip
    sb = subprocess.run(["unsquashfs", "-s", str(out)], capture_output=True, text=True, timeout=scaled(60))
    assert "Compression zstd" in sb.stdout, sb.stdout + sb.stderr
    r = hidden(venv_env, f"mkdir -p {dest} && squashfuse {out} {dest} && trap 'fusermount -u {dest}' EXIT && "
                         f"{dest}/bin/hello-pack && sha256sum {dest}/conda-lock.yml")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    assert lines[0] == f"hello from {dest}" and lines[1].split()[0] == data["lock_sha256"]
    # the source was not changed by packing it
    assert (venv_env / "bin" / "hello-pack").read_text().startswith(f"#!{venv_env}/bin/python")


def test_lock_is_snapshotted_when_the_environment_has_none(tmp_path):
    env = tmp_path / "plain"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=scaled(120))
    proc, data = pack(env, "tar", tmp_path / "plain.tar")
    assert proc.returncode == 0, proc.stderr
    assert data["lock_source"] == "snapshot" and not (env / "conda-lock.yml").exists()
    with tarfile.open(tmp_path / "plain.tar") as tar:
        lock = tar.extractfile("conda-lock.yml").read()
    assert hashlib.sha256(lock).hexdigest() == data["lock_sha256"] and b"version: 1" in lock


def _venv(tmp_path, name="v") -> Path:
    env = tmp_path / name
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=scaled(120))
    (env / "conda-lock.yml").write_text("version: 1\nmetadata: {}\npackage: []\n")
    return env


def _refused(env, out, fmt="tar"):
    proc = run_envtool("pack", env, "--format", fmt, "-o", out, "--json")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert not data["ok"] and data["exit"] == 2 and "Traceback" not in proc.stderr
    assert not out.exists() and not [p for p in out.parent.iterdir() if ".envtool-pack-" in p.name]
    return data["error"]


def test_a_venv_layered_over_a_venv_base_is_refused_naming_the_layer(tmp_path):
    """A venv layered over a venv base (envtool's _envtool_layer.pth, written by layer_over from
    what the base venv's interpreter reports) imports the base's packages from outside the prefix:
    pack refused nothing and wrote a pack without them (exit 0); exit 2 now, naming the .pth, the
    base's directory and what to do."""
    from envtool.engines.layer import LAYER_PTH, layer_over, probe_site

    base = _venv(tmp_path, "base")
    layered = _venv(tmp_path, "layered")
    layer_over(probe_site(str(base / "bin" / "python")), layered)
    pth = next((layered / "lib").glob(f"python*/site-packages/{LAYER_PTH}"))
    err = _refused(layered, tmp_path / "out.tar")
    assert f"{pth}: the environment is layered over a base" in err, err
    assert str(next((base / "lib").glob("python*/site-packages"))) in err and "create it without layering" in err


def test_refusals_name_the_reason(tmp_path, conda_env):
    out = tmp_path / "out.tar"
    # not an environment
    (tmp_path / "empty").mkdir()
    assert "neither a conda environment" in _refused(tmp_path / "empty", out)
    # a venv whose base interpreter is gone: pyvenv.cfg and bin/python name a directory that was removed
    orphan = _venv(tmp_path, "orphan")
    gone = tmp_path / "gone-python" / "bin"
    cfg = (orphan / "pyvenv.cfg").read_text().splitlines()
    cfg = [f"home = {gone}" if l.startswith("home") else
           f"executable = {gone}/python3" if l.startswith("executable") else l for l in cfg]
    (orphan / "pyvenv.cfg").write_text("\n".join(cfg) + "\n")
    for link in (orphan / "bin").glob("python*"):
        link.unlink()
        link.symlink_to(gone / "python3")
    err = _refused(orphan, out)
    assert "base interpreter is missing" in err and str(gone) in err
    # system site-packages
    sysv = tmp_path / "sysv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(sysv)],
                   check=True, timeout=scaled(120))
    assert "include-system-site-packages = true" in _refused(sysv, out)
    # a binary file naming the prefix
    binv = _venv(tmp_path, "binv")
    (binv / "lib" / "libx.so").write_bytes(b"\x7fELF\0\0RUNPATH=" + str(binv).encode() + b"/lib\0")
    err = _refused(binv, out)
    assert "binary file(s) name the prefix" in err and "lib/libx.so" in err
    # an editable install (.pth to a directory outside)
    edv = _venv(tmp_path, "edv")
    sp = next((edv / "lib").glob("python*/site-packages"))
    (sp / "__editable__.src.pth").write_text(str(tmp_path / "src") + "\n")
    assert "outside the environment" in _refused(edv, out)
    # a conda environment whose files no longer match its records: conda-pack's own reason
    broken = tmp_path / "broken"
    shutil.copytree(conda_env, broken, symlinks=True)
    (broken / "share" / "libfoo" / "where.txt").unlink()
    assert "conda-pack cannot pack it" in _refused(broken, out)
    # an existing output is kept unless --force
    ok = _venv(tmp_path, "ok")
    out.write_text("keep me")
    proc = run_envtool("pack", ok, "--format", "tar", "-o", out)
    assert proc.returncode == 2 and "--force" in proc.stderr and out.read_text() == "keep me"
    assert run_envtool("pack", ok, "--format", "tar", "-o", out, "--force").returncode == 0
    assert tarfile.is_tarfile(out)
    # bad arguments
    proc = run_envtool("pack", ok, "--format", "zip", "-o", tmp_path / "x.zip")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr
    proc = run_envtool("pack", "no-such-spec-here", "--format", "tar")
    assert proc.returncode == 2 and "neither an environment directory nor a spec" in proc.stderr


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_interrupted_pack_leaves_no_output(tmp_path):
    """SIGTERM while a large venv is written: exit 130, no output file, no private directory."""
    env = _venv(tmp_path, "big")
    with open(env / "lib" / "big.bin", "wb") as fh:   # 1.5 GB of data on disk (not sparse): seconds to pack
        block = os.urandom(1 << 20)
        for _ in range(1500):
            fh.write(block)
    out = tmp_path / "big.tar"
    proc = subprocess.Popen([sys.executable, "-m", "envtool", "pack", str(env), "--format", "tar", "-o", str(out)],
                            cwd=REPO, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + scaled(120)
    work = None
    while time.monotonic() < deadline and work is None:
        work = next((p for p in tmp_path.iterdir() if ".envtool-pack-" in p.name and (p / "pack.tar").exists()), None)
        time.sleep(0.05)
    assert work is not None, "the pack never started writing"
    proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=scaled(120))[1]
    assert proc.returncode == 130, err
    assert not out.exists() and not work.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["big"]
