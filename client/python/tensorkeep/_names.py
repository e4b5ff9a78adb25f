"""Validation of the names and numbers a user hands to tensorkeep.

Every check raises ValueError or TypeError naming the argument and the problem,
before anything is sent to the collector.
"""

import re
from typing import Any

TRIAL_RE = re.compile(r"[A-Za-z0-9._-]{1,128}")
WORKER_RE = re.compile(r"[A-Za-z0-9._/:-]{1,128}")
MAX_TENSOR_NAME_BYTES = 256
MAX_STEP = (1 << 63) - 1


def check_trial(name: Any) -> str:
    """Returns ``name`` if it is a valid trial name ([A-Za-z0-9._-], 1-128 chars)."""
    if not isinstance(name, str):
        raise TypeError(f"trial name must be a str, got {type(name).__name__}")
    if not TRIAL_RE.fullmatch(name):
        raise ValueError(
            f"invalid trial name {name!r}: use 1-128 characters from [A-Za-z0-9._-]"
        )
    return name


def check_worker(name: Any) -> str:
    """Returns ``name`` if it is a valid worker name ([A-Za-z0-9._/:-], 1-128 chars)."""
    if not isinstance(name, str):
        raise TypeError(f"worker must be a str, got {type(name).__name__}")
    if not WORKER_RE.fullmatch(name):
        raise ValueError(
            f"invalid worker name {name!r}: use 1-128 characters from [A-Za-z0-9._/:-]"
        )
    return name


def check_tensor_name(name: Any, what: str = "tensor name") -> bytes:
    """Returns the UTF-8 bytes of a valid tensor (or collection) name.

    A valid name is a non-empty printable str of at most 256 bytes in UTF-8.
    """
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a str, got {type(name).__name__}")
    if not name:
        raise ValueError(f"{what} must not be empty")
    if not name.isprintable():
        raise ValueError(f"invalid {what} {name!r}: it contains non-printable characters")
    b = name.encode("utf-8")
    if len(b) > MAX_TENSOR_NAME_BYTES:
        raise ValueError(
            f"invalid {what} {name[:40]!r}...: longer than {MAX_TENSOR_NAME_BYTES} bytes"
        )
    return b


def check_step(step: Any, what: str = "step") -> int:
    """Returns ``step`` as an int if it is a non-negative integer."""
    if isinstance(step, bool) or not hasattr(step, "__index__"):
        raise TypeError(f"{what} must be an int, got {type(step).__name__}")
    s = step.__index__()
    if s < 0:
        raise ValueError(f"{what} must be >= 0, got {s}")
    if s > MAX_STEP:
        raise ValueError(f"{what} {s} is too large")
    return s
