#!/usr/bin/env bash
# GPU check: the GPU test suite and the kernel benchmarks on a machine with a CUDA GPU, from this checkout,
# without installing anything (it needs python3 with NumPy, CuPy for CUDA 13, pytest; PyTorch and
# pytest-benchmark are used when present).  Results land in OUTDIR:
#   gpu-tests.xml (JUnit), gpu-tests.log, bench.json + bench.txt (gpugrad bench), device.json, summary.json.
# Exit status: 0 all passed, 1 a test or benchmark failed, 3 no usable GPU here (said clearly, nothing run).
# Budget: well under 5 minutes on one H200 (tests ~2 min, benchmarks ~1 min).
set -uo pipefail
out=${1:?usage: scripts/gpu-check.sh OUTDIR}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$root"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
unset GPUGRAD_DEVICE
py=${PYTHON:-python3}

if ! "$py" - "$out/device.json" <<'PY'
import json, sys
import gpugrad
from gpugrad.backend import get_backend
if not gpugrad.cuda.is_available():
    print(f"gpu-check: no usable CUDA GPU on this machine: {gpugrad.cuda.unavailable_reason()}")
    print("gpu-check: nothing was run; run this script on a machine with an NVIDIA GPU and CuPy for CUDA 13.")
    sys.exit(3)
xp = get_backend("cuda").xp
props = xp.cuda.runtime.getDeviceProperties(0)
info = {"name": props["name"].decode() if isinstance(props["name"], bytes) else props["name"],
        "compute_capability": f"{props['major']}.{props['minor']}", "memory_bytes": props["totalGlobalMem"],
        "cupy": xp.__version__, "count": gpugrad.cuda.device_count()}
json.dump(info, open(sys.argv[1], "w"), indent=2)
print("gpu-check: device", info)
PY
then
    exit 3
fi

status=0
echo "gpu-check: GPU tests (pytest -m gpu)"
timeout 240 "$py" -m pytest -m gpu -q -p no:cacheprovider --junitxml="$out/gpu-tests.xml" tests benchmarks \
    2>&1 | tee "$out/gpu-tests.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

echo "gpu-check: kernel benchmarks (gpugrad bench)"
timeout 150 "$py" -m gpugrad bench --device all --json "$out/bench.json" 2>&1 | tee "$out/bench.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

"$py" - "$out" "$status" <<'PY'
import json, pathlib, sys, xml.etree.ElementTree as ET
out, status = pathlib.Path(sys.argv[1]), int(sys.argv[2])
summary = {"status": status}
if (out / "gpu-tests.xml").exists():
    suite = ET.parse(out / "gpu-tests.xml").getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    summary["tests"] = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
if (out / "bench.json").exists():
    summary["bench"] = "bench.json"
json.dump(summary, open(out / "summary.json", "w"), indent=2)
print("gpu-check:", json.dumps(summary))
PY
exit $status
