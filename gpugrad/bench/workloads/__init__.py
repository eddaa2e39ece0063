"""What ``gpugrad bench`` and ``benchmarks/*.py`` measure, one module per family: ``kernels`` (every launcher,
against a peak copy), ``matmul`` (the MLP's GEMMs, against a large one), ``ops`` (autograd ops, forward and backward),
``mlp`` (the training step), ``engine`` (per-op overhead) and ``optim`` (an optimizer step); over ``inputs`` (seeded
arrays, byte counts), ``baselines`` (the hand-written array code) and ``torch_peer`` (PyTorch, when installed).

Every workload comes in up to three implementations, run side by side in one process so that each figure has its
reference measured under the same load on a shared machine:

- ``kernel``: the launcher the device's backend runs (``backend.kernels``: the NumPy reference on the CPU, the
  hand-written CUDA kernel on CUDA); at op level ``gpugrad``, the autograd op;
- ``baseline``: the same math written by hand against ``xp`` (NumPy on the CPU, CuPy on CUDA), as one would
  write it without gpugrad;
- ``torch``: PyTorch eager, when installed (and built with CUDA, for the cuda device; never on the simulated one).

``gpugrad bench`` (``gpugrad/cli/bench.py``, through ``gpugrad.bench.suites``) and the pytest-benchmark suites in
``benchmarks/`` both build their workloads here, so both time the same thing.
"""
