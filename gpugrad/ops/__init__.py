"""The ops, one module per family (arith, reduce, movement, ...), each an ``Op`` class registered by name.

This package's namespace stays empty on purpose: the backend reads ``ops/declarations.py`` (the pointwise ops'
table) without loading the ops. ``gpugrad/ops/catalog.py`` imports every family, so every op is registered once
``gpugrad`` is imported; ``REGISTRY`` (``core/registry.py``) maps names to op classes.
"""
from gpugrad.core.registry import REGISTRY  # noqa: F401
