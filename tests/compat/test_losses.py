"""Losses as torch users call them, each run with torch and with gpugrad and compared (tests/compat/harness.py):
cross-entropy with class weights, ignore_index, label smoothing, probability targets and (N, C, d1, ...) inputs;
NLL, BCE and BCE-with-logits, L1, MSE, smooth L1, Huber and KL divergence, as functions and as modules, their
gradients, and the errors torch raises for bad targets, weights and options."""
from __future__ import annotations

import pytest

from tests.compat.harness import check, compat


def _logits(torch, requires_grad=True):
    return torch.tensor([[1.0, -2.0, 0.5, 3.0], [0.0, 0.3, -1.0, 2.0], [2.5, 1.0, 1.5, -0.5]],
                        requires_grad=requires_grad)


def _targets(torch):
    return torch.tensor([3, 0, 2])


def _loss_and_grad(torch, loss, x):
    loss.backward()
    return loss, x.grad


# --- cross_entropy -------------------------------------------------------------------------------------------------

@compat
def test_cross_entropy_mean_and_its_gradient(torch):
    x = _logits(torch)
    return _loss_and_grad(torch, torch.nn.functional.cross_entropy(x, _targets(torch)), x)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_reductions(reduction):
    check(lambda torch: torch.nn.functional.cross_entropy(_logits(torch, False), _targets(torch), reduction=reduction))


@compat
def test_cross_entropy_class_weights_divide_the_mean_by_the_summed_weights(torch):
    x = _logits(torch)
    w = torch.tensor([1.0, 2.0, 0.5, 3.0])
    return _loss_and_grad(torch, torch.nn.functional.cross_entropy(x, _targets(torch), weight=w), x)


@compat
def test_cross_entropy_ignore_index_drops_rows(torch):
    x = _logits(torch)
    t = torch.tensor([3, -100, 2])
    return _loss_and_grad(torch, torch.nn.functional.cross_entropy(x, t), x)


@compat
def test_cross_entropy_ignore_index_as_a_padding_class(torch):
    x = _logits(torch)
    loss = torch.nn.functional.cross_entropy(x, torch.tensor([0, 0, 2]), ignore_index=0, reduction="sum")
    return _loss_and_grad(torch, loss, x)


@compat
def test_cross_entropy_every_row_ignored_is_nan(torch):
    return torch.nn.functional.cross_entropy(_logits(torch, False), torch.tensor([-100, -100, -100]))


@compat
def test_cross_entropy_label_smoothing(torch):
    x = _logits(torch)
    return _loss_and_grad(torch, torch.nn.functional.cross_entropy(x, _targets(torch), label_smoothing=0.1), x)


@compat
def test_cross_entropy_label_smoothing_with_weights_and_ignore_index(torch):
    x = _logits(torch)
    loss = torch.nn.functional.cross_entropy(x, torch.tensor([3, -100, 1]), weight=torch.tensor([1.0, 2.0, 0.5, 3.0]),
                                             label_smoothing=0.25)
    return _loss_and_grad(torch, loss, x)


@compat
def test_cross_entropy_probability_targets(torch):
    x = _logits(torch)
    p = torch.tensor([[0.1, 0.2, 0.3, 0.4], [1.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]])
    return _loss_and_grad(torch, torch.nn.functional.cross_entropy(x, p, label_smoothing=0.2), x)


@compat
def test_cross_entropy_probability_targets_with_weights_no_reduction(torch):
    p = torch.tensor([[0.1, 0.2, 0.3, 0.4], [1.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]])
    return torch.nn.functional.cross_entropy(_logits(torch, False), p, weight=torch.tensor([1.0, 2.0, 0.5, 3.0]),
                                             reduction="none")


@compat
def test_cross_entropy_of_sequences_n_c_d(torch):
    x = torch.arange(24.0).reshape(2, 3, 4).sin().requires_grad_()
    t = torch.tensor([[0, 1, 2, 1], [2, 2, 0, -100]])
    return _loss_and_grad(torch, torch.nn.functional.cross_entropy(x, t), x)


@compat
def test_cross_entropy_of_images_keeps_the_spatial_shape(torch):
    x = torch.arange(36.0).reshape(1, 3, 3, 4).cos()
    t = torch.tensor([[[0, 1, 2, 1], [2, 2, 0, 0], [1, 1, 1, 0]]])
    return torch.nn.functional.cross_entropy(x, t, reduction="none")


