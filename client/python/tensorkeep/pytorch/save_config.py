"""smdebug's ``SaveConfig`` and ``SaveConfigMode``: see ``tensorkeep.core.save_config``."""

from tensorkeep.core.save_config import *  # noqa: F401,F403
from tensorkeep.core.save_config import SaveConfig, SaveConfigMode  # noqa: F401
