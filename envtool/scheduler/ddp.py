"""Launch lines for PyTorch's own distributed training (DDP) in a job: ``torchrun`` and ``srun``
(issue 41, item 2). Both wrap the command every rank runs; both need a scheduler that declares
its tasks' variables and how to name the job's first node (:class:`~envtool.scheduler.model.Capabilities`
``task_vars`` and ``first_node``: Slurm so far).

* :data:`TORCHRUN`: one task per node (the step is ``per_node``); on each, ``python -m
  torch.distributed.run --nnodes N --nproc_per_node R --rdzv_backend c10d --rdzv_endpoint
  FIRST_NODE:PORT --rdzv_id JOB COMMAND``: torchrun starts the node's R ranks and sets ``RANK``,
  ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` for them (PyTorch's torchrun
  documentation, https://pytorch.org/docs/stable/elastic/run.html, "Environment Variables" and
  "--rdzv-backend=c10d"). The c10d rendezvous is served by the torchrun of the first node.
* :data:`SRUN`: one task per rank; each exports ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` from the
  launcher's own (``SLURM_PROCID``, ``SLURM_LOCALID``, ``SLURM_NTASKS``), ``MASTER_ADDR`` (the
  first node) and ``MASTER_PORT``, then runs the command: ``init_process_group`` then takes them
  from the environment (``env://``, PyTorch's "Environment variable initialization",
  https://pytorch.org/docs/stable/distributed.html#environment-variable-initialization); rank 0,
  on the first node, serves the store.

The port is ``29500`` (torchrun's default ``MASTER_PORT``) plus the job id modulo 1000, so two
jobs sharing a first node do not collide. The first node's name is what the scheduler gives: a
site whose nodes reach each other under another name (an interface-specific host suffix) needs
that name written differently; envtool does not know such rules yet.
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

from envtool.core.errors import UsageError

TORCHRUN = "torchrun"
SRUN = "srun"
#: The DDP launches ``jobscript --launch`` and ``validate --submit --launch`` take.
LAUNCHES = (TORCHRUN, SRUN)
#: torchrun's default ``MASTER_PORT`` (https://pytorch.org/docs/stable/elastic/run.html).
BASE_PORT = 29500


def _vars(caps, launch: str) -> Tuple[str, ...]:
    if len(caps.task_vars) != 5 or not caps.first_node:
        raise UsageError(f"--launch {launch}: written for schedulers that name each task's rank and the job's "
                         "first node (Slurm so far); this site's scheduler does not")
    return tuple(caps.task_vars)


def _port(job_var: str) -> str:
    return f"$(( {BASE_PORT} + ${{{job_var}:-0}} % 1000 ))"


def torchrun_argv(caps, python: str, ranks_per_node: int, command: Sequence[str]) -> List[str]:
    """The words of a per-node task that starts ``ranks_per_node`` ranks of ``command`` with torchrun.

    Args:
        caps: the scheduler's :class:`~envtool.scheduler.model.Capabilities`.
        python: the environment's interpreter on the nodes (``torch.distributed.run`` is torchrun).
        ranks_per_node: ranks on each node (``--nproc_per_node``).
        command: what each rank runs, without the interpreter when it is a Python script
            (``script.py ARGS``; torchrun runs it with ``python``), else the program.
    Returns:
        ``bash -c SCRIPT python ARGS...`` words (each quoted as one word in the job script).
    Raises:
        UsageError: the scheduler does not declare its task variables.
    """
    _, _, _, nodes, job = _vars(caps, TORCHRUN)
    script = (f'first=$({caps.first_node}); exec "$0" -m torch.distributed.run --nnodes="${nodes}" '
              f'--nproc_per_node={int(ranks_per_node)} --rdzv_backend=c10d '
              f'--rdzv_endpoint="$first:{_port(job)}" --rdzv_id="envtool-${{{job}:-0}}" "$@"')
    return ["bash", "-c", script, python, *command]


def srun_env_argv(caps, command: Sequence[str]) -> List[str]:
    """The words of a per-rank task that exports torch.distributed's variables, then runs ``command``.

    Raises:
        UsageError: the scheduler does not declare its task variables.
    """
    rank, local, tasks, _, job = _vars(caps, SRUN)
    script = (f'export RANK="${rank}" LOCAL_RANK="${local}" WORLD_SIZE="${tasks}" '
              f'MASTER_ADDR="$({caps.first_node})" MASTER_PORT="{_port(job)}"; exec "$@"')
    return ["bash", "-c", script, "envtool-ddp", *command]
