"""``gpugrad explain EXPR --set name=value``: the report of ``autograd.explain`` for an expression, in-process."""
from __future__ import annotations

import re
import shutil

import pytest

from gpugrad.cli import main


def run(capsys, *argv):
    code = main(["explain", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def line(out, name):
    return next(x for x in out.splitlines() if f" {name} " in x or x.split(" ")[1] == name)


def test_seed_example_prints_its_numbers(capsys):
    code, out, _ = run(capsys, "a*b + c", "--set", "a=2", "--set", "b=-3", "--set", "c=10")
    assert code == 0
    assert re.search(r"AddBackward0 \(root\) = 4 .*grad 1 ", out)
    assert re.search(r"MulBackward0 = -6 .*∂/∂#\d a = -3 .*∂/∂#\d b = 2 .*grad 1 ", out)
    assert "AccumulateGrad a = 2 " in out and "grad -3 (from" in line(out, "a")
    assert "grad 2 (from" in line(out, "b") and "grad 1 (from" in line(out, "c")
    assert "backward(): a.grad = -3.0, b.grad = 2.0, c.grad = 1.0" in out


def test_two_paths_functions_methods_and_vectors(capsys):
    code, out, _ = run(capsys, "x*x + x", "--set", "x=3")
    assert code == 0 and "grad 7 = 6 (from #1: 3 + 3) + 1 (from #2)" in out
    code, out, _ = run(capsys, "sigmoid(x) * x.exp()", "--set", "x=[0,0]")  # non-scalar: summed first
    assert code == 0 and "SumBackward0 (root) = 1 " in out and "x.grad = [0.75, 0.75]" in out  # s'e^x + s e^x at 0
    code, out, _ = run(capsys, "a * b.detach() + b", "--set", "a=2", "--set", "b=-3")
    assert code == 0 and "input 1 cut" in out and "a.grad = -3.0, b.grad = 1.0" in out


def test_bad_input_is_one_line(capsys):
    code, _, err = run(capsys, "foo(a)", "--set", "a=1")
    assert code == 2 and err.strip() == "gpugrad explain: NameError: name 'foo' is not defined"
    code, _, err = run(capsys, "__import__('os')", "--set", "a=1")
    assert code == 2 and "NameError" in err  # no builtins
    code, _, err = run(capsys, "a > 0", "--set", "a=1")
    assert code == 2 and "not a tensor that depends on the inputs" in err
    with pytest.raises(SystemExit):
        main(["explain", "a", "--set", "a=os.system"])
    assert "must be a number" in capsys.readouterr().err


def test_draw_option(capsys, tmp_path):
    target = tmp_path / ("g.svg" if shutil.which("dot") else "g.dot")
    code, out, _ = run(capsys, "a*b + c", "--set", "a=2", "--set", "b=-3", "--set", "c=10", "--draw", str(target))
    assert code == 0 and f"graph written to {target}" in out and target.exists()
