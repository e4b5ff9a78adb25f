"""``smdebug.core.modes``: ``ModeKeys`` and the module-level mode constants."""

from tensorkeep.modes import (  # noqa: F401
    ALLOWED_MODE_NAMES,
    ALLOWED_MODES,
    EVAL,
    GLOBAL,
    PREDICT,
    TRAIN,
    ModeKeys,
    str_to_mode_keys,
)

__all__ = ["ModeKeys", "ALLOWED_MODES", "ALLOWED_MODE_NAMES", "str_to_mode_keys"]
