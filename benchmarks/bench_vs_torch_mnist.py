"""gpugrad vs PyTorch on MNIST: the same 784-256-128-10 ReLU MLP, trained twice, should end up equally accurate.

Both runs share everything that decides the result: the initial weights (gpugrad's init, copied into torch),
the batch order (gpugrad's seeded DataLoader order, replayed in torch), the optimizer and its hyperparameters.
The script reports both test accuracies, their difference (target: within 0.5 points), the largest gap
between the per-epoch training losses, and each framework's training throughput.

    python benchmarks/bench_vs_torch_mnist.py --data ~/mnist          # a real MNIST-format directory
    python benchmarks/bench_vs_torch_mnist.py                         # no data: a synthetic MNIST-format set

Without a directory it writes one: the embedded 8x8 digits upscaled to 28x28 (1437 train / 360 test) as IDX
files, so the comparison runs anywhere; the output says which data it used.  Needs torch (CPU is fine):
``pip install 'gpugrad[oracle]'``.  As a pytest file it runs the synthetic comparison (skipped without torch)
and the real one when ``GPUGRAD_MNIST_DIR`` names an MNIST directory.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

try:
    import gpugrad
except ImportError:  # run from a checkout without installing: python benchmarks/bench_vs_torch_mnist.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import gpugrad

from gpugrad.data import DataLoader, TensorDataset, digits_split, load_idx_dir, write_idx_dir

SIZES = (784, 256, 128, 10)
TOLERANCE = 0.5  # accuracy points


def write_synthetic_mnist(path, gz=True):
    """The embedded digits (fixed split) as 28x28 uint8 MNIST-format files: each 8x8 pixel becomes a 3x3 block
    (24x24), padded by 2 on every side, and 0..16 becomes 0..255."""
    x_train, y_train, x_test, y_test = digits_split(scale=False)

    def upscale(x):
        big = np.kron(x.reshape(-1, 8, 8), np.ones((3, 3), np.uint8))
        big = np.pad(big, ((0, 0), (2, 2), (2, 2)))
        return np.round(big.astype(np.float32) * (255 / 16)).astype(np.uint8)

    return write_idx_dir(path, upscale(x_train), y_train.astype(np.uint8), upscale(x_test), y_test.astype(np.uint8),
                         gz=gz)


def _accuracy(predict, x, y, batch=1000):
    """Fraction of rows where predict(x) (class indices, NumPy) equals y, in batches."""
    hits = [predict(x[i:i + batch]) == y[i:i + batch] for i in range(0, len(x), batch)]
    return float(np.mean(np.concatenate(hits)))


def run_gpugrad(data, config, device):
    from gpugrad import nn, optim
    from gpugrad.nn import functional as F

    x_train, y_train, x_test, y_test = data
    gpugrad.manual_seed(config["seed"])
    model = nn.MLP(list(SIZES), activation="relu").to(device)
    init = {k: v.cpu().numpy().copy() for k, v in model.state_dict().items()}  # Tensors, as torch's
    opt = _optimizer(optim, model.parameters(), config)
    loader = DataLoader(TensorDataset(x_train, y_train), batch_size=config["batch_size"], shuffle=True,
                        seed=config["seed"], device=device)
    orders, losses, t0 = [], [], time.perf_counter()
    for epoch in range(config["epochs"]):
        orders.append(loader.indices(epoch))
        total = 0.0
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(yb)
        losses.append(total / len(x_train))
    train_s = time.perf_counter() - t0
    model.eval()
    with gpugrad.no_grad():
        acc = _accuracy(lambda x: model(gpugrad.tensor(x, device=device)).argmax(axis=1).numpy(), x_test, y_test)
    return {"test_acc": acc, "losses": losses, "train_s": train_s}, init, orders


def run_torch(data, config, init, orders):
    import torch

    x_train, y_train, x_test, y_test = data
    layers = []
    for i, (n_in, n_out) in enumerate(zip(SIZES[:-1], SIZES[1:])):
        layers.append(torch.nn.Linear(n_in, n_out))
        if i < len(SIZES) - 2:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    with torch.no_grad():  # gpugrad's MLP names its layers like torch's Sequential: "0.weight", "2.bias", ...
        for name, p in model.state_dict().items():
            p.copy_(torch.from_numpy(init[name]))
    opt = _optimizer(torch.optim, model.parameters(), config)
    X, Y = torch.from_numpy(x_train), torch.from_numpy(y_train)
    bs, losses, t0 = config["batch_size"], [], time.perf_counter()
    for order in orders:
        total = 0.0
        for i in range(0, len(order), bs):
            idx = torch.from_numpy(order[i:i + bs])
            loss = torch.nn.functional.cross_entropy(model(X[idx]), Y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        losses.append(total / len(x_train))
    train_s = time.perf_counter() - t0
    model.eval()
    with torch.no_grad():
        acc = _accuracy(lambda x: model(torch.from_numpy(x)).argmax(1).numpy(), x_test, y_test)
    return {"test_acc": acc, "losses": losses, "train_s": train_s}


def _optimizer(module, params, config):
    if config["optimizer"] == "sgd":
        return module.SGD(params, lr=config["lr"], momentum=config["momentum"])
    return module.Adam(params, lr=config["lr"])


def compare(data_dir, epochs=3, batch_size=64, lr=1e-3, optimizer="adam", momentum=0.9, seed=0, device=None):
    """Train both; returns a dict with both results, the accuracy difference (points) and the data used."""
    data = load_idx_dir(data_dir)
    if data[0].shape[1] != SIZES[0]:
        raise ValueError(f"{data_dir}: images have {data[0].shape[1]} pixels; this benchmark's MLP takes 784 (28x28)")
    config = {"epochs": epochs, "batch_size": batch_size, "lr": lr, "optimizer": optimizer, "momentum": momentum,
              "seed": seed}
    device = gpugrad.backend.get_backend(device).device
    ours, init, orders = run_gpugrad(data, config, device)
    theirs = run_torch(data, config, init, orders)
    n_train = len(data[0])
    for r in (ours, theirs):
        r["samples_per_s"] = n_train * epochs / r["train_s"]
    return {"config": config, "device": str(device), "n_train": n_train, "n_test": len(data[2]),
            "gpugrad": ours, "torch": theirs, "acc_diff_points": 100 * (ours["test_acc"] - theirs["test_acc"]),
            "max_loss_gap": max(abs(a - b) for a, b in zip(ours["losses"], theirs["losses"]))}


def report(result, data_desc):
    import torch

    c = result["config"]
    lines = [f"data: {data_desc} ({result['n_train']} train / {result['n_test']} test)",
             f"model: MLP {'-'.join(map(str, SIZES))} relu, {c['optimizer']} lr={c['lr']:g}, batch {c['batch_size']}, "
             f"{c['epochs']} epochs, seed {c['seed']}; same init and batch order in both",
             f"gpugrad {gpugrad.__version__} on {result['device']}: "
             f"test_acc {100 * result['gpugrad']['test_acc']:.2f}%  "
             f"{result['gpugrad']['samples_per_s']:,.0f} samples/s",
             f"torch {torch.__version__} on cpu: test_acc {100 * result['torch']['test_acc']:.2f}%  "
             f"{result['torch']['samples_per_s']:,.0f} samples/s",
             f"difference: {result['acc_diff_points']:+.2f} points (target within {TOLERANCE}); largest per-epoch "
             f"train-loss gap {result['max_loss_gap']:.2e}"]
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", metavar="DIR", help="MNIST-format IDX directory (default: a synthetic one from the "
                   "embedded digits)")
    p.add_argument("--epochs", type=int, help="default: 3 on --data, 10 on the synthetic set")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--optimizer", choices=("adam", "sgd"), default="adam")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", help="gpugrad's device (torch runs on the CPU)")
    args = p.parse_args(argv)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("this benchmark needs PyTorch: pip install 'gpugrad[oracle]'", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        if args.data:
            data_dir, desc, epochs = args.data, f"MNIST-format directory {args.data}", args.epochs or 3
        else:
            data_dir = write_synthetic_mnist(Path(tmp) / "synthetic-mnist")
            desc, epochs = "SYNTHETIC MNIST-format set (embedded 8x8 digits upscaled to 28x28; not real MNIST)", \
                args.epochs or 10
        result = compare(data_dir, epochs, args.batch_size, args.lr, args.optimizer, args.momentum, args.seed,
                         args.device)
    print(report(result, desc))
    return 0 if abs(result["acc_diff_points"]) <= TOLERANCE else 1


# -- as tests ------------------------------------------------------------------------------------------------------
def test_gpugrad_matches_torch_on_synthetic_mnist(tmp_path):
    import pytest

    pytest.importorskip("torch", reason="the comparison needs PyTorch: pip install 'gpugrad[oracle]'")
    result = compare(write_synthetic_mnist(tmp_path / "mnist"), epochs=3, device="cpu")
    assert abs(result["acc_diff_points"]) <= TOLERANCE, report(result, "synthetic")
    assert result["gpugrad"]["test_acc"] > 0.9 and result["max_loss_gap"] < 1e-3


def test_gpugrad_matches_torch_on_mnist():
    import pytest

    pytest.importorskip("torch", reason="the comparison needs PyTorch: pip install 'gpugrad[oracle]'")
    data_dir = os.environ.get("GPUGRAD_MNIST_DIR")
    if not data_dir:
        pytest.skip("set GPUGRAD_MNIST_DIR to an MNIST-format directory to compare on real MNIST")
    result = compare(data_dir, epochs=1)
    assert abs(result["acc_diff_points"]) <= TOLERANCE, report(result, data_dir)


if __name__ == "__main__":
    sys.exit(main())
