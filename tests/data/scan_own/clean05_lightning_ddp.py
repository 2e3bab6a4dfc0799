"""Clean (no rule may warn): PyTorch Lightning, DDP strategy on two nodes.

Launch: srun / torchrun via Lightning's DDP strategy (NCCL). Lightning inserts the
DistributedSampler, wraps the model in DDP, pins the device and writes checkpoints on global
rank 0; DataLoader workers are not an MPI risk here.
"""
import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset


class Classifier(L.LightningModule):
    def __init__(self, lr=1e-3):
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, sync_dist=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.lr)


def main():
    x = torch.randn(4096, 16)
    loader = DataLoader(TensorDataset(x, (x.sum(dim=1) > 0).long()), batch_size=64, shuffle=True, num_workers=4)
    trainer = L.Trainer(accelerator="gpu", devices=4, num_nodes=2, strategy="ddp", max_epochs=3,
                        callbacks=[ModelCheckpoint(dirpath="checkpoints")])
    trainer.fit(Classifier(), loader)


if __name__ == "__main__":
    main()
