"""Collection: a named group of tensors (weights, gradients, losses, ...).

One class serves the hook and the analysis side, as in smdebug: it is
``tensorkeep.core.collection.Collection`` (smdebug's ``smdebug.core.collection``),
re-exported here.
"""

from .core.collection import Collection, CollectionKeys, CollectionManager

__all__ = ["Collection", "CollectionKeys", "CollectionManager"]
