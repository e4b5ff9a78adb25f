"""A cluster of collectors: finding the one that holds a trial, and listing all of them.

Every trial lives whole on one collector. Its owner is the first of its
rendezvous ranking (_rendezvous); a trial stays on the collector that holds
it, so after a collector joins, an existing trial's holder may be further
down its ranking: ``locate`` walks the ranking, asking each collector
(GetTrial) until one holds the trial. A new trial goes to its owner. The same
rules as the C++ client/cluster.h.
"""

import logging
from concurrent import futures
from typing import Dict, List, Sequence, Tuple

import grpc

from . import _channel, _errors, _rendezvous
from ._channel import pb
from .exceptions import CollectorUnavailable

logger = logging.getLogger("tensorkeep")

# How long one collector may take to say whether it holds a trial.
LOCATE_TIMEOUT = 10.0
# A collector that did not answer at once (its channel in a reconnection
# backoff, e.g. it just restarted) is asked once more, waiting this long for a
# connection: what a collector that is down costs a walk or a listing (as
# client/cluster.cc).
RETRY_TIMEOUT = 2.0


def _call(method, request, timeout: float):
    """``method(request)``; an UNAVAILABLE without a reason is tried once more,
    waiting up to RETRY_TIMEOUT for the connection."""
    try:
        return method(request, timeout=timeout)
    except grpc.RpcError as e:
        if _errors.reason_of(e) is not None or e.code() != grpc.StatusCode.UNAVAILABLE:
            raise
    return method(request, timeout=RETRY_TIMEOUT, wait_for_ready=True)


def _get_trial(target: str, trial: str) -> Tuple[str, str]:
    """("found" | "missing" | "unreachable", details) for one collector."""
    channel = _channel.open_channel(target)
    try:
        stub = _channel.pb_grpc.TensorKeepStub(channel)
        _call(stub.GetTrial, pb.TrialRef(trial=trial), LOCATE_TIMEOUT)
        return "found", ""
    except grpc.RpcError as e:
        reason = _errors.reason_of(e)
        if reason == "TRIAL_NOT_FOUND":
            return "missing", ""
        if _errors.is_transient(e) or e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
            return "unreachable", str(_errors.translate(e, trial=trial, target=target))
        raise _errors.translate(e, trial=trial, target=target) from None
    finally:
        channel.close()


def locate(collectors: Sequence[str], trial: str, write: bool = False) -> str:
    """The ``HOST:PORT`` of the collector that holds ``trial``.

    Found nowhere: its owner; but for a read (``write=False``) a collector that
    cannot be reached may hold it, so that raises CollectorUnavailable naming
    it. A writer passes over unreachable collectors (with a warning): see
    docs/scaling-out.md. With one collector nothing is asked.
    """
    if len(collectors) == 1:
        return collectors[0]
    order = _rendezvous.ranking(collectors, trial)
    unreachable: List[Tuple[str, str]] = []
    for target in order:
        state, details = _get_trial(target, trial)
        if state == "found":
            return target
        if state == "unreachable":
            unreachable.append((target, details))
    if unreachable and not write:
        target, details = unreachable[0]
        raise CollectorUnavailable(
            f"trial {trial!r} is on none of the collectors that answered; the collector at "
            f"{target}, which may hold it, cannot be reached: {details}"
        )
    for target, details in unreachable:
        logger.warning(
            "trial %r goes to its owner %s: the collector at %s could not be asked whether it holds it (%s)",
            trial, order[0], target, details,
        )
    return order[0]


def list_all(collectors: Sequence[str], timeout: float = 10.0) -> Tuple[List[Tuple[str, "pb.TrialSummary"]], Dict[str, str]]:
    """Every collector's trials, asked in parallel: ([(collector, TrialSummary)]
    sorted by trial name, {collector that did not answer: why})."""

    def ask(target: str):
        channel = _channel.open_channel(target)
        try:
            return _call(_channel.pb_grpc.TensorKeepStub(channel).ListTrials, pb.ListTrialsRequest(), timeout)
        finally:
            channel.close()

    trials: List[Tuple[str, "pb.TrialSummary"]] = []
    failures: Dict[str, str] = {}
    with futures.ThreadPoolExecutor(max_workers=min(16, len(collectors))) as pool:
        answers = {target: pool.submit(ask, target) for target in collectors}
        for target, answer in answers.items():
            try:
                trials.extend((target, t) for t in answer.result().trials)
            except grpc.RpcError as e:
                failures[target] = str(_errors.translate(e, target=target))
    trials.sort(key=lambda item: item[1].name)
    return trials, failures
