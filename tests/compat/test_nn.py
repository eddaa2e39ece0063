"""torch.nn habits, each run with torch and with gpugrad and compared (tests/compat/harness.py): layers with set
weights (the libraries draw different initial values), containers (Sequential, ModuleList, ModuleDict), state_dict
and load_state_dict, BatchNorm's running statistics, activation and softmax layers with inplace=, module hooks,
nn.utils (gradient clipping, parameter vectors) and the layers' printed forms."""
from __future__ import annotations

import pytest

from tests.compat.harness import check, compat


def _linear(torch, n_in=3, n_out=2, bias=True):
    """A Linear with known weights: w[i, j] = (i * n_in + j - 2) / 10, b[i] = i / 4."""
    m = torch.nn.Linear(n_in, n_out, bias=bias)
    with torch.no_grad():
        m.weight.copy_((torch.arange(float(n_in * n_out)).reshape(n_out, n_in) - 2) / 10)
        if bias:
            m.bias.copy_(torch.arange(float(n_out)) / 4)
    return m


def _x(torch, *shape):
    shape = shape or (4, 3)
    n = 1
    for s in shape:
        n *= s
    return (torch.arange(float(n)).reshape(*shape) * 0.37).sin()


def _net(torch):
    return torch.nn.Sequential(_linear(torch, 3, 4), torch.nn.ReLU(), _linear(torch, 4, 2))


# --- layers and training step --------------------------------------------------------------------------------------

@compat
def test_linear_forward_and_parameter_grads(torch):
    m = _linear(torch)
    m(_x(torch)).pow(2).sum().backward()
    return m(_x(torch)), m.weight.grad, m.bias.grad


@compat
def test_linear_without_bias(torch):
    m = _linear(torch, bias=False)
    return m(_x(torch)), m.bias, [n for n, _ in m.named_parameters()]


@compat
def test_sequential_mlp_step_with_sgd(torch):
    net = _net(torch)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(_x(torch)), torch.tensor([0, 1, 1, 0]))
        loss.backward()
        opt.step()
    return loss, net[0].weight


@compat
def test_parameters_count_and_names(torch):
    net = _net(torch)
    return sum(p.numel() for p in net.parameters()), [n for n, _ in net.named_parameters()]


@compat
def test_train_and_eval_flags(torch):
    net = torch.nn.Sequential(torch.nn.Dropout(0.5), torch.nn.Linear(2, 2))
    net.eval()
    flags = [m.training for m in net.modules()]
    net.train()
    return flags, [m.training for m in net.modules()]


@compat
def test_zero_grad_sets_grads_to_none(torch):
    m = _linear(torch)
    m(_x(torch)).sum().backward()
    m.zero_grad()
    return m.weight.grad, m.bias.grad


@compat
def test_requires_grad_false_freezes_a_module(torch):
    m = _linear(torch).requires_grad_(False)
    return [p.requires_grad for p in m.parameters()], m(_x(torch)).requires_grad


# --- containers ----------------------------------------------------------------------------------------------------

@compat
def test_sequential_indexing_length_and_slicing(torch):
    net = _net(torch)
    return len(net), type(net[1]).__name__, type(net[:2]).__name__, len(net[:2]), type(net[-1]).__name__


@compat
def test_sequential_index_out_of_range_is_an_index_error(torch):
    return _net(torch)[5]


@compat
def test_sequential_append_and_delete(torch):
    net = _net(torch)
    net.append(torch.nn.Tanh())
    del net[1]
    return [type(m).__name__ for m in net], [n for n, _ in net.named_children()]


@compat
def test_sequential_from_an_ordered_dict_names_its_children(torch):
    import collections

    net = torch.nn.Sequential(collections.OrderedDict([("fc", _linear(torch)), ("act", torch.nn.Tanh())]))
    return [n for n, _ in net.named_parameters()], net(_x(torch))


