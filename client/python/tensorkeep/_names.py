"""Validation of the names and numbers a user hands to tensorkeep.

Every check raises ValueError or TypeError naming the argument and the problem,
before anything is sent to the collector.
"""

import re
from typing import Any

# The limits are the collector's own (proto/limits.proto, generated into
# _proto/limits_pb2 by the build): a name the client accepts, the collector
# accepts, and the messages say the same.
from ._proto import limits_pb2 as _limits

MAX_TRIAL_NAME_BYTES = _limits.MAX_TRIAL_NAME_BYTES
MAX_WORKER_NAME_BYTES = _limits.MAX_WORKER_NAME_BYTES
MAX_TENSOR_NAME_BYTES = _limits.MAX_TENSOR_NAME_BYTES
MAX_COLLECTION_NAME_BYTES = _limits.MAX_COLLECTION_NAME_BYTES
MAX_RANK = _limits.MAX_RANK
MAX_STEP = (1 << _limits.MAX_STEP_BITS) - 1  # the largest step
MAX_WORKERS = _limits.MAX_WORKERS
MAX_ATTEMPT = _limits.MAX_ATTEMPT  # Writer(attempt=): a restart of the job
MAX_RECORDED_RESTARTS = _limits.MAX_RECORDED_RESTARTS  # the collector's; nothing to check here
MAX_REGEX_BYTES = _limits.MAX_REGEX_BYTES
MAX_REGEXES = _limits.MAX_REGEXES
MAX_COLLECTIONS = _limits.MAX_COLLECTIONS  # collections a trial holds (PutCollections)
MAX_COLLECTION_CONFIG_BYTES = _limits.MAX_COLLECTION_CONFIG_BYTES  # the collector checks
MAX_RULE_MESSAGE_BYTES = _limits.MAX_RULE_MESSAGE_BYTES
MAX_REDUCTION_NAME_BYTES = _limits.MAX_REDUCTION_NAME_BYTES
MAX_WAIT_SECONDS = _limits.MAX_WAIT_SECONDS
MAX_WAIT_STEPS = _limits.MAX_WAIT_STEPS  # a longer wait_for_steps goes in several calls
MAX_WATCHERS = _limits.MAX_WATCHERS  # the collector's; nothing to check here
MAX_TRIAL_WATCHERS = _limits.MAX_TRIAL_WATCHERS
MAX_TENSOR_NAMES_PER_TRIAL = _limits.MAX_TENSOR_NAMES_PER_TRIAL  # the collector's; nothing to check here
MAX_TRIALS = _limits.MAX_TRIALS  # the collector's; nothing to check here
MAX_STEPS_PER_TRIAL = _limits.MAX_STEPS_PER_TRIAL  # the collector's; nothing to check here
MAX_PUSH_MESSAGE_BYTES = _limits.MAX_PUSH_MESSAGE_BYTES  # the writer sends at most 4 MiB
# The HTTP API's (docs/http-api.md): what one request may ask of the collector.
MAX_VIEW_POINTS = _limits.MAX_VIEW_POINTS
MAX_VIEW_STEPS = _limits.MAX_VIEW_STEPS
MAX_DISTRIBUTION_STEPS = _limits.MAX_DISTRIBUTION_STEPS
MAX_VIEW_BINS = _limits.MAX_VIEW_BINS
MAX_EVENT_STREAMS = _limits.MAX_EVENT_STREAMS
# How writers reconnect (a client policy shared with the C++ writer; see
# limits.proto, ReconnectPolicy).
RECONNECT_BACKOFF_FIRST_MS = _limits.RECONNECT_BACKOFF_FIRST_MS
RECONNECT_BACKOFF_MAX_MS = _limits.RECONNECT_BACKOFF_MAX_MS
RECONNECT_JITTER_PERCENT = _limits.RECONNECT_JITTER_PERCENT
RECONNECT_GIVE_UP_SECONDS = _limits.RECONNECT_GIVE_UP_SECONDS
RECONNECT_EXIT_CLOSE_SECONDS = _limits.RECONNECT_EXIT_CLOSE_SECONDS
RECONNECT_CONNECT_TIMEOUT_MS = _limits.RECONNECT_CONNECT_TIMEOUT_MS
# gRPC keepalive (limits.proto, KeepalivePolicy): a hung collector is dropped.
KEEPALIVE_TIME_MS = _limits.KEEPALIVE_TIME_MS
KEEPALIVE_TIMEOUT_MS = _limits.KEEPALIVE_TIMEOUT_MS

