"""Builders of malformed checkpoints and IDX files, shared by test_cli_train, test_data and test_bad_inputs."""
from __future__ import annotations

import gzip
import io
import json
import zipfile

import numpy as np

from gpugrad.cli import checkpoint


def npy_bytes(array) -> bytes:
    f = io.BytesIO()
    np.save(f, np.asarray(array), allow_pickle=False)
    return f.getvalue()


def npy_header(shape, descr="<f8") -> bytes:
    """A .npy header declaring ``shape`` of ``descr``, with no data after it."""
    f = io.BytesIO()
    np.lib.format.write_array_header_1_0(f, {"descr": descr, "fortran_order": False, "shape": shape})
    return f.getvalue()


def meta_text(tree_text, fmt="gpugrad-checkpoint", version=1) -> bytes:
    return f'{{"format": {json.dumps(fmt)}, "version": {version}, "tree": {tree_text}}}'.encode()


def write_zip(path, members, compression=zipfile.ZIP_STORED):
    """A zip of ``members`` (name -> bytes, or a callable writing into the open member for large ones)."""
    with zipfile.ZipFile(path, "w", compression) as z:
        for name, data in members.items():
            if callable(data):
                with z.open(name, "w", force_zip64=True) as f:
                    data(f)
            else:
                z.writestr(name, data)
    return path


def crafted_checkpoint(path, tree_text, members=(), compression=zipfile.ZIP_STORED, meta=None):
    """A checkpoint whose ``__meta__`` tree is the JSON text ``tree_text`` and whose other members are given."""
    meta = meta_text(tree_text) if meta is None else meta
    return write_zip(path, {"__meta__.npy": npy_bytes(np.frombuffer(meta, np.uint8)), **dict(members)}, compression)


def zeros_writer(header, nbytes, chunk=1 << 20):
    """A member writer: ``header`` then ``nbytes`` zero bytes, a chunk at a time (deflates ~1000:1)."""
    def write(f):
        f.write(header)
        zero = bytes(chunk)
        for start in range(0, nbytes, chunk):
            f.write(zero[: min(chunk, nbytes - start)])
    return write


def edited_checkpoint(src, dst, edit):
    """``src`` loaded, changed in place by ``edit(tree)``, saved to ``dst``."""
    tree = checkpoint.load(src, device="cpu")
    edit(tree)
    checkpoint.save(dst, tree)
    return dst


def idx_header(dims, code=0x08) -> bytes:
    return bytes([0, 0, code, len(dims)]) + np.asarray(dims, ">u4").tobytes()


def gzip_file(path, header, nbytes, chunk=1 << 20):
    """``header`` then ``nbytes`` zero bytes, gzip-compressed as a stream (never all in memory)."""
    with gzip.open(path, "wb", compresslevel=6) as f:
        zeros_writer(header, nbytes, chunk)(f)
    return path
