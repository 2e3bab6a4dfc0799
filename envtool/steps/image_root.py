"""Root file systems for ``envtool image``: making one, running commands inside it, removing it.

A root is a directory tree (``mmdebstrap``'s output, or a copy of the site's ``dir:`` base).
Commands run in it through ``chroot`` inside a private mount namespace (:func:`in_root`), so the
``/proc`` and ``/dev`` mounted for them vanish with the namespace even when envtool is killed.
:class:`Steps` runs each command with its output in the build log and a progress line when it
takes longer than :data:`PROGRESS_AFTER` seconds.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from envtool.core.errors import EnvtoolError, UsageError

#: Where the environment lives inside the image.
IMAGE_PREFIX = "/opt/env"
#: Where the wheelhouse is put inside a root while the environment is installed.
WHEELHOUSE = "/tmp/envtool-wheelhouse"
#: The environment commands get inside a root: nothing of the host's (no ``PIP_*``, no host paths).
CLEAN_ENV = ("/usr/bin/env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/root", "LANG=C.UTF-8")
#: A step taking longer than this (seconds) gets a progress line.
PROGRESS_AFTER = 2.0


class ImageError(EnvtoolError):
    """The image could not be built (exit 1): a tool failed, or a check of the result failed."""


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


class Steps:
    """Runs the build's commands, with progress lines for long steps and a log file."""

    def __init__(self, log: Path, progress: Callable[[str], None]):
        self.log = log
        self.progress = progress
        self.seconds: Dict[str, float] = {}
        log.touch(mode=0o600)

    def note(self, text: str) -> None:
        """Write a line to the build log."""
        with open(self.log, "a", encoding="utf-8") as fh:
            fh.write(f"# {text}\n")

    def run(self, step: str, title: str, argv: Sequence[str], env: Optional[Dict[str, str]] = None,
            cwd: Optional[Path] = None, follow: str = "") -> str:
        """Run ``argv`` (its output goes to the log); returns its stdout.

        Args:
            step: the step id its seconds are counted under.
            title: the progress line's words.
            argv, env, cwd: the command.
            follow: a label (``compiling Horovod``): read the output (stdout and stderr) line by
                line and show the build's phase and CMake's ``[ NN%]`` as it goes
                (:class:`envtool.steps.progress.BuildProgress`, a line per phase and per 10 %).
        Raises:
            ImageError: the command is missing or exits non-zero (the message names the log).
        """
        import shlex

        if follow:
            return self._follow(step, title, argv, follow)
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
            raise ImageError(f"{title}: {shown(argv)}… exited with {proc.returncode} (see {self.log})")
        if told:
            self.progress(f"{title}: done in {took:.0f} s")
        return text


    def _follow(self, step: str, title: str, argv: Sequence[str], label: str) -> str:
        """:meth:`run` with the output followed line by line (see its ``follow``)."""
        import shlex

        from envtool.steps.progress import BuildProgress

        steps = self

        class _Lines:  # BuildProgress writes whole lines; they become progress lines
            def write(self, text: str) -> None:
                if text.strip():
                    steps.progress(text.strip())

            def flush(self) -> None:
                pass

        start = time.monotonic()
        meter = BuildProgress(label, _Lines(), live=False)  # type: ignore[arg-type]  # write/flush is all it uses
        self.progress(f"{title} ...")
        with open(self.log, "a", encoding="utf-8") as fh:
            fh.write(f"\n$ {shlex.join(argv)}\n")
            fh.flush()
            try:
                proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        errors="replace")
            except OSError as exc:
                raise ImageError(f"{title}: cannot run {argv[0]}: {exc.strerror or exc} (see {self.log})") from exc
            parts: List[str] = []
            try:
                assert proc.stdout is not None
                for line in proc.stdout:
                    fh.write(line)
                    parts.append(line)
                    meter.feed(line)
                proc.wait()
            except BaseException:
                proc.kill()
                proc.wait()
                raise
            finally:
                meter.stop()
        took = time.monotonic() - start
        self.seconds[step] = self.seconds.get(step, 0.0) + took
        if proc.returncode != 0:
            raise ImageError(f"{title}: {shown(argv)}… exited with {proc.returncode} (see {self.log})")
        self.progress(f"{title}: done in {took:.0f} s")
        return "".join(parts)


#: ``unshare`` (util-linux) options every command of a build runs under: a private mount namespace
#: (what is mounted for the command vanishes with it) and a PID namespace whose first process is
#: killed when ``unshare`` dies (``--kill-child``); the kernel then kills every process left in the
#: namespace, so stopping ``unshare`` stops a whole compile (pip, CMake, make, the compilers):
#: unshare(1), pid_namespaces(7) ("If the init process of a PID namespace terminates, the kernel
#: terminates all of the processes in the namespace via a SIGKILL signal").
UNSHARE = ("unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--kill-child")


