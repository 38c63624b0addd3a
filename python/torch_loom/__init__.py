"""Loom as a torch.distributed backend.

    import torch_loom                      # registers the backend "loom"
    torch.distributed.init_process_group("loom", ...)

Every process (mp.spawn children included) imports torch_loom itself. The
backend takes CPU tensors, and CUDA tensors (issued on torch's current CUDA
stream; not yet run on a GPU); the group's timeout becomes Loom's timeout.

    dist.init_process_group("loom", pg_options=torch_loom.Options(net_compress="bf16"))

makes the group's float32 AllReduce and ReduceScatter send bfloat16 over
network links (loomConfig_t.netCompress; loom(7), LOOM_NET_COMPRESS); its
AllReduce and ReduceScatter of other dtypes are then refused.
"""
import torch
import torch.distributed as dist

from . import _C

__all__ = ["loom_version", "failed_ranks", "Options"]


class Options:
    """Options of a Loom process group, passed as pg_options (init_process_group,
    new_group). net_compress: "bf16" (round to nearest even), "bf16-sr"
    (stochastic rounding) or "none": what float32 AllReduce and ReduceScatter
    send over network links; None: LOOM_NET_COMPRESS decides. Splits and
    shrinks of the group keep it."""

    def __init__(self, net_compress=None):
        if net_compress not in (None, "none", "bf16", "bf16-sr"):
            raise ValueError("torch_loom.Options: net_compress %r is none of 'bf16', "
                             "'bf16-sr', 'none' and None" % (net_compress,))
        self.net_compress = net_compress


def loom_version():
    """LOOM_VERSION_CODE of the Loom built into this module."""
    return _C.loom_version()


def failed_ranks(group=None):
    """Ranks of group (default: the default group) that Loom knows to have
    failed: exited, killed, stopped past the timeout, or cut off. Pass them
    to torch.distributed.shrink_group to go on without them."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    return _C.failed_ranks(pg._get_backend(torch.device("cpu")))


def _is_loom(backend):
    return backend is not None and backend.name() == "loom"


def _create_backend(opts, backend_options):
    """torch's extended creator: a new communicator through the store (a
    fresh unique id), or, when torch passes a parent to split from (new_group
    while the default group has a bound device_id), loomCommSplit of the
    parent's, every member with color 0 and its rank in the group as key."""
    if _is_loom(opts.split_from):
        return _C.split(opts.split_from, 0, opts.group_rank, opts.timeout)
    compress = getattr(backend_options, "net_compress", None)
    return _C.create_backend(opts.store, opts.group_rank, opts.group_size, opts.timeout,
                             compress or "")


def _perform_nocolor_split(self, device):
    """What torch calls on the parent backend of a rank outside a new_group
    made by splitting (torch's C++ Backend has no such method, and gloo's
    binding none either): loomCommSplit with no color, so the members' split,
    collective over the parent, completes."""
    if not _is_loom(self):
        raise AttributeError("'%s' object has no attribute 'perform_nocolor_split'"
                             % type(self).__name__)
    _C.split(self, _C.SPLIT_NOCOLOR, 0, None)


if "loom" not in dist.Backend.backend_list:
    dist.Backend.register_backend("loom", _create_backend, extended_api=True,
                                  devices=["cpu", "cuda"])
    _Backend = torch._C._distributed_c10d.Backend
    if not hasattr(_Backend, "perform_nocolor_split"):
        _Backend.perform_nocolor_split = _perform_nocolor_split
