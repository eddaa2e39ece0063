"""The bad-input table: one row per malformed checkpoint, IDX file, argument, environment variable, dataset or
device, each asserting what gpugrad does with it -- a clear error (its class and a message fragment; for the CLI
an exit code and one line on stderr, never a traceback) or a correct result.

``python -m tests.files.test_bad_inputs [PATH]`` writes the same table as Markdown (default /tmp/bad_inputs_table.md).
"""
from __future__ import annotations

import os
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from gpugrad.cli import checkpoint, main
from gpugrad.cli.checkpoint import CheckpointError
from gpugrad.data import IdxError, TensorDataset, load_idx_dir, read_idx, write_idx, write_idx_dir
from tests import bad_files

FAST = ["--hidden", "8", "--device", "cpu", "--epochs", "1", "--quiet"]
_GOOD = {}  # one trained checkpoint per session, copied into each case's directory


# -- expectations ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Err:
    """Calling the case raises ``cls`` with ``fragment`` in its message."""
    cls: type
    fragment: str

    def describe(self):
        return f'{self.cls.__name__}: "…{self.fragment}…"', f"clear error ({self.cls.__name__})"


@dataclass(frozen=True)
class Exit:
    """``gpugrad train ARGS`` exits with ``code``, ``fragment`` in its output; codes 1 and 3 with exactly one
    ``gpugrad train: error:`` line on stderr."""
    code: int
    fragment: str

    def describe(self):
        kind = {0: "runs", 1: "one-line error", 2: "usage error (argparse)", 3: "stops: diverged"}[self.code]
        return f'exit {self.code}: "…{self.fragment}…"', f"{kind}, exit {self.code}"


@dataclass(frozen=True)
class Ok:
    """Calling the case returns a value for which ``check`` holds."""
    check: object
    what: str

    def describe(self):
        return self.what, "correct result"


@dataclass(frozen=True)
class Case:
    id: str
    area: str
    input: str
    act: object  # act(ctx) -> a thunk (Err, Ok) or the argument list of `gpugrad train` (Exit)
    expect: object


class Ctx:
    def __init__(self, tmp, monkeypatch):
        self.tmp, self.mp = tmp, monkeypatch

    def good(self, name="good.ckpt"):
        """A copy of a real 1-epoch `gpugrad train --hidden 8` checkpoint."""
        if "bytes" not in _GOOD:
            src = self.tmp / "_first.ckpt"
            assert main(["train", *FAST, "--checkpoint", str(src)]) == 0
            _GOOD["bytes"] = src.read_bytes()
            src.unlink()
        (self.tmp / name).write_bytes(_GOOD["bytes"])
        return self.tmp / name

    def edited(self, edit):
        return bad_files.edited_checkpoint(self.good(), self.tmp / "bad.ckpt", edit)

    def crafted(self, tree, members=(), **kw):
        return bad_files.crafted_checkpoint(self.tmp / "crafted.ckpt", tree, members, **kw)

    def idx_dir(self, name="idx", n=40, side=4, **files):
        """A small valid MNIST-format directory; ``files`` replace arrays (images/labels/test_images/test_labels)."""
        rng = np.random.default_rng(0)
        arrays = {"images": rng.integers(0, 256, (n, side, side), dtype=np.uint8),
                  "labels": (np.arange(n) % 4).astype(np.uint8),
                  "test_images": rng.integers(0, 256, (10, side, side), dtype=np.uint8),
                  "test_labels": (np.arange(10) % 4).astype(np.uint8)}
        arrays.update(files)
        return write_idx_dir(self.tmp / name, arrays["images"], arrays["labels"], arrays["test_images"],
                             arrays["test_labels"])

    def file(self, name, data):
        (self.tmp / name).write_bytes(data)
        return self.tmp / name


def _set(*keys_and_value):
    """An edit that sets tree[k1][k2]...[kn] = value."""
    *keys, last, value = keys_and_value

    def edit(tree):
        for k in keys:
            tree = tree[k]
        tree[last] = value
    return edit


def _resume(c, edit, *more):
    return ["--resume", str(c.edited(edit)), "--epochs", "2", *more]


def _images(dtype, fill=None, at=(3, 1, 1)):
    x = (np.random.default_rng(0).random((40, 4, 4))).astype(dtype)
    if fill is not None:
        x[at] = fill
    return x


def _read_only(c, directory):
    access = os.access
    c.mp.setattr(os, "access", lambda p, mode, **k: False if Path(p) == directory and mode & os.W_OK
                 else access(p, mode, **k))


def _stale_temps(c):
    path = c.good("run.ckpt")
    names = [".run.ckpt.999999999.abcdefgh.tmp", f".run.ckpt.{os.getppid()}.abcdefgh.tmp", ".run.ckpt.tmp"]
    for name in names:
        c.file(name, b"x")

    def save():
        checkpoint.save(path, {"epoch": 2})
        return sorted(p.name for p in c.tmp.iterdir())
    return save


