"""Mode handling shared by the hook's pieces.

Modes are smdebug's: TRAIN=1, EVAL=2, PREDICT=3, GLOBAL=4. The hook accepts a
member of ``tensorkeep.modes`` (or smdebug's ``modes``), the plain number, or the
name, and works with the number internally.
"""

from __future__ import annotations

from typing import Any, Tuple

TRAIN, EVAL, PREDICT, GLOBAL = 1, 2, 3, 4
ALL_MODES: Tuple[int, ...] = (TRAIN, EVAL, PREDICT, GLOBAL)
_NAMES = {TRAIN: "TRAIN", EVAL: "EVAL", PREDICT: "PREDICT", GLOBAL: "GLOBAL"}
_BY_NAME = {v: k for k, v in _NAMES.items()}


def mode_value(mode: Any) -> int:
    """The number of ``mode``; raises ValueError for anything that is not a mode."""
    if isinstance(mode, bool):
        raise ValueError(f"invalid mode {mode!r}; valid modes are TRAIN, EVAL, PREDICT, GLOBAL")
    if isinstance(mode, int):
        v = int(mode)
    elif isinstance(mode, str):
        v = _BY_NAME.get(mode.upper().split(".")[-1], 0)
    else:
        value = getattr(mode, "value", None)
        v = value if isinstance(value, int) and not isinstance(value, bool) else 0
    if v not in _NAMES:
        raise ValueError(f"invalid mode {mode!r}; valid modes are TRAIN, EVAL, PREDICT, GLOBAL")
    return v


def mode_name(mode: Any) -> str:
    return _NAMES[mode_value(mode)]


def client_mode(v: int) -> Any:
    """The ``tensorkeep.modes`` member for number ``v`` (the number if it has none)."""
    try:
        from tensorkeep import modes as _tk_modes  # the client's constants
    except ImportError:  # pragma: no cover - only without the client package
        return v
    return getattr(_tk_modes, _NAMES[v], v)
