#!/usr/bin/env python3
"""Build a *site twin*: the parts of an HPC site envtool touches, made on one machine from real software.

Under one directory (``--dir``, else ``$ENVTOOL_TWIN_DIR``, else ``<envtool cache>/twin``) it builds,
idempotently (each stage is skipped when its stamp matches its inputs):

``wheels/``        wheels from the configured package index (``pip download``, so pip's configuration
                   — index, find-links, constraints — is honoured).
``channel/``       a conda channel indexed with py-rattler, made of real software:
                   ``python`` 3.11 (this machine's CPython made relocatable: ``patchelf`` sets the
                   RUNPATH of the interpreter and ``libpython`` to ``$ORIGIN``-relative paths; text
                   files naming the build prefix carry conda-build's text placeholder, so the
                   installer writes the target prefix in), ``pytorch`` (Open-CE's name for torch)
                   and ``numpy``, ``pip``, ``setuptools``, ``wheel``, ``cffi``, ``cloudpickle``,
                   ``psutil``, ``pyyaml``, ``packaging`` and torch's own dependencies, each
                   repackaged from its wheel with ``depends`` taken from the wheel's
                   ``Requires-Dist``; and ``horovod`` 0.28.1 built **with Gloo only, no MPI**
                   (``HOROVOD_WITHOUT_MPI=1``: a site build lacking a capability the user needs).
``built/``         the Gloo-only Horovod wheel (one compile per machine, CMake's Debug build, which
                   compiles faster; reused afterwards).
``sw/open-ce/1.1.3-py311-twin``  the site's read-only base environment, installed from the channel
                   with py-rattler, with ``conda-meta/history``, ``etc/conda/activate.d/twin.sh``
                   (sets ``OPEN_CE_TWIN=1``) and ``chmod -R a-w``.
``modulefiles/open-ce/1.1.3-py311-twin.lua``  an Lmod modulefile written the way OLCF's open-ce
                   modules work (the env's ``bin`` on ``PATH``, ``CONDA_PREFIX`` set).
``sites/twin.yaml``, ``specs/open-ce-twin.yaml``  the site file (with ``detect:`` on
                   ``ENVTOOL_TWIN_SYSTEM``) and the spec mapped to that module and base env.

With ``--tensorflow`` (the tests' opt-in ``ENVTOOL_TEST_TWIN_TF=1``; use its own ``--dir``) the channel
also holds ``tensorflow-base`` (Open-CE's conda name for TensorFlow: open-ce/tensorflow-feedstock,
as specs/open-ce-1.1.3.yaml pins ``tensorflow-base 2.4.1.*``) made from the PyPI
``tensorflow-cpu`` 2.15.1 wheel with the same wheel → conda mechanism as ``pytorch``, with its
dependencies (``keras`` 2.15, ``tensorboard``, ``h5py``, ``grpcio``, ``protobuf``, … and numpy < 2);
the base env holds it and the spec lists ``frameworks: [tensorflow, pytorch]``. Version mapping,
as for torch (Open-CE 1.1.3's PyTorch 1.7.1 stands as 2.13.0, what installs on Python 3.11 here):
TensorFlow 2.4.1 has no Python 3.11 wheel; 2.12.1 (the newest in Horovod 0.28.1's CI,
horovod/horovod@v0.28.1:.github/workflows/ci.yaml#L276) cannot be installed beside torch 2.13.0
(its ``typing-extensions<4.6.0`` against torch's ``>=4.10.0``, https://pypi.org/project/tensorflow-cpu/2.12.1/),
so the twin takes 2.15.1, as specs/cpu-tf-torch-horovod.yaml does (the last with Keras 2;
Horovod 0.28.1 does not work with >= 2.16, https://github.com/horovod/horovod/issues/4290).
The site's own Horovod stays Gloo-only and PyTorch-only (``HOROVOD_WITHOUT_TENSORFLOW``: one compile
per machine, shared with the default twin through ``--horovod-from``); the user's clone rebuilds it
with TensorFlow, PyTorch, Gloo and MPI.

Usage::

    python3 tests/twin/make_twin.py [--dir DIR] [--jobs N] [--json] [--tensorflow] [--horovod-from TWIN_DIR]

Prints the twin directory (or, with ``--json``, the paths and the seconds each stage took).
Needs: patchelf (tests/setup.d/twin.sh), a C++ compiler and cmake (the Horovod build), py-rattler,
conda-package-handling (the ``.conda`` packages; a test dependency).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(REPO))

from helpers.conda_channel import TEXT_PLACEHOLDER, PackageDef, build_package, index_channel  # noqa: E402

#: bump when the layout of what a stage writes changes (invalidates the stamps).
TWIN_FORMAT = 1
PY_MM = "3.11"
MODULE = "open-ce/1.1.3-py311-twin"
BASE_REL = "sw/open-ce/1.1.3-py311-twin"
SPEC_NAME = "open-ce-twin"
#: what the channel is made of (what Horovod 0.28.1 needs to build and run); pip resolves their
#: dependencies (torch's sympy, mpmath, networkx, …; cffi's pycparser) into one consistent set.
WHEELS = ("torch==2.13.0", "numpy", "pip", "setuptools", "wheel", "cffi", "cloudpickle", "psutil", "pyyaml",
          "packaging")
#: PyPI name → conda package name where they differ (Open-CE calls torch ``pytorch``).
CONDA_NAME = {"torch": "pytorch", "tensorflow-cpu": "tensorflow-base"}
#: the ``--tensorflow`` twin's additions (see the module docstring for why 2.15.1 stands for 2.4.1).
TF_WHEEL = "tensorflow-cpu==2.15.1"
TF_BASE_SPEC = "tensorflow-base 2.15.1.*"
#: what the base environment asks for (the solve pulls in the rest).
BASE_SPECS = ("python 3.11.*", "pytorch 2.13.0.*", "numpy", "pip", "setuptools", "wheel", "cffi", "cloudpickle",
              "psutil", "pyyaml", "packaging", "horovod 0.28.1.*")
#: Horovod's build variables for the site's package: PyTorch and Gloo, no MPI (horovod docs, install.rst:
#: HOROVOD_WITH_* / HOROVOD_WITHOUT_* force a framework or controller on or off).
HOROVOD_GLOO_ONLY = {"HOROVOD_WITH_PYTORCH": "1", "HOROVOD_WITH_GLOO": "1", "HOROVOD_WITHOUT_MPI": "1",
                     "HOROVOD_WITHOUT_TENSORFLOW": "1", "HOROVOD_WITHOUT_MXNET": "1"}
#: everything the twin's compile is set with (its wheel's stamp is this): Gloo only, and CMake's
#: Debug build (-O0 -g, assertions on; horovod@v0.28.1:setup.py reads HOROVOD_DEBUG) instead of
#: RelWithDebInfo (-O3 -g -DNDEBUG): the twin's own Horovod only has to import and say what it was
#: built with (no test runs hvd.init on the base env), and Horovod's PyTorch translation unit
#: mpi_ops_v2.cc took 45-62 s of CPU instead of 83 s at -O3 here
HOROVOD_TWIN_BUILD = {**HOROVOD_GLOO_ONLY, "HOROVOD_DEBUG": "1"}


def twin_dir(explicit: Optional[str] = None) -> Path:
    """The twin's directory: ``explicit``, else ``$ENVTOOL_TWIN_DIR``, else ``<envtool cache>/twin``."""
    if explicit:
        return Path(explicit).resolve()
    if os.environ.get("ENVTOOL_TWIN_DIR"):
        return Path(os.environ["ENVTOOL_TWIN_DIR"]).resolve()
    from envtool.core.paths import cache_root

    return cache_root() / "twin"


