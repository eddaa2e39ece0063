"""One rank of a multi-process test (tests/distributed/test_distributed_mpi.py starts it with ``mpiexec -n N``).

``python -m tests.distributed.worker SCENARIO OUT_DIR [args]``: each rank writes what it saw to ``OUT_DIR/<rank>.npz``
(arrays) or ``.json``; the test checks those against NumPy / a single process. Shared pieces (data, model) are
importable so the test builds its single-process oracle from the same definitions.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

B = 6  # rows per rank per step
STEPS = 20


def data(world, steps=STEPS):
    """(x (steps, world * B, 5), y (steps, world * B)): the concatenated batches, the same on every rank."""
    rng = np.random.default_rng(42)
    return rng.standard_normal((steps, world * B, 5)), rng.integers(0, 3, (steps, world * B))


def make_model(seed=0, hidden=16):
    import gpugrad
    from gpugrad import nn

    gpugrad.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                         nn.Linear(hidden, 3)).double()


OPTIMIZERS = {"sgd": lambda p: __import__("gpugrad").optim.SGD(p, lr=0.1, momentum=0.9),
              "adam": lambda p: __import__("gpugrad").optim.Adam(p, lr=0.01)}


def train(model, opt, x, y, rows, no_sync_halves=False, device="cpu"):
    """STEPS steps on ``rows`` of each batch (a slice); with ``no_sync_halves`` two half-batch backwards per step,
    the first inside model.no_sync()."""
    import gpugrad
    import gpugrad.nn.functional as F

    for s in range(len(x)):
        xs, ys = gpugrad.tensor(x[s][rows], device=device), gpugrad.tensor(y[s][rows], device=device)
        opt.zero_grad(set_to_none=s % 2 == 0)  # both ways: a fresh .grad is copied into its bucket, a kept one is it
        if no_sync_halves:
            h = len(ys) // 2
            with model.no_sync():
                (F.cross_entropy(model(xs[:h]), ys[:h]) * 0.5).backward()
            (F.cross_entropy(model(xs[h:]), ys[h:]) * 0.5).backward()
        else:
            F.cross_entropy(model(xs), ys).backward()
        opt.step()


def ddp(out, device="cpu"):
    """DDP over the ranks, each on its shard: final parameters per optimizer, the order of events in one backward,
    gradient accumulation with no_sync, and the errors for unused parameters and mismatched models."""
    import gpugrad
    import gpugrad.distributed as dist
    import gpugrad.nn.functional as F
    from gpugrad import nn

    dist.init_process_group("nccl" if device == "cuda" else "mpi", timeout=60)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = str(dist.group.get_group().nccl.device) if device == "cuda" else device
    x, y = data(world)
    mine = slice(rank * B, (rank + 1) * B)
    result = {}
    for name, make_opt in OPTIMIZERS.items():
        # each rank starts from other weights: construction must broadcast rank 0's
        model = nn.parallel.DistributedDataParallel(make_model(seed=rank).to(device), bucket_cap_mb=0.0005)
        train(model, make_opt(model.parameters()), x, y, mine, device=device)
        result[name] = [p.detach().cpu().numpy().tolist() for p in model.module.parameters()]
        result["buckets"] = len(model._buckets)
    model = nn.parallel.DistributedDataParallel(make_model(seed=rank).to(device), bucket_cap_mb=0.0005)
    train(model, OPTIMIZERS["sgd"](model.parameters()), x, y, mine, no_sync_halves=True, device=device)
    result["no_sync"] = [p.detach().cpu().numpy().tolist() for p in model.module.parameters()]

    events = []  # the order of bucket starts and of the first layer's backward in one backward pass
    real = dist.all_reduce

    def spy(t, *a, **k):
        work = real(t, *a, **k)
        events.append(f"all_reduce {t.numel()} done={work.is_completed()}")
        return work

    class Probe(nn.Module):  # its hook runs when the first Linear's output gradient is ready, just before its node
        def forward(self, h):
            h.register_hook(lambda g: events.append("first layer backward"))
            return h

    net = nn.Sequential(nn.Linear(5, 64), Probe(), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 3))
    model = nn.parallel.DistributedDataParallel(net.double().to(device), bucket_cap_mb=0.01)
    dist.all_reduce = spy
    F.cross_entropy(model(gpugrad.tensor(x[0][mine], device=device)),
                    gpugrad.tensor(y[0][mine], device=device)).backward()
    dist.all_reduce = real
    result["events"] = events

    class Unused(nn.Module):
        def __init__(self):
            super().__init__()
            self.used, self.spare = nn.Linear(5, 3), nn.Linear(5, 3)  # spare: registered last, never called

        def forward(self, h):
            return self.used(h)

    model = nn.parallel.DistributedDataParallel(Unused().double().to(device))
    try:
        model(gpugrad.tensor(x[0][mine], device=device)).sum().backward()
    except RuntimeError as e:
        result["unused_error"] = str(e)
    model = nn.parallel.DistributedDataParallel(Unused().double().to(device), find_unused_parameters=True)
    model(gpugrad.tensor(x[0][mine], device=device)).sum().backward()
    result["unused_ok"] = [p.grad is not None for p in model.parameters()]
    try:
        nn.parallel.DistributedDataParallel(make_model(hidden=16 + rank).to(device))
    except RuntimeError as e:
        result["mismatch_error"] = str(e)
    Path(out, f"{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def collectives(out):
    """Each rank's inputs and what every collective returned, for the test to check against NumPy."""
    import gpugrad
    import gpugrad.distributed as dist

    dist.init_process_group("mpi", timeout=60)
    rank, world = dist.get_rank(), dist.get_world_size()
    rng = np.random.default_rng(rank)
    x = rng.standard_normal((3, 4))
    got = {"x": x, "ints": np.arange(6, dtype=np.int64) * (rank + 1)}
    for op in ("SUM", "AVG", "PRODUCT", "MIN", "MAX"):
        t = gpugrad.tensor(x.copy())
        dist.all_reduce(t, getattr(dist.ReduceOp, op))
        got[op] = t.numpy()
    t = gpugrad.tensor(x.copy()).T  # a strided view: reduced through a contiguous copy, written back
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    got["SUM_strided"], got["async_done"] = t.numpy(), work.is_completed()
    t = gpugrad.tensor(got["ints"].copy())
    dist.all_reduce(t)
    got["int_SUM"] = t.numpy()
    t = gpugrad.tensor(x.astype(np.float32))
    dist.all_reduce(t, dist.ReduceOp.MAX)
    got["f32_MAX"] = t.numpy()
    t = gpugrad.tensor(x.copy())
    dist.broadcast(t, world - 1)
    got["broadcast"] = t.numpy()
    outs = [gpugrad.zeros(3, 4, dtype=gpugrad.float64) for _ in range(world)]
    dist.all_gather(outs, gpugrad.tensor(x))
    got["all_gather"] = np.stack([o.numpy() for o in outs])
    pieces = rng.standard_normal((world, 2, 3))
    got["pieces"] = pieces
    for op in ("SUM", "AVG"):
        o = gpugrad.zeros(2, 3, dtype=gpugrad.float64)
        dist.reduce_scatter(o, [gpugrad.tensor(p) for p in pieces], getattr(dist.ReduceOp, op))
        got[f"reduce_scatter_{op}"] = o.numpy()
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank})
    got["objects"] = np.array([o["rank"] for o in objs])
    got["local_rank"] = np.array(dist.get_node_local_rank())
    dist.barrier()
    dist.destroy_process_group()
    np.savez(Path(out) / f"{rank}.npz", **got)


