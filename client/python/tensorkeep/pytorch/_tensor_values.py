"""The values the hook saves: copies, CPU tensors, numpy views and reductions."""

from typing import Any, Dict, Optional, Tuple

import numpy as np
import torch

def re_escape(s: str) -> str:
    import re

    return re.escape(s)


def copy_value(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    return np.array(value, copy=True)


def as_cpu_tensor(value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        t = value.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if t.is_sparse:
            t = t.to_dense()
        return t
    arr = np.asarray(value)
    if arr.dtype == object:
        raise TypeError(f"value of type {type(value).__name__} is not numeric")
    return torch.from_numpy(np.ascontiguousarray(arr))


def to_numpy(t: torch.Tensor) -> Any:
    """A numpy view of ``t`` (the Writer copies it before returning); a bfloat16
    tensor stays a tensor, which the Writer stores as bfloat16 (numpy has no
    bfloat16)."""
    if t.dtype == torch.bfloat16:
        return t
    if t.is_complex():
        raise TypeError(f"complex tensors ({t.dtype}) are not supported")
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    if not t.is_contiguous():
        t = t.contiguous()
    return t.numpy()


def reductions(t: torch.Tensor, specs: Tuple[Tuple[str, bool], ...]) -> Optional[Dict[Tuple[str, bool], float]]:
    """The requested reductions of ``t``, computed in float64 (norms of the flattened
    tensor). ``std`` and ``variance`` use torch's default, Bessel's correction
    (ddof=1), as smdebug's PyTorch hook saves them (NaN for one element), so
    thresholds ported from smdebug keep their meaning."""
    if t.numel() == 0:
        return None
    if t.is_complex():
        raise TypeError(f"complex tensors ({t.dtype}) are not supported")
    x = t.reshape(-1).to(torch.float64)
    ax: Optional[torch.Tensor] = None
    out: Dict[Tuple[str, bool], float] = {}
    for name, use_abs in specs:
        v = x
        if use_abs:
            if ax is None:
                ax = x.abs()
            v = ax
        if name == "min":
            r = v.min()
        elif name == "max":
            r = v.max()
        elif name == "mean":
            r = v.mean()
        elif name == "sum":
            r = v.sum()
        elif name == "prod":
            r = v.prod()
        elif name == "std":
            r = v.std()  # ddof=1, smdebug's PyTorch hook (torch's default)
        elif name == "variance":
            r = v.var()
        elif name == "l1":
            r = v.abs().sum()
        elif name == "l2":
            r = torch.sqrt(torch.dot(v, v))
        else:  # validated by ReductionConfig
            raise ValueError(f"unknown reduction {name!r}")
        out[(name, use_abs)] = float(r)
    return out
