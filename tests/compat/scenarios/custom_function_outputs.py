"""Custom autograd Functions with several outputs: two differentiable ones (polar coordinates), and ones that come
with an integer result marked non-differentiable (a sort's order, a count of clipped values). Checked against
autograd's own ops and with gradcheck, then used to train."""
import torch


class Polar(torch.autograd.Function):
    """(x, y) -> (radius, angle); backward gets one gradient per output."""

    @staticmethod
    def forward(ctx, x, y):
        radius = torch.sqrt(x * x + y * y)
        angle = torch.atan2(y, x)
        ctx.save_for_backward(x, y, radius)
        return radius, angle

    @staticmethod
    def backward(ctx, grad_radius, grad_angle):
        x, y, radius = ctx.saved_tensors
        r2 = radius * radius
        grad_x = grad_radius * x / radius - grad_angle * y / r2
        grad_y = grad_radius * y / radius + grad_angle * x / r2
        return grad_x, grad_y


class SortWithOrder(torch.autograd.Function):
    """Sorted values and the order that sorts them; the order is an integer tensor with no gradient."""

    @staticmethod
    def forward(ctx, values):
        ordered, order = torch.sort(values, dim=-1)
        ctx.mark_non_differentiable(order)
        ctx.save_for_backward(order)
        return ordered, order

    @staticmethod
    def backward(ctx, grad_ordered, grad_order):
        (order,) = ctx.saved_tensors
        return torch.zeros_like(grad_ordered).scatter(-1, order, grad_ordered)


class ClipCounting(torch.autograd.Function):
    """Values clipped to [-limit, limit] and how many were clipped; no gradient flows through clipped entries."""

    @staticmethod
    def forward(ctx, values, limit):
        inside = values.abs() <= limit
        clipped = values.clamp(-limit, limit)
        count = (~inside).sum()
        ctx.mark_non_differentiable(count)
        ctx.save_for_backward(inside)
        return clipped, count

    @staticmethod
    def backward(ctx, grad_clipped, grad_count):
        (inside,) = ctx.saved_tensors
        return grad_clipped * inside, None


x = torch.tensor([3.0, -1.0, 0.5], requires_grad=True)
y = torch.tensor([4.0, 2.0, -0.5], requires_grad=True)
radius, angle = Polar.apply(x, y)
print("radius:", radius, "angle:", angle)
print("both differentiable:", radius.requires_grad, angle.requires_grad, radius.grad_fn.name())
(radius.sum() + 2 * angle.sum()).backward()
ours = x.grad.clone(), y.grad.clone()
x.grad = y.grad = None
(torch.sqrt(x * x + y * y).sum() + 2 * torch.atan2(y, x).sum()).backward()
print("grads match autograd's:", torch.allclose(ours[0], x.grad), torch.allclose(ours[1], y.grad))

# only one output used: the other's gradient arrives as zeros
x.grad = y.grad = None
radius, angle = Polar.apply(x, y)
radius.sum().backward()
print("radius only:", x.grad, y.grad)

x64 = torch.tensor([0.7, -1.3, 2.0], dtype=torch.float64, requires_grad=True)
y64 = torch.tensor([1.1, 0.4, -0.9], dtype=torch.float64, requires_grad=True)
print("gradcheck Polar:", torch.autograd.gradcheck(Polar.apply, (x64, y64)))

scores = torch.tensor([[0.3, -2.0, 1.5, 0.0], [4.0, 1.0, 2.0, 3.0]], requires_grad=True)
ordered, order = SortWithOrder.apply(scores)
print("ordered:", ordered, "order:", order)
print("order has no grad:", order.requires_grad, order.dtype, "ordered has:", ordered.requires_grad)
weights = torch.tensor([1.0, 2.0, 3.0, 4.0])
(ordered * weights).sum().backward()
mine = scores.grad.clone()
scores.grad = None
(torch.sort(scores, dim=-1).values * weights).sum().backward()
print("sort grads match:", torch.equal(mine, scores.grad), mine)
print("gradcheck SortWithOrder:", torch.autograd.gradcheck(
    lambda v: SortWithOrder.apply(v)[0], (torch.tensor([0.2, -1.0, 3.0], dtype=torch.float64, requires_grad=True),)))

# train a vector toward a target through the clip, counting clipped entries as we go
torch.manual_seed(5)
w = torch.randn(8, requires_grad=True)
target = torch.linspace(-2, 2, 8)
optimizer = torch.optim.SGD([w], lr=0.3)
for step in range(6):
    clipped, count = ClipCounting.apply(w, 1.0)
    loss = (clipped - target).pow(2).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step}: loss {loss.item():.5f}, clipped {count.item()}, count needs grad {count.requires_grad}")
print("w:", w)
