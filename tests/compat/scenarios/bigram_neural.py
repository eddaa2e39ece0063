"""The bigram model as a one-layer network: one-hot inputs times a weight matrix give logits, exp and a row
normalization give probabilities (a softmax written out), trained by gradient descent on the negative
log-likelihood and sampled with torch.multinomial."""
from pathlib import Path

import torch
import torch.nn.functional as F

words = Path(__file__).with_name("words.txt").read_text().splitlines()  # fruits and animals, one a line
chars = sorted(set("".join(words)))
stoi = {s: i + 1 for i, s in enumerate(chars)}
stoi["."] = 0
itos = {i: s for s, i in stoi.items()}
vocab = len(stoi)

xs, ys = [], []
for w in words:
    chs = ["."] + list(w) + ["."]
    for ch1, ch2 in zip(chs, chs[1:]):
        xs.append(stoi[ch1])
        ys.append(stoi[ch2])
xs = torch.tensor(xs)
ys = torch.tensor(ys)
num = xs.nelement()
print("examples:", num, xs[:8], ys[:8])

xenc = F.one_hot(xs, num_classes=vocab).float()
print("one-hot:", xenc.shape, xenc.dtype, xenc[:2].argmax(1), xenc.sum().item())

g = torch.Generator().manual_seed(2147483647)
W = torch.randn((vocab, vocab), generator=g, requires_grad=True)

for k in range(120):
    logits = xenc @ W  # log-counts
    counts = logits.exp()
    probs = counts / counts.sum(1, keepdims=True)
    loss = -probs[torch.arange(num), ys].log().mean() + 0.01 * (W ** 2).mean()
    if k % 20 == 0:
        print(k, loss.item())
    W.grad = None
    loss.backward()
    W.data += -40 * W.grad

print("final loss:", loss.item())
print("largest gradient entry:", W.grad.view(-1).abs().max().item())
with torch.no_grad():
    logits = xenc @ W
    written_out = -(logits.exp() / logits.exp().sum(1, keepdim=True))[torch.arange(num), ys].log().mean()
    print("cross_entropy agrees:", torch.allclose(F.cross_entropy(logits, ys), written_out))

# the trained rows are the model's next-letter distributions; sample from them
g = torch.Generator().manual_seed(2147483647)
for _ in range(6):
    out, ix = [], 0
    while True:
        xenc_one = F.one_hot(torch.tensor([ix]), num_classes=vocab).float()
        p = F.softmax(xenc_one @ W, dim=1)
        ix = torch.multinomial(p, num_samples=1, replacement=True, generator=g).item()
        if ix == 0:
            break
        out.append(itos[ix])
    print("sampled:", "".join(out))
