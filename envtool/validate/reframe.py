"""``validate --export reframe``: envtool's validation as a ReFrame regression test and the
matching ReFrame settings for the site, so a site can rerun it in the ReFrame it already runs.

ReFrame (reframe-hpc on PyPI, https://reframe-hpc.readthedocs.io) runs a test class as a batch job
through the partition's scheduler and launcher, then checks its sanity and its performance
variables against ``reference`` entries ``(value, lower, upper, unit)``, where ``lower`` and
``upper`` are fractions of ``value`` (https://reframe-hpc.readthedocs.io/en/stable/
regression_test_api.html, ``reference``; the settings' format:
https://reframe-hpc.readthedocs.io/en/stable/config_reference.html).

The test (``templates/reframe_test.py.in``) is a ``RunOnlyRegressionTest``: its ``prerun_cmds``
are the job script's set-up lines (:func:`envtool.scheduler.script.setup_lines`) and the
``horovodrun --check-build`` line of ``validate --submit``; its executable is the environment's
Python running envtool's rank probe (:mod:`envtool.validate.rank_probe`, embedded in the file)
on every rank through ``srun``. Its sanity is what ``validate`` judges (check-build against the
spec, each rank's checks); its performance variable ``allreduce_latency_4B`` (µs, slowest rank)
is checked against the site file's ``validation.references`` for the node count.

Every value written into the Python files goes through :func:`repr` (strings, numbers, tuples,
dicts of them), never pasted as code, so a site file or option cannot inject code.
"""
from __future__ import annotations

import hashlib
import json
import pprint
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Dict, Optional, Tuple

from envtool.spec.names import CONTROL_RE
from envtool.validate.ranks import PROBE_FILE, PROBE_HELPERS

TEMPLATE = Path(__file__).with_name("templates") / "reframe_test.py.in"
#: First line of every file envtool writes here; an existing file without it is not replaced.
TEST_MARK = "# ReFrame regression test written by envtool"
SETTINGS_MARK = "# ReFrame settings written by envtool"
#: ReFrame's schedulers for Slurm: ``slurm`` polls with ``sacct`` (needs Slurm's accounting),
#: ``squeue`` polls with ``squeue`` (for clusters without accounting)
#: (https://reframe-hpc.readthedocs.io/en/stable/config_reference.html, ``scheduler``).
SCHEDULERS = ("slurm", "squeue")
#: The envtool schedulers whose sites the export writes a ReFrame partition for (ReFrame's Slurm
#: backends with the ``srun`` launcher).
SITE_SCHEDULERS = ("slurm",)
#: check-build's sections as the test matches them (``Available <Section>:``).
_SECTION_TITLES = {"frameworks": "frameworks", "controllers": "controllers", "tensor_operations": "tensor operations"}


def reframe_name(text: str, default: str) -> str:
    """``text`` as a ReFrame system, partition or environment name (letters, digits, ``_``, ``-``;
    anything else becomes ``_``), or ``default`` when nothing is left."""
    name = re.sub(r"[^A-Za-z0-9_-]", "_", str(text or "")).strip("_")
    return name[:64] or default


@dataclass(frozen=True)
class ReframeExport:
    """What the test and the settings say (all plain values; see the module docstring).

    Attributes:
        system, partition, environ: ReFrame's names for the site, its partition, the environment.
        descr: the test's one-line description.
        scheduler: ``slurm`` or ``squeue`` (:data:`SCHEDULERS`).
        access: the partition's job options (``--partition=gpu``, ``--account=X``): ``#SBATCH`` lines.
        launcher_options: options ReFrame's ``srun`` launcher adds (``--mpi=pmix``).
        python: the environment's interpreter (the executable on every rank).
        prerun: shell lines before the launch (set-up, check-build), already shell-quoted.
        nodes, num_tasks, num_tasks_per_node, num_cpus_per_task, num_gpus_per_node: the layout
            (0: not asked for).
        time_limit: ReFrame's ``time_limit`` (``"600s"``) or None (the partition's default).
        probe_args: the rank probe's arguments after ``OUT_DIR probe`` (``--method spawn``).
        check_build: ``(section, name)`` pairs check-build must list as available (section as
            ``frameworks``, ``controllers``, ``tensor operations``).
        warnings: the spec's accepted import warnings (``re.search`` patterns).
        references: performance variable → ``(value, lower, upper, unit)``.
        modules_system: ReFrame's ``modules_system`` (``nomod``: the prerun lines load modules).
    """

    system: str
    partition: str
    descr: str
    python: str
    prerun: Tuple[str, ...]
    nodes: int
    num_tasks: int
    num_tasks_per_node: int
    environ: str = "envtool"
    scheduler: str = "slurm"
    access: Tuple[str, ...] = ()
    launcher_options: Tuple[str, ...] = ()
    num_cpus_per_task: int = 0
    num_gpus_per_node: int = 0
    time_limit: Optional[str] = None
    probe_args: Tuple[str, ...] = ()
    check_build: Tuple[Tuple[str, str], ...] = ()
    warnings: Tuple[str, ...] = ()
    references: Dict[str, Tuple[float, Optional[float], Optional[float], str]] = field(default_factory=dict)
    modules_system: str = "nomod"