def shown(argv: Sequence[str]) -> str:
    """The first words of the tool ``argv`` runs, past :data:`UNSHARE`, :func:`in_root`'s ``sh -c … ROOT``
    and ``env -i VAR=…`` (``mmdebstrap --variant=minbase --mode=root``), shell-quoted."""
    import shlex

    rest = list(argv)
    if tuple(rest[:len(UNSHARE)]) == UNSHARE:
        rest = rest[len(UNSHARE):]
        if rest[:1] == ["--mount-proc"]:
            rest = rest[1:]
        if rest[:2] == ["sh", "-c"] and len(rest) > 4:
            rest = rest[4:]
    if rest[:2] == ["/usr/bin/env", "-i"]:
        rest = rest[2:]
        while rest and "=" in rest[0] and not rest[0].startswith("/"):
            rest = rest[1:]
    return shlex.join(rest[:3])


def in_root(root: Path, argv: Sequence[str]) -> List[str]:
    """``argv`` run inside ``root``: ``chroot`` in private mount and PID namespaces (:data:`UNSHARE`),
    with ``/proc`` and ``/dev`` mounted there only (they vanish with the namespace, even when
    envtool is killed)."""
    script = ('set -e; mount -t proc proc "$0/proc"; mount --rbind /dev "$0/dev"; '
              'exec chroot "$0" "$@"')
    return [*UNSHARE, "sh", "-c", script, str(root), *argv]


def make_base(steps: Steps, base: str, root: Path, packages: Sequence[str], purpose: str = "") -> None:
    """Make the root file system ``root`` from the site's ``container.base``.

    Args:
        steps: runs the commands.
        base: ``debian:<suite>`` (Debian's ``mmdebstrap``, variant minbase, with ``packages`` from
            Debian's archive; documentation and manual pages left out) or ``dir:/path`` (a copy).
        root: the directory to make (must not exist).
        packages: Debian packages to add to a ``debian:`` base; a ``dir:`` base must hold them already.
        purpose: words for the progress line (``for the Horovod build``).
    Raises:
        UsageError: ``base`` is neither form, or a ``dir:`` base is not a root file system (exit 2).
        ImageError: mmdebstrap or the copy failed (exit 1).
    """
    what = f" {purpose}" if purpose else ""
    if base.startswith("debian:"):
        suite = base.split(":", 1)[1]
        steps.run("base", f"Make a Debian {suite} root file system{what} with mmdebstrap",
                  [*UNSHARE, "--mount-proc", "mmdebstrap", "--variant=minbase", "--mode=root",
                   "--include=" + ",".join(packages),
                   "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
                   suite, str(root)])
    elif base.startswith("dir:"):
        src = Path(base.split(":", 1)[1])
        if not (src / "bin").exists():
            raise UsageError(f"container.base: {src} is not a root file system (no bin/)")
        steps.run("base", f"Copy the root file system {src}{what}", ["cp", "-a", str(src), str(root)])
    else:
        raise UsageError(f"container.base: {base}: only debian:<suite> and dir:/path are built so far")


def install_env(steps: Steps, root: Path, house: Path, pip_wheel: str, requirements: str, count: int) -> Path:
    """Create the venv :data:`IMAGE_PREFIX` inside ``root`` and install the wheelhouse into it.

    ``python3 -m venv --without-pip``, then pip run from its own wheel (pip's documented
    ``python pip.whl/pip``) with ``--no-index --no-deps --require-hashes``: the lock's hashes.

    Args:
        steps: runs the commands.
        root: the root file system.
        house: the wheelhouse on the host; copied to :data:`WHEELHOUSE` in the root and removed
            from there afterwards.
        pip_wheel: the file name of the pip wheel in ``house``.
        requirements: the file name of the requirements (``name==version --hash=…`` lines) in ``house``.
        count: how many packages (for the progress line).
    Returns:
        the host path of the environment inside ``root``.
    Raises:
        ImageError: a command failed.
    """
    inside = root / WHEELHOUSE.lstrip("/")
    shutil.copytree(house, inside)
    steps.run("venv", f"Create the venv {IMAGE_PREFIX}",
              in_root(root, ["/usr/bin/python3", "-m", "venv", "--without-pip", IMAGE_PREFIX]))
    steps.run("install", f"Install {count} packages into {IMAGE_PREFIX} (no index, hashes required)",
              in_root(root, [*CLEAN_ENV, IMAGE_PREFIX + "/bin/python", f"{WHEELHOUSE}/{pip_wheel}/pip",
                             "install", "--no-index", "--no-deps", "--require-hashes", "--no-cache-dir",
                             "--disable-pip-version-check", "--find-links", WHEELHOUSE,
                             "-r", f"{WHEELHOUSE}/{requirements}"]))
    shutil.rmtree(inside)
    return root / IMAGE_PREFIX.lstrip("/")
