"""``smdebug.core.tensor``: ``Tensor`` and ``StepState``."""

from tensorkeep.step_state import StepState  # noqa: F401
from tensorkeep.tensor import Tensor  # noqa: F401

__all__ = ["Tensor", "StepState"]
