"""Grad modes: whether ops record the graph. Each is a context manager and a decorator, as in PyTorch."""
from __future__ import annotations

import functools
import inspect
import threading


class _State(threading.local):
    enabled = True
    inference = False


STATE = _State()


def is_grad_enabled() -> bool:
    return STATE.enabled


def is_inference_mode_enabled() -> bool:
    return STATE.inference


class _Mode:
    """Base: subclasses say what to set on entry; exit restores what was there."""

    _bare = True  # usable as a bare decorator, as torch's: @no_grad (no parentheses) gets the function itself

    def __new__(cls, *args):
        if cls._bare and len(args) == 1 and callable(args[0]):
            return cls()(args[0])
        return super().__new__(cls)

    def __init__(self):
        pass

    def _enter(self):
        raise NotImplementedError

    def __enter__(self):
        self._prev = (STATE.enabled, STATE.inference)
        self._enter()
        return self

    def __exit__(self, *exc):
        STATE.enabled, STATE.inference = self._prev
        return False

    def __call__(self, fn):
        if inspect.isgeneratorfunction(fn):
            return self._around_generator(fn)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__(*self._args):
                return fn(*args, **kwargs)

        return wrapper

    def _around_generator(self, fn):
        """As torch: the mode holds while the generator's body runs, and what the caller had is back while it is
        suspended at a ``yield`` (values sent in, exceptions thrown in and close() included)."""
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            gen = fn(*args, **kwargs)
            step, value = gen.send, None
            try:
                while True:
                    with self.__class__(*self._args):
                        out = step(value)
                    try:
                        value, step = (yield out), gen.send
                    except GeneratorExit:
                        with self.__class__(*self._args):
                            gen.close()
                        raise
                    except BaseException as e:  # noqa: BLE001 - thrown into us: passed on to the generator
                        value, step = e, gen.throw
            except StopIteration as stop:
                return stop.value

        return wrapper

    _args = ()


class no_grad(_Mode):
    """Ops inside record nothing: results have ``requires_grad=False`` and no ``grad_fn``."""

    def _enter(self):
        STATE.enabled = False


class enable_grad(_Mode):
    def _enter(self):
        STATE.enabled = True


class set_grad_enabled(_Mode):
    _bare = False

    def __init__(self, mode: bool):
        self._args = (mode,)
        self.mode = bool(mode)
        # Like torch: calling it as a function takes effect at once, not only inside ``with``.
        self._prev_fn = (STATE.enabled, STATE.inference)
        STATE.enabled = self.mode

    def __enter__(self):
        self._prev = self._prev_fn
        STATE.enabled = self.mode
        return self

    def __call__(self, fn):
        STATE.enabled, STATE.inference = self._prev_fn  # used as a decorator: undo the immediate effect
        return super().__call__(fn)


class inference_mode(_Mode):
    """no_grad, and tensors made inside are inference tensors: they can never join a graph later.

    ``inference_mode(False)`` is the opposite, as in torch: grad enabled and inference off, even inside
    ``inference_mode()`` or ``no_grad``.
    """

    def __init__(self, mode: bool = True):
        self._args = (mode,)
        self.mode = bool(mode)

    def _enter(self):
        STATE.enabled = not self.mode
        STATE.inference = self.mode
