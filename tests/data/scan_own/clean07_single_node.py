"""Clean (no rule may warn): a single-process training script.

Launch: python clean07_single_node.py. Nothing is distributed: DataLoader workers, an unscaled
SGD learning rate and an unguarded torch.save are all correct for one process.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    x = torch.randn(4096, 16)
    loader = DataLoader(TensorDataset(x, (x.sum(dim=1) > 0).long()), batch_size=64, shuffle=True, num_workers=4)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for epoch in range(3):
        for xb, yb in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(xb.to(device)), yb.to(device)).backward()
            optimizer.step()
        torch.save({"model": model.state_dict(), "epoch": epoch}, "checkpoint.pt")


if __name__ == "__main__":
    main()
