"""Checkpoints: a rank-0 helper (it returns on every other rank)."""
import torch
import horovod.torch as hvd


def save_checkpoint(model, epoch):
    if hvd.rank() != 0:
        return
    torch.save(model.state_dict(), f"checkpoint-{epoch}.pt")
