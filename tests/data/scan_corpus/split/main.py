"""Entry point of a project split across modules: set-up, broadcast and checkpoints live in proj/."""
import argparse

import horovod.torch as hvd

from proj.model import build
from proj.ckpt import save_checkpoint
from proj import train as training


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-lr", type=float, default=0.0125)
    args = parser.parse_args()
    hvd.init()
    model, optimizer = build(8, lr=args.base_lr * hvd.size())
    training.sync(model, optimizer)
    for epoch in range(3):
        training.one_epoch(model, optimizer, epoch)
        save_checkpoint(model, epoch)


if __name__ == "__main__":
    main()
