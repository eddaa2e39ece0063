"""A character-level bigram model made by counting: a table of how often each letter follows another, turned into
probabilities by normalizing its rows, scored by its negative log-likelihood and sampled with torch.multinomial."""
from pathlib import Path

import torch

words = Path(__file__).with_name("words.txt").read_text().splitlines()  # fruits and animals, one a line
chars = sorted(set("".join(words)))
stoi = {s: i + 1 for i, s in enumerate(chars)}
stoi["."] = 0  # the start and end of every word
itos = {i: s for s, i in stoi.items()}
vocab = len(stoi)
print(len(words), "words,", vocab, "symbols:", "".join(itos[i] for i in range(vocab)))

N = torch.zeros((vocab, vocab), dtype=torch.int32)
for w in words:
    chs = ["."] + list(w) + ["."]
    for ch1, ch2 in zip(chs, chs[1:]):
        N[stoi[ch1], stoi[ch2]] += 1
print("bigrams counted:", N.sum().item(), "dtype:", N.dtype)
print("first letters:", {itos[i]: N[0, i].item() for i in range(vocab) if N[0, i] > 0})
common = N.flatten().argmax().item()
print("most common pair:", itos[common // vocab] + itos[common % vocab], N.max().item())

# add-one smoothing, then every row divided by its sum (a (vocab, 1) column broadcast over the row)
P = (N + 1).float()
P /= P.sum(1, keepdim=True)
print("rows sum to one:", torch.allclose(P.sum(1), torch.ones(vocab)), P.shape, P.dtype)

log_likelihood = 0.0
n = 0
for w in words:
    chs = ["."] + list(w) + ["."]
    for ch1, ch2 in zip(chs, chs[1:]):
        log_likelihood += torch.log(P[stoi[ch1], stoi[ch2]])
        n += 1
nll = -log_likelihood
print(f"{log_likelihood=}")
print(f"{nll=}")
print(f"{nll / n=}")

# the same score with index tensors instead of a Python loop
xs, ys = [], []
for w in words:
    chs = ["."] + list(w) + ["."]
    xs += [stoi[c] for c in chs[:-1]]
    ys += [stoi[c] for c in chs[1:]]
xs, ys = torch.tensor(xs), torch.tensor(ys)
print("vectorized:", -P[xs, ys].log().mean(), "pairs:", xs.numel())

g = torch.Generator().manual_seed(2147483647)
p = torch.rand(3, generator=g)
p = p / p.sum()
print("probabilities:", p)
draws = torch.multinomial(p, num_samples=20, replacement=True, generator=g)
print("draws:", draws, "counts:", torch.bincount(draws, minlength=3))

for _ in range(6):
    out, ix = [], 0
    while True:
        ix = torch.multinomial(P[ix], num_samples=1, replacement=True, generator=g).item()
        if ix == 0:
            break
        out.append(itos[ix])
    print("sampled:", "".join(out))

uniform = torch.ones(vocab) / vocab
print("a uniform model would score:", -uniform[ys].log().mean().item())
