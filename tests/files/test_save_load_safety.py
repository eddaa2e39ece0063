"""gpugrad.save / gpugrad.load as files a user can trust (issue #21): what save accepts, load rebuilds exactly (Size,
return types, complex128), or save refuses; a save goes through a symlink, keeps the file's mode and fails cleanly on
a full disk; load reads the header first and refuses, with an error naming the file, non-regular files, sizes past the
file or the byte cap, and every inconsistency a crafted file can hold."""
from __future__ import annotations

import collections
import enum
import io
import json
import os
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gpugrad
from gpugrad.serialization import FORMAT, SerializationError

MAX_BYTES_ENV = "GPUGRAD_MAX_CHECKPOINT_BYTES"  # the CLI checkpoint reader's cap, shared by gpugrad.load


def round_trip(obj, **kw):
    buf = io.BytesIO()
    gpugrad.save(obj, buf)
    buf.seek(0)
    return gpugrad.load(buf, **kw)


def _python(code, timeout=60, **env):
    """Run ``code`` in a fresh interpreter (gpugrad importable, on the CPU); its CompletedProcess."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "GPUGRAD_DEVICE": "cpu", **env})


# ---- item 6: what save writes, load rebuilds exactly, or save refuses ---------------------------------------------

def test_sizes_and_return_types_round_trip_with_their_types():
    x = gpugrad.tensor([[1.0, 5.0, 2.0], [7.0, 0.0, 3.0]])
    back = round_trip({"shape": x.shape, "max": x.max(1), "sorted": x.sort(1), "nested": [x.shape[1:], ()]})
    assert type(back["shape"]) is gpugrad.Size and back["shape"] == (2, 3)
    assert type(back["max"]) is gpugrad.return_types.max and back["max"].values.tolist() == [5.0, 7.0]
    assert back["max"].indices.tolist() == [1, 0] and back["sorted"].indices.tolist() == [[0, 2, 1], [1, 2, 0]]
    assert type(back["sorted"]) is gpugrad.return_types.sort
    assert type(back["nested"][0]) is gpugrad.Size and back["nested"][0] == (3,) and type(back["nested"][1]) is tuple


class Color(enum.IntEnum):
    RED = 1


class Pair(tuple):
    pass


class Stack(list):
    pass


class Label(str):
    pass


Point = collections.namedtuple("Point", "x y")


@pytest.mark.parametrize("value, kind, fix", [
    (Point(1, 2), "Point", r"\._asdict\(\)"), (Pair((1, 2)), "Pair", r"tuple\(\.\.\.\)"),
    (Stack([1]), "Stack", r"list\(\.\.\.\)"), (Color.RED, "Color", r"int\(\.\.\.\)"),
    (Label("a"), "Label", r"str\(\.\.\.\)"), (collections.defaultdict(list), "defaultdict", r"dict\(\.\.\.\)"),
    (np.array(["a"]), "dtype <U1", r"astype"), (np.array([1], np.longdouble), "dtype float128", r"astype"),
], ids=["namedtuple", "tuple-subclass", "list-subclass", "IntEnum", "str-subclass", "defaultdict", "str-array",
        "longdouble"])
def test_what_load_could_not_rebuild_is_refused_at_save_naming_the_place(value, kind, fix):
    with pytest.raises(TypeError, match=rf"gpugrad.save: cannot store the object\['run'\]\[1\], .*{kind}.*{fix}"):
        gpugrad.save({"run": [0, value]}, io.BytesIO())


@pytest.mark.parametrize("value", [
    gpugrad.Size([2, 3]), gpugrad.arange(4.0).reshape(2, 2).max(0), gpugrad.arange(3.0).aminmax(), Point(1, 2),
    Pair((1,)), Color.RED, collections.OrderedDict(a=1), collections.defaultdict(int), {(1, (2, 3)): [None]},
    np.arange(3, dtype=np.complex128), np.float16(1.5), np.array(["x"]), float("inf"), 2**80,
], ids=lambda v: type(v).__name__)
def test_save_never_writes_a_file_that_load_refuses(value):
    """Either save refuses (TypeError) or load gives back the same types and values."""
    try:
        back = round_trip([value])[0]
    except TypeError as e:
        assert str(e).startswith("gpugrad.save: cannot store")
        return
    assert type(back) is type(value)
    if isinstance(value, np.ndarray):
        assert back.dtype == value.dtype and back.tolist() == value.tolist()
    elif isinstance(value, tuple) and value and isinstance(value[0], gpugrad.Tensor):
        assert [t.tolist() for t in back] == [t.tolist() for t in value]
    else:
        assert back == value


# ---- item 21: complex tensors, and crafted files --------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_tensors_arrays_and_scalars_round_trip_exactly(dtype):
    rng = np.random.default_rng(0)
    for shape in [(), (0,), (3,), (2, 0, 2), (2, 3)]:
        a = np.asarray(rng.standard_normal(shape) + 1j * rng.standard_normal(shape), dtype)
        t, arr, s = round_trip([gpugrad.tensor(a), a, a.reshape(-1)[:1][0] if a.size else dtype(1 - 2j)])
        assert t.dtype == dtype and tuple(t.shape) == shape and arr.dtype == dtype and type(s) is dtype
        np.testing.assert_array_equal(t.numpy(), a)
        np.testing.assert_array_equal(arr, a)
        assert arr.flags.writeable and t.numpy().flags.c_contiguous


def _raw(header, data=b"", meta=None, manifest=None):
    """A safetensors file's bytes from its header dict, with gpugrad's metadata (``manifest``: a JSON value)."""
    meta = meta if meta is not None else {"format": FORMAT, "manifest": json.dumps(manifest)}
    text = json.dumps({"__metadata__": meta, **header}).encode()
    return len(text).to_bytes(8, "little") + text + data


def _tensor(key="0", **over):
    return {"tensor": key, "device": "cpu", "requires_grad": False, "parameter": False, **over}


_F4 = {"0": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
_I8 = {"0": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}}
_ONES = np.ones(2, np.float32).tobytes()


@pytest.mark.parametrize("make, why", [
    (lambda: _raw(_I8, bytes(8), manifest=_tensor(requires_grad=True)), "int64 tensor '0' marked requires_grad"),
    (lambda: _raw(_F4, _ONES, manifest=_tensor(requires_grad=1)), "missing or mistyped fields"),
    (lambda: _raw(_F4, _ONES, manifest=_tensor(device="tpu:0")), "unknown device 'tpu:0'"),
    (lambda: _raw(_F4, _ONES, manifest=_tensor(dtype="complex128")), "marked as 'complex128'"),
    (lambda: _raw(_F4, _ONES, manifest=_tensor(code="os.system")), "unknown fields"),
    (lambda: _raw(_F4, _ONES, manifest={"ndarray": "0", "scalar": True}), "a scalar of shape"),
    (lambda: _raw({"0": {"dtype": "BOOL", "shape": [2], "data_offsets": [0, 2]}}, b"\x01\x07",
                  manifest={"ndarray": "0", "scalar": False}), "bytes other than 0 and 1"),
    (lambda: _raw({"0": {"dtype": "BF16", "shape": [1], "data_offsets": [0, 2]}}, bytes(2), manifest=None),
     "dtype 'BF16', not one of BOOL"),
    (lambda: _raw({"0": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, _ONES, manifest=None),
     "declares bytes 0..8"),
    (lambda: _raw({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                   "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, _ONES, manifest=None),
     "starts at byte 4"),
    (lambda: _raw(_F4, _ONES + b"xx", manifest=None), "the file holds 10"),
    (lambda: _raw(_F4, _ONES[:5], manifest=None), "the file holds 5"),
    (lambda: _raw({}, meta={"format": FORMAT, "manifest": 3}), "no gpugrad manifest"),
    (lambda: _raw({}, manifest={"max": [1]}), "takes a 2-sequence"),
    (lambda: _raw({}, manifest={"dict": [[1, 2, 3]], "ordered": False}), "not a \\[key, value\\] pair"),
], ids=["int-requires-grad", "requires-grad-not-bool", "bad-device", "complex-marker-on-float32", "extra-field",
        "scalar-with-a-shape", "bool-byte-7", "bfloat16", "size-vs-shape", "overlapping-arrays", "trailing-bytes",
        "truncated-data", "manifest-not-a-string", "return-type-of-one", "dict-triple"])
def test_every_inconsistency_of_a_crafted_file_is_a_serialization_error_naming_it(tmp_path, make, why):
    path = tmp_path / "crafted.pt"
    path.write_bytes(make())
    with pytest.raises(SerializationError, match=f"{path} is not a file written by gpugrad.save .*{why}"):
        gpugrad.load(path)


# ---- items 9, 10 and the full disk: how a save lands on the file system ------------------------------------------

def test_a_save_to_a_symlink_writes_through_it(tmp_path):
    (tmp_path / "runs").mkdir()
    target = tmp_path / "runs" / "real.pt"
    gpugrad.save({"v": 1}, target)
    link, chain = tmp_path / "latest.pt", tmp_path / "chain.pt"
    link.symlink_to(os.path.join("runs", "real.pt"))  # relative, as `ln -s` makes them
    chain.symlink_to(link)
    gpugrad.save({"v": 2}, link)
    assert link.is_symlink() and os.readlink(link) == os.path.join("runs", "real.pt")
    assert gpugrad.load(target) == {"v": 2} and gpugrad.load(link) == {"v": 2}
    gpugrad.save({"v": 3}, chain)
    assert chain.is_symlink() and link.is_symlink() and gpugrad.load(target) == {"v": 3}
    assert sorted(os.listdir(tmp_path / "runs")) == ["real.pt"]  # the temporary file went where the target is
    dangling = tmp_path / "dangling.pt"
    dangling.symlink_to(tmp_path / "runs" / "new.pt")
    gpugrad.save({"v": 4}, dangling)  # as open(link, "w"): creates the target
    assert dangling.is_symlink() and gpugrad.load(tmp_path / "runs" / "new.pt") == {"v": 4}


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_a_new_file_gets_the_umasks_mode_as_open_gives(tmp_path, umask):
    old = os.umask(umask)
    try:
        with open(tmp_path / "by-open", "wb"):
            pass
        gpugrad.save({"v": 1}, tmp_path / "by-save.pt")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "by-save.pt") == _mode(tmp_path / "by-open") == 0o666 & ~umask


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_an_existing_file_keeps_its_mode(tmp_path, mode):
    path = tmp_path / "ckpt.pt"
    gpugrad.save({"v": 1}, path)
    os.chmod(path, mode)
    gpugrad.save({"v": 2}, path)
    assert _mode(path) == mode and gpugrad.load(path) == {"v": 2}


def test_a_full_disk_leaves_the_old_file_and_no_temporary(tmp_path):
    """RLIMIT_FSIZE stands in for a full disk: writes past it fail (EFBIG; Python ignores SIGXFSZ)."""
    path = tmp_path / "ckpt.pt"
    gpugrad.save({"epoch": 1, "w": gpugrad.ones(4)}, path)
    run = _python(f"""
        import resource, gpugrad
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        try:
            gpugrad.save({{"epoch": 2, "w": gpugrad.ones(100_000)}}, {str(path)!r})
        except OSError as e:
            print(type(e).__name__, e.errno, e.filename, "|", e)
    """)
    assert run.returncode == 0, run.stderr
    assert f"{path} | " in run.stdout and f"gpugrad.save could not write {path}" in run.stdout, run.stdout
    assert os.listdir(tmp_path) == ["ckpt.pt"]
    back = gpugrad.load(path)
    assert back["epoch"] == 1 and back["w"].tolist() == [1.0] * 4


# ---- item 12: the header first, sizes checked, non-regular files refused -------------------------------------------

_SMALL_MEMORY = "import resource; resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n"


def test_a_character_device_is_refused_without_reading_it():
    """/dev/zero never ends: reading it first would take all memory (here: a 3 GiB address space)."""
    run = _python(_SMALL_MEMORY + """