@compat
def test_cross_entropy_of_one_unbatched_sample(torch):
    x = torch.tensor([1.0, 2.0, 0.5], requires_grad=True)
    return _loss_and_grad(torch, torch.nn.functional.cross_entropy(x, torch.tensor(1)), x)


@compat
def test_cross_entropy_loss_module(torch):
    x = _logits(torch)
    crit = torch.nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0, 0.5, 3.0]), ignore_index=1, label_smoothing=0.05)
    return _loss_and_grad(torch, crit(x, torch.tensor([3, 1, 2])), x)


@compat
def test_cross_entropy_loss_module_keeps_its_weight_as_a_buffer(torch):
    crit = torch.nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0]))
    return list(crit.state_dict()), crit.weight, crit.reduction, crit.ignore_index


@compat
def test_cross_entropy_of_uint8_targets(torch):
    return torch.nn.functional.cross_entropy(_logits(torch, False), torch.tensor([3, 0, 2], dtype=torch.uint8))


@compat
def test_cross_entropy_float64(torch):
    x = _logits(torch, False).double().requires_grad_()
    return _loss_and_grad(torch, torch.nn.functional.cross_entropy(x, _targets(torch), label_smoothing=0.3), x)


@compat
def test_cross_entropy_loss_item_is_a_python_float(torch):
    return torch.nn.functional.cross_entropy(_logits(torch, False), _targets(torch)).item()


@compat
def test_cross_entropy_target_out_of_range_is_an_index_error(torch):
    return torch.nn.functional.cross_entropy(_logits(torch, False), torch.tensor([0, 4, 1]))


@compat
def test_cross_entropy_batch_size_mismatch_is_a_value_error(torch):
    return torch.nn.functional.cross_entropy(_logits(torch, False), torch.tensor([0, 1]))


@compat
def test_cross_entropy_unknown_reduction_is_a_value_error(torch):
    return torch.nn.functional.cross_entropy(_logits(torch, False), _targets(torch), reduction="avg")


@compat
def test_cross_entropy_label_smoothing_above_one_is_an_error(torch):
    return torch.nn.functional.cross_entropy(_logits(torch, False), _targets(torch), label_smoothing=1.5)


@compat
def test_cross_entropy_weight_of_the_wrong_size_is_an_error(torch):
    return torch.nn.functional.cross_entropy(_logits(torch, False), _targets(torch), weight=torch.ones(3))


@compat
def test_cross_entropy_float_targets_of_another_shape_are_an_error(torch):
    return torch.nn.functional.cross_entropy(_logits(torch, False), torch.tensor([3.0, 0.0, 2.0]))


@compat
def test_cross_entropy_ignore_index_with_probability_targets_is_an_error(torch):
    return torch.nn.functional.cross_entropy(_logits(torch, False), _logits(torch, False).softmax(1), ignore_index=1)


@compat
def test_cross_entropy_spatial_target_of_the_wrong_shape_is_an_error(torch):
    return torch.nn.functional.cross_entropy(torch.zeros(2, 3, 4), torch.zeros(2, 5, dtype=torch.long))


# --- nll_loss ------------------------------------------------------------------------------------------------------

@compat
def test_nll_of_log_softmax_is_cross_entropy(torch):
    x = _logits(torch)
    loss = torch.nn.functional.nll_loss(torch.nn.functional.log_softmax(x, dim=1), _targets(torch))
    return _loss_and_grad(torch, loss, x)


@compat
def test_nll_loss_weights_and_ignore_index(torch):
    x = _logits(torch)
    loss = torch.nn.functional.nll_loss(x, torch.tensor([3, 0, 1]), weight=torch.tensor([1.0, 2.0, 0.5, 3.0]),
                                        ignore_index=0)
    return _loss_and_grad(torch, loss, x)


@compat
def test_nll_loss_module_no_reduction_n_c_d(torch):
    x = torch.arange(24.0).reshape(2, 3, 4)
    return torch.nn.NLLLoss(reduction="none")(x, torch.tensor([[0, 1, 2, 1], [2, 2, 0, 1]]))


