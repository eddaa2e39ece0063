"""Differential fuzzing against PyTorch: random define-by-run programs over gpugrad's whole op registry, run step by
step in gpugrad and in torch.

A program is a DAG of 3-25 steps: the hand-written steps of tests/fuzz/steps.py (broadcasting, in-place ops on
tensors and on views, hooks, retain_grad, no_grad) and, as often, any op of the registry (tests/fuzz/surface.py: every
op class, frontend and composite, read from the registry when the fuzzer runs), over 0-d and empty shapes,
float32/float64 and int64 inputs with zeros, ties, huge values, NaN and inf. Every step runs in both libraries on
the same inputs; after it every live value is compared (value, shape, dtype, requires_grad, and in forward-mode
programs its tangent) and errors must agree. A program ends with one or two backward passes (backward,
backward(inputs=), autograd.grad with or without create_graph, a second-order pass, the tangents of the gradients and
a backward through the tangents), or with autograd.functional (jacobian, hessian, vjp, jvp, hvp, vhp) of the
program replayed as a function of its leaves (tests/fuzz/phases.py).

Mismatches may be excused only by an entry of tests/fuzz/known_differences.py (deliberate differences, torch's
quirks, with their reasons and, where the excuse rests on gpugrad's derivative, a finite-difference check); anything
else fails with the program printed as code.

    python -m pytest tests/fuzz                   # 300 programs from a fixed seed (derandomized), the coverage test:
                                                  # CI's gate
    GPUGRAD_FUZZ_EXAMPLES=6000 python -m pytest -m slow tests/fuzz   # thousands, the same ones each run;
                                                  # GPUGRAD_FUZZ_SEED=random (or a number) explores others
    python -m tests.fuzz.test_fuzz 2000 [seed]    # figures: programs run, mismatches by class (no hypothesis)
"""
from __future__ import annotations

import collections
import contextlib
import os
import sys
import warnings

import pytest

from gpugrad.core.registry import FRONTENDS, REGISTRY
from tests.fuzz import phases
from tests.fuzz.known_differences import KNOWN, explain
from tests.fuzz.libs import G, T, torch
from tests.fuzz.program import Mismatch, Program, Source, Stop, tangent, to_numpy
from tests.fuzz.steps import STEPS
from tests.fuzz.surface import SURFACE, universe

try:
    import hypothesis
    from hypothesis import strategies as st
except ImportError:
    hypothesis = st = None


def run_program(src, forced=None):
    """Generate and run one program: (program, mismatch or None, the known difference that excuses it or None)."""
    p = Program(src, forced)
    levels = (G.fw.dual_level(), T.fw.dual_level()) if p.forward else ()
    try:
        with contextlib.ExitStack() as stack:
            for level in levels:
                stack.enter_context(level)
            for _ in range(src.int(1, 3)):
                p.leaf()
            steps, done, tries = src.int(3, 25), 0, 0
            while done < steps and tries < steps * 4:  # a step may not apply (no operand of the kind it needs)
                tries += 1
                done += bool(src.choice(STEPS)(p))
            phases.finish(p)
    except Stop:
        pass
    except Mismatch as m:
        m.program = p
        return p, m, explain(p.features, m)
    return p, None, None


# ---- tests ---------------------------------------------------------------------------------------------------------------
needs_oracle = pytest.mark.skipif(torch is None or hypothesis is None,
                                  reason="the fuzzer needs PyTorch (the oracle) and hypothesis: "
                                         "pip install 'gpugrad[test,oracle]'")


