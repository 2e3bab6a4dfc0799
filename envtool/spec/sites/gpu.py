"""A site file's ``gpu`` section: the GPU nodes' hardware, driver and communication stack, as
dated, sourced facts (issue 41, items 3 and 4) that ``plan`` checks a spec against on a login
node, where no GPU can be asked (:mod:`envtool.core.gpu_gates`, :mod:`envtool.core.comm_rules`).

Format::

    gpu:
      vendor: nvidia              # nvidia | amd | intel (envtool.core.gpu_vendors), optional
      model: A100                 # the GPU's name as nvidia-smi gives it, or its short form
      capability: "8.0"           # compute capability (https://developer.nvidia.com/cuda-gpus)
      driver: "535.154.05"        # the nodes' driver, optional
      mig: false                  # MIG slices instead of whole GPUs, optional
      network: slingshot          # slingshot, infiniband, ethernet, optional
      nccl_plugins: ["aws-ofi-nccl 1.9.1"]   # NCCL network plug-ins the site's modules load, optional
      source: ID                  # the sources entry these facts come from (required)
      date: "2025-01-15"          # when that source said so (required: facts about a site age)
"""
from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

from envtool.core.gpu_vendors import VENDOR_NAMES
from envtool.spec.sites.reader import require_source, section

GPU_KEYS = ("vendor", "model", "capability", "driver", "mig", "network", "nccl_plugins", "source", "date", "note")
#: The networks a rule may name (:mod:`envtool.core.comm_rules`).
NETWORKS = ("slingshot", "infiniband", "ethernet", "nvlink")


@dataclass(frozen=True)
class SiteGPU:
    """A site file's ``gpu`` section.

    Attributes:
        model: the GPU's name (``A100``, ``NVIDIA GH200 480GB``).
        capability: compute capability ``X.Y``, or None.
        driver: the nodes' driver version, or None.
        mig: MIG slices instead of whole GPUs, or None when the file does not say.
        network: one of :data:`NETWORKS`, or None.
        nccl_plugins: ``(name, version or None)`` of each NCCL network plug-in.
        source: id in the file's ``sources``.
        date: the date the source gave these facts (``YYYY-MM-DD``).
        note: free text, or None.
        vendor: one of :data:`envtool.core.gpu_vendors.VENDOR_NAMES`, or None when the file does
            not say (then nothing is derived from it: CUDA and NCCL, as before).
    """

    model: str
    source: str
    date: str
    capability: Optional[str] = None
    driver: Optional[str] = None
    mig: Optional[bool] = None
    network: Optional[str] = None
    nccl_plugins: Tuple[Tuple[str, Optional[str]], ...] = ()
    note: Optional[str] = None
    vendor: Optional[str] = None


def parse_gpu(spath: str, raw, source_ids: Sequence[str]) -> Optional[SiteGPU]:
    """Parse the ``gpu`` section, or None when the file has none.

    Raises:
        SpecError: a field of the wrong form, naming the file, line and ``gpu.<field>`` (exit 2).
    """
    r = section(spath, raw, "gpu", GPU_KEYS, "a mapping with model:, source: and date:")
    if r is None:
        return None
    model = r.str("model")
    if not model:
        raise r.error("model", "the GPU's name (A100, H100, GH200) as nvidia-smi gives it or its short form")
    capability = r.get("capability")
    if isinstance(capability, float) and not isinstance(capability, bool):
        capability = f"{capability:.1f}"  # capability: 8.0 unquoted: YAML reads a number
    capability = r.str("capability", capability) if not isinstance(capability, str) else capability
    if capability is not None and not re.fullmatch(r"\d{1,2}\.\d", capability):
        raise r.error("capability", "a compute capability X.Y as a string (\"8.0\", \"9.0\")", got=capability)
    driver = r.str("driver")
    if driver is not None and not re.fullmatch(r"\d{3}(\.\d{1,3}){1,2}", driver):
        raise r.error("driver", "an NVIDIA driver version as a string (\"535.154.05\")", got=driver)
    mig = r.get("mig")
    if mig is not None and not isinstance(mig, bool):
        raise r.error("mig", "true or false", got=mig)
    vendor = r.choice("vendor", VENDOR_NAMES) if r.get("vendor") is not None else None
    network = r.choice("network", NETWORKS) if r.get("network") is not None else None
    plugins = []
    for entry in r.str_list("nccl_plugins"):
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9_.-]*)(?:\s+v?(\d+(?:\.\d+){0,3}))?", entry.strip())
        if not m:
            raise r.error("nccl_plugins", "plug-in names with an optional version (\"aws-ofi-nccl 1.9.1\")", got=entry)
        plugins.append((m.group(1).lower(), m.group(2)))
    source = require_source(r, r.str("source"), source_ids, "the GPU facts")
    date = r.get("date")
    if isinstance(date, datetime.date):
        date = date.isoformat()  # an unquoted 2025-01-15 is a YAML date
    try:
        datetime.date.fromisoformat(date if isinstance(date, str) else "")
    except ValueError:
        raise r.error("date", "the date the source gave these facts, YYYY-MM-DD as a string", got=date) from None
    return SiteGPU(model=model, source=source, date=date or "", capability=capability, driver=driver, mig=mig,
                   network=network, nccl_plugins=tuple(plugins), note=r.str("note"),
                   vendor=vendor)