@compat
def test_nll_loss_target_out_of_range_is_an_index_error(torch):
    return torch.nn.functional.nll_loss(_logits(torch, False), torch.tensor([0, 9, 1]))


@compat
def test_nll_loss_float_target_is_an_error(torch):
    return torch.nn.functional.nll_loss(_logits(torch, False), torch.tensor([0.0, 1.0, 1.0]))


# --- binary cross-entropy ------------------------------------------------------------------------------------------

def _probs(torch):
    return torch.tensor([[0.1, 0.9, 0.5], [0.3, 0.01, 0.99]], requires_grad=True)


def _binary(torch):
    return torch.tensor([[0.0, 1.0, 1.0], [0.0, 0.5, 1.0]])


@compat
def test_binary_cross_entropy_and_its_gradient(torch):
    p = _probs(torch)
    return _loss_and_grad(torch, torch.nn.functional.binary_cross_entropy(p, _binary(torch)), p)


@compat
def test_binary_cross_entropy_of_saturated_probabilities_stays_finite(torch):
    p = torch.tensor([0.0, 1.0, 1.0, 0.0], requires_grad=True)
    loss = torch.nn.functional.binary_cross_entropy(p, torch.tensor([0.0, 1.0, 0.0, 1.0]), reduction="none")
    return loss


@compat
def test_binary_cross_entropy_target_gradient_and_tangent_are_torchs_unclamped_logit(torch):
    """torch's derivative w.r.t. the target is -logit(p), unclamped (only the loss clamps its logs at -100): +-inf at
    p = 0 or 1, 115 at p = 1e-50, in the VJP and in the JVP."""
    p = torch.tensor([0.3, 1.0, 0.0, 1e-50], dtype=torch.float64)
    t = torch.tensor([0.4, 0.5, 0.5, 0.2], dtype=torch.float64, requires_grad=True)
    torch.nn.functional.binary_cross_entropy(p, t, reduction="sum").backward()
    fw = torch.autograd.forward_ad
    with fw.dual_level():
        out = torch.nn.functional.binary_cross_entropy(p, fw.make_dual(t.detach(), torch.ones(4, dtype=torch.float64)))
        tangent = fw.unpack_dual(out).tangent
    return t.grad, tangent


@compat
def test_bce_loss_module_with_weight(torch):
    p = _probs(torch)
    loss = torch.nn.BCELoss(weight=torch.tensor([1.0, 2.0, 0.5]), reduction="sum")(p, _binary(torch))
    return _loss_and_grad(torch, loss, p)


@compat
def test_binary_cross_entropy_target_of_another_size_is_a_value_error(torch):
    return torch.nn.functional.binary_cross_entropy(torch.full((3,), 0.5), torch.ones(4))


@compat
def test_binary_cross_entropy_of_values_above_one_is_an_error(torch):
    return torch.nn.functional.binary_cross_entropy(torch.tensor([0.5, 1.5]), torch.ones(2))


@compat
def test_bce_with_logits_and_its_gradient(torch):
    z = torch.tensor([[-3.0, 0.0, 2.0], [40.0, -40.0, 0.5]], requires_grad=True)
    return _loss_and_grad(torch, torch.nn.functional.binary_cross_entropy_with_logits(z, _binary(torch)), z)


@compat
def test_bce_with_logits_pos_weight(torch):
    z = torch.tensor([[-3.0, 0.0, 2.0], [4.0, -1.0, 0.5]], requires_grad=True)
    loss = torch.nn.BCEWithLogitsLoss(pos_weight=torch.tensor([1.0, 3.0, 0.5]))(z, _binary(torch))
    return _loss_and_grad(torch, loss, z)


@compat
def test_bce_with_logits_matches_sigmoid_then_bce(torch):
    z = torch.tensor([-1.0, 0.2, 3.0])
    t = torch.tensor([0.0, 1.0, 1.0])
    return (torch.nn.functional.binary_cross_entropy_with_logits(z, t),
            torch.nn.functional.binary_cross_entropy(torch.sigmoid(z), t))


@compat
def test_bce_with_logits_target_of_another_size_is_a_value_error(torch):
    return torch.nn.functional.binary_cross_entropy_with_logits(torch.zeros(3), torch.ones(2))


# --- regression losses ---------------------------------------------------------------------------------------------

