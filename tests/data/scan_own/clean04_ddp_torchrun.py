"""Clean (no rule may warn): PyTorch DDP started by torchrun over NCCL.

Launch: torchrun --nnodes=2 --nproc-per-node=4 clean04_ddp_torchrun.py. No MPI in the process,
so forked DataLoader workers are not a risk; GPU from LOCAL_RANK, DistributedSampler, DDP,
checkpoint written by global rank 0 only.
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="nccl")

    x = torch.randn(4096, 16)
    dataset = TensorDataset(x, (x.sum(dim=1) > 0).long())
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=64, sampler=sampler, num_workers=4, pin_memory=True)

    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2)).cuda(local_rank)
    model = DDP(model, device_ids=[local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    for epoch in range(3):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            xb, yb = xb.cuda(local_rank, non_blocking=True), yb.cuda(local_rank, non_blocking=True)
            optimizer.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            optimizer.step()
        if dist.get_rank() == 0:
            torch.save({"model": model.module.state_dict(), "epoch": epoch}, "checkpoint.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
