"""Which rank this process is, for the hook: torch.distributed when it is
initialised, else the RANK / WORLD_SIZE variables torchrun sets; and the group
``Hook.should_stop()`` agrees on."""

import os
from typing import Any, Optional, Tuple

import torch


def dist_rank_and_size() -> Tuple[Optional[int], Optional[int]]:
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None, None


def env_rank_and_size() -> Tuple[Optional[int], Optional[int]]:
    """RANK and WORLD_SIZE as torchrun / torch.distributed.launch set them."""
    try:
        rank = int(os.environ["RANK"])
        world = int(os.environ.get("WORLD_SIZE", "0")) or None
    except (KeyError, ValueError):
        return None, None
    if rank < 0 or (world is not None and rank >= world):
        return None, None
    return rank, world


def dist_group_for_stop() -> Any:
    """The process group should_stop() agrees on, or None when this process is not
    one of several ranks of an initialised torch.distributed job. The default
    group when its backend is gloo; else (NCCL: a CPU tensor cannot go through
    it) a gloo group over the same ranks, created by the first call (on every
    rank, since should_stop() is a collective)."""
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    if dist.get_world_size() <= 1:
        return None
    if dist.get_backend() == "gloo":
        return dist.group.WORLD
    return dist.new_group(backend="gloo")