def _round_trip(c):
    tree = {"a": np.asfortranarray(np.arange(6.0).reshape(2, 3)), "b": {1: (np.int16(-3), "x")}, "c": [None, 1.5]}

    def load():
        back = checkpoint.load(checkpoint.save(c.tmp / "t.ckpt", tree), device="cpu")
        return back, tree
    return load


def _same_tree(result):
    back, tree = result
    return (np.array_equal(back["a"], tree["a"]) and back["b"] == {1: (np.int16(-3), "x")}
            and back["c"] == [None, 1.5])


NESTED = '{"w": {"__array__": "w", "as": "numpy"}}'

CASES = [
    # -- checkpoints, loaded directly --------------------------------------------------------------------------------
    Case("ckpt-json-100k-deep", "checkpoint", "checkpoint whose `__meta__` JSON nests 100,000 lists deep",
         lambda c: lambda: checkpoint.load(c.crafted("[" * 100_000 + "]" * 100_000)),
         Err(CheckpointError, "__meta__ is nested too deeply")),
    Case("ckpt-tree-500-deep", "checkpoint", "checkpoint tree 500 levels deep (parses, deeper than MAX_DEPTH 64)",
         lambda c: lambda: checkpoint.load(c.crafted("[" * 500 + "]" * 500)),
         Err(CheckpointError, "nesting deeper than 64 levels")),
    Case("ckpt-missing-member", "checkpoint", "tree refers to array member `w`, which the zip lacks",
         lambda c: lambda: checkpoint.load(c.crafted(NESTED)),
         Err(CheckpointError, "array member 'w' is missing at /w")),
    Case("ckpt-unknown-kind", "checkpoint", 'array leaf with `"as": "pickle"`',
         lambda c: lambda: checkpoint.load(c.crafted(NESTED.replace("numpy", "pickle"),
                                                     {"w.npy": bad_files.npy_bytes(np.zeros(2))})),
         Err(CheckpointError, "unknown array kind 'pickle'")),
    Case("ckpt-shape-2**40", "checkpoint", ".npy header declaring shape (2**40,) float64 with no data",
         lambda c: lambda: checkpoint.load(c.crafted(NESTED, {"w.npy": bad_files.npy_header((2**40,))})),
         Err(CheckpointError, "declares shape (1099511627776,) of float64 (8,796,093,022,208 bytes) but holds 0")),
    Case("ckpt-shape-vs-bytes", "checkpoint", ".npy header declaring 10 float64 over 8 bytes of data",
         lambda c: lambda: checkpoint.load(c.crafted(NESTED, {"w.npy": bad_files.npy_header((10,)) + bytes(8)})),
         Err(CheckpointError, "declares shape (10,) of float64 (80 bytes) but holds 8 bytes")),
    Case("ckpt-deflate-bomb", "checkpoint", "32 MiB member deflated to ~32 KiB, loaded with max_bytes=16 MiB",
         lambda c: lambda: checkpoint.load(c.crafted(NESTED, {"w.npy": bad_files.zeros_writer(
             bad_files.npy_header((32 << 20,), "|u1"), 32 << 20)}, compression=zipfile.ZIP_DEFLATED),
             max_bytes=16 << 20),
         Err(CheckpointError, "more than the limit of 16,777,216; if you trust the file, raise the limit with "
                              "GPUGRAD_MAX_CHECKPOINT_BYTES")),
    Case("ckpt-object-dtype", "checkpoint", "member with dtype `|O` (would need pickle)",
         lambda c: lambda: checkpoint.load(c.crafted(NESTED, {"w.npy": bad_files.npy_header((1,), "|O") + bytes(8)})),
         Err(CheckpointError, "member 'w.npy' holds Python objects")),
    Case("ckpt-bad-npy-header", "checkpoint", "member with the .npy magic but a garbage header",
         lambda c: lambda: checkpoint.load(c.crafted(NESTED, {"w.npy": b"\x93NUMPY\x01\x00\x10\x00{'descr': 5}  \n"})),
         Err(CheckpointError, "member 'w.npy' has a bad .npy header")),
    Case("ckpt-npy-version-9", "checkpoint", ".npy format version 9.0",
         lambda c: lambda: checkpoint.load(c.crafted(NESTED, {"w.npy": b"\x93NUMPY\x09\x00" + bytes(8)})),
         Err(CheckpointError, "bad .npy header")),
    Case("ckpt-foreign-member", "checkpoint", "zip holding `notes.txt` besides the arrays",
         lambda c: lambda: checkpoint.load(c.crafted("{}", {"notes.txt": b"hi"})),
         Err(CheckpointError, "a member that is not a .npy array: 'notes.txt'")),
    Case("ckpt-bad-dict", "checkpoint", '`{"__dict__": 5}` in the tree',
         lambda c: lambda: checkpoint.load(c.crafted('{"__dict__": 5}')),
         Err(CheckpointError, "a dict that is not a list of [str or int key, value] pairs")),
    Case("ckpt-meta-not-json", "checkpoint", "`__meta__` holding bytes that are not UTF-8 JSON",
         lambda c: lambda: checkpoint.load(c.crafted("", meta=b"\xff\xfe{not json")),
         Err(CheckpointError, "unreadable checkpoint (UnicodeDecodeError")),
    Case("ckpt-meta-no-tree", "checkpoint", "`__meta__` with format and version but no tree",
         lambda c: lambda: checkpoint.load(c.crafted("", meta=b'{"format": "gpugrad-checkpoint", "version": 1}')),
         Err(CheckpointError, "__meta__ has no 'tree'")),
    Case("ckpt-future-version", "checkpoint", "checkpoint of format version 99",
         lambda c: lambda: checkpoint.load(c.crafted("{}", meta=bad_files.meta_text("{}", version=99))),
         Err(CheckpointError, "version 99; this gpugrad reads 'gpugrad-checkpoint' version 1")),
    Case("ckpt-plain-npz", "checkpoint", "an ordinary `np.savez` file (no `__meta__`)",
         lambda c: lambda: (np.savez(c.tmp / "p.npz", a=np.zeros(2)), checkpoint.load(c.tmp / "p.npz")),
         Err(CheckpointError, "no __meta__ member")),
    Case("ckpt-not-zip", "checkpoint", "a text file given as checkpoint",
         lambda c: lambda: checkpoint.load(c.file("notes.ckpt", b"hello")),
         Err(CheckpointError, "(not an .npz archive)")),
    Case("ckpt-empty-file", "checkpoint", "an empty file",
         lambda c: lambda: checkpoint.load(c.file("empty.ckpt", b"")),
         Err(CheckpointError, "not a gpugrad checkpoint")),
    Case("ckpt-truncated", "checkpoint", "the first half of a real checkpoint",
         lambda c: lambda: checkpoint.load(c.file("half.ckpt", c.good().read_bytes()[:3000])),
         Err(CheckpointError, "not a gpugrad checkpoint")),
    Case("ckpt-bit-flip", "checkpoint", "a real checkpoint with one byte flipped in an array (CRC mismatch)",
         lambda c: lambda: checkpoint.load(c.file("flip.ckpt", _flip(c.good().read_bytes()))),
         Err(CheckpointError, "unreadable checkpoint (BadZipFile")),
    Case("ckpt-missing-file", "checkpoint", "a path with no file",
         lambda c: lambda: checkpoint.load(c.tmp / "nowhere.ckpt"),
         Err(FileNotFoundError, "nowhere.ckpt: no such checkpoint")),
    Case("ckpt-env-cap", "env", "`GPUGRAD_MAX_CHECKPOINT_BYTES=100`, a 13 KB checkpoint",
         lambda c: (c.mp.setenv("GPUGRAD_MAX_CHECKPOINT_BYTES", "100"), lambda: checkpoint.load(c.good()))[1],
         Err(CheckpointError, "more than the limit of 100;")),
    Case("ckpt-env-cap-bad", "env", "`GPUGRAD_MAX_CHECKPOINT_BYTES=lots`",
         lambda c: (c.mp.setenv("GPUGRAD_MAX_CHECKPOINT_BYTES", "lots"), lambda: checkpoint.load(c.good()))[1],
         Err(CheckpointError, "GPUGRAD_MAX_CHECKPOINT_BYTES='lots': expected a whole number of bytes")),
    Case("ckpt-round-trip", "checkpoint", "nested tree: Fortran-order array, int keys, tuple, int16 scalar, None",
         _round_trip, Ok(_same_tree, "loads back equal, dtypes and order kept")),

    # -- checkpoints, through `gpugrad train --resume` ---------------------------------------------------------------
    Case("resume-hidden-str", "checkpoint", "`--resume` with config `hidden=['a']`",
         lambda c: _resume(c, _set("config", "hidden", ["a"])), Exit(1, "config/hidden is ['a'], but --hidden")),
    Case("resume-lr-str", "checkpoint", "`--resume` with config `lr='fast'`",
         lambda c: _resume(c, _set("config", "lr", "fast")), Exit(1, "config/lr is 'fast', but --lr must be")),
    Case("resume-lr-nan", "checkpoint", "`--resume` with config `lr=nan`",
         lambda c: _resume(c, _set("config", "lr", float("nan"))), Exit(1, "config/lr is nan")),
    Case("resume-epochs-negative", "checkpoint", "`--resume` with config `epochs=-3`",
         lambda c: _resume(c, _set("config", "epochs", -3)), Exit(1, "config/epochs is -3, but --epochs must be a "
                                                                     "positive integer")),
    Case("resume-batch-float", "checkpoint", "`--resume` with config `batch_size=2.5`",
         lambda c: _resume(c, _set("config", "batch_size", 2.5)), Exit(1, "config/batch_size is 2.5")),
    Case("resume-standardize-str", "checkpoint", "`--resume` with config `standardize='yes'`",
         lambda c: _resume(c, _set("config", "standardize", "yes")), Exit(1, "--standardize must be true or false")),
    Case("resume-config-missing", "checkpoint", "`--resume` with no `lr` in the config",
         lambda c: _resume(c, lambda t: t["config"].pop("lr")), Exit(1, "not a checkpoint of `gpugrad train` "
                                                                        "(no config/lr)")),
    Case("resume-optimizer-lr-nan", "checkpoint", "`--resume` with the optimizer's own `lr=nan`",
         lambda c: _resume(c, lambda t: t["optimizer"]["param_groups"][0].__setitem__("lr", float("nan"))),
         Exit(1, "optimizer/param_groups/0/lr is nan, but the run's config gives 0.001")),
    Case("resume-step-str", "checkpoint", "`--resume` with Adam's step count `'x'`",
         lambda c: _resume(c, lambda t: t["optimizer"]["state"][0].__setitem__("step", "x")),
         Exit(1, "optimizer/state/0/step is 'x', not a finite array or a step count")),
    Case("resume-exp-avg-inf", "checkpoint", "`--resume` with an infinite Adam moment",
         lambda c: _resume(c, lambda t: t["optimizer"]["state"][0]["exp_avg"].__setitem__(0, np.inf)),
         Exit(1, "optimizer/state/0/exp_avg holds NaN or infinite values")),
    Case("resume-weight-nan", "checkpoint", "`--resume` with a NaN weight",
         lambda c: _resume(c, lambda t: t["model"]["0.weight"].__setitem__((0, 0), np.nan)),
         Exit(1, "model/0.weight holds NaN or infinite values")),
    Case("resume-weight-str", "checkpoint", "`--resume` with a string where a weight belongs",
         lambda c: _resume(c, _set("model", "0.weight", "w")), Exit(1, "model/0.weight holds a str, not an array")),
    Case("resume-progress-str", "checkpoint", "`--resume` with `progress/epoch='x'`",
         lambda c: _resume(c, _set("progress", "epoch", "x")), Exit(1, "progress/epoch is 'x'; it must be an "
                                                                       "integer >= 0")),
    Case("resume-progress-extra", "checkpoint", "`--resume` with an unknown progress field",
         lambda c: _resume(c, _set("progress", "colour", 1)), Exit(1, "progress has unknown field(s) colour")),
    Case("resume-history-bad", "checkpoint", "`--resume` with a history entry that is a string",
         lambda c: _resume(c, lambda t: t["progress"]["history"].__setitem__(0, "x")),
         Exit(1, "progress/history is ['x']; it must be a list of per-epoch records")),
    Case("resume-rng-bad", "checkpoint", "`--resume` with a generator state of another kind",
         lambda c: _resume(c, _set("rng", "numpy", {"bit_generator": "MT19937"})),
         Exit(1, "rng/numpy is not a state of NumPy's PCG64")),
    Case("resume-conflict", "cli", "`--resume` with a different `--hidden`",
         lambda c: ["--resume", str(c.good()), "--hidden", "16"],
         Exit(1, "--hidden 16 differs from the checkpoint's --hidden 8")),
    Case("resume-finished", "cli", "`--resume` of a finished run, no new `--epochs`",
         lambda c: ["--resume", str(c.good())], Exit(0, "already finished 1 epochs; nothing to do")),
    Case("resume-read-only", "cli", "`--resume` from a directory that is not writable",
         lambda c: (_read_only(c, c.tmp), ["--resume", str(c.good()), "--epochs", "2"])[1],
         Exit(1, "is not writable (a resumed run saves back to it; pass --checkpoint PATH")),
    Case("resume-text-file", "cli", "`--resume notes.txt`",
         lambda c: ["--resume", str(c.file("notes.txt", b"hello"))], Exit(1, "not a gpugrad checkpoint")),
    Case("resume-env-cap", "env", "`GPUGRAD_MAX_CHECKPOINT_BYTES=100` with `--resume`",
         lambda c: (c.mp.setenv("GPUGRAD_MAX_CHECKPOINT_BYTES", "100"), ["--resume", str(c.good())])[1],
         Exit(1, "more than the limit of 100; if you trust the file")),
    Case("resume-deep-json", "checkpoint", "`--resume` of a checkpoint with 100,000-deep JSON",
         lambda c: ["--resume", str(c.crafted("[" * 100_000 + "]" * 100_000))], Exit(1, "nested too deeply")),

    # -- IDX files -----------------------------------------------------------------------------------------------
    Case("idx-255-dims", "idx", "IDX header declaring 255 dimensions of size 1",
         lambda c: lambda: read_idx(c.file("x", bad_files.idx_header((1,) * 255) + b"\x01")),
         Err(IdxError, "declares 255 dimensions; gpugrad reads at most 32")),
    Case("idx-overflow", "idx", "IDX dims 65536^4 (byte count 2^64 overflows int64)",
         lambda c: lambda: read_idx(c.file("x", bad_files.idx_header((65536,) * 4))),
         Err(IdxError, "needs 18446744073709551616 bytes after the header, the file has 0")),
    Case("idx-gzip-declares-4GiB", "idx", "gzip IDX whose header declares 65536x256x256 uint8 (4 GiB)",
         lambda c: lambda: read_idx(bad_files.gzip_file(c.tmp / "x.gz", bad_files.idx_header((65536, 256, 256)),
                                                        1000)),
         Err(IdxError, "declares 4,294,967,296 bytes of data, more than the limit of 1,073,741,824")),
    Case("idx-gzip-trailing-bomb", "idx", "gzip IDX declaring 10 bytes, then 16 MiB of zeros (16 KiB on disk)",
         lambda c: lambda: read_idx(bad_files.gzip_file(c.tmp / "x.gz", bad_files.idx_header((10,)), 16 << 20)),
         Err(IdxError, "unexpected trailing bytes after the data of shape (10,)")),
    Case("idx-bad-magic", "idx", "file starting 0x12340803",
         lambda c: lambda: read_idx(c.file("x", b"\x12\x34\x08\x03" + bytes(20))),
         Err(IdxError, "bad magic number 0x12340803")),
    Case("idx-bad-type", "idx", "element type 0x07",
         lambda c: lambda: read_idx(c.file("x", b"\x00\x00\x07\x01\x00\x00\x00\x01\x00")),
         Err(IdxError, "bad magic number 0x00000701")),
    Case("idx-zero-dims", "idx", "header declaring 0 dimensions",
         lambda c: lambda: read_idx(c.file("x", b"\x00\x00\x08\x00")), Err(IdxError, "declares 0 dimensions")),
    Case("idx-short-magic", "idx", "a 2-byte file", lambda c: lambda: read_idx(c.file("x", b"\x00\x00")),
         Err(IdxError, "truncated header: 2 bytes")),
    Case("idx-short-dims", "idx", "3 dimensions declared, 1 present",
         lambda c: lambda: read_idx(c.file("x", b"\x00\x00\x08\x03\x00\x00\x00\x05")),
         Err(IdxError, "3 dimensions need 16 bytes, the file has 8")),
    Case("idx-truncated-data", "idx", "shape (3, 4) with 5 data bytes",
         lambda c: lambda: read_idx(c.file("x", bad_files.idx_header((3, 4)) + bytes(5))),
         Err(IdxError, "truncated data: shape (3, 4) of uint8 needs 12 bytes after the header, the file has 5")),
    Case("idx-trailing-raw", "idx", "shape (3,) with 5 data bytes",
         lambda c: lambda: read_idx(c.file("x", bad_files.idx_header((3,)) + bytes(5))),
         Err(IdxError, "2 unexpected trailing bytes after the data of shape (3,)")),
    Case("idx-corrupt-gzip", "idx", "gzip magic followed by zeros",
         lambda c: lambda: read_idx(c.file("x.gz", b"\x1f\x8b\x08\x00" + bytes(40))),
         Err(IdxError, "x.gz: corrupt gzip data")),
    Case("idx-truncated-gzip", "idx", "first half of a gzip IDX file",
         lambda c: lambda: read_idx(c.file("x.gz", write_idx(c.tmp / "full.gz",
                                                             np.arange(4000, dtype=np.int32)).read_bytes()[:200])),
         Err(IdxError, "corrupt gzip data")),
    Case("idx-env-cap", "env", "`GPUGRAD_MAX_IDX_BYTES=100`, a 784-byte IDX file",
         lambda c: (c.mp.setenv("GPUGRAD_MAX_IDX_BYTES", "100"),
                    lambda: read_idx(write_idx(c.tmp / "x", np.zeros((28, 28), np.uint8))))[1],
         Err(IdxError, "declares 784 bytes of data, more than the limit of 100; if the file is right")),
    Case("idx-env-cap-bad", "env", "`GPUGRAD_MAX_IDX_BYTES=-5`",
         lambda c: (c.mp.setenv("GPUGRAD_MAX_IDX_BYTES", "-5"),
                    lambda: read_idx(write_idx(c.tmp / "x", np.zeros(3, np.uint8))))[1],
         Err(IdxError, "GPUGRAD_MAX_IDX_BYTES='-5': expected a whole number of bytes >= 0")),
    Case("idx-max-bytes-arg", "idx", "`GPUGRAD_MAX_IDX_BYTES=100` but `read_idx(max_bytes=1000)`",
         lambda c: (c.mp.setenv("GPUGRAD_MAX_IDX_BYTES", "100"),
                    lambda: read_idx(write_idx(c.tmp / "x", np.ones((28, 28), np.uint8)), max_bytes=1000))[1],
         Ok(lambda a: a.shape == (28, 28) and a.sum() == 784, "reads it: the argument overrides the variable")),
    Case("idx-big-endian", "idx", "int16 IDX (big-endian on disk) with -32768 and 32767",
         lambda c: lambda: read_idx(write_idx(c.tmp / "x.gz", np.array([-32768, 0, 32767], np.int16))),
         Ok(lambda a: a.dtype == np.int16 and a.dtype.isnative and a.tolist() == [-32768, 0, 32767],
            "native int16, exact values")),
    Case("idx-count-mismatch", "idx", "40 images, 39 labels",
         lambda c: lambda: load_idx_dir(c.idx_dir(labels=(np.arange(39) % 4).astype(np.uint8))),
         Err(IdxError, "has 40 images but")),
    Case("idx-cli-255-dims", "cli", "`--data` dir whose train images declare 255 dimensions",
         lambda c: ["--data", str(_replace(c.idx_dir(), "train-images-idx3-ubyte",
                                           bad_files.idx_header((1,) * 255) + b"\x01")), *FAST],
         Exit(1, "train-images-idx3-ubyte: magic number 0x000008ff declares 255 dimensions")),

    # -- data ----------------------------------------------------------------------------------------------------
    Case("data-nan-cli", "data", "`--data` with a NaN pixel in float32 train images",
         lambda c: ["--data", str(c.idx_dir(images=_images(np.float32, np.nan))), *FAST],
         Exit(1, "train-images-idx3-ubyte: 1 pixel value(s) are NaN or infinite (the first in image 3)")),
    Case("data-inf", "data", "an infinite pixel in float32 test images",
         lambda c: lambda: load_idx_dir(c.idx_dir(test_images=_images(np.float32, np.inf)[:10])),
         Err(IdxError, "t10k-images-idx3-ubyte: 1 pixel value(s) are NaN or infinite")),
    Case("data-float64-overflow", "data", "float64 pixel 1e300 (beyond float32)",
         lambda c: lambda: load_idx_dir(c.idx_dir(images=_images(np.float64, 1e300))),
         Err(IdxError, "NaN, infinite or beyond float32's range")),
    Case("data-huge-finite", "data", "finite float32 pixels near 3e38, `--no-standardize` (logits overflow)",
         lambda c: ["--data", str(c.idx_dir(images=_images(np.float32) * np.float32(3e38))), "--no-standardize",
                    *FAST],
         Exit(3, "training diverged in epoch 1")),
    Case("data-empty-train", "data", "train split with 0 images",
         lambda c: lambda: load_idx_dir(c.idx_dir(n=0)),
         Err(IdxError, "train-images-idx3-ubyte: no images; the train split needs at least one")),
    Case("data-float-labels", "data", "float32 labels",
         lambda c: lambda: load_idx_dir(c.idx_dir(labels=np.zeros(40, np.float32))),
         Err(IdxError, "labels must be integers, got float32")),
    Case("data-2d-labels", "data", "labels of shape (40, 1)",
         lambda c: lambda: load_idx_dir(c.idx_dir(labels=np.zeros((40, 1), np.uint8))),
         Err(IdxError, "labels need 1 dimension (N,), got shape (40, 1)")),
    Case("data-1d-images", "data", "images of shape (40,)",
         lambda c: lambda: load_idx_dir(c.idx_dir(images=np.zeros(40, np.uint8))),
         Err(IdxError, "images need at least 2 dimensions")),
    Case("data-negative-labels", "data", "int8 label -1",
         lambda c: lambda: load_idx_dir(c.idx_dir(labels=np.full(40, -1, np.int8))),
         Err(IdxError, "negative label -1")),
    Case("data-label-70000", "data", "int32 label 70000 (`gpugrad train`)",
         lambda c: ["--data", str(c.idx_dir(labels=np.full(40, 70000, np.int32))), *FAST],
         Exit(1, "label 70000 is not a class index in [0, 65536)")),
    Case("data-feature-mismatch", "data", "4x4 train images, 5x5 test images",
         lambda c: lambda: load_idx_dir(c.idx_dir(test_images=np.zeros((10, 5, 5), np.uint8))),
         Err(IdxError, "train images have 16 values each but test images have 25")),
    Case("data-int32-images", "data", "int32 images (taken as already scaled)",
         lambda c: lambda: load_idx_dir(c.idx_dir(images=np.full((40, 4, 4), 7, np.int32))),
         Ok(lambda r: r[0].dtype == np.float32 and (r[0] == 7).all() and r[0].shape == (40, 16),
            "float32 (40, 16), values unchanged")),
    Case("data-missing-dir", "data", "`--data` naming no directory",
         lambda c: ["--data", str(c.tmp / "nowhere"), *FAST], Exit(1, "nowhere: not a directory")),
    Case("data-missing-file", "data", "`--data` dir without the train labels",
         lambda c: ["--data", str(_replace(c.idx_dir(), "train-labels-idx1-ubyte", None)), *FAST],
         Exit(1, "missing IDX file train-labels-idx1-ubyte")),
    Case("data-dataset-lengths", "data", "`TensorDataset` of 3 inputs and 4 labels",
         lambda c: lambda: TensorDataset(np.zeros(3), np.zeros(4)), Err(ValueError, "different lengths")),
    Case("data-dataset-0d", "data", "`TensorDataset` of a 0-d array",
         lambda c: lambda: TensorDataset(np.float32(1.0)), Err(ValueError, "0-d")),

    # -- command-line arguments ----------------------------------------------------------------------------------
    Case("cli-lr-1e30", "cli", "`--lr 1e30`", lambda c: [*FAST, "--lr", "1e30"],
         Exit(3, "training diverged in epoch 1: train_loss nan")),
    Case("cli-lr-1e30-checkpoint", "cli", "`--lr 1e30 --epochs 3 --checkpoint run.ckpt`",
         lambda c: [*FAST, "--lr", "1e30", "--epochs", "3", "--checkpoint", str(c.tmp / "run.ckpt")],
         Exit(3, "stopped without saving it. Try a smaller --lr")),
    Case("cli-lr-nan", "cli", "`--lr nan`", lambda c: ["--lr", "nan"],
         Exit(2, "argument --lr: expected a positive finite number, got 'nan'")),
    Case("cli-lr-inf", "cli", "`--lr inf`", lambda c: ["--lr", "inf"], Exit(2, "expected a positive finite number")),
    Case("cli-lr-zero", "cli", "`--lr 0`", lambda c: ["--lr", "0"], Exit(2, "expected a positive finite number")),
    Case("cli-hidden-letters", "cli", "`--hidden a,b`", lambda c: ["--hidden", "a,b"],
         Exit(2, "argument --hidden: expected comma-separated positive layer sizes")),
    Case("cli-hidden-zero", "cli", "`--hidden 0`", lambda c: ["--hidden", "0"],
         Exit(2, "expected comma-separated positive layer sizes like 256,128, got '0'")),
    Case("cli-hidden-huge", "cli", "`--hidden 1000000000000`", lambda c: [*FAST, "--hidden", "1000000000000"],
         Exit(1, "not enough memory")),
    Case("cli-epochs-zero", "cli", "`--epochs 0`", lambda c: ["--epochs", "0"],
         Exit(2, "argument --epochs: expected a positive integer, got '0'")),
    Case("cli-batch-negative", "cli", "`--batch-size -1`", lambda c: ["--batch-size", "-1"],
         Exit(2, "expected a positive integer")),
    Case("cli-momentum-negative", "cli", "`--momentum -0.5`", lambda c: ["--momentum", "-0.5"],
         Exit(2, "expected a finite number >= 0")),
    Case("cli-seed-negative", "cli", "`--seed -1`", lambda c: ["--seed", "-1"],
         Exit(2, "argument --seed: expected an integer >= 0")),
    Case("cli-activation", "cli", "`--activation swish`", lambda c: ["--activation", "swish"],
         Exit(2, "invalid choice: 'swish'")),
    Case("cli-checkpoint-exists", "cli", "`--checkpoint` naming another run's checkpoint, no `--resume`",
         lambda c: [*FAST, "--checkpoint", str(c.good())],
         Exit(1, "already exists; pass --resume")),
    Case("cli-checkpoint-overwrite", "cli", "the same with `--overwrite`",
         lambda c: [*FAST, "--checkpoint", str(c.good()), "--overwrite"], Exit(0, "final: test_acc")),
    Case("cli-checkpoint-dir", "cli", "`--checkpoint` naming a directory",
         lambda c: [*FAST, "--checkpoint", str(c.tmp)], Exit(1, "is a directory; give a file path")),
    Case("cli-metrics-under-file", "cli", "`--metrics-json` below a regular file",
         lambda c: [*FAST, "--metrics-json", str(c.file("f", b"x") / "m.json")],
         Exit(1, "cannot create its directory")),

    # -- environment and devices ---------------------------------------------------------------------------------
    Case("env-device-tpu", "device", "`GPUGRAD_DEVICE=tpu`",
         lambda c: (c.mp.setenv("GPUGRAD_DEVICE", "tpu"), ["--epochs", "1"])[1],
         Exit(1, "GPUGRAD_DEVICE='tpu' (from the environment): unknown device 'tpu'")),
    Case("env-device-cuda99", "device", "`GPUGRAD_DEVICE=cuda:99` (no such GPU, or no CUDA)",
         lambda c: (c.mp.setenv("GPUGRAD_DEVICE", "cuda:99"), ["--epochs", "1"])[1],
         Exit(1, "GPUGRAD_DEVICE='cuda:99' (from the environment): ")),
    Case("env-device-overridden", "device", "`GPUGRAD_DEVICE=tpu` with `--device cpu`",
         lambda c: (c.mp.setenv("GPUGRAD_DEVICE", "tpu"), FAST)[1], Exit(0, "final: test_acc")),
    Case("env-device-empty", "device", "`GPUGRAD_DEVICE=` (empty: the default device)",
         lambda c: (c.mp.setenv("GPUGRAD_DEVICE", ""), ["--hidden", "8", "--epochs", "1", "--quiet"])[1],
         Exit(0, "final: test_acc")),
    Case("cli-device-tpu", "device", "`--device tpu`", lambda c: ["--device", "tpu"],
         Exit(1, "--device tpu: unknown device 'tpu'")),
    Case("cli-device-cuda99", "device", "`--device cuda:99`", lambda c: ["--device", "cuda:99", "--epochs", "1"],
         Exit(1, "--device cuda:99: ")),
    Case("cli-cuda-graph-cpu", "device", "`--cuda-graph --device cpu`", lambda c: [*FAST, "--cuda-graph"],
         Exit(1, "--cuda-graph needs a CUDA device, but training runs on cpu")),

    # -- saving --------------------------------------------------------------------------------------------------
    Case("save-stale-temps", "checkpoint", "temp files of a killed save (dead pid), a live pid's, `.run.ckpt.tmp`",
         _stale_temps, Ok(lambda names: names == [f".run.ckpt.{os.getppid()}.abcdefgh.tmp", ".run.ckpt.tmp",
                                                  "good.ckpt", "run.ckpt"],
                          "the dead writer's temp file removed; the live one's and look-alikes kept")),
]


