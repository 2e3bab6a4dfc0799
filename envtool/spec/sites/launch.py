"""A site file's ``launch`` section: how the site's guide starts a PyTorch DDP script, the name
under which the job's first node is reached for the rendezvous, and the order of the GPUs
(:class:`LaunchSection`, issue 41, item 2). Every value names the ``sources`` entry it comes from.

Format::

    launch:
      default: srun                   # torchrun | srun | mpiexec | launcher: what jobscript and validate
      source: nersc-ddp               #   --submit use without --launch (required with default)
      rendezvous_host: "{node}.hsn.example.org"   # the first node's name for MASTER_ADDR and
      rendezvous_host_source: id                  #   torchrun's --rdzv_endpoint ({node}: the
                                                  #   scheduler's name of it)
      gpu_order: [3, 2, 1, 0]         # CUDA_VISIBLE_DEVICES the srun launch exports on a whole
      gpu_order_source: id            #   node, so that cuda:LOCAL_RANK is the GPU nearest the rank
      note: free text

``launcher`` as the default keeps the site's launcher line (what MPI and Horovod programs need);
``torchrun``, ``srun`` and ``mpiexec`` are the DDP launches of :mod:`envtool.scheduler.ddp`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

from envtool.spec import registry
from envtool.spec.sites.reader import section

LAUNCH_KEYS = ("default", "source", "rendezvous_host", "rendezvous_host_source", "gpu_order", "gpu_order_source",
               "note")
#: What ``launch.default`` (and ``jobscript --launch``) may be: a registered DDP launch
#: (:data:`envtool.spec.registry.DDP_LAUNCHES`: ``torchrun``, ``srun``, ``mpiexec``), or the
#: site's launcher line.
LAUNCH_CHOICES = registry.ddp_launch_names() + ("launcher",)
#: A rendezvous host pattern: host-name characters around one ``{node}`` (written inside double
#: quotes in the job script, so nothing in it can be expanded or run).
RENDEZVOUS_HOST_RE = re.compile(r"[A-Za-z0-9.-]{0,200}\{node\}[A-Za-z0-9.-]{0,200}")


@dataclass(frozen=True)
class LaunchSection:
    """A site file's ``launch`` section.

    Attributes:
        default: ``torchrun``, ``srun``, ``mpiexec`` or ``launcher`` (:data:`LAUNCH_CHOICES`): how job scripts and
            ``validate --submit`` start ranks without ``--launch``; None: the site's launcher.
        source: id in the file's ``sources`` the default comes from (set whenever ``default`` is).
        rendezvous_host: the first node's name for the rendezvous, ``{node}`` standing for the name
            the scheduler gives (``{node}-hsn0``), or None: that name as it is.
        rendezvous_host_source: id in ``sources`` for ``rendezvous_host`` (set whenever it is).
        gpu_order: device indices, one per GPU of a node (a permutation of ``0 .. gpus_per_node-1``),
            that the srun launch exports as ``CUDA_VISIBLE_DEVICES`` when a job takes every GPU
            of its nodes, so that local rank ``i`` uses GPU ``gpu_order[i]``; () when not given.
        gpu_order_source: id in ``sources`` for ``gpu_order`` (set whenever it is).
        note: free text, or None.
    """

    default: Optional[str] = None
    source: Optional[str] = None
    rendezvous_host: Optional[str] = None
    rendezvous_host_source: Optional[str] = None
    gpu_order: Tuple[int, ...] = ()
    gpu_order_source: Optional[str] = None
    note: Optional[str] = None

    def host_words(self, node: str) -> str:
        """The rendezvous host as a shell fragment for inside double quotes: ``node`` (a shell
        expansion such as ``$first``) put in the pattern's ``{node}``, or ``node`` alone."""
        return self.rendezvous_host.replace("{node}", node) if self.rendezvous_host else node


def _source(r, field: str, value: Optional[str], source_ids: Sequence[str], what: str) -> str:
    """A required source id for ``what``; SpecError naming ``launch.<field>`` when missing or unknown."""
    if value is None or value not in source_ids:
        raise r.error(field, f"the id of the entry of 'sources' that documents {what} ("
                      + (", ".join(source_ids) or "no sources yet") + ")", got=value)
    return value


def _gpu_order(r, gpus_per_node: int) -> Tuple[int, ...]:
    """``gpu_order``: a permutation of ``0 .. gpus_per_node-1`` (SpecError naming it otherwise)."""
    raw = r.get("gpu_order")
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in raw):
        raise r.error("gpu_order", "a list of GPU indices ([3, 2, 1, 0])", got=raw)
    if gpus_per_node < 1:
        raise r.error("gpu_order", "no gpu_order on a site whose gpus_per_node is 0 (the order is of a node's GPUs)",
                      got=raw)
    if sorted(raw) != list(range(gpus_per_node)):
        raise r.error("gpu_order", f"each of the node's GPU indices 0 to {gpus_per_node - 1} once "
                      f"(gpus_per_node is {gpus_per_node})", got=raw)
    return tuple(raw)


def parse_launch(spath: str, raw, source_ids: Sequence[str], gpus_per_node: int) -> Optional[LaunchSection]:
    """Parse the ``launch`` section, or None when the file has none.

    Args:
        spath: the site file (for messages).
        raw: the file's top-level mapping.
        source_ids: the ids of its ``sources``.
        gpus_per_node: its ``gpus_per_node`` (``gpu_order`` must name each of them once).
    Raises:
        SpecError: a value of the wrong form, or one without its source, naming the file, line and
            ``launch.<field>`` (exit 2).
    """
    r = section(spath, raw, "launch", LAUNCH_KEYS, "a mapping (" + ", ".join(LAUNCH_KEYS) + ")")
    if r is None:
        return None
    default = r.choice("default", LAUNCH_CHOICES)
    source = _source(r, "source", r.str("source"), source_ids, "the default launch") if default else None
    if default is None and r.get("source") is not None:
        raise r.error("source", "a source only beside default: (the source of the default launch)", got=r.get("source"))
    host = r.str("rendezvous_host")
    if host is not None and not RENDEZVOUS_HOST_RE.fullmatch(host):
        raise r.error("rendezvous_host", "a host name with {node} where the scheduler's name of the first node goes "
                      "(\"{node}-hsn0\", \"{node}.hsn.cm.example.org\"; letters, digits, '.', '-')", got=host)
    host_source = (_source(r, "rendezvous_host_source", r.str("rendezvous_host_source"), source_ids,
                           "the rendezvous host") if host else None)
    order = _gpu_order(r, gpus_per_node)
    order_source = (_source(r, "gpu_order_source", r.str("gpu_order_source"), source_ids, "the GPU order")
                    if order else None)
    for field, given in (("rendezvous_host_source", host), ("gpu_order_source", order)):
        if not given and r.get(field) is not None:
            raise r.error(field, f"a source only beside {field[:-len('_source')]}:", got=r.get(field))
    return LaunchSection(default=default, source=source, rendezvous_host=host, rendezvous_host_source=host_source,
                         gpu_order=order, gpu_order_source=order_source, note=r.str("note"))
