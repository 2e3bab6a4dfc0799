"""Lockfiles in the conda-lock v1 format (``conda-lock.yml``).

Modules:
    model: plain data (:class:`~envtool.lock.model.LockedPackage`, :class:`~envtool.lock.model.LockData`).
    lockio: read and write through conda-lock's own models (``conda_lock.lockfile``).
    spec_hash: the spec's content hash kept in a lock's metadata (stale-lock detection).
    pip_resolve: pip's own resolver (``pip install --dry-run --report``) for the pip part.
    conda_resolve: py-rattler solves for the conda part, per platform; locked records looked up for install.
    build: a whole lock from a spec (solve) or a prefix (snapshot).
    snapshot: what an existing prefix holds (conda-meta, pip dist-info, the built Horovod wheel).
    diff: drift between a prefix and a lock.
    check: stale committed locks.
"""
