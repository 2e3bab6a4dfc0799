"""Training steps: the initial state is broadcast here, not in main.py."""
import torch
import horovod.torch as hvd
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from .data import loader_options


def sync(model, optimizer):
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)


def one_epoch(model, optimizer, epoch):
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    sampler = DistributedSampler(data, num_replicas=hvd.size(), rank=hvd.rank())
    sampler.set_epoch(epoch)
    for x, y in DataLoader(data, batch_size=16, sampler=sampler, **loader_options()):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
