"""A network whose depth is Python control flow: each training step picks how many times a shared residual block is
applied, and an `if` adds a skip branch on some steps. Autograd records whatever ran."""
import random
from collections import Counter

import torch
import torch.nn as nn

random.seed(1234)
torch.manual_seed(1234)


class SharedDepthNet(nn.Module):
    def __init__(self, width=16, max_depth=4):
        super().__init__()
        self.max_depth = max_depth
        self.embed = nn.Linear(1, width)
        self.block = nn.Linear(width, width)  # reused at every depth: its gradient sums over the repeats
        self.head = nn.Linear(width, 1)
        self.depths = Counter()

    def forward(self, x, depth=None):
        if depth is None:
            depth = random.randint(1, self.max_depth) if self.training else self.max_depth
        self.depths[depth] += 1
        h = torch.tanh(self.embed(x))
        for _ in range(depth):
            h = h + torch.tanh(self.block(h))
        if self.training and depth % 2 == 0:
            h = h * 0.5 + torch.tanh(self.embed(x)) * 0.5
        return self.head(h)


x = torch.linspace(-1, 1, 64).unsqueeze(1)
y = torch.sin(3 * x) + 0.5 * x
net = SharedDepthNet()
optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
loss_fn = nn.MSELoss()

for step in range(100):
    prediction = net(x)
    loss = loss_fn(prediction, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 25 == 24:
        print(f"step {step + 1}: loss {loss.item():.6f}")

print("depths drawn:", sorted(net.depths.items()))
net.eval()
with torch.no_grad():
    for depth in range(1, net.max_depth + 1):
        print("depth", depth, "eval loss", loss_fn(net(x, depth=depth), y).item())
    final = net(x)
print("training mode off:", net.training, "final loss:", loss_fn(final, y).item())

# one backward through the block applied three times: its .grad holds the sum of the three uses
net.train()
net.zero_grad()
loss_fn(net(x, depth=3), y).backward()
shared_grad = net.block.weight.grad.clone()
print("block used 3 times, gradient norm:", shared_grad.norm().item())
