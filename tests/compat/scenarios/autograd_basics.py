"""Autograd habits: leaves that require grad, backward and .grad, accumulation, no_grad and detach, gradients of
non-scalar outputs, retain_graph, torch.autograd.grad and hooks on tensors."""
import torch
import torch.nn.functional as F

# a logistic unit on four samples, its loss differentiated by hand and by autograd
features = torch.tensor([[0.2, -1.0, 0.5], [1.5, 0.3, -0.7], [-0.4, 0.8, 1.1], [0.9, -0.2, 0.0]])
labels = torch.tensor([1.0, 0.0, 1.0, 0.0])
weights = torch.tensor([0.1, -0.3, 0.25], requires_grad=True)
bias = torch.zeros(1, requires_grad=True)
scores = features @ weights + bias
loss = F.binary_cross_entropy_with_logits(scores, labels)
print("loss:", loss, "is a leaf:", weights.is_leaf, scores.is_leaf, "grad_fn:", scores.grad_fn.name())
loss.backward()
print("weights.grad:", weights.grad)
print("bias.grad:", bias.grad)
by_hand = features.T @ (torch.sigmoid(scores.detach()) - labels) / len(labels)
print("matches the formula:", torch.allclose(weights.grad, by_hand))

# gradients add up until cleared
loss2 = F.binary_cross_entropy_with_logits(features @ weights + bias, labels)
loss2.backward()
print("accumulated:", torch.allclose(weights.grad, 2 * by_hand))
weights.grad.zero_()
bias.grad = None
print("cleared:", weights.grad, bias.grad)

# no tracking where none is needed
with torch.no_grad():
    frozen = features @ weights
print("under no_grad:", frozen.requires_grad, frozen.grad_fn)
detached = (weights * 2).detach()
print("detached:", detached.requires_grad, detached.is_leaf)
print("enabled again:", (weights * 2).requires_grad, torch.is_grad_enabled())


@torch.no_grad()
def update(param, step):
    param -= step * param.grad


(features @ weights).pow(2).sum().backward()
update(weights, 0.1)
print("after a manual step:", weights, weights.requires_grad)

# a non-scalar output needs a vector to multiply its Jacobian by
x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
y = x ** 3 - 2 * x
y.backward(gradient=torch.tensor([1.0, 0.5, 0.0]))
print("vector-Jacobian product:", x.grad)

# the same graph twice: keep it on the first pass
x.grad = None
z = (x.sin() * x).sum()
z.backward(retain_graph=True)
first = x.grad.clone()
z.backward()
print("twice the first pass:", torch.allclose(x.grad, 2 * first))

# torch.autograd.grad, and a second derivative through create_graph
t = torch.tensor(0.5, requires_grad=True)
f = t.exp() * t.cos()
(df,) = torch.autograd.grad(f, t, create_graph=True)
(d2f,) = torch.autograd.grad(df, t)
print("f', f'':", df.item(), d2f.item(), "t.grad untouched:", t.grad)

# hooks: watch and rescale a gradient as it flows
seen = []
h = torch.tensor([1.0, -2.0, 4.0], requires_grad=True)
hidden = h * 3
hidden.register_hook(lambda g: seen.append(g.clone()))
handle = h.register_hook(lambda g: g * 10)
hidden.sum().backward()
print("seen at hidden:", seen[0], "h.grad scaled by the hook:", h.grad)
handle.remove()
h.grad = None
(h * 3).sum().backward()
print("after removing the hook:", h.grad)

# a mean over a batch of element losses, requires_grad flags as data flows
p = torch.randn(5, requires_grad=True)
q = torch.randn(5)
r = (p * q).relu()
print("flags:", p.requires_grad, q.requires_grad, r.requires_grad)
r.mean().backward()
print("relu grad:", p.grad)
