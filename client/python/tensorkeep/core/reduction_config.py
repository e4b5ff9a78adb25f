"""smdebug's ``ReductionConfig``: save reductions of a tensor instead of (or beside) it.

Reductions are computed in the training process, when the tensor is saved, and
stored with the tensor record; readers get them with ``Tensor.reduction_value``.
``save_raw_tensor`` (default False, as in smdebug) says whether the full tensor is
saved too. Norms are of the flattened tensor; the PyTorch hook saves ``std`` and
``variance`` with torch's default ddof=1, as smdebug's PyTorch hook does (a
reduction the collector computes from a saved tensor uses ddof=0, numpy's, as
smdebug's reader does).
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Tuple

ALLOWED_REDUCTIONS = ["min", "max", "mean", "std", "variance", "sum", "prod"]
ALLOWED_NORMS = ["l1", "l2"]

__all__ = ["ReductionConfig", "ALLOWED_REDUCTIONS", "ALLOWED_NORMS"]


def _names(arg: str, value: Optional[Iterable[str]], allowed: List[str]) -> List[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    out = list(value)
    for v in out:
        if v not in allowed:
            raise ValueError(f"{arg} can only be one of {','.join(allowed)}; got {v!r}")
    return out


class ReductionConfig:
    """Which reductions of a tensor to save.

    Attributes:
      reductions: names among 'min', 'max', 'mean', 'std', 'variance', 'sum', 'prod'.
      abs_reductions: the same, computed on abs(tensor).
      norms: 'l1', 'l2' (of the flattened tensor).
      abs_norms: the same on abs(tensor) (equal to the norms, as in smdebug).
      save_raw_tensor: also save the full tensor (default False).
      save_shape: accepted for compatibility; the shape is always known to readers
        when the raw tensor is saved.
    """

    def __init__(
        self,
        reductions: Optional[Iterable[str]] = None,
        abs_reductions: Optional[Iterable[str]] = None,
        norms: Optional[Iterable[str]] = None,
        abs_norms: Optional[Iterable[str]] = None,
        save_raw_tensor: bool = False,
        save_shape: bool = False,
    ):
        self.reductions = _names("reductions", reductions, ALLOWED_REDUCTIONS)
        self.abs_reductions = _names("abs_reductions", abs_reductions, ALLOWED_REDUCTIONS)
        self.norms = _names("norms", norms, ALLOWED_NORMS)
        self.abs_norms = _names("abs_norms", abs_norms, ALLOWED_NORMS)
        if not isinstance(save_raw_tensor, bool):
            raise ValueError(f"save_raw_tensor={save_raw_tensor!r} must be a boolean")
        if not isinstance(save_shape, bool):
            raise ValueError(f"save_shape={save_shape!r} must be a boolean")
        self.save_raw_tensor = save_raw_tensor
        self.save_shape = save_shape

    def reduction_specs(self) -> Tuple[Tuple[str, bool], ...]:
        """Every (reduction name, abs) pair this configuration asks for, in order."""
        out: List[Tuple[str, bool]] = []
        for r in list(self.reductions) + list(self.norms):
            if (r, False) not in out:
                out.append((r, False))
        for r in list(self.abs_reductions) + list(self.abs_norms):
            if (r, True) not in out:
                out.append((r, True))
        return tuple(out)

    def to_json_dict(self) -> Dict[str, Any]:
        parts = list(self.reductions)
        parts += [f"{r}_norm" for r in self.norms]
        parts += [f"abs_{r}" for r in self.abs_reductions]
        parts += [f"abs_{r}_norm" for r in self.abs_norms]
        return {
            "save_raw_tensor": self.save_raw_tensor,
            "reductions": ",".join(parts),
            "save_shape": self.save_shape,
        }

    @classmethod
    def from_dict(cls, params: Optional[Dict[str, Any]]) -> Optional["ReductionConfig"]:
        """Parses smdebug's flattened form: {"save_raw_tensor": .., "reductions": "mean,abs_l1_norm"}."""
        if params is None:
            return None
        if not isinstance(params, dict):
            raise ValueError(f"params={params!r} must be a dict")
        reductions: List[str] = []
        norms: List[str] = []
        abs_reductions: List[str] = []
        abs_norms: List[str] = []
        raw = params.get("reductions", "")
        items = raw.split(",") if isinstance(raw, str) else list(raw)
        for red in (x.strip() for x in items):
            if not red:
                continue
            if red.startswith("abs_"):
                (abs_norms if red.endswith("_norm") else abs_reductions).append(
                    red.split("_")[1]
                )
            else:
                if red.endswith("_norm"):
                    norms.append(red.split("_")[0])
                else:
                    reductions.append(red)
        return cls(
            reductions=reductions,
            abs_reductions=abs_reductions,
            norms=norms,
            abs_norms=abs_norms,
            save_raw_tensor=bool(params.get("save_raw_tensor", False)),
            save_shape=bool(params.get("save_shape", False)),
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ReductionConfig):
            return NotImplemented
        return (
            self.reductions == other.reductions
            and self.abs_reductions == other.abs_reductions
            and self.norms == other.norms
            and self.abs_norms == other.abs_norms
            and self.save_raw_tensor == other.save_raw_tensor
            and self.save_shape == other.save_shape
        )

    def __hash__(self) -> int:
        return hash((self.reduction_specs(), self.save_raw_tensor))

    def __repr__(self) -> str:
        return (
            f"<class ReductionConfig: reductions={self.reductions}, "
            f"abs_reductions={self.abs_reductions}, norms={self.norms}, "
            f"abs_norms={self.abs_norms}, save_raw_tensor={self.save_raw_tensor}>"
        )
