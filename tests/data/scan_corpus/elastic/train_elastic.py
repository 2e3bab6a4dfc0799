"""Elastic Horovod: the state object is synced from rank 0 by hvd.elastic.run."""
import torch
import torch.multiprocessing as mp
import horovod.torch as hvd


def lr_scaler():
    return hvd.size()


def main():
    hvd.init()
    model = torch.nn.Linear(8, 1)
    base_lr = 0.01
    optimizer = torch.optim.SGD(model.parameters(), lr=base_lr * lr_scaler())
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, 5):
            optimizer.zero_grad()
            model(torch.randn(32, 8)).sum().backward()
            optimizer.step()
            state.commit()

    state = hvd.elastic.TorchState(model, optimizer, epoch=0)
    train(state)


if __name__ == "__main__":
    mp.set_start_method("forkserver")
    main()
