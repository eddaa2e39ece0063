"""torch.save / torch.load habits, each run with torch and with gpugrad and compared (tests/compat/harness.py):
tensors of every common dtype and shape, state dicts, optimizer states that resume training, checkpoints of nested
dicts with numbers and strings, file objects and paths, map_location, weights_only, and what loading gives back
(requires_grad, Parameters, one tensor saved twice). gpugrad's files are safetensors with a JSON manifest, not
pickles (tests/files/test_serialization.py checks the format and that a crafted file cannot run code)."""
from __future__ import annotations

import io
import os
import tempfile

import numpy as np
import pytest

from tests.compat.harness import check, compat


def _round_trip(torch, obj, **load_kw):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kw)


@pytest.mark.parametrize("make", [
    lambda torch: torch.arange(6.0).reshape(2, 3),
    lambda torch: torch.tensor(3.5),
    lambda torch: torch.zeros(0, 4),
    lambda torch: torch.arange(5),
    lambda torch: torch.tensor([True, False, True]),
    lambda torch: torch.arange(4, dtype=torch.float16),
    lambda torch: torch.arange(4, dtype=torch.float64) / 3,
    lambda torch: torch.arange(4, dtype=torch.int32),
    lambda torch: torch.arange(4, dtype=torch.uint8),
    lambda torch: torch.arange(12.0).reshape(3, 4).t(),
    lambda torch: torch.arange(10.0)[::3],
    lambda torch: torch.arange(6, dtype=torch.float64).reshape(2, 3) * (1 - 2j),
    lambda torch: torch.tensor(1.5 + 0.5j, dtype=torch.complex64),
], ids=["float32", "0-d", "empty", "int64", "bool", "float16", "float64", "int32", "uint8", "transposed", "strided",
        "complex128", "complex64"])
def test_tensor_round_trip(make):
    check(lambda torch: _round_trip(torch, make(torch)))


@compat
def test_requires_grad_is_kept(torch):
    back = _round_trip(torch, {"w": torch.ones(2, requires_grad=True), "c": torch.ones(2)})
    return back["w"], back["c"], back["w"].is_leaf


@compat
def test_a_parameter_comes_back_as_a_parameter(torch):
    back = _round_trip(torch, torch.nn.Parameter(torch.ones(3)))
    return type(back).__name__, back


@compat
def test_one_tensor_saved_twice_comes_back_once(torch):
    t = torch.ones(3)
    back = _round_trip(torch, {"a": t, "b": t, "c": [t]})
    return back["a"] is back["b"], back["c"][0] is back["a"]


@compat
def test_plain_python_values(torch):
    return _round_trip(torch, {"epoch": 3, "lr": 0.001, "name": "run-1", "done": False, "none": None,
                               "sizes": [784, 128, 10], "betas": (0.9, 0.999), "nan": float("nan"),
                               "nested": {"a": {"b": [1, {"c": 2.5}]}}, 7: "int key", 2.5: "float key"})


@compat
def test_shapes_and_named_results_keep_their_types(torch):
    x = torch.tensor([[1.0, 5.0, 2.0], [7.0, 0.0, 3.0]])
    # NOTE: torch's weights_only loader refuses return types; gpugrad's files hold no code either way
    back = _round_trip(torch, {"shape": x.shape, "max": x.max(1), "topk": x.topk(2), "sizes": [x[0].shape]},
                       weights_only=False)
    return back, type(back["max"]).__name__, type(back["topk"]).__name__


@compat
def test_a_module_state_dict(torch):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    back = _round_trip(torch, model.state_dict())
    return list(back), [v.shape for v in back.values()], all(bool((back[k] == v).all())
                                                               for k, v in model.state_dict().items())


@compat
def test_load_state_dict_from_a_saved_file(torch):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    other = torch.nn.Linear(3, 2)
    other.load_state_dict(_round_trip(torch, model.state_dict()))
    x = torch.arange(6.0).reshape(2, 3)
    return bool((other(x) == model(x)).all())


@compat
def test_an_optimizer_state_dict(torch):
    w = torch.tensor(np.linspace(-1, 1, 6).reshape(2, 3), requires_grad=True)
    opt = torch.optim.Adam([w], lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        (w ** 2).sum().backward()
        opt.step()
    return _round_trip(torch, opt.state_dict())


@compat
def test_a_checkpoint_resumes_training(torch):
    def train(w, opt, steps):
        for _ in range(steps):
            opt.zero_grad()
            ((w - 1) ** 4).sum().backward()
            opt.step()

    w = torch.tensor(np.linspace(-1, 1, 6), requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.05, momentum=0.9)
    train(w, opt, 3)
    ckpt = _round_trip(torch, {"epoch": 3, "w": w.detach(), "optimizer": opt.state_dict()})
    w2 = ckpt["w"].clone().requires_grad_(True)
    opt2 = torch.optim.SGD([w2], lr=0.05, momentum=0.9)
    opt2.load_state_dict(ckpt["optimizer"])
    train(w, opt, 3)
    train(w2, opt2, 3)
    return ckpt["epoch"], w.detach(), w2.detach()


@compat
def test_save_to_a_path_and_load_from_it(torch):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.pt")
        torch.save({"x": torch.arange(3)}, path)
        return torch.load(path)


@compat
def test_save_to_a_pathlib_path(torch):
    import pathlib

    with tempfile.TemporaryDirectory() as d:
        path = pathlib.Path(d) / "t.pt"
        torch.save(torch.ones(2), path)
        return torch.load(path), path.exists()


@compat
def test_save_to_an_open_file(torch):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.pt")
        with open(path, "wb") as f:
            torch.save([torch.ones(2), 5], f)
        with open(path, "rb") as f:
            return torch.load(f)


@pytest.mark.parametrize("map_location", ["cpu", "device", "dict"])
def test_map_location(map_location):
    def snippet(torch):
        where = {"cpu": "cpu", "device": torch.device("cpu"), "dict": {"cpu": "cpu"}}[map_location]
        back = _round_trip(torch, {"t": torch.ones(2)}, map_location=where)
        return back["t"], back["t"].device

    check(snippet)


@compat
def test_weights_only_true(torch):
    return _round_trip(torch, {"t": torch.ones(2), "n": 1}, weights_only=True)


@compat
def test_loaded_tensors_are_writable(torch):
    back = _round_trip(torch, torch.zeros(3))
    back[0] = 1.0
    back.add_(1)
    return back
