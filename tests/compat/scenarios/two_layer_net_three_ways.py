"""A two-layer ReLU network learns to imitate a fixed random "teacher" network, written three ways from the same
start: backpropagation by hand with tensor ops, autograd, and a custom Function for the hidden layer."""
import torch

torch.manual_seed(2024)
batch, d_in, hidden, d_out = 48, 10, 32, 3
inputs = torch.randn(batch, d_in)
teacher = torch.randn(d_in, d_out) / d_in ** 0.5
targets = torch.sin(inputs @ teacher) + 0.1 * inputs[:, :d_out]

w1_start = torch.randn(d_in, hidden) * (2 / d_in) ** 0.5
b1_start = torch.zeros(hidden)
w2_start = torch.randn(hidden, d_out) * (1 / hidden) ** 0.5
lr, steps = 0.1, 200

# --- 1. by hand -----------------------------------------------------------------------------------------------
w1, b1, w2 = w1_start.clone(), b1_start.clone(), w2_start.clone()
for step in range(steps):
    pre = inputs.mm(w1) + b1
    act = pre.clamp(min=0)
    out = act.mm(w2)
    diff = out - targets
    loss = diff.pow(2).sum(dim=1).mean()
    if step % 50 == 0:
        print("by hand", step, loss.item())
    grad_out = 2.0 * diff / batch
    grad_w2 = act.t().mm(grad_out)
    grad_act = grad_out.mm(w2.t())
    grad_pre = grad_act.clone()
    grad_pre[pre < 0] = 0
    grad_w1 = inputs.t().mm(grad_pre)
    grad_b1 = grad_pre.sum(0)
    w1 -= lr * grad_w1
    b1 -= lr * grad_b1
    w2 -= lr * grad_w2
print("by hand, final loss:", loss.item())

# --- 2. autograd ----------------------------------------------------------------------------------------------
W1 = w1_start.clone().requires_grad_()
B1 = b1_start.clone().requires_grad_()
W2 = w2_start.clone().requires_grad_()
for step in range(steps):
    out = (inputs @ W1 + B1).relu() @ W2
    loss = (out - targets).pow(2).sum(dim=1).mean()
    if step % 50 == 0:
        print("autograd", step, loss.item())
    loss.backward()
    with torch.no_grad():
        for p in (W1, B1, W2):
            p -= lr * p.grad
            p.grad = None
print("autograd, final loss:", loss.item(), "same weights:", torch.allclose(W1, w1, atol=1e-5),
      torch.allclose(W2, w2, atol=1e-5))


# --- 3. the hidden layer as a custom Function -----------------------------------------------------------------
class DenseReLU(torch.autograd.Function):
    """relu(x @ w + b) in one node: backward needs x, w and where the output was positive."""

    @staticmethod
    def forward(ctx, x, w, b):
        pre = x @ w + b
        positive = pre > 0
        ctx.save_for_backward(x, w, positive)
        return pre * positive

    @staticmethod
    def backward(ctx, grad_output):
        x, w, positive = ctx.saved_tensors
        grad_pre = grad_output * positive
        return grad_pre @ w.T, x.T @ grad_pre, grad_pre.sum(0)


F1 = w1_start.clone().requires_grad_()
G1 = b1_start.clone().requires_grad_()
F2 = w2_start.clone().requires_grad_()
for step in range(steps):
    out = DenseReLU.apply(inputs, F1, G1) @ F2
    loss = (out - targets).pow(2).sum(dim=1).mean()
    if step % 50 == 0:
        print("Function", step, loss.item())
    loss.backward()
    with torch.no_grad():
        for p in (F1, G1, F2):
            p.sub_(lr * p.grad)
            p.grad.zero_()
print("Function, final loss:", loss.item(), "same weights:", torch.allclose(F1, w1, atol=1e-5))
print("grad_fn:", out.grad_fn.name(), out.grad_fn.next_functions[0][0].name())

x64 = torch.randn(4, d_in, dtype=torch.float64, requires_grad=True)
w64 = torch.randn(d_in, 5, dtype=torch.float64, requires_grad=True)
b64 = torch.randn(5, dtype=torch.float64, requires_grad=True)
print("gradcheck:", torch.autograd.gradcheck(DenseReLU.apply, (x64, w64, b64)))
