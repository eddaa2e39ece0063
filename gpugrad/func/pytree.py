"""Nested Python containers of tensors (torch's pytrees): tuples, lists, dicts and named tuples are nodes, None is a
node without leaves, anything else is a leaf.

    leaves, spec = flatten({"w": w, "b": (b1, b2)})   # [w, b1, b2]
    unflatten([2 * l for l in leaves], spec)            # {"w": 2w, "b": (2b1, 2b2)}
    broadcast_prefix((None, 0), spec_of_args)           # in_dims given for a prefix of the tree, one per leaf
"""
from __future__ import annotations

from typing import Any, NamedTuple


class Spec(NamedTuple):
    kind: Any  # tuple, list, dict, a namedtuple class, type(None), or None for a leaf
    context: Any  # the dict's keys
    children: tuple

    def __repr__(self):
        if self.kind is None:
            return "*"
        if self.kind is dict:
            return "{" + ", ".join(f"{k!r}: {c!r}" for k, c in zip(self.context, self.children)) + "}"
        if self.kind is type(None):
            return "None"
        inner = ", ".join(map(repr, self.children))
        return f"[{inner}]" if self.kind is list else f"({inner}{',' if len(self.children) == 1 else ''})"


LEAF = Spec(None, None, ())


def _node(tree):
    """(kind, context, children) of a node, or None for a leaf."""
    if isinstance(tree, dict):
        return dict, tuple(tree), tuple(tree.values())
    if isinstance(tree, tuple):
        return type(tree) if hasattr(tree, "_fields") else tuple, None, tree
    if isinstance(tree, list):
        return list, None, tuple(tree)
    if tree is None:
        return type(None), None, ()
    return None


def flatten(tree):
    """(the leaves in order, the structure)."""
    leaves = []

    def walk(t):
        node = _node(t)
        if node is None:
            leaves.append(t)
            return LEAF
        kind, context, children = node
        return Spec(kind, context, tuple(walk(c) for c in children))

    return leaves, walk(tree)


def unflatten(leaves, spec):
    it = iter(leaves)

    def build(s):
        if s.kind is None:
            return next(it)
        children = [build(c) for c in s.children]
        if s.kind is dict:
            return dict(zip(s.context, children))
        if s.kind is type(None):
            return None
        if s.kind is tuple or s.kind is list:
            return s.kind(children)
        return s.kind(*children)  # a named tuple

    return build(spec)


def num_leaves(spec):
    return 1 if spec.kind is None else sum(num_leaves(c) for c in spec.children)


def broadcast_prefix(prefix, spec):
    """One value per leaf of ``spec`` from ``prefix``, a tree whose leaves stand for whole subtrees (torch's
    ``in_dims=(None, 0)`` for arguments (dict, tensor)); None where the structures do not match."""
    out = []

    def walk(p, s):
        node = _node(p)
        if node is None or node[0] is type(None) and s.kind is not type(None):  # a leaf (or None) covers s
            out.extend([p] * num_leaves(s))
            return True
        kind, context, children = node
        if kind is not s.kind or len(children) != len(s.children):
            return False
        if kind is dict:  # matched by key
            if set(context) != set(s.context):
                return False
            children = tuple(p[k] for k in s.context)
        return all(walk(c, cs) for c, cs in zip(children, s.children))

    return out if walk(prefix, spec) else None
