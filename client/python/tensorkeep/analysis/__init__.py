"""Analysis helpers, as ``smdebug.analysis``.

``no_refresh`` and ``refresh`` live in ``tensorkeep.analysis.utils`` (smdebug's
path) and are re-exported here, so both ``from tensorkeep.analysis import
no_refresh`` and ``from tensorkeep.analysis.utils import no_refresh`` work.
"""

from .utils import no_refresh, refresh

__all__ = ["no_refresh", "refresh"]
