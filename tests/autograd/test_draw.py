"""``gpugrad.autograd.draw``: the DOT it writes (shapes, gradients on edges, dashed cuts, collapsed layers, the node
cap), Graphviz's ``dot`` accepting it (its SVG has the nodes we drew), and on the simulated CUDA device one
device-to-host copy per node."""
from __future__ import annotations

import re
import shutil
import subprocess
import warnings

import pytest

import gpugrad
import gpugrad.nn as nn
from gpugrad.autograd import draw, explain, record

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed "
                               "(apt-get install graphviz)")


def seed_graph():
    a, b, c = (gpugrad.tensor(v, requires_grad=True) for v in (2.0, -3.0, 10.0))
    return a * b.detach() + a * c, {"a": a, "b": b, "c": c}


def dot_nodes(source):
    """name -> attribute text of each node statement in DOT source."""
    found = dict(re.findall(r'^\s*("[^"]+"|\w+) \[(.*)\]$', source, re.M))
    return {k: v for k, v in found.items() if k not in ("graph", "node", "edge")}


def svg_node_count(svg):
    return len(re.findall(r'<g id="node\d+" class="node"', svg))


def test_dot_source_shapes_gradients_and_cut_edges(tmp_path):
    e, names = seed_graph()
    out = draw(e, tmp_path / "g.dot", names=names)
    src = out.read_text()
    nodes = dot_nodes(src)
    shapes = sorted(re.search(r"shape=(\w+)", v).group(1) for v in nodes.values())
    assert shapes == ["box", "box", "doubleoctagon", "ellipse", "ellipse", "point"]  # 2 leaves, 2 muls, root, cut
    assert 'label="AddBackward0\\n= 14\\nfloat32[]"' in src and 'label="a: AccumulateGrad\\n= 2' in src
    assert re.search(r'-> n\d+ \[label="detached / no grad" style=dashed\]', src)
    # gradients on the edges: a sends -3 + 10, c gets a = 2
    assert sorted(re.findall(r'label="grad ([-\d.]+)"', src), key=float) == ["-3", "1", "1", "2", "10"]


@needs_dot
def test_dot_accepts_it_and_the_svg_has_every_node(tmp_path):
    e, names = seed_graph()
    out = draw(e, tmp_path / "g.svg", names=names)
    assert out.suffix == ".svg" and (tmp_path / "g.dot").exists()
    assert svg_node_count(out.read_text()) == 6
    # dot -Tsvg on the .dot source itself
    svg = subprocess.run(["dot", "-Tsvg", str(tmp_path / "g.dot")], check=True, capture_output=True, text=True).stdout
    assert svg_node_count(svg) == 6


def test_without_dot_the_source_is_written_and_the_message_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    e, _ = seed_graph()
    with pytest.warns(UserWarning, match=r"apt-get install graphviz.*pip install 'gpugrad\[graph\]'"):
        out = draw(e, tmp_path / "g.svg")
    assert out == tmp_path / "g.dot" and out.exists() and not (tmp_path / "g.svg").exists()


def test_missing_graphviz_package_is_named(monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "graphviz", None)
    e, _ = seed_graph()
    with pytest.raises(ImportError, match=r"pip install 'gpugrad\[graph\]'"):
        draw(e, tmp_path / "g.dot")


def test_ten_thousand_nodes_are_capped(tmp_path):
    x = gpugrad.tensor(1.0, requires_grad=True)
    y = x
    for _ in range(10_000):
        y = y * 1.0001
    out = draw(y, tmp_path / "big.dot", max_nodes=50)
    nodes = dot_nodes(out.read_text())
    assert len(nodes) == 51 and 'label="... 9951 more nodes"' in nodes["more"]
    if shutil.which("dot"):
        svg = subprocess.run(["dot", "-Tsvg", str(out)], check=True, capture_output=True, text=True).stdout
        assert svg_node_count(svg) == 51


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.act = nn.Linear(4, 4), nn.Tanh()

    def forward(self, x):
        return self.act(self.fc(x)) + x


class Net(nn.Module):
    def __init__(self, depth):
        super().__init__()
        self.layers = nn.Sequential(*[Block() for _ in range(depth)])
        self.head = nn.Linear(4, 1)

    def forward(self, x):
        return self.head(self.layers(x))


def test_repeated_layers_collapse_into_one_node_and_other_modules_into_clusters(tmp_path):
    net = Net(12)
    with record():
        y = net(gpugrad.randn(3, 4)).sum()
    src = draw(y, tmp_path / "net.dot").read_text()
    nodes = dot_nodes(src)
    assert nodes['"Net.layers.*"'].startswith('label="Net.layers.*\\n12 x Block\\n60 nodes" shape=box3d')
    assert 'subgraph "cluster_Net.head"' in src and 'label="Net.head (Linear)"' in src
    assert len(nodes) == 5 + 2  # the family, head's matmul, weight and bias, the sum; x cut twice (fc, residual)
    full = dot_nodes(draw(y, tmp_path / "full.dot", collapse=False).read_text())
    assert len(full) == len(explain(y).nodes) + 2
    # a Sequential of different layers is no repetition: each layer keeps its own cluster
    seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    with record():
        z = seq(gpugrad.randn(2, 2)).sum()
    src = draw(z, tmp_path / "seq.dot").read_text()
    assert "box3d" not in src and src.count("subgraph") == 3


@pytest.mark.gpu
def test_draw_on_cuda_moves_each_node_to_the_host_once(tmp_path):
    from gpugrad.testing import cuda_sim

    net = Net(3).to("cuda")
    with record():
        y = net(gpugrad.randn(3, 4, device="cuda")).sum()
    if cuda_sim.enabled():
        cuda_sim.reset_counters()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no dot program is fine here: the .dot source is what is checked
        draw(y, tmp_path / "cuda.svg", collapse=False)
    n = 3 * 5 + 4  # per block: fc's matmul, weight, bias, tanh, add; the head's three nodes and the sum
    assert len(dot_nodes((tmp_path / "cuda.dot").read_text())) == n + 2  # and two cut markers
    if cuda_sim.enabled():  # one copy per node (values, gradients, derivatives together), never one per element
        counts = cuda_sim.counters()
        assert counts["d2h"] == n and counts["syncs"] == n, counts


@needs_dot
def test_the_readme_examples_are_what_the_script_makes(tmp_path, monkeypatch):
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("graph_examples", root / "scripts" / "graph_examples.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "OUT", tmp_path)
    section = mod.build()
    assert f"{mod.START}\n{section}{mod.END}" in (root / "README.md").read_text()  # else: graph_examples.py --readme
    assert sorted(p.name for p in tmp_path.glob("*.svg")) == ["ab_plus_c.svg", "detached.svg", "two_paths.svg"]
