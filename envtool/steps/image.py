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
   and required to have the lock's SHA-256.
3. **Base root file system.** ``debian:<suite>``: Debian's ``mmdebstrap`` (minbase, plus
   ``python3``, ``python3-venv`` and the MPI of the site's ``container.mpi_abi``: Debian's Open MPI
   ``libopenmpi3`` (``libmpi.so.40``) or MPICH ``libmpich12`` (``libmpi.so.12``, the MPICH ABI:
   https://www.mpich.org/abi/)), from Debian's archive; ``dir:/path``: a copy of that root file system.
4. **The environment at /opt/env.** ``python3 -m venv --without-pip /opt/env`` inside the root
   (``chroot``), then pip, run from its own wheel (pip's documented ``python pip.whl/pip``), installs
   the wheelhouse with ``--no-index --no-deps --require-hashes``: the same hashes as ``create``.
5. **MPI ABI check.** Horovod's MPI extension must link the image's ``libmpi`` of the site's ABI
   (``ldd`` inside the root). Otherwise Horovod would have to be compiled inside the image, which
   envtool does not do yet: the build stops (exit 1) saying so.
6. **SBOM.** The SBOM of the installed ``/opt/env`` must list the same components (name, version,
   hashes) as the environment's; the environment's SBOM is written to
   ``/opt/env/share/envtool/sbom.cdx.json``.
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
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from envtool.core.errors import EnvtoolError, UsageError
from envtool.spec.sites import ContainerSection

#: Where the environment lives inside the image.
IMAGE_PREFIX = "/opt/env"
#: The SBOM's path inside the image.
SBOM_PATH = IMAGE_PREFIX + "/share/envtool/sbom.cdx.json"
#: OCI manifest annotation / config label naming the SBOM's path in the image.
SBOM_LABEL = "org.envtool.sbom"
#: Image forms ``--format`` takes.
FORMATS = ("dir", "squashfs", "oci")
#: Debian packages of each MPI ABI and the ``libmpi`` soname they provide (Debian bookworm:
#: https://packages.debian.org/bookworm/libopenmpi3, https://packages.debian.org/bookworm/libmpich12).
MPI_PACKAGES: Dict[str, Tuple[Tuple[str, ...], str]] = {
    "openmpi": (("libopenmpi3", "openmpi-bin"), "libmpi.so.40"),
    "mpich": (("libmpich12", "mpich"), "libmpi.so.12"),
}
#: A step taking longer than this (seconds) gets a progress line.
PROGRESS_AFTER = 2.0


class ImageError(EnvtoolError):
    """The image could not be built (exit 1): a tool failed, or a check of the result failed."""


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

    def to_dict(self) -> Dict:
        """A JSON-ready mapping of the fields."""
        return asdict(self)


#: mksquashfs's compressor for the squashfs form: zstd at level 3 wrote torch's 447 MB ``lib/``
#: 14x faster than mksquashfs's default (gzip level 9) at the same size here (2.3 s vs 34 s, 121 vs
#: 122 MB, squashfs-tools 4.5.1); squashfuse (which ``ch-run`` uses) and Linux >= 4.14 read zstd
#: (https://github.com/vasi/squashfuse, "zstd"; torvalds/linux@v4.14:fs/squashfs/zstd_wrapper.c).
SQUASHFS_COMPRESSION = ("-comp", "zstd", "-Xcompression-level", "3")


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


def _mounts_below(path: Path) -> List[str]:
    """Mount points at or below ``path`` (``/proc/self/mountinfo``, field 5), deepest first."""
    base = str(path.resolve())
    found = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as fh:
            for line in fh:
                point = line.split()[4].replace("\\040", " ")
                if point == base or point.startswith(base + "/"):
                    found.append(point)
    except OSError:
        pass
    return sorted(found, key=len, reverse=True)


def remove_tree(path: Path) -> None:
    """Remove a directory envtool made, after unmounting anything a tool left mounted in it (so the
    removal never reaches into a bound ``/dev`` or ``/proc``); a tree with a mount that will not go
    is left alone and named in an error."""
    if not os.path.lexists(path):
        return
    for point in _mounts_below(path):
        subprocess.run(["umount", "-l", point], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    left = _mounts_below(path)
    if left:
        raise ImageError(f"{path}: still mounted at {', '.join(left)}; not removed (unmount it, then delete it)")
    shutil.rmtree(path, ignore_errors=True)


class _Steps:
    """Runs the build's commands, with progress lines for long steps and a log file."""

    def __init__(self, log: Path, progress: Callable[[str], None]):
        self.log = log
        self.progress = progress
        self.seconds: Dict[str, float] = {}

    def run(self, step: str, title: str, argv: Sequence[str], env: Optional[Dict[str, str]] = None,
            cwd: Optional[Path] = None) -> str:
        """Run ``argv`` (its output goes to the log); returns its stdout.

        Raises:
            ImageError: the command is missing or exits non-zero (the message names the log).
        """
        import shlex

        start = time.monotonic()
        with open(self.log, "a", encoding="utf-8") as fh:
            fh.write(f"\n$ {shlex.join(argv)}\n")
            fh.flush()
            try:
                proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=fh, env=env, cwd=cwd,
                                        text=True, errors="replace")
            except OSError as exc:
                raise ImageError(f"{title}: cannot run {argv[0]}: {exc.strerror or exc} (see {self.log})") from exc
            told = False
            out_parts: List[str] = []
            try:
                while True:
                    try:
                        out, _ = proc.communicate(timeout=PROGRESS_AFTER)
                        out_parts.append(out or "")
                        break
                    except subprocess.TimeoutExpired:
                        if not told:
                            self.progress(f"{title} ...")
                            told = True
            except BaseException:
                proc.kill()
                proc.wait()
                raise
            text = "".join(out_parts)
            fh.write(text)
        took = time.monotonic() - start
        self.seconds[step] = self.seconds.get(step, 0.0) + took
        if proc.returncode != 0:
            raise ImageError(f"{title}: {shlex.join(argv[:3])}… exited with {proc.returncode}")
        if told:
            self.progress(f"{title}: done in {took:.0f} s")
        return text


def _in_root(root: Path, argv: Sequence[str]) -> List[str]:
    """``argv`` run inside ``root``: ``chroot`` in a private mount namespace, with ``/proc`` and
    ``/dev`` mounted there only (they vanish with the namespace, even when envtool is killed)."""
    script = ('set -e; mount -t proc proc "$0/proc"; mount --rbind /dev "$0/dev"; '
              'exec chroot "$0" "$@"')
    return ["unshare", "--mount", "--propagation", "private", "--fork", "sh", "-c", script, str(root), *argv]


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
                     f"{said}. An image needs that wheel, or a Horovod compiled inside the image, which envtool does "
                     "not do yet; recreate the environment (envtool create) to put the wheel in the cache")


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


def compare_sbom(env: Path, image_env: Path) -> List[str]:
    """Differences between the SBOM components of two environment prefixes (name, version,
    hashes), in words; empty when they are the same."""
    a, b = _sbom_components(env), _sbom_components(image_env)
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
                progress: Callable[[str], None] = lambda s: None) -> ImageResult:
    """Build the image of the environment at ``prefix`` into the new directory ``output``.

    Args:
        prefix: a venv environment made by envtool (holds ``conda-lock.yml``).
        output: the directory to create (must not exist).
        formats: some of :data:`FORMATS`.
        container: the site's ``container`` section (base, MPI ABI), or None (``debian:bookworm``, Open MPI).
        site_caches, cache_group: the site's wheel caches and their group (:func:`envtool.horovod.cache.chain`).
        progress: called with a line for each step that takes longer than :data:`PROGRESS_AFTER` seconds.
    Returns:
        the :class:`ImageResult`.
    Raises:
        UsageError: bad input (no lock, a conda environment, output exists, unknown form or base; exit 2).
        ImageError: a tool failed, the Horovod wheel is missing or links another MPI ABI, the SBOMs
            differ (exit 1).
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
    mpi_pkgs, soname = MPI_PACKAGES[section.mpi_abi]

    result = ImageResult(output=str(output), prefix=str(prefix), lock=str(lock_path), base=section.base,
                         mpi_abi=section.mpi_abi)
    work = Path(tempfile.mkdtemp(prefix=f".{output.name}.envtool-image-", dir=output.parent))
    log = work / "build.log"
    steps = _Steps(log, progress)
    keep_log = output.parent / f"{output.name}.envtool-image.log"
    try:
        # 2. the wheelhouse
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
        for p in built:
            if p.name.lower() != "horovod":
                raise ImageError(f"{lock_path}: {p.name} is built by envtool; only a Horovod wheel can be reused")
            wheel = _horovod_wheel(lock, p.built, p.sha256, site_caches, cache_group)
            key = json.loads((wheel.parent / "key.json").read_text(encoding="utf-8"))
            said_mpi = str(key.get("mpi", ""))
            wants = {"openmpi": "Open MPI", "mpich": "MPICH"}[section.mpi_abi]
            if wants.lower() not in said_mpi.lower():
                raise ImageError(f"the Horovod wheel {wheel} was built against {said_mpi or 'no MPI'}; the site's "
                                 f"container.mpi_abi is {section.mpi_abi}: Horovod must be compiled inside the image "
                                 "against that MPI, which envtool does not do yet")
            shutil.copy2(wheel, house / wheel.name)
            lines.append(f"{p.name} @ file:///tmp/envtool-wheelhouse/{wheel.name} --hash=sha256:{p.sha256}")
        (house / "requirements.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        pip_wheel = next((w for w in sorted(house.glob("pip-*.whl"))), None)
        if pip_wheel is None:
            raise ImageError(f"no pip wheel to install with: neither the lock nor {prefix}/.envtool/create.json names one")

        # 3. the base root file system
        root = work / "rootfs"
        if section.base.startswith("debian:"):
            suite = section.base.split(":", 1)[1]
            steps.run("base", f"Make a Debian {suite} root file system with mmdebstrap",
                      ["unshare", "--mount", "--propagation", "private", "--fork",
                       "mmdebstrap", "--variant=minbase", "--mode=root",
                       "--include=" + ",".join(("python3", "python3-venv", "ca-certificates") + mpi_pkgs),
                       "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
                       suite, str(root)])
        elif section.base.startswith("dir:"):
            src = Path(section.base.split(":", 1)[1])
            if not (src / "bin").exists():
                raise UsageError(f"container.base: {src} is not a root file system (no bin/)")
            steps.run("base", f"Copy the root file system {src}", ["cp", "-a", str(src), str(root)])
        else:
            raise UsageError(f"container.base: {section.base}: only debian:<suite> and dir:/path are built so far")

        # 4. the environment at /opt/env, from the wheelhouse
        shutil.copytree(house, root / "tmp" / "envtool-wheelhouse")
        py = steps.run("python", "Check the image's Python",
                       _in_root(root, ["/usr/bin/python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]))
        if lock.interpreter is not None:
            want = ".".join(str(lock.interpreter.version).split(".")[:2])
            if py.strip() != want:
                raise ImageError(f"the base {section.base} has Python {py.strip()}; the lock was resolved for {want} "
                                 "(choose a base with that Python)")
        steps.run("venv", "Create the venv /opt/env",
                  _in_root(root, ["/usr/bin/python3", "-m", "venv", "--without-pip", IMAGE_PREFIX]))
        steps.run("install", f"Install {len(lines)} packages into /opt/env (no index, hashes required)",
                  _in_root(root, [IMAGE_PREFIX + "/bin/python", f"/tmp/envtool-wheelhouse/{pip_wheel.name}/pip",
                                  "install", "--no-index", "--no-deps", "--require-hashes", "--no-cache-dir",
                                  "--disable-pip-version-check", "--find-links", "/tmp/envtool-wheelhouse",
                                  "-r", "/tmp/envtool-wheelhouse/requirements.txt"]))
        shutil.rmtree(root / "tmp" / "envtool-wheelhouse")
        image_env = root / IMAGE_PREFIX.lstrip("/")
        record = prefix / ".envtool" / "create.json"
        if record.is_file():  # how Horovod was built: the SBOM's Horovod properties read it
            (image_env / ".envtool").mkdir(exist_ok=True)
            shutil.copy2(record, image_env / ".envtool" / "create.json")
        shutil.copy2(lock_path, image_env / "conda-lock.yml")

        # 5. Horovod's MPI extension links the image's MPI of the site's ABI
        if built:
            exts = sorted(image_env.glob("lib/python*/site-packages/horovod/torch/mpi_lib_v2*.so"))
            if not exts:
                raise ImageError(f"no Horovod PyTorch extension (horovod/torch/mpi_lib_v2*.so) under {IMAGE_PREFIX}")
            inside = "/" + str(exts[0].relative_to(root))
            ldd = steps.run("abi", "Check Horovod's MPI library", _in_root(root, ["ldd", inside]))
            libmpi = [ln.strip() for ln in ldd.splitlines() if re.match(r"\s*libmpi\.so", ln)]
            if not libmpi:
                raise ImageError(f"{inside} links no libmpi: Horovod was built without MPI")
            result.libmpi = re.sub(r"\s*\(0x[0-9a-f]+\)$", "", libmpi[0])
            if not libmpi[0].startswith(soname) or "not found" in libmpi[0]:
                raise ImageError(f"{inside} needs {libmpi[0]}; the site's {section.mpi_abi} ABI provides {soname}: "
                                 "Horovod must be compiled inside the image against that MPI, which envtool does not "
                                 "do yet")

        # 6. the SBOM: the installed /opt/env must list what the environment lists
        differs = compare_sbom(prefix, image_env)
        if differs:
            raise ImageError("the image's /opt/env differs from the environment: " + "; ".join(differs))
        sbom = root / SBOM_PATH.lstrip("/")
        sbom.parent.mkdir(parents=True, exist_ok=True)
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
                      ["mksquashfs", str(root), str(out_tmp / "image.sqfs"), "-noappend", "-quiet", "-no-progress",
                       *SQUASHFS_COMPRESSION])
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
