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
block nothing may make the host wait (``.item()``, printing), copy from pageable host memory, or allocate outside
the pool: each raises an error naming the op. Run a few steps eagerly before capturing, as with PyTorch, so that
lazily made state (optimizer buffers, gradient buffers, compiled kernels) exists before capture.
"""
from __future__ import annotations

CAPTURING: list = []  # the graph() contexts being captured (innermost last); ops name themselves in errors


def capture_error(what: str, error: Exception) -> RuntimeError:
    return RuntimeError(
        f"{what} cannot be captured into a CUDA graph: {error}. Inside gpugrad.cuda.graph() every op must queue "
        "device work only: read values (.item(), printing, .cpu()) after replay(), copy new inputs into the static "
        "tensors with copy_() before replay(), and run a few steps before capturing so optimizer and gradient "
        "buffers exist")


def _cupy():
    from gpugrad.backend.cuda import cupy_module

    return cupy_module()


class CUDAGraph:
    """A captured CUDA graph (torch.cuda.CUDAGraph): filled by :class:`graph`, run by :meth:`replay`."""

    def __init__(self):
        self._graph = self._pool = self._device = None

    def replay(self):
        if self._graph is None:
            raise RuntimeError("CUDAGraph.replay(): nothing has been captured; capture with "
                               "`with gpugrad.cuda.graph(g): ...` first")
        from gpugrad.backend import deferred

        cupy = _cupy()
        with cupy.cuda.Device(self._device):
            self._graph.launch(stream=cupy.cuda.get_current_stream())
        deferred.rearm(self._device)  # range checks inside the graph ran again without their Python

    def reset(self):
        """Drop the graph and its memory pool (tensors made during capture must not be used afterwards)."""
        self._graph = self._pool = None

    def pool(self):
        """The graph's private memory pool: pass it to another ``graph(..., pool=)`` to share memory."""
        return self._pool


class graph:
    """``with gpugrad.cuda.graph(g, pool=None, stream=None):`` captures the block into ``g`` (torch.cuda.graph)."""

    def __init__(self, cuda_graph: CUDAGraph, pool=None, stream=None):
        if not isinstance(cuda_graph, CUDAGraph):
            raise TypeError(f"graph(): expected a gpugrad.cuda.CUDAGraph, got {type(cuda_graph).__name__}")
        self.cuda_graph, self.pool, self.stream = cuda_graph, pool, stream

    def __enter__(self):
        cupy = _cupy()
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
        finally:
            self._leave()
        if exc_type is None:
            self.cuda_graph._graph, self.cuda_graph._pool = captured, self.pool
        return False
