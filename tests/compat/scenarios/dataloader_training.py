"""Training with the data utilities: points on two interleaved spirals in a TensorDataset, split with random_split,
served in shuffled minibatches by a DataLoader, a small classifier trained for a few epochs with per-epoch
validation, the way a training script's main loop reads."""
import math

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset, random_split

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"

# two spirals, one per class, with a little noise
n_per_class = 120
t = torch.linspace(0.25, 2 * math.pi, n_per_class)
arm = torch.stack([t * torch.cos(t), t * torch.sin(t)], dim=1) / (2 * math.pi)
points = torch.cat([arm, -arm]) + 0.03 * torch.randn(2 * n_per_class, 2)
labels = torch.cat([torch.zeros(n_per_class, dtype=torch.long), torch.ones(n_per_class, dtype=torch.long)])
dataset = TensorDataset(points, labels)
print("dataset:", len(dataset), "first item:", dataset[0])

train_set, val_set = random_split(dataset, [0.75, 0.25], generator=torch.Generator().manual_seed(42))
print("split:", len(train_set), len(val_set))
train_loader = DataLoader(train_set, batch_size=30, shuffle=True)
val_loader = DataLoader(val_set, batch_size=64)
print("batches per epoch:", len(train_loader), len(val_loader))
xb, yb = next(iter(train_loader))
print("a batch:", xb.shape, xb.dtype, yb.shape, yb.dtype)


class SpiralNet(nn.Module):
    def __init__(self, width=32):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(2, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                                    nn.Linear(width, 2))

    def forward(self, x):
        return self.layers(x)


model = SpiralNet().to(device)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.Adam(model.parameters(), lr=0.03)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)


def evaluate(loader):
    model.eval()
    correct, total, loss_sum = 0, 0, 0.0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            logits = model(x)
            loss_sum += criterion(logits, y).item() * len(y)
            correct += (logits.argmax(dim=1) == y).sum().item()
            total += len(y)
    return loss_sum / total, correct / total


for epoch in range(8):
    model.train()
    running, seen = 0.0, 0
    for batch, (x, y) in enumerate(train_loader):
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        running += loss.item() * x.size(0)
        seen += x.size(0)
    scheduler.step()
    val_loss, val_acc = evaluate(val_loader)
    print(f"epoch {epoch + 1}: train loss {running / seen:.4f}, val loss {val_loss:.4f}, "
          f"val accuracy {val_acc:.3f}, lr {scheduler.get_last_lr()[0]:.4f}")

print("seen per epoch:", seen, "last batch size:", len(y))
dropped = DataLoader(train_set, batch_size=50, shuffle=True, drop_last=True)
print("with drop_last:", len(dropped), [len(x) for x, _ in dropped])
final_logits = model(points.to(device))
print("train-mode flag:", model.training, "whole-set accuracy:", (final_logits.argmax(1) == labels.to(device)).float().mean().item())