def _say(msg: str) -> None:
    print(f"[twin] {msg}", file=sys.stderr, flush=True)


def _stamp_ok(stamp: Path, key: str) -> bool:
    return stamp.is_file() and stamp.read_text() == key


def _digest(*parts: object) -> str:
    return hashlib.sha256(json.dumps([TWIN_FORMAT, *[str(p) for p in parts]]).encode()).hexdigest()


# --------------------------------------------------------------------------- wheels
def download_wheels(root: Path, wheels: Tuple[str, ...] = WHEELS) -> List[Path]:
    """``pip download`` ``wheels`` (default :data:`WHEELS`) and their dependencies (binary only) into
    ``root/wheels``."""
    dest = root / "wheels"
    stamp = root / ".stamp-wheels"
    key = _digest("wheels", wheels)
    if not _stamp_ok(stamp, key):
        dest.mkdir(parents=True, exist_ok=True)
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        _say("pip download " + " ".join(wheels))
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:",
                        "-d", str(dest), *wheels], check=True)
        stamp.write_text(key)
    return sorted(dest.glob("*.whl"))


# --------------------------------------------------------------------------- wheel -> conda package
def _requires(metadata: str) -> List[str]:
    """The conda ``depends`` of a wheel: its ``Requires-Dist`` lines whose markers hold on Linux with
    CPython 3.11 and no extra, as ``name specifier`` (PyPI names mapped by :data:`CONDA_NAME`)."""
    from email.parser import HeaderParser

    from packaging.requirements import Requirement

    msg = HeaderParser().parsestr(metadata)
    env = {"python_version": PY_MM, "python_full_version": PY_MM + ".7", "sys_platform": "linux",
           "platform_system": "Linux", "os_name": "posix", "platform_machine": "x86_64",
           "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
    out = []
    for text in msg.get_all("Requires-Dist") or []:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        name = CONDA_NAME.get(req.name.lower(), req.name.lower().replace("_", "-"))
        out.append(f"{name} {req.specifier}".strip() if str(req.specifier) else name)
    return out


def wheel_package(wheel: Path, workdir: Path) -> PackageDef:
    """A conda package holding ``wheel``'s files as an installed distribution.

    Pure wheels (``Root-Is-Purelib: true``, ``py3-none-any``) become ``noarch: python`` packages
    (files under ``site-packages/``, console scripts as ``entry_points``); others are ``linux-64``
    packages with files under ``lib/python3.11/site-packages`` and ``python 3.11.*`` in ``depends``.
    The ``.dist-info`` is kept (pip sees the distribution), with ``INSTALLER`` set to ``conda``.

    Args:
        wheel: the ``.whl`` file.
        workdir: where the wheel is unpacked (files are read from there when the archive is written).
    Returns:
        the :class:`PackageDef`.
    """
    from packaging.utils import parse_wheel_filename

    name, version, _, tags = parse_wheel_filename(wheel.name)
    pure = any(t.abi == "none" and t.platform == "any" for t in tags)
    unpacked = workdir / wheel.stem
    if unpacked.exists():
        shutil.rmtree(unpacked)
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(unpacked)
    dist_info = next(unpacked.glob("*.dist-info"))
    depends = _requires((dist_info / "METADATA").read_text(errors="replace"))
    entry_points: List[str] = []
    ep = dist_info / "entry_points.txt"
    if ep.is_file():
        import configparser

        cp = configparser.ConfigParser(delimiters=("=",))
        cp.optionxform = str  # keep the case of script names
        cp.read_string(ep.read_text())
        if cp.has_section("console_scripts"):
            # an extras marker ("mod:func [extra]", setuptools' syntax) is no part of conda's entry points
            entry_points = [f"{k.strip()} = {v.split('[')[0].strip()}" for k, v in cp.items("console_scripts")]
    (dist_info / "INSTALLER").write_text("conda\n")
    site = "site-packages" if pure else f"lib/python{PY_MM}/site-packages"
    files: Dict[str, object] = {}
    for f in sorted(unpacked.rglob("*")):
        if not f.is_file() or "__pycache__" in f.parts:
            continue
        rel = f.relative_to(unpacked).as_posix()
        top, _, rest = rel.partition("/")
        if top.endswith(".data"):
            kind, _, inner = rest.partition("/")
            if kind == "scripts":
                data = f.read_bytes()
                if data.startswith(b"#!python"):
                    data = b"#!" + f"{TEXT_PLACEHOLDER}/bin/python{PY_MM}".encode() + data[len(b"#!python"):]
                files[f"bin/{inner}"] = data
            elif kind in ("purelib", "platlib"):
                files[f"{site}/{inner}"] = f
            elif kind == "headers":
                files[f"include/python{PY_MM}/{name}/{inner}"] = f
            else:
                files[inner] = f
            continue
        files[f"{site}/{rel}"] = f
    conda_name = CONDA_NAME.get(name, str(name).replace("_", "-"))
    cver = version.public  # a local version label ("+cpu") goes into the build string, as Open-CE's "cpu_…" builds
    label = f"{version.local.replace('.', '_')}_" if version.local else ""
    if pure:
        return PackageDef(conda_name, cver, build="pyh0_0", depends=tuple(depends + ["python >=3"]), files=files,
                          noarch="python", entry_points=tuple(entry_points))
    for line in entry_points:
        script, _, target = (x.strip() for x in line.partition("="))
        module, _, func = target.partition(":")
        files[f"bin/{script}"] = (f"#!{TEXT_PLACEHOLDER}/bin/python{PY_MM}\n# -*- coding: utf-8 -*-\nimport re\n"
                                  f"import sys\nfrom {module} import {func.split('.')[0]}\n"
                                  f"if __name__ == '__main__':\n"
                                  f"    sys.argv[0] = re.sub(r'(-script\\.pyw?|\\.exe)?$', '', sys.argv[0])\n"
                                  f"    sys.exit({func}())\n")
    return PackageDef(conda_name, cver, build=f"{label}py311h0_0", depends=tuple(depends + [f"python {PY_MM}.*"]),
                      files=files, subdirs=("linux-64",))


# --------------------------------------------------------------------------- relocatable CPython
#: parts of the interpreter's tree left out of the package (tests, caches, the static library,
#: and whatever was pip-installed into the build machine's site-packages).
_PY_SKIP = ("__pycache__", f"lib/python{PY_MM}/test/", f"lib/python{PY_MM}/site-packages/", ".a")


def python_package(src: Path, workdir: Path) -> Tuple[PackageDef, Dict[str, int]]:
    """A ``python`` conda package made from the CPython installed at ``src`` (``sys.base_prefix``).

    The interpreter and ``libpython`` get RUNPATH ``$ORIGIN/../lib`` / ``$ORIGIN`` (patchelf), so
    they find ``libpython`` in whatever prefix they are installed in; CPython itself finds its
    standard library from the executable's location (PEP 405 / ``getpath``). Text files that name
    ``src`` (``_sysconfigdata``, ``python3.11-config``, ``*.pc``, the ``config`` Makefile, scripts'
    ``#!`` lines) get the text placeholder, as conda-build writes them; binary files that still
    name ``src`` (compiled-in default prefix, used only when the landmark search fails) are counted.

    Args:
        src: the CPython prefix.
        workdir: scratch directory for the patched binaries.
    Returns:
        ``(package, counts)`` with counts ``files``, ``text_placeholders``, ``binaries_naming_prefix``.
    """
    version = "%d.%d.%d" % sys.version_info[:3] if Path(sys.base_prefix).resolve() == src.resolve() else None
    if version is None:
        out = subprocess.run([str(src / "bin" / f"python{PY_MM}"), "-c",
                              "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                             capture_output=True, text=True, check=True)
        version = out.stdout.strip()
    prefix_b = str(src).encode()
    files: Dict[str, object] = {}
    symlinks: Dict[str, str] = {}
    counts = {"files": 0, "text_placeholders": 0, "binaries_naming_prefix": 0}
    patched = workdir / "patched"
    patched.mkdir(parents=True, exist_ok=True)
    roots = [src / "bin", src / "include" / f"python{PY_MM}", src / "lib"]
    for root in roots:
        for f in sorted(root.rglob("*")):
            rel = f.relative_to(src).as_posix()
            if any(s in rel + ("/" if f.is_dir() else "") for s in _PY_SKIP[:3]) or rel.endswith(_PY_SKIP[3]):
                continue
            if rel.startswith("bin/") and not (rel.startswith("bin/python") or rel.startswith("bin/pydoc")
                                               or rel.startswith("bin/2to3") or rel.startswith("bin/idle")):
                continue  # console scripts of packages pip-installed into the machine's Python
            if rel.startswith("lib/") and not (rel.startswith(f"lib/python{PY_MM}/") or rel.startswith("lib/libpython")
                                               or rel.startswith("lib/pkgconfig/")):
                continue
            if f.is_symlink():
                symlinks[rel] = os.readlink(f)
                continue
            if not f.is_file():
                continue
            data = f.read_bytes()
            if rel in (f"bin/python{PY_MM}", f"lib/libpython{PY_MM}.so.1.0"):
                out = patched / f.name
                shutil.copy2(f, out)
                rpath = "$ORIGIN/../lib" if rel.startswith("bin/") else "$ORIGIN"
                subprocess.run(["patchelf", "--set-rpath", rpath, str(out)], check=True)
                files[rel] = out
                data = out.read_bytes()
            elif prefix_b in data and b"\0" not in data:
                files[rel] = data.replace(prefix_b, TEXT_PLACEHOLDER.encode())
                counts["text_placeholders"] += 1
            else:
                files[rel] = f
            if b"\0" in data and prefix_b in data:
                counts["binaries_naming_prefix"] += 1
            counts["files"] += 1
    files[f"lib/python{PY_MM}/site-packages/README.txt"] = "site-packages of the twin's python\n"
    return PackageDef("python", version, build="h0_0_cpython_twin", files=files, symlinks=symlinks,
                      subdirs=("linux-64",)), counts


# --------------------------------------------------------------------------- channel, base env
#: the archive format of the twin's packages: the 714 MB PyTorch package is written in 23 s as
#: ``.conda`` (zstd) against 82 s as ``.tar.bz2``, and extracted in 12 s against 24 s
#: (benchmarks/bench_package_format.py)
FORMAT = ".conda"


def build_channel(root: Path, wheels: List[Path], extra: List[Path] = ()) -> Tuple[str, Dict[str, int]]:
    """Build (or reuse) the twin channel from the wheels and this machine's CPython; returns its URL."""
    channel = root / "channel"
    stamp = root / ".stamp-channel"
    src = Path(sys.base_prefix).resolve()
    # a compiled wheel keeps its name when rebuilt with other settings: it is known by its content
    ident = {w: w.name for w in wheels} | {w: f"{w.name}@{hashlib.sha256(w.read_bytes()).hexdigest()[:16]}"
                                           for w in extra}
    key = _digest("channel", [ident[w] for w in wheels], [ident[w] for w in extra], src, FORMAT)
    counts: Dict[str, int] = {}
    if not _stamp_ok(stamp, key):
        # archives are reused one by one (the torch package alone is 714 MB)
        made_file = root / "channel-made.json"
        made = json.loads(made_file.read_text()) if made_file.is_file() else {}
        wanted = {str(src): "python"} | {ident[w]: w.name for w in list(wheels) + list(extra)}
        for source, archive in list(made.items()):
            if source not in wanted or not archive.endswith(FORMAT) or not (channel / archive).is_file():
                (channel / archive).unlink(missing_ok=True)
                made.pop(source)
        with tempfile.TemporaryDirectory(dir=root) as tmp:
            tmpd = Path(tmp)
            if str(src) not in made:
                pkg, counts = python_package(src, tmpd)
                _say(f"python {pkg.version}: {counts['files']} files, {counts['text_placeholders']} with the "
                     f"text placeholder")
                out = build_package(pkg, "linux-64", channel / "linux-64", compresslevel=3, fmt=FORMAT)
                made[str(src)] = out.relative_to(channel).as_posix()
                (root / "channel-counts.json").write_text(json.dumps(counts))
            for w in list(wheels) + list(extra):
                if ident[w] in made:
                    continue
                pkg = wheel_package(w, tmpd)
                _say(f"{pkg.name} {pkg.version} <- {w.name}")
                sub = "noarch" if pkg.noarch else "linux-64"
                out = build_package(pkg, sub, channel / sub, compresslevel=3, fmt=FORMAT)
                made[ident[w]] = out.relative_to(channel).as_posix()
                made_file.write_text(json.dumps(made, indent=1))
                shutil.rmtree(tmpd / w.stem, ignore_errors=True)
        made_file.write_text(json.dumps(made, indent=1))
        index_channel(channel)
        stamp.write_text(key)
    if (root / "channel-counts.json").is_file():
        counts = json.loads((root / "channel-counts.json").read_text())
    return channel.as_uri(), counts


def _install(url: str, specs: Tuple[str, ...], prefix: Path, cache: Path) -> None:
    from envtool.engines.rattler_api import install_records, solve_records

    records = solve_records([url], list(specs), "linux-64", cache_dir=cache / "repodata")
    install_records(records, prefix, cache / "pkgs")


def built_horovod(root: Path) -> Optional[Path]:
    """The twin's compiled Horovod wheel under ``root/built``, or None when there is none or it was
    built with other settings than :data:`HOROVOD_TWIN_BUILD` (its stamp differs; the wheel's name
    does not show them), which is then removed."""
    built = root / "built"
    have = sorted(built.glob("horovod-0.28.1-*.whl"))
    if have and _stamp_ok(built / ".stamp-build", _digest("horovod", HOROVOD_TWIN_BUILD)):
        return have[0]
    for whl in have:
        whl.unlink()
    return None


def build_horovod(root: Path, url: str, jobs: int) -> Path:
    """The Gloo-only Horovod 0.28.1 wheel, compiled once in a scratch env made from the channel."""
    built = root / "built"
    have = built_horovod(root)
    if have:
        return have
    from envtool.horovod import fixes
    from packaging.version import Version

    built.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        env_prefix = Path(tmp) / "build-env"
        _say("scratch env for the Horovod build")
        _install(url, tuple(s for s in BASE_SPECS if not s.startswith("horovod")), env_prefix, root / "cache")
        env = dict(os.environ, **HOROVOD_TWIN_BUILD, MAKEFLAGS=f"-j{jobs}", HOROVOD_BUILD_PARALLEL_LEVEL=str(jobs))
        env["PATH"] = f"{env_prefix}/bin:{env['PATH']}"
        for rule in fixes.applicable(Version("0.28.1"), {"pytorch": Version("2.13.0")}, fixes.probe_toolchain()):
            env.update(rule.prepare(root / "fixes", env))
        _say("compiling Horovod 0.28.1 (PyTorch + Gloo, no MPI); once per machine")
        out = Path(tmp) / "wheel"
        # --no-cache-dir: pip would otherwise reuse a wheel it built earlier from the same sdist,
        # whatever HOROVOD_* settings that build had
        subprocess.run([str(env_prefix / "bin" / "python"), "-m", "pip", "wheel", "-q", "--no-deps", "--no-cache-dir",
                        "--no-build-isolation", "--no-binary=horovod", "-w", str(out), "horovod==0.28.1"],
                       env=env, check=True)
        whl = next(out.glob("horovod-*.whl"))
        shutil.move(str(whl), built / whl.name)
        (built / ".stamp-build").write_text(_digest("horovod", HOROVOD_TWIN_BUILD))
    return next(built.glob("horovod-0.28.1-*.whl"))


ACTIVATE = """# installed by the site (twin): conda runs this on activation
export OPEN_CE_TWIN=1
"""

MODULEFILE = """-- -*- lua -*-
-- Open-CE 1.1.3 (twin of OLCF's open-ce modules: the module puts the read-only conda env on PATH
-- and sets CONDA_PREFIX, so `conda create --clone $CONDA_PREFIX` / envtool's --clone find it).
whatis("Open-CE 1.1.3 for Python 3.11 (site twin)")
local prefix = "{prefix}"
setenv("CONDA_PREFIX", prefix)
setenv("CONDA_DEFAULT_ENV", "open-ce-1.1.3-py311-twin")
setenv("OPEN_CE_TWIN", "1")
prepend_path("PATH", pathJoin(prefix, "bin"))
"""

SITE = """# The site twin (tests/twin/make_twin.py): a replica, on one machine, of the parts of an HPC site
# envtool touches. Recognised by ENVTOOL_TWIN_SYSTEM (as Perlmutter is by NERSC_HOST).
name: twin
summary: site twin - read-only Open-CE base env behind an Lmod module, mpirun
platforms: [linux-64]
launcher: "mpirun -np {{ranks}} --oversubscribe"
detect:
  - env: {{ENVTOOL_TWIN_SYSTEM: twin}}
clone_prefix: "$HOME/.conda/envs/{{spec}}"
stacks:
  {spec}:
    modules: [{module}]
    base_env: {base}
    note: "the twin's read-only base env; its Horovod has Gloo only"
"""

SPEC = """# Open-CE 1.1.3 as the twin ships it: Python 3.11, PyTorch 2.13 CPU, Horovod 0.28.1 (Gloo only in the
# site package; the user's clone rebuilds it with MPI and Gloo).
name: {spec}
summary: site twin's Open-CE - PyTorch 2.13 CPU + Horovod 0.28.1 rebuilt with MPI and Gloo
platforms: [linux-64]
engine: conda
python: "3.11"
channels: ["{channel}"]
packages:
  conda:
    - "pytorch 2.13.0.*"
    - "numpy"
    - "pyyaml"
horovod:
  version: "0.28.1"
  install: pip-build
  frameworks: [pytorch]
  controllers: [gloo, mpi]
  gpu_operations: null
expect:
  check_build:
    frameworks: [PyTorch]
    controllers: [Gloo, MPI]
    tensor_operations: [Gloo, MPI]
  dataloader_start_method: forkserver
env:
  OMP_NUM_THREADS: "1"
"""


#: the ``--tensorflow`` twin's spec: TensorFlow beside PyTorch in the base env, one Horovod for both
#: in the clone (as every Open-CE release builds it: open-ce/horovod-feedstock@open-ce-v1.1.3:recipe/build.sh);
#: Horovod's Debug build, as the twin's own (HOROVOD_TWIN_BUILD); TensorFlow's start-up lines on
#: fd 2 named as specs/cpu-tf-torch-horovod.yaml names them (its sources tf-onednn-log, tf-cpu-guard-log).
SPEC_TF = """# Open-CE 1.1.3 as the twin ships it with --tensorflow: Python 3.11, TensorFlow 2.15.1 CPU (conda
# tensorflow-base, standing for Open-CE 1.1.3's 2.4.1: tests/twin/make_twin.py says why), PyTorch 2.13 CPU,
# Horovod 0.28.1 (Gloo and PyTorch only in the site package; the user's clone rebuilds it with
# TensorFlow, PyTorch, MPI and Gloo).
name: {spec}
summary: site twin's Open-CE - TensorFlow 2.15 + PyTorch 2.13 CPU + Horovod 0.28.1 rebuilt for both with MPI
platforms: [linux-64]
engine: conda
python: "3.11"
channels: ["{channel}"]
packages:
  conda:
    - "{tf}"
    - "pytorch 2.13.0.*"
    - "numpy"
    - "pyyaml"
horovod:
  version: "0.28.1"
  install: pip-build
  frameworks: [tensorflow, pytorch]
  controllers: [gloo, mpi]
  gpu_operations: null
  extra_env: {{HOROVOD_DEBUG: "1"}}
expect:
  check_build:
    frameworks: [TensorFlow, PyTorch]
    controllers: [Gloo, MPI]
    tensor_operations: [Gloo, MPI]
  dataloader_start_method: forkserver
  import_warnings:
    - 'I tensorflow/core/util/port\\.cc:\\d+\\] oneDNN custom operations are on'
    - 'I tensorflow/core/platform/cpu_feature_guard\\.cc:\\d+\\] This TensorFlow binary is optimized'
    - '^To enable the following instructions: [A-Z0-9_ ]+, in other operations, rebuild TensorFlow'
env:
  OMP_NUM_THREADS: "1"
"""


def build_base(root: Path, url: str, specs: Tuple[str, ...] = BASE_SPECS) -> Path:
    """Install the read-only base env from the channel (once), as a site would (``specs``: what it asks
    for, default :data:`BASE_SPECS`)."""
    base = root / BASE_REL
    stamp = root / ".stamp-base"
    key = _digest("base", url, specs, (root / ".stamp-channel").read_text())
    if _stamp_ok(stamp, key) and base.is_dir():
        return base
    if base.exists():
        subprocess.run(["chmod", "-R", "u+w", str(base)], check=True)
        shutil.rmtree(base)
    _say(f"installing the base env {base}")
    _install(url, specs, base, root / "cache")
    act = base / "etc" / "conda" / "activate.d"
    act.mkdir(parents=True, exist_ok=True)
    (act / "twin.sh").write_text(ACTIVATE)
    (base / "conda-meta" / "history").write_text(
        f"==> {time.strftime('%Y-%m-%d %H:%M:%S')} <==\n# cmd: make_twin.py (site twin)\n"
        + "".join(f"# update specs: [\"{s}\"]\n" for s in specs))
    subprocess.run([str(base / "bin" / "python"), "-m", "compileall", "-q", "-j0", str(base / "lib")],
                   check=False, capture_output=True)
    # readable by everyone (py-rattler writes conda-meta records 0600), writable by no one
    subprocess.run(["chmod", "-R", "a+rX,a-w", str(base)], check=True)
    stamp.write_text(key)
    return base


def write_site(root: Path, url: str, base: Path, tensorflow: bool = False) -> Dict[str, Path]:
    """Write the modulefile, the site file and the spec (cheap: always rewritten); ``tensorflow``: the
    spec is :data:`SPEC_TF`."""
    mod = root / "modulefiles" / (MODULE + ".lua")
    mod.parent.mkdir(parents=True, exist_ok=True)
    mod.write_text(MODULEFILE.format(prefix=base))
    site = root / "sites" / "twin.yaml"
    site.parent.mkdir(parents=True, exist_ok=True)
    site.write_text(SITE.format(spec=SPEC_NAME, module=MODULE, base=json.dumps(str(base))))
    spec = root / "specs" / f"{SPEC_NAME}.yaml"
    spec.parent.mkdir(parents=True, exist_ok=True)
    text = SPEC_TF.format(spec=SPEC_NAME, channel=url, tf=TF_BASE_SPEC) if tensorflow else \
        SPEC.format(spec=SPEC_NAME, channel=url)
    spec.write_text(text)
    return {"modulefiles": root / "modulefiles", "site": site, "spec_file": spec}


def make_twin(root: Path, jobs: int = 0, tensorflow: bool = False,
              horovod_from: Optional[Path] = None) -> Dict[str, object]:
    """Build (or reuse) the whole twin under ``root``; returns its paths and stage times (seconds).

    Args:
        root: the twin's directory.
        jobs: parallel compile jobs for the twin's Horovod (0: the CPU count).
        tensorflow: also ``tensorflow-base`` in the channel, the base env and the spec.
        horovod_from: another twin's directory whose compiled Horovod (``built/``, same
            :data:`HOROVOD_TWIN_BUILD` stamp) is copied in rather than compiled again.
    """
    root.mkdir(parents=True, exist_ok=True)
    jobs = jobs or os.cpu_count() or 2
    times: Dict[str, float] = {}
    t = time.monotonic()
    wheels = download_wheels(root, WHEELS + (TF_WHEEL,) if tensorflow else WHEELS)
    times["wheels"] = time.monotonic() - t
    hvd = built_horovod(root)
    if hvd is None and horovod_from is not None and built_horovod(horovod_from) is not None:
        shutil.copytree(horovod_from / "built", root / "built", dirs_exist_ok=True)
        hvd = built_horovod(root)
    times["channel"] = times["horovod"] = 0.0
    if hvd is None:  # the Horovod build needs the channel without horovod first
        t = time.monotonic()
        url, _ = build_channel(root, wheels)
        times["channel"] = time.monotonic() - t
        t = time.monotonic()
        hvd = build_horovod(root, url, jobs)
        times["horovod"] = time.monotonic() - t
    t = time.monotonic()
    url, counts = build_channel(root, wheels, [hvd])
    times["channel_with_horovod"] = time.monotonic() - t
    t = time.monotonic()
    base = build_base(root, url, BASE_SPECS + (TF_BASE_SPEC,) if tensorflow else BASE_SPECS)
    times["base_env"] = time.monotonic() - t
    paths = write_site(root, url, base, tensorflow)
    return {"dir": str(root), "channel": url, "base_env": str(base), "module": MODULE, "spec": SPEC_NAME,
            "horovod_wheel": str(hvd), "python_package": counts, "seconds": times, "tensorflow": tensorflow,
            **{k: str(v) for k, v in paths.items()}}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", help="twin directory (default $ENVTOOL_TWIN_DIR or <envtool cache>/twin)")
    ap.add_argument("--jobs", type=int, default=0, help="parallel compile jobs for the Horovod build")
    ap.add_argument("--json", action="store_true", help="print paths and stage times as JSON")
    ap.add_argument("--tensorflow", action="store_true",
                    help="also tensorflow-base (from the tensorflow-cpu wheel) in the channel, base env and spec")
    ap.add_argument("--horovod-from", metavar="TWIN_DIR",
                    help="copy the twin Horovod wheel another twin compiled instead of compiling it again")
    args = ap.parse_args(argv)
    info = make_twin(twin_dir(args.dir), args.jobs, args.tensorflow,
                     Path(args.horovod_from).resolve() if args.horovod_from else None)
    if args.json:
        json.dump(info, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(info["dir"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
