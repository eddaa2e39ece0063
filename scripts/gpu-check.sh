#!/usr/bin/env bash
# GPU check: on a machine with a CUDA GPU, from this checkout, without installing anything (python3 with NumPy,
# CuPy for CUDA 13 and pytest; PyTorch, pytest-xdist, pytest-timeout and pytest-benchmark are used when present).
#
#   scripts/gpu-check.sh OUTDIR [KERNEL_CACHE.tar.gz]
#
# Stages, in order, each with a time limit (seconds; SIGINT at the limit, KILL GPU_CHECK_GRACE_S = 30 s later):
#   1 smoke (GPU_CHECK_SMOKE_S = 110): scripts/gpu_smoke.py: is_available, the kernels compiled in a thread pool,
#     one kernel per family against its reference, one eager and one graph-replayed training step with their
#     launch and sync counts, one number per benchmark family.  Answers "does it work, and how fast".
#   2 tests (GPU_CHECK_TESTS_S = 330 for all groups): pytest -m "gpu and not slow", one run per group, newest
#     features first (graphs, the CUDA path, deferred errors, optimizers, distributed, forward mode, parity, the
#     rest, benchmarks), tests/cuda/test_gpu_check.py left out; -v, --timeout per test and -n workers for the
#     compile-bound groups when the plugins are there, --maxfail per group, a JUnit file per group.
#   3 bench (GPU_CHECK_BENCH_S = 160): gpugrad bench --device cuda --quick: the eager and graphed step against
#     PyTorch CUDA at batch 64, 512 and 4096, kernel GB/s as fractions of the copy peak; JSON after each section.
# At most 8 files land in OUTDIR, each rewritten as soon as there is more to say, so a kill keeps what finished:
#   summary.json (what finished, exit codes, seconds, test counts), smoke.json, tests.log (-v output),
#   tests.tar.gz (a JUnit XML file per group), bench.json, bench.txt, kernel-cache.tar.gz (CuPy's compiled kernels,
#   at most ~14 MiB), gpu-check.log (everything printed).
# Cache round trip: pass a kernel-cache.tar.gz of an earlier run as the second argument (or GPU_CHECK_CACHE_IN, or
# leave it at .cache/kernel-cache.tar.gz), and this run starts warm; CUPY_CACHE_DIR defaults to .cache/cupy.
# Exit status: 0 all passed, 1 a check, test or benchmark failed, timed out or was stopped, 3 no usable GPU here
# (said why, nothing run).
# Narrowing (shell words, quotes honoured): GPU_CHECK_GROUPS ("name=path[,path...] ..." replaces the groups),
# GPU_CHECK_PARALLEL ("parity rest": the groups run with -n), GPU_CHECK_PYTEST_ARGS (added to every group, e.g.
# "-k relu"), GPU_CHECK_BENCH_ARGS (default --quick), GPU_CHECK_WARM (all | step | none: what stage 1 compiles),
# GPU_CHECK_SMOKE_PARTS (kernels,step,bench), GPU_CHECK_TEST_TIMEOUT (90 s per test), GPU_CHECK_MAXFAIL (25 per
# group), GPU_CHECK_WORKERS (-n, default 8).
set -uo pipefail
out=${1:?usage: scripts/gpu-check.sh OUTDIR [KERNEL_CACHE.tar.gz]}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
cache_in=${2:-${GPU_CHECK_CACHE_IN:-}}
[ -z "$cache_in" ] && [ -f "$root/.cache/kernel-cache.tar.gz" ] && cache_in=$root/.cache/kernel-cache.tar.gz
[ -n "$cache_in" ] && cache_in=$(cd "$(dirname "$cache_in")" && pwd)/$(basename "$cache_in")
cd "$root" || exit 1
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
unset GPUGRAD_DEVICE
py=${PYTHON:-python3}
export CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-$root/.cache/cupy} GPUGRAD_EMU_CACHE=${GPUGRAD_EMU_CACHE:-$root/.cache/emu}
mkdir -p "$CUPY_CACHE_DIR" "$GPUGRAD_EMU_CACHE"
echo "gpu-check: kernel caches: CUPY_CACHE_DIR=$CUPY_CACHE_DIR GPUGRAD_EMU_CACHE=$GPUGRAD_EMU_CACHE"
smoke_s=${GPU_CHECK_SMOKE_S:-110} tests_s=${GPU_CHECK_TESTS_S:-330} bench_s=${GPU_CHECK_BENCH_S:-160}
grace=${GPU_CHECK_GRACE_S:-30}
pytest_args=() bench_args=() groups=()  # split as shell words, so quotes work: GPU_CHECK_PYTEST_ARGS="-k 'a and b'"
eval "pytest_args=(${GPU_CHECK_PYTEST_ARGS-})"
eval "bench_args=(${GPU_CHECK_BENCH_ARGS---quick})"
eval "groups=(${GPU_CHECK_GROUPS-graphs=tests/cuda/test_cuda_graphs.py cuda_path=tests/cuda/test_cuda_path.py \
    deferred=tests/cuda/test_deferred_errors.py optim=tests/optim distributed=tests/distributed \
    forward_mode=tests/autograd/test_forward_mode.py parity=tests/cuda/test_parity.py rest=tests \
    benchmarks=benchmarks})"
