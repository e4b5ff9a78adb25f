"""Collection: a named group of tensors (weights, gradients, losses, ...)."""

from typing import Iterable, Set


class Collection:
    """A group of tensors saved under one name, as smdebug's Collection.

    Attributes:
        name: the collection's name.
        tensor_names: the names of the tensors saved as part of it (a set).
    """

    def __init__(self, name: str, tensor_names: Iterable[str] = ()):
        self.name = name
        self.tensor_names: Set[str] = set(tensor_names)

    @property
    def include_regex(self) -> list:
        """smdebug compatibility: collections here hold explicit names only."""
        return []

    def has_tensor(self, name: str) -> bool:
        """True if ``name`` was saved as part of this collection."""
        return name in self.tensor_names

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Collection):
            return NotImplemented
        return self.name == other.name and self.tensor_names == other.tensor_names

    def __repr__(self) -> str:
        return f"<Collection {self.name}: {len(self.tensor_names)} tensors>"
