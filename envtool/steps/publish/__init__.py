"""``publish``: build stacks into a shared tree for a site's users, with modulefiles and SBOMs.

For each spec, :func:`publish` builds the environment at ``ROOT/NAME/VERSION`` through
:func:`envtool.steps.create.workflow.create` with the plan ``create`` makes (so every guarantee of
``create`` holds: built in a temporary sibling, validated, moved into place only when complete;
the spec's lock installed exactly and the prefix compared with it, :mod:`envtool.steps.create.from_lock`),
cloning the site's base environment when the spec is resolved for a site that has one. Then it
writes, in order:

* ``ROOT/NAME/VERSION.cdx.json``: the environment's CycloneDX SBOM (:mod:`envtool.sbom`);
* ``ROOT/NAME/VERSION/.envtool/publish.json``: what was published, when, by whom;
* the modulefile ``MODULES/NAME/VERSION[.lua]`` (:mod:`envtool.modules`) and, with
  ``default``, the default marker;

and leaves the tree the way EasyBuild's ``--group``, ``--umask`` and
``--read-only-installdir`` leave an installation (EasyBuild docs, "Configuration options":
``group``, ``umask``, ``read-only-installdir``): every file and directory group-owned by
``group``, directories setgid (new entries inherit the group), everything group-readable
(others per ``umask``), and the environment itself read-only for everyone, owner included.
The ``ROOT/NAME`` and module directories stay writable by their owner, for the next version.
Modulefiles are readable by everyone whatever the ``umask`` (only the group's bits of it apply to
them): Lmod's system spider cache leaves out modulefiles that others cannot read (seen with
Debian's Lmod 8.6.19 ``update_lmod_system_cache_files``), and a modulefile holds no more than
paths; a restricted stack is protected by its environment's permissions.

Group, setgid and modes go only on what the call creates (directories it makes, the environment,
its SBOM, modulefile and default marker): a ``--root``, module tree or ``NAME`` directory that
was there before keeps its own, so a later, stricter ``umask`` never takes earlier stacks away
from their users.

A stack whose ``publish.json`` is already there is left alone (``unchanged``) unless
``force``: then it is rebuilt and replaces the old one only once complete. When the site uses
Lmod's system spider cache (:mod:`envtool.modules.spider`), it is rebuilt at the end.
``dry_run`` reports all of this and changes nothing. :func:`retire` removes a published version
(environment, SBOM, modulefile), proven by its ``publish.json``.

Both are plans of typed steps run by the one runner (:mod:`envtool.steps.publish.workflow`,
:mod:`envtool.steps.publish.retire`); ``--dry-run`` prints the same plan that runs. The package:
``prepare`` (each stack decided, touching nothing), ``tree`` (modes and group), ``changes`` (what a
dry run lists path by path), ``model`` (the results).
"""
from __future__ import annotations

from envtool.steps.publish.model import MARKER, RETIRE_TAG, Published, PublishResult, RetireResult
from envtool.steps.publish.prepare import Stack, module_version, prepare
from envtool.steps.publish.retire import RetirePlan, default_markers, retire
from envtool.steps.publish.tree import (group_id, make_dirs, make_writable, missing_dirs, published_mode, set_mode,
                                        set_tree, unshare_links)
from envtool.steps.publish.workflow import PublishPlan, Settings, compose, publish

__all__ = ["MARKER", "RETIRE_TAG", "Published", "PublishPlan", "PublishResult", "RetirePlan", "RetireResult",
           "Settings", "Stack", "compose", "default_markers", "group_id", "make_dirs", "make_writable",
           "missing_dirs", "module_version", "prepare", "publish", "published_mode", "retire", "set_mode",
           "set_tree", "unshare_links"]
