"""Modes of a training job, with smdebug's names and numbers.

A global step counts every step of a worker across modes; each global step also
has a mode step within its mode. ``tensorkeep.modes`` is the :class:`ModeKeys`
enum itself, as ``smdebug.modes`` is, so ``modes.TRAIN`` works as in smdebug.
"""

import enum
from typing import Any


class ModeKeys(enum.IntEnum):
    """The mode of a step: training, evaluation, prediction, or none (GLOBAL)."""

    TRAIN = 1  # training/fitting mode
    EVAL = 2  # testing/evaluation mode
    PREDICT = 3  # prediction/inference mode
    GLOBAL = 4  # no particular mode: steps are global steps


ALLOWED_MODES = (ModeKeys.TRAIN, ModeKeys.EVAL, ModeKeys.PREDICT, ModeKeys.GLOBAL)
ALLOWED_MODE_NAMES = tuple(m.name for m in ALLOWED_MODES)

_BY_NAME = {m.name.lower(): m for m in ALLOWED_MODES}


def str_to_mode_keys(mode_str: str) -> ModeKeys:
    """Returns the mode named ``train``, ``eval``, ``predict`` or ``global`` (any case).

    Raises ValueError for any other string.
    """
    try:
        return _BY_NAME[mode_str.lower()]
    except KeyError:
        raise ValueError(
            f"invalid mode {mode_str!r}: expected one of {', '.join(_BY_NAME)}"
        ) from None


def to_mode(mode: Any, *, allow_none: bool = False) -> ModeKeys:
    """Coerces ``mode`` (a ModeKeys, its number, or its name) to a ModeKeys.

    ``None`` means GLOBAL when ``allow_none`` is set. Raises ValueError for an
    unknown mode and TypeError for a value of the wrong type.
    """
    if mode is None:
        if allow_none:
            return ModeKeys.GLOBAL
        raise ValueError("mode must not be None: expected one of modes.TRAIN, EVAL, PREDICT, GLOBAL")
    if isinstance(mode, ModeKeys):
        return mode
    if isinstance(mode, str):
        return str_to_mode_keys(mode)
    if isinstance(mode, enum.Enum):
        # Another library's ModeKeys (smdebug's, say): match by name.
        name = getattr(mode, "name", None)
        if isinstance(name, str) and name.lower() in _BY_NAME:
            return _BY_NAME[name.lower()]
        raise ValueError(f"invalid mode {mode!r}")
    if isinstance(mode, bool) or not hasattr(mode, "__index__"):
        raise TypeError(f"mode must be a tensorkeep.modes value, got {type(mode).__name__}")
    try:
        return ModeKeys(mode.__index__())
    except ValueError:
        raise ValueError(
            f"invalid mode {mode!r}: expected 1 (TRAIN), 2 (EVAL), 3 (PREDICT) or 4 (GLOBAL)"
        ) from None


# Module-level aliases, so ``from tensorkeep.modes import TRAIN`` also works.
TRAIN = ModeKeys.TRAIN
EVAL = ModeKeys.EVAL
PREDICT = ModeKeys.PREDICT
GLOBAL = ModeKeys.GLOBAL
