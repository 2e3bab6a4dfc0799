"""Clone a read-only conda env built from a local channel (real py-rattler, real pip, real CLI).

The source env is installed from packages this module builds (tests/helpers/conda_channel.py):
versions and dependencies, a text file with conda's ``/opt/anaconda1anaconda2anaconda3``
placeholder, a binary file with a (long) binary placeholder, an ``activate.d`` script, a
``noarch: python`` package with an entry point. Then a package is ``pip install``-ed into it
(untracked by conda), files are added by hand, and the source and its package cache are made
read-only before cloning. Everything runs offline.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_envtool
from helpers import wheels
from helpers.conda_channel import BINARY_PLACEHOLDER, TEXT_PLACEHOLDER, PackageDef, build_channel, python_package

from envtool.engines import clone as cl
from envtool.engines.rattler_api import install_records, read_prefix_records, record_key, solve_records
from envtool.steps.create.clone import clone_env
from helpers.speed import scaled


def channel_packages():
    """The test channel: python, libfoo 1.0/2.0, foo (needs libfoo <2), pyfoo (noarch: python)."""
    so = b"\x7fELF\x02\x01\x01\0" + b"\0" * 8 + BINARY_PLACEHOLDER.encode() + b"/lib\0" + b"\x01\x02tail\0"
    return [
        python_package(),
        PackageDef("libfoo", "1.0", files={
            "lib/libfoo.so.1": so,
            "share/libfoo/config.txt": f"prefix={TEXT_PLACEHOLDER}\nlibdir={TEXT_PLACEHOLDER}/lib\n"}),
        PackageDef("libfoo", "2.0", files={"share/libfoo/config.txt": f"prefix={TEXT_PLACEHOLDER}\n"}),
        PackageDef("foo", "2.1", depends=("libfoo >=1.0,<2",), files={
            "bin/foo": f"#!/bin/sh\necho foo from {TEXT_PLACEHOLDER}\n",
            "etc/conda/activate.d/foo.sh": "export FOO_HOME=\"$CONDA_PREFIX/share/foo\"\n"}),
        PackageDef("foo", "1.0", depends=("libfoo",), files={"bin/foo": "#!/bin/sh\necho old foo\n"}),
        PackageDef("pyfoo", "0.3", noarch="python", depends=("python", "foo"),
                   files={"site-packages/pyfoo/__init__.py": "def main():\n    print('pyfoo')\n",
                          "site-packages/pyfoo-0.3.dist-info/METADATA": "Metadata-Version: 2.1\nName: pyfoo\nVersion: 0.3\n",
                          "site-packages/pyfoo-0.3.dist-info/INSTALLER": "conda\n"},
                   entry_points=("pyfoo = pyfoo:main",)),
        PackageDef("extra", "1.0", noarch="generic", files={"share/extra/README": "added by the spec\n"}),
    ]


def make_wheel(dest: Path, name: str = "userpkg", version: str = "1.2") -> Path:
    """A minimal pure-Python wheel with a console script."""
    return wheels.make_wheel(dest, name, version, {f"{name}/__init__.py": "def main():\n    print('hello from userpkg')\n"},
                             console_scripts=(f"{name} = {name}:main",))


def chmod_tree(root: Path, writable: bool) -> None:
    subprocess.run(["chmod", "-R", "u+w" if writable else "a-w", str(root)], check=True)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A channel, a read-only source env (with pip-installed and user files) and its read-only cache."""
    base = tmp_path_factory.mktemp("clone")
    url = build_channel(base / "channel", channel_packages())
    records = solve_records([url], ["pyfoo", "python"], "linux-64")
    src = base / "site" / "envs" / "open-ce"
    site_pkgs = base / "site" / "pkgs"
    install_records(records, src, site_pkgs)
    # a pip-installed package (untracked by conda), with the env's own interpreter
    wheel = make_wheel(base)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(src / "bin" / "python"), "install",
                    "--no-index", "--no-deps", "--disable-pip-version-check", str(wheel)],
                   check=True, capture_output=True, text=True)
    # files users added: text naming the prefix, a binary embedding it, an activate.d script
    (src / "share" / "notes").mkdir(parents=True)
    (src / "share" / "notes" / "paths.txt").write_text(f"data lives in {src}/share/data\n")
    (src / "lib" / "libuser.so").write_bytes(b"\x7fELF\0\0\0" + str(src).encode() + b"/lib\0\0more")
    (src / "etc" / "conda" / "activate.d" / "site.sh").write_text(f"export SITE_DATA={src}/share/data\n")
    (src / "conda-meta" / "pinned").write_text("libfoo 1.0.*\n")
    os.symlink(str(src / "share" / "notes" / "paths.txt"), src / "share" / "notes-link")
    chmod_tree(src.parent.parent, writable=False)
    yield {"base": base, "url": url, "source": src, "pkgs": site_pkgs, "records": records}
    chmod_tree(base, writable=True)


