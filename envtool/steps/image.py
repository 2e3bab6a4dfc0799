"""``envtool image``: a container image of an environment, built from the environment's own lock.

The image is made in a temporary directory next to the output and renamed into place at the end;
a failure or an interrupt removes it (nothing half-built is left). Steps:

1. **Lock.** ``PREFIX/conda-lock.yml`` (the lockfile ``create`` wrote; :func:`envtool.lock.lockio.read_lock`).
   Only venv environments are supported so far (a conda environment is refused, exit 2).
2. **Wheelhouse on the host.** ``pip download --no-deps --only-binary=:all: --require-hashes`` of
   every locked pip entry (name, version and the lock's SHA-256, through this machine's pip
   configuration, so the site's index or pip's cache answers; nothing is pulled from an image
   registry). The wheels that seeded the venv (pip, from ``PREFIX/.envtool/create.json``) are added
   with their SHA-256. Horovod is the wheel envtool built for the environment: the wheel-cache entry
   the lock names (``envtool.built.horovod``), proven by :meth:`envtool.horovod.cache.WheelCache.find`
   and required to have the lock's SHA-256 — when that wheel links an MPI of the site's ABI.
   Otherwise (or with ``--compile-horovod``) Horovod is compiled in a build root of the same base
   with the environment's own ``HOROVOD_*`` variables (:mod:`envtool.steps.image_horovod`).
3. **Base root file system.** ``debian:<suite>``: Debian's ``mmdebstrap`` (minbase, plus
   ``python3``, ``python3-venv`` and the MPI of the site's ``container.mpi_abi``: Debian's Open MPI
   ``libopenmpi3`` (``libmpi.so.40``) or MPICH ``libmpich12`` (``libmpich.so.12``, Debian's name for the MPICH ABI's ``libmpi.so.12``:
   https://www.mpich.org/abi/)), from Debian's archive; ``dir:/path``: a copy of that root file system.
4. **The environment at /opt/env.** ``python3 -m venv --without-pip /opt/env`` inside the root
   (``chroot``), then pip, run from its own wheel (pip's documented ``python pip.whl/pip``), installs
   the wheelhouse with ``--no-index --no-deps --require-hashes``: the same hashes as ``create``.
   When Horovod was compiled in the image, the image's copy of the lock names that wheel (kept at
   ``/opt/env/share/envtool/``) and its ``create.json`` records the compile.
5. **MPI ABI check.** Horovod's MPI extension must link the image's ``libmpi`` of the site's ABI
   (``ldd`` inside the root); otherwise the build stops (exit 1).
6. **SBOM.** The SBOM of the installed ``/opt/env`` must list the same components (name, version,
   hashes) as the environment's (a Horovod compiled in the image: the same version, its own
   hashes); the environment's SBOM (with a compiled Horovod: the SBOM of the image's ``/opt/env``) is
   written to ``/opt/env/share/envtool/sbom.cdx.json``.
7. **Forms.** ``dir`` (``OUTPUT/rootfs``, for ``ch-run OUTPUT/rootfs``), ``squashfs``
   (``OUTPUT/image.sqfs``, ``mksquashfs``; ``ch-run`` mounts it with squashfuse), ``oci`` (``OUTPUT/oci``,
   an OCI image layout made with ``umoci``, tag ``env``; the manifest annotation and config label
   :data:`SBOM_LABEL` name the SBOM's path in the image; ``podman load``/``skopeo copy oci:OUTPUT/oci:env``).

Tools: mmdebstrap (https://gitlab.mister-muffin.de/josch/mmdebstrap), umoci (https://umo.ci/),
squashfs-tools, Charliecloud (https://hpc.github.io/charliecloud/ch-run.html).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from envtool.core import squashfs
from envtool.core.errors import UsageError
from envtool.spec.sites import ContainerSection
from envtool.steps.image_root import (IMAGE_PREFIX, PROGRESS_AFTER, WHEELHOUSE, ImageError, Steps, in_root,
                                      install_env, make_base, remove_tree)

__all__ = ["IMAGE_PREFIX", "PROGRESS_AFTER", "ImageError", "ImageResult", "build_image", "compare_sbom",
           "remove_tree", "FORMATS", "SBOM_PATH", "SBOM_LABEL", "MPI_PACKAGES"]
#: The SBOM's path inside the image.
SBOM_PATH = IMAGE_PREFIX + "/share/envtool/sbom.cdx.json"
#: OCI manifest annotation / config label naming the SBOM's path in the image.
SBOM_LABEL = "org.envtool.sbom"
#: Image forms ``--format`` takes.
FORMATS = ("dir", "squashfs", "oci")
#: Debian packages of each MPI ABI and the sonames of ``libmpi`` they provide (Debian bookworm:
#: https://packages.debian.org/bookworm/amd64/libopenmpi3/filelist ``libmpi.so.40``;
#: https://packages.debian.org/bookworm/amd64/libmpich12/filelist ``libmpich.so.12``, the MPICH ABI
#: library that upstream MPICH installs as ``libmpi.so.12``: https://www.mpich.org/abi/).
MPI_PACKAGES: Dict[str, Tuple[Tuple[str, ...], Tuple[str, ...]]] = {
    "openmpi": (("libopenmpi3", "openmpi-bin"), ("libmpi.so.40",)),
    "mpich": (("libmpich12", "mpich"), ("libmpi.so.12", "libmpich.so.12")),
}
@dataclass
class ImageResult:
    """What :func:`build_image` made.

    Attributes:
        output: the output directory.
        prefix: the environment it was built from.
        lock: the lockfile used.
        base: the base (``debian:bookworm``).
        mpi_abi: the MPI ABI of the image.
        libmpi: the ``libmpi`` Horovod's extension resolves to inside the image.
        forms: form → path (``dir``: ``OUTPUT/rootfs``, ``squashfs``: ``OUTPUT/image.sqfs``, ``oci``: ``OUTPUT/oci``).
        sizes: form → bytes.
        components: components in the SBOM.
        seconds: wall time of the whole build.
        step_seconds: step id → seconds.
        horovod_compiled: when Horovod was compiled inside the image, what
            :class:`envtool.steps.image_horovod.InImageResult` says (wheel, SHA-256, source archive and
            its SHA-256, MPI, toolchain, fix rules, variables, why); empty when the wheel was reused.
    """

    output: str
    prefix: str
    lock: str
    base: str
    mpi_abi: str
    libmpi: str = ""
    forms: Dict[str, str] = field(default_factory=dict)
    sizes: Dict[str, int] = field(default_factory=dict)
    components: int = 0
    seconds: float = 0.0
    step_seconds: Dict[str, float] = field(default_factory=dict)
    horovod_compiled: Dict = field(default_factory=dict)

    def to_dict(self) -> Dict:
        """A JSON-ready mapping of the fields."""
        return asdict(self)


def _keep_log(log: Path, want: Path) -> Path:
    """Copy the build ``log`` next to the output as ``want``, or under a new unique name when
    ``want`` exists: the file is created (``O_EXCL``, never through a symbolic link) so nothing
    another user put in the output's directory is followed or replaced.

    Returns:
        the path written (mode 0600).
    Raises:
        OSError: the directory cannot be written.
    """
    data = log.read_bytes()
    try:
        fd = os.open(want, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        path = want
    except FileExistsError:
        fd, name = tempfile.mkstemp(dir=want.parent, prefix=want.name.replace(".log", "-"), suffix=".log")
        path = Path(name)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return path


def _tree_size(path: Path) -> int:
    """Bytes of the regular files under ``path`` (or of ``path`` itself), hard links counted once."""
    if path.is_file():
        return path.stat().st_size
    seen = set()
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            total += st.st_size
    return total


def _horovod_wheel(lock, built_key: str, sha256: str, site_caches: Sequence[str], group: Optional[str]) -> Path:
    """The wheel envtool built for the environment: the wheel-cache entry ``built_key`` (the lock's
    ``envtool.built.horovod``), proven by :meth:`WheelCache.find` with the lock's SHA-256.

    Raises:
        ImageError: no cache holds a proven wheel of that hash (the reasons are named).
    """
    from envtool.horovod import cache as wheel_cache

    reasons = []
    for c in wheel_cache.chain(site_caches, group=group):
        entry = c.dir / built_key
        try:
            key = wheel_cache.key_from_json(json.loads((entry / "key.json").read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if key.digest() != built_key:
            reasons.append(f"{entry}: key.json does not hash to {built_key}")
            continue
        wheel, why = c.find(key, want_sha256=sha256)
        if wheel is not None:
            return wheel
        if why:
            reasons.append(why)
    said = "; ".join(reasons) or "no wheel cache holds the entry"
    raise ImageError(f"the Horovod wheel the lock records (build key {built_key}, SHA-256 {sha256}) is not available: "
                     f"{said}. An image needs that wheel (recreate the environment with envtool create to put it in "
                     "the cache), or --compile-horovod to compile Horovod inside the image")


#: The MPI ABI of each MPI family :func:`envtool.checks.launchers.mpi_identity` names: Open MPI's
#: (IBM Spectrum MPI is built on Open MPI), or the MPICH ABI (MPICH, Cray MPICH, Intel MPI, MVAPICH:
#: https://www.mpich.org/abi/).
FAMILY_ABI = {"openmpi": "openmpi", "spectrum-mpi": "openmpi", "mpich": "mpich", "cray-mpich": "mpich",
              "intel-mpi": "mpich", "mvapich": "mpich"}


def wheel_mpi_abi(mpi: str) -> str:
    """The MPI ABI of a wheel from its build key's ``mpi`` (the first line of ``mpirun --version``
    when it was built, or ``not used``).

    Returns:
        ``openmpi``, ``mpich``, ``none`` (built without MPI), or ``""`` when the banner is not recognised.
    """
    from envtool.checks.launchers import mpi_identity

    if not mpi.strip() or mpi.strip().lower() in ("not used", "none"):
        return "none"
    family, _version = mpi_identity(mpi)
    return FAMILY_ABI.get(family or "", "")


def _seed_wheels(prefix: Path) -> List[Path]:
    """The wheels that seeded the venv (the ``.whl`` arguments of the ``create-venv`` step in
    ``PREFIX/.envtool/create.json``), those that still exist."""
    try:
        data = json.loads((prefix / ".envtool" / "create.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    wheels = []
    for step in data.get("steps") or []:
        if isinstance(step, dict) and step.get("id") == "create-venv":
            for cmd in step.get("commands") or []:
                for word in cmd:
                    if isinstance(word, str) and word.endswith(".whl") and Path(word).is_file():
                        wheels.append(Path(word))
    return wheels


def _sbom_components(prefix: Path) -> Dict[str, Tuple[str, Tuple[str, ...]]]:
    """name → (version, sorted ``alg:hash``) of the SBOM of ``prefix``."""
    from envtool.sbom import build_bom, render

    data = json.loads(render(build_bom(prefix)))
    return {c["name"]: (c.get("version", ""), tuple(sorted(f"{h['alg']}:{h['content']}" for h in c.get("hashes", []))))
            for c in data.get("components", [])}


def compare_sbom(env: Path, image_env: Path, rebuilt: Sequence[str] = ()) -> List[str]:
    """Differences between the SBOM components of two environment prefixes (name, version,
    hashes), in words; empty when they are the same.

    Args:
        env, image_env: the two prefixes.
        rebuilt: components compiled anew for the image (``horovod``): only their versions must agree.
    """
    a, b = _sbom_components(env), _sbom_components(image_env)
    for name in rebuilt:
        if name in a and name in b and a[name][0] == b[name][0]:
            del a[name], b[name]
    said = []
    for name in sorted(set(a) | set(b)):
        if name not in b:
            said.append(f"{name} {a[name][0]} missing in the image")
        elif name not in a:
            said.append(f"{name} {b[name][0]} in the image only")
        elif a[name] != b[name]:
            said.append(f"{name}: environment {a[name]}, image {b[name]}")
    return said


def build_image(prefix: Path, output: Path, formats: Sequence[str], container: Optional[ContainerSection],
                site_caches: Sequence[str] = (), cache_group: Optional[str] = None,
                progress: Callable[[str], None] = lambda s: None, compile_horovod: bool = False) -> ImageResult:
    """Build the image of the environment at ``prefix`` into the new directory ``output``.

    Args:
        prefix: a venv environment made by envtool (holds ``conda-lock.yml``).
        output: the directory to create (must not exist).
        formats: some of :data:`FORMATS`.
        container: the site's ``container`` section (base, MPI ABI), or None (``debian:bookworm``, Open MPI).
        site_caches, cache_group: the site's wheel caches and their group (:func:`envtool.horovod.cache.chain`).
        progress: called with a line for each step that takes longer than :data:`PROGRESS_AFTER` seconds.
        compile_horovod: compile Horovod inside the image even when the environment's wheel could be
            reused (:mod:`envtool.steps.image_horovod`); it is compiled anyway when the wheel's MPI
            is not of the site's ABI.
    Returns:
        the :class:`ImageResult`.
    Raises:
        UsageError: bad input (no lock, a conda environment, output exists, unknown form or base; exit 2).
        ImageError: a tool failed (the Horovod compile included), the Horovod wheel is missing, the
            image's Horovod links another MPI ABI, the SBOMs differ (exit 1).
    """
    from envtool.lock.lockio import read_lock
    from envtool.sbom import write_sbom

    started = time.monotonic()
    prefix = Path(prefix).absolute()
    output = Path(output).absolute()
    section = container or ContainerSection(runtime="charliecloud", source="")
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise UsageError(f"--format: expected some of {', '.join(FORMATS)} (comma-separated), got {','.join(formats)!r}")
    lock_path = prefix / "conda-lock.yml"
    if not lock_path.is_file():
        raise UsageError(f"{prefix}: no conda-lock.yml (expected an environment made by envtool create)")
    if os.path.lexists(output):
        raise UsageError(f"--output: {output} exists; give a new directory")
    if not output.parent.is_dir():
        raise UsageError(f"--output: {output.parent} is not a directory")
    if section.base.startswith("oci-archive:"):
        raise UsageError(f"container.base: {section.base}: only debian:<suite> and dir:/path are built so far")
    if section.base.startswith("dir:") and not (Path(section.base.split(":", 1)[1]) / "bin").exists():
        raise UsageError(f"container.base: {section.base.split(':', 1)[1]} is not a root file system (no bin/)")
    lock = read_lock(lock_path)
    if lock.engine != "venv":
        raise UsageError(f"{lock_path}: engine {lock.engine or 'unknown'}: envtool image builds venv environments only "
                         "so far")
    if os.geteuid() != 0:
        raise UsageError("envtool image runs chroot and mmdebstrap as root: run it as root")
    for tool, needed in (("mmdebstrap", section.base.startswith("debian:")), ("mksquashfs", "squashfs" in formats),
                         ("umoci", "oci" in formats), ("unshare", True), ("chroot", True)):
        if needed and shutil.which(tool) is None:
            raise UsageError(f"{tool} is not installed (Debian package {tool if tool != 'mksquashfs' else 'squashfs-tools'})")
    platform = lock.platforms[0]
    pip_entries = [p for p in lock.for_platform(platform) if p.manager == "pip"]
    plain = [p for p in pip_entries if not p.built]
    built = [p for p in pip_entries if p.built]
    if any(p.manager == "conda" for p in lock.for_platform(platform)):
        raise UsageError(f"{lock_path}: conda entries: envtool image builds venv environments only so far")
    missing_hash = [p.name for p in pip_entries if not p.sha256]
    if missing_hash:
        raise UsageError(f"{lock_path}: no SHA-256 for {', '.join(missing_hash)}: an image is built from hashes only")
    if compile_horovod and not any(p.name.lower() == "horovod" for p in built):
        raise UsageError(f"--compile-horovod: {lock_path} has no Horovod that envtool built (no envtool.built entry "
                         "for horovod); there is nothing to compile")
    mpi_pkgs, sonames = MPI_PACKAGES[section.mpi_abi]
    runtime_pkgs = ("python3", "python3-venv", "ca-certificates") + mpi_pkgs

    result = ImageResult(output=str(output), prefix=str(prefix), lock=str(lock_path), base=section.base,
                         mpi_abi=section.mpi_abi)
    work = Path(tempfile.mkdtemp(prefix=f".{output.name}.envtool-image-", dir=output.parent))
    log = work / "build.log"
    steps = Steps(log, progress)
    keep_log = output.parent / f"{output.name}.envtool-image.log"
    try:
        # 2a. Horovod: the environment's wheel when it links an MPI of the site's ABI, else a compile
        compile_why = ""
        reuse: List[Tuple[Path, str]] = []  # (wheel, SHA-256)
        for p in built:
            if p.name.lower() != "horovod":
                raise ImageError(f"{lock_path}: {p.name} is built by envtool; only Horovod can be reused or compiled")
            try:
                wheel = _horovod_wheel(lock, p.built, p.sha256, site_caches, cache_group)
            except ImageError as exc:
                if not compile_horovod:
                    steps.note(str(exc))
                    raise
                steps.note(f"the environment's Horovod wheel is not used: {exc}")
                compile_why = "--compile-horovod (no wheel cache holds a proven copy of the environment's wheel)"
                continue
            said_mpi = str(json.loads((wheel.parent / "key.json").read_text(encoding="utf-8")).get("mpi", ""))
            abi = wheel_mpi_abi(said_mpi)
            if abi == "none":
                raise ImageError(f"the environment's Horovod was built without MPI ({wheel.parent}/key.json: mpi "
                                 f"{said_mpi!r}); the site's container.mpi_abi {section.mpi_abi} is for Horovod's MPI "
                                 "(hybrid mode): build the environment with HOROVOD_WITH_MPI=1")
            if compile_horovod:
                compile_why = "--compile-horovod"
            elif abi != section.mpi_abi:
                from envtool.checks.launchers import mpi_identity

                family, version = mpi_identity(said_mpi)
                built_with = " ".join(w for w in (family, version) if w) or repr(said_mpi[:60])
                compile_why = (f"the wheel links {built_with} ({abi or 'ABI unknown'}), the site's "
                               f"container.mpi_abi is {section.mpi_abi}")
            else:
                reuse.append((wheel, p.sha256))
        if compile_why:
            from envtool.steps import image_horovod

            decision = image_horovod.recorded_build(prefix, lock, compile_why)
            image_horovod.check_base_for_build(steps, section.base, section.mpi_abi, decision)

        # 2b. the wheelhouse
        house = work / "wheelhouse"
        house.mkdir()
        reqs = [f"{p.name}=={p.version} --hash=sha256:{p.sha256}" for p in plain]
        (work / "download.txt").write_text("\n".join(reqs) + "\n", encoding="utf-8")
        steps.run("wheelhouse", f"Download {len(plain)} locked wheels (hashes required)",
                  [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--require-hashes",
                   "--disable-pip-version-check", "-d", str(house), "-r", str(work / "download.txt")])
        from envtool.horovod.cache import file_sha256

        lines = list(reqs)
        seeds = _seed_wheels(prefix)
        for w in seeds:
            shutil.copy2(w, house / w.name)
            name, version = w.name.split("-")[:2]
            if not any(p.name.lower() == name.lower() for p in plain):
                lines.append(f"{name}=={version} --hash=sha256:{file_sha256(w)}")
        pip_wheel = next((w for w in sorted(house.glob("pip-*.whl"))), None)
        if pip_wheel is None:
            raise ImageError(f"no pip wheel to install with: neither the lock nor {prefix}/.envtool/create.json names one")
        (house / "base.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        for wheel, sha in reuse:
            shutil.copy2(wheel, house / wheel.name)
            lines.append(f"horovod @ file://{WHEELHOUSE}/{wheel.name} --hash=sha256:{sha}")
        if compile_why:
            progress(f"Horovod is compiled inside the image: {compile_why}")
            wheel, compiled = image_horovod.compile_in_image(
                steps, work, section.base, section.mpi_abi, runtime_pkgs, house, pip_wheel.name, "base.txt",
                len(lines), decision)
            result.horovod_compiled = compiled.to_dict()
            shutil.move(str(wheel), house / wheel.name)
            lines.append(f"horovod @ file://{WHEELHOUSE}/{wheel.name} --hash=sha256:{compiled.sha256}")
        (house / "requirements.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")

        # 3. the base root file system
        root = work / "rootfs"
        make_base(steps, section.base, root, runtime_pkgs)

        # 4. the environment at /opt/env, from the wheelhouse
        py = steps.run("python", "Check the image's Python",
                       in_root(root, ["/usr/bin/python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]))
        if lock.interpreter is not None:
            want = ".".join(str(lock.interpreter.version).split(".")[:2])
            if py.strip() != want:
                raise ImageError(f"the base {section.base} has Python {py.strip()}; the lock was resolved for {want} "
                                 "(choose a base with that Python)")
        image_env = install_env(steps, root, house, pip_wheel.name, "requirements.txt", len(lines))
        record = prefix / ".envtool" / "create.json"
        if record.is_file():  # how Horovod was built: the SBOM's Horovod properties read it
            (image_env / ".envtool").mkdir(exist_ok=True)
            shutil.copy2(record, image_env / ".envtool" / "create.json")
        if result.horovod_compiled:
            from envtool.lock.lockio import write_lock
            from envtool.steps import image_horovod

            comp = image_horovod.InImageResult(**result.horovod_compiled)
            if record.is_file():
                image_horovod.amend_record(image_env / ".envtool" / "create.json", comp)
            write_lock(image_horovod.image_lock(lock, house / comp.wheel, comp.sha256, decision.requirement),
                       image_env / "conda-lock.yml")
        else:
            shutil.copy2(lock_path, image_env / "conda-lock.yml")

        # 5. Horovod's MPI extension links the image's MPI of the site's ABI
        if built:
            exts = sorted(image_env.glob("lib/python*/site-packages/horovod/torch/mpi_lib_v2*.so"))
            if not exts:
                raise ImageError(f"no Horovod PyTorch extension (horovod/torch/mpi_lib_v2*.so) under {IMAGE_PREFIX}")
            inside = "/" + str(exts[0].relative_to(root))
            ldd = steps.run("abi", "Check Horovod's MPI library", in_root(root, ["ldd", inside]))
            libmpi = [ln.strip() for ln in ldd.splitlines() if re.match(r"\s*libmpi(ch)?\.so", ln)]
            if not libmpi:
                raise ImageError(f"{inside} links no libmpi: Horovod was built without MPI")
            result.libmpi = re.sub(r"\s*\(0x[0-9a-f]+\)$", "", libmpi[0])
            if not libmpi[0].startswith(sonames) or "not found" in libmpi[0]:
                raise ImageError(f"{inside} needs {libmpi[0]}; the site's {section.mpi_abi} ABI provides "
                                 f"{' or '.join(sonames)}"
                                 + ("" if result.horovod_compiled else
                                    ": build with --compile-horovod to compile Horovod inside the image against it"))

        # 6. the SBOM: the installed /opt/env must list what the environment lists (Horovod's
        #    hashes excepted when it was compiled in the image: then its version must agree)
        rebuilt = ("horovod",) if result.horovod_compiled else ()
        differs = compare_sbom(prefix, image_env, rebuilt=rebuilt)
        if differs:
            raise ImageError("the image's /opt/env differs from the environment: " + "; ".join(differs))
        sbom = root / SBOM_PATH.lstrip("/")
        sbom.parent.mkdir(parents=True, exist_ok=True)
        if result.horovod_compiled:  # the image's own installed set, named by its path in the image
            write_sbom(image_env, sbom, name=lock.spec or prefix.name, label_prefix=IMAGE_PREFIX)
            shutil.copy2(house / comp.wheel, sbom.parent / comp.wheel)
        else:
            write_sbom(prefix, sbom, name=lock.spec or prefix.name)
        result.components = len(json.loads(sbom.read_text(encoding="utf-8")).get("components", []))
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for f in (root / junk).glob("*"):
                if f.is_file():
                    f.unlink()

        # 7. the forms
        out_tmp = work / "out"
        out_tmp.mkdir()
        if "squashfs" in formats:
            steps.run("squashfs", "Write the squashfs image",
                      squashfs.mksquashfs_argv(root, out_tmp / "image.sqfs"))
        if "oci" in formats:
            oci = out_tmp / "oci"
            label = f"{SBOM_LABEL}={SBOM_PATH}"
            steps.run("oci", "Write the OCI image layout", ["umoci", "init", "--layout", str(oci)])
            steps.run("oci", "Write the OCI image layout", ["umoci", "new", "--image", f"{oci}:env"])
            steps.run("oci", "Write the OCI image layer", ["umoci", "insert", "--image", f"{oci}:env", str(root), "/"])
            steps.run("oci", "Write the OCI image config",
                      ["umoci", "config", "--image", f"{oci}:env", "--config.label", label, "--manifest.annotation",
                       label, "--config.env", f"PATH={IMAGE_PREFIX}/bin:/usr/local/bin:/usr/bin:/bin",
                       "--config.env", f"VIRTUAL_ENV={IMAGE_PREFIX}", "--config.cmd", f"{IMAGE_PREFIX}/bin/python"])
            steps.run("oci", "Tidy the OCI image layout", ["umoci", "gc", "--layout", str(oci)])
        if "dir" in formats:
            root.rename(out_tmp / "rootfs")
        shutil.copy2(log, out_tmp / "build.log")
        out_tmp.rename(output)
    except BaseException as exc:
        try:
            if log.exists():
                kept = _keep_log(log, keep_log)
                # envtool's main prints both (under --json too), also for an interrupt
                setattr(exc, "log", kept)
                setattr(exc, "outcome", f"nothing was left at {output}")
        finally:
            remove_tree(work)
        raise
    remove_tree(work)
    for form, rel in (("dir", "rootfs"), ("squashfs", "image.sqfs"), ("oci", "oci")):
        if form in formats:
            result.forms[form] = str(output / rel)
            result.sizes[form] = _tree_size(output / rel)
    result.step_seconds = {k: round(v, 1) for k, v in steps.seconds.items()}
    result.seconds = round(time.monotonic() - started, 1)
    return result
