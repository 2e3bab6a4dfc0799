"""Probe: where an interpreter finds its packages (for layering an environment over it).

Run with the interpreter asked about (standalone: only the standard library)::

    python site_dirs.py

Prints one JSON object after ``ENVTOOL-PROBE `` with:

* ``python``: ``platform.python_version()``; ``executable``, ``prefix``, ``base_prefix``;
* ``venv``: ``sys.prefix != sys.base_prefix`` (the interpreter runs in a virtual environment:
  https://docs.python.org/3/library/venv.html, "How venvs work");
* ``conda``: ``PREFIX/conda-meta`` is a directory (a conda environment);
* ``site_packages``: ``site.getsitepackages()`` that exist, in order (in a venv, the venv's own
  first, then the base installation's when the venv includes system site packages);
* ``user_site``: ``site.getusersitepackages()`` when ``site.ENABLE_USER_SITE`` is true, else null;
* ``sys_path``: the non-empty ``sys.path`` entries that exist, in order, without this script's
  directory and without ``PYTHONPATH`` entries (what a ``.pth`` file or ``site`` added stays).

Exit status: 0.
"""
import json
import os
import platform
import site
import sys

#: Line prefix of every record (the same in every probe and in ``envtool.probes.MARKER``).
MARKER = "ENVTOOL-PROBE "


def collect(own_dir=None):
    """What this interpreter's ``site`` set up (see the module docstring).

    Args:
        own_dir: a directory to leave out of ``sys_path`` (this script's), or None.
    Returns:
        a dict (JSON-ready).
    """
    getsite = getattr(site, "getsitepackages", None)
    dirs = [d for d in (getsite() if getsite is not None else []) if os.path.isdir(d)]
    user = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    extra = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    path = [p for p in sys.path if p and os.path.exists(p) and os.path.abspath(p) not in extra
            and (own_dir is None or os.path.abspath(p) != own_dir)]
    return {"python": platform.python_version(), "executable": sys.executable, "prefix": sys.prefix,
            "base_prefix": sys.base_prefix, "venv": sys.prefix != sys.base_prefix,
            "conda": os.path.isdir(os.path.join(sys.prefix, "conda-meta")),
            "site_packages": dirs, "user_site": user, "sys_path": path}


def main(argv=None):
    """Print the record (see the module docstring); returns the exit status."""
    own = os.path.dirname(os.path.abspath(__file__))
    sys.stdout.write(MARKER + json.dumps(collect(own)) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
