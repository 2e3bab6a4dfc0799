"""``torch.distributed`` with the gloo backend across the job's ranks (a validation check, data).

The rank probe's ``probe-torch`` phase with ``--controller torch``: the c10d TCPStore served by
envtool's rendezvous server (``rendezvous.py``) in the batch shell, ranks started by
``srun --mpi=none``. Not run on this machine (no local launch). Registered in
:data:`envtool.validate.checks.CHECKS`.
"""
from envtool.validate.checks import ValidationCheck

GLOO = ValidationCheck(name="torch-gloo", framework="pytorch", binding="torch.distributed", backend="gloo",
                       device="cpu", launch="rendezvous", local="", phase="probe-torch",
                       args=("--controller", "torch"), key="torch", rendezvous="torch-gloo")
