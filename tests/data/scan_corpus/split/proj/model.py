"""Model and optimizer; the learning rate is chosen by the caller."""
import torch
import horovod.torch as hvd


def build(width, lr, momentum=0.9):
    model = torch.nn.Linear(width, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    return model, optimizer
