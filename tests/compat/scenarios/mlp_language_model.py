"""A character-level MLP language model: the last three letters, looked up in an embedding table C[X], feed a tanh
layer and a softmax over the next letter. Trained on random minibatches drawn with torch.randint, with a
learning-rate step decay, evaluated on a held-out split and decoded greedily."""
import random
from pathlib import Path

import torch
import torch.nn.functional as F

words = Path(__file__).with_name("words.txt").read_text().splitlines()  # fruits and animals, one a line
chars = sorted(set("".join(words)))
stoi = {s: i + 1 for i, s in enumerate(chars)}
stoi["."] = 0
itos = {i: s for s, i in stoi.items()}
vocab = len(stoi)
block_size = 3  # letters of context


def build_dataset(ws):
    X, Y = [], []
    for w in ws:
        context = [0] * block_size
        for ch in w + ".":
            ix = stoi[ch]
            X.append(context)
            Y.append(ix)
            context = context[1:] + [ix]
    X = torch.tensor(X)
    Y = torch.tensor(Y)
    print("dataset:", X.shape, X.dtype, Y.shape)
    return X, Y


random.seed(42)
random.shuffle(words)
n1 = int(0.8 * len(words))
Xtr, Ytr = build_dataset(words[:n1])
Xdev, Ydev = build_dataset(words[n1:])

g = torch.Generator().manual_seed(2147483647)
emb_dim, hidden = 8, 64
C = torch.randn((vocab, emb_dim), generator=g)
W1 = torch.randn((block_size * emb_dim, hidden), generator=g) * (5 / 3) / (block_size * emb_dim) ** 0.5
b1 = torch.randn(hidden, generator=g) * 0.01
W2 = torch.randn((hidden, vocab), generator=g) * 0.01
b2 = torch.zeros(vocab)
parameters = [C, W1, b1, W2, b2]
print("parameters:", sum(p.nelement() for p in parameters))
for p in parameters:
    p.requires_grad = True

print("one lookup:", C[5].shape, "a batch of contexts:", C[Xtr[:4]].shape)

lossi = []
for i in range(400):
    ix = torch.randint(0, Xtr.shape[0], (32,), generator=g)
    emb = C[Xtr[ix]]  # (32, block_size, emb_dim)
    h = torch.tanh(emb.view(-1, block_size * emb_dim) @ W1 + b1)
    logits = h @ W2 + b2
    loss = F.cross_entropy(logits, Ytr[ix])
    for p in parameters:
        p.grad = None
    loss.backward()
    lr = 0.2 if i < 300 else 0.02  # step decay
    for p in parameters:
        p.data += -lr * p.grad
    lossi.append(loss.log10().item())
    if i % 100 == 0:
        print(f"{i:4d}/400: {loss.item():.4f} lr {lr}")

print("geometric mean loss, first and last 50 steps:", 10 ** (sum(lossi[:50]) / 50), 10 ** (sum(lossi[-50:]) / 50))


@torch.no_grad()
def split_loss(X, Y):
    h = torch.tanh(C[X].view(X.shape[0], -1) @ W1 + b1)
    return F.cross_entropy(h @ W2 + b2, Y).item()


print("train loss:", split_loss(Xtr, Ytr))
print("dev loss:", split_loss(Xdev, Ydev))

# greedy decoding from a few starting letters, and the model's top guesses after "pe"
for start in "bcmps":
    context, out = [0, 0, stoi[start]], start
    for _ in range(8):
        with torch.no_grad():
            h = torch.tanh(C[torch.tensor([context])].view(1, -1) @ W1 + b1)
            ix = torch.argmax(h @ W2 + b2, dim=1).item()
        if ix == 0:
            break
        out += itos[ix]
        context = context[1:] + [ix]
    print("greedy:", out)

with torch.no_grad():
    h = torch.tanh(C[torch.tensor([[0, stoi["p"], stoi["e"]]])].view(1, -1) @ W1 + b1)
    probs = F.softmax(h @ W2 + b2, dim=1)
top = torch.topk(probs, 3, dim=1)
print("after 'pe':", [(itos[i], round(p, 4)) for i, p in zip(top.indices[0].tolist(), top.values[0].tolist())])