import gpugrad
from gpugrad.serialization import SerializationError
try:
    gpugrad.load("/dev/zero")
except SerializationError as e:
    print("refused:", e)
""")
    assert "refused: /dev/zero is a character device, not a regular file" in run.stdout, run.stdout + run.stderr


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "pipe.pt"
    os.mkfifo(fifo)
    try:
        run = _python(f"""
            import gpugrad
            from gpugrad.serialization import SerializationError
            try:
                gpugrad.load({str(fifo)!r})
            except SerializationError as e:
                print("refused:", e)
        """, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("gpugrad.load waited on a FIFO")
    assert f"refused: {fifo} is a FIFO, not a regular file" in run.stdout, run.stdout + run.stderr


def test_a_directory_is_refused(tmp_path):
    with pytest.raises(IsADirectoryError, match="a directory, not a file gpugrad.save wrote"):
        gpugrad.load(tmp_path)


def test_a_sparse_30_gb_file_is_refused_by_its_declared_size(tmp_path):
    """A header that declares 30 GB of arrays, in a sparse file that really is that long: refused by the byte cap,
    before anything is allocated (before the fix: a bare MemoryError)."""
    path = tmp_path / "sparse.pt"
    n = 30 * 10**9 // 4
    path.write_bytes(_raw({"0": {"dtype": "F32", "shape": [n], "data_offsets": [0, 4 * n]}},
                          manifest=_tensor()))
    os.truncate(path, path.stat().st_size + 4 * n)
    run = _python(_SMALL_MEMORY + f"""