def _replace(directory, name, data):
    """``directory`` with file ``name`` replaced by ``data`` (None: removed)."""
    if data is None:
        (directory / name).unlink()
    else:
        (directory / name).write_bytes(data)
    return directory


def _flip(data):
    data = bytearray(data)
    data[len(data) // 2] ^= 0xFF
    return bytes(data)


# -- the test ----------------------------------------------------------------------------------------------------------
def test_the_table_is_large_and_ids_are_unique():
    assert len(CASES) >= 60 and len({c.id for c in CASES}) == len(CASES)
    assert {c.area for c in CASES} == {"checkpoint", "idx", "cli", "env", "data", "device"}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_input(case, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("GPUGRAD_MAX_CHECKPOINT_BYTES", raising=False)
    monkeypatch.delenv("GPUGRAD_MAX_IDX_BYTES", raising=False)
    ctx = Ctx(tmp_path, monkeypatch)
    ctx.good()  # trained before any case's environment applies
    capsys.readouterr()
    action, expect = case.act(ctx), case.expect
    if isinstance(expect, Exit):
        try:
            code = main(["train", *action])
        except SystemExit as e:
            code = e.code
        out, err = capsys.readouterr()
        assert "Traceback" not in err and code == expect.code, (code, out, err)
        assert expect.fragment in out + err, (out, err)
        if expect.code in (1, 3):
            lines = [line for line in err.splitlines() if line]
            assert len(lines) == 1 and lines[0].startswith("gpugrad train: error: "), err
    elif isinstance(expect, Err):
        with pytest.raises(expect.cls) as e:
            action()
        assert expect.fragment in str(e.value), str(e.value)
    else:
        result = action()
        assert expect.check(result), result


def table_markdown():
    rows = ["| # | area | input | behaviour | verdict |", "|---|---|---|---|---|"]
    for i, case in enumerate(CASES, 1):
        behaviour, verdict = case.expect.describe()
        cells = [str(i), case.area, case.input, behaviour, f"OK: {verdict}"]
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/bad_inputs_table.md")
    target.write_text("# gpugrad bad-input table\n\nEvery row is a case of tests/files/test_bad_inputs.py; all pass.\n\n"
                      + table_markdown())
    print(f"{len(CASES)} cases -> {target}")
