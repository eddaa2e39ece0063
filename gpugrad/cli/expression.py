"""What ``gpugrad explain EXPR`` evaluates: expressions of a small language of their own, parsed with ``ast`` and
evaluated node by node -- never Python's ``eval``, so EXPR can reach nothing but the math below.  EXPR may use

- the names its ``--set`` options bind (tensors), and numbers;
- ``+ - * / ** @`` between them and unary ``-`` and ``+``;
- calls of the functions in FUNCTIONS (``exp(x)``, also spelt ``gpugrad.exp(x)``) and of the tensor methods in
  METHODS (``x.sum(0)``), with tensors, numbers and tuples or lists of them as arguments, ``True``/``False`` too;
- indexing and slicing (``x[0]``, ``x[:, 1:3]``, ``x[..., None]``) and the attributes in ATTRIBUTES (``x.T``).

Anything else (another name, a string, a comparison, a lambda, a comprehension, an attribute outside ATTRIBUTES,
so never a dunder) is an ExpressionError naming the construct and its column.  EXPR is at most MAX_CHARS long and
nested at most MAX_DEPTH deep; a ``--set`` value (``parse_value``) is a number or nested lists of numbers.
"""
from __future__ import annotations

import ast
import operator

import gpugrad
import gpugrad.nn.functional as F
from gpugrad import Tensor
from gpugrad.ops.declarations import POINTWISE

MAX_CHARS = 5000
MAX_DEPTH = 150  # syntax-tree levels (a + b is 3: BinOp, Name, its Load); Python's parser gives up near 1,000
MAX_VALUE_CHARS = 1_000_000  # a --set value: a list of ~100,000 numbers
MAX_VALUE_DEPTH = 32  # nesting of a --set value: dimensions (and unary signs)

# The math a user writes: every pointwise op of the registry (ops/declarations.py) that has a public name, and
# these reductions, activations, losses, products and reshapes.
_MORE = ("abs", "neg", "square", "pow", "clamp", "maximum", "minimum", "add", "sub", "mul", "div",
         "sum", "mean", "prod", "amax", "amin", "max", "min", "logsumexp", "norm", "var", "std", "cumsum", "cumprod",
         "trace", "softmax", "log_softmax", "linear", "layer_norm", "mse_loss", "l1_loss", "smooth_l1_loss",
         "huber_loss", "cross_entropy", "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div",
         "matmul", "mm", "mv", "dot", "outer", "t", "transpose", "reshape", "flatten", "squeeze", "unsqueeze",
         "permute", "cat", "stack", "diagonal", "tril", "triu", "flip", "roll")
FUNCTIONS = {name: fn for name in (*sorted(POINTWISE), *_MORE)
             if callable(fn := getattr(gpugrad, name, None) or getattr(F, name, None))}
METHODS = frozenset(name for name in (*FUNCTIONS, "detach", "view") if callable(getattr(Tensor, name, None)))
ATTRIBUTES = ("T", "mT", "values", "indices")  # .values / .indices: of max(dim) and the like
OPERATORS = {ast.Add: ("+", operator.add), ast.Sub: ("-", operator.sub), ast.Mult: ("*", operator.mul),
             ast.Div: ("/", operator.truediv), ast.Pow: ("**", operator.pow), ast.MatMult: ("@", operator.matmul)}
UNARY = {ast.USub: ("-", operator.neg), ast.UAdd: ("+", operator.pos)}
_SYMBOLS = {ast.FloorDiv: "//", ast.Mod: "%", ast.LShift: "<<", ast.RShift: ">>", ast.BitOr: "|", ast.BitAnd: "&",
            ast.BitXor: "^", ast.Not: "not", ast.Invert: "~"}
_CONSTRUCTS = {ast.Compare: "a comparison", ast.BoolOp: "'and' / 'or'", ast.Lambda: "a lambda",
               ast.IfExp: "a conditional expression (... if ... else ...)", ast.ListComp: "a list comprehension",
               ast.SetComp: "a set comprehension", ast.DictComp: "a dict comprehension",
               ast.GeneratorExp: "a generator expression", ast.Dict: "a dict", ast.Set: "a set",
               ast.JoinedStr: "an f-string", ast.NamedExpr: "an assignment (:=)", ast.Starred: "unpacking (*...)",
               ast.Await: "await", ast.Yield: "yield", ast.YieldFrom: "yield"}
