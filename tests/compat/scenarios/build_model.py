"""Building models from nn parts: a classifier for small 6x6 "images", nn.Sequential with nn.Flatten and nn.ReLU,
printing the model, walking its parameters and submodules, its state_dict, train/eval modes and predictions."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(42)
device = "cuda" if torch.cuda.is_available() else "cpu"


class PatchClassifier(nn.Module):
    def __init__(self, classes=4):
        super().__init__()
        self.flatten = nn.Flatten()
        self.body = nn.Sequential(
            nn.Linear(36, 24),
            nn.ReLU(),
            nn.Linear(24, 12),
            nn.ReLU(),
        )
        self.classify = nn.Linear(12, classes)

    def forward(self, images):
        return self.classify(self.body(self.flatten(images)))


model = PatchClassifier().to(device)
print(model)
images = torch.rand(5, 6, 6, device=device)
logits = model(images)
probabilities = nn.Softmax(dim=1)(logits)
predicted = probabilities.argmax(1)
print("logits:", logits.shape, "rows sum to 1:", torch.allclose(probabilities.sum(1), torch.ones(5, device=device)))
print("predicted classes:", predicted)

# what a layer does to a batch, one at a time
flat = nn.Flatten()(images)
hidden = nn.Linear(36, 8)(flat)
print("flattened:", flat.size(), "linear:", hidden.size())
print("relu clears the negatives:", (nn.ReLU()(hidden) >= 0).all().item(), (hidden < 0).any().item())

# parameters: names, shapes, counts
for name, param in model.named_parameters():
    print(f"{name}: {tuple(param.shape)}, requires_grad={param.requires_grad}, first values {param[:1].flatten()[:3]}")
total = sum(p.numel() for p in model.parameters())
trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
print("parameters:", total, "trainable:", trainable)

# freeze the body and count again
for p in model.body.parameters():
    p.requires_grad_(False)
print("trainable after freezing the body:", sum(p.numel() for p in model.parameters() if p.requires_grad))

# submodules and the state dict
print("children:", [name for name, _ in model.named_children()])
print("linear layers:", [m for m in model.modules() if isinstance(m, nn.Linear)])
print("body[2]:", model.body[2], "len(body):", len(model.body))
state = model.state_dict()
print("state keys:", list(state.keys()))
print("state shapes:", {k: list(v.shape) for k, v in state.items()})

# a second copy loads the first one's weights and predicts the same
twin = PatchClassifier().to(device)
print("before loading:", torch.equal(twin(images), logits))
print(twin.load_state_dict(state))
print("after loading:", torch.allclose(twin(images), logits))

# modes and the functional API
model.eval()
print("eval mode:", model.training, model.body.training)
with torch.no_grad():
    scores = F.log_softmax(model(images), dim=-1)
print("log-probabilities:", scores)
model.train()
print("train mode:", model.training)

# one training step with the classifier head only
labels = torch.tensor([0, 1, 2, 3, 1], device=device)
optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
loss = F.cross_entropy(model(images), labels)
loss.backward()
print("body has no grads:", all(p.grad is None for p in model.body.parameters()))
optimizer.step()
print("loss before and after a step:", loss.item(), F.cross_entropy(model(images), labels).item())

stack = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 2))
stack.append(nn.Sigmoid())
listed = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
print(stack, "ModuleList of", len(listed), "layers with", sum(p.numel() for p in listed.parameters()), "parameters")
out = torch.ones(1, 3, device=device)
for layer in stack.to(device):
    out = layer(out)
print("through the stack one layer at a time:", out)