@compat
def test_module_list_registers_its_layers(torch):
    class Stack(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([_linear(torch, 3, 3) for _ in range(3)])

        def forward(self, x):
            for layer in self.layers:
                x = layer(x).tanh()
            return x

    m = Stack()
    return [n for n, _ in m.named_parameters()], m(_x(torch)), len(m.layers)


@compat
def test_module_list_append_extend_insert_and_index(torch):
    ml = torch.nn.ModuleList([torch.nn.ReLU()])
    ml.append(torch.nn.Tanh())
    ml.extend([torch.nn.Sigmoid(), torch.nn.SiLU()])
    ml.insert(1, torch.nn.GELU())
    return [type(m).__name__ for m in ml], type(ml[-1]).__name__, type(ml[1:3]).__name__, len(ml)


@compat
def test_module_list_index_out_of_range(torch):
    return torch.nn.ModuleList([torch.nn.ReLU()])[1]


@compat
def test_module_dict_keys_items_and_membership(torch):
    heads = torch.nn.ModuleDict({"cls": _linear(torch, 3, 2), "reg": _linear(torch, 3, 1)})
    heads["extra"] = torch.nn.ReLU()
    return (list(heads.keys()), "reg" in heads, len(heads), heads["reg"](_x(torch)),
            [n for n, _ in heads.named_parameters()])


@compat
def test_module_dict_pop_and_missing_key(torch):
    heads = torch.nn.ModuleDict({"a": torch.nn.ReLU(), "b": torch.nn.Tanh()})
    heads.pop("a")
    return list(heads), heads["missing"]


# --- state_dict ----------------------------------------------------------------------------------------------------

@compat
def test_state_dict_keys_and_values(torch):
    sd = _net(torch).state_dict()
    return list(sd), sd["0.weight"], sd["2.bias"]


@compat
def test_state_dict_values_are_detached(torch):
    return [v.requires_grad for v in _net(torch).state_dict().values()]


@compat
def test_state_dict_shares_storage_with_the_parameters(torch):
    m = _linear(torch)
    sd = m.state_dict()
    with torch.no_grad():
        m.bias.add_(1.0)
    return sd["bias"]


@compat
def test_state_dict_keep_vars_returns_the_parameters(torch):
    m = _linear(torch)
    return m.state_dict(keep_vars=True)["weight"] is m.weight, m.state_dict(keep_vars=True)["weight"].requires_grad


@compat
def test_load_state_dict_round_trip(torch):
    src, dst = _net(torch), torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    result = dst.load_state_dict(src.state_dict())
    return result.missing_keys, result.unexpected_keys, dst(_x(torch))


@compat
def test_load_state_dict_strict_missing_key_is_a_runtime_error(torch):
    m = _linear(torch)
    return m.load_state_dict({"weight": torch.zeros(2, 3)})


@compat
def test_load_state_dict_not_strict_reports_the_keys(torch):
    m = _linear(torch)
    result = m.load_state_dict({"weight": torch.zeros(2, 3), "extra": torch.ones(1)}, strict=False)
    return result, m.weight


@compat
def test_load_state_dict_size_mismatch_is_a_runtime_error(torch):
    m = _linear(torch)
    return m.load_state_dict({"weight": torch.zeros(3, 3), "bias": torch.zeros(2)})


@compat
def test_load_state_dict_casts_to_the_parameter_dtype(torch):
    m = _linear(torch)
    m.load_state_dict({"weight": torch.ones(2, 3, dtype=torch.float64), "bias": torch.zeros(2, dtype=torch.float64)})
    return m.weight


@compat
def test_buffers_are_in_the_state_dict_unless_not_persistent(torch):
    class WithStats(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", torch.zeros(()))
            self.register_buffer("scratch", torch.ones(2), persistent=False)

    m = WithStats()
    return list(m.state_dict()), [n for n, _ in m.named_buffers()]


# --- BatchNorm -----------------------------------------------------------------------------------------------------

def _bn_step(torch, bn, x):
    y = bn(x)
    return y, bn.running_mean, bn.running_var, bn.num_batches_tracked


@compat
def test_batch_norm_1d_training_output_and_running_stats(torch):
    return _bn_step(torch, torch.nn.BatchNorm1d(3), _x(torch, 5, 3) * 4 + 1)


@compat
def test_batch_norm_1d_eval_uses_the_running_stats(torch):
    bn = torch.nn.BatchNorm1d(3, momentum=0.5)
    bn(_x(torch, 5, 3) * 4 + 1)
    bn(_x(torch, 5, 3) - 2)
    bn.eval()
    return bn(_x(torch, 2, 3)), bn.running_var


@compat
def test_batch_norm_1d_on_sequences_n_c_l(torch):
    return _bn_step(torch, torch.nn.BatchNorm1d(2), _x(torch, 4, 2, 5))


@compat
def test_batch_norm_cumulative_average_with_momentum_none(torch):
    bn = torch.nn.BatchNorm1d(3, momentum=None)
    for k in range(3):
        bn(_x(torch, 4, 3) * (k + 1))
    return bn.running_mean, bn.running_var, bn.num_batches_tracked


@compat
def test_batch_norm_gradients(torch):
    bn = torch.nn.BatchNorm1d(3)
    x = (_x(torch, 5, 3) * 3).requires_grad_()
    (bn(x) * torch.arange(15.0).reshape(5, 3)).sum().backward()
    return x.grad, bn.weight.grad, bn.bias.grad


@compat
def test_batch_norm_without_affine_or_running_stats(torch):
    bn = torch.nn.BatchNorm1d(3, affine=False, track_running_stats=False)
    bn.eval()  # without running statistics eval still normalizes by the batch
    return bn(_x(torch, 4, 3)), list(bn.state_dict()), bn.weight, bn.running_mean


@compat
def test_batch_norm_state_dict_keys(torch):
    sd = torch.nn.BatchNorm1d(2).state_dict()
    return list(sd), sd["num_batches_tracked"]


@compat
def test_batch_norm_1d_rejects_4d_input(torch):
    return torch.nn.BatchNorm1d(2)(torch.zeros(2, 2, 2, 2))


@compat
def test_batch_norm_needs_more_than_one_value_per_channel(torch):
    return torch.nn.BatchNorm1d(3)(torch.ones(1, 3))


@compat
def test_batch_norm_2d(torch):
    return _bn_step(torch, torch.nn.BatchNorm2d(2), _x(torch, 2, 2, 3, 3))


@compat
def test_functional_batch_norm_training_updates_given_stats(torch):
    rm, rv = torch.zeros(3), torch.ones(3)
    y = torch.nn.functional.batch_norm(_x(torch, 4, 3), rm, rv, training=True, momentum=0.2)
    return y, rm, rv


# --- activations and softmax layers --------------------------------------------------------------------------------

@pytest.mark.parametrize("layer", ["ReLU()", "LeakyReLU(0.2)", "ELU(alpha=0.5)", "SiLU()", "Softplus(beta=2.0)",
                                   "GELU()", "GELU(approximate='tanh')", "Tanh()", "Sigmoid()", "Softmax(dim=1)",
                                   "LogSoftmax(dim=-1)", "Flatten()", "Identity()"])
def test_activation_layer_values_and_gradients(layer):
    def snippet(torch):
        x = (_x(torch, 3, 4) * 3).requires_grad_()
        y = eval(f"torch.nn.{layer}")(x)  # noqa: S307 - a fixed table of constructors
        (y * torch.arange(12.0).reshape(3, 4)).sum().backward()
        return y, x.grad
    check(snippet)


@pytest.mark.parametrize("layer", ["ReLU", "LeakyReLU", "ELU", "SiLU"])
def test_inplace_activation_changes_its_input(layer):
    def snippet(torch):
        x = _x(torch, 2, 3) * 2
        y = getattr(torch.nn, layer)(inplace=True)(x)
        return y, x
    check(snippet)


@compat
def test_inplace_relu_inside_a_network_backpropagates(torch):
    net = torch.nn.Sequential(_linear(torch, 3, 4), torch.nn.ReLU(inplace=True), _linear(torch, 4, 1))
    net(_x(torch)).sum().backward()
    return net[0].weight.grad


@compat
def test_functional_activations_with_inplace(torch):
    x = _x(torch, 2, 3)
    y = torch.nn.functional.leaky_relu(x, 0.1, inplace=True)
    return y is x, x


@compat
def test_gelu_default_is_the_exact_erf_form(torch):
    x = torch.linspace(-4.0, 4.0, 9, dtype=torch.float64)
    return torch.nn.functional.gelu(x), torch.nn.functional.gelu(x, approximate="tanh")


@compat
def test_gelu_unknown_approximation_is_an_error(torch):
    return torch.nn.functional.gelu(torch.ones(2), approximate="fast")


@compat
def test_erf(torch):
    return torch.erf(torch.tensor([-3.0, -0.5, 0.0, 0.3, 2.0])), torch.tensor([0.5]).erf()


@compat
def test_dropout_in_eval_mode_is_the_identity(torch):
    d = torch.nn.Dropout(0.3)
    d.eval()
    x = _x(torch)
    return d(x), d.training


@compat
def test_dropout_p1_zeroes_everything(torch):
    return torch.nn.functional.dropout(_x(torch), p=1.0)


@compat
def test_dropout_keeps_the_expected_scale(torch):
    torch.manual_seed(0)
    y = torch.nn.Dropout(0.5)(torch.ones(4000))
    return sorted(set(y.tolist())), bool(abs(float(y.mean()) - 1.0) < 0.1)


@compat
def test_dropout_bad_probability_is_a_value_error(torch):
    return torch.nn.Dropout(1.5)


@compat
def test_unflatten_and_flatten(torch):
    x = _x(torch, 2, 12)
    y = torch.nn.Unflatten(1, (3, 4))(x)
    return y.shape, torch.nn.Flatten()(y).shape, torch.nn.Flatten(0, 1)(y).shape


@pytest.mark.parametrize("layer", ["ReLU()", "ReLU(inplace=True)", "LeakyReLU(0.2, inplace=True)", "ELU()",
                                   "Softplus()", "GELU()", "GELU('tanh')", "Softmax(dim=1)", "LogSoftmax(1)",
                                   "Dropout(0.2)", "BatchNorm1d(4)", "BatchNorm2d(3, momentum=None, affine=False)",
                                   "Unflatten(1, (2, 3))", "SiLU(inplace=True)"])
def test_layer_repr(layer):
    check(lambda torch: repr(eval(f"torch.nn.{layer}")))  # noqa: S307 - a fixed table of constructors


@compat
def test_module_list_repr_folds_repeats(torch):
    return repr(torch.nn.ModuleList([torch.nn.Linear(2, 2) for _ in range(3)] + [torch.nn.ReLU()]))


# --- hooks ---------------------------------------------------------------------------------------------------------

@compat
def test_forward_pre_hook_replaces_the_input(torch):
    m = _linear(torch)
    m.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
    return m(_x(torch))


@compat
def test_forward_hook_sees_input_and_replaces_output(torch):
    m = _linear(torch)
    seen = []
    m.register_forward_hook(lambda mod, args, out: seen.append((args[0].shape, out.shape)) or out + 1)
    return m(_x(torch)), seen


@compat
def test_forward_hook_with_kwargs(torch):
    m = _linear(torch)
    seen = []
    m.register_forward_hook(lambda mod, args, kwargs, out: seen.append(sorted(kwargs)), with_kwargs=True)
    m(_x(torch))
    return seen


@compat
def test_removed_hook_no_longer_runs(torch):
    m = _linear(torch)
    handle = m.register_forward_hook(lambda mod, args, out: out * 0)
    before = m(_x(torch))
    handle.remove()
    return before, m(_x(torch))


@compat
def test_hooks_on_submodules_collect_activations(torch):
    net = _net(torch)
    acts = {}
    for name, mod in net.named_children():
        mod.register_forward_hook(lambda m, a, out, name=name: acts.__setitem__(name, out.detach()))
    net(_x(torch))
    return acts


@compat
def test_full_backward_hook_sees_grad_input_and_grad_output(torch):
    m = _linear(torch)
    seen = []
    m.register_full_backward_hook(lambda mod, gin, gout: seen.append((gin, gout)))
    x = _x(torch).requires_grad_()
    (m(x) * torch.tensor([1.0, -2.0])).sum().backward()
    return seen, x.grad


@compat
def test_full_backward_hook_replaces_grad_input(torch):
    m = _linear(torch)
    m.register_full_backward_hook(lambda mod, gin, gout: (gin[0] * 10,))
    x = _x(torch).requires_grad_()
    m(x).sum().backward()
    return x.grad, m.weight.grad


@compat
def test_full_backward_hook_without_input_gradients(torch):
    m = _linear(torch)
    seen = []
    m.register_full_backward_hook(lambda mod, gin, gout: seen.append((gin, gout[0].shape)))
    m(_x(torch)).sum().backward()
    return seen


@compat
def test_full_backward_pre_hook_scales_grad_output(torch):
    m = _linear(torch)
    m.register_full_backward_pre_hook(lambda mod, gout: (gout[0] * 3,))
    m(_x(torch)).sum().backward()
    return m.weight.grad, m.bias.grad


# --- nn.utils ------------------------------------------------------------------------------------------------------

def _with_grads(torch):
    net = _net(torch)
    (net(_x(torch) * 5) ** 2).sum().backward()
    return net


@compat
def test_clip_grad_norm_returns_the_total_norm_and_clips(torch):
    net = _with_grads(torch)
    total = torch.nn.utils.clip_grad_norm_(net.parameters(), max_norm=1.0)
    return total, [p.grad for p in net.parameters()]


@compat
def test_clip_grad_norm_inf_and_one_norms(torch):
    net = _with_grads(torch)
    return (torch.nn.utils.clip_grad_norm_(net.parameters(), 100.0, norm_type="inf"),
            torch.nn.utils.clip_grad_norm_(net.parameters(), 100.0, norm_type=1.0), [p.grad for p in net.parameters()])


@compat
def test_clip_grad_norm_below_the_max_leaves_grads(torch):
    net = _with_grads(torch)
    torch.nn.utils.clip_grad_norm_(net.parameters(), max_norm=1e6)
    return [p.grad for p in net.parameters()]


@compat
def test_clip_grad_value(torch):
    net = _with_grads(torch)
    torch.nn.utils.clip_grad_value_(net.parameters(), clip_value=0.5)
    return [p.grad for p in net.parameters()]


@compat
def test_parameters_to_vector_and_back(torch):
    net = _net(torch)
    v = torch.nn.utils.parameters_to_vector(net.parameters())
    torch.nn.utils.vector_to_parameters(v * 2, net.parameters())
    return v, net[2].bias, net(_x(torch))


@compat
def test_vector_to_parameters_needs_a_tensor(torch):
    return torch.nn.utils.vector_to_parameters([1.0, 2.0], _linear(torch).parameters())


# --- functional softmax ---------------------------------------------------------------------------------------------

@compat
def test_functional_softmax_and_log_softmax_with_dim(torch):
    x = _x(torch, 2, 3, 4)
    return torch.nn.functional.softmax(x, dim=1), torch.nn.functional.log_softmax(x, dim=-1)


@compat
def test_functional_softmax_with_dtype(torch):
    return torch.nn.functional.softmax(_x(torch), dim=1, dtype=torch.float64)


@compat
def test_softmax_module_without_dim_picks_torchs_implicit_dim(torch):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.nn.Softmax()(_x(torch, 2, 3)), torch.nn.Softmax()(_x(torch, 2, 3, 4))
