"""A toy validation check and launch, one file: what a new framework, backend or launch adds.

``TOY``: Horovod's TensorFlow binding over NCCL on GPUs, started by a toy launcher (as torchrun
will be); ``TOY_CPU``: the same on CPUs. tests/test_validate_checks.py registers them.
"""
from envtool.scheduler.model import LaunchStep
from envtool.validate import ranks as rk
from envtool.validate.checks import Launch, ValidationCheck

TOY = ValidationCheck(name="toy-tf-nccl", framework="tensorflow", binding="horovod.tensorflow", backend="nccl",
                      device="gpu", launch="toyrun", local="", phase="probe-toy", args=("--controller", "toy"),
                      key="toy")
TOY_CPU = ValidationCheck(name="toy-tf-gloo", framework="pytorch", binding="horovod.tensorflow", backend="gloo",
                          device="cpu", launch="toyrun", local="", phase="probe-toy", args=("--controller", "toy"),
                          key="toy")


def _build(check, ctx):
    return LaunchStep(("toyrun", "--nproc", "auto", *rk.probe_argv(ctx.python, ctx.probe, ctx.run_dir, check.phase),
                       *check.args), direct=True, may_fail=True)


LAUNCH = Launch(name="toyrun", where="job", build=_build)
