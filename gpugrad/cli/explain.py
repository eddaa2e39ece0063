"""``gpugrad explain EXPR --set a=2 --set b=-3``: evaluate an expression over named tensors, backpropagate, and print
``gpugrad.autograd.explain``'s report (``--draw graph.svg`` draws it too).

EXPR is no Python: cli/expression.py evaluates it, node by node, over the named tensors (every one requires grad),
with numbers, + - * / ** @, gpugrad's math functions (``exp(a)``, ``sigmoid(a)``, ``softmax(a, 0)``, ...), tensor
methods (``a.relu()``, ``a.sum(0)``), indexing and ``.T``; anything else is refused, naming the construct.
"""
from __future__ import annotations

import argparse
import sys
import textwrap
import warnings

import numpy as np

import gpugrad
from gpugrad.autograd import draw, explain, record
from gpugrad.cli.checkpoint import output_path
from gpugrad.cli.expression import FUNCTIONS, MAX_CHARS, MAX_DEPTH, METHODS, ExpressionError, evaluate, parse_value

EXIT_ERROR, EXIT_EXPRESSION = 1, 2  # an output that cannot be written; a bad EXPR or input


def _assignment(text):
    name, sep, value = text.partition("=")
    if not sep or not name.strip().isidentifier():
        raise argparse.ArgumentTypeError(f"{text[:60]!r}: expected NAME=VALUE, e.g. a=2 or x=[1,2,3]")
    try:
        return name.strip(), parse_value(value)
    except ExpressionError as e:
        raise argparse.ArgumentTypeError(f"{name.strip()}=...: {e}") from None


def add_arguments(p):
    p.add_argument("expr", metavar="EXPR", help="an expression over the --set inputs, e.g. 'a*b + c' or "
                   "'sigmoid(x).sum()' (not Python: see below)")
    p.add_argument("--set", dest="values", action="append", type=_assignment, default=[], metavar="NAME=VALUE",
                   help="a named input (a number or a list), requiring grad; repeat for each input")
    p.add_argument("--draw", metavar="FILE", help="also draw the graph (.svg, .png or .dot; Graphviz)")
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32", help="inputs' dtype (default: "
                   "float32)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = "\n".join([
        *textwrap.wrap("EXPR is not Python. It may use the --set inputs, numbers, + - * / ** @, unary - and +, "
                       "indexing and slicing, .T, .mT, .values and .indices, and calls of these functions (also "
                       "spelt gpugrad.NAME):", 100),
        textwrap.fill(" ".join(sorted(FUNCTIONS)), 100, initial_indent="  ", subsequent_indent="  "),
        "and of these tensor methods:",
        textwrap.fill(" ".join(sorted(METHODS)), 100, initial_indent="  ", subsequent_indent="  "),
        f"At most {MAX_CHARS:,} characters, nested at most {MAX_DEPTH} levels deep."])


def run(args) -> int:
    try:
        if args.draw:  # fail before the work, not after it
            output_path(args.draw, "--draw")
        tensors = {k: gpugrad.tensor(np.asarray(v, dtype=args.dtype), device=args.device, requires_grad=True)
                   for k, v in args.values}
        with record():  # keeps every intermediate value for the report
            out = evaluate(args.expr, tensors)
            if not isinstance(out, gpugrad.Tensor) or not out.requires_grad:
                raise TypeError(f"the expression gave {type(out).__name__}, not a tensor that depends on the inputs")
            out = out if out.numel() == 1 else out.sum()  # backward needs a scalar: sum() first, as the report says
    except OSError as e:  # the --draw path
        print(f"gpugrad explain: {e}", file=sys.stderr)
        return EXIT_ERROR
    except ExpressionError as e:
        print(f"gpugrad explain: {e}", file=sys.stderr)
        return EXIT_EXPRESSION
    except Exception as e:  # noqa: BLE001 - any error the math raises (shapes, dtypes) is reported in one line
        print(f"gpugrad explain: {type(e).__name__}: {' '.join(str(e).split())}", file=sys.stderr)
        return EXIT_EXPRESSION
    report = explain(out, names=tensors)
    print(report)
    out.backward()
    print("backward(): " + ", ".join(f"{k}.grad = {v.grad.tolist()}" for k, v in tensors.items()
                                     if v.grad is not None))
    if args.draw:
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                path = draw(out, args.draw, report=report)
        except (OSError, ImportError) as e:  # e.g. the disk filled up; graphviz missing
            print(f"gpugrad explain: --draw {args.draw}: {type(e).__name__}: {e}", file=sys.stderr)
            return EXIT_ERROR
        for w in caught:
            print(f"gpugrad explain: {w.message}", file=sys.stderr)
        print(f"graph written to {path}")
    return 0
