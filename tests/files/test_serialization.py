"""gpugrad.save / gpugrad.load: round trips of everything a checkpoint holds, the file format (a safetensors file
whose metadata holds a JSON manifest), files that are not gpugrad saves (clear errors naming the file), crafted
files that try to run code (they cannot: nothing is unpickled), map_location, and objects that cannot be saved."""
from __future__ import annotations

import io
import json
import os
import pickle
from collections import OrderedDict

import numpy as np
import pytest

import gpugrad
from gpugrad import nn, optim
from gpugrad.serialization import FORMAT, SerializationError


def round_trip(obj, **kw):
    buf = io.BytesIO()
    gpugrad.save(obj, buf)
    buf.seek(0)
    return gpugrad.load(buf, **kw)


def test_nested_structures_come_back_with_their_types():
    t = gpugrad.arange(6.0).reshape(2, 3)
    obj = OrderedDict(model=OrderedDict(w=t), state={0: {"step": 3, "buf": np.ones(2, np.float32)}, 1: {}},
                      groups=[{"lr": 0.1, "betas": (0.9, 0.999), "params": [0, 1], "foreach": None}],
                      flags=[True, False], name="run", nan=float("nan"), big=2**70, scalar=np.float32(2.5))
    back = round_trip(obj)
    assert type(back) is OrderedDict and list(back) == list(obj) and type(back["model"]) is OrderedDict
    assert isinstance(back["model"]["w"], gpugrad.Tensor) and back["model"]["w"].tolist() == t.tolist()
    assert list(back["state"]) == [0, 1] and back["state"][0]["step"] == 3 and back["state"][1] == {}
    buf = back["state"][0]["buf"]
    assert type(buf) is np.ndarray and buf.dtype == np.float32 and buf.tolist() == [1.0, 1.0]
    assert back["groups"] == obj["groups"] and type(back["groups"][0]["betas"]) is tuple
    assert back["flags"] == [True, False] and back["name"] == "run" and np.isnan(back["nan"])
    assert back["big"] == 2**70 and type(back["scalar"]) is np.float32 and back["scalar"] == 2.5


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "int32", "int64", "uint8", "bool"])
def test_every_dtype_and_shape_round_trips_exactly(dtype):
    rng = np.random.default_rng(0)
    for shape in [(), (0,), (3,), (2, 0, 3), (4, 5)]:
        a = (rng.standard_normal(shape) * 50).astype(dtype)
        back = round_trip(gpugrad.tensor(a))
        assert back.dtype == a.dtype and tuple(back.shape) == shape
        np.testing.assert_array_equal(back.numpy(), a)


def test_views_are_saved_as_their_values():
    base = gpugrad.arange(12.0).reshape(3, 4)
    for view in (base.t(), base[:, 1], base[::2, ::3]):
        assert round_trip(view).tolist() == view.tolist()


def test_identity_requires_grad_and_parameters_are_kept():
    w = nn.Parameter(gpugrad.ones(2))
    x = gpugrad.ones(3, requires_grad=True)
    back = round_trip({"w": w, "again": w, "x": x, "c": x.detach()})
    assert back["w"] is back["again"] and isinstance(back["w"], nn.Parameter) and back["w"].requires_grad
    assert back["x"].requires_grad and back["x"].is_leaf and not back["c"].requires_grad


def test_a_model_and_optimizer_checkpoint_resumes_bit_identically(tmp_path):
    def make():
        gpugrad.manual_seed(0)
        model = nn.MLP([4, 8, 3])
        return model, optim.AdamW(model.parameters(), lr=1e-2, amsgrad=True)

    x = gpugrad.tensor(np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32))

    def train(model, opt, n):
        for _ in range(n):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()

    model, opt = make()
    train(model, opt, 6)
    want = [p.detach().numpy().copy() for p in model.parameters()]
    model, opt = make()
    train(model, opt, 3)
    gpugrad.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3}, tmp_path / "ckpt.pt")
    ckpt = gpugrad.load(tmp_path / "ckpt.pt")
    model2, opt2 = make()
    model2.load_state_dict(ckpt["model"])
    opt2.load_state_dict(ckpt["optimizer"])
    train(model2, opt2, 3)
    assert ckpt["epoch"] == 3
    for a, p in zip(want, model2.parameters()):
        np.testing.assert_array_equal(p.detach().numpy(), a)