parallel=" ${GPU_CHECK_PARALLEL-parity rest} "
files=(summary.json smoke.json tests.log tests.tar.gz bench.json bench.txt kernel-cache.tar.gz gpu-check.log)
for f in "${files[@]}" device.json gpu-tests.xml gpu-tests.log; do  # an earlier run's must not pass for this one's
    rm -f "${out:?}/$f"
done

# The device first: without a usable GPU, say why and run nothing.
"$py" - "$out" <<'PY'
import json, pathlib, sys
import gpugrad
if not gpugrad.cuda.is_available():
    reason = gpugrad.cuda.unavailable_reason()
    print(f"gpu-check: no usable CUDA GPU on this machine: {reason}")
    print("gpu-check: nothing was run; run this script on a machine with an NVIDIA GPU and CuPy for CUDA 13.")
    json.dump({"status": 3, "no_gpu": reason}, open(pathlib.Path(sys.argv[1]) / "summary.json", "w"), indent=2)
    sys.exit(3)
PY
rc=$?
if [ "$rc" -ne 0 ]; then
    if [ "$rc" -ne 3 ]; then  # a crash or a hang in CUDA's initialisation: not usable either
        echo "gpu-check: the device check itself failed (exit $rc): no usable GPU here; nothing was run."
        printf '{"status": 3, "no_gpu": "the device check failed (exit %s)"}\n' "$rc" >"$out/summary.json"
    fi
    exit 3
fi

exec > >(tee -a "$out/gpu-check.log") 2>&1
work=$(mktemp -d)
steps=() not_run=() status=0 stopped="" child=""
launcher=()
command -v setsid >/dev/null && launcher=(setsid)  # steps in a session of their own: only this script signals them

# A signal (the caller's time limit) is passed on to the running step as SIGINT, which pytest, gpugrad bench and
# gpu_smoke.py turn into a clean stop that keeps their results; no later step starts; the results are packed.
on_signal() { stopped=${stopped:-$1}; [ -n "$child" ] && kill -INT "$child" 2>/dev/null; }
trap 'on_signal SIGINT' INT
trap 'on_signal SIGTERM' TERM
trap 'on_signal SIGHUP' HUP

# step NAME LIMIT LOG COMMAND...: COMMAND with its output shown and appended to LOG; SIGINT at LIMIT seconds.
step() {
    local name=$1 limit=$2 log=$3 t0 rc secs before=$stopped
    shift 3
    echo "gpu-check: $name: $* (SIGINT after ${limit} s, KILL ${grace} s later)"
    t0=$(date +%s.%N)
    "${launcher[@]}" timeout -s INT -k "$grace" "$limit" "$@" > >(tee -a "$log") 2>&1 &
    child=$!
    wait "$child"
    rc=$?
    while kill -0 "$child" 2>/dev/null; do wait "$child"; rc=$?; done  # a trap interrupted the wait
    wait "$child" 2>/dev/null && rc=0 || { r=$?; [ "$r" -ne 127 ] && rc=$r; }
    child=""
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        echo "gpu-check: $name: timed out after ${limit} s (partial results kept)"
    fi
    echo "gpu-check: $name: exit $rc after ${secs} s"
    steps+=("$name $rc $secs $([ "$stopped" != "$before" ] && echo stopped || echo ran)")
    return "$rc"
}