def test_channel_has_versions_deps_and_platforms(world):
    url = world["url"]
    recs = {r.name.normalized: r for r in solve_records([url], ["foo"], "linux-64")}
    assert str(recs["foo"].version) == "2.1" and str(recs["libfoo"].version) == "1.0"  # <2 respected
    ppc = solve_records([url], ["foo"], "linux-ppc64le", ["__glibc=2.28", "__cuda=10.2", "__archspec=1=ppc64le"])
    assert {r.subdir for r in ppc} == {"linux-ppc64le"}
    with pytest.raises(Exception, match="libfoo"):
        solve_records([url], ["foo 2.1", "libfoo 2.0"], "linux-64")


def test_source_env_is_real(world):
    src = world["source"]
    assert (src / "share/libfoo/config.txt").read_text().startswith(f"prefix={src}\n")
    so = (src / "lib/libfoo.so.1").read_bytes()
    assert f"{src}/lib\0".encode() in so and BINARY_PLACEHOLDER.encode() not in so
    out = subprocess.run([str(src / "bin" / "userpkg")], capture_output=True, text=True, check=True).stdout
    assert "hello from userpkg" in out
    assert subprocess.run([str(src / "bin" / "pyfoo")], capture_output=True, text=True, check=True).stdout == "pyfoo\n"


@pytest.fixture(scope="module")
def cloned(world, tmp_path_factory):
    """``envtool clone SOURCE --prefix T --json`` of the read-only source, with a cold envtool cache."""
    base = tmp_path_factory.mktemp("target")
    cache = base / "cache"
    before = cl.fingerprint(world["source"].parent.parent)  # the env and the site's package cache
    channel = world["base"] / "channel"
    hidden = world["base"] / "channel.hidden"
    os.rename(channel, hidden)  # proves the clone came from the read-only cache, not the URLs
    try:
        proc = run_envtool("clone", world["source"], "--prefix", base / "t", "--json",
                           env={"ENVTOOL_CACHE_DIR": str(cache)}, timeout=scaled(600))
    finally:
        os.rename(hidden, channel)
    after = cl.fingerprint(world["source"].parent.parent)
    return {"proc": proc, "target": base / "t", "before": before, "after": after, "cache": cache}


def test_clone_succeeds_and_reports(cloned, world):
    proc = cloned["proc"]
    assert proc.returncode == 0, proc.stderr + proc.stdout
    doc = json.loads(proc.stdout)
    assert doc["ok"] and doc["results"]["clone"]["verify"]["ok"]
    info = doc["results"]["clone"]
    assert info["records"] == len(world["records"])
    assert info["cache"]["copied"] == len(world["records"]) and info["cache"]["fetched"] == []
    assert "lib/libuser.so" in info["untracked"]["binaries"]
    assert "conda-meta/pinned" in info["untracked"]["carried"]


def test_records_identical(cloned, world):
    src, t = world["source"], cloned["target"]
    a = [record_key(r) for r in read_prefix_records(src)]
    b = [record_key(r) for r in read_prefix_records(t)]
    assert a == b and len(a) == len(world["records"])


def test_source_and_cache_unchanged(cloned):
    assert cl.fingerprint_diff(cloned["before"], cloned["after"]) == []


