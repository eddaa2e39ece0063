"""Tensor's methods by family, as mixin classes that ``gpugrad/_tensor.py`` puts together (with the methods the op
registry generates). They sit above the ops and call them; nothing below imports them."""