# summary STATUS: summary.json from the steps so far and the result files (rewritten after every step).
summary() {
    "$py" - "$out" "$work" "$1" "$stopped" "${#not_run[@]}" "${not_run[@]}" "${steps[@]}" <<'PY' || true
import json, os, pathlib, sys, xml.etree.ElementTree as ET
out, work, status, stopped, n = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), *sys.argv[3:5], int(sys.argv[5])
not_run, entries = sys.argv[6:6 + n], sys.argv[6 + n:]
s = {"status": int(status) if status.isdigit() else status, "stopped": stopped or None, "finished": [], "steps": {},
     "not_run": not_run}
for entry in entries:
    name, rc, secs, how = entry.rsplit(" ", 3)
    timed_out = rc in ("124", "137")
    s["steps"][name] = {"exit": int(rc), "seconds": float(secs), "timed_out": timed_out, "stopped": how == "stopped"}
    if not timed_out and how != "stopped":
        s["finished"].append(name)
def load(name):
    try:
        return json.loads((out / name).read_text())
    except (OSError, ValueError):
        return None
if (smoke := load("smoke.json")) is not None:
    step = smoke.get("step") or {}
    s["smoke"] = {"finished": smoke.get("finished"), "failed": smoke.get("failed"), "step": {
        impl: {k: step[impl].get(k) for k in ("launches", "syncs", "median_step_s")}
        for impl in ("gpugrad", "gpugrad_graph") if isinstance(step.get(impl), dict)}}
tests, total = {}, dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
for xml in sorted(work.glob("*.xml")):
    try:
        root = ET.parse(xml).getroot()
    except ET.ParseError:  # a run killed while writing it
        tests[xml.stem] = {"unreadable": True}
        continue
    suite = root if root.tag == "testsuite" else root[0]
    tests[xml.stem] = {k: int(suite.get(k, 0)) for k in total}
    for k in total:
        total[k] += tests[xml.stem][k]
s["tests"] = {"total": total, "groups": tests}
if (bench := load("bench.json")) is not None:
    cuda = bench.get("devices", {}).get("cuda") or {}
    s["bench"] = {"complete": bench.get("complete"), "stopped": bench.get("stopped"),
                  "sections": sorted(set(cuda) - {"config", "device", "simulated", "note"})}
for name in ("cache_in.json", "cache_out.json"):
    if (work / name).exists():
        s.setdefault("kernel_cache", {})[name.split(".")[0]] = json.loads((work / name).read_text())
s["files"] = sorted(p.name for p in out.iterdir() if p.is_file())
tmp = out / "summary.json.part"
tmp.write_text(json.dumps(s, indent=2))
os.replace(tmp, out / "summary.json")
PY
}