import gpugrad
from gpugrad.serialization import SerializationError
try:
    gpugrad.load({str(path)!r})
except SerializationError as e:
    print("refused:", e)
""")
    assert f"refused: {path}: its arrays take 30,000,000,000 bytes, more than gpugrad.load reads " \
           f"(2,147,483,648); set GPUGRAD_MAX_CHECKPOINT_BYTES" in run.stdout, run.stdout + run.stderr[-2000:]


def test_the_checkpoint_byte_cap_applies_and_names_its_variable(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    gpugrad.save({"w": gpugrad.ones(256)}, path)  # 1,024 bytes of arrays
    monkeypatch.setenv(MAX_BYTES_ENV, "1024")
    assert gpugrad.load(path)["w"].tolist() == [1.0] * 256
    monkeypatch.setenv(MAX_BYTES_ENV, "1000")
    with pytest.raises(SerializationError, match=f"{path}: its arrays take 1,024 bytes, more than gpugrad.load "
                                                 f"reads \\(1,000\\); set {MAX_BYTES_ENV}=<bytes>"):
        gpugrad.load(path)
    with pytest.raises(SerializationError, match="GPUGRAD_MAX_CHECKPOINT_BYTES='lots': expected a whole number"):
        monkeypatch.setenv(MAX_BYTES_ENV, "lots")
        gpugrad.load(path)


class _OnlyRead:
    """A file object with nothing but read(): a socket's makefile, a decompressor."""

    def __init__(self, data):
        self._buf = io.BytesIO(data)

    def read(self, n=-1):
        return self._buf.read(n)


def test_file_objects_keep_working_seekable_or_not(tmp_path):
    buf = io.BytesIO()
    gpugrad.save({"a": gpugrad.arange(3.0)}, buf)
    first = buf.getvalue()
    gpugrad.save({"b": 2}, buf)  # two saves in one stream load one after the other
    buf.seek(0)
    assert gpugrad.load(buf)["a"].tolist() == [0.0, 1.0, 2.0] and gpugrad.load(buf) == {"b": 2}
    assert gpugrad.load(_OnlyRead(first))["a"].tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(SerializationError, match="array '0' is cut short"):
        gpugrad.load(_OnlyRead(first[:-4]))
    with pytest.raises(SerializationError, match="the header declares 12 bytes of arrays, the file holds 8"):
        gpugrad.load(io.BytesIO(first[:-4]))  # a seekable one: checked before reading
