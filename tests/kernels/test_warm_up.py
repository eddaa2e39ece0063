"""Compiling only what is launched: ``kernels.instantiations`` names every raw kernel a launcher launches (held to
what the launchers really ask their runtime for), and ``CupyRuntime`` builds one RawModule per instantiation, at its
first launch or in a thread pool (``kernels.warm_up``)."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from gpugrad.backend import kernels
from gpugrad.backend.kernels import CupyRuntime
from tests.kernel_cases import CASES, DTYPES, rng_for


class AskedFor:
    """A runtime that records the raw kernels a launcher asks for and launches nothing (NumPy buffers)."""

    xp = np

    def __init__(self):
        self.asked = set()

    def raw_kernel(self, family, name_expr):
        self.asked.add((family, name_expr))
        return lambda grid, block, args, shared_mem=0: None

    def elementwise(self, *spec):
        raise AssertionError(f"contiguous inputs must take the raw kernels, not the ElementwiseKernel {spec[-1]}")

    def empty(self, shape, dtype):
        return np.zeros(shape, dtype)

    zeros = empty

    def ascontiguousarray(self, a):
        return np.ascontiguousarray(a)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_instantiations_cover_what_each_launcher_launches(case, dtype):
    args, kwargs = case.make(rng_for(case, dtype, case.shapes[0]), np.dtype(dtype).type, case.shapes[0])
    rt = AskedFor()
    with kernels.use_runtime(rt):
        getattr(kernels, case.name)(np, *args, **kwargs)
    listed = set(kernels.instantiations([case.name], [np.dtype(dtype).name]))
    assert rt.asked <= listed, f"{case.id}: launched {sorted(rt.asked - listed)}, which instantiations() omits"
    this, other = (np.dtype(d).name for d in (dtype, np.float64 if dtype == np.float32 else np.float32))
    wrong_type = set(kernels.instantiations([case.name], [other])) - set(kernels.instantiations([case.name], [this]))
    assert not rt.asked & wrong_type, f"{case.id}: {this} arrays launched the other type's kernels"


def test_instantiations_of_every_launcher_and_dtype_are_every_name_expression():
    every = {(f, e) for f, names in kernels.NAME_EXPRESSIONS.items() for e in names}
    assert set(kernels.instantiations(dtypes=("float32", "float64", "bfloat16", "float16"))) == every
    assert kernels.instantiations(["relu_fwd"], ["bfloat16"]) == [("elementwise", "pointwise<ActFwd<float, pw::relu>>"),
                                                                  ("elementwise", "pointwise<ActFwd<gg::bf16, pw::relu>>")]
    assert kernels.instantiations(["adam_multi_update_"]) == [("optim", "adam_multi_update_<float>")]
    assert kernels.instantiations(["relu_fwd"], ["float16"]) == [("elementwise", "pointwise<ActFwd<float, pw::relu>>"),
                                                                 ("elementwise", "pointwise<ActFwd<gg::f16, pw::relu>>")]
    assert kernels.instantiations(["softmax_fwd"], ["float16"]) == [("reduce", "softmax_fwd<float>"),
                                                                    ("reduce", "softmax_fwd<gg::f16>")]
    with pytest.raises(ValueError, match="'relu' is not a kernel launcher"):
        kernels.instantiations(["relu"])
    with pytest.raises(ValueError, match="dtypes must be among"):
        kernels.instantiations(["relu_fwd"], ["int32"])


# ---- CupyRuntime on the simulated device (or a GPU) ---------------------------------------------------------------
@pytest.fixture
def modules(monkeypatch):
    """A fresh CupyRuntime whose CuPy records every RawModule built: [(name_expressions, thread name)]."""
    rt = CupyRuntime()
    built, real = [], rt.cupy.RawModule

    def recording(**kw):
        built.append((kw["name_expressions"], threading.current_thread().name))
        return real(**kw)

    monkeypatch.setattr(rt.cupy, "RawModule", recording)
    return rt, built


@pytest.mark.gpu
def test_a_launch_compiles_one_instantiation_not_its_family(modules):
    rt, built = modules
    fn = rt.raw_kernel("reduce", "sum_rows<float>")
    assert built == [(("sum_rows<float>",), threading.current_thread().name)]
    assert rt.raw_kernel("reduce", "sum_rows<float>") is fn and len(built) == 1  # memoized per device
    with pytest.raises(KeyError, match=r"reduce:sum_rows<half> is not in kernels.NAME_EXPRESSIONS\['reduce'\]"):
        rt.raw_kernel("reduce", "sum_rows<half>")


@pytest.mark.gpu
def test_warm_builds_the_missing_instantiations_in_worker_threads(modules):
    rt, built = modules
    first = rt.raw_kernel("check", "check_finite<float>")
    pairs = [("check", "check_finite<float>"), ("reduce", "sum_rows<float>"), ("reduce", "sum_rows<double>"),
             ("reduce", "sum_rows<float>")]
    assert rt.warm(pairs, workers=2) == 2  # each missing one once; check_finite<float> is built already
    assert sorted(e for e, _ in built[1:]) == [("sum_rows<double>",), ("sum_rows<float>",)]
    assert all(t != threading.current_thread().name for _, t in built[1:])
    assert rt.warm(pairs) == 0 and rt.raw_kernel("check", "check_finite<float>") is first
    # the warmed kernels run: sum over the rows of a (3, 2) array
    g = rt.cupy.asarray(np.arange(6, dtype=np.float64).reshape(3, 2))
    out = rt.cupy.zeros((1, 2), np.float64)
    rt.raw_kernel("reduce", "sum_rows<double>")((1, 1), (32, 8), (g, out, 3, 2, 3))
    np.testing.assert_array_equal(rt.cupy.asnumpy(out), [[6.0, 9.0]])
    assert len(built) == 3


@pytest.mark.gpu
def test_warm_up_compiles_what_a_launcher_needs_before_its_first_launch(monkeypatch):
    rt = CupyRuntime()
    monkeypatch.setattr(kernels.runtimes, "_default_runtime", rt)
    assert kernels.warm_up(["sum_rows"], ["float64"]) == 1
    built = []
    monkeypatch.setattr(rt.cupy, "RawModule", lambda **kw: built.append(kw) or pytest.fail("compiled again"))
    g = rt.cupy.asarray(np.arange(6, dtype=np.float64).reshape(3, 2))
    np.testing.assert_array_equal(rt.cupy.asnumpy(kernels.sum_rows(rt.cupy, g)), [6.0, 9.0])
    assert built == []