ALLOWED = ("the --set inputs, numbers, + - * / ** @, unary - and +, calls of gpugrad's math functions and tensor "
           "methods, indexing and .T (`gpugrad explain --help` lists the functions)")


class ExpressionError(ValueError):
    """EXPR (or a --set value) outside the language: the message names the construct."""


def _parse(text, limit, depth, what):
    """The syntax tree of ``text`` (one expression), after checking its length and, without recursion, its depth."""
    if len(text) > limit:
        raise ExpressionError(f"{what} is {len(text):,} characters long; at most {limit:,} are allowed")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (RecursionError, MemoryError):  # CPython's parser gives up on deep nesting this way
        raise ExpressionError(f"{what} is nested too deeply (at most {depth} levels)") from None
    except SyntaxError as e:
        if "too many nested" in str(e):
            raise ExpressionError(f"{what} is nested too deeply (at most {depth} levels)") from None
        where = f" (column {e.offset})" if e.offset else ""  # NOTE: CPython gives 0 for an incomplete one
        raise ExpressionError(f"{what} is not an expression: {e.msg}{where}") from None
    stack = [(tree.body, 1)]
    while stack:
        node, level = stack.pop()
        if level > depth:
            raise ExpressionError(f"{what} is nested more than {depth} levels deep")
        stack.extend((child, level + 1) for child in ast.iter_child_nodes(node))
    return tree.body


def parse_value(text):
    """A ``--set`` value: a number or (nested) lists of numbers, as Python lists (no name, call or operator)."""
    def value(node):
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.UnaryOp) and type(node.op) in UNARY:
            inner = value(node.operand)
            if isinstance(inner, list):
                raise ExpressionError("a sign applies to a number, not a list")
            return UNARY[type(node.op)][1](inner)
        if isinstance(node, (ast.List, ast.Tuple)):
            return [value(x) for x in node.elts]
        raise ExpressionError(f"the value must be a number or a (nested) list of numbers; "
                              f"{_describe(node).replace(' here', '')} (column {node.col_offset + 1})")

    return value(_parse(text, MAX_VALUE_CHARS, MAX_VALUE_DEPTH, "the value"))


def evaluate(text, names):
    """The value of EXPR ``text`` with ``names`` (name -> tensor) bound; ExpressionError for what it may not use."""
    return _Evaluator(names).value(_parse(text, MAX_CHARS, MAX_DEPTH, "EXPR"))


def _describe(node):
    """The construct ``node`` is, as an error names it."""
    if isinstance(node, ast.Constant):
        kind = {str: "a string", bytes: "a bytes literal", complex: "a complex number", bool: "True / False",
                type(None): "None", type(...): "..."}.get(type(node.value), type(node.value).__name__)
        return f"{kind} ({node.value!r}) is not allowed here"
    if isinstance(node, (ast.BinOp, ast.UnaryOp)):
        return f"the operator {_SYMBOLS.get(type(node.op), type(node.op).__name__)} is not allowed"
    if isinstance(node, ast.Attribute):
        return f"the attribute .{node.attr} is not allowed (only {', '.join(ATTRIBUTES)})"
    return f"{_CONSTRUCTS.get(type(node), type(node).__name__)} is not allowed"


def _number(v):
    return f"({v!r})" if v < 0 else repr(v)


