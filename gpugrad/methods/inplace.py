"""In-place writes: ``x.add_(y)``, ``x[key] = v``, ``copy_``, ``fill_``, ``zero_``, and the machinery every generated
``<op>_`` method uses (``_inplace``): checks, the graph of the new values, the version bump, tangents."""
from __future__ import annotations

from gpugrad.core.args import basic_key, check_index_shapes, index_key, one_mask_key
from gpugrad.core.forward import inplace_result, write_tangent
from gpugrad.core.forward_state import STATE as FORWARD
from gpugrad.core.grad_mode import STATE, no_grad
from gpugrad.core.op import named
from gpugrad.core.tensor import TensorBase, as_operand, make, new, on_own_device
from gpugrad.core.views import before_write, check_fits, check_overlap, fresh, may_overlap, rebase, write_through
from gpugrad.dtypes import can_cast, scalar_type_name
from gpugrad.ops.arith import Where
from gpugrad.ops.convert import IndexPlace, Overwrite


class InplaceMethods:
    __slots__ = ()

    def _check_inplace(self, op, others=()):
        """Whether the write must be recorded (a graph is involved); refuses writes into leaves that require grad."""
        root = self._base if self._base is not None else self
        recording = STATE.enabled and (self._requires_grad or root._requires_grad
                                       or any(isinstance(o, TensorBase) and o._requires_grad for o in others))
        if recording and root.is_leaf and root._requires_grad:
            what = "a view of a leaf Variable" if root is not self else "a leaf Variable"
            raise RuntimeError(f"{what} that requires grad is being used in an in-place operation. ({op}: wrap it in "
                               "`with gpugrad.no_grad():`, e.g. for a parameter update)")
        multi = getattr(self._view_fn, "multi_output", None)
        if recording and multi is not None:  # as torch: its graph could not say which output changed
            raise RuntimeError(f"{op}: Output {multi[1]} of {multi[0]} is a view and is being modified inplace. This "
                               "view is the output of a function that returns multiple views. Such functions do not "
                               "allow the output views to be modified inplace. You should replace the inplace "
                               "operation by an out-of-place one (or .clone() the output first).")
        return recording

    @on_own_device
    def _inplace(self, op, result_fn, others=(), fits=None):
        """``self`` overwritten with ``result_fn()``, the out-of-place result computed from self and ``others`` (the
        op's other arguments: a Tensor among them that requires grad puts the write into the graph, as torch).
        ``fits``: a tensor that must broadcast to self's shape, checked before anything is computed."""
        check_overlap(self, op, others[0] if len(others) == 1 else None)
        if fits is not None:
            check_fits(self, fits, op)
        if self._check_inplace(op, others):
            if self._base is not None:
                fresh(self)
            # out of place, with a graph; then moved into our buffer (forward mode: the JVPs read the old values)
            result = result_fn() if FORWARD.level is None else inplace_result(self, result_fn)
            self._fits(op, result)
            node = result._grad_fn
            if node is not None and hasattr(node, "unshare_saved"):
                node.unshare_saved(self)  # it may have saved the buffer we are about to overwrite
            self._store(op, result)
            if self._base is None:
                rebase(self, node)
            else:
                write_through(self, result)
        else:
            with no_grad():
                result = result_fn()
            self._fits(op, result)
            self._store(op, result)
        if FORWARD.level is not None:  # the new values' tangent (a view's goes into its base's)
            write_tangent(self, result._fw_grad)
        self._version_counter[0] += 1
        return self

    def _fits(self, op, result):
        # As torch: x.op_(y) may not grow x (NumPy's copyto would drop the broadcast's leading size-1 axes).
        if result._data.shape != self._data.shape:
            raise RuntimeError(f"{op}: output with shape {list(self.shape)} doesn't match the broadcast shape "
                               f"{list(result.shape)}")

    def _store(self, op, result):
        batch = result._data
        if not isinstance(batch, self._backend.array_type):  # batched by gpugrad.func.vmap (.base: all samples)
            raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the broadcast shape "
                               f"{list(batch.base.shape)}. {op} inside vmap writes a batched result into a tensor that "
                               "is not batched: compute out of place")
        if not can_cast(result._data.dtype, self._data.dtype):  # as torch: int += float refuses
            raise RuntimeError(f"{op}: result type {result.dtype} can't be cast to the desired output type "
                               f"{self.dtype}; compute out of place, or convert the tensor first (.float())")
        before_write(self)
        self._backend.xp.copyto(self._data, result._data, casting="unsafe")

    def __iadd__(self, o): return self.add_(o)
    def __isub__(self, o): return self.sub_(o)
    def __imul__(self, o): return self.mul_(o)
    def __itruediv__(self, o): return self.div_(o)

    def zero_(self):
        return self._fill(0, "zero_")

    def fill_(self, value):
        return self._fill(value, "fill_")

    @on_own_device
    def _fill(self, value, op):
        # recorded, or a Tensor value whose tangent the new values take (forward mode): through Overwrite
        if self._check_inplace(op, (value,)) or FORWARD.level is not None and isinstance(value, TensorBase):
            # Recorded as torch does: the old values get a zero gradient that carries no graph (FillBackward2,
            # ZeroBackward0), so a create_graph pass has no edge into their history.
            name = "ZeroBackward0" if op == "zero_" else "FillBackward2"
            return self._inplace(op, lambda: Overwrite.apply(self, value, _name=name), (value,))
        before_write(self)
        self._data.fill(value)
        if FORWARD.level is not None:
            write_tangent(self, None)
        self._version_counter[0] += 1
        return self

    def copy_(self, src, non_blocking=False):
        src = as_operand(src, self)
        if not isinstance(src, TensorBase):
            src = new(src, dtype=self.dtype, device=self.device)
        if self._check_inplace("copy_", (src,)):  # torch's CopyBackwards: zeros to the old values, gy to src
            return self._inplace("copy_", lambda: Overwrite.apply(self, src.to(self.device), _name="CopyBackwards"),
                                 (src,), src)
        return self._inplace("copy_", lambda: src.to(self.device, self.dtype).expand(self.shape), (src,), src)

    def __setitem__(self, key, value):
        key = index_key(key, self)
        value = as_operand(value, self)
        if basic_key(key):  # as torch: copy_ into the view self[key] (CopySlices), so only that region is written
            region = self[key]
            while isinstance(value, TensorBase) and value.ndim > region.ndim and value.shape[0] == 1:
                value = value.squeeze(0)  # torch drops the value's leading size-1 axes
            region.copy_(value)
            return
        self._check_inplace("__setitem__", (value,))  # torch's order: a leaf's write, the index, then the dtypes
        one_value = isinstance(value, TensorBase) and value.numel() == 1 and one_mask_key(key)  # masked_fill's
        if isinstance(value, TensorBase) and not one_value and value.numel() and may_overlap(self, value):
            raise RuntimeError("unsupported operation: some elements of the input tensor and the written-to tensor "
                               "refer to a single memory location. Please clone() the tensor before performing the "
                               f"operation. (x[index] = value: the value of shape {tuple(value.shape)} is x's memory)")
        check_index_shapes(key)
        if one_value and value.dtype != self.dtype:
            value = value.to(dtype=self.dtype)  # torch's masked fill of one value: it casts (differentiably)
        if isinstance(value, TensorBase) and value.dtype != self.dtype:  # as torch: index_put does not cast
            raise RuntimeError(f"Index put requires the source and destination dtypes match, got "
                               f"{scalar_type_name(self.dtype)} for the destination and "
                               f"{scalar_type_name(value.dtype)} for the source.")
        self._inplace("__setitem__", lambda: _index_put(self, key, value), (value,))


@on_own_device
def _index_put(t, key, value):
    """Out-of-place ``t[key] = value`` as differentiable ops: keep t where not indexed, value where indexed."""
    xp = t._backend.xp
    mask = xp.zeros(t.shape, dtype=bool)
    mask[key] = True
    if isinstance(value, TensorBase):
        placed = IndexPlace.apply(value, key=key, shape=t.shape)
    else:
        buf = xp.zeros(t.shape, dtype=t.dtype)
        buf[key] = value
        placed = make(buf, t._backend)
    return named(Where.apply(placed, t, cond=mask), "IndexPutBackward0")
