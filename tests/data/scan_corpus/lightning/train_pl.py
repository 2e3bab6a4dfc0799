"""PyTorch Lightning with its Horovod strategy: Lightning scales the lr and broadcasts."""
import torch
from pytorch_lightning import LightningModule, Trainer
from pytorch_lightning.callbacks import ModelCheckpoint
import horovod.torch as hvd
from torch.utils.data import DataLoader, TensorDataset


class Net(LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.5)


def main():
    hvd.init()
    data = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
    loader = DataLoader(data, batch_size=32, num_workers=2, multiprocessing_context="forkserver")
    trainer = Trainer(strategy="horovod", max_epochs=2, callbacks=[ModelCheckpoint(dirpath="ckpt")])
    trainer.fit(Net(), loader)
    trainer.save_checkpoint("final.ckpt")


if __name__ == "__main__":
    main()
