"""Clean (no rule may warn): elastic Horovod (hvd.elastic.TorchState + @hvd.elastic.run).

Launch: horovodrun --min-np 2 --max-np 8 --host-discovery-script ... State is synchronised
from rank 0 by hvd.elastic.run (no explicit broadcast needed), ElasticSampler shards the
data, lr * hvd.size(), DistributedOptimizer, checkpoint on rank 0.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data
import horovod.torch as hvd


def main():
    hvd.init()
    if torch.cuda.is_available():
        torch.cuda.set_device(hvd.local_rank())
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    x = torch.randn(4096, 16)
    dataset = torch.utils.data.TensorDataset(x, (x.sum(dim=1) > 0).long())
    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True)
    loader = torch.utils.data.DataLoader(dataset, batch_size=64, sampler=sampler)

    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, 5):
            state.sampler.set_epoch(state.epoch)
            for xb, yb in loader:
                state.optimizer.zero_grad()
                F.cross_entropy(state.model(xb.to(device)), yb.to(device)).backward()
                state.optimizer.step()
                state.sampler.record_batch(0, 64)
            if hvd.rank() == 0:
                torch.save(state.model.state_dict(), "checkpoint.pt")
            state.commit()

    train(hvd.elastic.TorchState(model=model, optimizer=optimizer, sampler=sampler, epoch=0))


if __name__ == "__main__":
    main()
