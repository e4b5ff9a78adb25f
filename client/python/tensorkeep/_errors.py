"""Maps a failed gRPC call to tensorkeep's exceptions, in one place.

The collector carries a machine-readable reason in the trailing metadata key
``tk-reason`` (see the header of proto/tensorkeep.proto). The reason decides the
exception; the gRPC code is only a fallback for calls that failed before
reaching the collector (connection refused, deadline, cancellation).
"""

import re
from typing import Any, Optional

import grpc

from . import _credentials
from . import exceptions as exc
from .modes import ModeKeys

REASON_KEY = "tk-reason"

# Codes worth retrying when no tk-reason came with them: the collector was not
# reached, restarted, or dropped the connection.
_TRANSIENT_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.CANCELLED,
    }
)

# The collector's NO_MORE_DATA message: "... its last TRAIN step is 7".
_LAST_STEP = re.compile(r"\blast (?:[A-Z]+ )?step (?:is )?(\d+)")
# The collector's WRONG_COLLECTOR message: "... belongs to the collector at HOST:PORT ...".
_OWNER = re.compile(r"belongs to the collector at (\S+?),")


def reason_of(err: grpc.RpcError) -> Optional[str]:
    """Returns the ``tk-reason`` of a failed call, or None when it has none."""
    md = None
    try:
        md = err.trailing_metadata()
    except Exception:  # not a grpc.Call (e.g. a fake in tests)
        return None
    for key, value in md or ():
        if key == REASON_KEY:
            return value.decode() if isinstance(value, bytes) else value
    return None


def _code(err: grpc.RpcError) -> Optional[grpc.StatusCode]:
    try:
        return err.code()
    except Exception:
        return None


def _details(err: grpc.RpcError) -> str:
    try:
        return err.details() or ""
    except Exception:
        return str(err)


def is_transient(err: grpc.RpcError) -> bool:
    """True when the call failed for want of a collector, not because of what it asked.

    A collector whose disk is short of space (STORAGE_FULL) refuses new data
    until space is freed: writers wait and resend, as for a collector away.
    """
    reason = reason_of(err)
    if reason == "STORAGE_FULL":
        return True
    return reason is None and _code(err) in _TRANSIENT_CODES


def translate(
    err: grpc.RpcError,
    *,
    trial: Optional[str] = None,
    tname: Optional[str] = None,
    step: Optional[int] = None,
    mode: Any = None,
    worker: Optional[str] = None,
    target: Optional[str] = None,
) -> exc.TensorkeepError:
    """Returns the tensorkeep exception for a failed call.

    The keyword arguments describe what the call asked for; they fill the
    smdebug-style constructor arguments of the exception (for example
    ``TensorUnavailableForStep(tname, step, mode)``). ``target``, the
    collector's address, lets an UNAVAILABLE say when client and collector
    disagree about TLS.
    """
    reason = reason_of(err)
    code = _code(err)
    details = _details(err)
    mode = ModeKeys.GLOBAL if mode is None else mode
    e: exc.TensorkeepError
    if reason == "TRIAL_NOT_FOUND":
        e = exc.TrialNotFound(trial or "?")
    elif reason == "TENSOR_UNAVAILABLE":
        e = exc.TensorUnavailable(tname or "?")
    elif reason == "TENSOR_UNAVAILABLE_FOR_STEP":
        e = exc.TensorUnavailableForStep(tname or "?", step if step is not None else -1, mode)
    elif reason == "STEP_UNAVAILABLE":
        e = exc.StepUnavailable(step if step is not None else -1, mode)
    elif reason == "STEP_NOT_YET_AVAILABLE":
        e = exc.StepNotYetAvailable(step if step is not None else -1, mode)
    elif reason == "INVALID_WORKER":
        e = exc.InvalidWorker(worker or "?")
    elif reason == "NO_MORE_DATA":
        m = _LAST_STEP.search(details)
        e = exc.NoMoreData(step if step is not None else -1, mode, int(m.group(1)) if m else None)
    elif reason == "CONFLICT":
        e = exc.Conflict(details)
    elif reason == "WRONG_COLLECTOR":
        m = _OWNER.search(details)
        e = exc.WrongCollector(details, m.group(1) if m else None)
    elif reason == "BAD_REQUEST":
        e = exc.BadRequest(details)
    elif reason == "TIMEOUT" or (reason is None and code == grpc.StatusCode.DEADLINE_EXCEEDED):
        e = exc.WaitTimeout(details or "deadline exceeded")
    elif reason == "STORAGE_FULL":
        e = exc.CollectorUnavailable(f"collector unavailable: {details} ({code.name})")
    elif reason is None and code in _TRANSIENT_CODES:
        why = (
            _credentials.explain_mismatch(target)
            if target and code == grpc.StatusCode.UNAVAILABLE
            else ""
        )
        prefix = f"{why} (" if why else ""
        suffix = ")" if why else ""
        e = exc.CollectorUnavailable(
            f"{prefix}collector unavailable: {details} ({code.name}){suffix}"
        )
    else:
        e = exc.TensorkeepError(
            f"{details} ({reason or (code.name if code else 'no status')})"
        )
    e.reason = reason
    e.details = details
    e.code = code.name if code is not None else None
    return e
