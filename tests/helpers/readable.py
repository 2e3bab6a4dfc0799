"""A copy of the envtool package that an unprivileged test user can import.

Tests that run envtool as another user (publish, the site twin) put it on that user's
``PYTHONPATH``. The checkout itself may sit under a directory only root can enter (a CI clone
under ``/root``), so the package is copied once per test session to a world-readable directory
under ``/var/tmp``.
"""
import os
import shutil
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
_COPY = None


def _readable_by_others(path: Path) -> bool:
    """True when every directory from / down to ``path`` lets others in and ``path`` is readable."""
    p = path.resolve()
    for d in [p, *p.parents]:
        mode = d.stat().st_mode
        if not mode & 0o001 or (d == p and not mode & 0o004):
            return False
    return True


def importable_root() -> Path:
    """A directory holding ``envtool/`` that any user can import from: the checkout when others can
    read it, else a fresh world-readable copy (made once per process)."""
    global _COPY
    if _readable_by_others(REPO) and _readable_by_others(REPO / "envtool"):
        return REPO
    if _COPY is None:
        base = Path(tempfile.mkdtemp(prefix="envtool-src-", dir="/var/tmp"))
        for name in ("envtool", "specs", "sites", "lockfiles"):  # the package and its bundled data
            shutil.copytree(REPO / name, base / name, ignore=shutil.ignore_patterns("__pycache__"))
        for dirpath, dirnames, filenames in os.walk(base):
            os.chmod(dirpath, 0o755)
            for f in filenames:
                os.chmod(os.path.join(dirpath, f), 0o644)
        _COPY = base
        import atexit

        atexit.register(shutil.rmtree, base, True)
    return _COPY
