"""Risk, rule data-not-sharded: no DistributedSampler, every rank reads the whole dataset.

Launch: horovodrun (MPI). The DataLoader shuffles the full dataset on every rank, so an epoch
processes the data hvd.size() times and the ranks do not split the work.
expected-anywhere: data-not-sharded
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data

import horovod.torch as hvd


def build_dataset(n=2048):
    """Synthetic two-class data (16 features)."""
    x = torch.randn(n, 16)
    y = (x.sum(dim=1) > 0).long()
    return torch.utils.data.TensorDataset(x, y)


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

    dataset = build_dataset()
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                                         num_workers=2, multiprocessing_context="forkserver")

    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.base_lr * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    for epoch in range(args.epochs):
        model.train()
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
        if hvd.rank() == 0:
            torch.save({"model": model.state_dict(), "epoch": epoch}, "checkpoint.pt")


if __name__ == "__main__":
    main()
