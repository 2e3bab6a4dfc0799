"""Clean (no rule may warn): Horovod with the safety set up through constants and helpers.

Launch: horovodrun. The start method is set globally from a module constant (forkserver), so
the DataLoader's workers do not fork; the lr is scaled in a helper; the checkpoint helper is
only called under a global-rank test.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data
import torch.multiprocessing as mp
import horovod.torch as hvd

START_METHOD = "forkserver"


def build_dataset(n=2048):
    """Synthetic two-class data (16 features)."""
    x = torch.randn(n, 16)
    y = (x.sum(dim=1) > 0).long()
    return torch.utils.data.TensorDataset(x, y)


def scaled_lr(base_lr):
    """The learning rate for hvd.size() ranks (linear scaling)."""
    return base_lr * hvd.size()


def save_checkpoint(model, epoch, path="checkpoint.pt"):
    """Write a checkpoint (callers run it on rank 0 only)."""
    torch.save({"model": model.state_dict(), "epoch": epoch}, path)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--base-lr", type=float, default=0.01)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    hvd.init()
    if torch.cuda.is_available():
        torch.cuda.set_device(hvd.local_rank())
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    mp.set_start_method(START_METHOD)

    dataset = build_dataset()
    sampler = torch.utils.data.distributed.DistributedSampler(dataset, num_replicas=hvd.size(), rank=hvd.rank())
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, num_workers=2)

    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=scaled_lr(args.base_lr), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
        if hvd.rank() == 0:
            save_checkpoint(model, epoch)


if __name__ == "__main__":
    main()