def test_placeholders_point_at_the_new_prefix(cloned, world):
    src, t = world["source"], cloned["target"]
    assert (t / "share/libfoo/config.txt").read_text() == f"prefix={t}\nlibdir={t}/lib\n"
    so = (t / "lib/libfoo.so.1").read_bytes()
    assert f"{t}/lib\0".encode() in so and str(src).encode() not in so
    assert (t / "bin/foo").read_text().endswith(f"echo foo from {t}\n")
    assert (t / "bin/pyfoo").read_text().startswith(f"#!{t}/bin/")


def test_untracked_files_copied_and_rewritten(cloned, world):
    src, t = world["source"], cloned["target"]
    assert (t / "share/notes/paths.txt").read_text() == f"data lives in {t}/share/data\n"
    assert (t / "etc/conda/activate.d/site.sh").read_text() == f"export SITE_DATA={t}/share/data\n"
    assert (t / "etc/conda/activate.d/foo.sh").is_file()
    assert os.readlink(t / "share/notes-link") == str(t / "share/notes/paths.txt")
    # the binary is carried as is (and was reported)
    assert (t / "lib/libuser.so").read_bytes() == (src / "lib/libuser.so").read_bytes()
    # the pip-installed console script now runs the clone's interpreter
    script = (t / "bin/userpkg").read_text()
    assert script.startswith(f"#!{t}/bin/python") and str(src) not in script
    out = subprocess.run([str(t / "bin/python"), "-c", "import userpkg, pyfoo, sys; print(userpkg.__file__); "
                          "print(sys.prefix)"], capture_output=True, text=True, check=True).stdout.split()
    assert out[0].startswith(str(t)) and out[1] == str(t)


def test_pinned_history_and_pip_view(cloned, world):
    src, t = world["source"], cloned["target"]
    assert (t / "conda-meta/pinned").read_text() == "libfoo 1.0.*\n"
    hist = (t / "conda-meta/history").read_text()
    source_hist = (src / "conda-meta/history").read_text()
    assert hist.startswith(source_hist) and f"# cmd: envtool clone {src} --prefix {t}" in hist
    view = cl.pip_view(t)
    assert view == cl.pip_view(src) and view.get("userpkg") == "1.2" and view.get("pyfoo") == "0.3"


def test_no_build_prefix_left_and_installed_view(cloned, world):
    t = cloned["target"]
    hits = subprocess.run(["grep", "-rl", "envtool-build", str(t)], capture_output=True, text=True).stdout
    assert hits == ""
    from envtool.engines.rattler import RattlerEngine

    got = sorted((p.name, p.manager) for p in RattlerEngine().installed(t))
    assert got == sorted([(r.name.normalized, "conda") for r in world["records"]] + [("userpkg", "pip")])


def test_no_cachedir_tag_at_the_clone_root(cloned, world):
    """py-rattler tags the prefixes it installs into as caches (the source shows it); backup tools
    then skip them: envtool removes the tag from the prefix (and only there)."""
    assert (world["source"] / "CACHEDIR.TAG").is_file()  # what py-rattler leaves
    assert not (cloned["target"] / "CACHEDIR.TAG").exists()


def test_large_untracked_binary_is_scanned_not_loaded(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "lib").mkdir(parents=True)
    # the old prefix straddles a 1 MiB chunk boundary
    data = b"\0" * ((1 << 20) - 5) + str(src).encode() + b"/lib\0" + b"x" * 100
    (src / "lib" / "big.so").write_bytes(data)
    (src / "lib" / "plain.bin").write_bytes(b"\0" * (2 << 20))
    report = cl.copy_untracked(src, dst, tmp_path / "new", set(), max_text_bytes=1024)
    assert report.binaries == ["lib/big.so"]
    assert (dst / "lib" / "big.so").read_bytes() == data and sorted(report.copied) == ["lib/big.so", "lib/plain.bin"]


