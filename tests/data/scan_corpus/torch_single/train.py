"""PyTorch + Horovod, one file: every step of the recipe done right."""
import argparse

import torch
import horovod.torch as hvd
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def save_checkpoint(model, epoch):
    if hvd.rank() != 0:
        return
    torch.save(model.state_dict(), f"checkpoint-{epoch}.pt")


def make_loaders(dataset):
    loader_kwargs = {"num_workers": 4, "pin_memory": True}
    loader_kwargs["multiprocessing_context"] = "forkserver"
    sampler = DistributedSampler(dataset, num_replicas=hvd.size(), rank=hvd.rank())
    train = DataLoader(dataset, batch_size=32, sampler=sampler, **loader_kwargs)
    test = DataLoader(dataset, batch_size=64, num_workers=2, multiprocessing_context="forkserver")
    return train, test


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    hvd.init()
    torch.manual_seed(42)
    dataset = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
    train, test = make_loaders(dataset)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    for epoch in range(args.epochs):
        train.sampler.set_epoch(epoch)
        for x, y in train:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        save_checkpoint(model, epoch)


if __name__ == "__main__":
    main()
