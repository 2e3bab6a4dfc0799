"""Job scripts: the layout of a job from a site file, and the script text from the template
``templates/jobscript.sh`` (``string.Template``; the scheduler modules give the directives and
launcher words).

Quoting guarantee: every value written into a script (directive arguments, module names, paths,
variable values, the command's words) goes through :func:`shlex.quote`, so a value is one shell
word whatever it holds; nothing in a value is expanded. Values without special characters are
written bare (``gpu``, ``select=2:system=polaris``), as the sites' documentation writes them.
"""
from __future__ import annotations

import shlex
from pathlib import Path
from string import Template
from typing import Iterable, List, Optional, Tuple

from envtool.core.errors import UsageError
from envtool.spec.names import CONTROL_RE
from envtool.scheduler.model import JobRequest, Layout, missing

_TEMPLATE = Path(__file__).with_name("templates") / "jobscript.sh"


def make_layout(site, nodes: int, ranks_per_node: Optional[int] = None,
                gpus_per_rank: Optional[int] = None) -> Layout:
    """The :class:`Layout` of a job on ``site``.

    Args:
        site: the :class:`envtool.spec.sites.SiteFile`.
        nodes: nodes (>= 1).
        ranks_per_node: ranks per node; default one per GPU (Horovod's pattern) on a GPU site.
        gpus_per_rank: GPUs per rank; default 1 on a GPU site, else 0.
    Returns:
        the layout; ``cpus_per_rank`` is ``batch.cpus_per_node // ranks_per_node`` (0 when the
        site does not say).
    Raises:
        UsageError: a count below 1 (nodes, ranks) or below 0 (GPUs).
        SpecError: the site file lacks ``gpus_per_node`` for the default or for the GPUs asked,
            or has fewer ``batch.cpus_per_node`` than ranks on a node (names the field).
    """
    gpn = int(site.gpus_per_node or 0)
    if nodes is None or nodes < 1:
        raise UsageError(f"--nodes: expected 1 or more, got {nodes}")
    if gpus_per_rank is None:
        gpus_per_rank = 1 if gpn else 0
    if gpus_per_rank < 0:
        raise UsageError(f"--gpus-per-rank: expected 0 or more, got {gpus_per_rank}")
    if ranks_per_node is None:
        if not gpn:
            raise missing(site, "gpus_per_node", "the GPUs of one node (ranks per node default to one per GPU)",
                          "or give --ranks-per-node")
        ranks_per_node = max(1, gpn // max(1, gpus_per_rank))
    if ranks_per_node < 1:
        raise UsageError(f"--ranks-per-node: expected 1 or more, got {ranks_per_node}")
    if gpus_per_rank and ranks_per_node * gpus_per_rank > gpn:
        raise missing(site, "gpus_per_node", f"at least {ranks_per_node * gpus_per_rank} GPUs per node "
                      f"({ranks_per_node} ranks x {gpus_per_rank} GPUs; the file says {gpn})",
                      "the job asks for more GPUs than a node has")
    cpn = int(getattr(site.batch, "cpus_per_node", 0) or 0)
    if cpn and ranks_per_node > cpn:
        raise missing(site, "batch.cpus_per_node", f"at least {ranks_per_node} CPUs (the file says {cpn})",
                      "there are more ranks on a node than CPUs")
    return Layout(nodes=nodes, ranks_per_node=ranks_per_node, gpus_per_rank=gpus_per_rank,
                  cpus_per_rank=cpn // ranks_per_node if cpn else 0)


def _one_line(text: object) -> str:
    """``text`` for a comment or the ``#!`` line: control characters (a newline would end the
    line) become ``?``."""
    return CONTROL_RE.sub("?", str(text))


def quote_words(words: Iterable[str]) -> str:
    """Words joined with each one :func:`shlex.quote`-d."""
    return " ".join(shlex.quote(str(w)) for w in words)


def activation_lines(prefix: Path, kind: Optional[str] = None) -> Tuple[str, ...]:
    """Shell lines that activate the environment at ``prefix``.

    ``kind`` (``venv`` or ``conda``) says what it is where the prefix is not on this machine (a
    copy staged to node-local storage); by default the prefix is looked at.
    A venv (``bin/activate`` without ``conda-meta``) is sourced; a conda prefix gets
    ``CONDA_PREFIX`` and ``PATH`` as ``conda activate`` sets them, then its
    ``etc/conda/activate.d/*.sh`` sourced in name order (conda/activate.py).
    """
    p = Path(prefix)
    q = shlex.quote(str(p))
    from envtool.core.prefix import PrefixData

    script = PrefixData(p).activate_script
    if kind == "venv" or (kind is None and script is not None):
        return (f"source {shlex.quote(str(PrefixData(p).bin / 'activate'))}",)
    return (f"export CONDA_PREFIX={q}",
            f'export PATH={shlex.quote(str(p / "bin"))}:"$PATH"',
            f"for f in {shlex.quote(str(p / 'etc' / 'conda' / 'activate.d'))}/*.sh; do "
            '[ -e "$f" ] && source "$f"; done')


def setup_lines(req: JobRequest) -> List[str]:
    """The shell lines that make a job step's environment, in the job script's order: ``module
    use``/``module load`` of ``req.modules``, the activation, the exports of ``req.env`` and the
    search-path entries of ``req.env_paths``. Every value is :func:`shlex.quote`-d.

    Raises:
        UsageError: a variable name that is not a shell variable name, or an operation other
            than prepend/append.
    """
    lines: List[str] = []
    if req.modules:
        for d in req.site.batch.module_use:
            lines.append(f"module use {shlex.quote(d)}")
        lines.append("module load " + quote_words(req.modules))
    lines.extend(req.activation)
    notes = dict(req.env_notes)
    for k, v in req.env:
        if not k.replace("_", "").isalnum() or k[0].isdigit():
            raise UsageError(f"variable name {k!r} is not a shell variable name")
        note = f"  # {_one_line(notes[k])}" if notes.get(k) else ""
        lines.append(f"export {k}={shlex.quote(str(v))}{note}")
    for k, op, entry in req.env_paths:
        if not k.replace("_", "").isalnum() or k[0].isdigit() or op not in ("prepend", "append"):
            raise UsageError(f"{op} of variable {k!r}: not a shell variable name or not prepend/append")
        # one entry in front of (behind) what the job already has; no empty entry when it had none
        lines.append(f'export {k}={shlex.quote(str(entry))}"${{{k}:+:${k}}}"' if op == "prepend"
                     else f'export {k}="${{{k}:+${k}:}}"{shlex.quote(str(entry))}')
    return lines


def render(req: JobRequest, version: str = "") -> str:
    """The job script for ``req``.

    Args:
        req: the :class:`JobRequest`.
        version: envtool's version for the header.
    Returns:
        the script text (ends with a newline).
    Raises:
        SpecError: the site file lacks a value a directive or launcher flag needs (the message
            names the field, e.g. ``batch.cpus_per_node``).
        UsageError: the site requires ``--account`` and none was given, or more than one node
            without a scheduler.
    """
    from envtool import scheduler
    from envtool.scheduler import launcher as launcher_mod

    site = req.site
    sched = scheduler.get(site.scheduler)
    b = site.batch
    if b.account_required and not req.account and sched.NAME != "local":
        raise UsageError(f"site {site.name} charges every job to an account (batch.account_required in "
                         f"{site.path}): give --account")
    words = list(sched.directives(req)) + [tuple(shlex.split(extra)) for extra in b.directives + req.extra_directives]
    for d in words:
        # A directive is a comment line: a newline inside a quoted word would end it and make the
        # rest a shell line. The CLI gate (cli.common.check_generated_inputs) and the site-file
        # reader refuse such values; this is the last line of defence.
        if any(CONTROL_RE.search(str(w)) for w in d):
            raise UsageError(f"{sched.DIRECTIVE} {' '.join(map(str, d))!r}: a directive value holds a control "
                             "character (newline, carriage return …)")
    directives = [f"{sched.DIRECTIVE} {quote_words(d)}" for d in words]
    body: List[str] = []
    if req.workdir:
        body.append(f"cd {shlex.quote(req.workdir)}")
    elif getattr(sched, "SUBMIT_DIR_VAR", None):  # the scheduler starts jobs elsewhere (PBS: in $HOME)
        body.append(f'cd "${{{getattr(sched, "SUBMIT_DIR_VAR")}}}"')
    launch = req.launcher or launcher_mod.for_site(site)
    from envtool.scheduler import stage as stage_mod

    body.extend(stage_mod.prologue(req, sched))  # before the pre-flight: it checks the staged copy
    body.extend(_step_line(req, sched, launch, step) for step in req.steps if step.early)
    body.extend(setup_lines(req))
    retry = next((step.retry_init for step in req.steps if step.retry_init and not step.early), ())
    if retry:
        body.append(retry_function(retry, req.output))
    body.extend(_step_line(req, sched, launch, step) for step in req.steps if not step.early)
    src = dict(site.sources).get(b.source, "") if b.source else ""
    lay = req.layout
    text = Template(_TEMPLATE.read_text()).substitute(
        shell=_one_line(b.shell), directives="\n".join(directives), version=version, site=_one_line(site.name),
        site_file=_one_line(site.path),
        scheduler=site.scheduler or "none", nodes=lay.nodes, ranks_per_node=lay.ranks_per_node,
        gpus_per_rank=lay.gpus_per_rank, cpus_per_rank=lay.cpus_per_rank or "?",
        layout_source=_one_line(f"{b.source}: {src}" if src else (b.source or "the site file")),
        body="\n".join(body))
    if not directives:
        text = text.replace("\n\n# Job script", "\n# Job script", 1)
    for c in req.comments:
        text = text.replace("set -e\n", "# " + " ".join(str(c).split()) + "\nset -e\n", 1)
    return text


#: The shell function that runs a check's step and, once, again when a rank died of a crash
#: signal inside ``hvd.init()`` (:attr:`~envtool.scheduler.model.LaunchStep.retry_init`).
RETRY_FUNCTION = "envtool_retry_init"


def retry_function(retry_init: Tuple[str, ...], output: Optional[str]) -> str:
    """The one-line definition of :data:`RETRY_FUNCTION` (POSIX sh): ``envtool_retry_init PHASE --
    WORDS…`` runs WORDS; when they fail, the rank probe's verdict (``python rank_probe.py
    --died-in-init RUN_DIR PHASE OUTPUT OFFSET``: a rank's ``hvd.init()`` mark is left and the rank
    died of SIGSEGV/SIGBUS/SIGABRT/SIGILL/SIGFPE, from faulthandler or the launcher's report in the
    job output after OFFSET, the output's size when the step began) moves the phase's results aside
    and the words run once more; otherwise the step's exit status stands.

    Args:
        retry_init: ``(python, rank probe, run directory, phase)``; the phase is the function's argument.
        output: the job's output file (the launcher's reports), or None (faulthandler's alone).
    """
    python, probe, run_dir = (str(w) for w in retry_init[:3])
    out = shlex.quote(str(output or ""))
    at = f"$(stat -c %s {out} 2>/dev/null || echo 0)" if output else "0"
    return (f"{RETRY_FUNCTION}() {{ envtool_phase=$1; shift 2; envtool_at={at}; "
            f'"$@" && return 0 || envtool_rc=$?; '
            f'if {quote_words([python, probe, "--died-in-init", run_dir])} "$envtool_phase" {out} "$envtool_at"; '
            f'then "$@"; else return "$envtool_rc"; fi; }}')


def _bounds(sched, launch, step, words: List[str]) -> List[str]:
    """The launcher words ``words`` with the step's bounds added after the launcher's own options, where
    the scheduler declares them for its step launcher (:class:`~envtool.scheduler.model.Capabilities`:
    ``kill_on_bad_exit`` when ``step.bounded``, ``step_time`` in whole minutes when
    ``step.seconds``); unchanged for any other launcher (its own behaviour bounds the step)."""
    from envtool.scheduler.model import capabilities

    caps = capabilities(sched)
    if not words or not caps.step_launcher or launch.program != caps.step_launcher:
        return words
    extra: List[str] = list(caps.kill_on_bad_exit) if step.bounded else []
    if step.seconds and caps.step_time:
        extra.append(f"{caps.step_time}={max(1, -(-int(step.seconds) // 60))}")
    return words + extra


def _step_line(req: JobRequest, sched, launch, step) -> str:
    """The script line of one :class:`~envtool.scheduler.model.LaunchStep`.

    Raises:
        UsageError: a per-node step on a scheduler that has no ``per_node_argv``.
    """
    layout = step.layout or req.layout
    if step.direct:
        words = list(step.argv)
    elif step.per_node:
        per_node = getattr(sched, "per_node_argv", None)
        if per_node is None:
            raise UsageError(f"one task per node (the pre-flight) is not written for scheduler {sched.NAME} yet")
        words = per_node(req) + list(step.argv)
    else:
        words = list(step.wrap) + _bounds(sched, launch, step, launch.batch_argv(
            req, layout, whole_job=step.layout is None, mpi=step.mpi) if step.mpi else launch.batch_argv(
            req, layout, whole_job=step.layout is None)) + list(step.argv)
    if step.retry_init and not step.early:
        words = [RETRY_FUNCTION, str(step.retry_init[3]), "--"] + words
    line = quote_words(words)
    if step.redirect:
        line += f" >> {shlex.quote(step.redirect)} 2>&1"
    if step.may_fail:
        line += " || true"
    return line