def check_build_pairs(expectation) -> Tuple[Tuple[str, str], ...]:
    """``(section, name)`` of a spec's ``expect.check_build`` (:class:`envtool.spec.model.CheckBuildExpectation`)."""
    if expectation is None:
        return ()
    return tuple((_SECTION_TITLES[s], n) for s in _SECTION_TITLES for n in getattr(expectation, s))


def _line(text: str) -> str:
    """``text`` for a comment line: control characters (a newline would end it) become ``?``."""
    return CONTROL_RE.sub("?", str(text))


def _lit(value) -> str:
    """``value`` as a Python literal (repr of plain data, wrapped by :mod:`pprint` when long)."""
    return pprint.pformat(value, width=100, sort_dicts=False)


def render_test(exp: ReframeExport, version: str, test_name: str, settings_name: str) -> str:
    """The ReFrame test file's text.

    Args:
        exp: what it runs.
        version: envtool's version (for the header).
        test_name, settings_name: the file names, for the header's ``reframe`` command.
    """
    probe = PROBE_FILE.read_text()
    helpers = {h.name: h.read_text() for h in PROBE_HELPERS}
    values = dict(
        version=_line(version), test_name=_line(shlex.quote(test_name)),
        settings_name=_line(shlex.quote(settings_name)), nodes=int(exp.nodes),
        mark=_lit("envtool-validate"), system=_lit(exp.system), partition=_lit(exp.partition),
        environ=_lit(exp.environ), python=_lit(exp.python), prerun=_lit(list(exp.prerun)),
        launcher_options=_lit(list(exp.launcher_options)), num_tasks=_lit(int(exp.num_tasks)),
        num_tasks_per_node=_lit(int(exp.num_tasks_per_node)), num_cpus_per_task=_lit(int(exp.num_cpus_per_task)),
        num_gpus_per_node=_lit(int(exp.num_gpus_per_node)), time_limit=_lit(exp.time_limit),
        probe_args=_lit(list(exp.probe_args)), check_build=_lit([list(p) for p in exp.check_build]),
        warnings=_lit(list(exp.warnings)), references=_lit({k: tuple(v) for k, v in exp.references.items()}),
        probe_sha256=_lit(hashlib.sha256(probe.encode()).hexdigest()), probe_source=repr(probe),
        helpers_sha256=_lit(hashlib.sha256(json.dumps(helpers, sort_keys=True).encode()).hexdigest()),
        helper_sources=repr(helpers),
        descr=_lit(exp.descr))
    text = Template(TEMPLATE.read_text()).substitute(values)
    assert text.startswith(TEST_MARK)
    return text


def settings(exp: ReframeExport) -> dict:
    """ReFrame's ``site_configuration`` for the site: one system with one partition (the
    scheduler, ``srun``, the access options) and the environment the test asks for."""
    return {
        "systems": [{
            "name": exp.system,
            "descr": exp.descr,
            "hostnames": [".*"],
            "modules_system": exp.modules_system,
            "partitions": [{
                "name": exp.partition,
                "descr": f"{exp.system} {exp.partition} (from the envtool site file)",
                "scheduler": exp.scheduler,
                "launcher": "srun",
                "access": list(exp.access),
                "environs": [exp.environ],
                "max_jobs": 4,
            }],
        }],
        "environments": [{"name": exp.environ, "target_systems": [exp.system]}],
    }


def render_settings(exp: ReframeExport, version: str, test_name: str, settings_name: str) -> str:
    """The ReFrame settings file's text (``site_configuration = {...}``)."""
    head = [SETTINGS_MARK + f" {_line(version)} (envtool validate --export reframe)",
            f"# for the test {_line(test_name)}: reframe -C {_line(shlex.quote(settings_name))} -c "
            f"{_line(shlex.quote(test_name))} -r",
            f"# scheduler {exp.scheduler!r}: 'slurm' polls jobs with sacct (Slurm's accounting), 'squeue' with "
            "squeue (no accounting).",
            "# Merge the system into the site's own ReFrame settings, or use this file as it is.", ""]
    return "\n".join(head) + "site_configuration = " + _lit(settings(exp)) + "\n"
