"""torch.func on a small regression model: the model called as a pure function of its parameters
(functional_call), grad of a loss with respect to a dict of parameters, per-sample gradients with vmap, and
Jacobians with jacrev, each checked against a plain autograd loop."""
import torch
import torch.nn as nn
from torch.func import functional_call, grad, jacrev, vmap

torch.manual_seed(11)
model = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1))
params = {name: p.detach() for name, p in model.named_parameters()}
inputs = torch.randn(6, 3)
targets = torch.randn(6, 1)

# the model as a function of (parameters, inputs)
out = functional_call(model, params, (inputs,))
print("functional_call matches the module:", torch.allclose(out, model(inputs)), out.shape)
shifted = {k: v + 0.1 for k, v in params.items()}
print("other parameters, other outputs:", torch.allclose(functional_call(model, shifted, (inputs,)), out))


def loss_fn(p, x, y):
    return ((functional_call(model, p, (x,)) - y) ** 2).mean()


grads = grad(loss_fn)(params, inputs, targets)
print("grad keys:", sorted(grads))
model.zero_grad()
loss_fn(dict(model.named_parameters()), inputs, targets).backward()
print("grad matches backward:", all(torch.allclose(grads[k], p.grad, atol=1e-6) for k, p in model.named_parameters()))

# per-sample gradients: vmap over the batch of a one-sample loss
def sample_loss(p, x, y):
    return loss_fn(p, x.unsqueeze(0), y.unsqueeze(0))


per_sample = vmap(grad(sample_loss), in_dims=(None, 0, 0))(params, inputs, targets)
print("per-sample shapes:", {k: tuple(v.shape) for k, v in per_sample.items()})
loop = []
for i in range(len(inputs)):
    model.zero_grad()
    sample_loss(dict(model.named_parameters()), inputs[i], targets[i]).backward()
    loop.append(model[0].weight.grad.clone())
print("match a loop of backward calls:", torch.allclose(per_sample["0.weight"], torch.stack(loop), atol=1e-6))
print("their mean is the batch gradient:", torch.allclose(per_sample["2.bias"].mean(0), grads["2.bias"], atol=1e-6))

# Jacobians: of a vector function, and of the model's output with respect to its input
def field(v):
    return torch.stack([v[0] * v[1], torch.sin(v[2]), v.pow(2).sum()])


point = torch.tensor([1.0, -2.0, 0.5])
jac = jacrev(field)(point)
print("jacobian:", jac)
print("matches autograd.functional:", torch.allclose(jac, torch.autograd.functional.jacobian(field, point)))
input_jac = vmap(jacrev(lambda x: functional_call(model, params, (x,))))(inputs)
print("input jacobians:", input_jac.shape)

# vmap of a plain function over a batch, with a second argument held fixed
weights = torch.tensor([0.5, -1.0, 2.0])
dots = vmap(torch.dot, in_dims=(0, None))(inputs, weights)
print("batched dot:", torch.allclose(dots, inputs @ weights), dots)

# a training step with torch.func gradients
lr = 0.1
for step in range(5):
    g = grad(loss_fn)(params, inputs, targets)
    params = {k: v - lr * g[k] for k, v in params.items()}
    print(f"step {step}: loss {loss_fn(params, inputs, targets).item():.6f}")