def test_untracked_links_with_names_that_are_not_utf8_are_repointed(tmp_path):
    """Issue 43, held out: a source prefix whose name is not UTF-8 (a user's Latin-1 directory)
    and an untracked absolute link into it, whose target is not UTF-8 either: the link is re-pointed
    into the new prefix byte for byte (``str.encode`` raised UnicodeEncodeError: exit 3)."""
    src = Path(os.fsdecode(bytes(tmp_path) + b"/caf\xe9"))
    dst, new = tmp_path / "dst", Path(os.fsdecode(bytes(tmp_path) + b"/n\xe9w"))
    (src / "lib").mkdir(parents=True)
    target = Path(os.fsdecode(bytes(src) + b"/lib/d\xfcnn.so"))
    target.write_bytes(b"\0")
    (src / "lib" / "link.so").symlink_to(target)
    report = cl.copy_untracked(src, dst, new, set(), max_text_bytes=1024)
    assert "lib/link.so" in report.copied
    assert os.fsencode(os.readlink(dst / "lib" / "link.so")) == bytes(new) + b"/lib/d\xfcnn.so"


def test_clone_is_writable_and_independent(cloned, world):
    t = cloned["target"]
    (t / "share/notes/paths.txt").write_text("changed\n")  # the clone is ours to change …
    assert "changed" not in (world["source"] / "share/notes/paths.txt").read_text()  # … the source is not


def test_warm_cache_clone_hard_links(cloned, world, tmp_path):
    """A second clone with the now-warm envtool cache links files instead of copying them."""
    t2 = tmp_path / "t2"
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = cloned["cache"] / "pkgs" / f".envtool-seed-{dead.pid}"  # left by a clone killed with -9
    (stale / "foo-2.1-h0_0").mkdir(parents=True)
    res = clone_env(str(world["source"]), t2, cache_dir=cloned["cache"] / "pkgs", verify_content=False, quiet=True)
    assert res.results["clone"]["cache"]["cached"] == len(world["records"])
    cached = cloned["cache"] / "pkgs" / "foo-2.1-h0_0" / "etc/conda/activate.d/foo.sh"
    assert os.stat(t2 / "etc/conda/activate.d/foo.sh").st_ino == os.stat(cached).st_ino
    assert not stale.exists()


