#!/usr/bin/env bash
# GPU check: the GPU tests and the CUDA benchmarks on a machine with a CUDA GPU, from this checkout, without
# installing anything (python3 with NumPy, CuPy for CUDA 13 and pytest; PyTorch and pytest-benchmark are used when
# present).  Results land in OUTDIR as they are produced:
#   device.json, gpu-tests.xml (JUnit) + gpu-tests.log, bench.json (rewritten after every finished section, so a
#   timeout keeps what was measured) + bench.txt, summary.json (exit status, test counts, seconds per step).
# Exit status: 0 all passed, 1 a test or benchmark failed or timed out, 3 no usable GPU here (said why, nothing run).
# Budget: under 5 minutes on a cold kernel cache (a CuPy RawModule compiles in ~5 s, an ElementwiseKernel variant
# in ~0.3 s); the compiled kernels are kept in .cache/ of this checkout, so later runs skip that.
# Narrowing (shell words, quotes honoured): GPU_CHECK_PYTEST_ARGS (default: tests benchmarks), appended after
# `pytest -m gpu`; GPU_CHECK_BENCH_ARGS (default: none; e.g. --quick), appended after `gpugrad bench --device cuda`.
set -uo pipefail
out=${1:?usage: scripts/gpu-check.sh OUTDIR}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$root" || exit 1
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
unset GPUGRAD_DEVICE
py=${PYTHON:-python3}
export CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-$root/.cache/cupy} GPUGRAD_EMU_CACHE=${GPUGRAD_EMU_CACHE:-$root/.cache/emu}
mkdir -p "$CUPY_CACHE_DIR" "$GPUGRAD_EMU_CACHE"
echo "gpu-check: kernel caches: CUPY_CACHE_DIR=$CUPY_CACHE_DIR GPUGRAD_EMU_CACHE=$GPUGRAD_EMU_CACHE"
pytest_args=() bench_args=()  # split as shell words, so quotes work: GPU_CHECK_PYTEST_ARGS="-k 'relu and not bwd'"
eval "pytest_args=(${GPU_CHECK_PYTEST_ARGS-tests benchmarks})"
eval "bench_args=(${GPU_CHECK_BENCH_ARGS-})"
# A result file from an earlier run must not pass for one of this run.
rm -f "$out"/{device.json,gpu-tests.xml,gpu-tests.log,bench.json,bench.txt,summary.json}

steps=()   # "name exit seconds", for summary.json

# step NAME LIMIT LOG COMMAND...: run COMMAND with its output shown and copied to LOG; at LIMIT seconds it gets
# SIGINT, which pytest and gpugrad bench turn into a clean stop that keeps their partial results (KILL 3 s later).
step() {
    local name=$1 limit=$2 log=$3 t0 rc secs
    shift 3
    echo "gpu-check: $name: $* (at most ${limit} s)"
    t0=$(date +%s.%N)
    timeout -s INT -k 3 "$limit" "$@" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        echo "gpu-check: $name: timed out after ${limit} s (partial results kept)"
    fi
    echo "gpu-check: $name: exit $rc after ${secs} s"
    steps+=("$name $rc $secs")
    return "$rc"
}

# Limits, in seconds: device 25 + help probe 15 + tests 165 + bench 70 + 3 x 3 KILL grace = 284 < 300.
step device 25 /dev/null "$py" - "$out" <<'PY'
import json, pathlib, sys
import gpugrad
from gpugrad.bench.report import cuda_device_info
out = pathlib.Path(sys.argv[1])
if not gpugrad.cuda.is_available():
    reason = gpugrad.cuda.unavailable_reason()
    print(f"gpu-check: no usable CUDA GPU on this machine: {reason}")
    print("gpu-check: nothing was run; run this script on a machine with an NVIDIA GPU and CuPy for CUDA 13.")
    json.dump({"status": 3, "no_gpu": reason}, open(out / "summary.json", "w"), indent=2)
    sys.exit(3)
info = cuda_device_info()
json.dump(info, open(out / "device.json", "w"), indent=2)
print("gpu-check: device", json.dumps(info))
PY
rc=$?
if [ "$rc" -ne 0 ]; then
    if [ "$rc" -ne 3 ]; then  # a crash or a hang in CUDA's initialisation: not usable either
        echo "gpu-check: the device check itself failed (exit $rc): no usable GPU here; nothing was run."
        printf '{"status": 3, "no_gpu": "the device check failed (exit %s)"}\n' "$rc" >"$out/summary.json"
    fi
    exit 3
fi

status=0
# The project's addopts carry --benchmark-disable, which pytest rejects without pytest-benchmark: replace them, and
# disable benchmarking only where pytest (plugin autoloading, -p options) knows the option.
popts=(-m gpu -q -p no:cacheprovider -o "addopts=-ra" --junitxml="$out/gpu-tests.xml")
help=$(timeout 15 "$py" -m pytest -o addopts= "${pytest_args[@]}" --help 2>/dev/null)
[[ $help == *--benchmark-disable* ]] && popts+=(--benchmark-disable)
step tests 165 "$out/gpu-tests.log" "$py" -m pytest "${popts[@]}" "${pytest_args[@]}" || status=1

step bench 70 "$out/bench.txt" \
    "$py" -m gpugrad bench --device cuda --no-progress --json "$out/bench.json" "${bench_args[@]}" || status=1

"$py" - "$out" "$status" "${steps[@]}" <<'PY'
import json, pathlib, sys, xml.etree.ElementTree as ET
out, status = pathlib.Path(sys.argv[1]), int(sys.argv[2])
summary = {"status": status, "steps": {}}
for entry in sys.argv[3:]:
    name, rc, secs = entry.rsplit(" ", 2)
    summary["steps"][name] = {"exit": int(rc), "seconds": float(secs), "timed_out": rc in ("124", "137")}
if (out / "gpu-tests.xml").exists():
    suite = ET.parse(out / "gpu-tests.xml").getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    summary["tests"] = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
if (out / "bench.json").exists():
    summary["bench"] = {"file": "bench.json", "complete": json.loads((out / "bench.json").read_text()).get("complete")}
json.dump(summary, open(out / "summary.json", "w"), indent=2)
print("gpu-check:", json.dumps(summary))
PY
exit $status
