"""CUDA graphs with PyTorch's API shape: capture a whole training step once, replay it with one launch.

    g = gpugrad.cuda.CUDAGraph()
    static_x.copy_(first_batch)               # inputs the graph reads live in tensors made before capture
    with gpugrad.cuda.graph(g):
        loss = step(static_x, static_y)       # recorded, not run
    for xb, yb in batches:
        static_x.copy_(xb); static_y.copy_(yb)
        g.replay()                            # every kernel of the step, one host call

Capture runs on a non-default stream (CuPy refuses the legacy default stream) with a private memory pool, so the
buffers the graph points at are never handed to anyone else; the graph keeps them until ``reset()``. Inside the
block nothing may make the host wait (``.item()``, printing) or copy host data to the device, and no state may be
made lazily: gpugrad refuses each itself, naming the op (backend/capture.py). Run a few steps eagerly before
capturing, as with PyTorch, so that lazily made state (optimizer buffers, gradient buffers, compiled kernels) exists.
"""
from __future__ import annotations

from gpugrad.backend import cuda
from gpugrad.backend.capture import CAPTURING, REPLAYS, capture_error  # noqa: F401  (ops name themselves in errors)


class CUDAGraph:
    """A captured CUDA graph (torch.cuda.CUDAGraph): filled by :class:`graph`, run by :meth:`replay`."""

    def __init__(self):
        self._graph = self._pool = self._device = None
        self._keep = []  # memory the graph uses beyond its pool's tensors (the cuBLAS workspace)

    def replay(self):
        if self._graph is None:
            raise RuntimeError("CUDAGraph.replay(): nothing has been captured; capture with "
                               "`with gpugrad.cuda.graph(g): ...` first")
        cupy = cuda.cupy_module()
        with cupy.cuda.Device(self._device):
            self._graph.launch(stream=cupy.cuda.get_current_stream())
        # NOTE: range checks inside the graph ran again without their Python: the next host read looks at them
        REPLAYS[self._device] = REPLAYS.get(self._device, 0) + 1

    def reset(self):
        """Drop the graph and its memory pool (tensors made during capture must not be used afterwards)."""
        self._graph = self._pool = None
        self._keep = []

    def pool(self):
        """The graph's private memory pool: pass it to another ``graph(..., pool=)`` to share memory."""
        return self._pool


class graph:
    """``with gpugrad.cuda.graph(g, pool=None, stream=None):`` captures the block into ``g`` (torch.cuda.graph).

    An error raised inside the block is the one that propagates: CUDA then also fails to end the capture (it was
    invalidated), and that error is attached to it as a note."""

    def __init__(self, cuda_graph: CUDAGraph, pool=None, stream=None):
        if not isinstance(cuda_graph, CUDAGraph):
            raise TypeError(f"graph(): expected a gpugrad.cuda.CUDAGraph, got {type(cuda_graph).__name__}")
        self.cuda_graph, self.pool, self.stream = cuda_graph, pool, stream
        self._kept = {}

    def keep_alive(self, key, make):
        """``make()``'s result, made once per capture and ``key``, kept alive by the graph (made inside the capture,
        so from the graph's pool)."""
        if key not in self._kept:
            self._kept[key] = make()
        return self._kept[key]

    def __enter__(self):
        cupy = cuda.cupy_module()
        device = cupy.cuda.Device()
        device.synchronize()  # work queued before the block must not end up in the graph
        self.stream = self.stream or cupy.cuda.Stream(non_blocking=True)
        self.pool = self.pool or cupy.cuda.MemoryPool()
        self._contexts = [self.stream, cupy.cuda.using_allocator(self.pool.malloc)]
        for c in self._contexts:
            c.__enter__()
        try:
            self.stream.begin_capture()
        except BaseException:
            self._leave()
            raise
        self.cuda_graph._device = device.id
        CAPTURING.append(self)
        return self

    def _leave(self):
        for c in reversed(self._contexts):
            c.__exit__(None, None, None)

    def __exit__(self, exc_type, exc, tb):
        CAPTURING.remove(self)
        try:
            captured = self.stream.end_capture()  # also after an error: the stream must stop capturing
        except Exception as end_error:
            if exc is None:
                raise
            if hasattr(exc, "add_note"):  # Python 3.11+
                exc.add_note(f"(ending the capture then failed too: {type(end_error).__name__}: {end_error})")
            return False
        finally:
            self._leave()
        if exc_type is None:
            g = self.cuda_graph
            g._graph, g._pool, g._keep = captured, self.pool, list(self._kept.values())
        return False
