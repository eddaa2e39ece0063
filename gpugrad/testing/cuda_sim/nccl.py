"""``cupy.cuda.nccl`` on the simulated device, for one rank (world size 1): enough to run the "nccl" process group
and DistributedDataParallel's bucketing on CI. With one rank every collective is a copy (or nothing, in place);
each counts one launch, as NCCL's kernel would. Constants and signatures are CuPy's (pointers, element counts)."""
from __future__ import annotations

import ctypes
import os

from gpugrad.testing.cuda_sim import _state

available = True
NCCL_INT8, NCCL_UINT8, NCCL_INT32, NCCL_UINT32, NCCL_INT64, NCCL_UINT64 = range(6)
NCCL_FLOAT16, NCCL_FLOAT32, NCCL_FLOAT64, NCCL_BFLOAT16 = range(6, 10)
NCCL_SUM, NCCL_PROD, NCCL_MAX, NCCL_MIN, NCCL_AVG = range(5)
_ITEMSIZE = [1, 1, 4, 4, 8, 8, 2, 4, 8, 2]


class NcclError(RuntimeError):
    """cupy_backends.cuda.libs.nccl.NcclError."""


def get_version():
    return 22707


NCCL_UNIQUE_ID_BYTES = 128


def get_unique_id():
    """Bytes, as CuPy 14's (cupy_backends/cuda/libs/nccl.pyx, get_unique_id: "Previously this returned a tuple")."""
    return os.urandom(NCCL_UNIQUE_ID_BYTES)


class NcclCommunicator:
    def __init__(self, ndev, commId, rank):
        if not isinstance(commId, bytes):  # CuPy's signature: (int ndev, bytes commId, int rank)
            raise TypeError(f"Argument 'commId' has incorrect type (expected bytes, got {type(commId).__name__})")
        if len(commId) != NCCL_UNIQUE_ID_BYTES:
            raise ValueError(f"commId length {len(commId)} != {NCCL_UNIQUE_ID_BYTES}.")
        if ndev != 1 or rank != 0:
            raise NcclError(f"gpugrad cuda_sim simulates NCCL for one rank only, got ndev={ndev}, rank={rank}")
        self._dev, self._live = _state.current_device(), True

    def _copy(self, what, send, recv, count, datatype, op=NCCL_SUM, root=0):
        if not self._live:
            raise NcclError(f"NCCL_ERROR_INVALID_ARGUMENT: {what} on a destroyed communicator")
        if not (0 <= datatype < len(_ITEMSIZE) and 0 <= op <= NCCL_AVG and root == 0 and count >= 0):
            raise NcclError(f"NCCL_ERROR_INVALID_ARGUMENT: {what}(count={count}, datatype={datatype}, op={op}, "
                            f"root={root})")
        nbytes = count * _ITEMSIZE[datatype]
        _state.run(what, lambda: send != recv and nbytes and ctypes.memmove(recv, send, nbytes))

    def allReduce(self, sendbuf, recvbuf, count, datatype, op, stream):
        self._copy("ncclAllReduce", sendbuf, recvbuf, count, datatype, op)

    def bcast(self, buff, count, datatype, root, stream):
        self._copy("ncclBroadcast", buff, buff, count, datatype, root=root)

    def broadcast(self, sendbuf, recvbuf, count, datatype, root, stream):
        self._copy("ncclBroadcast", sendbuf, recvbuf, count, datatype, root=root)

    def allGather(self, sendbuf, recvbuf, count, datatype, stream):
        self._copy("ncclAllGather", sendbuf, recvbuf, count, datatype)

    def reduceScatter(self, sendbuf, recvbuf, recvcount, datatype, op, stream):
        self._copy("ncclReduceScatter", sendbuf, recvbuf, recvcount, datatype, op)

    def rank_id(self):
        return 0

    def size(self):
        return 1

    def device_id(self):
        return self._dev

    def check_async_error(self):
        pass

    def destroy(self):
        self._live = False

    abort = destroy