def fail(out, mode, timeout):
    """Train with DDP; rank 1 fails at step 3 (``raise``: an exception; ``exit``: os._exit, no cleanup)."""
    import gpugrad
    import gpugrad.distributed as dist
    import gpugrad.nn.functional as F
    from gpugrad import nn

    dist.init_process_group("mpi", timeout=float(timeout))
    model = nn.parallel.DistributedDataParallel(make_model())
    for step in range(20):
        if step == 3 and dist.get_rank() == 1:
            if mode == "raise":
                raise ValueError("rank 1 broke on purpose")
            os._exit(3) if mode == "exit" else os.kill(os.getpid(), 9)
        F.cross_entropy(model(gpugrad.randn(4, 5, dtype=gpugrad.float64)), gpugrad.tensor([0, 1, 2, 0])).backward()
    Path(out, f"{dist.get_rank()}.json").write_text(json.dumps("finished"))


def nccl(out):
    """The "nccl" group on this rank's GPU (the simulated one in CI, world size 1): collectives and DDP's buckets,
    with the launches and host syncs the simulator counts."""
    import gpugrad
    import gpugrad.distributed as dist
    import gpugrad.nn.functional as F
    from gpugrad import nn

    sim = os.environ.get("GPUGRAD_CUDA_SIM")
    dist.init_process_group("nccl", timeout=60)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = str(dist.group.get_group().nccl.device)
    x = np.arange(8.0).reshape(2, 4) + rank
    got = {"device": device}
    for op in ("SUM", "AVG", "MAX"):
        t = gpugrad.tensor(x, device=device)
        dist.all_reduce(t, getattr(dist.ReduceOp, op))
        got[op] = t.cpu().numpy().tolist()
    outs = [gpugrad.zeros(2, 4, dtype=gpugrad.float64, device=device) for _ in range(world)]
    dist.all_gather(outs, gpugrad.tensor(x, device=device))
    got["all_gather"] = [o.cpu().numpy().tolist() for o in outs]
    model = nn.parallel.DistributedDataParallel(make_model(hidden=64).to(device), bucket_cap_mb=0.01)
    xs, ys = gpugrad.tensor(data(1)[0][0], device=device), gpugrad.tensor(data(1)[1][0], device=device)
    counters = None
    if sim:
        from gpugrad.testing import cuda_sim

        cuda_sim.reset_counters()
        with cuda_sim.trace() as events:
            F.cross_entropy(model(xs), ys).backward()
        counters = cuda_sim.counters()
        got["nccl_launches"] = sum(1 for e, what in events if e == "launch" and what.startswith("nccl"))
        got["syncs"] = counters["syncs"]
    else:
        F.cross_entropy(model(xs), ys).backward()
    got["buckets"] = len(model._buckets)
    got["grads"] = [p.grad.cpu().numpy().tolist() for p in model.module.parameters()]
    ref = make_model(hidden=64)
    F.cross_entropy(ref(gpugrad.tensor(data(1)[0][0])), gpugrad.tensor(data(1)[1][0])).backward()
    got["ref_grads"] = [p.grad.cpu().numpy().tolist() for p in ref.parameters()]
    dist.destroy_process_group()
    Path(out, f"{rank}.json").write_text(json.dumps(got))


if __name__ == "__main__":
    scenario, out, *rest = sys.argv[1:]
    {"collectives": collectives, "ddp": ddp, "fail": fail, "nccl": nccl}[scenario](out, *rest)
