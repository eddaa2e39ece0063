"""``functional_call``: a Module run with other parameters and buffers, as ``torch.func.functional_call``.

    out = functional_call(model, {"weight": w, "bias": b}, (x,))   # model's own tensors are back afterwards

The given tensors replace the module's entries (by dotted name) for the call and are put back afterwards, also when
the call raises. Any tensor works, a BatchedTensor too: ``vmap(functional_call, in_dims=(None, 0, None))`` runs an
ensemble of parameter sets in one pass.
"""
from __future__ import annotations

from collections.abc import Sequence


def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *, tie_weights=True, strict=False):
    """``module(*args, **kwargs)`` with the named tensors of ``parameter_and_buffer_dicts`` (a dict, or a sequence
    of dicts with distinct keys) in place of its own. ``tie_weights``: a value given for one of several names of the
    same tensor serves them all; ``strict``: every parameter and buffer must be given, and nothing else."""
    given = _merged(parameter_and_buffer_dicts)
    args = () if args is None else args if isinstance(args, tuple) else (args,)
    names = list(_named_tensors(module))
    if tie_weights:
        given = _untied(names, given)
    if strict:
        known = {n for n, _ in names}
        errors = []
        unexpected, missing = sorted(set(given) - known), sorted(known - set(given))
        if unexpected:
            errors.append(f"Unexpected key(s): {', '.join(map(repr, unexpected))}.")
        if missing:
            errors.append(f"Missing key(s): {', '.join(map(repr, missing))}.")
        if errors:
            raise RuntimeError(f"Error(s) in reparametrizing for {type(module).__name__}:\n\t" + "\n\t".join(errors))
    restores = []
    try:
        for name, value in given.items():
            restores.append(_swap(module, name, value))
        return module(*args, **(kwargs or {}))
    finally:
        for restore in reversed(restores):
            restore()


def _merged(dicts):
    if isinstance(dicts, dict):
        return dicts
    if not isinstance(dicts, Sequence):
        raise ValueError(f"Expected parameter_and_buffer_dicts to be a dict, or a list/tuple of dicts, but got "
                         f"{type(dicts)}")
    if not all(isinstance(d, dict) for d in dicts):
        raise ValueError("Expected all elements of parameter_and_buffer_dicts to be dictionaries")
    keys = [k for d in dicts for k in d]
    repeated = list(dict.fromkeys(k for k in keys if keys.count(k) > 1))
    if repeated:
        raise ValueError(f"{repeated} appeared in multiple dictionaries; behavior of functional call is ambiguous")
    return {k: v for d in dicts for k, v in d.items()}


def _named_tensors(module, prefix=""):
    """(dotted name, tensor) of every parameter and buffer, each name of a shared one too (torch's
    remove_duplicate=False)."""
    for store in ("_parameters", "_buffers"):
        for k, t in module.__dict__[store].items():
            if t is not None:
                yield prefix + k, t
    for k, m in module.__dict__["_modules"].items():
        if m is not None:
            yield from _named_tensors(m, prefix + k + ".")


def _untied(names, given):
    groups = {}
    for name, t in names:
        groups.setdefault(id(t), set()).add(name)
    tied = {n: g for g in groups.values() if len(g) > 1 for n in g}
    out = dict(given)
    for name in [n for n in given if n in tied]:
        group = tied[name]
        if len({id(given[n]) for n in group if n in given}) > 1:
            raise ValueError(f"functional_call got multiple values for keys {sorted(group)}, which are tied. "
                             "Consider using tie_weights=False")
        out.update(dict.fromkeys(group, given[name]))
    return out


def _swap(module, name, value):
    """Put ``value`` at ``name``; returns how to put back what was there."""
    *path, leaf = name.split(".")
    owner = module
    for part in path:
        owner = getattr(owner, part)
    for store in ("_parameters", "_buffers"):
        entries = owner.__dict__.get(store)
        if entries is not None and leaf in entries:
            old = entries[leaf]
            entries[leaf] = value
            return lambda: entries.__setitem__(leaf, old)
    had, old = leaf in owner.__dict__, owner.__dict__.get(leaf)  # not a parameter or buffer: a plain attribute
    object.__setattr__(owner, leaf, value)
    return (lambda: object.__setattr__(owner, leaf, old)) if had else (lambda: owner.__dict__.pop(leaf, None))
