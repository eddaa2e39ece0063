"""Test tooling for gpugrad (CPU emulation of the CUDA kernels)."""