# pack_cache: CUPY_CACHE_DIR as kernel-cache.tar.gz, oldest files first (stage 1 compiles gpugrad's kernels before
# anything else), stopping before the archive passes 14 MiB (the caller takes back files of at most 16 MiB).
pack_cache() {
    "$py" - "$CUPY_CACHE_DIR" "$out/kernel-cache.tar.gz" "$work/cache_out.json" <<'PY' || true
import json, os, pathlib, sys, tarfile
src, dst, info = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
files = sorted((p for p in src.rglob("*") if p.is_file()), key=lambda p: p.stat().st_mtime)
tmp, kept, limit = dst.with_name(dst.name + ".part"), 0, 14 * 2**20
with open(tmp, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
    for p in files:
        if raw.tell() > limit - 2**20:  # the next file's compressed size is unknown: keep a MiB of room
            break
        tar.add(p, arcname=str(p.relative_to(src)))
        kept += 1
os.replace(tmp, dst)
info.write_text(json.dumps({"files": kept, "of": len(files), "bytes": dst.stat().st_size}))
print(f"gpu-check: kernel cache: {kept} of {len(files)} files in {dst.name} ({dst.stat().st_size / 2**20:.1f} MiB)")
PY
}

pack_tests() {
    tar -czf "$work/tests.tar.gz" -C "$work" --exclude=tests.tar.gz --exclude='cache_*.json' . 2>/dev/null \
        && mv -f "$work/tests.tar.gz" "$out/tests.tar.gz"
}

finish() {
    pack_cache
    pack_tests
    summary "$1"
    echo "gpu-check: done, exit $1; results in $out: $(cd "$out" && ls | tr '\n' ' ')"
    rm -rf "$work"
    exit "$1"
}

if [ -n "$cache_in" ]; then
    if tar -xzf "$cache_in" -C "$CUPY_CACHE_DIR"; then
        n=$(tar -tzf "$cache_in" | grep -vc '/$')
        printf '{"path": "%s", "files": %s}\n' "$cache_in" "$n" >"$work/cache_in.json"
        echo "gpu-check: kernel cache: $n files restored from $cache_in"
    else
        echo "gpu-check: kernel cache: could not read $cache_in; starting cold"
    fi
fi
summary running

# ---- stage 1: smoke -------------------------------------------------------------------------------------------
step smoke "$smoke_s" /dev/null "$py" scripts/gpu_smoke.py "$out/smoke.json" --warm "${GPU_CHECK_WARM:-all}" \
    --parts "${GPU_CHECK_SMOKE_PARTS:-kernels,step,bench}" || status=1
pack_cache  # what stage 1 compiled comes back even if a later stage is killed
summary running
[ -n "$stopped" ] && finish 1

# ---- stage 2: the GPU tests, one pytest run per group ------------------------------------------------------------
# The project's addopts carry --benchmark-disable, which pytest rejects without pytest-benchmark: replace them, and
# use only the options that pytest (plugin autoloading, -p options) knows here.
help=$(timeout 30 "$py" -m pytest -o addopts= tests benchmarks --help 2>/dev/null)
popts=(-m "gpu and not slow" -v -p no:cacheprovider -o "addopts=-ra" --maxfail="${GPU_CHECK_MAXFAIL:-25}"
       --ignore=tests/cuda/test_gpu_check.py)
[[ $help == *--benchmark-disable* ]] && popts+=(--benchmark-disable)
[[ $help == *--timeout=* ]] && popts+=(--timeout="${GPU_CHECK_TEST_TIMEOUT:-90}")
xdist=""
[[ $help == *--numprocesses* ]] && xdist=1
has() { [[ $help == *"$1"* ]] && echo yes || echo no; }
echo "gpu-check: pytest plugins: timeout $(has --timeout=), xdist $(has --numprocesses), benchmark" \
    "$(has --benchmark-disable)"
t_tests=$(date +%s)
earlier=()  # what the groups before "tests" ran: the catch-all group leaves it out
for spec in "${groups[@]}"; do
    name=${spec%%=*}
    IFS=',' read -r -a paths <<<"${spec#*=}"
    left=$((tests_s - ($(date +%s) - t_tests)))
    if [ -n "$stopped" ] || [ "$left" -le 5 ]; then
        not_run+=("$name")
        continue
    fi
    gopts=("${popts[@]}" --junitxml="$work/$name.xml")
    [ -n "$xdist" ] && [[ $parallel == *" $name "* ]] && gopts+=(-n "${GPU_CHECK_WORKERS:-8}")
    [[ " ${paths[*]} " == *" tests "* ]] && for e in "${earlier[@]}"; do gopts+=(--ignore="$e"); done
    for p in "${paths[@]}"; do [[ $p == tests/* && $p != *::* ]] && earlier+=("$p"); done
    echo "==== gpu-check: tests: group $name ====" >>"$out/tests.log"
    step "tests:$name" "$left" "$out/tests.log" "$py" -m pytest "${gopts[@]}" "${paths[@]}" "${pytest_args[@]}"
    rc=$?
    [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ] && status=1  # 5: the narrowing selected nothing in this group
    pack_tests
    summary running
done
[ -n "$stopped" ] && finish 1

# ---- stage 3: the benchmarks -----------------------------------------------------------------------------------
step bench "$bench_s" "$out/bench.txt" \
    "$py" -m gpugrad bench --device cuda --no-progress --json "$out/bench.json" "${bench_args[@]}" || status=1
[ ${#not_run[@]} -gt 0 ] && status=1
finish "$status"