def _fuzz(data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # compared by the fuzzer itself (a NumPy warning where torch is finite)
        p, m, known = run_program(Source(lambda lo, hi: data.draw(st.integers(lo, hi))))  # (Source clamps hi >= lo)
    if known is not None:
        hypothesis.event(f"excused: {known.name}")  # pytest --hypothesis-show-statistics counts them
    if m is not None and known is None:
        raise AssertionError(f"gpugrad and torch disagree ({m.cls}): {m.detail}\n\nprogram:\n{p.code()}\n"
                             f"features: {sorted(p.features)}")


if hypothesis is not None:
    _COMMON = dict(deadline=None, database=None, print_blob=True,
                   suppress_health_check=list(hypothesis.HealthCheck))

    @needs_oracle
    @hypothesis.settings(max_examples=300, derandomize=True, **_COMMON)
    @hypothesis.given(st.data())
    def test_programs_match_torch(data):
        _fuzz(data)

    # CI's run is reproducible (derandomized: the same programs every time); GPUGRAD_FUZZ_SEED=random explores new
    # programs each run, and an integer seed replays one exploration
    _SEED = os.environ.get("GPUGRAD_FUZZ_SEED")

    @pytest.mark.slow
    @needs_oracle
    @pytest.mark.skipif("GPUGRAD_FUZZ_EXAMPLES" not in os.environ,
                        reason="exploration, not a gate: set GPUGRAD_FUZZ_EXAMPLES=N (and GPUGRAD_FUZZ_SEED=random) to "
                               "run N more programs; it still finds about one new mismatch class per 200 programs")
    @hypothesis.settings(max_examples=int(os.environ.get("GPUGRAD_FUZZ_EXAMPLES", 3000)), derandomize=_SEED is None,
                         **_COMMON)
    @hypothesis.given(st.data())
    def test_programs_match_torch_long(data):
        _fuzz(data)

    if _SEED is not None and _SEED != "random":
        test_programs_match_torch_long = hypothesis.seed(int(_SEED))(test_programs_match_torch_long)
else:
    @needs_oracle
    def test_programs_match_torch():
        pass


# ---- coverage: every op of the registry is reached ---------------------------------------------------------------------
def sweep(names, tries=40):
    """For each name, programs whose surface step runs it, until one step of it ran in both libraries and compared
    (at most ``tries`` programs each): (names never reached, registered op classes never applied)."""
    applied = set()
    originals = {name: cls.__dict__.get("apply") for name, cls in REGISTRY.items()}

    def spy(cls, orig):
        def apply(klass, *args, **kw):
            applied.add(klass.op_name)
            return orig.__func__(klass, *args, **kw)
        return classmethod(apply)

    for cls in REGISTRY.values():
        cls.apply = spy(cls, _inherited_apply(cls))
    unreached = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name in names:
                for i in range(tries):
                    p, _, _ = run_program(Source.from_seed(("coverage", name, i)), forced=name)
                    # (a registered class must also have applied: median's step may take the dim path, a composite)
                    if name in p.ran and (name not in REGISTRY or name in applied):
                        break
                else:
                    unreached.append(name)
    finally:
        for name, cls in REGISTRY.items():
            if originals[name] is None:
                del cls.apply
            else:
                cls.apply = originals[name]
    return unreached, sorted(set(REGISTRY) - applied)


def _inherited_apply(cls):
    for base in cls.__mro__:
        if "apply" in base.__dict__:
            return base.__dict__["apply"]
    raise AssertionError(f"{cls} has no apply")


@needs_oracle
def test_every_registered_op_is_reached_by_the_fuzzer():
    """Every op class, frontend and composite registered now (ops landing later too) has a generator in
    tests/fuzz/surface.py, or rows in tests/op_cases.py that the fuzzer falls back to, and the fuzzer ran it in both
    libraries and compared the results; every op class's apply ran during that sweep."""
    names = universe()
    assert set(REGISTRY) | set(FRONTENDS) <= set(names)
    unreached, unapplied = sweep(names)
    assert not unreached, (f"the fuzzer never ran these registered ops to a compared result: {unreached}; give each a "
                           "generator in tests/fuzz/surface.py (@spec(name)) or a row in tests/op_cases.py")
    assert not unapplied, f"registered op classes whose apply never ran while the fuzzer swept the registry: {unapplied}"


def test_known_differences_say_why():
    for k in KNOWN:
        assert len(k.reason) > 40 and k.name, k
    assert len({k.name for k in KNOWN}) == len(KNOWN)


@needs_oracle
def test_the_harness_reads_views_that_both_libraries_refuse_to_unpack():
    """A split's output whose base changed in place afterwards: unpack_dual raises in both libraries (the exploration
    of seed 4242 stopped there, in the harness); the harness reads its values and a None tangent, in agreement."""
    for lib in (G, T):
        with lib.fw.dual_level():
            x = lib.fw.make_dual(lib.const([1.0, 2.0, 3.0, 4.0]) * lib.m.ones(4, requires_grad=True),
                                 lib.const([1.0, 1.0, 1.0, 1.0]))
            a, _ = x.split(2)
            x.mul_(2)
            with pytest.raises(RuntimeError, match="Output 0 of Split is a view"):
                lib.fw.unpack_dual(a)
            assert tangent(a) is None
            assert to_numpy(a).tolist() == [2.0, 4.0]


def test_the_surface_table_names_only_registered_ops():
    stale = sorted(set(SURFACE) - set(universe()) - {"__fallback__"})
    assert not stale, f"tests/fuzz/surface.py has generators for names the registry no longer has: {stale}"


# ---- figures ------------------------------------------------------------------------------------------------------------
def figures(n, seed=0):
    """Run n programs from seeded generators: counts of programs, steps, and mismatches by class."""
    classes = collections.Counter()
    examples = {}
    steps = 0
    for i in range(n):
        p, m, known = run_program(Source.from_seed((seed, i)))
        steps += len(p.lines)
        if m is None:
            continue
        key = f"known:{known.name}" if known else f"NEW:{m.cls}"
        classes[key] += 1
        if key not in examples or len(p.lines) < len(examples[key][0].lines):
            examples[key] = (p, m, i)
    return n, steps, classes, examples


def replay(seed, i):
    """Run program ``i`` of ``seed`` again and print it, its mismatch and gpugrad's traceback (if it raised)."""
    import traceback  # noqa: PLC0415 - the debugging aid only
    p, m, known = run_program(Source.from_seed((seed, i)))
    print(p.code(), f"\nfeatures: {sorted(p.features)}")
    if m is not None:
        print(f"\n{m.cls}{' (known: ' + known.name + ')' if known else ''}: {m.detail}")
        for e in (m.got, m.want):
            if isinstance(e, BaseException):
                traceback.print_exception(e)


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    if sys.argv[1:2] == ["--replay"]:  # python -m tests.fuzz.test_fuzz --replay SEED I
        replay(int(sys.argv[2]), int(sys.argv[3]))
        sys.exit(0)
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    seed = int(sys.argv[2]) if len(sys.argv) > 2 and not sys.argv[2].startswith("-") else 0
    total, lines, classes, examples = figures(n, seed)
    print(f"{total} programs, {lines} lines; {sum(classes.values())} mismatches")
    for key, count in classes.most_common():
        print(f"  {count:5d}  {key}")
    show = [a[3:] for a in sys.argv if a.startswith("-k=")]
    for key, (p, m, i) in sorted(examples.items()):
        if any(k in key for k in show) or (not show and key.startswith("NEW")):
            print(f"\n==== {key} (--replay {seed} {i}): {m.detail[:600]}\n{p.code()}\nfeatures: {sorted(p.features)}")