def test_broken_url_leaves_nothing(world, tmp_path):
    """A record whose URL is gone and no cache: the clone fails clearly and leaves no target."""
    # a writable copy of the source whose foo record points at a missing archive
    src = tmp_path / "broken-src"
    shutil.copytree(world["source"], src, symlinks=True)
    chmod_tree(src, writable=True)
    rec = next(src.glob("conda-meta/foo-2.1-*.json"))
    doc = json.loads(rec.read_text())
    doc["url"] = doc["url"].replace("foo-2.1-h0_0.tar.bz2", "foo-2.1-h0_0-MISSING.tar.bz2")
    doc["fn"] = "foo-2.1-h0_0-MISSING.tar.bz2"
    doc.pop("extracted_package_dir", None)
    doc["build"] = "h0_missing"  # no cache holds this build
    rec.write_text(json.dumps(doc))
    target = tmp_path / "t"
    proc = run_envtool("clone", src, "--prefix", target, env={"ENVTOOL_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "foo-2.1-h0_0-MISSING.tar.bz2" in proc.stderr and "nothing was left at" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not target.exists()
    assert not [p for p in tmp_path.iterdir() if "envtool-build" in p.name]


def test_unknown_source_is_a_usage_error(tmp_path):
    proc = run_envtool("clone", "no-such-env", "--prefix", tmp_path / "t",
                       env={"CONDA_ENVS_PATH": str(tmp_path / "envs")})
    assert proc.returncode == 2 and "no-such-env" in proc.stderr and str(tmp_path / "envs") in proc.stderr


def test_source_by_name_from_conda_envs_path(world, monkeypatch):
    monkeypatch.setenv("CONDA_ENVS_PATH", str(world["source"].parent))
    assert cl.resolve_source("open-ce") == world["source"]
    monkeypatch.setenv("CONDA_PREFIX", str(world["source"]))
    assert cl.resolve_source("") == world["source"]


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_venv_source_clones_as_layer(tmp_path):
    """A module-provided Python (no conda-meta) becomes a --system-site-packages layer.

    Issue 38: when that source is a published version and ``envtool retire`` removes it, the
    layer's ``.pth`` names a directory that is gone, which Python skips silently: ``list`` says
    the clone is broken (base retired, not "ok") and ``doctor`` fails (exit 1) naming the retired
    module, with a fix that re-clones from the version still published beside it."""
    root, mods = tmp_path / "sw", tmp_path / "modules"
    src = root / "modpy" / "1.0"
    mods.mkdir()
    for version in ("1.0", "2.0"):  # two published versions (publish's marker, as envtool publish writes it)
        where = root / "modpy" / version
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
        (where / ".envtool").mkdir()
        (where / ".envtool" / "publish.json").write_text(json.dumps(
            {"module": f"modpy/{version}", "prefix": str(where), "modulefiles": str(mods)}))
    sp = next((src / "lib").glob("python*/site-packages"))
    (sp / "modpkg.py").write_text("X = 42\n")
    target = tmp_path / "layer"
    state = {"XDG_STATE_HOME": str(tmp_path / "state")}
    proc = run_envtool("clone", src, "--prefix", target, "--json", env=state)
    assert proc.returncode == 0, proc.stderr
    out = subprocess.run([str(target / "bin/python"), "-c", "import modpkg, sys; print(modpkg.X, sys.prefix)"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["42", str(target)]
    # the source venv does not include its base's site-packages, so neither does the layer; it sees
    # the source's through the .pth whose site.addsitedir names what the source's interpreter reports
    assert "include-system-site-packages = false" in (target / "pyvenv.cfg").read_text()
    layer_sp = next((target / "lib").glob("python*/site-packages"))
    assert (layer_sp / "_envtool_layer.pth").read_text() == f"import site; site.addsitedir({str(sp)!r})\n"
    record = json.loads((target / ".envtool" / "create.json").read_text())
    assert record["clone_mode"] == "layer" and record["clone_of_module"] == "modpy/1.0", record

    proc = run_envtool("retire", "modpy/1.0", "--root", root, env=state)
    assert proc.returncode == 0 and not src.exists(), proc.stdout + proc.stderr
    rows = json.loads(run_envtool("list", "--json", env=state).stdout)["environments"]
    assert [r["status"] for r in rows if r["prefix"] == str(target)] == ["broken: base retired (modpy/1.0)"], rows
    proc = run_envtool("doctor", "--prefix", target, "--only", "clone-base", "--json", env=state)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (found,) = json.loads(proc.stdout)["findings"]
    assert found["status"] == "fail" and "modpy/1.0" in found["summary"] and "retired" in found["summary"], found
    assert f"envtool clone {root / 'modpy' / '2.0'} --prefix {target} --force" in found["fix"], found


def test_create_spec_with_clone(world, tmp_path):
    """``envtool create SPEC --clone SOURCE --prefix T`` on a conda spec (no Horovod, no expect)."""
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "clone-test.yaml").write_text(
        "name: clone-test\nsummary: clone test\nplatforms: [linux-64]\nengine: conda\n"
        f"channels: [\"{world['url']}\"]\npackages:\n  conda: [pyfoo, extra]\nhorovod:\n  install: none\n")
    target = tmp_path / "t"
    proc = run_envtool("create", "clone-test", "--clone", world["source"], "--prefix", target, "--json",
                       env={"ENVTOOL_SPEC_PATH": str(specs), "ENVTOOL_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["results"]["clone"]["verify"]["ok"]
    assert "lib/libuser.so" in doc["results"]["clone"]["untracked"]["binaries"]
    assert (target / "share/notes/paths.txt").read_text() == f"data lives in {target}/share/data\n"
    # the clone's records, plus the spec's extra package installed after verification
    got = [record_key(r) for r in read_prefix_records(target)]
    want = [record_key(r) for r in read_prefix_records(world["source"])]
    assert [k for k in got if k[0] != "extra"] == want and [k[:2] for k in got if k[0] == "extra"] == [("extra", "1.0")]
    assert (target / "share/extra/README").read_text() == "added by the spec\n"
    assert not (target / "CACHEDIR.TAG").exists()
