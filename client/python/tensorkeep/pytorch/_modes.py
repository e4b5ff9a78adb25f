"""Moved to ``tensorkeep.core._modes`` (shared with the analysis side, no torch needed)."""

from tensorkeep.core._modes import *  # noqa: F401,F403
from tensorkeep.core._modes import ALL_MODES, EVAL, GLOBAL, PREDICT, TRAIN, client_mode, mode_name, mode_value  # noqa: F401
