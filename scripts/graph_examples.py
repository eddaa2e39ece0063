"""The README's "Seeing the graph" examples: each one's explain() report and drawing, regenerated from the code.

    python scripts/graph_examples.py            # writes docs/graphs/<name>.svg (+ .dot, .txt)
    python scripts/graph_examples.py --readme   # and rewrites README.md between the graph-examples markers

Rendering the SVGs needs Graphviz's `dot` (apt-get install graphviz); without it only the .dot sources are written.
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path

import gpugrad
from gpugrad.autograd import draw, explain, record

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "graphs"
START, END = "<!-- graph-examples:start -->", "<!-- graph-examples:end -->"


def ab_plus_c():
    a, b, c = (gpugrad.tensor(v, requires_grad=True) for v in (2.0, -3.0, 10.0))
    e = a * b + c
    return e, {"a": a, "b": b, "c": c}


def two_paths():
    x = gpugrad.tensor(3.0, requires_grad=True)
    y = x * x + x
    return y, {"x": x}


def detached():
    a, b = (gpugrad.tensor(v, requires_grad=True) for v in (2.0, -3.0))
    y = a * b.detach() + b
    return y, {"a": a, "b": b}


EXAMPLES = [
    ("ab_plus_c", ab_plus_c, "a*b + c", "e = a * b + c",
     "The product node's local derivatives are the other factor (∂(ab)/∂a = b = -3, ∂(ab)/∂b = a = 2), the sum's "
     "are 1, so the gradients are -3, 2 and 1."),
    ("two_paths", two_paths, "x*x + x", "y = x * x + x",
     "`x` reaches the root along three edges: `x*x` sends 3 along each of its two (6 in all), the sum sends 1; "
     "its gradient is their sum, 7 = 2x + 1."),
    ("detached", detached, "a * b.detach() + b", "y = a * b.detach() + b",
     "`b.detach()` is a cut input (a dashed edge in the drawing): only the `+ b` path reaches `b`, so `b`'s "
     "gradient is 1, not a + 1."),
]


def build():
    """Write each example's report and drawing; return the README section's Markdown."""
    OUT.mkdir(parents=True, exist_ok=True)
    parts = []
    for name, make, expr, code, why in EXAMPLES:
        with record():
            out, names = make()
        report = explain(out, names=names)
        (OUT / f"{name}.txt").write_text(f"{report}\n")
        drawn = draw(out, OUT / f"{name}.svg", report=report)
        sets = " ".join(f"--set {k}={float(t.item()):g}" for k, t in names.items())
        image = f"\n![{code}](docs/graphs/{name}.svg)\n" if drawn.suffix == ".svg" else ""
        parts.append(f"**`{code}`** (`gpugrad explain '{expr}' {sets} --draw {name}.svg`). {why}\n\n"
                     f"```text\n{report}\n```\n{image}")
    return "\n".join(parts)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--readme", action="store_true", help="rewrite README.md between the graph-examples markers")
    args = p.parse_args()
    section = build()
    print(section)
    if args.readme:
        readme = ROOT / "README.md"
        text = readme.read_text()
        if START not in text or END not in text:
            raise SystemExit(f"README.md has no {START} ... {END} markers")
        readme.write_text(re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: f"{START}\n{section}{END}",
                                 text, flags=re.S))


if __name__ == "__main__":
    main()