def test_the_file_is_safetensors_with_a_json_manifest(tmp_path):
    from safetensors import safe_open
    from safetensors.numpy import load_file

    path = tmp_path / "t.pt"
    t = gpugrad.arange(3.0)
    gpugrad.save({"a": t, "b": [t, 1]}, path)
    assert list(load_file(path)) == ["0"]  # one array: t, saved once
    with safe_open(path, framework="np") as f:
        meta = f.metadata()
    assert meta["format"] == FORMAT
    tree = json.loads(meta["manifest"])
    assert tree["dict"][0][0] == "a" and tree["dict"][0][1]["tensor"] == "0" and tree["dict"][1][1]["list"][1] == 1


def test_save_replaces_a_file_atomically(tmp_path):
    path = tmp_path / "ckpt.pt"
    gpugrad.save({"v": 1}, path)
    with pytest.raises(TypeError):
        gpugrad.save({"v": lambda: 0}, path)  # fails before writing: the old file stays
    assert gpugrad.load(path) == {"v": 1}
    assert os.listdir(tmp_path) == ["ckpt.pt"]  # no temporary left behind


@pytest.mark.parametrize("obj, what", [
    ({"f": lambda x: x}, "function"), ({"s": {1, 2}}, "builtins.set"), ([object()], "builtins.object"),
    ({"a": np.array([object()], dtype=object)}, "object array"), ({"k": {"deep": 1}.items()}, "dict_items"),
])
def test_objects_that_need_pickle_are_refused_by_name(obj, what):
    with pytest.raises(TypeError, match=what):
        gpugrad.save(obj, io.BytesIO())


def test_keys_of_any_saved_kind_come_back():
    obj = {1: "a", 2.5: "b", None: "c", True: "d", (1, "x"): "e", "s": "f"}
    assert round_trip(obj) == obj


def test_tuple_keys_are_refused_on_load_if_crafted():
    """Keys are JSON scalars; a crafted manifest with a list key is an error, not an unhashable crash."""
    buf = io.BytesIO()
    gpugrad.save({"k": 1}, buf)
    crafted = _with_manifest(buf.getvalue(), {"dict": [[{"list": [1]}, 1]], "ordered": False})
    with pytest.raises(SerializationError, match="not a file written by gpugrad.save"):
        gpugrad.load(io.BytesIO(crafted))


# ---- files that are not gpugrad saves, and files crafted to run code ------------------------------------------------

class Boom:
    def __reduce__(self):  # what a malicious pickle does: call os.system (here: create a marker file) on load
        return (os.system, (f"touch {MARKER}",))


MARKER = "/tmp/gpugrad-serialization-pwned"


def _with_manifest(data, tree, arrays=None):
    from safetensors.numpy import load, save

    manifest = tree if isinstance(tree, str) else json.dumps(tree)
    return save(arrays if arrays is not None else load(data), metadata={"format": FORMAT, "manifest": manifest})


