#!/usr/bin/env bash
# Wheelhouse for Dockerfile.cuda: gpugrad itself and every wheel of 'gpugrad[cuda,test]' (CuPy 14 with the CUDA 13
# runtime, cuBLAS, NVRTC and headers from PyPI, pytest, pytest-benchmark, matplotlib, ...) for the image's Python
# and platform, so `docker build` needs no network: run this on a machine WITH network, then build on the GPU
# machine (which has none).  About 1.4 GB, most of it the CUDA libraries (cuBLAS alone 0.45 GB).
#   scripts/wheelhouse.sh [DIR]     (default DIR: wheelhouse/ in this checkout, which git ignores)
# Any Linux or macOS machine with python3 and a recent pip will do: the target Python and platform are explicit.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/wheelhouse}
py=${PYTHON:-python3}
# Must match the FROM image of Dockerfile.cuda: python:3.12-slim-bookworm (CPython 3.12, glibc 2.36, x86-64).
python_version=3.12
glibc_minor=36
# NOTE: pip takes --platform tags literally (manylinux_2_28 does not admit a manylinux2014 wheel), so list every
# manylinux level the image's glibc runs, as pip does for the machine it runs on.
platforms=()
for ((minor = glibc_minor; minor >= 5; minor--)); do
    platforms+=(--platform "manylinux_2_${minor}_x86_64")
done
platforms+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)

mkdir -p "$dir"
rm -f "$dir"/gpugrad-*.whl  # the project's wheel is rebuilt every time; third-party wheels are reused
"$py" -m pip wheel --no-deps --wheel-dir "$dir" "$root"
wheel=$(ls "$dir"/gpugrad-*.whl)
version=$(basename "$wheel" | cut -d- -f2)
"$py" -m pip download --dest "$dir" --find-links "$dir" --only-binary=:all: --implementation cp \
    --python-version "$python_version" "${platforms[@]}" "gpugrad[cuda,test]==$version"
echo "wheelhouse: $(find "$dir" -name '*.whl' | wc -l) wheels, $(du -sh "$dir" | cut -f1) in $dir"
