"""Every kernel family compiles with NVRTC for sm_90 (no GPU needed), with the launchers' options and template
instantiations, and ptxas reports no spills and no local memory. Run with -s to see the resource table."""
from __future__ import annotations

import pytest

from gpugrad.backend import kernels
from gpugrad.testing import nvrtc_check

_OK, _WHY = nvrtc_check.available()
pytestmark = pytest.mark.skipif(not _OK, reason=_WHY)


@pytest.fixture(scope="module")
def results():
    return nvrtc_check.check()


def test_every_family_compiles_without_spills_or_local_memory(results, record_property):
    table = nvrtc_check.format_table(results)
    print(f"\n{_WHY}\n{table}")
    record_property("nvrtc_resources", table)
    assert nvrtc_check.problems(results) == []


def test_every_launched_instantiation_was_compiled_and_reported(results):
    reported = {(k.family, k.name) for r in results for k in r.kernels if k.registers >= 0}
    wanted = {(f, n) for f, names in kernels.NAME_EXPRESSIONS.items() for n in names}
    assert wanted - reported == set()
    wrappers = {n for _, n in reported if n.startswith("gg_check_")}
    assert {w.split("<")[0].removeprefix("gg_check_") for w in wrappers} == set(kernels.ELEMENTWISE)


def test_row_kernels_fit_a_1024_thread_block(results):
    """Row kernels launch with up to 1024 threads: at most 64 registers each (65536 per SM)."""
    for r in results:
        for k in r.kernels:
            if k.name.split("<")[0] in kernels.RAW_KERNELS["reduce"] + kernels.RAW_KERNELS["loss"] + kernels.RAW_KERNELS["norm"]:
                assert k.registers <= 64, f"{k.family}:{k.name} uses {k.registers} registers"


def test_parse_ptxas_log():
    log = """ptxas info    : Compiling entry function '_Z1kIfEvPT_' for 'sm_90'
ptxas info    : Function properties for _Z1kIfEvPT_
ptxas         .     16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 256 bytes smem, 360 bytes cmem[0]"""
    u = nvrtc_check.parse_ptxas(log, {"_Z1kIfEvPT_": "k<float>"})["_Z1kIfEvPT_"]
    assert u == {"stack": 16, "spill_stores": 8, "spill_loads": 4, "registers": 40, "smem": 256, "lmem": 0}
    usage = nvrtc_check.KernelUsage("f", "k<float>", **u)
    assert len(usage.problems) == 2


def _vector_forms(name):
    """The 16-byte load and store forms of a kernel's element type (the first template argument's, also the
    output type of every pointwise Op)."""
    ctype = name.split("<")[-1].split(",")[0].split(">")[0]
    v = {"float": "v4.f32", "double": "v2.f64", "gg::bf16": "v4.u32", "gg::f16": "v4.u32"}[ctype]  # 8 x 16 bits: 4 words
    return f"ld.global.nc.{v}", f"st.global.{v}"


def test_vectorized_kernels_issue_16_byte_accesses():
    """Every pointwise<Op> and every row kernel of reduce.cu / norm.cu loads (and, but for logsumexp_fwd's one
    value per row, stores) 16-byte vectors: float4 / double2 in the PTX."""
    teams = {"softmax_fwd", "softmax_bwd", "log_softmax_fwd", "log_softmax_bwd", "logsumexp_fwd", "logsumexp_bwd",
             "layer_norm_fwd", "layer_norm_bwd"}
    checked = 0
    for family in ("elementwise", "reduce", "norm"):
        for name, forms in nvrtc_check.global_accesses(family).items():
            base = name.split("<")[0]
            if base != "pointwise" and base not in teams:
                continue
            load, store = _vector_forms(name)
            assert load in forms, f"{family}:{name} has no {load}: {sorted(forms)}"
            assert base == "logsumexp_fwd" or store in forms, f"{family}:{name} has no {store}: {sorted(forms)}"
            checked += 1
    assert checked == len(kernels.POINTWISE_OPS) + len(kernels.STORAGE_CTYPES) * len(teams)


def test_vectorized_and_row_kernels_keep_two_blocks_per_sm(results):
    """pointwise<Op> fits 4 blocks of 256 threads per SM, the row kernels 2 of 512: at most 64 registers each
    (65536 per SM), as their __launch_bounds__ ask."""
    teams = set(kernels.RAW_KERNELS["reduce"] + kernels.RAW_KERNELS["norm"]) - {"sum_rows", "layer_norm_bwd_wb"}
    for r in results:
        for k in r.kernels:
            if k.name.split("<")[0] in teams | {"pointwise"}:
                assert 0 < k.registers <= 64, f"{k.family}:{k.name} uses {k.registers} registers"


def test_compile_timings_cover_the_module_and_each_instantiation():
    """``nvrtc_check --timings`` (the README's cold-compile table): the whole module, each instantiation alone, and
    all of them on threads, every one a real compile (a bad instantiation fails, naming it)."""
    timings = nvrtc_check.compile_timings(families=["check"], workers=2)
    entry = timings["check"]
    assert list(entry["units"]) == kernels.NAME_EXPRESSIONS["check"]
    assert all(wall > 0 and cpu > 0 for wall, cpu in [entry["module"], *entry["units"].values()])
    assert entry["parallel_wall"] > 0
    text = nvrtc_check.format_timings(timings)
    assert "check: whole module " in text and "    check_finite<double>: " in text
    with pytest.raises(RuntimeError, match=r"compiling check \['check_finite<half>'\] failed"):
        nvrtc_check.compile_seconds("check", ["check_finite<half>"])
