"""Fit a cubic to a saturating sensor's response, four ways: gradients by hand, autograd, a custom autograd Function
that evaluates the polynomial, and nn modules with an optimizer. The first three start from the same coefficients
and must follow the same path."""
import math

import torch
import torch.nn as nn

torch.manual_seed(7)
x = torch.linspace(-2, 2, 400)
y = torch.tanh(1.5 * (x - 0.4)) + 0.3 * x
start = torch.randn(4)
lr, steps = 0.05, 300
print(f"{len(x)} samples, start {start.tolist()}")

# --- 1. tensors only: the gradient of the mean squared error written out ----------------------------------------
c0, c1, c2, c3 = start.clone()
for step in range(steps):
    pred = c0 + c1 * x + c2 * x ** 2 + c3 * x ** 3
    err = pred - y
    loss = err.pow(2).mean()
    if step % 75 == 0:
        print("by hand", step, loss.item())
    g = 2 * err / len(x)
    c0 -= lr * g.sum()
    c1 -= lr * (g * x).sum()
    c2 -= lr * (g * x ** 2).sum()
    c3 -= lr * (g * x ** 3).sum()
by_hand = torch.stack([c0, c1, c2, c3])
print("by hand:", by_hand)

# --- 2. autograd ----------------------------------------------------------------------------------------------
coef = start.clone().requires_grad_(True)
for step in range(steps):
    pred = coef[0] + coef[1] * x + coef[2] * x ** 2 + coef[3] * x ** 3
    loss = ((pred - y) ** 2).mean()
    if step % 75 == 0:
        print("autograd", step, loss.item())
    loss.backward()
    with torch.no_grad():
        coef -= lr * coef.grad
    coef.grad = None
print("autograd:", coef, "same path:", torch.allclose(coef, by_hand, atol=1e-5))


# --- 3. a custom Function: Horner's rule forward, its derivatives in backward ------------------------------------
class Polynomial(torch.autograd.Function):
    @staticmethod
    def forward(ctx, coefficients, points):
        ctx.save_for_backward(coefficients, points)
        value = torch.zeros_like(points)
        for c in coefficients.flip(0):
            value = value * points + c
        return value

    @staticmethod
    def backward(ctx, grad_value):
        coefficients, points = ctx.saved_tensors
        grad_coefficients = grad_points = None
        if ctx.needs_input_grad[0]:
            powers = torch.stack([points ** k for k in range(len(coefficients))], dim=1)
            grad_coefficients = grad_value @ powers
        if ctx.needs_input_grad[1]:
            slope = sum(k * coefficients[k] * points ** (k - 1) for k in range(1, len(coefficients)))
            grad_points = grad_value * slope
        return grad_coefficients, grad_points


poly = Polynomial.apply
coef_fn = start.clone().requires_grad_(True)
for step in range(steps):
    loss = (poly(coef_fn, x) - y).pow(2).mean()
    if step % 75 == 0:
        print("Function", step, loss.item())
    loss.backward()
    with torch.no_grad():
        coef_fn -= lr * coef_fn.grad
        coef_fn.grad.zero_()
print("Function:", coef_fn.detach(), "same path:", torch.allclose(coef_fn, by_hand, atol=1e-5))

# the points' gradient is the polynomial's slope: check it against finite differences in float64
probe = torch.tensor([-1.0, 0.25, 1.5], dtype=torch.float64, requires_grad=True)
coef64 = coef_fn.detach().double()
poly(coef64, probe).sum().backward()
h = 1e-6
numeric = (poly(coef64, probe.detach() + h) - poly(coef64, probe.detach() - h)) / (2 * h)
print("slope:", probe.grad, "finite differences agree:", torch.allclose(probe.grad, numeric, atol=1e-6))
print("gradcheck:", torch.autograd.gradcheck(poly, (coef64.clone().requires_grad_(), probe)))

# --- 4a. nn.Sequential on the powers of x, stepped by hand through parameters() ---------------------------------
powers = x.unsqueeze(-1).pow(torch.tensor([1, 2, 3]))
model = nn.Sequential(nn.Linear(3, 1), nn.Flatten(0, 1))
mse = nn.MSELoss()
print("features:", powers.shape, "output:", model(powers).shape)
for step in range(steps):
    loss = mse(model(powers), y)
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad
    if step % 75 == 0:
        print("Sequential", step, loss.item())
linear = model[0]
print(f"Sequential: y = {linear.bias.item():.4f} + {linear.weight[0, 0].item():.4f} x "
      f"+ {linear.weight[0, 1].item():.4f} x^2 + {linear.weight[0, 2].item():.4f} x^3")


# --- 4b. a Module of our own with an optimizer -----------------------------------------------------------------
class Cubic(nn.Module):
    def __init__(self):
        super().__init__()
        self.coefficients = nn.Parameter(torch.randn(4) * 0.1)
        self.register_buffer("exponents", torch.arange(4))

    def forward(self, t):
        return (t.unsqueeze(-1) ** self.exponents) @ self.coefficients

    def describe(self):
        c = self.coefficients.tolist()
        return " + ".join(f"{v:.4f} x^{k}" for k, v in enumerate(c))


cubic = Cubic()
optimizer = torch.optim.SGD(cubic.parameters(), lr=lr, momentum=0.9)
for step in range(200):
    optimizer.zero_grad()
    loss = mse(cubic(x), y)
    loss.backward()
    optimizer.step()
    if step % 50 == 0:
        print("Module + SGD", step, round(loss.item(), 6))
print("Module:", cubic.describe())
print("buffers:", [name for name, _ in cubic.named_buffers()], "parameters:", sum(p.numel() for p in cubic.parameters()))

rms = torch.optim.RMSprop(cubic.parameters(), lr=1e-3)
for step in range(100):
    rms.zero_grad()
    loss = mse(cubic(x), y)
    loss.backward()
    rms.step()
print("after RMSprop:", loss.item(), "worst error:", (cubic(x) - y).abs().max().item())
print("fit at pi/4:", cubic(torch.tensor([math.pi / 4])).item())
