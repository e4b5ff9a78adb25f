"""smdebug's ``ReductionConfig``: see ``tensorkeep.core.reduction_config``."""

from tensorkeep.core.reduction_config import *  # noqa: F401,F403
from tensorkeep.core.reduction_config import ALLOWED_NORMS, ALLOWED_REDUCTIONS, ReductionConfig  # noqa: F401