class _Evaluator:
    """Evaluates the nodes of ALLOWED, one method each; ``place`` is where a node stands: "value", "argument" of a
    call (tuples, lists and True/False allowed), or "index" (also slices, None and ...)."""

    def __init__(self, names):
        self.names = names

    def refuse(self, node, why=None):
        # an attribute's column is its name's (the node starts where the object it is read from starts)
        column = node.end_col_offset - len(node.attr) + 1 if isinstance(node, ast.Attribute) else node.col_offset + 1
        return ExpressionError(f"EXPR: {why or _describe(node)} (column {column}); EXPR may use {ALLOWED}")

    def value(self, node, place="value"):
        visit = getattr(self, f"_{type(node).__name__}", None)
        if visit is None:
            raise self.refuse(node)
        return visit(node, place)

    def _Constant(self, node, place):
        v = node.value
        if type(v) in (int, float) or (type(v) is bool and place != "value") or (
                place == "index" and (v is None or v is ...)):
            return v
        raise self.refuse(node)

    def _Name(self, node, place):
        if node.id in self.names:
            return self.names[node.id]
        if node.id in FUNCTIONS:
            raise self.refuse(node, f"the function {node.id} is not called (write {node.id}(...))")
        inputs = ", ".join(self.names) or "none"
        raise self.refuse(node, f"unknown name {node.id!r} (the --set inputs are: {inputs})")

    def _operand(self, node):
        v = self.value(node)
        if not isinstance(v, (Tensor, int, float)) or isinstance(v, bool):
            raise self.refuse(node, f"an operand is a {type(v).__name__}, not a tensor or a number")
        return v

    def _BinOp(self, node, place):
        if type(node.op) not in OPERATORS:
            raise self.refuse(node)
        symbol, op = OPERATORS[type(node.op)]
        left, right = self._operand(node.left), self._operand(node.right)
        if type(node.op) is ast.Pow and not isinstance(left, Tensor) and not isinstance(right, Tensor):
            left = float(left)  # NOTE: Python's exact integers would make 9 ** 9 ** 9 a very long computation
        try:
            result = op(left, right)
        except (OverflowError, ZeroDivisionError) as e:  # numbers only: a tensor's op gives inf / nan instead
            raise self.refuse(node, f"{_number(left)} {symbol} {_number(right)} has no value ({e})") from None
        if isinstance(result, complex):
            raise self.refuse(node, f"{_number(left)} {symbol} {_number(right)} is a complex number")
        return result

    def _UnaryOp(self, node, place):
        if type(node.op) not in UNARY:
            raise self.refuse(node)
        return UNARY[type(node.op)][1](self._operand(node.operand))

    def _sequence(self, node, place):
        if place == "value":
            raise self.refuse(node, f"a {type(node).__name__.lower()} is allowed only as an argument or an index")
        items = [self.value(x, place) for x in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)

    _Tuple = _List = _sequence

    def _Slice(self, node, place):
        if place != "index":
            raise self.refuse(node, "a slice is allowed only in an index")
        return slice(*(None if x is None else self.value(x, "index") for x in (node.lower, node.upper, node.step)))

    def _Subscript(self, node, place):
        return self.value(node.value)[self.value(node.slice, "index")]

    def _Attribute(self, node, place):
        owner = self.value(node.value)  # NOTE: the parts first: an error names the first bad construct as read
        if node.attr not in ATTRIBUTES:
            raise self.refuse(node)
        return getattr(owner, node.attr)

    def _Call(self, node, place):
        fn, where = node.func, node.func
        if isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name) and fn.value.id == "gpugrad" \
                and "gpugrad" not in self.names:
            fn = ast.Name(fn.attr, col_offset=fn.col_offset)  # gpugrad.exp(x) is exp(x)
        if isinstance(fn, ast.Name):
            if fn.id not in FUNCTIONS:
                raise self.refuse(where, f"unknown function {fn.id!r}")
            call = FUNCTIONS[fn.id]
        elif isinstance(fn, ast.Attribute):
            owner = self.value(fn.value)
            if fn.attr not in METHODS:
                raise self.refuse(where, f"the method .{fn.attr}() is not allowed")
            if not isinstance(owner, Tensor):
                raise self.refuse(where, f"the method .{fn.attr}() of a {type(owner).__name__} (methods are "
                                  "called on tensors)")
            call = getattr(owner, fn.attr)
        else:
            raise self.refuse(where, "only gpugrad's functions and tensor methods may be called")
        args = [self.value(a, "argument") for a in node.args]
        kwargs = {}
        for kw in node.keywords:
            if kw.arg is None or kw.arg.startswith("_"):
                raise self.refuse(kw.value, "keyword unpacking (**...)" if kw.arg is None else
                                  f"the keyword {kw.arg}= is not allowed")
            kwargs[kw.arg] = self.value(kw.value, "argument")
        return call(*args, **kwargs)
