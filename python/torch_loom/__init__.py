"""Loom as a torch.distributed backend.

    import torch_loom                      # registers the backend "loom"
    torch.distributed.init_process_group("loom", ...)

Every process (mp.spawn children included) imports torch_loom itself. The
backend takes CPU tensors, and CUDA tensors (issued on torch's current CUDA
stream; not yet run on a GPU); the group's timeout becomes Loom's timeout.
"""
import torch
import torch.distributed as dist

from . import _C

__all__ = ["loom_version", "failed_ranks"]


def loom_version():
    """LOOM_VERSION_CODE of the Loom built into this module."""
    return _C.loom_version()


def failed_ranks(group=None):
    """Ranks of group (default: the default group) that Loom knows to have
    failed: exited, killed, stopped past the timeout, or cut off. Pass them
    to torch.distributed.shrink_group to go on without them."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    return _C.failed_ranks(pg._get_backend(torch.device("cpu")))


def _create_backend(store, rank, size, timeout):
    return _C.create_backend(store, rank, size, timeout)


if "loom" not in dist.Backend.backend_list:
    dist.Backend.register_backend("loom", _create_backend, devices=["cpu", "cuda"])
