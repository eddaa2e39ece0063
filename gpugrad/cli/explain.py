"""``gpugrad explain EXPR --set a=2 --set b=-3``: evaluate an expression over named tensors, backpropagate, and print
``gpugrad.autograd.explain``'s report (``--draw graph.svg`` draws it too).

The expression is Python evaluated with no builtins, over the named tensors (every one requires grad), gpugrad's
public functions (``exp(a)``, ``sigmoid(a)``, ``tanh``, ``softmax``, ...; tensor methods work too: ``a.relu()``) and
``gpugrad`` itself.  That is no sandbox: run only expressions you would type into Python.
"""
from __future__ import annotations

import argparse
import ast
import sys
import warnings

import numpy as np

import gpugrad
import gpugrad.nn.functional as F
from gpugrad import Tensor
from gpugrad.autograd import draw, explain, record


def _assignment(text):
    name, sep, value = text.partition("=")
    if not sep or not name.strip().isidentifier():
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=VALUE, e.g. a=2 or x=[1,2,3]")
    try:
        return name.strip(), ast.literal_eval(value.strip())
    except (ValueError, SyntaxError):
        raise argparse.ArgumentTypeError(f"{text!r}: the value must be a number or a (nested) list of numbers"
                                         ) from None


def add_arguments(p):
    p.add_argument("expr", metavar="EXPR", help="a Python expression, e.g. 'a*b + c' or 'sigmoid(x).sum()'")
    p.add_argument("--set", dest="values", action="append", type=_assignment, default=[], metavar="NAME=VALUE",
                   help="a named input (a number or a list), requiring grad; repeat for each input")
    p.add_argument("--draw", metavar="FILE", help="also draw the graph (.svg, .png or .dot; Graphviz)")
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32", help="inputs' dtype (default: "
                   "float32)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")


def namespace(tensors):
    """What EXPR may name: gpugrad's public functions and tensor methods as functions, then the inputs."""
    env = {k: getattr(Tensor, k) for k in dir(Tensor) if not k.startswith("_") and callable(getattr(Tensor, k))}
    env.update({k: v for m in (F, gpugrad) for k, v in vars(m).items() if not k.startswith("_") and callable(v)})
    return {**env, "gpugrad": gpugrad, **tensors}


def run(args) -> int:
    try:
        tensors = {k: gpugrad.tensor(np.asarray(v, dtype=args.dtype), device=args.device, requires_grad=True)
                   for k, v in args.values}
        with record():  # keeps every intermediate value for the report
            out = eval(compile(args.expr, "<EXPR>", "eval"), {"__builtins__": {}}, namespace(tensors))  # noqa: S307
            if not isinstance(out, gpugrad.Tensor) or not out.requires_grad:
                raise TypeError(f"the expression gave {type(out).__name__}, not a tensor that depends on the inputs")
            out = out if out.numel() == 1 else out.sum()  # backward needs a scalar: sum() first, as the report says
    except Exception as e:  # noqa: BLE001 - any error in the user's expression is reported in one line
        print(f"gpugrad explain: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    report = explain(out, names=tensors)
    print(report)
    out.backward()
    print("backward(): " + ", ".join(f"{k}.grad = {v.grad.tolist()}" for k, v in tensors.items()
                                     if v.grad is not None))
    if args.draw:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            path = draw(out, args.draw, report=report)
        for w in caught:
            print(f"gpugrad explain: {w.message}", file=sys.stderr)
        print(f"graph written to {path}")
    return 0
