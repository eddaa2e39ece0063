"""Tensor habits of everyday scripts: making tensors, dtypes, indexing, broadcasting, in-place updates, joining and
splitting, NumPy round trips and device moves, printing as we go."""
import numpy as np
import torch

# --- making tensors -------------------------------------------------------------------------------------------
grid = torch.tensor([[1, 2, 3], [4, 5, 6]])
print("grid:", grid, grid.dtype, grid.shape, grid.ndim, grid.numel())
print("float grid:", torch.tensor([[0.5, 1.5], [2.5, 3.5]]).dtype)
print("bools:", torch.tensor([True, False, True]).dtype)

readings = np.array([[0.25, -1.0], [3.0, 4.5]], dtype=np.float32)
from_np = torch.tensor(readings)  # a copy
shared = torch.from_numpy(readings)  # the same memory
readings[0, 0] = 100.0
print("copy keeps its value:", from_np[0, 0].item(), "shared sees the change:", shared[0, 0].item())
shared.mul_(2)
print("and NumPy sees ours:", readings[1].tolist())

zeros = torch.zeros(2, 3)
ones = torch.ones_like(zeros, dtype=torch.int64)
filled = torch.full((2, 2), 7.0)
steps = torch.arange(0, 10, 3)
ramp = torch.linspace(-1, 1, steps=5)
eye = torch.eye(3)
print(zeros, ones, filled, steps, ramp, eye, sep="\n")
print("empty shape:", torch.empty(4, 0).shape)

# --- dtypes and casts -----------------------------------------------------------------------------------------
halves = torch.arange(6) / 2
print("int / int:", halves, halves.dtype)
print("int // int:", torch.arange(6) // 4)
print("to float64:", grid.to(torch.float64).dtype, grid.double().dtype, grid.float().dtype)
print("int + float:", (grid + 0.5).dtype, "int + bool:", (grid + torch.tensor(True)).dtype)
print("long from float:", torch.tensor([1.7, -1.7]).long())

# --- indexing, slicing, masking -------------------------------------------------------------------------------
table = torch.arange(20.0).reshape(4, 5)
print("row 1:", table[1])
print("column 2:", table[:, 2])
print("last column:", table[..., -1])
print("every other row, reversed columns:", table[::2, [4, 0]])
print("corner block:", table[1:3, 1:4])
mask = table % 3 == 0
print("multiples of 3:", table[mask])
print("rows with a big first value:", table[table[:, 0] > 6])
picked = table[torch.tensor([0, 3]), torch.tensor([1, 4])]
print("picked:", picked)
table[table > 15] = -1.0
table[0, :2] = torch.tensor([9.0, 8.0])
print("after writes:", table)
print("where:", torch.where(table < 0, torch.zeros_like(table), table))
print("nonzero:", torch.nonzero(torch.tensor([0, 3, 0, 5])).flatten())

# --- broadcasting ---------------------------------------------------------------------------------------------
col = torch.tensor([[1.0], [2.0], [3.0]])
row = torch.tensor([10.0, 20.0])
print("outer sum:", col + row)
centered = table - table.mean(dim=0, keepdim=True)
print("column means after centering:", centered.mean(dim=0))
scaled = table / table.abs().max(dim=1, keepdim=True).values
print("rows scaled to 1:", scaled.abs().max(dim=1).values)

# --- arithmetic, reductions, matmul ---------------------------------------------------------------------------
a = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
b = torch.tensor([[0.5, -1.0], [2.0, 0.25]])
print("elementwise:", a * b, "matmul:", a @ b, "transpose:", a.T, sep="\n")
print("sum:", a.sum(), "mean over rows:", a.mean(0), "argmax:", a.argmax(), "max per row:", a.max(1))
total = a.sum().item()
print("a Python number:", total, type(total).__name__)
print("norm:", a.norm(), "std:", a.std(), "cumsum:", a.cumsum(dim=1))

# --- in place -------------------------------------------------------------------------------------------------
counter = torch.zeros(3)
counter.add_(1)
counter[1] += 5
counter.clamp_(max=4.0)
counter *= 0.5
print("in place:", counter)

# --- shapes, joining, splitting -------------------------------------------------------------------------------
flat = torch.arange(12)
print("view:", flat.view(3, 4))
print("reshape -1:", flat.reshape(-1, 6).shape, "unsqueeze:", flat.unsqueeze(0).shape,
      "squeeze:", torch.zeros(1, 3, 1).squeeze().shape)
print("permute:", torch.zeros(2, 3, 4).permute(2, 0, 1).shape)
stacked = torch.stack([a, b])
joined = torch.cat([a, b], dim=1)
print("stack:", stacked.shape, "cat:", joined)
first, second = torch.split(flat, [5, 7])
print("split:", first, second)
print("chunk:", [c.tolist() for c in flat.chunk(3)])
print("unbind:", [t.sum().item() for t in a.unbind(dim=1)])
print("contiguous after transpose:", a.T.is_contiguous(), a.T.contiguous().is_contiguous())

# --- devices (on the CPU here) --------------------------------------------------------------------------------
device = torch.device("cpu")
moved = a.to(device)
print("device:", moved.device, moved.device.type, a.cpu().device, moved.is_cuda)
back = moved.numpy()
back[0, 0] = -7.0
print("numpy() shares memory with the tensor:", a[0, 0].item())
copy = b.clone()
copy += 1
print("list:", b.tolist(), "a clone is new memory:", copy.tolist())
