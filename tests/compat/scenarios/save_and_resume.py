"""Checkpoints: train a little, save the model's state_dict and a checkpoint dict (model, optimizer, epoch, loss)
with torch.save, load them into fresh objects with torch.load, and check that resuming continues exactly where the
uninterrupted run goes."""
import io
import os
import tempfile

import torch
import torch.nn as nn

torch.manual_seed(314)
x = torch.randn(64, 4)
y = (x[:, :1] * 2 - x[:, 1:2] + 0.5 * x[:, 2:3] ** 2).tanh()


def make_model():
    return nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))


def train(model, optimizer, steps):
    for _ in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    return loss.item()


model = make_model()
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
loss = train(model, optimizer, 30)
print("after 30 steps:", loss)

with tempfile.TemporaryDirectory() as folder:
    weights_path = os.path.join(folder, "weights.pt")
    torch.save(model.state_dict(), weights_path)
    checkpoint_path = os.path.join(folder, "checkpoint.pt")
    torch.save({"epoch": 30, "model": model.state_dict(), "optimizer": optimizer.state_dict(), "loss": loss},
               checkpoint_path)
    print("files written:", sorted(os.listdir(folder)))

    # weights only: a fresh model predicts what the trained one does
    fresh = make_model()
    print("fresh differs:", not torch.allclose(fresh(x), model(x)))
    state = torch.load(weights_path)
    print("loaded keys:", list(state), type(state["0.weight"]).__name__, state["0.weight"].shape)
    result = fresh.load_state_dict(state)
    print("missing:", result.missing_keys, "unexpected:", result.unexpected_keys)
    print("same predictions:", torch.equal(fresh(x), model(x)))
    fresh.eval()

    # a full checkpoint: resume training and follow the uninterrupted run
    ckpt = torch.load(checkpoint_path)
    resumed = make_model()
    resumed.load_state_dict(ckpt["model"])
    resumed_opt = torch.optim.Adam(resumed.parameters(), lr=0.01)
    resumed_opt.load_state_dict(ckpt["optimizer"])
    print("checkpoint:", ckpt["epoch"], round(ckpt["loss"], 6), sorted(ckpt["optimizer"]["state"][0]))
    print("optimizer step count:", ckpt["optimizer"]["state"][0]["step"])

uninterrupted = train(model, optimizer, 20)
continued = train(resumed, resumed_opt, 20)
print("after 50 steps:", uninterrupted, continued, "identical:", uninterrupted == continued)
print("same weights:", all(torch.equal(a, b) for a, b in zip(model.parameters(), resumed.parameters())))

# a strict=False load into a model with an extra layer reports what did not match
bigger = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1), nn.Sigmoid(), nn.Linear(1, 1))
report = bigger.load_state_dict(model.state_dict(), strict=False)
print("strict=False:", report.missing_keys, report.unexpected_keys)
try:
    bigger.load_state_dict(model.state_dict())
except RuntimeError as e:
    print("strict load fails:", str(e).splitlines()[0])

# tensors and plain containers round-trip through an in-memory buffer as well
buffer = io.BytesIO()
torch.save({"grid": torch.arange(6).reshape(2, 3), "scale": 0.5, "names": ["a", "b"]}, buffer)
buffer.seek(0)
restored = torch.load(buffer)
print("from a buffer:", restored["grid"], restored["scale"], restored["names"])
