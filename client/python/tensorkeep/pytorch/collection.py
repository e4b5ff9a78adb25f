"""smdebug's ``Collection`` and ``CollectionManager``: see ``tensorkeep.core.collection``."""

from tensorkeep.core.collection import *  # noqa: F401,F403
from tensorkeep.core.collection import (  # noqa: F401
    DEFAULT_PYTORCH_COLLECTIONS,
    SCALAR_COLLECTIONS,
    TRAIN_ONLY_COLLECTIONS,
    Collection,
    CollectionKeys,
    CollectionManager,
)