TRIAL_RE = re.compile(r"[A-Za-z0-9._-]{1,%d}" % MAX_TRIAL_NAME_BYTES)
WORKER_RE = re.compile(r"[A-Za-z0-9._/:-]{1,%d}" % MAX_WORKER_NAME_BYTES)


def quote(text: str, max_bytes: int = 100) -> str:
    """``text`` quoted for a message as the collector quotes client text: in
    single quotes, cut after ``max_bytes`` bytes of UTF-8 with ``...' (N bytes)``."""
    b = text.encode("utf-8", "surrogatepass")
    cut = min(len(b), max_bytes)
    while 0 < cut < len(b) and (b[cut] & 0xC0) == 0x80:  # a UTF-8 character boundary
        cut -= 1
    part = b[:cut].decode("utf-8", "surrogatepass")
    body = "".join(
        "\\" + c if c in "'\"\\" else c if c.isprintable() else repr(c)[1:-1] for c in part
    )
    return f"'{body}'" if cut == len(b) else f"'{body}...' ({len(b)} bytes)"


def _too_long(what: str, name: str, limit: int) -> ValueError:
    # The collector's message (server/validation.cc CheckName), word for word.
    return ValueError(f"{what} {quote(name, 40)} is too long; the limit is {limit} bytes")


def check_trial(name: Any) -> str:
    """Returns ``name`` if it is a valid trial name ([A-Za-z0-9._-], 1-128 chars)."""
    if not isinstance(name, str):
        raise TypeError(f"trial name must be a str, got {type(name).__name__}")
    if len(name) > MAX_TRIAL_NAME_BYTES:
        raise _too_long("trial name", name, MAX_TRIAL_NAME_BYTES)
    if not TRIAL_RE.fullmatch(name):
        raise ValueError(
            f"invalid trial name {name!r}: use 1-{MAX_TRIAL_NAME_BYTES} characters from [A-Za-z0-9._-]"
        )
    return name


def check_worker(name: Any) -> str:
    """Returns ``name`` if it is a valid worker name ([A-Za-z0-9._/:-], 1-128 chars)."""
    if not isinstance(name, str):
        raise TypeError(f"worker must be a str, got {type(name).__name__}")
    if len(name) > MAX_WORKER_NAME_BYTES:
        raise _too_long("worker name", name, MAX_WORKER_NAME_BYTES)
    if not WORKER_RE.fullmatch(name):
        raise ValueError(
            f"invalid worker name {name!r}: use 1-{MAX_WORKER_NAME_BYTES} characters from [A-Za-z0-9._/:-]"
        )
    return name


def check_tensor_name(name: Any, what: str = "tensor name", limit: int = MAX_TENSOR_NAME_BYTES) -> bytes:
    """Returns the UTF-8 bytes of a valid tensor (or collection) name.

    A valid name is a non-empty printable str of at most ``limit`` bytes in
    UTF-8 (256 for a tensor name).
    """
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a str, got {type(name).__name__}")
    if not name:
        raise ValueError(f"{what} must not be empty")
    if not name.isprintable():
        raise ValueError(f"invalid {what} {name!r}: it contains non-printable characters")
    b = name.encode("utf-8")
    if len(b) > limit:
        raise _too_long(what, name, limit)
    return b


def check_collection_name(name: Any) -> bytes:
    """Returns the UTF-8 bytes of a valid collection name (printable, 1-128 bytes)."""
    return check_tensor_name(name, "collection name", MAX_COLLECTION_NAME_BYTES)


def check_regexes(regexes: "list[str]") -> None:
    """Checks the number and lengths of tensor_names regexes against the collector's limits.

    (Whether a regex is valid RE2 syntax only the collector says.)
    """
    if len(regexes) > MAX_REGEXES:
        raise ValueError(
            f"{len(regexes)} regexes in one request; the limit is {MAX_REGEXES} (join them with |)"
        )
    for r in regexes:
        n = len(r.encode("utf-8", "surrogatepass"))
        if n > MAX_REGEX_BYTES:
            raise ValueError(f"regex {quote(r)} is too long; the limit is {MAX_REGEX_BYTES} bytes")


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
