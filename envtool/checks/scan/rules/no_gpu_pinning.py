"""Rule ``no-gpu-pinning``: CUDA used and no GPU chosen from the local rank."""
from __future__ import annotations

import ast
from typing import Optional

from envtool.checks.scan.astutil import const_str, dotted, kwarg, last_name, rank_kind
from envtool.checks.scan.facts import CallSite
from envtool.checks.scan.program import Edit, Program
from envtool.checks.scan.registry import rule
from envtool.checks.scan.rule import Rule
from envtool.checks.scan.rules._examples import ALCF_TUTORIAL, HOROVOD_USAGE, horovod_script


@rule
class NoGpuPinning(Rule):
    """A program that uses CUDA (``.cuda()``, ``.to("cuda")``, TensorFlow under Horovod) and never pins a GPU to
    the local rank (``torch.cuda.set_device(hvd.local_rank())``, ``CUDA_VISIBLE_DEVICES``, ``device_ids=``...),
    or pins it to the global rank.

    Why it matters at scale: every rank of a node then runs on GPU 0 (out of memory, or N times slower), and a
    GPU chosen by the global rank does not exist on the second node (Horovod usage step 2,
    https://horovod.readthedocs.io/en/v0.28.1/pytorch.html; ALCF "Distributed Deep Learning" tutorial step 2,
    https://github.com/argonne-lcf/sdl_ai_workshop).
    """

    id = "no-gpu-pinning"
    title = "CUDA used without pinning a GPU to the local rank"
    sources = (HOROVOD_USAGE, ALCF_TUTORIAL)
    mechanisms = ("torch.cuda.set_device(...) / tf.config.experimental.set_visible_devices(...) / "
                  "config.gpu_options.visible_device_list / CUDA_VISIBLE_DEVICES",
                  ".cuda(i), .to(<local rank>), torch.device(f'cuda:{i}'), DistributedDataParallel(device_ids=)",
                  "Accelerate and Lightning's Horovod strategy pin themselves")
    order = 90
    fires_on = (horovod_script(
        'hvd.init()',
        'model = torch.nn.Linear(2, 2).cuda()',
        'hvd.broadcast_parameters(model.state_dict(), root_rank=0)'),)
    quiet_on = (horovod_script(
        'hvd.init()',
        'torch.cuda.set_device(hvd.local_rank())',
        'model = torch.nn.Linear(2, 2).cuda()',
        'hvd.broadcast_parameters(model.state_dict(), root_rank=0)'),)

    def applies(self, prog: Program) -> bool:
        """Programs that run as ranks (Horovod with hvd.init(), or torch.distributed)."""
        return prog.ranks

    def _cuda_use(self, prog: Program) -> Optional[CallSite]:
        """The first call that shows the program uses CUDA (or TensorFlow's GPUs under Horovod), else None."""
        for c in prog.calls:
            n = c.node
            last = last_name(n.func)
            q = dotted(n.func) or ""
            if last == "cuda" and isinstance(n.func, ast.Attribute) and q != "torch.cuda":
                return c
            if last in ("to", "device") and any((const_str(a) or "").startswith("cuda")
                                                for a in list(n.args) + [k.value for k in n.keywords]):
                return c
            if last in ("list_physical_devices", "list_logical_devices") and any(
                    const_str(a) == "GPU" for a in n.args) and prog.uses_hvd:
                return c
        if prog.launch == "horovod" and any(m.hvd_framework == "tensorflow" for m in prog.modules if m.hvd_binding):
            # TensorFlow takes every visible GPU of the node unless told otherwise
            inits = [c for c in prog.calls if prog.is_hvd_call(c, ("init",))]
            return inits[0] if inits else None
        return None

    def check(self, prog: Program) -> None:
        """``no-gpu-pinning``: CUDA used and no device chosen from the local rank."""
        if prog.lightning_hvd or prog.estimator_scales or prog.spark_or_ray() or prog.deepspeed:
            return  # (DeepSpeed's engine sets the local rank's device itself)
        cuda = self._cuda_use(prog)
        if cuda is None:
            return
        for m in prog.modules:
            if m.cuda_visible:
                return
        calls = sorted(prog.calls, key=lambda x: last_name(x.node.func) != "set_device")  # set_device judged first
        for c in calls:
            if not prog.runs(c.func):
                continue  # a set_device in a method nothing calls pins nothing
            n = c.node
            last = last_name(n.func)
            args = list(n.args) + [k.value for k in n.keywords if k.arg not in ("non_blocking",)]
            if last in ("set_device", "set_visible_devices", "Accelerator", "init_distributed") or \
                    kwarg(n, "device_ids") is not None or kwarg(n, "local_rank") is not None:
                arg = n.args[0] if n.args else None
                if last == "set_device" and arg is not None and (
                        isinstance(arg, ast.Call) and rank_kind(arg) == "global" or
                        isinstance(arg, (ast.Name, ast.Attribute)) and c.module.rank_aliases.get(last_name(arg)) == "global"):
                    prog.add(c.module, n.lineno, "no-gpu-pinning",
                             f"{ast.unparse(n)} pins the GPU to the global rank: on a second node it names a GPU "
                             "that does not exist (Horovod usage step 2: pin to the local rank)" +
                             ("" if prog.multinode_job else "; nothing shows this program runs on several nodes, "
                                "where global and local rank are the same"),
                             "pin to the local rank: torch.cuda.set_device(hvd.local_rank())",
                             "warn" if prog.multinode_job else "info")
                return
            if last in ("cuda", "to", "device") and args and any(
                    not isinstance(a, ast.Constant) for a in args):
                if last == "to" and not any(rank_kind(a) or isinstance(a, ast.JoinedStr) or
                                            any(isinstance(x, ast.BinOp) for x in ast.walk(a)) for a in args):
                    continue
                return
        init = prog.first([c for c in prog.calls if prog.is_hvd_call(c, ("init",)) or
                            last_name(c.node.func) == "init_process_group"]) or cuda
        fix = ("torch.cuda.set_device(hvd.local_rank()) right after hvd.init()" if prog.launch == "horovod" and
               any(m.hvd_framework == "torch" for m in prog.modules if m.hvd_binding) else
               "tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], 'GPU')"
               if prog.launch == "horovod" else
               "torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) after init_process_group")
        line = ("torch.cuda.set_device(hvd.local_rank())" if fix.startswith("torch.cuda.set_device(hvd") else
                "torch.cuda.set_device(int(os.environ['LOCAL_RANK']))" if fix.startswith("torch.cuda") else None)
        edit = Edit.insert(init.module, init.node.end_lineno or init.node.lineno, line) \
            if line and init is not cuda else None
        prog.add(init.module, init.node.lineno, "no-gpu-pinning",
                 f"the program uses CUDA ({cuda.module.shown}:{cuda.node.lineno}) but never pins a GPU to the "
                 "local rank: every rank of a node runs on GPU 0 (out of memory, or N times slower) (Horovod usage "
                 "step 2, horovod.readthedocs.io/en/v0.28.1/pytorch.html; ALCF tutorial step 2)" + prog.assumed(),
                 fix, "warn", edit)
