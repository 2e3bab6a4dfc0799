"""``torch.distributed`` across the job's ranks with the gloo backend (CPU tensors) and, where the
site's nodes have GPUs, the NCCL backend (each rank's GPU): validation checks, data (issue 41).

The rank probe's ``probe-torch`` phases with ``--controller torch --backend B``: the c10d
TCPStore served by envtool's rendezvous server (``rendezvous.py``) in the batch shell, ranks
started by ``srun --mpi=none``. A rank whose torch lacks the backend (a CPU build for NCCL)
fails the ``backend`` check naming it. Not run on this machine (no local launch). Registered in
:data:`envtool.validate.checks.CHECKS`.
"""
from envtool.validate.checks import ValidationCheck

GLOO = ValidationCheck(name="torch-gloo", framework="pytorch", binding="torch.distributed", backend="gloo",
                       device="cpu", launch="rendezvous", local="", phase="probe-torch",
                       args=("--controller", "torch", "--backend", "gloo"), key="torch", rendezvous="torch-gloo")

NCCL = ValidationCheck(name="torch-nccl", framework="pytorch", binding="torch.distributed", backend="nccl",
                       device="gpu", launch="rendezvous", local="", phase="probe-torch-nccl",
                       args=("--controller", "torch", "--backend", "nccl"), key="torch-nccl", rendezvous="torch-gloo")
