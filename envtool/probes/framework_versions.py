"""Probe: the Python tag and the installed framework distributions (for the Horovod build step).

Run with the environment's interpreter (standalone: standard library only)::

    python framework_versions.py '{"pytorch": ["torch"], "tensorflow": ["tensorflow", "tensorflow-cpu"]}'

The argument maps a framework key to the distribution names that provide it, in order of
preference, as ``importlib.metadata`` sees them. Prints one JSON object after ``ENVTOOL-PROBE ``::

    {"python_tag": "cp311", "frameworks": {"pytorch": ["torch", "2.13.0+cpu"]}}

``frameworks`` holds, per key, the first of its distributions that is installed, with its
version; keys with none installed are left out. Exit status: 0, or 2 for a bad argument.
"""
import json
import sys

#: Line prefix of every record (the same in every probe and in ``envtool.probes.MARKER``).
MARKER = "ENVTOOL-PROBE "


def python_tag(cache_tag):
    """The wheel Python tag of an interpreter from its ``sys.implementation.cache_tag``
    (``"cpython-311"`` → ``"cp311"``; other implementations are returned unchanged) (str)."""
    return cache_tag.replace("cpython-", "cp")


def installed(frameworks, version):
    """The first installed distribution of each framework.

    Args:
        frameworks: framework key → distribution names, in order of preference.
        version: ``name → version string``, raising ``LookupError`` when ``name`` is not
            installed (:func:`metadata_version`).
    Returns:
        key → ``[distribution name, version]`` for the keys with one installed.
    """
    out = {}
    for key, names in frameworks.items():
        for name in names:
            try:
                out[key] = [name, version(name)]
                break
            except LookupError:
                pass
    return out


def metadata_version():
    """A ``name → version`` function raising ``LookupError`` for a distribution not installed:
    ``importlib.metadata.version`` (Python ≥ 3.8; ``PackageNotFoundError`` is a ``ModuleNotFoundError``,
    hence an ``ImportError``, not a ``LookupError``, so it is translated), else the
    ``importlib_metadata`` backport, else setuptools' ``pkg_resources`` (Python 3.6/3.7)."""
    import importlib

    for name in ("importlib.metadata", "importlib_metadata"):
        try:
            metadata = importlib.import_module(name)
        except ImportError:
            continue

        def by_metadata(dist):
            try:
                return metadata.version(dist)
            except metadata.PackageNotFoundError:
                raise LookupError(dist)
        return by_metadata
    import pkg_resources

    def by_pkg_resources(dist):
        try:
            return pkg_resources.get_distribution(dist).version
        except pkg_resources.DistributionNotFound:
            raise LookupError(dist)
    return by_pkg_resources


def main(argv=None):
    """Run the probe (see the module docstring); returns the exit status (int)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        frameworks = json.loads(args[0])
        frameworks = {str(k): [str(n) for n in v] for k, v in frameworks.items()}
    except (IndexError, ValueError, TypeError, AttributeError) as exc:
        print("usage: framework_versions.py FRAMEWORKS_JSON  ({\"key\": [\"dist\", ...], ...}): "
              + "{}: {}".format(type(exc).__name__, exc), file=sys.stderr)
        return 2
    out = {"python_tag": python_tag(sys.implementation.cache_tag), "frameworks": installed(frameworks,
                                                                                        metadata_version())}
    print(MARKER + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
