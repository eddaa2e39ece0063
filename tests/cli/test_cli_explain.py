"""``gpugrad explain EXPR --set name=value``: the report of ``autograd.explain`` for an expression, in-process."""
from __future__ import annotations

import re
import shutil

import pytest

import gpugrad
import gpugrad.nn.functional as F
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
    assert code == 2 and err.startswith("gpugrad explain: EXPR: unknown function 'foo' (column 1); EXPR may use ")
    code, _, err = run(capsys, "__import__('os')", "--set", "a=1")
    assert code == 2 and "unknown function '__import__'" in err  # no builtins
    code, _, err = run(capsys, "a.sum(0) * 2", "--set", "a=[1, 2]")
    assert code == 0
    code, _, err = run(capsys, "b + 1", "--set", "a=1")
    assert code == 2 and "unknown name 'b' (the --set inputs are: a) (column 1)" in err
    with pytest.raises(SystemExit):
        main(["explain", "a", "--set", "a=os.system"])
    assert "the value must be a number or a (nested) list of numbers" in capsys.readouterr().err


# the escape from eval(EXPR, {"__builtins__": {}}) that ran os.system: the walk from () to a class whose module
# keeps the real builtins
ESCAPE = ("[c for c in ().__class__.__base__.__subclasses__() if c.__name__ == 'catch_warnings'][0]()._module"
          ".__builtins__['__import__']('os').system('touch escaped')")


@pytest.mark.parametrize("expr", [ESCAPE, "().__class__.__base__.__subclasses__()", "a.__class__.__base__",
                                  "a.exp().__dict__", "[a][0].__init__.__globals__", "a.sum().__reduce__()"])
def test_an_attribute_walk_out_of_the_expression_is_refused(capsys, tmp_path, monkeypatch, expr):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, expr, "--set", "a=1")
    assert code == 2 and not (tmp_path / "escaped").exists() and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("gpugrad explain: EXPR: "), err


@pytest.mark.parametrize("expr, said", [
    ("a > 0", "a comparison is not allowed (column 1)"),
    ("a and a", "'and' / 'or' is not allowed (column 1)"),
    ("(lambda: a)()", "only gpugrad's functions and tensor methods may be called (column 2)"),
    ("lambda: a", "a lambda is not allowed (column 1)"),
    ("[x for x in a]", "a list comprehension is not allowed (column 1)"),
    ("a + 'x'", "a string ('x') is not allowed here (column 5)"),
    ("a * 1j", "a complex number (1j) is not allowed here (column 5)"),
    ("a // 2", "the operator // is not allowed (column 1)"),
    ("~a", "the operator ~ is not allowed (column 1)"),
    ("a.__class__", "the attribute .__class__ is not allowed (only T, mT, values, indices) (column 3)"),
    ("a.grad", "the attribute .grad is not allowed"),
    ("a.item()", "the method .item() is not allowed (column 3)"),
    ("a.exp().numpy()", "the method .numpy() is not allowed (column 9)"),
    ("exp", "the function exp is not called (write exp(...)) (column 1)"),
    ("print(a)", "unknown function 'print' (column 1)"),
    ("exp(*[a])", "unpacking (*...) is not allowed (column 5)"),
    ("sum(a, **{})", "keyword unpacking (**...) (column 10)"),
    ("[a]", "a list is allowed only as an argument or an index (column 1)"),
    ("{a: 1}", "a dict is not allowed (column 1)"),
    ("f'{a}'", "an f-string is not allowed (column 1)"),
    ("(b := a)", "an assignment (:=) is not allowed (column 2)"),
    ("a if a else a", "a conditional expression (... if ... else ...) is not allowed (column 1)"),
    ("a + 2 ** 9999.0", "2.0 ** 9999.0 has no value ((34, 'Numerical result out of range')) (column 5)"),
    ("a * (-8) ** 0.5", "(-8.0) ** 0.5 is a complex number (column 5)"),
    ("a +", "gpugrad explain: EXPR is not an expression: invalid syntax\n"),
    ("1 1", "EXPR is not an expression: invalid syntax (column 3)"),
])
def test_what_expr_may_not_use_is_named(capsys, expr, said):
    code, out, err = run(capsys, expr, "--set", "a=1")
    assert code == 2 and out == "" and len(err.splitlines()) == 1, err
    assert said in err, err