def _pred(torch):
    return torch.tensor([[0.5, -1.0, 2.0], [3.0, 0.1, -0.2]], requires_grad=True)


def _truth(torch):
    return torch.tensor([[0.0, -1.0, 0.5], [1.0, 0.3, -0.2]])


@pytest.mark.parametrize("loss", ["l1_loss", "mse_loss", "smooth_l1_loss", "huber_loss"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_regression_losses_and_gradients(loss, reduction):
    def snippet(torch):
        x = _pred(torch)
        y = getattr(torch.nn.functional, loss)(x, _truth(torch), reduction=reduction)
        y.sum().backward()
        return y, x.grad
    check(snippet)


@compat
def test_smooth_l1_beta(torch):
    x = _pred(torch)
    return _loss_and_grad(torch, torch.nn.SmoothL1Loss(beta=0.5)(x, _truth(torch)), x)


@compat
def test_smooth_l1_beta_zero_is_l1(torch):
    return torch.nn.functional.smooth_l1_loss(_pred(torch), _truth(torch), beta=0.0)


@compat
def test_huber_delta(torch):
    x = _pred(torch)
    return _loss_and_grad(torch, torch.nn.HuberLoss(delta=0.4)(x, _truth(torch)), x)


@compat
def test_huber_non_positive_delta_is_an_error(torch):
    return torch.nn.functional.huber_loss(_pred(torch), _truth(torch), delta=0.0)


@compat
def test_mse_loss_module_on_a_model_output(torch):
    x = _pred(torch)
    return _loss_and_grad(torch, torch.nn.MSELoss()(x * 2, _truth(torch)), x)


@compat
def test_l1_loss_module_sum(torch):
    return torch.nn.L1Loss(reduction="sum")(_pred(torch), _truth(torch))


@compat
def test_mse_loss_module_unknown_reduction_fails_when_called(torch):
    crit = torch.nn.MSELoss(reduction="avg")
    return crit(_pred(torch), _truth(torch))


# --- KL divergence -------------------------------------------------------------------------------------------------

@compat
def test_kl_div_batchmean_of_log_probabilities(torch):
    x = torch.tensor([[0.1, 0.2, 0.7], [0.3, 0.3, 0.4]]).log().requires_grad_()
    p = torch.tensor([[0.2, 0.2, 0.6], [0.0, 0.5, 0.5]])
    return _loss_and_grad(torch, torch.nn.functional.kl_div(x, p, reduction="batchmean"), x)


@compat
def test_kl_div_log_target(torch):
    x = torch.tensor([[0.1, 0.2, 0.7], [0.3, 0.3, 0.4]]).log()
    q = torch.tensor([[0.2, 0.2, 0.6], [0.1, 0.5, 0.4]]).log()
    return torch.nn.KLDivLoss(reduction="sum", log_target=True)(x, q)


@compat
def test_kl_div_no_reduction(torch):
    x = torch.tensor([[0.1, 0.2, 0.7]]).log()
    return torch.nn.functional.kl_div(x, torch.tensor([[0.0, 0.5, 0.5]]), reduction="none")


# --- what users print: loss.grad_fn ----------------------------------------------------------------------------------

@pytest.mark.parametrize("call", [
    "cross_entropy(x, torch.tensor([1, 0]))", "cross_entropy(x, torch.tensor([1, 0]), reduction='none')",
    "nll_loss(x.log_softmax(1), torch.tensor([1, 0]))", "mse_loss(x, y)", "mse_loss(x, y, reduction='none')",
    "l1_loss(x, y)", "smooth_l1_loss(x, y)", "huber_loss(x, y)", "binary_cross_entropy(x.sigmoid(), y)",
    "binary_cross_entropy_with_logits(x, y)", "kl_div(x.log_softmax(1), y, reduction='batchmean')"])
def test_loss_grad_fn_names(call):
    def snippet(torch):
        x = torch.tensor([[0.2, -1.0, 0.5], [1.5, 0.3, -0.7]], requires_grad=True)
        y = torch.tensor([[0.0, 1.0, 0.5], [1.0, 0.0, 0.25]])
        loss = eval(f"torch.nn.functional.{call}", {"torch": torch, "x": x, "y": y})  # noqa: S307 - fixed table
        return loss.grad_fn.name()
    check(snippet)
