"""``gpugrad.distributed``: torch.distributed's API over MPI (CPU tensors) and NCCL (CUDA tensors, one GPU per rank).

MPI starts and numbers the processes; every rank runs the same program::

    mpiexec -n 2 python train.py

    import gpugrad, gpugrad.distributed as dist
    dist.init_process_group("mpi")           # "nccl" for CUDA tensors; timeout=seconds bounds every wait
    t = gpugrad.tensor([float(dist.get_rank())])
    dist.all_reduce(t)                       # in place: tensor([1.]) on both ranks
    dist.destroy_process_group()

``gpugrad.nn.parallel.DistributedDataParallel`` builds data-parallel training on this, and
``gpugrad.data.DistributedSampler`` gives each rank its share of a dataset. Importing this package needs neither
mpi4py nor NCCL; using it without them raises an error naming ``pip install 'gpugrad[distributed]'``.
"""
from gpugrad.distributed.collectives import (ReduceOp, Work, all_gather, all_gather_object, all_reduce, broadcast,
                                             reduce_scatter)
from gpugrad.distributed.group import (DistBackendError, abort, barrier, destroy_process_group, get_backend,
                                       get_node_local_rank, get_rank, get_world_size, init_process_group, is_available,
                                       is_initialized, is_mpi_available, is_nccl_available)

__all__ = ["init_process_group", "destroy_process_group", "is_available", "is_initialized", "is_mpi_available",
           "is_nccl_available", "get_rank", "get_world_size", "get_node_local_rank", "get_backend", "barrier", "abort",
           "all_reduce", "broadcast", "all_gather", "reduce_scatter", "all_gather_object", "ReduceOp", "Work",
           "DistBackendError"]
