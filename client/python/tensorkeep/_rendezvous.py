"""Rendezvous (highest-random-weight) hashing: which collector of a cluster owns a trial.

The same definition as the C++ base/rendezvous.h, pinned by
tests/data/rendezvous_vectors.txt:

- ``score(collector, trial)``: the first 8 bytes, big-endian, of
  SHA-256(collector + "\\n" + trial) (UTF-8);
- ``ranking(collectors, trial)``: collectors by score, highest first; equal
  scores by address, ascending. The first is the trial's owner.

Collectors are named by the ``HOST:PORT`` clients use; every client and
collector must spell them the same.
"""

import hashlib
from typing import Iterable, List


def score(collector: str, trial: str) -> int:
    """The collector's weight for the trial (an unsigned 64-bit integer)."""
    digest = hashlib.sha256(f"{collector}\n{trial}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def ranking(collectors: Iterable[str], trial: str) -> List[str]:
    """``collectors`` ordered for ``trial``, its owner first."""
    return sorted(collectors, key=lambda c: (-score(c, trial), c))


def owner(collectors: Iterable[str], trial: str) -> str:
    """The collector that owns ``trial`` (the first of its ranking)."""
    r = ranking(collectors, trial)
    if not r:
        raise ValueError("no collector given")
    return r[0]