@pytest.mark.parametrize("make", [
    lambda: pickle.dumps({"x": Boom()}),  # a pickle: torch.save's format, the classic code-execution vector
    lambda: b"",
    lambda: b"not a checkpoint at all",
    lambda: (10**9).to_bytes(8, "little") + b"{}",  # a header length past the file
    lambda: (2).to_bytes(8, "little") + b"{}",  # a valid safetensors file without metadata
    lambda: _with_manifest(b"", {"tensor": "7"}, arrays={}),  # names an array the file does not hold
    lambda: _with_manifest(b"", {"eval": "__import__('os').system('touch " + MARKER + "')"}, arrays={}),
    lambda: _with_manifest(b"", [[["deep"]]] * 3, arrays={}),
    lambda: _with_manifest(b"", '{"list": ' * 5000 + "[]" + "}" * 5000, arrays={}),  # past the recursion limit
], ids=["pickle", "empty", "text", "huge-header", "no-metadata", "missing-array", "unknown-entry", "bad-node", "deep"])
def test_a_file_that_is_not_a_gpugrad_save_is_a_clear_error_and_runs_nothing(tmp_path, make):
    if os.path.exists(MARKER):
        os.remove(MARKER)
    data = make()
    path = tmp_path / "evil.pt"
    path.write_bytes(data)
    with pytest.raises(SerializationError, match=f"{path} is not a file written by gpugrad.save"):
        gpugrad.load(path)
    assert not os.path.exists(MARKER)


def test_a_plain_safetensors_file_is_named_as_such(tmp_path):
    from safetensors.numpy import save_file

    save_file({"w": np.ones(2, np.float32)}, tmp_path / "w.safetensors")
    with pytest.raises(SerializationError, match="safetensors.numpy.load_file"):
        gpugrad.load(tmp_path / "w.safetensors")


# ---- devices --------------------------------------------------------------------------------------------------------

def test_map_location_forms_on_the_cpu():
    t = gpugrad.ones(2)
    for where in (None, "cpu", gpugrad.device("cpu"), {"cpu": "cpu"}):
        back = round_trip({"t": t}, map_location=where)["t"]
        assert str(back.device) == "cpu" and back.tolist() == [1.0, 1.0]
    with pytest.raises(TypeError, match="map_location"):
        round_trip(t, map_location=lambda storage, loc: storage)


def test_a_file_saved_on_cuda_asks_for_map_location_without_cuda(monkeypatch):
    from gpugrad import serialization

    buf = io.BytesIO()
    gpugrad.save({"t": gpugrad.ones(2)}, buf)
    data = buf.getvalue()
    from safetensors.numpy import load

    tree = {"dict": [["t", {"tensor": "0", "device": "cuda:3", "requires_grad": False, "parameter": False}]],
            "ordered": False}
    crafted = _with_manifest(data, tree, arrays=load(data))
    if not _cuda_index_ok(3):
        with pytest.raises(RuntimeError, match="map_location='cpu'"):
            gpugrad.load(io.BytesIO(crafted))
    back = gpugrad.load(io.BytesIO(crafted), map_location="cpu")
    assert str(back["t"].device) == "cpu"
    assert serialization.load(io.BytesIO(crafted), map_location={"cuda:3": "cpu"})["t"].tolist() == [1.0, 1.0]


def _cuda_index_ok(i):
    try:
        gpugrad.zeros(1, device=f"cuda:{i}")
        return True
    except Exception:  # noqa: BLE001
        return False


@pytest.mark.gpu
def test_cuda_tensors_and_optimizer_state_round_trip_through_a_file():
    p = nn.Parameter(gpugrad.arange(4.0, device="cuda"))
    opt = optim.Adam([p], lr=0.1)
    p.grad = gpugrad.ones(4, device="cuda")
    opt.step()
    back = round_trip({"p": p, "opt": opt.state_dict()})
    assert back["p"].is_cuda and isinstance(back["p"], nn.Parameter)
    assert back["opt"]["state"][0]["exp_avg"].is_cuda and not back["opt"]["state"][0]["step"].is_cuda
    on_cpu = round_trip({"p": p}, map_location="cpu")["p"]
    assert not on_cpu.is_cuda and on_cpu.tolist() == p.detach().cpu().tolist()
    q = nn.Parameter(gpugrad.zeros(4, device="cuda"))
    opt2 = optim.Adam([q], lr=0.1)
    opt2.load_state_dict(round_trip(opt.state_dict(), map_location="cpu"))  # loaded onto q's device again
    assert opt2.state[q]["exp_avg"].__class__.__module__.split(".")[0] != "numpy"
