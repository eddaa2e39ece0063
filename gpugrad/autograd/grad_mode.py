"""torch.autograd.grad_mode's names (the modes live in ``gpugrad/core/grad_mode.py``)."""
from gpugrad.core.grad_mode import (enable_grad, inference_mode, is_grad_enabled, is_inference_mode_enabled,  # noqa
                                    no_grad, set_grad_enabled)
