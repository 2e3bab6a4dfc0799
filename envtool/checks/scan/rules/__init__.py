"""The scan's rules, one module each; a rule registers itself with
:func:`envtool.checks.scan.registry.rule` when its module loads, and
:data:`envtool.checks.scan.registry.MODULES` lists the modules to load (see
:mod:`envtool.checks.scan.rule` for the interface). Nothing is imported here, so that a rule
module can be loaded alone."""