def test_expr_and_values_are_bounded_in_size_and_depth(capsys):
    for text in ("-" * 3000 + "1", "[" * 40 + "]" * 40, "1" * 1_000_001):
        with pytest.raises(SystemExit) as e:
            main(["explain", "a", "--set", f"a={text}"])  # was a RecursionError traceback for the first
        err = capsys.readouterr().err
        assert e.value.code == 2 and "Traceback" not in err and err.splitlines()[-1].startswith(
            "gpugrad explain: error: argument --set: a=...: the value "), err
    for expr, said in [("-" * 3000 + "a", "EXPR is nested too deeply (at most 150 levels)"),
                       ("a" + ".exp()" * 100, "EXPR is nested more than 150 levels deep"),
                       ("a" + " + a" * 2000, "EXPR is 8,001 characters long; at most 5,000 are allowed")]:
        code, _, err = run(capsys, "--set", "a=1", "--", expr)
        assert code == 2 and err == f"gpugrad explain: {said}\n", err
    code, out, _ = run(capsys, "--set", "a=2", "--", "-" * 140 + "a")  # within the bound: evaluated
    assert code == 0 and "a.grad = 1.0" in out
    code, out, _ = run(capsys, "a" + " + a" * 60, "--set", "a=2")
    assert code == 0 and "a.grad = 61.0" in out


def test_what_expr_may_use_gives_torchs_values(capsys, torch):
    x = [0.5, -1.25, 2.0]
    cases = [("softmax(x, 0)[1] * x.sum()", lambda t: torch.softmax(t, 0)[1] * t.sum()),
             ("gpugrad.exp(x).mean() - x @ x / 3", lambda t: torch.exp(t).mean() - t @ t / 3),
             ("x.reshape(3, 1).T.tanh().max(1).values ** 2", lambda t: t.reshape(3, 1).T.tanh().max(1).values ** 2),
             ("logsumexp(cat([x, -x]), 0) + x[1:].sigmoid().sum(dim=0, keepdim=True)",
              lambda t: torch.logsumexp(torch.cat([t, -t]), 0) + t[1:].sigmoid().sum(dim=0, keepdim=True)),
             ("-x[..., None].relu().sum() + +x[0] * 2.5", lambda t: -t[..., None].relu().sum() + +t[0] * 2.5)]
    for expr, ref in cases:
        code, out, err = run(capsys, expr, "--set", f"x={x}", "--dtype", "float64")
        assert code == 0, err
        t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        ref(t).sum().backward()
        got = eval(out.split("x.grad = ")[1].strip())  # noqa: S307 - a list of numbers the command printed
        assert got == pytest.approx(t.grad.tolist(), rel=1e-12, abs=1e-12), expr


def test_the_functions_are_the_registrys_pointwise_ops_and_the_usual_math():
    from gpugrad.cli.expression import FUNCTIONS, METHODS
    from gpugrad.ops.declarations import POINTWISE

    named = {n for n in POINTWISE if hasattr(gpugrad, n) or hasattr(F, n)}
    assert named <= set(FUNCTIONS) and {"exp", "log", "sin", "tanh", "relu", "sigmoid"} <= named
    assert {"sum", "mean", "softmax", "matmul", "max", "logsumexp"} <= set(FUNCTIONS)
    assert {"sum", "exp", "relu", "detach", "view"} <= METHODS
    assert not any(n.startswith("_") for n in (*FUNCTIONS, *METHODS))


def test_an_unwritable_draw_path_is_one_line(capsys, tmp_path):
    (tmp_path / "file").write_text("x")
    target = tmp_path / "file" / "g.dot"  # below a regular file: its directory cannot be made
    code, out, err = run(capsys, "a*b", "--set", "a=2", "--set", "b=3", "--draw", str(target))
    assert code == 1 and out == "" and err == (f"gpugrad explain: --draw {target}: cannot create its directory "
                                               f"{target.parent}: File exists\n"), err


def test_draw_option(capsys, tmp_path):
    target = tmp_path / ("g.svg" if shutil.which("dot") else "g.dot")
    code, out, _ = run(capsys, "a*b + c", "--set", "a=2", "--set", "b=-3", "--set", "c=10", "--draw", str(target))
    assert code == 0 and f"graph written to {target}" in out and target.exists()
