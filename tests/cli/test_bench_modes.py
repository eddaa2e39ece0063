"""``gpugrad bench --modes``: a tiny grid end to end (table, JSON, plot), the figures' structure, and that the three
ways of computing the Jacobian agree with each other and with the closed form W2 diag(1 - tanh^2(W1 x + b1)) W1."""
from __future__ import annotations

import json

import numpy as np
import pytest

from gpugrad.bench import modes
from gpugrad.cli import main as cli_main

try:
    import matplotlib  # noqa: F401

    HAVE_MPL = True
except ImportError:
    HAVE_MPL = False


@pytest.mark.parametrize("n, m", [(1, 5), (5, 1), (3, 4)])
def test_every_method_gives_the_closed_form_jacobian(n, m):
    f, x = modes.mlp(n, m, hidden=6)
    rng = np.random.default_rng(0)  # the same draws as modes.mlp(seed=0)
    w1, b1, w2, b2 = (rng.standard_normal(s) / np.sqrt(s[-1]) for s in ((6, n), (6,), (m, 6), (m,)))
    x0 = rng.standard_normal(n)
    np.testing.assert_array_equal(np.asarray(x), x0)
    expected = w2 @ np.diag(1 - np.tanh(w1 @ x0 + b1) ** 2) @ w1
    np.testing.assert_allclose(np.asarray(f(x)), w2 @ np.tanh(w1 @ x0 + b1) + b2, rtol=1e-12)
    jacs = modes.jacobians(f, x)
    assert set(jacs) == set(modes.METHODS)
    for name, j in jacs.items():
        np.testing.assert_allclose(j, expected, rtol=1e-10, atol=1e-12, err_msg=name)


def test_measure_times_every_method_on_every_cell_and_finds_the_crossover():
    res = modes.measure("cpu", grid=(1, 8), hidden=4, repeats=2, min_sample_s=0.001)
    assert [(c["n"], c["m"]) for c in res["cells"]] == [(1, 1), (1, 8), (8, 1), (8, 8)]
    for c in res["cells"]:
        med = {k: c["times"][k]["median_s"] for k in modes.METHODS}
        assert all(t > 0 for t in med.values()), c
        assert c["forward_vs_reverse"] == pytest.approx(med["forward"] / med["reverse"])
        assert c["forward_vs_reverse_vectorized"] == pytest.approx(med["forward"] / med["reverse_vectorized"])
        assert c["fastest"] == min(med, key=med.get)
        assert c["max_abs_diff"] < 1e-12, c  # the methods' Jacobians agree in value
    wins = {c["m"]: [] for c in res["cells"]}
    for c in res["cells"]:
        if c["forward_vs_reverse"] < 1 and c["forward_vs_reverse_vectorized"] < 1:
            wins[c["m"]].append(c["n"])
    assert res["crossover"] == {str(m): max(ns) if ns else None for m, ns in wins.items()}


def test_crossover_is_the_largest_n_where_forward_wins():
    cell = lambda n, m, r: {"n": n, "m": m, "forward_vs_reverse": r, "forward_vs_reverse_vectorized": r}  # noqa
    cells = [cell(1, 1, 2.0), cell(1, 4, 0.5), cell(4, 1, 3.0), cell(4, 4, 0.9), cell(16, 4, 1.5)]
    assert modes.crossover(cells) == {"1": None, "4": 4}


@pytest.mark.skipif(not HAVE_MPL, reason="matplotlib is an optional extra: pip install 'gpugrad[plot]'")
def test_cli_quick_run_writes_the_table_json_and_png(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(modes, "QUICK_GRID", (1, 2))
    code = cli_main(["bench", "--modes", "--quick", "--device", "cpu", "--no-progress",
                     "--json", str(tmp_path / "m.json"), "--plot", str(tmp_path / "m.png")])
    assert code == 0
    out = capsys.readouterr().out
    assert "forward mode beats both reverse modes up to" in out and "reverse_vectorized" in out
    res = json.loads((tmp_path / "m.json").read_text())["modes"]["cpu"]
    assert res["grid"] == [1, 2] and len(res["cells"]) == 4 and res["hidden"] == modes.HIDDEN
    assert all(c["max_abs_diff"] < 1e-12 for c in res["cells"])
    assert (tmp_path / "m.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
